//! Tests of graph construction, shape propagation, binding, decomposition
//! and the JSON format.

use std::path::Path;

use dvm_isa::{DType, Opcode};

use super::*;
use dvm_sym::{Bindings, Dim, SymError};

fn d(v: i64) -> Dim {
    Dim::val(v)
}

fn shape(g: &Graph, id: NodeId) -> String {
    g.shape_string(id)
}

/// `[S, 768]` f32 input graph with `S` in 1..=8192.
fn sx() -> (Graph, Symbol, NodeId) {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 8192).unwrap();
    let x = g.input("x", DType::F32, &[s.into(), d(768)]).unwrap();
    (g, s, x)
}

fn msg<T: std::fmt::Debug>(r: Result<T, GraphError>) -> String {
    r.expect_err("expected an error").to_string()
}

// ---- construction and shape propagation ------------------------------------

#[test]
fn builder_propagates_shapes() {
    let (mut g, s, x) = sx();
    let w = g.input("w", DType::F32, &[d(768), d(3072)]).unwrap();
    let h = g.matmul(x, w, false, false).unwrap();
    assert_eq!(shape(&g, h), "[S, 3072]");
    let y = g.gelu_tanh(h).unwrap();
    let b = g.input("b", DType::F32, &[d(3072)]).unwrap();
    let y = g.add(y, b).unwrap();
    assert_eq!(shape(&g, y), "[S, 3072]");
    let r = g.sum(y, &[-1], true).unwrap();
    assert_eq!(shape(&g, r), "[S, 1]");
    let r2 = g.reduce_max(y, &[0, 1], false).unwrap();
    assert_eq!(shape(&g, r2), "[]");
    let t = g.transpose(y, &[1, 0]).unwrap();
    assert_eq!(shape(&g, t), "[3072, S]");
    let c = g.concat(&[x, x], 0).unwrap();
    assert_eq!(shape(&g, c), "[2*S, 768]");
    let u = g.unsqueeze(x, &[0, -1]).unwrap();
    assert_eq!(shape(&g, u), "[1, S, 768, 1]");
    let q = g.squeeze(u, &[]).unwrap();
    assert_eq!(shape(&g, q), "[S, 768]");
    let e = g.expand(u, &[d(4), d(-1), d(-1), d(3)]).unwrap();
    assert_eq!(shape(&g, e), "[4, S, 768, 3]");
    let lt = g.lts(x, 0.5).unwrap();
    assert_eq!(g[lt].dtype, DType::Bool);
    let sel = g.where_(lt, x, x).unwrap();
    assert_eq!(g[sel].dtype, DType::F32);
    let ci = g.cast(x, DType::I32).unwrap();
    assert_eq!(g[ci].dtype, DType::I32);
    let fin = g.isfinite(x).unwrap();
    assert_eq!(g[fin].dtype, DType::Bool);
    g.output("y", y).unwrap();
    assert_eq!(g.outputs(), &[("y".to_owned(), y)]);
    assert_eq!(g.inputs(), &[x, w, b]);
    assert_eq!(g[h].name, "matmul_2");
    assert_eq!(g.find("matmul_2"), Some(h));
    // Nodes are in topological order.
    for (i, n) in g.nodes().iter().enumerate() {
        assert!(n.operands.iter().all(|o| o.0 < i));
    }
    assert!(g
        .to_string()
        .contains("matmul_2: f32[S, 3072] = matmul(%0 x, %1 w)"));
    let _ = s;
}

#[test]
fn matmul_batches_broadcast_and_transposes() {
    let mut g = Graph::new();
    let b = g.symbol("B", 1, 64).unwrap();
    let s = g.symbol("S", 1, 4096).unwrap();
    let q = g
        .input("q", DType::F16, &[b.into(), d(12), s.into(), d(64)])
        .unwrap();
    let k = g
        .input("k", DType::F16, &[b.into(), d(12), s.into(), d(64)])
        .unwrap();
    let att = g.matmul(q, k, false, true).unwrap();
    assert_eq!(shape(&g, att), "[B, 12, S, S]");
    let w = g.input("w", DType::F16, &[d(64), d(32)]).unwrap();
    let p = g.matmul(q, w, false, false).unwrap();
    assert_eq!(shape(&g, p), "[B, 12, S, 32]");
    let wt = g.input("wt", DType::F16, &[d(1), d(64), s.into()]).unwrap();
    let p2 = g.matmul(wt, q, true, true).unwrap();
    assert_eq!(shape(&g, p2), "[B, 12, S, S]");
    let i = g.input("i", DType::I8, &[d(4), d(8)]).unwrap();
    let j = g.input("j", DType::I8, &[d(8), d(2)]).unwrap();
    let ij = g.matmul(i, j, false, false).unwrap();
    assert_eq!(g[ij].dtype, DType::I32);
    assert_eq!(result_dtype(&g[ij].op, Some(DType::I8)), Some(DType::I32));
}

#[test]
fn broadcast_policy() {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 100).unwrap();
    let t = g.symbol("T", 1, 100).unwrap();
    let a = g.input("a", DType::F32, &[s.into(), d(1), d(768)]).unwrap();
    let b = g.input("b", DType::F32, &[d(4), d(768)]).unwrap();
    let ab = g.add(a, b).unwrap();
    assert_eq!(shape(&g, ab), "[S, 4, 768]");
    // A 1 broadcasts against a symbol.
    let one = g.input("one", DType::F32, &[d(1)]).unwrap();
    let c = g.input("c", DType::F32, &[t.into()]).unwrap();
    let oc = g.mul(one, c).unwrap();
    assert_eq!(shape(&g, oc), "[T]");

    // Two different symbols: an error naming node, op, both shapes, symbols.
    let x = g.input("x", DType::F32, &[s.into(), d(8)]).unwrap();
    let y = g.input("y", DType::F32, &[t.into(), d(8)]).unwrap();
    let e = msg(g.add(x, y));
    assert!(e.contains("node `add_"), "{e}");
    assert!(e.contains("(add)"), "{e}");
    assert!(e.contains("[S, 8]") && e.contains("[T, 8]"), "{e}");
    assert!(e.contains("`S`") && e.contains("`T`"), "{e}");
    assert!(e.contains("declare_equal"), "{e}");
    let n = g.nodes().len();
    // Failed calls change nothing.
    assert_eq!(g.nodes().len(), n);
    // Declared equal: now they broadcast.
    g.declare_equal(&t.into(), &s.into()).unwrap();
    let xy = g.add(x, y).unwrap();
    assert_eq!(shape(&g, xy), "[S, 8]");

    // A symbol that may be 1 against a constant: undecided.
    let z = g.input("z", DType::F32, &[d(768)]).unwrap();
    let e = msg(g.add(c, z));
    assert!(e.contains("[S]") || e.contains("[T]"), "{e}");
    assert!(e.contains("768"), "{e}");
    // Constants that differ: a mismatch.
    let p = g.input("p", DType::F32, &[d(3)]).unwrap();
    let q = g.input("q", DType::F32, &[d(4)]).unwrap();
    let e = msg(g.sub(p, q));
    assert!(
        e.contains("cannot broadcast [3] with [4] at output axis 0"),
        "{e}"
    );
    assert!(e.contains("(sub)"), "{e}");
    // A symbol whose range excludes 1 and the constant: a mismatch too.
    let u = g.symbol("U", 2, 10).unwrap();
    let r = g.input("r", DType::F32, &[u.into()]).unwrap();
    let e = msg(g.add(r, z));
    assert!(e.contains("`U`") && e.contains("neither is 1"), "{e}");
}

#[test]
fn dtype_rules_follow_the_isa() {
    let mut g = Graph::new();
    let i = g.input("i", DType::I32, &[d(4)]).unwrap();
    let f = g.input("f", DType::F32, &[d(4)]).unwrap();
    let bo = g.input("bo", DType::Bool, &[d(4)]).unwrap();
    let e = msg(g.exp(i));
    assert!(
        e.contains("(exp)") && e.contains("`i`") && e.contains("i32"),
        "{e}"
    );
    assert!(e.contains("f32|f16|bf16"), "{e}");
    g.abs(i).unwrap();
    g.relu(i).unwrap();
    assert!(g.not(f).is_err());
    g.not(bo).unwrap();
    g.and(bo, bo).unwrap();
    assert!(g.and(f, f).is_err());
    let e = msg(g.add(i, f));
    assert!(e.contains("operand dtypes differ: i32 vs f32"), "{e}");
    assert!(g.pow(i, i).is_err());
    assert!(g.pows(i, 2.0).is_err());
    g.eq(bo, bo).unwrap();
    assert!(g.lt(bo, bo).is_err());
    assert!(g.adds(bo, 1.0).is_err());
    let e = msg(g.where_(f, f, f));
    assert!(e.contains("operand 0 (`f`)") && e.contains("bool"), "{e}");
    assert!(g.where_(bo, f, i).is_err());
    assert!(g.mean(i, &[0], false).is_err());
    g.sum(i, &[0], false).unwrap();
    assert!(g.sum(bo, &[0], false).is_err());
    assert!(g.softmax(i, -1).is_err());
    assert!(g.matmul(bo, bo, false, false).is_err());
    // Opcodes of the wrong kind.
    assert!(g.unary(Opcode::Add, f).is_err());
    assert!(g.binary(Opcode::Exp, f, f).is_err());
    assert!(g.scalar(Opcode::Add, f, 1.0).is_err());
    assert!(g.unary(Opcode::Load, f).is_err());
}

#[test]
fn shape_errors_name_op_shapes_and_dims() {
    let (mut g, s, x) = sx();
    let w = g.input("w", DType::F32, &[d(512), d(64)]).unwrap();
    let e = msg(g.matmul(x, w, false, false));
    assert!(
        e.contains("(matmul)") && e.contains("[S, 768]") && e.contains("[512, 64]"),
        "{e}"
    );
    assert!(e.contains("contraction dims `768` vs `512`"), "{e}");
    let v = g.input("v", DType::F32, &[d(768)]).unwrap();
    assert!(msg(g.matmul(x, v, false, false)).contains("rank >= 2"));

    let e = msg(g.reshape(x, &[d(768), d(2)]));
    assert!(
        e.contains("(reshape)") && e.contains("element counts") && e.contains("768*S"),
        "{e}"
    );
    let r = g.reshape(x, &[d(-1)]).unwrap();
    assert_eq!(shape(&g, r), "[768*S]");
    let r = g.reshape(x, &[s.into(), d(12), d(-1)]).unwrap();
    assert_eq!(shape(&g, r), "[S, 12, 64]");
    let e = msg(g.reshape(x, &[d(-1), d(1000)]));
    assert!(e.contains("cannot infer the -1"), "{e}");
    assert!(msg(g.reshape(x, &[d(-1), d(-1)])).contains("at most one"));
    assert!(msg(g.reshape(x, &[d(-2), s.into()])).contains("negative"));

    let y = g.input("y", DType::F32, &[s.into(), d(512)]).unwrap();
    let c = g.concat(&[x, y], 1).unwrap();
    assert_eq!(shape(&g, c), "[S, 1280]");
    let e = msg(g.concat(&[x, y], 0));
    assert!(
        e.contains("(concat)") && e.contains("axis 1") && e.contains("`768` vs `512`"),
        "{e}"
    );
    assert!(msg(g.concat(&[], 0)).contains("at least 1"));

    let e = msg(g.expand(x, &[s.into(), d(3)]));
    assert!(e.contains("(expand)") && e.contains("`768` vs `3`"), "{e}");
    assert!(msg(g.expand(x, &[d(768)])).contains("lower rank"));

    let e = msg(g.squeeze(x, &[0]));
    assert!(e.contains("(squeeze)") && e.contains("`S`, not 1"), "{e}");

    let gamma = g.input("gamma", DType::F32, &[d(512)]).unwrap();
    let e = msg(g.layer_norm(x, gamma, gamma, 1e-5));
    assert!(
        e.contains("(layer_norm)") && e.contains("weight `gamma`") && e.contains("`768` vs `512`"),
        "{e}"
    );
    assert!(msg(g.rms_norm(x, gamma, f64::NAN)).contains("eps"));

    let e = msg(g.sum(x, &[2], false));
    assert!(e.contains("axis 2 is out of range for rank 2"), "{e}");
    assert!(msg(g.sum(x, &[1, -1], false)).contains("listed twice"));
    assert!(msg(g.sum(x, &[], false)).contains("no axes"));
    assert!(msg(g.transpose(x, &[0, 0])).contains("not a permutation"));
    assert!(msg(g.transpose(x, &[0])).contains("entries for rank 2"));
    assert!(msg(g.slice(x, &[(0, 0, 4, 0)])).contains("step must be >= 1"));
    assert!(msg(g.softmax(x, 5)).contains("out of range"));
    assert!(msg(g.unsqueeze(x, &[3])).contains("out of range"));

    let e = msg(g.constant(DType::F32, &[d(2), d(2)], &[1.0, 2.0, 3.0]));
    assert!(e.contains("4 elements but 3 values"), "{e}");
    let e = msg(g.constant(DType::F32, &[s.into()], &[1.0, 2.0]));
    assert!(e.contains("exactly one value"), "{e}");
    g.full(DType::F32, &[s.into()], 1.0).unwrap();
    let e = msg(g.input("neg", DType::F32, &[d(-3)]));
    assert!(e.contains("negative"), "{e}");

    // Foreign ids and names.
    assert!(matches!(
        g.exp(NodeId(999)),
        Err(GraphError::UnknownNode { id: 999, .. })
    ));
    assert!(matches!(
        g.input("x", DType::F32, &[]),
        Err(GraphError::DuplicateName { .. })
    ));
    assert!(matches!(
        g.input("a/b", DType::F32, &[]),
        Err(GraphError::InvalidName { .. })
    ));
    assert!(matches!(
        g.input("..", DType::F32, &[]),
        Err(GraphError::InvalidName { .. })
    ));
    assert!(g.output("../etc", x).is_err());
    g.output("o", x).unwrap();
    assert!(g.output("o", x).is_err());
    g.rename(x, "x2").unwrap();
    assert_eq!(g.find("x2"), Some(x));
    assert_eq!(g.find("x"), None);
    assert!(g.rename(x, "y").is_err());
}

/// The name index is built on the first lookup and kept up to date after
/// it; a copy made before or after that answers the same, and names that
/// share a hash prefix or differ only in length stay apart.
#[test]
fn name_index_is_lazy_and_exact() {
    let mut g = Graph::new();
    let names = ["a", "a_1", "abcdefgh", "abcdefghi", "abcdefgh.x", "x.sum"];
    let ids: Vec<NodeId> = names
        .iter()
        .map(|n| g.input(n, DType::F32, &[d(2)]).unwrap())
        .collect();
    // A copy made before any lookup builds its own index.
    let copy = g.clone();
    for (n, &id) in names.iter().zip(&ids) {
        assert_eq!(g.find(n), Some(id));
        assert_eq!(copy.find(n), Some(id));
    }
    assert_eq!(g.find("abcdefg"), None);
    assert_eq!(g.input_named("a_1"), Some(ids[1]));
    // Nodes added after the index exists are found; renames move entries.
    let e = g.exp(ids[0]).unwrap();
    assert_eq!(g.find(&g[e].name.clone()), Some(e));
    g.rename(ids[2], "renamed").unwrap();
    assert_eq!(g.find("abcdefgh"), None);
    assert_eq!(g.find("renamed"), Some(ids[2]));
    g.rename(ids[2], "renamed").unwrap();
    assert_eq!(g.find("renamed"), Some(ids[2]));
    // A rename before any lookup.
    let mut h = copy.clone();
    h.rename(ids[0], "b").unwrap();
    assert_eq!((h.find("a"), h.find("b")), (None, Some(ids[0])));
    assert_eq!(h.input_named("b"), Some(ids[0]));
    assert_eq!(h.input_named("nope"), None);
}

/// Names whose hash another name holds are found through the collision
/// list (a collision forced by filing a node under another name's hash).
#[test]
fn name_index_collisions() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[d(2)]).unwrap();
    let z = g.input("zzz", DType::F32, &[d(2)]).unwrap();
    let nodes = g.nodes().to_vec();
    let mut ix = NameIndex::default();
    ix.by_hash.insert(name_hash("zzz"), a);
    ix.insert(&nodes, "a", a);
    ix.insert(&nodes, "zzz", z);
    assert_eq!(ix.collided, vec![z]);
    assert_eq!(ix.get(&nodes, "zzz"), Some(z));
    assert_eq!(ix.get(&nodes, "a"), Some(a));
    // Removing the holder of the hash promotes the collided name.
    ix.remove(&nodes, "zzz", a);
    assert!(ix.collided.is_empty());
    assert_eq!(ix.get(&nodes, "zzz"), Some(z));
    ix.remove(&nodes, "zzz", z);
    assert_eq!(ix.get(&nodes, "zzz"), None);
}

#[test]
fn slices_are_symbolic() {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 100).unwrap();
    let t = g.symbol("T", 8, 100).unwrap();
    let x = g
        .input("x", DType::F32, &[s.into(), t.into(), d(10)])
        .unwrap();
    let a = g
        .slice(x, &[(0, 0, 4, 1), (1, 0, 4, 1), (2, -3, i64::MAX, 1)])
        .unwrap();
    assert_eq!(shape(&g, a), "[min(S,4), 4, 3]");
    let b = g.slice(x, &[(-1, 1, 10, 2)]).unwrap();
    assert_eq!(shape(&g, b), "[S, T, 5]");
    let c = g.slice(x, &[(1, 0, i64::MAX, 1)]).unwrap();
    assert_eq!(shape(&g, c), "[S, T, 10]");
    g.output("a", a).unwrap();
    let bind = g.bind(&[("x", &[2, 9, 10])], &Bindings::new()).unwrap();
    let shapes = g.concrete_shapes(&bind).unwrap();
    assert_eq!(shapes[a.0], vec![2, 4, 3]);
    assert_eq!(shapes[b.0], vec![2, 9, 5]);
    // Python semantics on concrete extents.
    let mut h = Graph::new();
    let y = h.input("y", DType::F32, &[d(10)]).unwrap();
    for (start, end, step, len) in [
        (-3, -1, 1, 2),
        (8, 3, 1, 0),
        (0, 10, 3, 4),
        (-20, 5, 1, 5),
        (12, 20, 1, 0),
    ] {
        let z = h.slice(y, &[(0, start, end, step)]).unwrap();
        assert_eq!(shape(&h, z), format!("[{len}]"), "{start}:{end}:{step}");
    }
}

#[test]
fn symbolic_slices_follow_python_at_every_extent() {
    let python = |n: i64, start: i64, end: i64, step: i64| {
        let clamp = |v: i64| if v < 0 { (n + v).max(0) } else { v.min(n) };
        let len = (clamp(end) - clamp(start)).max(0);
        (len + step - 1) / step
    };
    let bounds = [-13, -5, -2, -1, 0, 1, 2, 5, 13, i64::MAX];
    for &start in &bounds[..bounds.len() - 1] {
        for &end in &bounds {
            for step in [1, 2, 3] {
                let mut g = Graph::new();
                let s = g.symbol("S", 0, 100).unwrap();
                let x = g.input("x", DType::F32, &[s.into()]).unwrap();
                let y = g.slice(x, &[(0, start, end, step)]).unwrap();
                g.output("y", y).unwrap();
                for n in 0..16u64 {
                    let bind = g.bind(&[("x", &[n])], &Bindings::new()).unwrap();
                    let got = g.concrete_shapes(&bind).unwrap()[y.0][0];
                    let want = python(n as i64, start, end, step);
                    assert_eq!(
                        got as i64,
                        want,
                        "{start}:{end}:{step} of {n}: {}",
                        shape(&g, y)
                    );
                }
            }
        }
    }
}

/// `x[start:end]` of the previous value concatenated with `x`, `pairs`
/// times, along the symbolic axis.
fn slice_concat_chain(pairs: usize, start: i64, end: i64) -> Result<(Graph, NodeId), GraphError> {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 1 << 20).unwrap();
    let x = g.input("x", DType::F32, &[s.into(), d(8)]).unwrap();
    let mut cur = x;
    for _ in 0..pairs {
        let part = g.slice(cur, &[(0, start, end, 1)])?;
        cur = g.concat(&[part, x], 0)?;
    }
    g.output("y", cur)?;
    Ok((g, cur))
}

#[test]
fn long_slice_chains_stay_small_or_are_refused() {
    // Each slice's extent names the extent before it once: the expression
    // grows by a few nodes per pair (it doubled per pair, and 14 pairs
    // took seconds, 20 hours).
    let (g, y) = slice_concat_chain(120, 2, i64::MAX).unwrap();
    assert!(g[y].shape[0].size() < 1024, "{}", shape(&g, y));
    for n in [1u64, 2, 3, 7] {
        let bind = g.bind(&[("x", &[n, 8])], &Bindings::new()).unwrap();
        // Python: each pair keeps max(len - 2, 0) and appends n.
        let want = (0..120).fold(n, |len, _| len.saturating_sub(2) + n);
        assert_eq!(g.concrete_shapes(&bind).unwrap()[y.0][0], want, "n = {n}");
    }
    // A negative start with a non-negative end uses the extent twice: the
    // expression doubles per pair, and is refused once it is too large.
    let e = msg(slice_concat_chain(40, -5, 10));
    assert!(
        e.contains("grows beyond 1024 terms") && e.contains("(slice)"),
        "{e}"
    );
}

// ---- binding ------------------------------------------------------------------

#[test]
fn bind_deduces_and_checks() {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 512).unwrap();
    let b = g.symbol("B", 1, 64).unwrap();
    g.declare_multiple_of(b, 2).unwrap();
    let x = g
        .input("x", DType::F32, &[b.into(), s.into(), d(8)])
        .unwrap();
    let m = g
        .input("m", DType::F32, &[b.into(), d(1), s.into()])
        .unwrap();
    let e2 = Dim::from(s) * 2;
    let p = g.input("p", DType::I32, &[e2]).unwrap();
    let y = g.add(x, x).unwrap();
    g.output("y", y).unwrap();
    let _ = (m, p);

    let ok = g
        .bind(
            &[("x", &[4, 10, 8]), ("m", &[4, 1, 10]), ("p", &[20])],
            &Bindings::new(),
        )
        .unwrap();
    assert_eq!(ok.get(s), Some(10));
    assert_eq!(ok.get(b), Some(4));
    let shapes = g.concrete_shapes(&ok).unwrap();
    assert_eq!(shapes[y.0], vec![4, 10, 8]);

    // Range: names the symbol, the value and the range.
    let e = msg(g.bind(
        &[("x", &[4, 600, 8]), ("m", &[4, 1, 600]), ("p", &[1200])],
        &Bindings::new(),
    ));
    assert!(
        e.contains("input `x`") && e.contains("`S`") && e.contains("600") && e.contains("1..=512"),
        "{e}"
    );
    // Divisibility.
    let e = msg(g.bind(
        &[("x", &[3, 10, 8]), ("m", &[3, 1, 10]), ("p", &[20])],
        &Bindings::new(),
    ));
    assert!(e.contains("`B`") && e.contains("multiple of 2"), "{e}");
    // Constant dims.
    let e = msg(g.bind(
        &[("x", &[4, 10, 9]), ("m", &[4, 1, 10]), ("p", &[20])],
        &Bindings::new(),
    ));
    assert!(
        e.contains("input `x`") && e.contains("axis 2 is 9") && e.contains("`8`"),
        "{e}"
    );
    // Conflicting symbol values name both inputs.
    let e = msg(g.bind(
        &[("x", &[4, 10, 8]), ("m", &[4, 1, 11]), ("p", &[20])],
        &Bindings::new(),
    ));
    assert!(
        e.contains("input `m`") && e.contains("`S` = 10 from input `x` axis 1"),
        "{e}"
    );
    // Expressions are checked.
    let e = msg(g.bind(
        &[("x", &[4, 10, 8]), ("m", &[4, 1, 10]), ("p", &[21])],
        &Bindings::new(),
    ));
    assert!(
        e.contains("input `p`") && e.contains("`2*S` = 20 with S = 10"),
        "{e}"
    );
    // Missing, extra, duplicate, rank.
    let e = msg(g.bind(&[("x", &[4, 10, 8]), ("m", &[4, 1, 10])], &Bindings::new()));
    assert!(e.contains("input `p` is missing"), "{e}");
    let e = msg(g.bind(
        &[
            ("x", &[4, 10, 8]),
            ("m", &[4, 1, 10]),
            ("p", &[20]),
            ("q", &[1]),
        ],
        &Bindings::new(),
    ));
    assert!(
        e.contains("`q` is not an input") && e.contains("`x`, `m`, `p`"),
        "{e}"
    );
    let e = msg(g.bind(&[("y", &[1])], &Bindings::new()));
    assert!(e.contains("`y` is not an input"), "{e}");
    let e = msg(g.bind(&[("x", &[4, 10, 8]), ("x", &[4, 10, 8])], &Bindings::new()));
    assert!(e.contains("given twice"), "{e}");
    let e = msg(g.bind(
        &[("x", &[4, 10]), ("m", &[4, 1, 10]), ("p", &[20])],
        &Bindings::new(),
    ));
    assert!(e.contains("input `x`") && e.contains("rank 2 vs 3"), "{e}");
    // Explicit bindings: checked against ranges and the inputs.
    let e = msg(g.bind(
        &[("x", &[4, 10, 8]), ("m", &[4, 1, 10]), ("p", &[20])],
        &Bindings::new().with(s, 12),
    ));
    assert!(e.contains("`S` = 12 from an explicit binding"), "{e}");
    let e = msg(g.bind(&[], &Bindings::new().with(s, 1000)));
    assert!(
        e.contains("explicit binding `S` = 1000") && e.contains("1..=512"),
        "{e}"
    );
    let mut other = dvm_sym::SymbolScope::new();
    let zz = other.symbol("ZZ_not_here").unwrap();
    let e = msg(g.bind(&[], &Bindings::new().with(zz, 1)));
    assert!(
        e.contains("`ZZ_not_here` is not a symbol of this graph"),
        "{e}"
    );
}

#[test]
fn bind_solves_expressions_and_reports_unbound() {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 512).unwrap();
    let t = g.symbol("T", 1, 512).unwrap();
    let x = g.input("x", DType::F32, &[Dim::from(s) * 2 + 1]).unwrap();
    let c = g.full(DType::F32, &[t.into()], 0.0).unwrap();
    g.output("c", c).unwrap();
    let _ = x;
    let e = msg(g.bind(&[("x", &[9])], &Bindings::new()));
    assert!(
        e.contains("symbol `T`") && e.contains("bind it explicitly"),
        "{e}"
    );
    let b = g.bind(&[("x", &[9])], &Bindings::new().with(t, 3)).unwrap();
    assert_eq!(b.get(s), Some(4));
    assert_eq!(g.concrete_shapes(&b).unwrap()[c.0], vec![3]);
    let e = msg(g.bind(&[("x", &[10])], &Bindings::new().with(t, 3)));
    assert!(e.contains("input `x`") && e.contains("`2*S+1`"), "{e}");
    // Out of range after solving.
    let e = msg(g.bind(&[("x", &[2001])], &Bindings::new().with(t, 3)));
    assert!(
        e.contains("`S`") && e.contains("1000") && e.contains("1..=512"),
        "{e}"
    );
}

#[test]
fn bind_tensors_checks_dtypes() {
    let (g, _, _) = sx();
    let t = dvm_tensor::Tensor::from_i32(&[2, 768], &[0; 1536]).unwrap();
    let e = msg(g.bind_tensors(&[("x", &t)], &Bindings::new()));
    assert!(
        e.contains("input `x` has dtype i32, but the graph declares f32"),
        "{e}"
    );
}

#[test]
fn concrete_shapes_report_negative_extents() {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 100).unwrap();
    let x = g.input("x", DType::F32, &[s.into()]).unwrap();
    let r = g.reshape(x, &[d(1), s.into()]).unwrap();
    let _ = r;
    // A shape the algebra cannot prove non-negative in general.
    let y = g.input("y", DType::F32, &[Dim::from(s) - 3]).unwrap();
    let _ = y;
    let b = Bindings::new().with(s, 2);
    let e = msg(g.concrete_shapes(&b));
    assert!(
        e.contains("node `y`") && e.contains("negative extent -1") && e.contains("S = 2"),
        "{e}"
    );
    let e = msg(g.concrete_shapes(&Bindings::new()));
    assert!(e.contains("symbol `S`"), "{e}");
}

// ---- decomposition ------------------------------------------------------------

#[test]
fn decompose_rewrites_composites_only() {
    let (mut g, _, x) = sx();
    let gamma = g.input("gamma", DType::F32, &[d(768)]).unwrap();
    let beta = g.input("beta", DType::F32, &[d(768)]).unwrap();
    let ln = g.layer_norm(x, gamma, beta, 1e-5).unwrap();
    g.rename(ln, "ln").unwrap();
    let sm = g.softmax(ln, -1).unwrap();
    let ls = g.log_softmax(sm, 0).unwrap();
    let rn = g.rms_norm(ls, gamma, 1e-6).unwrap();
    let m = g.mean(rn, &[0], false).unwrap();
    let m2 = g.mean(rn, &[1], true).unwrap();
    g.output("m", m).unwrap();
    g.output("m2", m2).unwrap();
    g.output("ln", ln).unwrap();
    let dg = decompose(&g).unwrap();
    assert!(dg.nodes().iter().all(|n| !n.op.is_composite()));
    assert_eq!(dg.inputs().len(), 3);
    for (name, id) in dg.outputs() {
        let orig = g.outputs().iter().find(|(n, _)| n == name).unwrap().1;
        assert_eq!(dg[*id].name, g[orig].name);
        assert_eq!(dg[*id].shape, g[orig].shape);
        assert_eq!(dg[*id].dtype, g[orig].dtype);
    }
    // Mean over a symbolic extent divides by the symbol.
    let mid = dg.find(&g[m].name).unwrap();
    assert!(matches!(&dg[mid].op, Op::ScalarDim(Opcode::DivS, d) if d.to_string() == "S"));
    let m2id = dg.find(&g[m2].name).unwrap();
    assert_eq!(dg[m2id].op, Op::Scalar(Opcode::DivS, 768.0));
    assert!(dg.find("ln.mean").is_some() && dg.find("ln.rsqrt").is_some());
    let names: std::collections::HashSet<_> = dg.nodes().iter().map(|n| &n.name).collect();
    assert_eq!(names.len(), dg.nodes().len());
    // Decomposing again changes nothing.
    let again = decompose(&dg).unwrap();
    assert_eq!(again.nodes(), dg.nodes());
}

#[test]
fn decompose_avoids_name_clashes() {
    let (mut g, _, x) = sx();
    let sm = g.softmax(x, -1).unwrap();
    g.rename(sm, "p").unwrap();
    let e = g.exp(sm).unwrap();
    g.rename(e, "p.max").unwrap();
    g.output("out", e).unwrap();
    let dg = decompose(&g).unwrap();
    let names: std::collections::HashSet<_> = dg.nodes().iter().map(|n| n.name.clone()).collect();
    assert_eq!(names.len(), dg.nodes().len());
    assert!(dg.find("p.max_1").is_some());
    assert_eq!(dg[dg.outputs()[0].1].name, "p.max");
}

#[test]
fn decompose_gives_each_node_what_inference_gives() {
    // Operands of constant and of settled shapes (their nodes' shapes are
    // derived) and of an unsettled one (`T`, rewritten by an equality
    // declared after the composites: its nodes are inferred).
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 64).unwrap();
    let t = g.symbol("T", 1, 64).unwrap();
    let gamma = g.input("gamma", DType::F32, &[d(16)]).unwrap();
    let beta = g.input("beta", DType::F32, &[d(16)]).unwrap();
    for (name, first) in [("c", d(4)), ("s", s.into()), ("t", t.into())] {
        let x = g.input(name, DType::F32, &[first, d(16)]).unwrap();
        let ln = g.layer_norm(x, gamma, beta, 1e-5).unwrap();
        let sm = g.softmax(ln, -1).unwrap();
        let ls = g.log_softmax(sm, 0).unwrap();
        let rn = g.rms_norm(ls, gamma, 1e-6).unwrap();
        let m = g.mean(rn, &[0, 1], false).unwrap();
        g.output(&format!("{name}_m"), m).unwrap();
    }
    g.declare_equal(&t.into(), &s.into()).unwrap();
    let dg = decompose(&g).unwrap();
    // (An input keeps its declared shape.)
    for (i, n) in dg
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| n.op != Op::Input)
    {
        let (_, dtype, shape) = dg.reinfer(NodeId(i)).unwrap();
        assert_eq!((dtype, &shape), (n.dtype, &n.shape), "node {}", n.name);
    }
}

// ---- JSON ---------------------------------------------------------------------

fn rich_graph() -> Graph {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 8192).unwrap();
    let t = g.symbol("T", 1, 8192).unwrap();
    let b = g.symbol("B", 2, 64).unwrap();
    g.declare_multiple_of(b, 2).unwrap();
    g.declare_equal(&t.into(), &s.into()).unwrap();
    let x = g
        .input("x", DType::F32, &[b.into(), s.into(), d(64)])
        .unwrap();
    let y = g.input("y", DType::F16, &[t.into(), d(64)]).unwrap();
    let w = g
        .constant(
            DType::F32,
            &[d(2), d(2)],
            &[1.0, f64::NAN, f64::INFINITY, -0.5],
        )
        .unwrap();
    let f = g.full(DType::F32, &[s.into(), d(64)], 0.1).unwrap();
    let yc = g.cast(y, DType::F32).unwrap();
    let a = g.add(x, yc).unwrap();
    let a = g.add(a, f).unwrap();
    let r = g.relu(a).unwrap();
    let sc = g.muls(r, 0.125).unwrap();
    let sd = g.scalar_dim(Opcode::DivS, sc, &s.into()).unwrap();
    let sm = g.softmax(sd, -1).unwrap();
    let ls = g.log_softmax(sm, 1).unwrap();
    let gamma = g.input("gamma", DType::F32, &[d(64)]).unwrap();
    let ln = g.layer_norm(ls, gamma, gamma, 1e-3).unwrap();
    let rn = g.rms_norm(ln, gamma, 1e-6).unwrap();
    let mm = g.matmul(rn, rn, false, true).unwrap();
    let red = g.reduce(mm, ReduceOp::Min, &[-1], true).unwrap();
    let me = g.mean(mm, &[1, 2], false).unwrap();
    let rs = g.reshape(rn, &[d(-1), d(8), d(8)]).unwrap();
    let tr = g.transpose(rs, &[0, 2, 1]).unwrap();
    let sl = g.slice(tr, &[(0, 1, -1, 2), (2, 0, 4, 1)]).unwrap();
    let cc = g.concat(&[sl, sl], 2).unwrap();
    let un = g.unsqueeze(cc, &[0]).unwrap();
    let sq = g.squeeze(un, &[0]).unwrap();
    let ex = g.expand(red, &[d(-1), d(-1), s.into()]).unwrap();
    let c = g.gts(ex, 0.0).unwrap();
    let wh = g.where_(c, ex, ex).unwrap();
    let _ = w;
    g.rename(wh, "final").unwrap();
    g.output("final", wh).unwrap();
    g.output("other", sq).unwrap();
    g.output("mean", me).unwrap();
    g
}

/// Same nodes (by name: reading puts the inputs first), ops, dtypes, shapes,
/// operands, inputs, outputs and symbol facts.
fn assert_same_graph(a: &Graph, b: &Graph) {
    assert_eq!(a.nodes().len(), b.nodes().len());
    let names =
        |g: &Graph, ids: &[NodeId]| ids.iter().map(|&i| g[i].name.clone()).collect::<Vec<_>>();
    for x in a.nodes() {
        let y = &b[b
            .find(&x.name)
            .unwrap_or_else(|| panic!("no node {}", x.name))];
        assert_eq!(x.dtype, y.dtype, "{}", x.name);
        assert_eq!(x.shape, y.shape, "{}", x.name);
        assert_eq!(names(a, &x.operands), names(b, &y.operands), "{}", x.name);
        match (&x.op, &y.op) {
            (Op::Constant(u), Op::Constant(v)) => {
                assert_eq!(u.len(), v.len());
                for (p, q) in u.iter().zip(v) {
                    assert!(p == q || (p.is_nan() && q.is_nan()), "{p} vs {q}");
                }
            }
            (p, q) => assert_eq!(p, q, "{}", x.name),
        }
    }
    assert_eq!(names(a, a.inputs()), names(b, b.inputs()));
    let outs = |g: &Graph| {
        g.outputs()
            .iter()
            .map(|(n, i)| (n.clone(), g[*i].name.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(outs(a), outs(b));
    let syms = |g: &Graph| {
        g.scope()
            .symbols()
            .map(|s| (s.name(), g.scope().range(s), g.scope().multiple_of(s)))
            .collect::<Vec<_>>()
    };
    let mut sa = syms(a);
    let mut sb = syms(b);
    sa.sort();
    sb.sort();
    assert_eq!(sa, sb);
    let eqs = |g: &Graph| {
        g.scope()
            .equalities()
            .map(|(s, d)| (s, d.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(eqs(a), eqs(b));
}

#[test]
fn json_round_trip() {
    let g = rich_graph();
    let text = g.to_json();
    let back = Graph::from_json(&text, Path::new(".")).unwrap();
    assert_same_graph(&g, &back);
    assert_eq!(back.to_json(), text);
    // The decomposed graph round-trips too (scalar_dim, reductions).
    let dg = decompose(&g).unwrap();
    let back = Graph::from_json(&dg.to_json(), Path::new(".")).unwrap();
    assert_same_graph(&dg, &back);
}

#[test]
fn json_example_document() {
    let text = r#"{
      "symbols": {"S": {"min": 1, "max": 8192}},
      "inputs": [{"name": "x", "dtype": "f32", "shape": ["S", 4]},
                 {"name": "w", "dtype": "f32", "shape": [4, 2]}],
      "nodes": [
        {"name": "h", "op": "matmul", "inputs": ["x", "w"]},
        {"name": "b", "op": "constant", "dtype": "f32", "shape": [2], "values": [0.5, "-inf"]},
        {"name": "hb", "op": "add", "inputs": ["h", "b"]},
        {"name": "y", "op": "softmax", "inputs": ["hb"]},
        {"name": "z", "op": "muls", "inputs": ["y"], "scalar": 2},
        {"name": "r", "op": "reduce_sum", "inputs": ["z"], "axes": [-1], "keepdims": true},
        {"name": "s", "op": "slice", "inputs": ["x"], "ranges": [{"axis": 1, "start": 1}]}
      ],
      "outputs": ["y", {"name": "total", "node": "r"}]
    }"#;
    let g = Graph::from_json(text, Path::new(".")).unwrap();
    let y = g.find("y").unwrap();
    assert_eq!(g.shape_string(y), "[S, 2]");
    assert_eq!(g.shape_string(g.find("r").unwrap()), "[S, 1]");
    assert_eq!(g.shape_string(g.find("s").unwrap()), "[S, 3]");
    assert_eq!(g.outputs()[1].0, "total");
    assert_eq!(
        g[g.find("b").unwrap()].op,
        Op::Constant(vec![0.5, f64::NEG_INFINITY])
    );
}

fn json_err(text: &str) -> String {
    Graph::from_json(text, Path::new("."))
        .unwrap_err()
        .to_string()
}

#[test]
fn json_errors_name_node_and_field() {
    let pre = r#"{"inputs": [{"name": "x", "dtype": "f32", "shape": ["S", 4]}], "nodes": ["#;
    let post = r#"], "outputs": []}"#;
    let node = |n: &str| json_err(&format!("{pre}{n}{post}"));

    let e = node(r#"{"name": "h", "op": "matmull", "inputs": ["x", "x"]}"#);
    assert!(
        e.contains("node `h`") && e.contains("field `op`") && e.contains("unknown op `matmull`"),
        "{e}"
    );
    let e = node(r#"{"name": "h", "op": "matmul", "inputs": ["x", "x"], "trans_c": true}"#);
    assert!(
        e.contains("node `h`") && e.contains("field `trans_c`") && e.contains("unknown attribute"),
        "{e}"
    );
    assert!(e.contains("trans_b"), "{e}");
    let e = node(r#"{"name": "h", "op": "add", "inputs": ["x", "nope"]}"#);
    assert!(
        e.contains("node `h`") && e.contains("field `inputs`") && e.contains("`nope`"),
        "{e}"
    );
    let e = node(r#"{"name": "h", "op": "cast", "inputs": ["x"], "dtype": "f64"}"#);
    assert!(
        e.contains("node `h`") && e.contains("field `dtype`") && e.contains("unknown dtype `f64`"),
        "{e}"
    );
    let e = node(r#"{"name": "h", "op": "reshape", "inputs": ["x"], "shape": ["S +", 4]}"#);
    assert!(
        e.contains("node `h`")
            && e.contains("field `shape`")
            && e.contains("cannot parse dimension"),
        "{e}"
    );
    let e = node(r#"{"name": "h", "op": "matmul", "inputs": ["x", "x"], "trans_a": "yes"}"#);
    assert!(
        e.contains("node `h`") && e.contains("field `trans_a`") && e.contains("boolean"),
        "{e}"
    );
    let e = node(r#"{"name": "h", "op": "reduce_sum", "inputs": ["x"]}"#);
    assert!(
        e.contains("node `h`") && e.contains("field `axes`") && e.contains("missing"),
        "{e}"
    );
    let e = node(r#"{"op": "exp", "inputs": ["x"]}"#);
    assert!(e.contains("nodes[0]") && e.contains("field `name`"), "{e}");
    let e = node(r#"{"name": "h", "op": "adds", "inputs": ["x"]}"#);
    assert!(e.contains("field `scalar`"), "{e}");
    let e = node(r#"{"name": "h", "op": "adds", "inputs": ["x"], "scalar": "lots"}"#);
    assert!(
        e.contains("field `scalar`") && e.contains("\"lots\""),
        "{e}"
    );
    let e = node(r#"{"name": "h", "op": "input"}"#);
    assert!(e.contains("top-level `inputs`"), "{e}");
    let e = node(
        r#"{"name": "h", "op": "exp", "inputs": ["x"]}, {"name": "h", "op": "exp", "inputs": ["x"]}"#,
    );
    assert!(e.contains("`h` is used twice"), "{e}");
    // Shape errors from the builder name the JSON node.
    let e = node(r#"{"name": "bad", "op": "matmul", "inputs": ["x", "x"]}"#);
    assert!(
        e.contains("node `bad` (matmul)") && e.contains("[S, 4]"),
        "{e}"
    );
    let e = node(r#"{"name": "bad", "op": "softmax", "inputs": ["x"], "axis": 3}"#);
    assert!(
        e.contains("node `bad` (softmax)") && e.contains("axis 3"),
        "{e}"
    );
    let e = node(r#"{"name": "c", "op": "constant", "dtype": "f32", "shape": [2]}"#);
    assert!(
        e.contains("node `c`") && e.contains("`values` or `file`"),
        "{e}"
    );
    let e = node(
        r#"{"name": "c", "op": "constant", "dtype": "f32", "shape": [2], "file": "nope.npy"}"#,
    );
    assert!(
        e.contains("node `c`") && e.contains("field `file`") && e.contains("nope.npy"),
        "{e}"
    );

    // Document-level errors.
    let e = json_err(r#"{"inputs": [}"#);
    assert!(e.contains("line 1 column"), "{e}");
    let e = json_err(r#"{"inputs": [], "extra": 1}"#);
    assert!(e.contains("unknown field `extra`"), "{e}");
    let e = json_err(r#"{"inputs": [{"name": "x", "dtype": "f32"}]}"#);
    assert!(
        e.contains("input `x`") && e.contains("field `shape`"),
        "{e}"
    );
    let e = json_err(r#"{"inputs": [{"name": "x", "dtype": "int", "shape": []}]}"#);
    assert!(
        e.contains("input `x`") && e.contains("field `dtype`"),
        "{e}"
    );
    let e = json_err(r#"{"inputs": [{"name": "x", "dtype": "f32", "shape": [1.5]}]}"#);
    assert!(
        e.contains("input `x`") && e.contains("not an integer"),
        "{e}"
    );
    let e =
        json_err(r#"{"inputs": [{"name": "x", "dtype": "f32", "shape": [], "layout": "nchw"}]}"#);
    assert!(
        e.contains("input `x`") && e.contains("field `layout`"),
        "{e}"
    );
    let e = json_err(r#"{"symbols": {"S": {"min": 5, "max": 2}}}"#);
    assert!(e.contains("symbol `S`"), "{e}");
    let e = json_err(r#"{"symbols": {"S": {"lo": 5}}}"#);
    assert!(e.contains("symbol `S`") && e.contains("field `lo`"), "{e}");
    let e = json_err(r#"{"symbols": {"min": {}}}"#);
    assert!(e.contains("symbol `min`") && e.contains("reserved"), "{e}");
    let e = json_err(r#"{"outputs": ["nope"]}"#);
    assert!(e.contains("outputs[0]") && e.contains("`nope`"), "{e}");
    let e = json_err(r#"{"equal": [["S"]]}"#);
    assert!(e.contains("equal[0]"), "{e}");
    let e = json_err(r#"{"equal": [[3, 4]]}"#);
    assert!(
        e.contains("equal[0]") && e.contains("never be equal"),
        "{e}"
    );
    let e = json_err("[]");
    assert!(e.contains("graph json"), "{e}");

    // A repeated key is refused where it is (serde_json would keep the
    // last); a byte-order mark is skipped.
    let e = json_err(r#"{"symbols": {"S": {"min": 1}, "S": {"max": 5}}}"#);
    assert!(
        e.contains("`S` appears twice") && e.contains("line 1"),
        "{e}"
    );
    let e = node(r#"{"name": "h", "name": "k", "op": "exp", "inputs": ["x"]}"#);
    assert!(e.contains("`name` appears twice"), "{e}");
    let g = Graph::from_json("\u{feff}{\"inputs\": []}", Path::new(".")).unwrap();
    assert!(g.nodes().is_empty());
    let e = json_err(r#"{"symbols": {"S": {"min": -5, "max": 2}}}"#);
    assert!(
        e.contains("symbol `S`") && e.contains("field `min`") && e.contains("negative"),
        "{e}"
    );
    let e = node(r#"{"name": "h", "op": "concat", "inputs": [], "axis": 0}"#);
    assert!(
        e.contains("node `h` (concat)") && e.contains("at least 1"),
        "{e}"
    );
    let e = node(r#"{"name": "h", "op": "reshape", "inputs": ["x"], "shape": [0, -1]}"#);
    assert!(e.contains("multiply to 0"), "{e}");
}

#[test]
fn concrete_shapes_refuse_more_bytes_than_an_address_space() {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, i64::MAX).unwrap();
    let x = g
        .input("x", DType::F32, &[Dim::from(s), Dim::val(1 << 32)])
        .unwrap();
    let y = g.unary(Opcode::Neg, x).unwrap();
    g.output("y", y).unwrap();
    let at = |v: u64| {
        g.bind(&[("x", &[v, 1 << 32][..])], &Bindings::new())
            .unwrap()
    };
    assert!(g.concrete_shapes(&at(1 << 20)).is_ok());
    // 2^30 · 2^32 elements of 4 bytes: 2^64 bytes.
    let e = msg(g.concrete_shapes(&at(1 << 30)));
    assert!(
        e.contains("node `x`") && e.contains("[1073741824, 4294967296] at these bindings"),
        "{e}"
    );
}

#[test]
fn json_constants_must_be_regular_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let text = r#"{"nodes": [{"name": "w", "op": "constant", "file": "w.npy"}],
      "outputs": ["w"]}"#;
    // A directory, and (where `mkfifo` exists) a FIFO nobody writes to,
    // which reading would wait on for ever.
    std::fs::create_dir(dir.join("w.npy")).unwrap();
    let e = Graph::from_json(text, dir).unwrap_err().to_string();
    assert!(
        e.contains("node `w`") && e.contains("`w.npy` is not a regular file"),
        "{e}"
    );
    std::fs::remove_dir(dir.join("w.npy")).unwrap();
    let fifo = std::process::Command::new("mkfifo")
        .arg(dir.join("w.npy"))
        .status()
        .is_ok_and(|s| s.success());
    if fifo {
        let e = Graph::from_json(text, dir).unwrap_err().to_string();
        assert!(e.contains("`w.npy` is not a regular file"), "{e}");
    }
}

#[test]
fn json_constant_from_npy_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let t = dvm_tensor::Tensor::from_f32(&[2, 2], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    dvm_tensor::npy::write(&dir.join("w.npy"), &t).unwrap();
    let text = r#"{"inputs": [{"name": "x", "dtype": "f32", "shape": ["S", 2]}],
      "nodes": [{"name": "w", "op": "constant", "file": "w.npy"},
                {"name": "y", "op": "matmul", "inputs": ["x", "w"]}],
      "outputs": ["y"]}"#;
    std::fs::write(dir.join("g.json"), text).unwrap();
    let g = Graph::from_json_file(&dir.join("g.json")).unwrap();
    let w = g.find("w").unwrap();
    assert_eq!(g[w].op, Op::Constant(vec![1.0, 2.0, 3.0, 4.0]));
    assert_eq!(g.shape_string(w), "[2, 2]");
    // A declared dtype or shape must agree with the file.
    let bad = text.replace(r#""file": "w.npy""#, r#""file": "w.npy", "dtype": "i32""#);
    let e = Graph::from_json(&bad, dir).unwrap_err().to_string();
    assert!(
        e.contains("node `w`") && e.contains("w.npy") && e.contains("expected dtype i32"),
        "{e}"
    );
    let bad = text.replace(r#""file": "w.npy""#, r#""file": "w.npy", "shape": [4]"#);
    let e = Graph::from_json(&bad, dir).unwrap_err().to_string();
    assert!(e.contains("node `w`") && e.contains("field `shape`"), "{e}");
    let e = Graph::from_json_file(&dir.join("missing.json"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.json"), "{e}");
}

#[test]
fn sym_errors_pass_through() {
    let mut g = Graph::new();
    let e = g.symbol("1abc", 1, 2).unwrap_err();
    assert!(matches!(
        e,
        GraphError::Symbol {
            source: SymError::InvalidName { .. },
            ..
        }
    ));
    assert!(g.symbol("S", 5, 1).is_err());
    assert!(g.parse_dim("S +").is_err());
    assert_eq!(g.parse_dim("2*S").unwrap().to_string(), "2*S");
}

#[test]
fn errors_are_small() {
    // Results of builder calls carry GraphError: keep it cheap to move.
    assert!(
        std::mem::size_of::<GraphError>() <= 128,
        "{}",
        std::mem::size_of::<GraphError>()
    );
}

/// Operand lists of every length read back as what they were made of,
/// inline or on the heap, however they were made.
#[test]
fn operands_hold_any_length() {
    for n in 0..=Operands::INLINE + 3 {
        let ids: Vec<NodeId> = (0..n).map(|i| NodeId(10 + i)).collect();
        let a = Operands::from(ids.as_slice());
        let b = Operands::from(ids.clone());
        let c: Operands = ids.iter().copied().collect();
        for o in [&a, &b, &c] {
            assert_eq!(o.as_slice(), ids.as_slice());
            assert_eq!(*o, ids);
            assert_eq!(format!("{o:?}"), format!("{ids:?}"));
            assert_eq!(o.iter().count(), n);
        }
        assert!(a == b && b == c);
        let mut m = c.clone();
        for id in &mut m {
            id.0 += 1;
        }
        let shifted: Vec<NodeId> = ids.iter().map(|i| NodeId(i.0 + 1)).collect();
        assert_eq!(m, shifted);
        assert_eq!(a != m, n > 0);
    }
    assert!(Operands::default().is_empty());
}

/// Every node of generated graphs, before and after decomposition, is what
/// full shape inference makes of its operands (the builders take a quick
/// path for common operators), under a name of its own (decomposition
/// skips name lookups when no name has a dot).
#[test]
fn quick_inference_agrees_with_full_inference() {
    // Also a graph whose symbols are declared equal after its first nodes
    // (full inference then writes the representative).
    let late = |flip: bool| {
        let mut g = Graph::new();
        let s: Dim = g.symbol("S", 1, 64).unwrap().into();
        let t: Dim = g.symbol("T", 1, 64).unwrap().into();
        let x = g
            .input("x", DType::F32, &[s.clone(), Dim::from(8)])
            .unwrap();
        let y = g
            .input("y", DType::F32, &[t.clone(), Dim::from(8)])
            .unwrap();
        let (p, q) = if flip { (&t, &s) } else { (&s, &t) };
        g.declare_equal(p, q).unwrap();
        let a = g.binary(Opcode::Add, x, x).unwrap();
        let b = g.binary(Opcode::Mul, a, y).unwrap();
        let b = g.binary(Opcode::Sub, y, b).unwrap();
        g.output("b", b).unwrap();
        g
    };
    // Symbols against 1s and missing axes, and a symbol of a single value
    // (not its own canonical form: the quick path leaves it to inference).
    let settled = |single: bool| {
        let mut g = Graph::new();
        let hi = if single { 4 } else { 64 };
        let k: Dim = g.symbol("K", 4, hi).unwrap().into();
        let x = g
            .input("x", DType::F32, &[k.clone(), Dim::from(8)])
            .unwrap();
        let r = g
            .input("r", DType::F32, &[k.clone(), Dim::from(1)])
            .unwrap();
        let v = g.input("v", DType::F32, &[Dim::from(8)]).unwrap();
        let a = g.binary(Opcode::Add, x, r).unwrap();
        let b = g.binary(Opcode::Mul, r, a).unwrap();
        let b = g.binary(Opcode::Sub, v, b).unwrap();
        let b = g.binary(Opcode::Add, b, b).unwrap();
        g.output("b", b).unwrap();
        g
    };
    let graphs = (0..400)
        .map(|seed| crate::models::generated_graph(seed, None))
        .chain([late(false), late(true), settled(false), settled(true)]);
    for (seed, g) in graphs.enumerate() {
        let d = decompose(&g).unwrap();
        for graph in [&g, &d] {
            for i in 0..graph.nodes().len() {
                let id = NodeId(i);
                let node = &graph[id];
                if matches!(node.op, crate::Op::Input) {
                    continue;
                }
                assert_eq!(graph.find(&node.name), Some(id), "names are unique");
                let (op, dtype, shape) = graph.reinfer(id).unwrap();
                assert_eq!(
                    (&op, dtype, &shape),
                    (&node.op, node.dtype, &node.shape),
                    "graph {seed}, node {}",
                    node.name
                );
            }
        }
    }
}

#[test]
fn json_iota_trilu_sin() {
    let text = r#"{
      "symbols": {"S": {"min": 1, "max": 8192}},
      "inputs": [{"name": "x", "dtype": "f32", "shape": ["S", "S"]}],
      "nodes": [
        {"name": "pos", "op": "iota", "dtype": "i32", "shape": ["S", 1], "axis": -2},
        {"name": "m", "op": "trilu", "inputs": ["x"], "upper": false, "k": 0},
        {"name": "u", "op": "trilu", "inputs": ["x"]},
        {"name": "s", "op": "sin", "inputs": ["m"]}
      ],
      "outputs": ["pos", "u", "s"]
    }"#;
    let g = Graph::from_json(text, Path::new(".")).unwrap();
    let pos = g.find("pos").unwrap();
    assert_eq!(g[pos].op, Op::Iota { axis: 0 });
    assert_eq!(g.shape_string(pos), "[S, 1]");
    assert_eq!(g[pos].dtype, DType::I32);
    let u = g.find("u").unwrap();
    assert_eq!(g[u].op, Op::Trilu { upper: true, k: 0 });
    let back = Graph::from_json(&g.to_json(), Path::new(".")).unwrap();
    assert_same_graph(&g, &back);
    // The decomposition (iota, sub, comparison, where) round-trips too.
    let dg = decompose(&g).unwrap();
    assert!(dg.nodes().iter().all(|n| !matches!(n.op, Op::Trilu { .. })));
    let back = Graph::from_json(&dg.to_json(), Path::new(".")).unwrap();
    assert_same_graph(&dg, &back);
    let e = json_err(
        r#"{"inputs": [], "nodes": [{"name": "i", "op": "iota", "dtype": "i32", "shape": [3]}], "outputs": ["i"]}"#,
    );
    assert!(e.contains("axis"), "{e}");
}

/// The benchmark workloads of `models` run on the reference at S = 3 with
/// the shapes and values their documentation states.
#[test]
fn benchmark_workloads() {
    use crate::models;
    use dvm_tensor::Tensor;
    let t = |shape: &[u64]| {
        let n: u64 = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|i| ((i * 7 % 11) as f32 - 5.0) / 8.0).collect();
        Tensor::from_f32(shape, &v).unwrap()
    };
    let run = |g: &Graph, inputs: &[(&str, &[u64])]| {
        let ts: Vec<(&str, Tensor)> = inputs.iter().map(|(n, s)| (*n, t(s))).collect();
        let refs: Vec<(&str, &Tensor)> = ts.iter().map(|(n, t)| (*n, t)).collect();
        let mut out = reference::run(g, &refs, &Bindings::new()).unwrap();
        assert_eq!(out.len(), 1);
        out.remove(0).1
    };
    let (h, sx) = (4, [3u64, 4]);
    let lin = [("x", &sx[..]), ("w", &[4u64, 4][..]), ("b", &[4u64][..])];
    for g in [models::gelu_linear(h, 64), models::matmul_bias_relu(h, 64)] {
        assert_eq!(run(&g.unwrap(), &lin).shape(), &[3, 4]);
    }
    let relu = run(&models::matmul_bias_relu(h, 64).unwrap(), &lin);
    assert!(relu.to_f64_vec().iter().all(|&v| v >= 0.0));
    let sm = run(&models::softmax_rows(h, 64).unwrap(), &[("x", &sx)]);
    for row in sm.to_f64_vec().chunks(4) {
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-6);
    }
    let rs = run(&models::row_sum(h, 64).unwrap(), &[("x", &sx)]);
    let x = t(&sx).to_f64_vec();
    let want: Vec<f64> = x.chunks(4).map(|r| r.iter().sum()).collect();
    assert_eq!(rs.shape(), &[3]);
    for (a, b) in rs.to_f64_vec().iter().zip(&want) {
        assert!((a - b).abs() < 1e-5, "{a} against {b}");
    }
    let v = [4u64];
    let ln = run(
        &models::layer_norm_rows(h, 64).unwrap(),
        &[("x", &sx), ("g", &v), ("b", &v)],
    );
    let aln = run(
        &models::add_layer_norm(h, 64).unwrap(),
        &[("x", &sx), ("r", &sx), ("g", &v), ("b", &v)],
    );
    assert_eq!((ln.shape(), aln.shape()), (&[3u64, 4][..], &[3u64, 4][..]));
    let qkv = [2u64, 3, 8];
    let att = run(
        &models::attention(2, 8, 64).unwrap(),
        &[("q", &qkv), ("k", &qkv), ("v", &qkv)],
    );
    assert_eq!(att.shape(), &qkv);
    assert!(models::softmax_rows(h, 0).is_err());
}

#[test]
fn gather_shapes_json_and_errors() {
    let mut g = Graph::new();
    let b = g.symbol("B", 1, 64).unwrap();
    let s = g.symbol("S", 1, 4096).unwrap();
    let w = g.input("w", DType::F32, &[d(100), d(16)]).unwrap();
    let t = g
        .input("t", DType::I64, &[Dim::from(b), Dim::from(s)])
        .unwrap();
    let e = g.gather(w, t, 0).unwrap();
    assert_eq!(g.shape_string(e), "[B, S, 16]");
    assert_eq!(g[e].dtype, DType::F32);
    let x = g.input("x", DType::I8, &[d(2), d(5), d(3)]).unwrap();
    let one = g.input("one", DType::I32, &[]).unwrap();
    let y = g.gather(x, one, -2).unwrap();
    assert_eq!(g[y].op, Op::Gather { axis: 1 });
    assert_eq!(g.shape_string(y), "[2, 3]");
    assert_eq!(g[y].dtype, DType::I8);
    // Errors: float indices, an axis out of range, a scalar table.
    let f = g.input("f", DType::F32, &[d(2)]).unwrap();
    let err = g.gather(w, f, 0).unwrap_err().to_string();
    assert!(err.contains("i32 or i64"), "{err}");
    let err = g.gather(w, t, 2).unwrap_err().to_string();
    assert!(err.contains("out of range"), "{err}");
    let err = g.gather(one, t, 0).unwrap_err().to_string();
    assert!(err.contains("out of range"), "{err}");

    let text = r#"{
      "symbols": {"S": {"min": 1, "max": 64}},
      "inputs": [{"name": "w", "dtype": "f32", "shape": [10, 4]},
                 {"name": "ids", "dtype": "i32", "shape": [2, "S"]}],
      "nodes": [
        {"name": "e", "op": "gather", "inputs": ["w", "ids"]},
        {"name": "c", "op": "gather", "inputs": ["w", "ids"], "axis": -1}
      ],
      "outputs": ["e", "c"]
    }"#;
    let g = Graph::from_json(text, Path::new(".")).unwrap();
    let e = g.find("e").unwrap();
    assert_eq!(g[e].op, Op::Gather { axis: 0 });
    assert_eq!(g.shape_string(e), "[2, S, 4]");
    let c = g.find("c").unwrap();
    assert_eq!(g[c].op, Op::Gather { axis: 1 });
    assert_eq!(g.shape_string(c), "[10, 2, S]");
    let back = Graph::from_json(&g.to_json(), Path::new(".")).unwrap();
    assert_same_graph(&g, &back);
    let err = json_err(
        r#"{"inputs": [{"name": "w", "dtype": "f32", "shape": [3]}],
            "nodes": [{"name": "g", "op": "gather", "inputs": ["w", "w"]}], "outputs": ["g"]}"#,
    );
    assert!(err.contains("i32 or i64"), "{err}");
    let err = json_err(
        r#"{"inputs": [{"name": "w", "dtype": "f32", "shape": [3]}],
            "nodes": [{"name": "g", "op": "gather", "inputs": ["w", "w"], "axes": [0]}], "outputs": ["g"]}"#,
    );
    assert!(err.contains("axes"), "{err}");
}

#[test]
fn json_conv2d_and_pools() {
    let text = r#"{
      "symbols": {"N": {"min": 1, "max": 64}},
      "inputs": [{"name": "x", "dtype": "f32", "shape": ["N", 4, 9, 8]}],
      "nodes": [
        {"name": "w", "op": "constant", "dtype": "f32", "shape": [6, 2, 3, 3], "values": [0.5]},
        {"name": "b", "op": "constant", "dtype": "f32", "shape": [6], "values": [1]},
        {"name": "c", "op": "conv2d", "inputs": ["x", "w", "b"], "strides": [2, 1],
         "pads": [1, 1, 1, 1], "groups": 2},
        {"name": "m", "op": "max_pool2d", "inputs": ["c"], "kernel": [2, 2], "strides": [2, 2]},
        {"name": "a", "op": "avg_pool2d", "inputs": ["x"], "kernel": [3, 3], "pads": [1, 1, 1, 1],
         "dilations": [1, 2], "count_include_pad": true}
      ],
      "outputs": ["m", "a"]
    }"#;
    let g = Graph::from_json(text, Path::new(".")).unwrap();
    let c = g.find("c").unwrap();
    assert_eq!(
        g[c].op,
        Op::Conv2d(Box::new(crate::Conv2d {
            strides: [2, 1],
            pads: [1, 1, 1, 1],
            dilations: [1, 1],
            groups: 2,
        }))
    );
    assert_eq!(g.shape_string(c), "[N, 6, 5, 8]");
    assert_eq!(g.shape_string(g.find("m").unwrap()), "[N, 6, 2, 4]");
    assert_eq!(g.shape_string(g.find("a").unwrap()), "[N, 4, 9, 6]");
    let back = Graph::from_json(&g.to_json(), Path::new(".")).unwrap();
    assert_same_graph(&g, &back);
    let dg = decompose(&g).unwrap();
    assert!(dg.nodes().iter().all(|n| !n.op.is_composite()));
    let back = Graph::from_json(&dg.to_json(), Path::new(".")).unwrap();
    assert_same_graph(&dg, &back);
    for (node, want) in [
        (
            r#"{"name": "p", "op": "max_pool2d", "inputs": ["x"], "kernel": [2]}"#,
            "kernel",
        ),
        (
            r#"{"name": "p", "op": "max_pool2d", "inputs": ["x"]}"#,
            "kernel",
        ),
        (
            r#"{"name": "p", "op": "avg_pool2d", "inputs": ["x"], "kernel": [2, 2], "pads": [0, -1, 0, 0]}"#,
            "pads",
        ),
        (
            r#"{"name": "p", "op": "max_pool2d", "inputs": ["x"], "kernel": [2, 2], "strides": [0, 1]}"#,
            "strides",
        ),
        (
            r#"{"name": "p", "op": "conv2d", "inputs": ["x", "x"], "groups": 0}"#,
            "groups",
        ),
        (
            r#"{"name": "p", "op": "max_pool2d", "inputs": ["x"], "kernel": [2, 2], "groups": 1}"#,
            "groups",
        ),
    ] {
        let text = format!(
            r#"{{"inputs": [{{"name": "x", "dtype": "f32", "shape": [1, 1, 4, 4]}}], "nodes": [{node}], "outputs": ["p"]}}"#
        );
        let e = json_err(&text);
        assert!(e.contains(want), "{want}: {e}");
    }
}
