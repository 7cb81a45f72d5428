//! Runtime: the CPU device's worker pool, the kernel cache and sessions
//! that run graphs.

pub mod cache;
pub mod pool;
pub mod session;

pub use cache::{CacheStats, KernelCache};
pub use pool::CpuPool;
pub use session::{Prepared, RunError, Runtime};
