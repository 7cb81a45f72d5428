//! The line protocol: one JSON object a line on stdin, one answer a line on
//! stdout. Every request has a `cmd`; every answer has `ok` and, when
//! `ok` is false, an `error` naming what failed. Times are in seconds.

use serde::Deserialize;

use crate::workload::WorkloadSpec;

/// A request of the orchestrator (`bench/orchestrate.py` sends the same
/// commands to every system).
#[derive(Debug, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Answers the system's name and version.
    Hello,
    /// Sets the intra-op threads (dvm: the worker pool's cores).
    Threads {
        /// Threads, at least 1.
        n: usize,
    },
    /// Builds the workload's model (untimed) and drops any inputs.
    Load {
        /// The workload.
        workload: WorkloadSpec,
    },
    /// Generates and keeps the inputs at length `s` for seed `seed`.
    Inputs {
        /// The sequence length.
        s: u64,
        /// The call seed.
        seed: u64,
    },
    /// `calls` calls on the kept inputs; answers each call's time.
    Run {
        /// How many calls.
        calls: usize,
    },
    /// The first call on the kept inputs from a fresh model state (dvm:
    /// the ONNX import for a workload defined by a file, `Prepared::new`
    /// and an empty kernel cache).
    First,
    /// From a fresh model state, one call per length (inputs for call `i`
    /// seeded `seed + i`), then the same calls again: cold and warm times.
    Sequence {
        /// The lengths, in call order.
        lens: Vec<u64>,
        /// The first call's seed.
        seed: u64,
    },
    /// One call on the kept inputs, its first output written as `.npy`.
    Dump {
        /// Where to write.
        path: String,
    },
    /// `n × n` by `n × n` matrix products, weights passed per call: the
    /// best rate in GFLOP/s over `calls` calls.
    Gemm {
        /// The matrices' size.
        n: u64,
        /// How many calls.
        calls: usize,
    },
    /// Ends the process.
    Quit,
}
