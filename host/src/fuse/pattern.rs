//! The rewrite rules, in priority order. The driver asks each rule in turn
//! for a patch and restarts from the first after every applied patch, so an
//! earlier rule always wins a contested operator.
//!
//! | rule | merges or stacks |
//! |---|---|
//! | `elementwise-chain` | an element-wise group into its element-wise consumer (same space, or a broadcast producer that is not stored) |
//! | `reduce-prologue` | an element-wise group into the reduction that consumes it |
//! | `reduce-epilogue` | a reduction into the element-wise group that consumes its result (values broadcast back along the axis) |
//! | `reduce-chain` | two reductions of the same axis and space (layernorm's mean and variance) |
//! | `matmul-epilogue` | an element-wise consumer into the matmul (bias, activation, residual, scaling): the mix kernel |
//! | `siblings` | element-wise or reduce groups that read a common input over the same space (several outputs, the input loaded once) |
//! | `parallel-stack` | independent groups that read a common input (e.g. the q, k, v projections): one parallel launch |
//!
//! Reductions take their neighbours before matmuls do: a reduction is
//! memory-bound and gains the most from keeping its prologue and epilogue in
//! UB, while an element-wise tail costs a matmul kernel the same either way.

use super::{ClusterKind, FuseOptions, Log, Patch, Rejection, Rule, State};

/// Which group kinds a vertical rule joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sel {
    Elementwise,
    Reduce,
    Matmul,
}

fn is(sel: Sel, k: &ClusterKind) -> bool {
    matches!(
        (sel, k),
        (Sel::Elementwise, ClusterKind::Elementwise)
            | (Sel::Reduce, ClusterKind::Reduce { .. })
            | (Sel::Matmul, ClusterKind::Matmul)
    )
}

/// Merges a producer group into a consumer group along a data edge.
struct Vertical {
    id: u8,
    name: &'static str,
    producer: Sel,
    consumer: Sel,
}

impl Rule for Vertical {
    fn name(&self) -> &'static str {
        self.name
    }

    fn next(&mut self, st: &State<'_>, log: &mut Log) -> Option<Patch> {
        let g = st.graph();
        for p in 0..g.nodes().len() {
            let p = crate::graph::NodeId(p);
            let Some(a) = st.owner(p) else { continue };
            if !is(self.producer, &st.cluster(a).kind) {
                continue;
            }
            for &c in st.users(p) {
                let Some(b) = st.owner(c) else { continue };
                if a == b || !is(self.consumer, &st.cluster(b).kind) {
                    continue;
                }
                if !log.first_time(self.id, a, b) {
                    continue;
                }
                match st.try_merge(a, b) {
                    Ok(merged) => return Some(Patch::Merge { a, b, merged }),
                    Err(reason) => log.reject(Rejection {
                        rule: self.name,
                        a: p,
                        b: c,
                        via: None,
                        reason,
                    }),
                }
            }
        }
        None
    }
}

/// Merges two element-wise or reduce groups that read a common input.
struct Siblings;

impl Rule for Siblings {
    fn name(&self) -> &'static str {
        "siblings"
    }

    fn next(&mut self, st: &State<'_>, log: &mut Log) -> Option<Patch> {
        let g = st.graph();
        let mut owners: Vec<(usize, crate::graph::NodeId)> = Vec::new();
        for x in 0..g.nodes().len() {
            let x = crate::graph::NodeId(x);
            let users = st.users(x);
            if users.len() < 2 {
                continue;
            }
            owners.clear();
            for &u in users {
                if let Some(c) = st.owner(u) {
                    let ok = !matches!(st.cluster(c).kind, ClusterKind::Matmul)
                        && !st.is_stacked(c)
                        && st.owner(x) != Some(c);
                    if ok && !owners.iter().any(|(o, _)| *o == c) {
                        owners.push((c, u));
                    }
                }
            }
            for i in 0..owners.len() {
                for j in i + 1..owners.len() {
                    let ((a, ua), (b, ub)) = (owners[i], owners[j]);
                    let (lo, hi) = (a.min(b), a.max(b));
                    if !log.first_time(100, lo, hi) {
                        continue;
                    }
                    match st.try_merge(a, b) {
                        Ok(merged) => return Some(Patch::Merge { a, b, merged }),
                        Err(reason) => log.reject(Rejection {
                            rule: "siblings",
                            a: ua,
                            b: ub,
                            via: Some(x),
                            reason,
                        }),
                    }
                }
            }
        }
        None
    }
}

/// Stacks independent groups that read a common input into one parallel
/// launch (each keeps its own body and iteration space, so no shape needs
/// to agree).
struct ParallelStack {
    max: usize,
}

impl Rule for ParallelStack {
    fn name(&self) -> &'static str {
        "parallel-stack"
    }

    fn next(&mut self, st: &State<'_>, log: &mut Log) -> Option<Patch> {
        let g = st.graph();
        for x in 0..g.nodes().len() {
            let x = crate::graph::NodeId(x);
            if st.users(x).len() < 2 || !log.first_time(200, x.0, 0) {
                continue;
            }
            let mut cands: Vec<usize> = Vec::new();
            for &u in st.users(x) {
                if let Some(c) = st.owner(u) {
                    if !st.is_stacked(c) && st.owner(x) != Some(c) && !cands.contains(&c) {
                        cands.push(c);
                    }
                }
            }
            let mut chosen: Vec<usize> = Vec::new();
            for c in cands {
                if chosen.len() >= self.max {
                    break;
                }
                if chosen
                    .iter()
                    .all(|&d| st.path_between(c, d, true).is_none())
                {
                    chosen.push(c);
                }
            }
            if chosen.len() >= 2 {
                return Some(Patch::Stack { members: chosen });
            }
        }
        None
    }
}

/// The rules for `opts`, in priority order.
pub fn rules(opts: &FuseOptions) -> Vec<Box<dyn Rule>> {
    let mut r: Vec<Box<dyn Rule>> = Vec::new();
    if opts.fuse {
        let v = |id, name, producer, consumer| -> Box<dyn Rule> {
            Box::new(Vertical {
                id,
                name,
                producer,
                consumer,
            })
        };
        r.push(v(
            0,
            "elementwise-chain",
            Sel::Elementwise,
            Sel::Elementwise,
        ));
        r.push(v(1, "reduce-prologue", Sel::Elementwise, Sel::Reduce));
        r.push(v(2, "reduce-epilogue", Sel::Reduce, Sel::Elementwise));
        r.push(v(3, "reduce-chain", Sel::Reduce, Sel::Reduce));
        r.push(v(4, "matmul-epilogue", Sel::Matmul, Sel::Elementwise));
        r.push(Box::new(Siblings));
    }
    if opts.stack {
        r.push(Box::new(ParallelStack {
            max: opts.max_stack,
        }));
    }
    r
}
