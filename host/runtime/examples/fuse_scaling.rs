//! How the fusion pass scales with the graph: a chain of `N / 8` blocks
//! (two matmuls reading one value, an element-wise epilogue, a row max and
//! its use, so that every block offers parallel stacks, vertical merges
//! and siblings), fused once with the default options.
//!
//! `cargo run --release -p dvm-host --example fuse_scaling -- [N]` prints
//! the nodes, the groups and the pass's time. A change to the pass should
//! keep it near-linear here as well as cheap on the eager window: session
//! 9 caught a reach table that cost O(n²) per stack (24 K nodes: 19 s
//! instead of 1.8 s).
//!
//! Session 10 made it linear (instructions: 72 M at 8 K nodes, 218 M at
//! 24 K). Three parts had been quadratic: the siblings rule queued every
//! pair of the weight's readers (all matmuls), each stack's reach search
//! walked the rest of the chain, and the plan's rejections were made
//! distinct by searching lists. On a slow shared VM, 2 K / 8 K / 24 K / 96 K
//! nodes: 2.2 / 9 / 30–60 / 150 ms, peak RSS 5 / 12 / 31 / 116 MB (before:
//! 6.3 / 80 / 750–820 ms, 7 / 52 / 389 MB).

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
        p.clusters.len(),
        t.elapsed().as_secs_f64() * 1e3
    );
}
