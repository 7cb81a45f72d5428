//! Dumps the decomposed graph and the fusion plans of many generated graphs
//! (and the encoder block), one block per graph, so that two builds can be
//! compared with `diff`: a change meant to make the fusion decision cheaper
//! must leave every plan and every decomposed graph as it was.
//!
//! `cargo run --release -p dvm-runtime --example plan_dump -- [N] > plans.txt`
//!
//! Graphs are random DAGs (a fixed xorshift seed per graph) over inputs of
//! concrete or symbolic shapes: element-wise, scalar, reduce (kept and
//! dropped axes), mean, softmax, log-softmax, layer and RMS norms, matmuls,
//! transposes, several outputs. Each is fused with the eager API's options
//! (no reasons), the default ones (reasons), without composite seeds, and
//! with tight node, parameter and stack limits, and without stacking; the dump holds every field of each [`FusionPlan`].

use dvm_fuse::{FuseOptions, FusionPlan};
use dvm_graph::models::{encoder_block, EncoderConfig};
use dvm_graph::{decompose_with_spans, Graph, NodeId, ReduceOp};
use dvm_isa::{DType, Opcode};
use dvm_runtime::Prepared;
use dvm_sym::Dim;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const UNARY: [Opcode; 5] = [
    Opcode::Tanh,
    Opcode::Relu,
    Opcode::Exp,
    Opcode::GeluTanh,
    Opcode::Neg,
];
const BINARY: [Opcode; 4] = [Opcode::Add, Opcode::Sub, Opcode::Mul, Opcode::Max];
const REDUCE: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean];

/// A random graph; steps that do not apply are skipped.
fn random_graph(seed: u64) -> Graph {
    let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut g = Graph::new();
    let symbolic = r.below(3) == 0;
    let rows: Dim = if symbolic {
        g.symbol("S", 1, 4096).expect("symbol").into()
    } else {
        Dim::from([1i64, 3, 8, 64][r.below(4)])
    };
    let h = [1i64, 5, 16, 64][r.below(4)];
    let x = g
        .input("x", DType::F32, &[rows.clone(), h.into()])
        .expect("x");
    let y = g
        .input(
            "y",
            DType::F32,
            &[
                if r.below(2) == 0 {
                    1.into()
                } else {
                    rows.clone()
                },
                h.into(),
            ],
        )
        .expect("y");
    let w = g.input("w", DType::F32, &[h.into(), h.into()]).expect("w");
    let gm = g.input("g", DType::F32, &[h.into()]).expect("g");
    let mut pool: Vec<NodeId> = vec![x, y];
    let steps = 1 + r.below(40);
    for _ in 0..steps {
        let a = pool[pool.len() - 1 - r.below(pool.len().min(6))];
        let b = pool[r.below(pool.len())];
        let made = match r.below(14) {
            0 | 1 => g.unary(UNARY[r.below(UNARY.len())], a),
            2 | 3 => g.binary(BINARY[r.below(BINARY.len())], a, b),
            4 => g.scalar(Opcode::MulS, a, 0.5),
            5 => {
                let rank = g[a].shape.len();
                if rank == 0 {
                    continue;
                }
                let axis = r.below(rank) as i64;
                g.reduce(a, REDUCE[r.below(REDUCE.len())], &[axis], r.below(2) == 0)
            }
            6 => g.softmax(a, -1),
            7 => g.log_softmax(a, -1),
            8 => g.layer_norm(a, gm, gm, 1e-5),
            9 => g.rms_norm(a, gm, 1e-6),
            10 | 11 => g.matmul(a, w, false, r.below(3) == 0),
            12 => g.transpose(a, &[1, 0]),
            _ => g.mean(a, &[-1], true),
        };
        if let Ok(n) = made {
            pool.push(n);
        }
    }
    let outs = 1 + r.below(3);
    for k in 0..outs {
        let n = pool[pool.len() - 1 - r.below(pool.len().min(4))];
        let _ = g.output(&format!("out{k}"), n);
    }
    g
}

fn dump(label: &str, g: &Graph) {
    println!("=== {label}");
    let (d, spans) = match decompose_with_spans(g) {
        Ok(x) => x,
        Err(e) => {
            println!("decomposition error: {e}");
            return;
        }
    };
    println!("spans {spans:?}");
    for (i, n) in d.nodes().iter().enumerate() {
        println!("  %{i} {n:?}");
    }
    println!("  outputs {:?}", d.outputs());
    let variants = [
        (
            "eager",
            FuseOptions {
                reasons: false,
                ..FuseOptions::default()
            },
        ),
        ("default", FuseOptions::default()),
        (
            "no-composites",
            FuseOptions {
                composites: false,
                ..FuseOptions::default()
            },
        ),
        (
            "tight",
            FuseOptions {
                max_params: 7,
                max_nodes: 12,
                max_stack: 2,
                ..FuseOptions::default()
            },
        ),
        (
            "no-stack",
            FuseOptions {
                stack: false,
                ..FuseOptions::default()
            },
        ),
    ];
    for (name, opts) in variants {
        match FusionPlan::with_composites(&d, &opts, &spans) {
            Ok(p) => println!("{name}: {p:?}"),
            Err(e) => println!("{name}: error {e}"),
        }
    }
    // The prepared graph (decomposition + pass, as the eager API and the
    // runtime make it) must agree with the parts.
    let eager = FuseOptions {
        reasons: false,
        ..FuseOptions::default()
    };
    match Prepared::from_graph(g.clone(), &eager) {
        Ok(p) => println!(
            "prepared: {} nodes, {:?}, error {:?}",
            p.graph().nodes().len(),
            p.fusion().groups,
            p.fuse_error()
        ),
        Err(e) => println!("prepared: error {e}"),
    }
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    let enc = encoder_block(&EncoderConfig::default()).expect("encoder");
    dump("encoder block", &enc);
    for seed in 0..n {
        dump(&format!("graph {seed}"), &random_graph(seed));
    }
}
