//! Property test: random graphs of element-wise, broadcast and reduce ops
//! with random shapes (1-sized and prime extents) give the same results on
//! the CPU device as on the reference device.

use dvm_host::demo::data;
use dvm_host::graph::{Graph, NodeId, ReduceOp};
use dvm_host::reference;
use dvm_host::runtime::{Prepared, Runtime};
use dvm_host::sym::{Bindings, Dim};
use dvm_host::tensor::Tensor;
use dvm_isa::{DType, Opcode};
use proptest::prelude::*;

const EXTENTS: [u64; 7] = [1, 2, 3, 5, 7, 13, 17];

#[derive(Clone, Debug)]
enum Step {
    Unary(usize),
    Binary(usize),
    Scalar(usize, f64),
    Reduce(usize, usize, bool),
    Softmax(usize),
}

const UNARY: [Opcode; 6] = [
    Opcode::Abs,
    Opcode::Neg,
    Opcode::Tanh,
    Opcode::Relu,
    Opcode::Sigmoid,
    Opcode::Exp,
];
const BINARY: [Opcode; 5] = [
    Opcode::Add,
    Opcode::Sub,
    Opcode::Mul,
    Opcode::Max,
    Opcode::Min,
];
const SCALAR: [Opcode; 4] = [Opcode::AddS, Opcode::MulS, Opcode::MaxS, Opcode::RSubS];
const REDUCE: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean];

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..UNARY.len()).prop_map(Step::Unary),
        (0..BINARY.len()).prop_map(Step::Binary),
        ((0..SCALAR.len()), -2.0f64..2.0).prop_map(|(o, v)| Step::Scalar(o, v)),
        ((0..REDUCE.len()), 0usize..3, any::<bool>()).prop_map(|(o, a, k)| Step::Reduce(o, a, k)),
        (0usize..3).prop_map(Step::Softmax),
    ]
}

/// Builds the graph; `None` when the steps do not apply (rank ran out).
fn build(shape: &[u64], mask: &[bool], steps: &[Step]) -> Option<(Graph, Vec<u64>)> {
    let mut g = Graph::new();
    let dims: Vec<Dim> = shape.iter().map(|&e| Dim::from(e as i64)).collect();
    let yshape: Vec<u64> = shape
        .iter()
        .zip(mask)
        .map(|(&e, &m)| if m { 1 } else { e })
        .collect();
    let ydims: Vec<Dim> = yshape.iter().map(|&e| Dim::from(e as i64)).collect();
    let x = g.input("x", DType::F32, &dims).ok()?;
    let y = g.input("y", DType::F32, &ydims).ok()?;
    let mut cur: NodeId = x;
    let mut rank = shape.len();
    for s in steps {
        cur = match *s {
            Step::Unary(o) => {
                // Keep exp bounded: exp of tanh.
                if UNARY[o] == Opcode::Exp {
                    let t = g.unary(Opcode::Tanh, cur).ok()?;
                    g.unary(Opcode::Exp, t).ok()?
                } else {
                    g.unary(UNARY[o], cur).ok()?
                }
            }
            Step::Binary(o) => match g.binary(BINARY[o], cur, y) {
                Ok(n) => n,
                Err(_) => continue,
            },
            Step::Scalar(o, v) => g.scalar(SCALAR[o], cur, v).ok()?,
            Step::Reduce(o, a, keep) => {
                if rank == 0 {
                    continue;
                }
                let axis = (a % rank) as i64;
                let n = g.reduce(cur, REDUCE[o], &[axis], keep).ok()?;
                if !keep {
                    rank -= 1;
                }
                n
            }
            Step::Softmax(a) => {
                if rank == 0 {
                    continue;
                }
                g.softmax(cur, (a % rank) as i64).ok()?
            }
        };
    }
    g.output("out", cur).ok()?;
    Some((g, yshape))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn cpu_matches_reference(
        ext in proptest::collection::vec(0..EXTENTS.len(), 3),
        mask in proptest::collection::vec(any::<bool>(), 3),
        steps in proptest::collection::vec(step(), 1..6),
        seed in any::<u32>(),
    ) {
        let shape: Vec<u64> = ext.iter().map(|&i| EXTENTS[i]).collect();
        let Some((g, yshape)) = build(&shape, &mask, &steps) else { return Ok(()); };
        let n: u64 = shape.iter().product();
        let m: u64 = yshape.iter().product();
        let x = Tensor::from_f32(&shape, &data(n as usize, seed)).unwrap();
        let y = Tensor::from_f32(&yshape, &data(m as usize, seed ^ 0x5555)).unwrap();
        let inputs = [("x", &x), ("y", &y)];
        let want = reference::run(&g, &inputs, &Bindings::new()).unwrap();
        let rt = Runtime::new(2, 64);
        let prepared = Prepared::new(&g).unwrap();
        let got = rt.run(&prepared, &inputs, &Bindings::new()).unwrap();
        for ((_, w), (_, t)) in want.iter().zip(&got) {
            prop_assert_eq!(w.shape(), t.shape());
            let d = w.max_abs_diff(t).unwrap();
            prop_assert!(w.allclose(t, 1e-4, 1e-5).unwrap(), "max diff {} for {:?} {:?}", d, shape, steps);
        }
    }
}
