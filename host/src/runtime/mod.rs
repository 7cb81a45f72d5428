//! Runtime: the CPU device's worker pool, the kernel cache, sessions that
//! run graphs, and the QEMU device that runs them on the aarch64 firmware.

pub mod cache;
pub mod pool;
pub mod qemu;
pub mod session;

pub use cache::{CacheStats, KernelCache};
pub use pool::CpuPool;
pub use qemu::{QemuDevice, QemuError, QemuRun};
pub use session::{Prepared, RunError, Runtime};
