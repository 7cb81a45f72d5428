//! The predecoder's fused forms for the compiler's kernels: each workload
//! whose speed rests on a superinstruction or a global-memory fast path is
//! compiled as the runtime compiles it, and the forms the device chose for
//! each launch are asserted by name. A compiler change that stops emitting
//! an idiom the device recognises fails here instead of silently slowing
//! down.

use dvm_graph::Graph;
use dvm_isa::{DType, Opcode};
use dvm_runtime::{Prepared, Runtime};
use dvm_sym::{Bindings, Dim};

const S: i64 = 512;
const H: i64 = 768;

/// `f` builds the graph's body from `x: [S, H]` (and `r`, `w`, `b` of the
/// usual shapes); returns the sorted forms of every launch's bodies.
fn forms(
    build: impl Fn(&mut Graph, [dvm_graph::NodeId; 4]) -> dvm_graph::NodeId,
) -> Vec<Vec<&'static str>> {
    let mut g = Graph::new();
    let x = g
        .input("x", DType::F32, &[Dim::from(S), Dim::from(H)])
        .unwrap();
    let r = g
        .input("r", DType::F32, &[Dim::from(S), Dim::from(H)])
        .unwrap();
    let w = g.input("w", DType::F32, &[Dim::from(H)]).unwrap();
    let b = g.input("b", DType::F32, &[Dim::from(H)]).unwrap();
    let y = build(&mut g, [x, r, w, b]);
    g.output("y", y).unwrap();
    let p = Prepared::new(&g).unwrap();
    let rt = Runtime::new(2, 64);
    let (_, kernels) = rt.plan(&p, &Bindings::new()).unwrap();
    kernels
        .iter()
        .map(|k| {
            let mut names: Vec<&'static str> = (0..k.info.bodies)
                .flat_map(|b| k.program.fused_forms(b).names().collect::<Vec<_>>())
                .collect();
            names.sort_unstable();
            names.dedup();
            names
        })
        .collect()
}

#[test]
fn softmax_folds_its_loads_and_runs_its_rows_in_global_memory() {
    assert_eq!(
        forms(|g, [x, ..]| g.softmax(x, -1).unwrap()),
        [[
            "load_fold_cols",
            "scale_store",
            "softmax_gm",
            "softmax_middle",
            "softmax_rows"
        ]]
    );
}

#[test]
fn layernorm_runs_its_middle_and_stores_its_tail() {
    assert_eq!(
        forms(|g, [x, _, w, b]| g.layer_norm(x, w, b, 1e-5).unwrap()),
        [["load_fold_cols", "norm_middle", "norm_tail_store"]]
    );
}

#[test]
fn a_residual_add_before_a_norm_reads_both_loads_in_place() {
    let got = forms(|g, [x, r, w, b]| {
        let a = g.binary(Opcode::Add, x, r).unwrap();
        g.layer_norm(a, w, b, 1e-5).unwrap()
    });
    assert_eq!(
        got,
        [[
            "binary_fold_cols",
            "load_pair",
            "norm_middle",
            "norm_tail_store"
        ]]
    );
}

#[test]
fn a_row_sum_is_forwarded() {
    assert_eq!(
        forms(|g, [x, ..]| g.sum(x, &[-1], false).unwrap()),
        [["forward", "load_fold_cols"]]
    );
}

#[test]
fn a_lone_elementwise_op_is_forwarded() {
    assert_eq!(
        forms(|g, [x, ..]| g.unary(Opcode::Exp, x).unwrap()),
        [["forward"]]
    );
}
