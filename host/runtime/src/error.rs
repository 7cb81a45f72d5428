//! Why a run failed.

use dvm_compile::kernel::BuildError;
use dvm_compile::lower::LowerError;
use dvm_graph::GraphError;

#[cfg(doc)]
use crate::Runtime;

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad graph or inputs.
    #[error(transparent)]
    Graph(Box<GraphError>),
    /// Lowering failed.
    #[error(transparent)]
    Lower(Box<LowerError>),
    /// A kernel did not compile.
    #[error("kernel `{step}`: {error}")]
    Build {
        /// Step name.
        step: String,
        /// The failure.
        error: Box<BuildError>,
    },
    /// The QEMU device failed.
    #[error(transparent)]
    Qemu(Box<crate::QemuError>),
    /// A launch failed.
    #[error("kernel `{step}`: {error}")]
    Launch {
        /// Step name.
        step: String,
        /// The failure.
        error: dvm_device::exec::ExecError,
    },
    /// The simulator refused a launch (its spec, or a kernel larger than
    /// the spec's UB).
    #[error("kernel `{step}` on the simulator: {error}")]
    Sim {
        /// Step name.
        step: String,
        /// The failure.
        error: String,
    },
    /// A buffer of the plan could not be allocated (the shapes at these
    /// bindings need more memory than the system gives).
    #[error("cannot allocate {bytes} bytes for {what}")]
    Alloc {
        /// The buffer: ``output `NAME` `` or `a temporary buffer`.
        what: String,
        /// Its size.
        bytes: u64,
    },
    /// The output tensors given to [`Runtime::run_into`] do not match the
    /// graph's outputs.
    #[error("output `{name}`: {what}")]
    Output {
        /// The output's name.
        name: String,
        /// What is wrong.
        what: String,
    },
}

impl From<GraphError> for RunError {
    fn from(e: GraphError) -> RunError {
        RunError::Graph(Box::new(e))
    }
}

impl From<LowerError> for RunError {
    fn from(e: LowerError) -> RunError {
        match e {
            LowerError::Build { step, error } => RunError::Build { step, error },
            e => RunError::Lower(Box::new(e)),
        }
    }
}
