//! Host tensors and the files they travel in.
//!
//! - [`Tensor`]: a dtype, a shape and little-endian bytes, with conversions
//!   between dtypes (`convert`) and element counts (`numel`).
//! - [`npy`]: reading and writing NumPy `.npy` files, with every header field
//!   checked.
//! - [`input`]: bounded reads of user files (graphs, firmware, `.npy`).
//! - [`staged`]: several output files that appear together or not at all.
#![forbid(unsafe_code)]

pub mod input;
pub mod npy;
pub mod staged;
mod tensor;

pub use tensor::*;
