//! The runtime operator compiler: one group at concrete shapes → one kernel
//! of bytecode, in microseconds.
//!
//! - [`view`]: strided views and dimension coalescing.
//! - [`group`]: the group IR (what a kernel computes).
//! - [`space`]: mapping an N-D iteration space onto UB boxes, a tile grid
//!   and (for spaces of more than five dimensions) several bodies.
//! - [`ewise`]: code generation for element-wise and reduce groups.
//! - [`matmul`]: code generation for matmul groups (cube + epilogue).
//! - [`ub_alloc`]: UB buffer allocation inside a tile body.

pub mod ewise;
pub mod group;
pub mod matmul;
pub mod space;
pub mod ub_alloc;
pub mod view;

use dvm_isa::builder::KernelDef;
use dvm_isa::{DType, Instr, Opcode, Scalar};

pub use group::{Group, GroupKind, Node, NodeId};
pub use view::View;

/// What the compiler targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// UB bytes per core.
    pub ub_bytes: u32,
    /// Cores (blocks) a launch spreads over.
    pub cores: u32,
}

impl Default for Target {
    fn default() -> Self {
        Target {
            ub_bytes: dvm_isa::DeviceLimits::DEFAULT.ub_bytes,
            cores: 1,
        }
    }
}

/// Why a group could not be compiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// The tiles the group needs do not fit in UB.
    #[error("{0} does not fit in the {1}-byte UB")]
    DoesNotFit(String, u32),
    /// The group is malformed (a bug in the caller, reported, not panicked on).
    #[error("malformed group: {0}")]
    Malformed(String),
    /// A shape or offset exceeds what the instruction set encodes.
    #[error("{0} exceeds the instruction set's limits")]
    TooLarge(String),
}

/// A compiled kernel plus what `dvm explain` reports about it.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The kernel (parameters: the group's inputs, then its outputs).
    pub kernel: KernelDef,
    /// Tile box rows × cols.
    pub tile: (u64, u64),
    /// Tiles over all bodies.
    pub tiles: u64,
    /// Bytes the kernel reads from and writes to global memory per launch.
    pub bytes_moved: u64,
}

/// Compiles `group` for `target`.
///
/// # Errors
/// [`CompileError`] when the group is malformed or its tiles cannot fit.
pub fn compile(group: &Group, name: &str, target: &Target) -> Result<Compiled, CompileError> {
    match group.kind {
        GroupKind::Elementwise { .. } | GroupKind::Reduce { .. } => {
            ewise::compile(group, name, target)
        }
        GroupKind::Matmul { .. } => matmul::compile(group, name, target),
    }
}

/// The scalar immediate for `v` in dtype `dt`'s compute type.
pub fn scalar(dt: DType, v: f64) -> Scalar {
    if dt.is_float() {
        Scalar::f32(v as f32)
    } else if v.is_nan() {
        Scalar::i32(0)
    } else {
        Scalar::i32(v.clamp(i32::MIN as f64, i32::MAX as f64) as i32)
    }
}

/// Builds an instruction from an opcode and raw field values.
///
/// # Errors
/// [`CompileError::Malformed`] when the fields do not fit the opcode.
pub fn instr(op: Opcode, raw: &[u64]) -> Result<Instr, CompileError> {
    Instr::from_raw(op, raw)
        .ok_or_else(|| CompileError::Malformed(format!("bad operands for `{}`", op.mnemonic())))
}

#[cfg(test)]
mod tests;
