//! Unit tests of the fuser: symbolic shape comparisons, group validation,
//! rule outcomes and rejection reasons, the consistency check, the unit
//! order, stacking helpers and sequence packing.

use dvm_isa::{DType, Opcode};

use super::legality::{broadcasts_into, dim_eq, role_of, same_shape, validate, Facts, Users};
use super::*;
use dvm_graph::{decompose, decompose_with_spans, Graph, NodeId};
use dvm_sym::Dim;

fn c(v: i64) -> Dim {
    Dim::from(v)
}

fn seq(width: i64) -> (Graph, NodeId, Dim) {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 4096).unwrap();
    let x = g.input("x", DType::F32, &[s.into(), c(width)]).unwrap();
    (g, x, s.into())
}

fn plan(g: &Graph) -> FusionPlan {
    let (d, spans) = dvm_graph::decompose_with_spans(g).unwrap();
    FusionPlan::with_composites(&d, &FuseOptions::default(), &spans).unwrap()
}

fn names(g: &Graph, nodes: &[NodeId]) -> Vec<String> {
    nodes.iter().map(|n| g[*n].name.to_string()).collect()
}

#[test]
fn symbolic_dimensions_compare_for_every_binding() {
    let mut g = Graph::new();
    let s: Dim = g.symbol("S", 1, 4096).unwrap().into();
    let t: Dim = g.symbol("T", 1, 4096).unwrap().into();
    let short: Dim = g.symbol("K", 1, 8).unwrap().into();
    let sc = g.scope().clone();
    assert!(dim_eq(&sc, &s, &s));
    assert!(!dim_eq(&sc, &s, &t), "S and T agree only for some bindings");
    assert!(!dim_eq(&sc, &s, &s.min(&c(8))));
    // min(K, 8) is K for every K the range allows.
    assert!(dim_eq(&sc, &short, &short.min(&c(8))));
    assert!(broadcasts_into(&sc, &[c(1), c(64)], &[s.clone(), c(64)]).is_ok());
    assert!(broadcasts_into(&sc, &[c(64)], &[s.clone(), c(64)]).is_ok());
    // S might be 1 or 64 but is not provably either.
    assert!(broadcasts_into(&sc, std::slice::from_ref(&s), &[c(64)]).is_err());
    assert!(same_shape(&sc, &[s.clone(), c(4)], &[t.clone(), c(4)]).is_err());
    g.declare_equal(&s, &t).unwrap();
    assert!(same_shape(g.scope(), &[s, c(4)], &[t, c(4)]).is_ok());
}

/// Validates `members` of `g` as one group.
fn check(g: &Graph, members: &[NodeId]) -> Result<(FusionKind, Vec<Dim>), Reason> {
    let users = Users::new(g);
    let mut is_output = vec![false; g.nodes().len()];
    for (_, id) in g.outputs() {
        is_output[id.0] = true;
    }
    let roles: Vec<Role> = (0..g.nodes().len())
        .map(|i| role_of(g, NodeId(i)))
        .collect();
    let facts = Facts {
        graph: g,
        users: &users,
        is_output: &is_output,
        roles: &roles,
    };
    let mut nodes = members.to_vec();
    nodes.sort_unstable();
    let member = |n: NodeId| nodes.contains(&n);
    validate(&facts, &nodes, &member)
}

#[test]
fn validation_rejects_malformed_groups_with_a_reason() {
    let (mut g, x, _) = seq(32);
    let w = g.input("w", DType::F32, &[c(32), c(32)]).unwrap();
    let m = g.matmul(x, w, false, false).unwrap();
    let m2 = g.matmul(m, w, false, false).unwrap();
    let r = g.sum(m, &[-1], true).unwrap();
    g.output("m2", m2).unwrap();
    g.output("r", r).unwrap();
    assert_eq!(check(&g, &[m, r]), Err(Reason::MatmulReduce));
    assert_eq!(check(&g, &[m, m2]), Err(Reason::TwoMatmuls));

    // Row sums without keepdims meet the rows: NumPy aligns them with the
    // columns, not with the reduced axis.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[c(32), c(32)]).unwrap();
    let s = g.sum(x, &[1], false).unwrap(); // [32], one per row
    let y = g.binary(Opcode::Add, x, s).unwrap(); // y[i, j] = x[i, j] + s[j]
    g.output("y", y).unwrap();
    assert!(matches!(
        check(&g, &[s, y]),
        Err(Reason::DroppedAxis { .. })
    ));
    // Column sums without keepdims do broadcast back along their axis.
    let (mut g, x, _) = seq(32);
    let s = g.sum(x, &[0], false).unwrap(); // [32]
    let y = g.binary(Opcode::Sub, x, s).unwrap();
    g.output("y", y).unwrap();
    assert!(matches!(
        check(&g, &[s, y]),
        Ok((FusionKind::Reduce { axis: 0 }, _))
    ));

    // A broadcast value stored from the larger space.
    let (mut g, x, _) = seq(32);
    let b = g.input("b", DType::F32, &[c(32)]).unwrap();
    let b2 = g.scalar(Opcode::MulS, b, 2.0).unwrap(); // [32], also an output
    let y = g.binary(Opcode::Add, x, b2).unwrap();
    g.output("y", y).unwrap();
    g.output("b2", b2).unwrap();
    assert!(matches!(
        check(&g, &[b2, y]),
        Err(Reason::BroadcastStore { .. })
    ));

    // Reducing a reduced value.
    let (mut g, x, _) = seq(32);
    let r1 = g.reduce(x, dvm_graph::ReduceOp::Max, &[-1], true).unwrap();
    let r2 = g.sum(r1, &[-1], true).unwrap();
    g.output("r2", r2).unwrap();
    assert!(matches!(
        check(&g, &[r1, r2]),
        Err(Reason::SpaceMismatch { .. })
    ));

    // A well-formed reduce group: space [S, 32], axis 1.
    let (mut g, x, s) = seq(32);
    let sm = g.softmax(x, -1).unwrap();
    g.output("y", sm).unwrap();
    let d = decompose(&g).unwrap();
    let all: Vec<NodeId> = (1..d.nodes().len()).map(NodeId).collect();
    assert_eq!(
        check(&d, &all),
        Ok((FusionKind::Reduce { axis: 1 }, vec![s, c(32)]))
    );
}

/// e = exp(x); t = eᵀ (a view); f = e + t: fusing exp into the add would
/// need t before the group ends. Returns the graph and e, t, f.
fn view_cycle_graph() -> (Graph, [NodeId; 3]) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[c(16), c(16)]).unwrap();
    let e = g.unary(Opcode::Exp, x).unwrap();
    let t = g.transpose(e, &[1, 0]).unwrap();
    let f = g.binary(Opcode::Add, e, t).unwrap();
    g.output("f", f).unwrap();
    (g, [e, t, f])
}

#[test]
fn a_merge_through_a_view_would_be_a_cycle() {
    let (g, [e, t, f]) = view_cycle_graph();
    let p = plan(&g);
    assert_eq!(p.groups.len(), 2);
    let r = &p.rejections[0];
    assert_eq!((r.a, r.b), (e, f));
    assert!(
        matches!(&r.reason, Reason::Cycle { via } if *via == g[t].name),
        "{}",
        r.reason
    );
}

#[test]
fn rules_build_the_expected_groups() {
    // softmax then a scaled residual: one reduce group with its epilogue.
    let (mut g, x, _) = seq(64);
    let sm = g.softmax(x, -1).unwrap();
    let y = g.binary(Opcode::Add, sm, x).unwrap();
    let y = g.scalar(Opcode::MulS, y, 0.5).unwrap();
    g.output("y", y).unwrap();
    let p = plan(&g);
    assert_eq!(p.groups.len(), 1);
    assert_eq!(p.groups[0].kind, FusionKind::Reduce { axis: 1 });
    let rules: Vec<&str> = p.applied.iter().map(|(r, _)| *r).collect();
    assert!(rules.contains(&"elementwise-chain"));
    assert!(rules.contains(&"reduce-epilogue"));

    // Two independent exps of one input: siblings, one group, two outputs.
    let (mut g, x, _) = seq(64);
    let a = g.unary(Opcode::Exp, x).unwrap();
    let b = g.unary(Opcode::Neg, x).unwrap();
    g.output("a", a).unwrap();
    g.output("b", b).unwrap();
    let p = plan(&g);
    assert_eq!(p.groups.len(), 1);
    assert_eq!(p.applied[0].0, "siblings");

    // Fusion off: one group per operator, no stacks, no rewrites.
    let p = FusionPlan::unfused(&g);
    assert_eq!(p.groups.len(), 2);
    assert!(p.stacks.is_empty() && p.applied.is_empty());
}

#[test]
fn the_unit_order_respects_every_edge() {
    let cfg = dvm_graph::models::EncoderConfig {
        hidden: 32,
        heads: 2,
        ffn: 64,
        max_len: 64,
    };
    let g = decompose(&dvm_graph::models::encoder_block(&cfg).unwrap()).unwrap();
    let p = FusionPlan::new(&g, &FuseOptions::default()).unwrap();
    let unit = |n: NodeId| match p.owner[n.0] {
        None => Unit::Node(n),
        Some(c) => match p.stacks.iter().position(|s| s.contains(&c)) {
            Some(s) => Unit::Stack(s),
            None => Unit::Group(c),
        },
    };
    let pos = |u: Unit| p.order.iter().position(|&v| v == u).unwrap();
    for (i, node) in g.nodes().iter().enumerate() {
        for o in &node.operands {
            let (a, b) = (unit(*o), unit(NodeId(i)));
            assert!(
                a == b || pos(a) < pos(b),
                "{} before {}",
                g[*o].name,
                node.name
            );
        }
    }
    // q, k, v projections stacked.
    assert_eq!(p.stacks.len(), 1);
    assert_eq!(p.stacks[0].len(), 3);
}

#[test]
fn the_consistency_check_catches_a_bad_rewrite() {
    let (mut g, x, _) = seq(32);
    let w = g.input("w", DType::F32, &[c(32), c(32)]).unwrap();
    let m = g.matmul(x, w, false, false).unwrap();
    let r = g.sum(m, &[-1], true).unwrap();
    g.output("r", r).unwrap();
    let mut st = State::new(&g, FuseOptions::default(), &[]);
    let (a, b) = (st.owner(m).unwrap(), st.owner(r).unwrap());
    assert_eq!(st.try_merge(a, b), Err(Reason::MatmulReduce));
    // Force the merge anyway, with a wrong kind: the whole-state check
    // reports the rule that did it.
    let bogus = FusionGroup {
        kind: FusionKind::Elementwise,
        nodes: vec![m, r],
        space: Vec::new(),
    };
    let created = st.apply(Patch::Merge {
        a,
        b,
        merged: bogus,
    });
    let err = st.check_all("bogus-rule").unwrap_err();
    assert_eq!(err.rule, "bogus-rule");
    assert!(err.what.contains("invalid"), "{err}");
    assert!(created.is_some());
}

#[test]
fn rejection_names_are_readable() {
    let g = {
        let mut g = Graph::new();
        let s = g.symbol("S", 1, 64).unwrap();
        let t = g.symbol("T", 1, 64).unwrap();
        let x = g.input("x", DType::F32, &[s.into(), c(8)]).unwrap();
        let y = g.input("y", DType::F32, &[t.into(), c(8)]).unwrap();
        let z = g.input("z", DType::F32, &[c(8)]).unwrap();
        let a = g.binary(Opcode::Add, x, z).unwrap();
        let b = g.binary(Opcode::Add, y, z).unwrap();
        g.output("a", a).unwrap();
        g.output("b", b).unwrap();
        g
    };
    let p = FusionPlan::new(&g, &FuseOptions::default()).unwrap();
    let r = p.rejections.iter().find(|r| r.rule == "siblings").unwrap();
    assert_eq!(r.via, g.find("z"));
    let text = r.reason.to_string();
    assert!(
        text.contains("not provably equal for every binding"),
        "{text}"
    );
    assert_eq!(names(&g, &[r.a, r.b]).len(), 2);
    // They still share one parallel launch: stacking needs no equal shapes.
    assert_eq!(p.stacks, vec![vec![0, 1]]);
}

/// x → p = exp(x) → b = neg(p); x → a = relu(x) → q = a + x. With p and q
/// one group X = {p, q} (siblings through x), a reaches b through X: X is
/// entered at q (after a) and left from p (before b), so node ids alone
/// never see the path a → X → b, and merging a with b would be a cycle.
fn reentry_graph() -> (Graph, [NodeId; 4]) {
    let (mut g, x, _) = seq(8);
    let p = g.unary(Opcode::Exp, x).unwrap();
    let b = g.unary(Opcode::Neg, p).unwrap();
    let a = g.unary(Opcode::Relu, x).unwrap();
    let q = g.binary(Opcode::Add, a, x).unwrap();
    g.output("b", b).unwrap();
    g.output("q", q).unwrap();
    (g, [p, b, a, q])
}

#[test]
fn a_path_reentering_a_group_at_a_lower_id_is_a_cycle() {
    let (g, [p, b, a, q]) = reentry_graph();
    let mut st = State::new(&g, FuseOptions::default(), &[]);
    let (cp, cq) = (st.owner(p).unwrap(), st.owner(q).unwrap());
    let merged = st.try_merge(cp, cq).unwrap();
    let x = st
        .apply(Patch::Merge {
            a: cp,
            b: cq,
            merged,
        })
        .unwrap();
    st.check("test", Some(x)).unwrap();
    let (ca, cb) = (st.owner(a).unwrap(), st.owner(b).unwrap());
    assert!(st.path_between(ca, cb, false).is_some());
    assert!(
        matches!(st.try_merge(ca, cb), Err(Reason::Cycle { .. })),
        "{:?}",
        st.try_merge(ca, cb)
    );
    // The same through a stack: p and q stacked instead of merged.
    let mut st = State::new(&g, FuseOptions::default(), &[]);
    let (cp, cq) = (st.owner(p).unwrap(), st.owner(q).unwrap());
    assert!(st
        .apply(Patch::Stack {
            members: vec![cp, cq]
        })
        .is_none());
    st.check("test", None).unwrap();
    let (ca, cb) = (st.owner(a).unwrap(), st.owner(b).unwrap());
    assert!(matches!(st.try_merge(ca, cb), Err(Reason::Cycle { .. })));
    // A forced merge anyway is caught by the consistency check.
    let bogus = FusionGroup {
        kind: FusionKind::Elementwise,
        nodes: vec![b, a],
        space: Vec::new(),
    };
    let c = st.apply(Patch::Merge {
        a: ca,
        b: cb,
        merged: bogus,
    });
    let err = st.check("bogus-rule", c).unwrap_err();
    assert!(err.what.contains("cycle"), "{err}");
}

#[test]
fn groups_entered_late_and_left_early_fuse_without_a_fallback() {
    let (g, _) = reentry_graph();
    for opts in [
        FuseOptions::default(),
        FuseOptions {
            reasons: false,
            ..FuseOptions::default()
        },
        FuseOptions {
            stack: false,
            ..FuseOptions::default()
        },
    ] {
        let p = FusionPlan::new(&decompose(&g).unwrap(), &opts).unwrap();
        assert!(p.kernel_groups() < 4, "{:?}", p.groups);
    }
}

/// A random graph of element-wise, reduce, matmul and view operators over
/// `[S, 8]`-like shapes, from a list of choices.
fn random_graph(steps: &[(u8, u8, u8)]) -> Graph {
    let (mut g, x, _) = seq(8);
    let y = g.input("y", DType::F32, &[c(8)]).unwrap();
    let w = g.input("w", DType::F32, &[c(8), c(8)]).unwrap();
    let mut pool = vec![x, y, w];
    for (i, &(op, i0, i1)) in steps.iter().enumerate() {
        let a = pool[pool.len() - 1 - (i0 as usize % pool.len().min(6))];
        let b = pool[pool.len() - 1 - (i1 as usize % pool.len().min(6))];
        let r = match op % 10 {
            0 => g.unary(Opcode::Exp, a),
            1 => g.unary(Opcode::Neg, a),
            2 | 3 => g.binary(Opcode::Add, a, b),
            4 => g.binary(Opcode::Mul, a, b),
            5 => g.sum(a, &[-1], true),
            6 => g.softmax(a, -1),
            7 => g.matmul(a, b, false, false),
            8 => g.transpose(a, &[1, 0]),
            _ => g.scalar(Opcode::MulS, a, 0.5),
        };
        if let Ok(n) = r {
            pool.push(n);
            if op >= 200 {
                let _ = g.output(&format!("o{i}"), n);
            }
        }
    }
    g.output("out", *pool.last().unwrap()).unwrap();
    g
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    /// The pass never makes a plan that fails its own consistency check.
    #[test]
    fn fusion_plans_of_random_graphs_are_consistent(
        steps in proptest::collection::vec((0u8..=255, 0u8..6, 0u8..6), 1..40),
        max_nodes in 2usize..64,
        stack in proptest::bool::ANY,
    ) {
        let (g, spans) = dvm_graph::decompose_with_spans(&random_graph(&steps)).unwrap();
        for (reasons, composites) in [(false, false), (true, false), (false, true), (true, true)] {
            let opts = FuseOptions { max_nodes, stack, reasons, composites, ..FuseOptions::default() };
            let p = FusionPlan::with_composites(&g, &opts, &spans);
            proptest::prop_assert!(p.is_ok(), "{:?}", p.err());
            // A softmax within the node limit is taken whole: one group.
            if let (Ok(p), true) = (p, composites) {
                for r in spans.iter().filter(|r| r.len() <= max_nodes) {
                    let first = p.owner[r.start];
                    proptest::prop_assert!(first.is_some() && r.clone().all(|i| p.owner[i] == first));
                }
            }
        }
    }
}

/// A generated graph with every composite the decomposition knows (for
/// comparing plans across changes to the pass): `seed` drives a small LCG.
fn generated_graph(seed: u64) -> Graph {
    dvm_graph::models::generated_graph(seed, None)
}

/// A pass in the memory an earlier pass left ([`FusionPlan::with_scratch`],
/// as the eager API runs one decision after another) makes the same plan as
/// a pass from scratch: generated graphs of every size, one scratch for all
/// of them, with and without reasons and stacking.
#[test]
fn a_reused_scratch_gives_the_same_plans() {
    let mut scratch = FuseScratch::default();
    for seed in 0..400 {
        let g = generated_graph(seed);
        let (d, spans) = dvm_graph::decompose_with_spans(&g).unwrap();
        let opts = FuseOptions {
            reasons: seed % 3 == 0,
            stack: seed % 5 != 0,
            max_nodes: if seed % 7 == 0 { 12 } else { 64 },
            ..FuseOptions::default()
        };
        let fresh = FusionPlan::with_composites(&d, &opts, &spans).unwrap();
        let reused = FusionPlan::with_scratch(&d, &opts, &spans, &mut scratch).unwrap();
        assert_eq!(format!("{fresh:?}"), format!("{reused:?}"), "graph {seed}");
    }
}

/// An input read by more groups than `pattern::DEPENDENCE_READERS`: the
/// siblings rule leaves out the pairs that depend on each other through
/// other units (debug builds check each against the cycle search) and
/// still merges the independent ones: one layer after another (a chain
/// through softmaxes and matmuls), and beside it branches that share only
/// the inputs.
#[test]
fn siblings_of_a_widely_read_input_skip_dependent_pairs_and_merge_the_rest() {
    let (mut g, x, mask) = dvm_graph::models::masked_layers(20);
    let mut branches = Vec::new();
    for i in 0..6 {
        let e = g.unary(Opcode::Exp, x).unwrap();
        let a = g.binary(Opcode::Add, e, mask).unwrap();
        let t = g.unary(Opcode::Tanh, a).unwrap();
        g.output(&format!("b{i}"), t).unwrap();
        branches.push(t);
    }
    let (d, spans) = decompose_with_spans(&g).unwrap();
    assert!(d.nodes().iter().any(|n| n.name == "mask"));
    let p = FusionPlan::with_composites(&d, &FuseOptions::default(), &spans).unwrap();
    let owner_of = |name: &str| {
        let id = d.find(name).unwrap();
        p.owner[id.0].unwrap()
    };
    // The six independent branches read `x` and `mask`: each was merged
    // as a sibling (its group holds more than its own three nodes).
    for &t in &branches {
        let c = owner_of(&g[t].name);
        assert!(p.groups[c].nodes.len() > 3, "{:?}", p.groups);
    }
    // Each layer's softmax stays its own group: the layers depend on each
    // other through the matmuls.
    let softmaxes: std::collections::HashSet<usize> = d
        .nodes()
        .iter()
        .filter(|n| n.name.starts_with("softmax") && !n.name.contains('.'))
        .map(|n| owner_of(&n.name))
        .collect();
    assert_eq!(softmaxes.len(), 20);
}

/// The eager API's options: no reasons, the one-pass sweep.
fn sweep_opts() -> FuseOptions {
    FuseOptions::eager()
}

/// The groups of a plan as (kind, member names), and its stacks as sets
/// of groups' first members: what two passes must agree on.
type Grouping = (Vec<(FusionKind, Vec<String>)>, Vec<Vec<String>>);

fn grouping(g: &Graph, p: &FusionPlan) -> Grouping {
    let mut groups: Vec<_> = p
        .groups
        .iter()
        .map(|cl| (cl.kind.clone(), names(g, &cl.nodes)))
        .collect();
    groups.sort_by(|a, b| a.1.cmp(&b.1));
    let mut stacks: Vec<Vec<String>> = p
        .stacks
        .iter()
        .map(|s| {
            let mut v: Vec<String> = s
                .iter()
                .map(|&c| g[p.groups[c].nodes[0]].name.to_string())
                .collect();
            v.sort();
            v
        })
        .collect();
    stacks.sort();
    (groups, stacks)
}

/// The benchmark's decision window in its ten rotations, then a small
/// encoder block.
fn windows_and_encoder() -> Vec<Graph> {
    let cfg = dvm_graph::models::EncoderConfig {
        hidden: 32,
        heads: 2,
        ffn: 64,
        max_len: 64,
    };
    let mut graphs: Vec<Graph> = (0..10)
        .map(|k| dvm_graph::models::mixed_window(k).unwrap())
        .collect();
    graphs.push(dvm_graph::models::encoder_block(&cfg).unwrap());
    graphs
}

#[test]
fn the_sweep_groups_the_eager_window_and_the_encoder_as_the_rules_do() {
    let graphs = windows_and_encoder();
    for (k, g) in graphs.iter().enumerate() {
        let (d, spans) = decompose_with_spans(g).unwrap();
        let rules = FusionPlan::with_composites(&d, &FuseOptions::default(), &spans).unwrap();
        let swept = FusionPlan::with_composites(&d, &sweep_opts(), &spans).unwrap();
        swept.verify(&d).unwrap();
        assert!(swept.rejections.is_empty());
        assert_eq!(grouping(&d, &swept), grouping(&d, &rules), "graph {k}");
    }
    // The window: per cycle a matmul and one reduce group with everything
    // else (bias, GELU and residual as the layernorm's prologue).
    let (d, spans) = decompose_with_spans(&graphs[0]).unwrap();
    let p = FusionPlan::with_composites(&d, &sweep_opts(), &spans).unwrap();
    let kinds: Vec<&FusionKind> = p.groups.iter().map(|c| &c.kind).collect();
    assert_eq!(kinds.len(), 6, "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| ***k == FusionKind::Matmul).count(),
        3
    );
}

#[test]
fn the_sweep_never_closes_a_cycle() {
    // Through a view: exp cannot join the add that reads its transpose.
    let (g, [e, _, f]) = view_cycle_graph();
    let p = FusionPlan::new(&g, &sweep_opts()).unwrap();
    p.verify(&g).unwrap();
    assert_ne!(p.owner[e.0], p.owner[f.0]);
    // Through a matmul: a residual add after a projection of a norm's
    // output cannot join the norm.
    let (mut g, x, _) = seq(16);
    let w = g.input("w", DType::F32, &[c(16), c(16)]).unwrap();
    let sm = g.softmax(x, -1).unwrap();
    let h = g.matmul(sm, w, false, false).unwrap();
    let y = g.binary(Opcode::Add, sm, h).unwrap();
    g.output("y", y).unwrap();
    let (d, spans) = decompose_with_spans(&g).unwrap();
    let p = FusionPlan::with_composites(&d, &sweep_opts(), &spans).unwrap();
    p.verify(&d).unwrap();
    let (sm_out, mm, add) = (
        NodeId(spans[0].end - 1),
        NodeId(spans[0].end),
        NodeId(d.nodes().len() - 1),
    );
    assert_eq!(d[mm].op, g[h].op);
    assert_ne!(p.owner[sm_out.0], p.owner[add.0]);
    // The add is the matmul's epilogue instead.
    assert_eq!(p.owner[mm.0], p.owner[add.0]);
    // A path that leaves a group and enters it again at a lower id (the
    // plan check orders the units: a cycle would fail it).
    let (g, _) = reentry_graph();
    for stack in [false, true] {
        let p = FusionPlan::new(
            &g,
            &FuseOptions {
                stack,
                ..sweep_opts()
            },
        )
        .unwrap();
        p.verify(&g).unwrap();
        assert!(p.kernel_groups() < 4, "{:?}", p.groups);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    /// The sweep's plans of random graphs pass the plan check (groups
    /// valid, limits kept, stacks independent, the order topological),
    /// as the rules' do.
    #[test]
    fn sweep_plans_of_random_graphs_verify(
        steps in proptest::collection::vec((0u8..=255, 0u8..6, 0u8..6), 1..40),
        max_nodes in 2usize..64,
        max_params in 3usize..12,
        stack in proptest::bool::ANY,
        composites in proptest::bool::ANY,
    ) {
        let (g, spans) = dvm_graph::decompose_with_spans(&random_graph(&steps)).unwrap();
        for sweep in [false, true] {
            let opts = FuseOptions {
                max_nodes, max_params, stack, composites, sweep, reasons: false,
                ..FuseOptions::default()
            };
            let p = FusionPlan::with_composites(&g, &opts, &spans);
            proptest::prop_assert!(p.is_ok(), "{:?}", p.err());
            let p = p.unwrap();
            let checked = p.verify(&g);
            proptest::prop_assert!(checked.is_ok(), "sweep {}: {:?}", sweep, checked);
        }
    }
}

#[test]
fn a_graph_beyond_the_sweeps_units_goes_to_the_rules() {
    // A chain of matmuls: one unit each, more than a set numbers.
    let mut g = Graph::new();
    let w = g.input("w", DType::F32, &[c(4), c(4)]).unwrap();
    let mut x = g.input("x", DType::F32, &[c(4), c(4)]).unwrap();
    for _ in 0..sweep::MAX_UNITS + 2 {
        x = g.matmul(x, w, false, false).unwrap();
    }
    g.output("y", x).unwrap();
    assert!(sweep::plan(&g, &sweep_opts(), &[], &mut None).is_none());
    let p = FusionPlan::new(&g, &sweep_opts()).unwrap();
    p.verify(&g).unwrap();
    assert_eq!(p.kernel_groups(), sweep::MAX_UNITS + 2);
    // One fewer is swept.
    let mut g = Graph::new();
    let w = g.input("w", DType::F32, &[c(4), c(4)]).unwrap();
    let mut x = g.input("x", DType::F32, &[c(4), c(4)]).unwrap();
    for _ in 0..sweep::MAX_UNITS {
        x = g.matmul(x, w, false, false).unwrap();
    }
    g.output("y", x).unwrap();
    let p = sweep::plan(&g, &sweep_opts(), &[], &mut None)
        .unwrap()
        .unwrap();
    p.verify(&g).unwrap();
}

/// The decision over a window's recorded operators, mapped onto its
/// decomposition, and the sweep's plan of the decomposition: `None` when
/// the recorded decision declines.
fn recorded_and_decomposed(g: &Graph, opts: &FuseOptions) -> Option<(FusionPlan, FusionPlan)> {
    let (d, spans) = decompose_with_spans(g).unwrap();
    let decided = FusionPlan::decide_recorded(g, opts, &mut FuseScratch::default())?;
    let recorded = decided.unwrap().expand(&d).unwrap();
    let swept = FusionPlan::with_composites(&d, opts, &spans).unwrap();
    recorded.verify(&d).unwrap();
    Some((recorded, swept))
}

/// Asserts two plans have the same groups (kind, members, space), stacks
/// and order.
fn assert_same_plan(a: &FusionPlan, b: &FusionPlan, what: &str) {
    assert_eq!(a.groups.len(), b.groups.len(), "{what}: group count");
    for (x, y) in a.groups.iter().zip(&b.groups) {
        assert_eq!(
            (&x.kind, &x.nodes, &x.space),
            (&y.kind, &y.nodes, &y.space),
            "{what}"
        );
    }
    assert_eq!(a.stacks, b.stacks, "{what}: stacks");
    assert_eq!(a.order, b.order, "{what}: order");
    assert_eq!(a.owner, b.owner, "{what}: owners");
    assert_eq!(a.layouts, b.layouts, "{what}: layouts");
}

#[test]
fn deciding_over_recorded_operators_gives_the_sweeps_plan_of_the_decomposition() {
    let mut graphs = windows_and_encoder();
    graphs.extend((0..600).map(generated_graph));
    let mut declined = 0;
    for (k, g) in graphs.iter().enumerate() {
        for (max_nodes, max_params, stack) in [(64, 64, true), (12, 6, false), (8, 64, true)] {
            let opts = FuseOptions {
                max_nodes,
                max_params: max_params.min(FuseOptions::default().max_params),
                stack,
                ..sweep_opts()
            };
            match recorded_and_decomposed(g, &opts) {
                Some((recorded, swept)) => assert_same_plan(
                    &recorded,
                    &swept,
                    &format!("graph {k}, max_nodes {max_nodes}, max_params {max_params}"),
                ),
                None => declined += 1,
            }
        }
    }
    // Only composites over a limit (a layer norm is 11 nodes) decline.
    assert!(declined < graphs.len(), "{declined} declined");
    // The benchmark window is decided over its operators.
    assert!(
        FusionPlan::decide_recorded(&graphs[0], &sweep_opts(), &mut FuseScratch::default())
            .is_some()
    );
}

#[test]
fn a_mean_over_several_axes_is_decided_on_the_decomposition() {
    let (mut g, x, _) = seq(8);
    let m = g.mean(x, &[0, 1], true).unwrap();
    let e = g.unary(Opcode::Exp, m).unwrap();
    g.output("out", e).unwrap();
    assert!(FusionPlan::decide_recorded(&g, &sweep_opts(), &mut FuseScratch::default()).is_none());
    // One axis: decided over the operators, the same plan.
    let (mut g, x, _) = seq(8);
    let m = g.mean(x, &[-1], false).unwrap();
    let e = g.unary(Opcode::Exp, m).unwrap();
    g.output("out", e).unwrap();
    let (recorded, swept) = recorded_and_decomposed(&g, &sweep_opts()).unwrap();
    assert_same_plan(&recorded, &swept, "mean");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    /// Deciding over the recorded operators of random graphs gives the
    /// sweep's plan of their decomposition.
    #[test]
    fn recorded_decisions_of_random_graphs_match_the_decomposition(
        steps in proptest::collection::vec((0u8..=255, 0u8..6, 0u8..6), 1..40),
        max_nodes in 2usize..64,
        stack in proptest::bool::ANY,
    ) {
        let g = random_graph(&steps);
        let opts = FuseOptions { max_nodes, stack, ..sweep_opts() };
        if let Some((recorded, swept)) = recorded_and_decomposed(&g, &opts) {
            assert_same_plan(&recorded, &swept, "random graph");
        }
    }
}

/// On recorded graphs, [`validate`] and [`legality::validate_fast`] agree
/// on every composite with each fusible operand's node and each user
/// (the slow check, with reasons, is what `dvm explain` would print).
#[test]
fn validation_of_recorded_composites_agrees_with_the_fast_check() {
    use super::legality::{role_of_recorded, validate_fast, Class, ShapeBuffers, Shapes};
    let (mut checked, mut refused) = (0, 0);
    for seed in 0..300 {
        let g = generated_graph(seed);
        let n = g.nodes().len();
        let Some(roles) = (0..n)
            .map(|i| role_of_recorded(&g, NodeId(i)))
            .collect::<Option<Vec<Role>>>()
        else {
            continue;
        };
        let users = Users::new(&g);
        let mut is_output = vec![false; n];
        for (_, id) in g.outputs() {
            is_output[id.0] = true;
        }
        let facts = Facts {
            graph: &g,
            users: &users,
            is_output: &is_output,
            roles: &roles,
        };
        let shapes = Shapes::new_in(&g, ShapeBuffers::default());
        let fusible = |m: NodeId| !matches!(roles[m.0], Role::Data | Role::Opaque);
        for c in (0..n)
            .map(NodeId)
            .filter(|&c| matches!(roles[c.0], Role::Composite { .. }))
        {
            let near = g[c].operands.iter().chain(users.of(c)).copied();
            for m in near.filter(|&m| fusible(m)) {
                let mut set = [c.min(m), c.max(m)];
                set.sort();
                let member = |x: NodeId| set.contains(&x);
                let slow = validate(&facts, &set, &member).is_ok();
                let mut classes = vec![Class::Full; n];
                let fast = validate_fast(&facts, &shapes, &set, member, &mut classes).is_some();
                assert_eq!(slow, fast, "graph {seed}: {set:?}");
                checked += 1;
                refused += usize::from(!slow);
            }
        }
    }
    // Both answers occur (a composite of another axis, of a reduced value).
    assert!(
        checked > 100 && refused > 10,
        "{checked} checked, {refused} refused"
    );
}

/// `relu(conv2d(x, w, b))` and a scaling after it: the decomposition moves
/// both above the convolution's final reshape, into the matmul's group;
/// with a second user of the convolution they stay where they are.
#[test]
fn an_activation_after_a_convolution_joins_its_matmul() {
    let build = |shared: bool| {
        let mut g = Graph::new();
        let n = g.symbol("N", 1, 64).unwrap();
        let x = g
            .input("x", DType::F32, &[n.into(), c(3), c(8), c(8)])
            .unwrap();
        let w = g.input("w", DType::F32, &[c(4), c(3), c(3), c(3)]).unwrap();
        let b = g.input("b", DType::F32, &[c(4)]).unwrap();
        let attrs = dvm_graph::Conv2d {
            pads: [1; 4],
            ..dvm_graph::Conv2d::default()
        };
        let y = g.conv2d(x, w, Some(b), &attrs).unwrap();
        let r = g.unary(Opcode::Relu, y).unwrap();
        let s = g.scalar(Opcode::MulS, r, 2.0).unwrap();
        g.output("y", s).unwrap();
        if shared {
            g.output("conv", y).unwrap();
        }
        let (d, spans) = decompose_with_spans(&g).unwrap();
        let p = FusionPlan::with_composites(&d, &FuseOptions::default(), &spans).unwrap();
        (d, p)
    };
    let (d, p) = build(false);
    let mm = p
        .groups
        .iter()
        .find(|gr| gr.kind == FusionKind::Matmul)
        .expect("a matmul group");
    let ops: Vec<&dvm_graph::Op> = mm.nodes.iter().map(|&n| &d[n].op).collect();
    assert!(
        ops.contains(&&dvm_graph::Op::Unary(Opcode::Relu))
            && ops.contains(&&dvm_graph::Op::Scalar(Opcode::MulS, 2.0)),
        "{ops:?}: {:?}",
        names(&d, &mm.nodes)
    );
    let (name, out) = &d.outputs()[0];
    assert_eq!(
        (name.as_str(), d[*out].op.clone()),
        ("y", dvm_graph::Op::Reshape)
    );
    assert_eq!(d[*out].shape.len(), 4);
    let (d, p) = build(true);
    for gr in &p.groups {
        assert!(
            !gr.nodes
                .iter()
                .any(|&n| d[n].op == dvm_graph::Op::Unary(Opcode::Relu))
                || gr.kind != FusionKind::Matmul,
            "the relu of a shared convolution moved: {:?}",
            names(&d, &gr.nodes)
        );
    }
}
