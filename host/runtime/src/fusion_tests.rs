//! Fusion plans checked through the runtime: plans of a graph prepared by
//! value and by reference agree, `dvm explain` bounds its sibling lists,
//! and two ignored tools that compare plans of generated graphs.

use dvm_fuse::{FuseOptions, FusionPlan};
use dvm_graph::models::{generated_graph as generated, masked_layers};
use dvm_graph::{Graph, NodeId};
use dvm_isa::DType;
use dvm_sym::Dim;

fn c(v: i64) -> Dim {
    Dim::from(v)
}

fn generated_graph(seed: u64) -> Graph {
    generated(seed, None)
}

fn outline_of(g: &Graph, p: &FusionPlan) -> String {
    p.outline(g)
}

/// Writes the plans of generated graphs to `$DVM_PLAN_DUMP` (compare two
/// versions of the pass with `diff`; `DVM_PLAN_NO_COMPOSITES` turns
/// [`FuseOptions::composites`] off; `DVM_PLAN_GRAPHS` also writes each
/// decomposed graph) and prints, per option set, how many
/// plans differ with composites on and off and their kernels, launches and
/// bytes moved at `S = 64`: `cargo test --release -p dvm-runtime --lib
/// dump_generated_plans -- --ignored --nocapture` with `DVM_PLAN_TOTALS`
/// set (without it, only the plans are written).
#[test]
#[ignore]
fn dump_generated_plans() {
    let Some(path) = std::env::var_os("DVM_PLAN_DUMP") else {
        return;
    };
    let count: u64 = std::env::var("DVM_PLAN_COUNT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    let composites = std::env::var_os("DVM_PLAN_NO_COMPOSITES").is_none();
    let totals = std::env::var_os("DVM_PLAN_TOTALS").is_some();
    let graphs = std::env::var_os("DVM_PLAN_GRAPHS").is_some();
    let rt = crate::Runtime::new(1, 1 << 16);
    let sets = [(64, true, false), (64, false, true), (12, true, true)];
    // Per option set: plans that differ, better / worse (kernels, then
    // bytes), and the totals with composites on and off.
    let mut summary = [(0u64, 0u64, 0u64, [0u64; 3], [0u64; 3]); 3];
    let mut out = String::new();
    for seed in 0..count {
        let g = generated_graph(seed);
        let mut bindings = dvm_sym::Bindings::new();
        if let Some(s) = g.scope().lookup("S") {
            bindings.set(s, 64);
        }
        for (k, &(max_nodes, stack, reasons)) in sets.iter().enumerate() {
            let opts = FuseOptions {
                max_nodes,
                stack,
                reasons,
                composites,
                ..FuseOptions::default()
            };
            let prepare = |composites| {
                let o = FuseOptions { composites, ..opts };
                let p = crate::Prepared::with_options(&g, &o).unwrap();
                assert!(p.fuse_error().is_none(), "{:?}", p.fuse_error());
                p
            };
            out.push_str(&format!("graph {seed} options {k}\n"));
            if !totals {
                let p = prepare(composites);
                if graphs {
                    out.push_str(&p.graph().to_string());
                }
                out.push_str(&outline_of(p.graph(), p.fusion()));
                continue;
            }
            let (on, off) = (prepare(true), prepare(false));
            let dumped = if composites { &on } else { &off };
            out.push_str(&outline_of(dumped.graph(), dumped.fusion()));
            let t = |p: &crate::Prepared| {
                let t = crate::explain::totals(&rt, p, &bindings).unwrap();
                [t.kernels as u64, t.launches as u64, t.bytes_moved]
            };
            let (a, b) = (t(&on), t(&off));
            let s = &mut summary[k];
            if outline_of(on.graph(), on.fusion()) != outline_of(off.graph(), off.fusion()) {
                s.0 += 1;
                let key = |x: &[u64; 3]| (x[0], x[2]);
                if key(&a) < key(&b) {
                    s.1 += 1;
                } else if key(&a) > key(&b) {
                    s.2 += 1;
                }
            }
            for i in 0..3 {
                s.3[i] += a[i];
                s.4[i] += b[i];
            }
        }
    }
    for (k, s) in summary.iter().enumerate().filter(|_| totals) {
        println!(
            "options {:?}: {} of {count} plans differ with composites on (better {}, worse {}); kernels / launches / bytes: on {:?}, off {:?}",
            sets[k], s.0, s.1, s.2, s.3, s.4
        );
    }
    std::fs::write(path, out).unwrap();
}

/// Decomposing a graph by value gives the graph, spans and plan that
/// decomposing a reference does, on generated graphs (with and without
/// dotted names, which take the copying path).
#[test]
fn owned_decomposition_equals_copying_decomposition() {
    let dotted = || {
        let mut g = Graph::new();
        let x = g.input("x.in", DType::F32, &[c(4), c(8)]).unwrap();
        let y = g.softmax(x, -1).unwrap();
        g.rename(y, "y").unwrap();
        g.output("y", y).unwrap();
        g
    };
    let graphs = (0..400).map(generated_graph).chain([dotted()]);
    for (seed, g) in graphs.enumerate() {
        let (a, sa) = dvm_graph::decompose_with_spans(&g).unwrap();
        let (b, sb) = dvm_graph::decompose_owned(g.clone()).unwrap();
        assert_eq!(a.to_string(), b.to_string(), "graph {seed}");
        assert_eq!(sa, sb, "graph {seed}");
        // Each composite became as many nodes as `decomposed_len` says.
        let lens: Vec<usize> = g
            .nodes()
            .iter()
            .filter_map(|n| dvm_graph::decomposed_len(&n.op))
            .collect();
        let spans: Vec<usize> = sa.iter().map(|r| r.len()).collect();
        assert_eq!(lens, spans, "graph {seed}");
        assert_eq!(a.inputs(), b.inputs(), "graph {seed}");
        assert_eq!(a.outputs(), b.outputs(), "graph {seed}");
        assert_eq!(a.nodes(), b.nodes(), "graph {seed}");
        for (i, n) in b.nodes().iter().enumerate() {
            assert_eq!(b.find(&n.name), Some(NodeId(i)), "graph {seed}");
        }
        let opts = FuseOptions::default();
        let (p, q) = (
            crate::Prepared::with_options(&g, &opts).unwrap(),
            crate::Prepared::from_graph(g, &opts).unwrap(),
        );
        assert_eq!(
            outline_of(p.graph(), p.fusion()),
            outline_of(q.graph(), q.fusion()),
            "graph {seed}"
        );
    }
}

/// An input every layer reads (an attention mask): every pair of its
/// readers is a sibling candidate, rejected by the dependence between the
/// layers. `dvm explain` lists a few per shared input and counts the rest
/// in one line, so that a deep model's report grows with its layers, not
/// with their square.
#[test]
fn explain_counts_sibling_rejections_past_a_few_per_shared_input() {
    // Fewer readers than `pattern::DEPENDENCE_READERS`: every pair is asked.
    let (g, _, _) = masked_layers(12);
    let rt = crate::Runtime::new(1, 16);
    let mut b = dvm_sym::Bindings::new();
    b.set(g.scope().lookup("S").unwrap(), 8);
    let text = crate::explain::explain(&g, &b, &FuseOptions::default(), &rt).unwrap();
    let p = crate::Prepared::new(&g).unwrap();
    let via_mask = p
        .fusion()
        .rejections
        .iter()
        .filter(|r| r.via.is_some_and(|v| p.graph()[v].name == "mask"))
        .count();
    assert!(via_mask > 2 * crate::explain::SIBLINGS_LISTED, "{via_mask}");
    let listed = text
        .lines()
        .filter(|l| l.contains("(both read `mask`)"))
        .count();
    assert_eq!(listed, crate::explain::SIBLINGS_LISTED, "{text}");
    let more = format!(
        "… and {} more pairs of groups that both read `mask` [siblings]",
        via_mask - listed
    );
    assert!(text.contains(&more), "missing `{more}` in\n{text}");
}

/// Prints how the sweep's plans of generated graphs compare with the
/// rules' (kernels, launches and bytes moved at `S = 64`, totals and the
/// plans where either is better): `cargo test --release -p dvm-runtime --lib
/// compare_sweep_with_rules -- --ignored --nocapture` (`DVM_PLAN_COUNT`
/// graphs, default 3000).
#[test]
#[ignore]
fn compare_sweep_with_rules() {
    let count: u64 = std::env::var("DVM_PLAN_COUNT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    let rt = crate::Runtime::new(1, 1 << 16);
    let (mut rules_t, mut sweep_t) = ([0u64; 3], [0u64; 3]);
    let (mut better, mut worse, mut same) = (0, 0, 0);
    for seed in 0..count {
        let g = generated_graph(seed);
        let mut bindings = dvm_sym::Bindings::new();
        if let Some(s) = g.scope().lookup("S") {
            bindings.set(s, 64);
        }
        let t = |o: &FuseOptions| {
            let p = crate::Prepared::with_options(&g, o).unwrap();
            assert!(p.fuse_error().is_none(), "{seed}: {:?}", p.fuse_error());
            p.fusion().verify(p.graph()).unwrap();
            let t = crate::explain::totals(&rt, &p, &bindings).unwrap();
            [t.kernels as u64, t.launches as u64, t.bytes_moved]
        };
        let rules_opts = FuseOptions {
            reasons: false,
            ..FuseOptions::default()
        };
        let (a, b) = (t(&rules_opts), t(&FuseOptions::eager()));
        for i in 0..3 {
            rules_t[i] += a[i];
            sweep_t[i] += b[i];
        }
        let key = |x: &[u64; 3]| (x[0], x[2]);
        match key(&b).cmp(&key(&a)) {
            std::cmp::Ordering::Less => better += 1,
            std::cmp::Ordering::Greater => worse += 1,
            std::cmp::Ordering::Equal => same += 1,
        }
    }
    println!(
        "{count} graphs: kernels / launches / bytes: rules {rules_t:?}, sweep {sweep_t:?}; sweep better in {better}, worse in {worse}, the same in {same}"
    );
}
