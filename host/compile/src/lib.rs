//! The runtime operator compiler: a fusion plan at concrete shapes becomes
//! verified, predecoded kernels.
//!
//! - [`lower`]: a graph and its fusion plan at bound shapes → buffers, views
//!   and kernel groups ([`lower::Plan`]).
//! - [`codegen`]: a kernel group → bytecode (views, tiling, UB allocation,
//!   element-wise, reduce and matmul bodies).
//! - [`kernel`]: a group → a module, verified and predecoded
//!   ([`kernel::ReadyKernel`]).
//! - [`stack`]: several launches stacked into one parallel or sequence
//!   kernel.
//! - [`samples`]: hand-written groups of a transformer layer's operators.
//! - [`cache`]: ready kernels by group and shapes.
//! - [`warm`]: warming the compile path before the first real compile.

pub mod cache;
pub mod codegen;
pub mod kernel;
pub mod lower;
pub mod samples;
pub mod stack;
pub mod warm;
