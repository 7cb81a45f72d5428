//! The dvm linker: links compiled modules into one image, wraps images in
//! ELF relocatable objects (and reads them back), and generates the
//! firmware's memory layout.
//!
//! # Crate map
//! - [`link`](mod@link): [`Linker`] and [`link()`]: several modules → one
//!   image (kernel tables, bodies, parameters, code and metadata merged;
//!   identical kernels kept once; name clashes rejected).
//! - [`elf`]: [`write_object`] / [`read_object`]: the image in an ELF64
//!   section `.dvm.image` with `dvm_image`, `dvm_image_end` and one
//!   `dvm_kernel_<name>` symbol per kernel (written with `object`).
//! - [`layout`]: [`DeviceDesc`], [`memory_x`] and [`link_x`]: the
//!   firmware's `memory.x` / `link.x` with `ASSERT`s that say what does
//!   not fit.
//! - [`objdump`]: [`describe`](objdump::describe), the text `dvm objdump`
//!   prints.
//! - [`error`]: [`LinkError`], [`ObjectError`], [`LayoutError`].
//!
//! # Example
//! ```
//! use dvm_linker::{link, read_object, write_object, Arch};
//! use dvm_isa::Module;
//!
//! let a = dvm_isa::asm::assemble(".kernel \"k\" kind=vector ub=64\n  .body grid=1,1,1\n    end\n.end\n").unwrap();
//! let image = link(&[Module::parse(&a).unwrap()]).unwrap();
//! let elf = write_object(&image, Arch::Aarch64).unwrap();
//! let obj = read_object(&elf).unwrap();
//! assert_eq!(obj.kernels[0].symbol, "dvm_kernel_k");
//! assert_eq!(obj.image, &image[..]);
//! ```
#![forbid(unsafe_code)]

pub mod elf;
pub mod error;
pub mod layout;
pub mod link;
pub mod objdump;

pub use elf::{kernel_symbols, read_object, write_object, Arch, KernelSymbol, LinkedObject};
pub use error::{LayoutError, LinkError, ObjectError};
pub use layout::{link_x, memory_x, parse_size, DeviceDesc, MAX_CORES};
pub use link::{link, Linker};
