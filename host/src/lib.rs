//! The dvm host SDK: symbolic shapes, graphs, the runtime operator compiler,
//! the CPU device runtime and the `dvm` CLI's building blocks.
//!
//! # Crate map
//! - [`sym`]: symbolic dimensions (canonical forms, ranges, unification).
//! - [`graph`]: the graph IR, builder API, shape propagation, JSON format,
//!   composite decomposition.
//! - [`tensor`], [`npy`]: host tensors and `.npy` files.
//! - [`reference`](mod@reference): the f64 reference evaluator (the oracle in tests).
//! - [`eager`]: lazily recorded tensors fused and run at flush points.
//! - [`fuse`]: the operator fuser (fusion groups, stacking, `dvm explain`).
//! - [`lower`]: a graph at concrete shapes → buffers, views and kernel groups.
//! - [`compile`]: the runtime operator compiler (group → bytecode).
//! - [`kernel`]: group → verified, predecoded kernel.
//! - [`warm`]: warming the compile path before the first real compile.
//! - [`runtime`]: CPU worker pool, kernel cache, sessions, the QEMU device.
//! - [`models`]: model graphs (the demo's encoder block).
//! - [`demo`]: `dvm demo`.

pub mod compile;
pub mod demo;
pub mod eager;
pub mod fuse;
pub mod graph;
mod idhash;
pub mod input;
pub mod kernel;
pub mod lower;
pub mod models;
pub mod npy;
pub mod reference;
pub mod runtime;
pub mod staged;
pub mod sym;
pub mod tensor;
pub mod warm;
