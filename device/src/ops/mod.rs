//! UB-only instruction handlers: element-wise vector ops, 2-D tile ops
//! (reduce, broadcast, transpose) and the cube (matmul).
//!
//! [`resolve`] turns one decoded instruction into a [`UbOp`]: the handler
//! monomorphised for its opcode and dtype plus its operands, so that the
//! per-tile loop is one indirect call per instruction.

use dvm_isa::Instr;

/// Operands of a UB-only instruction, in byte offsets and element counts.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UbArgs {
    /// Destination byte offset.
    pub dst: u32,
    /// First source byte offset.
    pub a: u32,
    /// Second source byte offset.
    pub b: u32,
    /// Third source byte offset (select: the `b` value operand).
    pub c: u32,
    /// Element count, or rows (2-D), or m (matmul).
    pub n: u32,
    /// Columns (2-D), or n (matmul).
    pub cols: u32,
    /// k (matmul).
    pub k: u32,
    /// Scalar immediate bits.
    pub imm: u32,
    /// Opcode-specific flags (axis, matmul flags).
    pub flags: u32,
}

/// A UB handler: runs one instruction over `ub`.
///
/// Handlers may assume the instruction passed the verifier (ranges inside
/// `ub`, aligned, identical-or-disjoint); they still never panic or touch
/// memory outside `ub` if that were not so — they do nothing instead.
pub type Handler = fn(ub: &mut [u8], args: &UbArgs);

/// A UB-only instruction resolved to its handler.
#[derive(Clone, Copy)]
pub struct UbOp {
    /// The handler.
    pub handler: Handler,
    /// Its operands.
    pub args: UbArgs,
}

impl core::fmt::Debug for UbOp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("UbOp").field("args", &self.args).finish_non_exhaustive()
    }
}

impl UbOp {
    /// Runs the instruction.
    #[inline]
    pub fn run(&self, ub: &mut [u8]) {
        (self.handler)(ub, &self.args)
    }
}

/// Resolves a UB-only instruction (vector or cube pipe) to its handler;
/// `None` for loads, stores and control instructions.
pub fn resolve(instr: &Instr) -> Option<UbOp> {
    let _ = instr;
    None
}
