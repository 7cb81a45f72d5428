//! Host tensors and the files they travel in.
//!
//! Programs take the user API from the `dvm` crate (`use dvm::prelude::*`),
//! which re-exports what they need from here; this crate's other items are
//! the internals the CLI, the tests and the benchmarks use.
//!
//! - [`Tensor`]: a dtype, a shape and little-endian bytes, with conversions
//!   between dtypes (`convert`) and element counts (`numel`).
//! - [`BufferPool`]: recycled tensor memory for a runtime's outputs and
//!   temporaries.
//! - [`npy`]: reading and writing NumPy `.npy` files, with every header field
//!   checked.
//! - [`input`]: bounded reads of user files (graphs, firmware, `.npy`).
//! - [`staged`]: several output files that appear together or not at all.
#![forbid(unsafe_code)]

pub mod input;
pub mod npy;
mod recycle;
pub mod staged;
mod tensor;

pub use recycle::{BufferPool, POISON};
pub use tensor::*;
