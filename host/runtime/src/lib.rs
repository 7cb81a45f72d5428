//! The dvm runtime: devices that run graphs, the compiler they run kernels
//! from, the CPU worker pool, and the eager API.
//!
//! Programs take the user API from the `dvm` crate (`use dvm::prelude::*`),
//! which re-exports what they need from here; this crate's other items are
//! the internals the CLI, the tests and the benchmarks use.
//!
//! - [`device`]: the [`Device`] trait, its implementations ([`Runtime`], the
//!   CPU device; [`QemuDevice`]; [`ReferenceDevice`];
//!   [`device::sim::SimDevice`], the instruction-level simulator) and the
//!   registry that `--device NAME` resolves through.
//! - [`Prepared`]: a graph decomposed and fused once, on its symbolic
//!   shapes.
//! - [`Compiler`]: a prepared graph at bound shapes → plan and ready
//!   kernels, with a kernel cache.
//! - [`pool`]: the CPU device's worker threads.
//! - [`eager`]: lazily recorded tensors fused and run at flush points.
//! - [`explain`]: `dvm explain`'s report of fusion decisions and kernels.
//! - [`demo`]: `dvm demo`.

mod compiler;
pub mod demo;
pub mod device;
pub mod eager;
mod error;
pub mod explain;
#[cfg(test)]
mod fusion_tests;
mod outputs;
pub mod pool;
mod prepared;

pub use compiler::Compiler;
pub use device::qemu::{QemuDevice, QemuError, QemuRun};
pub use device::{Device, DeviceConfig, DeviceError, ReferenceDevice, Runtime};
pub use dvm_compile::cache::{CacheStats, KernelCache};
pub use eager::{Eager, EagerError, LazyTensor};
pub use error::RunError;
pub use outputs::Outputs;
pub use pool::CpuPool;
pub use prepared::Prepared;

/// Kernels a device's cache keeps unless told otherwise ([`Runtime::default`],
/// [`Runtime::with_cores`], [`device::DeviceConfig::default`]): enough for the
/// kernels of a few graphs at several shapes each.
pub const DEFAULT_CACHE_CAPACITY: usize = 256;
