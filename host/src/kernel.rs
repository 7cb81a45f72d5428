//! A compiled, verified, predecoded kernel ready to launch, and the one-call
//! path from a [`Group`] to it.

use std::sync::Arc;

use dvm_device::predecode::{PredecodeError, Program};
use dvm_isa::builder::ModuleBuilder;
use dvm_isa::{verify_kernel, DeviceLimits, Module, ParseError, VerifyError};

use crate::compile::{compile, CompileError, Compiled, Group, Target};

/// Why a group did not become a runnable kernel.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The compiler refused the group.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// The module did not parse (a compiler bug, reported).
    #[error("compiled module does not parse: {0}")]
    Parse(#[from] ParseError),
    /// The kernel did not verify (a compiler bug, reported).
    #[error("compiled kernel does not verify: {0}")]
    Verify(#[from] VerifyError),
    /// The kernel does not fit the executor's program capacity.
    #[error("kernel does not fit the executor: {0:?}")]
    Predecode(PredecodeError),
}

/// A kernel ready to launch: the module bytes (for `dvm compile`), the
/// predecoded program, and what the compiler reported.
pub struct ReadyKernel {
    /// The module holding the kernel.
    pub module: Vec<u8>,
    /// The predecoded program.
    pub program: Box<Program>,
    /// Tiling and traffic.
    pub info: Compiled,
}

/// Compiles, encodes, verifies and predecodes `group`.
///
/// # Errors
/// [`BuildError`] at the first stage that fails.
pub fn build(group: &Group, name: &str, target: &Target) -> Result<Arc<ReadyKernel>, BuildError> {
    ready(compile(group, name, target)?, target)
}

/// Encodes, verifies and predecodes an already compiled kernel (one group,
/// or a stack of groups built by [`crate::fuse::stack`]).
///
/// # Errors
/// [`BuildError`] at the first stage that fails.
pub fn ready(info: Compiled, target: &Target) -> Result<Arc<ReadyKernel>, BuildError> {
    let mut builder = ModuleBuilder::new();
    builder.add_kernel(info.kernel.clone());
    let module = builder.finish();
    let parsed = Module::parse(&module)?;
    let limits = DeviceLimits {
        ub_bytes: target.ub_bytes,
    };
    let verified = verify_kernel(&parsed, 0, &limits)?;
    let mut slot = Box::<Program>::new_uninit();
    Program::init(&mut slot)
        .predecode(&verified)
        .map_err(BuildError::Predecode)?;
    // SAFETY: `Program::init` initialised the slot.
    let program = unsafe { slot.assume_init() };
    Ok(Arc::new(ReadyKernel {
        module,
        program,
        info,
    }))
}
