//! dvm host SDK (filled in by the host SDK issue).
pub mod compile;

pub mod sym;
pub mod runtime;

pub mod graph;
pub mod npy;
pub mod reference;
pub mod tensor;
pub mod demo;
pub mod kernel;
