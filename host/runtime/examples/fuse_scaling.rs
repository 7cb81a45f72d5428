//! How the fusion pass scales with the graph: a chain of `N / 8` blocks
//! (two matmuls reading one value, an element-wise epilogue, a row max and
//! its use, so that every block offers parallel stacks, vertical merges
//! and siblings), fused once with the default options.
//!
//! `cargo run --release -p dvm-runtime --example fuse_scaling -- [N]` prints
//! the nodes, the groups and the pass's time. A change to the pass should
//! keep it near-linear here as well as cheap on the eager window: the
//! parts that can turn quadratic are the siblings rule (every pair of a
//! widely read weight's readers), each stack's reach search, and keeping
//! the plan's rejections distinct.

use dvm_fuse::{FuseOptions, FusionPlan};
use dvm_graph::{Graph, ReduceOp};
use dvm_isa::{DType, Opcode};
use dvm_sym::Dim;
fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(8000);
    let mut g = Graph::new();
    let s = Dim::from(64i64);
    let x = g
        .input("x", DType::F32, &[s.clone(), Dim::from(64i64)])
        .unwrap();
    let w = g
        .input("w", DType::F32, &[Dim::from(64i64), Dim::from(64i64)])
        .unwrap();
    let mut cur = x;
    let mut outs = 0;
    for i in 0..n / 8 {
        let a = g.matmul(cur, w, false, false).unwrap();
        let b = g.matmul(cur, w, false, false).unwrap();
        let c = g.unary(Opcode::Exp, cur).unwrap();
        let d = g.binary(Opcode::Add, a, b).unwrap();
        let e = g.binary(Opcode::Mul, d, c).unwrap();
        let r = g.reduce(e, ReduceOp::Max, &[-1], true).unwrap();
        let f = g.binary(Opcode::Sub, e, r).unwrap();
        cur = g.unary(Opcode::Tanh, f).unwrap();
        if i % 50 == 0 {
            g.output(&format!("o{outs}"), cur).unwrap();
            outs += 1;
        }
    }
    g.output("last", cur).unwrap();
    let t = std::time::Instant::now();
    let p = FusionPlan::new(&g, &FuseOptions::default()).unwrap();
    println!(
        "{} nodes, {} groups, {:.1} ms",
        g.nodes().len(),
        p.groups.len(),
        t.elapsed().as_secs_f64() * 1e3
    );
}
