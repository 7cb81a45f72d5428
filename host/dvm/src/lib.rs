//! dvm: dynamic-shape tensor graphs through a runtime operator compiler and
//! a bytecode virtual machine.
#![forbid(unsafe_code)]

pub use dvm_compile as compile;
pub use dvm_fuse as fuse;
pub use dvm_graph as graph;
pub use dvm_isa as isa;
pub use dvm_runtime as runtime;
pub use dvm_sym as sym;
pub use dvm_tensor as tensor;
