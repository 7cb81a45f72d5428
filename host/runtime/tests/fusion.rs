//! The operator fuser: kernel counts per pattern (not just values), fused
//! against unfused against the f64 reference device, symbolic legality (a
//! graph whose shapes agree only for some bindings is not fused), the split
//! fallback under UB pressure, stacking, and the kernel cache.

use dvm_fuse::{FuseOptions, FusionKind, Reason};
use dvm_graph::models::{encoder_block, EncoderConfig};
use dvm_graph::reference;
use dvm_graph::{Graph, NodeId};
use dvm_isa::{DType, KernelKind, Opcode};
use dvm_runtime::{Prepared, Runtime};
use dvm_sym::{Bindings, Dim};
use dvm_tensor::sample_data as data;
use dvm_tensor::Tensor;

fn tensor(shape: &[u64], seed: u32, scale: f32) -> Tensor {
    let n: u64 = shape.iter().product();
    let v: Vec<f32> = data(n as usize, seed).iter().map(|x| x * scale).collect();
    Tensor::from_f32(shape, &v).unwrap()
}

fn c(v: i64) -> Dim {
    Dim::from(v)
}

/// Fusion and stacking, no sequence packing: launch counts then reflect
/// parallel stacks only.
fn fused() -> FuseOptions {
    FuseOptions {
        sequence: false,
        ..FuseOptions::default()
    }
}

/// `opts` deciding with the eager API's one-pass sweep.
fn swept(opts: &FuseOptions) -> FuseOptions {
    FuseOptions {
        sweep: true,
        reasons: false,
        ..*opts
    }
}

/// Plans `g` at the given symbol values; returns (kernels, launches, launch
/// kinds of the stacked kernels' [`KernelKind`]s). With fusion on, the
/// eager API's sweep must plan the same kernels and launches as the rules.
fn counts(g: &Graph, opts: &FuseOptions, binds: &[(&str, i64)]) -> (usize, usize, Vec<KernelKind>) {
    let got = counts_with(g, opts, binds);
    if opts.fuse && !opts.sweep {
        assert_eq!(
            counts_with(g, &swept(opts), binds),
            got,
            "the sweep plans otherwise"
        );
    }
    got
}

fn counts_with(
    g: &Graph,
    opts: &FuseOptions,
    binds: &[(&str, i64)],
) -> (usize, usize, Vec<KernelKind>) {
    let rt = Runtime::new(2, 256);
    let p = Prepared::with_options(g, opts).unwrap();
    assert!(p.fuse_error().is_none(), "{:?}", p.fuse_error());
    let mut b = Bindings::new();
    for (name, v) in binds {
        b.set(p.graph().scope().lookup(name).unwrap(), *v);
    }
    let (plan, kernels) = rt.plan(&p, &b).unwrap();
    assert_eq!(plan.launches.len(), kernels.len());
    (
        plan.steps.len(),
        plan.launches.len(),
        kernels.iter().map(|k| k.info.kind).collect(),
    )
}

/// Runs `g` fused and unfused on the CPU device and on the reference device;
/// every output must agree within tolerance.
fn check(g: &Graph, inputs: &[(&str, Tensor)], rtol: f64, atol: f64) {
    let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
    let want = reference::run(g, &named, &Bindings::new()).expect("reference runs");
    let rt = Runtime::new(2, 256);
    for opts in [
        FuseOptions::default(),
        fused(),
        swept(&fused()),
        FuseOptions::off(),
    ] {
        let p = Prepared::with_options(g, &opts).unwrap();
        let got = rt.run(&p, &named).expect("cpu runs");
        assert_eq!(want.len(), got.len());
        for ((wn, w), (gn, t)) in want.iter().zip(&got) {
            assert_eq!(wn, gn);
            assert_eq!(w.shape(), t.shape(), "{wn}");
            let d = w.max_abs_diff(t).unwrap();
            assert!(
                w.allclose(t, rtol, atol).unwrap(),
                "{wn} ({opts:?}): max abs diff {d}"
            );
        }
    }
}

fn seq_graph(width: i64) -> (Graph, NodeId) {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 4096).unwrap();
    let x = g.input("x", DType::F32, &[s.into(), c(width)]).unwrap();
    (g, x)
}

#[test]
fn softmax_is_one_kernel_along_last_and_outer_axes() {
    for axis in [-1i64, 0] {
        let (mut g, x) = seq_graph(96);
        let y = g.softmax(x, axis).unwrap();
        g.output("y", y).unwrap();
        // max, sub, exp, sum, reciprocal, multiply.
        assert_eq!(counts(&g, &FuseOptions::off(), &[("S", 33)]).0, 6);
        let (k, l, kinds) = counts(&g, &fused(), &[("S", 33)]);
        assert_eq!((k, l), (1, 1), "softmax along axis {axis}");
        assert_eq!(kinds, vec![KernelKind::Vector]);
        for s in [1u64, 7, 33] {
            check(&g, &[("x", tensor(&[s, 96], 1, 3.0))], 1e-5, 1e-6);
        }
    }
}

#[test]
fn norms_are_one_kernel_each() {
    type Build = fn(&mut Graph, NodeId, NodeId, NodeId, NodeId) -> NodeId;
    let cases: [(&str, Build); 4] = [
        ("layernorm", |g, x, _, gm, bt| {
            g.layer_norm(x, gm, bt, 1e-5).unwrap()
        }),
        ("rmsnorm", |g, x, _, gm, _| g.rms_norm(x, gm, 1e-6).unwrap()),
        ("add+layernorm", |g, x, r, gm, bt| {
            let a = g.binary(Opcode::Add, x, r).unwrap();
            g.layer_norm(a, gm, bt, 1e-5).unwrap()
        }),
        ("log_softmax", |g, x, _, _, _| g.log_softmax(x, -1).unwrap()),
    ];
    for (name, build) in cases {
        let (mut g, x) = seq_graph(80);
        let r = g.input(
            "r",
            DType::F32,
            &[g.scope().lookup("S").unwrap().into(), c(80)],
        );
        let r = r.unwrap();
        let gm = g.input("gamma", DType::F32, &[c(80)]).unwrap();
        let bt = g.input("beta", DType::F32, &[c(80)]).unwrap();
        let y = build(&mut g, x, r, gm, bt);
        g.output("y", y).unwrap();
        let (k, l, _) = counts(&g, &fused(), &[("S", 20)]);
        assert_eq!((k, l), (1, 1), "{name}");
        let unfused = counts(&g, &FuseOptions::off(), &[("S", 20)]).0;
        assert!(unfused >= 5, "{name}: {unfused} unfused kernels");
        for s in [1u64, 20] {
            check(
                &g,
                &[
                    ("x", tensor(&[s, 80], 2, 2.0)),
                    ("r", tensor(&[s, 80], 3, 1.0)),
                    ("gamma", tensor(&[80], 4, 1.0)),
                    ("beta", tensor(&[80], 5, 1.0)),
                ],
                1e-4,
                1e-5,
            );
        }
    }
}

#[test]
fn reductions_with_prologue_and_epilogue_along_any_axis() {
    // Row sum of exp(x) (last axis, no keepdims) and x − mean(x) along the
    // outer axis: one kernel each.
    let (mut g, x) = seq_graph(48);
    let e = g.unary(Opcode::Exp, x).unwrap();
    let rs = g.sum(e, &[-1], false).unwrap();
    g.output("rowsum", rs).unwrap();
    assert_eq!(counts(&g, &fused(), &[("S", 9)]).0, 1);
    check(&g, &[("x", tensor(&[9, 48], 6, 1.0))], 1e-5, 1e-5);

    // Column sums without keepdims broadcast back along axis 0; row sums
    // without keepdims would not (they align with the columns).
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[c(12), c(12)]).unwrap();
    let cs = g.sum(x, &[0], false).unwrap();
    let rs = g.sum(x, &[1], false).unwrap();
    let a = g.binary(Opcode::Sub, x, cs).unwrap();
    let b = g.binary(Opcode::Sub, x, rs).unwrap();
    g.output("a", a).unwrap();
    g.output("b", b).unwrap();
    let p = Prepared::with_options(&g, &fused()).unwrap();
    let f = p.fusion();
    let owner = |name: &str| f.owner[p.graph().find(name).unwrap().0];
    assert_eq!(owner(&g[cs].name), owner(&g[a].name));
    assert_ne!(owner(&g[rs].name), owner(&g[b].name));
    check(&g, &[("x", tensor(&[12, 12], 35, 1.0))], 1e-5, 1e-5);

    let (mut g, x) = seq_graph(48);
    let m = g.mean(x, &[0], true).unwrap();
    let d = g.binary(Opcode::Sub, x, m).unwrap();
    let y = g.scalar(Opcode::MulS, d, 3.0).unwrap();
    g.output("y", y).unwrap();
    assert_eq!(counts(&g, &fused(), &[("S", 9)]).0, 1);
    for s in [1u64, 9, 40] {
        check(&g, &[("x", tensor(&[s, 48], 7, 1.0))], 1e-5, 1e-5);
    }
}

#[test]
fn long_elementwise_chain_with_several_inputs_and_outputs_is_one_kernel() {
    let (mut g, x) = seq_graph(200);
    let s = g.scope().lookup("S").unwrap();
    let y = g.input("y", DType::F32, &[s.into(), c(200)]).unwrap();
    let b = g.input("b", DType::F32, &[c(200)]).unwrap();
    let mut cur = x;
    let mut mid = x;
    for i in 0..24 {
        cur = match i % 6 {
            0 => g.binary(Opcode::Add, cur, b).unwrap(),
            1 => g.unary(Opcode::Tanh, cur).unwrap(),
            2 => g.binary(Opcode::Mul, cur, y).unwrap(),
            3 => g.scalar(Opcode::MulS, cur, 0.5).unwrap(),
            4 => g.binary(Opcode::Max, cur, y).unwrap(),
            _ => g.unary(Opcode::Sigmoid, cur).unwrap(),
        };
        if i == 11 {
            mid = cur;
        }
    }
    g.output("out", cur).unwrap();
    g.output("mid", mid).unwrap();
    assert_eq!(counts(&g, &FuseOptions::off(), &[("S", 5)]).0, 24);
    let (k, _, _) = counts(&g, &fused(), &[("S", 5)]);
    assert_eq!(k, 1, "24 element-wise ops, 3 inputs, 2 outputs");
    check(
        &g,
        &[
            ("x", tensor(&[5, 200], 8, 1.0)),
            ("y", tensor(&[5, 200], 9, 1.0)),
            ("b", tensor(&[200], 10, 1.0)),
        ],
        1e-5,
        1e-6,
    );
}

/// Inputs many operators read: a chain of 400 element-wise ops, three in
/// four of which read `y`, and 300 independent readers of `x`. The
/// siblings rule pairs each reader of a value read more than a few dozen
/// times with its next few only (the pairs of every reader with every
/// other had made fusing a 20,000-op chain take 16 s and 2,000 readers of
/// one input 5 GB): the chain still fuses into groups of the fuser's
/// largest size, the readers into as few, the eager sweep plans the same,
/// and every result matches the reference and the unfused run.
#[test]
fn widely_read_inputs_fuse_into_full_groups() {
    let (mut g, x) = seq_graph(16);
    let s = g.scope().lookup("S").unwrap();
    let y = g.input("y", DType::F32, &[s.into(), c(16)]).unwrap();
    let mut cur = x;
    for i in 0..400 {
        cur = match i % 4 {
            0 => g.binary(Opcode::Add, cur, y).unwrap(),
            1 => g.unary(Opcode::Tanh, cur).unwrap(),
            2 => g.binary(Opcode::Mul, cur, y).unwrap(),
            _ => g.binary(Opcode::Sub, cur, y).unwrap(),
        };
    }
    g.output("chain", cur).unwrap();
    for i in 0..300 {
        let t = g.scalar(Opcode::MulS, x, 1.0 + i as f64 / 300.0).unwrap();
        let t = g.unary(Opcode::Tanh, t).unwrap();
        g.output(&format!("r{i}"), t).unwrap();
    }
    let opts = FuseOptions::default();
    let (k, _, _) = counts(&g, &fused(), &[("S", 3)]);
    // The chain takes at least 400 / max_nodes kernels, the readers at
    // least 300 / (max_params − 1) (`x` and one output each): the readers
    // within twice that (pairwise merges of groups of equal size stop at
    // half the limit), not one kernel each.
    let chain = 400usize.div_ceil(opts.max_nodes);
    let readers = 300usize.div_ceil(opts.max_params - 1);
    assert!(
        k >= chain + readers && k <= chain + 2 * readers,
        "{k} kernels: chain {chain}, readers {readers} at least"
    );
    check(
        &g,
        &[
            ("x", tensor(&[3, 16], 11, 1.0)),
            ("y", tensor(&[3, 16], 12, 0.1)),
        ],
        1e-5,
        1e-6,
    );
}

#[test]
fn matmul_epilogues_are_one_mix_kernel() {
    type Epi = fn(&mut Graph, NodeId, NodeId, NodeId) -> NodeId;
    let cases: [(&str, Epi); 3] = [
        ("gelu(x·w+b)", |g, h, b, _| {
            let a = g.binary(Opcode::Add, h, b).unwrap();
            g.unary(Opcode::GeluTanh, a).unwrap()
        }),
        ("relu(x·w+b)", |g, h, b, _| {
            let a = g.binary(Opcode::Add, h, b).unwrap();
            g.unary(Opcode::Relu, a).unwrap()
        }),
        ("x·w·0.5 + residual", |g, h, _, r| {
            let a = g.scalar(Opcode::MulS, h, 0.5).unwrap();
            g.binary(Opcode::Add, a, r).unwrap()
        }),
    ];
    for (name, epi) in cases {
        let (mut g, x) = seq_graph(64);
        let s = g.scope().lookup("S").unwrap();
        let w = g.input("w", DType::F32, &[c(64), c(96)]).unwrap();
        let b = g.input("b", DType::F32, &[c(96)]).unwrap();
        let r = g.input("r", DType::F32, &[s.into(), c(96)]).unwrap();
        let h = g.matmul(x, w, false, false).unwrap();
        let y = epi(&mut g, h, b, r);
        g.output("y", y).unwrap();
        let (k, l, kinds) = counts(&g, &fused(), &[("S", 40)]);
        assert_eq!((k, l), (1, 1), "{name}");
        assert_eq!(kinds, vec![KernelKind::Mix], "{name}");
        assert_eq!(counts(&g, &FuseOptions::off(), &[("S", 40)]).0, 3, "{name}");
        for s in [1u64, 40] {
            check(
                &g,
                &[
                    ("x", tensor(&[s, 64], 11, 1.0)),
                    ("w", tensor(&[64, 96], 12, 0.125)),
                    ("b", tensor(&[96], 13, 1.0)),
                    ("r", tensor(&[s, 96], 14, 1.0)),
                ],
                1e-4,
                1e-4,
            );
        }
    }
}

#[test]
fn qkv_projections_are_one_parallel_launch() {
    let (mut g, x) = seq_graph(64);
    for name in ["q", "k", "v"] {
        let w = g
            .input(&format!("w{name}"), DType::F32, &[c(64), c(64)])
            .unwrap();
        let y = g.matmul(x, w, false, false).unwrap();
        g.output(name, y).unwrap();
    }
    let p = Prepared::with_options(&g, &fused()).unwrap();
    assert_eq!(p.fusion().stacks.len(), 1);
    assert_eq!(p.fusion().stacks[0].len(), 3);
    let (k, l, kinds) = counts(&g, &fused(), &[("S", 100)]);
    assert_eq!((k, l), (3, 1));
    assert_eq!(kinds, vec![KernelKind::Parallel]);
    let no_stack = FuseOptions {
        stack: false,
        ..fused()
    };
    assert_eq!(counts(&g, &no_stack, &[("S", 100)]).1, 3);
    for s in [1u64, 100] {
        check(
            &g,
            &[
                ("x", tensor(&[s, 64], 15, 1.0)),
                ("wq", tensor(&[64, 64], 16, 0.125)),
                ("wk", tensor(&[64, 64], 17, 0.125)),
                ("wv", tensor(&[64, 64], 18, 0.125)),
            ],
            1e-4,
            1e-4,
        );
    }
}

fn attention() -> Graph {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/attention.json");
    Graph::from_json_file(&path).unwrap()
}

#[test]
fn small_dependent_kernels_become_one_sequence_launch() {
    let g = attention();
    assert_eq!(
        counts(&g, &FuseOptions::off(), &[("S", 4)]),
        (
            9,
            9,
            vec![
                KernelKind::Cube,
                KernelKind::Vector,
                KernelKind::Vector,
                KernelKind::Vector,
                KernelKind::Vector,
                KernelKind::Vector,
                KernelKind::Vector,
                KernelKind::Vector,
                KernelKind::Cube
            ]
        )
    );
    // matmul, softmax (with the scaling as prologue), matmul.
    let (k, l, _) = counts(&g, &fused(), &[("S", 4)]);
    assert_eq!((k, l), (3, 3));
    let (k, l, kinds) = counts(&g, &FuseOptions::default(), &[("S", 4)]);
    assert_eq!((k, l), (3, 1));
    assert_eq!(kinds, vec![KernelKind::Sequence]);
    for s in [1u64, 4, 37] {
        check(
            &g,
            &[
                ("q", tensor(&[s, 64], 19, 1.0)),
                ("k", tensor(&[s, 64], 20, 1.0)),
                ("v", tensor(&[s, 64], 21, 1.0)),
            ],
            1e-4,
            1e-5,
        );
    }
}

/// `a = x + z`, `b = y + z` with `x: [S, 64]`, `y: [T, 64]`: siblings over
/// spaces equal only when S = T.
fn two_symbols(declare_equal: bool) -> Graph {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 512).unwrap();
    let t = g.symbol("T", 1, 512).unwrap();
    if declare_equal {
        g.declare_equal(&s.into(), &t.into()).unwrap();
    }
    let x = g.input("x", DType::F32, &[s.into(), c(64)]).unwrap();
    let y = g.input("y", DType::F32, &[t.into(), c(64)]).unwrap();
    let z = g.input("z", DType::F32, &[c(64)]).unwrap();
    let a = g.binary(Opcode::Add, x, z).unwrap();
    let b = g.binary(Opcode::Add, y, z).unwrap();
    let a = g.unary(Opcode::Exp, a).unwrap();
    let b = g.unary(Opcode::Exp, b).unwrap();
    g.output("a", a).unwrap();
    g.output("b", b).unwrap();
    g
}

#[test]
fn shapes_equal_only_for_some_bindings_do_not_fuse() {
    let g = two_symbols(false);
    let p = Prepared::with_options(&g, &fused()).unwrap();
    // Two groups (each a chain of two ops), never one, even at S = T.
    assert_eq!(p.fusion().groups.len(), 2);
    let rej = p
        .fusion()
        .rejections
        .iter()
        .find(|r| r.rule == "siblings")
        .expect("the sibling candidate is recorded");
    assert!(
        matches!(&rej.reason, Reason::SpaceMismatch { dims, .. } if (dims.0.as_str(), dims.1.as_str()) == ("S", "T") || (dims.0.as_str(), dims.1.as_str()) == ("T", "S")),
        "{}",
        rej.reason
    );
    for (sv, tv) in [(5i64, 5i64), (5, 9)] {
        let (k, _, _) = counts(&g, &fused(), &[("S", sv), ("T", tv)]);
        assert_eq!(k, 2, "S={sv} T={tv}");
        check(
            &g,
            &[
                ("x", tensor(&[sv as u64, 64], 22, 1.0)),
                ("y", tensor(&[tv as u64, 64], 23, 1.0)),
                ("z", tensor(&[64], 24, 1.0)),
            ],
            1e-5,
            1e-6,
        );
    }
    // Once S == T is declared, symbol deduction proves the spaces equal.
    let g = two_symbols(true);
    let p = Prepared::with_options(&g, &fused()).unwrap();
    assert_eq!(p.fusion().groups.len(), 1);
    assert_eq!(counts(&g, &fused(), &[("S", 7)]).0, 1);
}

#[test]
fn a_slice_that_matches_only_short_sequences_does_not_fuse() {
    // a = x + z over [S, 8]; b = x[0:8] + z over [min(S, 8), 8]: equal for
    // S ≤ 8 only.
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 64).unwrap();
    let x = g.input("x", DType::F32, &[s.into(), c(8)]).unwrap();
    let z = g.input("z", DType::F32, &[c(8)]).unwrap();
    let head = g.slice(x, &[(0, 0, 8, 1)]).unwrap();
    let a = g.binary(Opcode::Add, x, z).unwrap();
    let b = g.binary(Opcode::Add, head, z).unwrap();
    g.output("a", a).unwrap();
    g.output("b", b).unwrap();
    assert_eq!(g.shape_string(b), "[min(S,8), 8]");
    let p = Prepared::with_options(&g, &fused()).unwrap();
    assert_eq!(p.fusion().groups.len(), 2);
    assert!(p
        .fusion()
        .rejections
        .iter()
        .any(|r| matches!(r.reason, Reason::SpaceMismatch { .. })));
    for sv in [5u64, 20] {
        assert_eq!(counts(&g, &fused(), &[("S", sv as i64)]).0, 2);
        check(
            &g,
            &[
                ("x", tensor(&[sv, 8], 25, 1.0)),
                ("z", tensor(&[8], 26, 1.0)),
            ],
            1e-6,
            1e-6,
        );
    }
}

#[test]
fn a_fused_group_whose_tiles_do_not_fit_is_split_not_failed() {
    // Layernorm over 24 000 columns: the fused group needs whole rows of
    // several live buffers (> 192 KiB); single operators tile the columns.
    let (mut g, x) = seq_graph(24_000);
    let gm = g.input("gamma", DType::F32, &[c(24_000)]).unwrap();
    let bt = g.input("beta", DType::F32, &[c(24_000)]).unwrap();
    let y = g.layer_norm(x, gm, bt, 1e-5).unwrap();
    g.output("y", y).unwrap();
    let p = Prepared::with_options(&g, &fused()).unwrap();
    assert_eq!(p.fusion().groups.len(), 1, "one group symbolically");
    let rt = Runtime::new(2, 256);
    let b = Bindings::new().with(p.graph().scope().lookup("S").unwrap(), 3);
    let (plan, _) = rt.plan(&p, &b).unwrap();
    assert!(!plan.notes.is_empty(), "the split is reported");
    assert!(plan.notes[0].contains("split"), "{:?}", plan.notes);
    let unfused = counts(&g, &FuseOptions::off(), &[("S", 3)]).0;
    assert!(
        plan.steps.len() > 1 && plan.steps.len() < unfused,
        "{} kernels (unfused {unfused})",
        plan.steps.len()
    );
    check(
        &g,
        &[
            ("x", tensor(&[3, 24_000], 27, 1.0)),
            ("gamma", tensor(&[24_000], 28, 1.0)),
            ("beta", tensor(&[24_000], 29, 1.0)),
        ],
        1e-3,
        1e-4,
    );
}

/// An encoder block small enough for the tests.
const SMALL_ENCODER: EncoderConfig = EncoderConfig {
    hidden: 64,
    heads: 4,
    ffn: 128,
    max_len: 512,
};

/// The encoder block's inputs at sequence length `s`, scaled so that its
/// activations stay of order 1.
fn encoder_inputs(cfg: &EncoderConfig, s: u64) -> Vec<(&'static str, Tensor)> {
    let (h, f) = (cfg.hidden, cfg.ffn);
    let w = 1.0 / (h as f32).sqrt();
    vec![
        ("x", tensor(&[s, h], 1, 1.0)),
        ("wq", tensor(&[h, h], 2, w)),
        ("wk", tensor(&[h, h], 3, w)),
        ("wv", tensor(&[h, h], 4, w)),
        ("wo", tensor(&[h, h], 5, w)),
        ("w1", tensor(&[h, f], 6, w)),
        ("b1", tensor(&[f], 7, 1.0)),
        ("w2", tensor(&[f, h], 8, 1.0 / (f as f32).sqrt())),
        ("b2", tensor(&[h], 9, 1.0)),
        ("g1", tensor(&[h], 10, 1.0)),
        ("be1", tensor(&[h], 11, 1.0)),
        ("g2", tensor(&[h], 12, 1.0)),
        ("be2", tensor(&[h], 13, 1.0)),
    ]
}

#[test]
fn encoder_block_fuses_43_kernels_into_11_and_matches_the_reference() {
    let cfg = SMALL_ENCODER;
    let g = encoder_block(&cfg).unwrap();
    let p = Prepared::with_options(&g, &fused()).unwrap();
    let kinds: Vec<&FusionKind> = p.fusion().groups.iter().map(|c| &c.kind).collect();
    let reduces = kinds
        .iter()
        .filter(|k| matches!(k, FusionKind::Reduce { .. }))
        .count();
    assert_eq!(reduces, 3, "softmax, layernorm 1, layernorm 2");
    for s in [1i64, 17, 64] {
        // At S = 1 the heads' transpose is already dense: no merge copy.
        let copy = usize::from(s > 1);
        let (k, l, _) = counts(&g, &FuseOptions::off(), &[("S", s)]);
        assert_eq!((k, l), (42 + copy, 42 + copy));
        // q/k/v (3, one launch), scores, softmax, context (stored with the
        // heads merged: no copy), output projection, layernorm 1 (with the
        // residual), MLP up + GELU, MLP down, layernorm 2 (with bias and
        // residual).
        let (k, l, _) = counts(&g, &fused(), &[("S", s)]);
        assert_eq!((k, l), (11, 9), "S={s}");
    }
    for s in [1u64, 17, 64] {
        let inputs = encoder_inputs(&cfg, s);
        check(&g, &inputs, 1e-4, 1e-4);
    }
}

/// More participants than the machine has cores (workers that start a
/// launch late, sequence kernels whose blocks meet at barriers): every
/// repetition gives the same bytes, within tolerance of one core's.
#[test]
fn an_oversubscribed_pool_gives_the_same_bytes_every_time() {
    let cfg = SMALL_ENCODER;
    let g = encoder_block(&cfg).unwrap();
    let p = Prepared::new(&g).unwrap();
    let (one, many) = (Runtime::new(1, 256), Runtime::new(6, 256));
    for s in [17u64, 96] {
        let inputs = encoder_inputs(&cfg, s);
        let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
        let want = one.run(&p, &named).unwrap();
        let first = many.run(&p, &named).unwrap();
        for ((n, w), (_, t)) in want.iter().zip(&first) {
            let d = w.max_abs_diff(t).unwrap();
            assert!(w.allclose(t, 1e-4, 1e-4).unwrap(), "S={s} {n}: {d}");
        }
        for rep in 0..20 {
            let got = many.run(&p, &named).unwrap();
            for ((n, a), (_, b)) in first.iter().zip(&got) {
                assert_eq!(a.bytes(), b.bytes(), "S={s} {n}, repetition {rep}");
            }
        }
    }
}

#[test]
fn the_cache_keys_on_the_group_structure() {
    let g = attention();
    let rt = Runtime::new(2, 256);
    let fused = Prepared::new(&g).unwrap();
    let unfused = Prepared::with_options(&g, &FuseOptions::off()).unwrap();
    let b = Bindings::new().with(fused.graph().scope().lookup("S").unwrap(), 48);
    rt.plan(&fused, &b).unwrap();
    let first = rt.cache_stats();
    // The same prepared graph at the same bindings keeps its plan: no
    // kernel is looked up at all.
    rt.plan(&fused, &b).unwrap();
    assert_eq!(rt.cache_stats(), first, "the plan is reused");
    // Another preparation of the graph lowers again: every kernel hits.
    let twin = Prepared::new(&g).unwrap();
    rt.plan(&twin, &b).unwrap();
    let again = rt.cache_stats();
    assert_eq!(again.misses, first.misses, "the second lowering only hits");
    assert!(again.hits > first.hits);
    // The unfused plan's groups differ: they compile on their own.
    rt.plan(&unfused, &b).unwrap();
    assert!(rt.cache_stats().misses >= first.misses + 6);
}

mod eager {
    use super::tensor;
    use dvm_fuse::FuseOptions;
    use dvm_runtime::eager::{Eager, EagerError};
    use dvm_tensor::Tensor;

    /// A small MLP-ish window: 2 · softmax(gelu(x·w + b) + x) and its row sums.
    fn window(ex: &Eager) -> Result<(Tensor, Tensor), EagerError> {
        window_at(ex, 9)
    }

    /// An empty cache grows by concatenation, step by step: its first
    /// step (no rows) runs as the later ones do.
    #[test]
    fn an_empty_cache_grows_step_by_step() {
        let ex = Eager::new(2);
        let mut cache = ex.tensor(Tensor::from_f32(&[0, 4], &[]).unwrap());
        for step in 0..3u64 {
            let row = ex.tensor(tensor(&[1, 4], step as u32 + 1, 1.0));
            cache = cache.concat(&[&row], 0).unwrap();
            let total = cache.sum(&[0], false).unwrap().to_tensor().unwrap();
            assert_eq!(total.shape(), &[4]);
            assert_eq!(cache.shape(), &[step + 1, 4]);
        }
        // Sums over no rows are 0; an element-wise op on no rows has none.
        let empty = ex.tensor(Tensor::from_f32(&[0, 4], &[]).unwrap());
        let s = empty.exp().unwrap().sum(&[0], false).unwrap();
        assert_eq!(s.to_f32_vec().unwrap(), vec![0.0; 4]);
        assert_eq!(empty.exp().unwrap().to_tensor().unwrap().shape(), &[0, 4]);
    }

    #[test]
    fn recorded_ops_run_fused_at_the_flush_point() {
        let fused = Eager::new(2);
        let (p, s) = window(&fused).unwrap();
        let st = fused.stats();
        let unfused = Eager::with_options(2, FuseOptions::off(), 64);
        let (p2, s2) = window(&unfused).unwrap();
        let st2 = unfused.stats();
        assert!(p.allclose(&p2, 1e-5, 1e-6).unwrap());
        assert!(s.allclose(&s2, 1e-5, 1e-6).unwrap());
        // Rows of 2·softmax sum to 2.
        for v in s.to_f32_vec() {
            assert!((v - 2.0).abs() < 1e-4, "{v}");
        }
        // One flush for everything: mix kernel (matmul + bias + gelu +
        // residual), softmax with its scaling, and the row sum.
        assert_eq!(st.flushes, 1);
        assert_eq!(st.ops, 7);
        assert!(st.kernels <= 3, "{st:?}");
        assert_eq!(st2.kernels, 12, "{st2:?}");
        assert!(st.fuse_us > 0.0);
    }

    /// The window of [`window`] with `s` rows of x.
    fn window_at(ex: &Eager, s: u64) -> Result<(Tensor, Tensor), EagerError> {
        let x = ex.tensor(tensor(&[s, 32], 30, 1.0));
        let w = ex.tensor(tensor(&[32, 32], 31, 0.2));
        let b = ex.tensor(tensor(&[32], 32, 1.0));
        let h = x.matmul(&w)?.add(&b)?.gelu_tanh()?.add(&x)?;
        let p = h.softmax(-1)?.scale(2.0)?;
        let s = p.sum(&[-1], true)?;
        Ok((p.to_tensor()?, s.to_tensor()?))
    }

    #[test]
    fn a_changing_length_reuses_the_decision() {
        let fused = Eager::new(2);
        let unfused = Eager::with_options(2, FuseOptions::off(), 64);
        let lens = [9u64, 10, 17, 33, 2, 100];
        for &s in &lens {
            let (p, r) = window_at(&fused, s).unwrap();
            let (p2, r2) = window_at(&unfused, s).unwrap();
            assert!(p.allclose(&p2, 1e-5, 1e-6).unwrap(), "S={s}");
            assert!(r.allclose(&r2, 1e-5, 1e-6).unwrap(), "S={s}");
        }
        // Two decisions for all the lengths: the first window's own, then
        // one on the symbolic copy when the structure shows up at another
        // length, which every later length reuses.
        let st = fused.stats();
        assert_eq!(st.flushes, lens.len() as u64);
        assert_eq!(st.decision_hits, lens.len() as u64 - 2, "{st:?}");
        // S = 32 makes the rows as long as the hidden size: a new equality,
        // so a new structure.
        window_at(&fused, 32).unwrap();
        assert_eq!(fused.stats().decision_hits, lens.len() as u64 - 2);
        // The first length again: its own decision, exactly.
        window_at(&fused, 9).unwrap();
        assert_eq!(fused.stats().decision_hits, lens.len() as u64 - 1);
    }

    /// A window that flattens x (`[s, 4]` to `[4s]`): the flattened
    /// extent follows from s's value, not from an equality, so its
    /// symbolic copy does not check out and every length is decided on
    /// its own shapes (only an exact repeat reuses a decision).
    #[test]
    fn a_length_tied_to_a_value_is_decided_per_length() {
        fn flat(ex: &Eager, s: u64) -> Result<Tensor, EagerError> {
            let x = ex.tensor(tensor(&[s, 4], 40, 1.0));
            x.reshape(&[4 * s])?.exp()?.scale(0.5)?.to_tensor()
        }
        let fused = Eager::new(2);
        let unfused = Eager::with_options(2, FuseOptions::off(), 64);
        let lens = [3u64, 5, 7, 5];
        for &s in &lens {
            let got = flat(&fused, s).unwrap();
            assert_eq!(got.shape(), &[4 * s]);
            assert!(got
                .allclose(&flat(&unfused, s).unwrap(), 1e-6, 1e-7)
                .unwrap());
        }
        let st = fused.stats();
        assert_eq!(st.flushes, lens.len() as u64);
        assert_eq!(st.decision_hits, 1, "{st:?}");
    }

    #[test]
    fn host_control_flow_reads_values_back() {
        let ex = Eager::new(2);
        let mut x =
            ex.tensor(Tensor::from_f32(&[2, 3], &[1.0, -2.0, 3.0, 40.0, 5.0, -6.0]).unwrap());
        let mut halvings = 0;
        while x.abs().unwrap().max_all().unwrap().item().unwrap() >= 1.0 {
            x = x.scale(0.5).unwrap();
            halvings += 1;
        }
        assert_eq!(halvings, 6); // 40 / 2^6 < 1
        assert_eq!(ex.stats().flushes, 7);
        // Windows 2…7 have the same structure: the fusion decision is reused.
        assert_eq!(ex.stats().decision_hits, 5);
        assert!(matches!(x.item(), Err(EagerError::NotScalar(6))));
    }

    #[test]
    fn a_full_window_and_a_non_fusible_op_flush() {
        let ex = Eager::with_options(2, FuseOptions::default(), 8);
        let x = ex.tensor(tensor(&[4, 16], 33, 1.0));
        let mut y = x.clone();
        for _ in 0..20 {
            y = y.tanh().unwrap();
        }
        // 20 ops through a window of 8: two automatic flushes so far.
        assert_eq!(ex.stats().flushes, 2);
        assert_eq!(ex.pending(), 4);
        let c = y.concat(&[&x], 0).unwrap();
        assert_eq!(
            ex.pending(),
            0,
            "concat runs the window before and after it"
        );
        assert_eq!(c.shape(), &[8, 16]);
        let mut want = x.to_f32_vec().unwrap();
        for v in &mut want {
            for _ in 0..20 {
                *v = v.tanh();
            }
        }
        let got = c.to_f32_vec().unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-5, "{g} vs {w}");
        }
        // Shape errors are reported when the op is recorded.
        let bad = x.matmul(&x);
        assert!(matches!(bad, Err(EagerError::Graph(_))));
    }

    #[test]
    fn values_nobody_holds_are_not_stored() {
        let ex = Eager::new(2);
        let x = ex.tensor(tensor(&[64, 64], 34, 1.0));
        let y = {
            let a = x.exp().unwrap();
            let b = a.scale(0.5).unwrap();
            b.add(&x).unwrap()
        };
        y.to_tensor().unwrap();
        // exp, scale, add: one element-wise kernel with one output.
        assert_eq!(ex.stats().kernels, 1);
    }
}
