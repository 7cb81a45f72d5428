//! Warming the compile path: a process's first compile is several times
//! slower than the next ones (the compiler's code pages are faulted in, the
//! per-thread scratch is allocated and grown, caches and branch predictors
//! are cold). [`warm_up`] pays that once, up front: it faults in the
//! calling thread's compile scratch, then compiles a small set of kernels
//! that exercise the element-wise, reduce and matmul paths (tiling,
//! encoding, verifying and predecoding the common instructions) and throws
//! them away. Call it on any other thread that will compile.
//! `dvm_runtime::Runtime::new` calls it, so a user's first compile after
//! creating a runtime is warm.

use dvm_isa::{DType, Opcode};

use crate::codegen::{Group, GroupKind, Target, TileOp, View};
use crate::kernel::build;

/// Rows and columns of the warm-up groups: several tiles, so the tiling
/// splits them across cores as it does real instances.
const ROWS: u64 = 96;
const COLS: u64 = 320;

/// Compiles the warm-up kernels for `target` on this thread, discarding
/// them (nothing is cached). Failures are ignored: warming is an
/// optimisation, and a target the warm-up groups do not fit still works.
pub fn warm_up(target: &Target) {
    crate::kernel::touch_scratch();
    for g in groups() {
        let _ = std::hint::black_box(build(&g, "warm_up", target));
    }
}

/// An element-wise group with a broadcast operand, a reduce group (a
/// normalisation: both reductions, scalar, unary and binary ops) and a
/// matmul with a bias and activation epilogue.
fn groups() -> [Group; 3] {
    let f32v = |shape: &[u64]| View::contiguous(DType::F32, shape);
    let x = f32v(&[ROWS, COLS]);
    let row = || {
        f32v(&[COLS])
            .broadcast_to(&[ROWS, COLS])
            .unwrap_or_else(|| f32v(&[ROWS, COLS]))
    };
    let ewise = Group {
        kind: GroupKind::Elementwise {
            shape: vec![ROWS, COLS],
        },
        inputs: vec![x.clone(), row()],
        nodes: vec![
            (TileOp::Input(0), DType::F32),
            (TileOp::Input(1), DType::F32),
            (TileOp::Binary(Opcode::Mul, 0, 1), DType::F32),
            (TileOp::Unary(Opcode::Sigmoid, 2), DType::F32),
        ],
        outputs: vec![(3, x.clone())],
    };
    let reduce = Group {
        kind: GroupKind::Reduce {
            shape: vec![ROWS, COLS],
            axis: 1,
        },
        inputs: vec![x.clone(), row()],
        nodes: vec![
            (TileOp::Input(0), DType::F32),
            (TileOp::Reduce(Opcode::ReduceMax, 0), DType::F32),
            (TileOp::Binary(Opcode::Sub, 0, 1), DType::F32),
            (TileOp::Unary(Opcode::Exp, 2), DType::F32),
            (TileOp::Reduce(Opcode::ReduceSum, 3), DType::F32),
            (TileOp::Scalar(Opcode::AddS, 4, 1e-6), DType::F32),
            (TileOp::Unary(Opcode::Rsqrt, 5), DType::F32),
            (TileOp::Binary(Opcode::Mul, 3, 6), DType::F32),
            (TileOp::Input(1), DType::F32),
            (TileOp::Binary(Opcode::Add, 7, 8), DType::F32),
        ],
        outputs: vec![(9, x.clone())],
    };
    let matmul = Group {
        kind: GroupKind::Matmul {
            batch: vec![],
            m: ROWS,
            n: COLS,
            k: COLS,
            acc: DType::F32,
        },
        inputs: vec![x.clone(), f32v(&[COLS, COLS]), row()],
        nodes: vec![
            (TileOp::Matmul, DType::F32),
            (TileOp::Input(2), DType::F32),
            (TileOp::Binary(Opcode::Add, 0, 1), DType::F32),
            (TileOp::Unary(Opcode::Relu, 2), DType::F32),
        ],
        outputs: vec![(3, x)],
    };
    [ewise, reduce, matmul]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every warm-up group compiles (a warm-up that fails warms nothing).
    #[test]
    fn warm_up_groups_build() {
        let target = Target {
            cores: 2,
            ..Target::default()
        };
        for g in groups() {
            build(&g, "warm_up", &target).expect("builds");
        }
    }
}
