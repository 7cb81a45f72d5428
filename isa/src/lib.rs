//! The dvm instruction set: one table of tile-level instructions, the module
//! container that carries them, the verifier that guards the executor, and a
//! text assembly format.
//!
//! Everything here is `no_std`; building modules, reading metadata and the
//! assembler need the `alloc` feature (on by default).
//!
//! # Crate map
//! - [`dtype`]: element types.
//! - [`word`]: 64-bit words, head words, pipes, wait flags, operand packing.
//! - [`operand`]: operand field types.
//! - [`instr`]: the instruction table; [`Opcode`] and [`Instr`] are generated from it.
//! - [`access`]: the UB ranges and GM patterns instructions touch.
//! - [`module`]: the container (header, sections, tables) parsed in place.
//! - [`verify`]: static and launch checks; the only maker of [`VerifiedKernel`].
//! - [`tiles`]: whether a verified kernel's tiles may run on several cores
//!   at once ([`VerifiedKernel::tiles_independent`]).
//! - [`job`]: the job a host hands the firmware and the report it gets back.
//! - `builder`, `meta` (feature `alloc`): writing modules, their metadata.
//! - `doc` (feature `alloc`): the instruction reference `docs/isa.md`,
//!   rendered from the table.
//! - `asm` (feature `alloc`): the text assembly format, `assemble` and
//!   `disassemble`, which round-trip modules byte for byte.
#![no_std]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod access;
#[cfg(feature = "alloc")]
pub mod asm;
#[cfg(feature = "alloc")]
pub mod builder;
#[cfg(feature = "alloc")]
pub mod doc;
pub mod dtype;
pub mod error;
pub mod instr;
pub mod job;
#[cfg(feature = "alloc")]
pub mod meta;
pub mod module;
pub mod operand;
mod table;
pub mod tiles;
pub mod verify;
pub mod word;

pub use access::{AccessKind, GmAccess, GmKind, GmPattern, UbAccess};
pub use dtype::{DType, DTypeSet};
pub use error::{DecodeError, OperandError, ParseError, SectionSite, ShortName};
pub use instr::{FieldInfo, Instr, Opcode};
pub use module::{KernelKind, KernelRef, Module, Param, ParamAccess};
pub use operand::{Axis, GridDim, MmFlags, Operand, PadMode, Scalar};
pub use table::layout_words;
pub use tiles::TileConflict;
pub use verify::{
    verify_kernel, verify_kernel_visit, verify_module, DeviceLimits, LaunchError, Rule, Site,
    VerifiedKernel, VerifyError,
};
pub use word::{Head, Packer, Pipe, Unpacker, WaitMask, MAX_INSTR_WORDS};
