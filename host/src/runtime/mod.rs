//! Runtime: devices, kernel cache, sessions.

pub mod pool;
