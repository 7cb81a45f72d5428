//! The fusion decision's benchmark windows: 30 recorded operations with
//! concrete shapes, shared by `benches/fusion.rs` and
//! `examples/decision_allocs.rs` (each includes this file as a module).

use dvm_graph::{Graph, ReduceOp};
use dvm_isa::{DType, Opcode};
use dvm_sym::Dim;

fn c(v: i64) -> Dim {
    Dim::from(v)
}

/// A window of 30 recorded primitive operations (matmul, element-wise,
/// reductions) with concrete shapes.
pub fn window30_primitive() -> Graph {
    let mut g = Graph::new();
    let x = g.input("i0", DType::F32, &[c(64), c(256)]).expect("x");
    let w = g.input("i1", DType::F32, &[c(256), c(256)]).expect("w");
    let b = g.input("i2", DType::F32, &[c(256)]).expect("b");
    let mut cur = x;
    for i in 0..30 {
        cur = match i % 10 {
            0 => g.matmul(cur, w, false, false),
            1 => g.binary(Opcode::Add, cur, b),
            2 => g.unary(Opcode::GeluTanh, cur),
            3 => g.binary(Opcode::Add, cur, x),
            4 => g.reduce(cur, ReduceOp::Max, &[-1], true),
            5 => g.binary(Opcode::Sub, x, cur),
            6 => g.unary(Opcode::Exp, cur),
            7 => g.binary(Opcode::Mul, cur, x),
            8 => g.unary(Opcode::Tanh, cur),
            _ => g.scalar(Opcode::MulS, cur, 0.5),
        }
        .expect("op");
    }
    g.output("o0", cur).expect("out");
    g
}

/// A window of 30 recorded operations as the eager API builds it (concrete
/// shapes, composites included).
pub fn window30() -> Graph {
    window30_shift(0)
}

/// [`window30`] with its 10-op cycle started at op `shift` (as the eager
/// bench's rotated windows): shifts 0 to 9 are ten structures of the same
/// operations ([`dvm_graph::models::mixed_window`]).
pub fn window30_shift(shift: usize) -> Graph {
    dvm_graph::models::mixed_window(shift).expect("builds")
}
