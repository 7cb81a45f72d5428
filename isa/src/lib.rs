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
#![no_std]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod access;
pub mod dtype;
pub mod error;
pub mod instr;
pub mod operand;
mod table;
pub mod word;

pub use access::{AccessKind, GmAccess, GmKind, GmPattern, UbAccess};
pub use dtype::{DType, DTypeSet};
pub use error::{DecodeError, OperandError};
pub use instr::{Instr, Opcode};
pub use operand::{Axis, GridDim, MmFlags, Operand, PadMode, Scalar};
pub use table::layout_words;
pub use word::{Head, Packer, Pipe, Unpacker, WaitMask, MAX_INSTR_WORDS};
