//! The dvm runtime: devices that run graphs, the CPU worker pool, sessions,
//! and the eager API.
//!
//! - [`device`]: the [`Device`] trait, its implementations (reference, cpu,
//!   qemu) and the registry that `--device NAME` resolves through.
//! - [`session`]: [`Runtime`] (plans, kernel cache, CPU pool) and
//!   [`Prepared`] graphs.
//! - [`pool`]: the CPU device's worker threads.
//! - [`qemu`]: the aarch64 firmware under QEMU as a device.
//! - [`eager`]: lazily recorded tensors fused and run at flush points.
//! - [`explain`]: `dvm explain`'s report of fusion decisions and kernels.
//! - [`demo`]: `dvm demo`.

pub mod demo;
pub mod eager;
pub mod explain;
pub mod pool;
pub mod qemu;
pub mod session;

#[cfg(test)]
mod fusion_tests;

pub use dvm_compile::cache::{CacheStats, KernelCache};
pub use pool::CpuPool;
pub use qemu::{QemuDevice, QemuError, QemuRun};
pub use session::{Prepared, RunError, Runtime};
