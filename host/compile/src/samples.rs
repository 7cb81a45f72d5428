//! Hand-written kernel groups of a transformer layer's operators at hidden
//! [`HIDDEN`]: the demo's single-operator table, tests and benchmarks
//! compile them without a graph.

use dvm_isa::{DType, Opcode};

use crate::codegen::{Group, GroupKind, TileOp, View};

/// Hidden size of the demo's layer.
pub const HIDDEN: u64 = 768;

fn f32v(shape: &[u64]) -> View {
    View::contiguous(DType::F32, shape)
}

/// The groups of the demo layer at length `s`, with their names.
pub fn groups(s: u64) -> Vec<(&'static str, Group)> {
    let h = HIDDEN;
    let x = f32v(&[s, h]);
    let row = |v: View| v.broadcast_to(&[s, h]).unwrap_or_else(|| f32v(&[s, h]));
    let bias_add = Group {
        kind: GroupKind::Elementwise { shape: vec![s, h] },
        inputs: vec![x.clone(), row(f32v(&[h]))],
        nodes: vec![
            (TileOp::Input(0), DType::F32),
            (TileOp::Input(1), DType::F32),
            (TileOp::Binary(Opcode::Add, 0, 1), DType::F32),
        ],
        outputs: vec![(2, x.clone())],
    };
    let softmax = Group {
        kind: GroupKind::Reduce {
            shape: vec![s, h],
            axis: 1,
        },
        inputs: vec![x.clone()],
        nodes: vec![
            (TileOp::Input(0), DType::F32),
            (TileOp::Reduce(Opcode::ReduceMax, 0), DType::F32),
            (TileOp::Binary(Opcode::Sub, 0, 1), DType::F32),
            (TileOp::Unary(Opcode::Exp, 2), DType::F32),
            (TileOp::Reduce(Opcode::ReduceSum, 3), DType::F32),
            (TileOp::Binary(Opcode::Div, 3, 4), DType::F32),
        ],
        outputs: vec![(5, x.clone())],
    };
    let inv = 1.0 / h as f64;
    let layernorm = Group {
        kind: GroupKind::Reduce {
            shape: vec![s, h],
            axis: 1,
        },
        inputs: vec![x.clone(), row(f32v(&[h])), row(f32v(&[h]))],
        nodes: vec![
            (TileOp::Input(0), DType::F32),                      // 0 x
            (TileOp::Reduce(Opcode::ReduceSum, 0), DType::F32),  // 1 Σx
            (TileOp::Scalar(Opcode::MulS, 1, inv), DType::F32),  // 2 mean
            (TileOp::Binary(Opcode::Sub, 0, 2), DType::F32),     // 3 xc
            (TileOp::Binary(Opcode::Mul, 3, 3), DType::F32),     // 4 xc²
            (TileOp::Reduce(Opcode::ReduceSum, 4), DType::F32),  // 5 Σxc²
            (TileOp::Scalar(Opcode::MulS, 5, inv), DType::F32),  // 6 var
            (TileOp::Scalar(Opcode::AddS, 6, 1e-5), DType::F32), // 7 var+ε
            (TileOp::Unary(Opcode::Rsqrt, 7), DType::F32),       // 8 rstd
            (TileOp::Binary(Opcode::Mul, 3, 8), DType::F32),     // 9 xhat
            (TileOp::Input(1), DType::F32),                      // 10 γ
            (TileOp::Binary(Opcode::Mul, 9, 10), DType::F32),    // 11
            (TileOp::Input(2), DType::F32),                      // 12 β
            (TileOp::Binary(Opcode::Add, 11, 12), DType::F32),   // 13
        ],
        outputs: vec![(13, x.clone())],
    };
    let mlp = Group {
        kind: GroupKind::Matmul {
            batch: vec![],
            m: s,
            n: h,
            k: h,
            acc: DType::F32,
        },
        inputs: vec![x.clone(), f32v(&[h, h]), row(f32v(&[h]))],
        nodes: vec![
            (TileOp::Matmul, DType::F32),
            (TileOp::Input(2), DType::F32),
            (TileOp::Binary(Opcode::Add, 0, 1), DType::F32),
            (TileOp::Unary(Opcode::GeluTanh, 2), DType::F32),
        ],
        outputs: vec![(3, x)],
    };
    vec![
        ("bias_add", bias_add),
        ("softmax", softmax),
        ("layernorm", layernorm),
        ("matmul+bias+gelu", mlp),
    ]
}
