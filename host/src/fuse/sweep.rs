//! The one-sweep fuser: the eager API's decision, a fraction of the rules'
//! work ([`FuseOptions::sweep`]).
//!
//! The rules of [`super::pattern`] run to a fixed point over a state that
//! keeps a topological numbering of the units up to date after every
//! rewrite, so that each candidate's cycle search stays bounded on graphs
//! of thousands of nodes. A recorded eager window is a few dozen
//! operators, decided once per new structure while the caller waits for a
//! value: there the bookkeeping costs more than the decisions. This pass
//! makes the same kinds of merges, each proved by the same validation
//! ([`legality::validate_fast`], the node and parameter limits), in a
//! fixed order of phases:
//!
//! 1. **Forward**: the units in graph order (a decomposed composite that
//!    forms a group is one unit, as in [`FusionPlan::with_composites`]);
//!    an element-wise or reduce unit joins the element-wise and reduce
//!    groups it reads from: all of them when their union is a group, else
//!    the first that takes it (element-wise producers before reductions).
//!    This covers the rules `elementwise-chain`, `reduce-prologue`,
//!    `reduce-epilogue` and `reduce-chain`.
//! 2. **Matmul epilogues**: each matmul group takes the element-wise groups
//!    that read it (`matmul-epilogue`). Coming after the forward phase, a
//!    reduction has taken its prologue first, as the rules' priority says.
//! 3. **Siblings**: element-wise and reduce groups that read a common
//!    value merge when their union is a group (`siblings`).
//! 4. **Parallel stacks**: independent groups reading a common value share
//!    a launch (`parallel-stack`), at most [`FuseOptions::max_stack`].
//!
//! Cycles between kernels are ruled out with dependence sets: every unit
//! has an id, every live unit the set of ids it absorbed and the set of
//! ids it depends on (transitively, kept closed across merges). A union
//! of units is acyclic exactly when no other unit it depends on depends on
//! it in turn. The plan's order is Kahn's algorithm over the final units,
//! the ready unit with the smallest first node first.
//!
//! The plan is checked ([`FusionPlan::verify`]) in builds with debug
//! assertions; the tests compare the two passes' plans.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Range;

use super::legality::{role_of, validate_fast, Class, Facts, ShapeBuffers, Shapes, Users};
use super::{store_layouts, Cluster, ClusterKind, FuseError, FuseOptions, FusionPlan, Role, Unit};
use crate::graph::{Graph, NodeId};

/// No unit (a source node: an input or a constant).
const NONE: u32 = u32::MAX;

/// What a sweep reads and does not change.
struct Ctx<'g> {
    g: &'g Graph,
    opts: FuseOptions,
    roles: Vec<Role>,
    users: Users,
    is_output: Vec<bool>,
    shapes: Shapes,
}

impl Ctx<'_> {
    fn facts(&self) -> Facts<'_> {
        Facts {
            graph: self.g,
            users: &self.users,
            is_output: &self.is_output,
            roles: &self.roles,
        }
    }
}

/// A unit of the sweep: a group, or a node lowered on its own (a view or
/// an opaque operator: `kind` is `None`). Units are numbered in order of
/// creation; a unit's number is also its id in the dependence sets.
struct Part {
    kind: Option<ClusterKind>,
    /// Members, ascending.
    nodes: Vec<NodeId>,
    /// The group's space (a shape id).
    space: u32,
    /// An upper bound of its buffer parameters ([`super::count_params`]).
    params: u32,
    /// Merged into another unit.
    dead: bool,
    /// Its parallel stack, or `NONE`.
    stack: u32,
}

/// The working state of a sweep.
struct Sweep {
    /// Unit of every node (`NONE` for sources).
    owner: Vec<u32>,
    parts: Vec<Part>,
    /// Words per dependence set.
    words: usize,
    /// Per unit, `words` words each: the ids it absorbed, and the ids it
    /// depends on (not its own).
    ids: Vec<u64>,
    dep: Vec<u64>,
    /// The live unit that absorbed each id.
    cur: Vec<u32>,
    /// Members of the candidate union: units marked with `epoch`.
    mark: Vec<u32>,
    epoch: u32,
    /// Node marks for counting parameters (`epoch` too).
    seen: Vec<u32>,
    classes: Vec<Class>,
    /// Scratch: a candidate union's members, ids and dependences.
    union: Vec<NodeId>,
    ids_u: Vec<u64>,
    dep_u: Vec<u64>,
    stacks: Vec<Vec<usize>>,
    applied: Vec<(&'static str, String)>,
}

impl Sweep {
    fn row(v: &[u64], p: u32, words: usize) -> &[u64] {
        &v[p as usize * words..(p as usize + 1) * words]
    }

    /// A new unit of `nodes`; its dependences are those of the units its
    /// members read.
    fn add(
        &mut self,
        kind: Option<ClusterKind>,
        nodes: Vec<NodeId>,
        space: u32,
        params: u32,
        g: &Graph,
    ) -> u32 {
        let p = self.parts.len() as u32;
        let w = self.words;
        for &m in &nodes {
            self.owner[m.0] = p;
        }
        self.ids.extend(std::iter::repeat_n(0, w));
        self.dep.extend(std::iter::repeat_n(0, w));
        let base = p as usize * w;
        self.ids[base + p as usize / 64] |= 1 << (p % 64);
        for &m in &nodes {
            for &o in &g[m].operands {
                let q = self.owner[o.0];
                if q == NONE || q == p {
                    continue;
                }
                let qb = q as usize * w;
                for k in 0..w {
                    self.dep[base + k] |= self.ids[qb + k] | self.dep[qb + k];
                }
            }
        }
        self.cur.push(p);
        self.mark.push(0);
        self.parts.push(Part {
            kind,
            nodes,
            space,
            params,
            dead: false,
            stack: NONE,
        });
        p
    }

    fn next_epoch(&mut self) -> u32 {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.mark.iter_mut().for_each(|m| *m = 0);
            self.seen.iter_mut().for_each(|m| *m = 0);
            self.epoch = 1;
        }
        self.epoch
    }

    /// The union's ids and dependences (in `ids_u`, `dep_u`), or `false`
    /// when it would close a cycle: a unit outside it depends on it and
    /// it on that unit.
    fn acyclic(&mut self, list: &[u32]) -> bool {
        let w = self.words;
        self.ids_u.clear();
        self.ids_u.resize(w, 0);
        self.dep_u.clear();
        self.dep_u.resize(w, 0);
        for &p in list {
            let b = p as usize * w;
            for k in 0..w {
                self.ids_u[k] |= self.ids[b + k];
                self.dep_u[k] |= self.dep[b + k];
            }
        }
        for k in 0..w {
            self.dep_u[k] &= !self.ids_u[k];
        }
        for k in 0..w {
            let mut bits = self.dep_u[k];
            while bits != 0 {
                let id = k * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let x = self.cur[id] as usize;
                let dx = &self.dep[x * w..(x + 1) * w];
                if dx.iter().zip(&self.ids_u).any(|(d, i)| d & i != 0) {
                    return false;
                }
            }
        }
        true
    }

    /// Merges the groups `list` (live, unstacked, distinct) into one when
    /// the union is a group within the limits and closes no cycle; returns
    /// the surviving unit.
    fn merge(&mut self, cx: &Ctx<'_>, list: &[u32], rule: &'static str) -> Option<u32> {
        let total: usize = list
            .iter()
            .map(|&p| self.parts[p as usize].nodes.len())
            .sum();
        if total > cx.opts.max_nodes || !self.acyclic(list) {
            return None;
        }
        let epoch = self.next_epoch();
        for &p in list {
            self.mark[p as usize] = epoch;
        }
        let mut union = std::mem::take(&mut self.union);
        union.clear();
        let mut sorted = true;
        for &p in list {
            let nodes = &self.parts[p as usize].nodes;
            sorted &= union
                .last()
                .is_none_or(|l| nodes.first().is_none_or(|f| l < f));
            union.extend_from_slice(nodes);
        }
        if !sorted {
            union.sort_unstable();
        }
        let (owner, mark) = (&self.owner, &self.mark);
        let member = |m: NodeId| {
            let o = owner[m.0];
            o != NONE && mark[o as usize] == epoch
        };
        let found = validate_fast(&cx.facts(), &cx.shapes, &union, member, &mut self.classes);
        let Some((kind, space)) = found else {
            self.union = union;
            return None;
        };
        let mut params: usize = list
            .iter()
            .map(|&p| self.parts[p as usize].params as usize)
            .sum();
        if params > cx.opts.max_params {
            params = self.count_params(cx, &union, epoch);
            if params > cx.opts.max_params {
                self.union = union;
                return None;
            }
        }
        let s = *list.iter().min().unwrap_or(&list[0]);
        for &m in &union {
            self.owner[m.0] = s;
        }
        for &p in list.iter().filter(|&&p| p != s) {
            let part = &mut self.parts[p as usize];
            part.dead = true;
            part.nodes.clear();
        }
        let old = std::mem::replace(&mut self.parts[s as usize].nodes, union);
        self.union = old;
        let part = &mut self.parts[s as usize];
        part.kind = Some(kind);
        part.space = space;
        part.params = params as u32;
        self.absorb(s);
        self.applied.push((rule, String::new()));
        Some(s)
    }

    /// Makes `s` the unit of the ids and dependences in `ids_u` and
    /// `dep_u`, and adds them to every unit that depends on one of those
    /// ids (which keeps every set closed).
    fn absorb(&mut self, s: u32) {
        let w = self.words;
        let b = s as usize * w;
        self.ids[b..b + w].copy_from_slice(&self.ids_u);
        self.dep[b..b + w].copy_from_slice(&self.dep_u);
        for k in 0..w {
            let mut bits = self.ids_u[k];
            while bits != 0 {
                self.cur[k * 64 + bits.trailing_zeros() as usize] = s;
                bits &= bits - 1;
            }
        }
        for q in 0..self.parts.len() {
            if q == s as usize || self.parts[q].dead {
                continue;
            }
            let qb = q * w;
            if (0..w).any(|k| self.dep[qb + k] & self.ids_u[k] != 0) {
                for k in 0..w {
                    self.dep[qb + k] |= self.dep_u[k] | self.ids_u[k];
                }
            }
        }
    }

    /// Distinct buffers the union `nodes` (units marked with `epoch`)
    /// reads plus the values it stores.
    fn count_params(&mut self, cx: &Ctx<'_>, nodes: &[NodeId], epoch: u32) -> usize {
        let (owner, mark) = (&self.owner, &self.mark);
        let member = |m: NodeId| {
            let o = owner[m.0];
            o != NONE && mark[o as usize] == epoch
        };
        let mut count = 0;
        for &n in nodes {
            for &o in &cx.g[n].operands {
                if !member(o) && self.seen[o.0] != epoch {
                    self.seen[o.0] = epoch;
                    count += 1;
                }
            }
            if cx.is_output[n.0] || cx.users.of(n).iter().any(|&u| !member(u)) {
                count += 1;
            }
        }
        count
    }

    /// Whether live units `a` and `b` are independent: neither depends on
    /// the other.
    fn independent(&self, a: u32, b: u32) -> bool {
        let w = self.words;
        let (ia, da) = (Self::row(&self.ids, a, w), Self::row(&self.dep, a, w));
        let (ib, db) = (Self::row(&self.ids, b, w), Self::row(&self.dep, b, w));
        (0..w).all(|k| da[k] & ib[k] == 0 && db[k] & ia[k] == 0)
    }

    /// The live group holding `n`, when it is one of `kinds`.
    fn group_of(&self, n: NodeId, ok: impl Fn(&ClusterKind) -> bool) -> Option<u32> {
        let p = self.owner[n.0];
        if p == NONE {
            return None;
        }
        let part = &self.parts[p as usize];
        (part.stack == NONE && part.kind.as_ref().is_some_and(ok)).then_some(p)
    }
}

fn ewise_or_reduce(k: &ClusterKind) -> bool {
    !matches!(k, ClusterKind::Matmul)
}

/// The plan of `graph` (composites decomposed into the ranges
/// `composites`) by the sweep; see the [module docs](self).
///
/// # Errors
/// [`FuseError`] when the final units form a cycle (a bug; the caller
/// then runs the graph unfused).
pub(super) fn plan(
    graph: &Graph,
    opts: &FuseOptions,
    composites: &[Range<usize>],
) -> Result<FusionPlan, FuseError> {
    let g = graph;
    let n = g.nodes().len();
    let cx = Ctx {
        g,
        opts: *opts,
        roles: (0..n).map(|i| role_of(g, NodeId(i))).collect(),
        users: Users::new(g),
        is_output: {
            let mut v = vec![false; n];
            for (_, id) in g.outputs() {
                if let Some(o) = v.get_mut(id.0) {
                    *o = true;
                }
            }
            v
        },
        shapes: Shapes::new_in(g, ShapeBuffers::default()),
    };
    let words = n.div_ceil(64).max(1);
    let mut sw = Sweep {
        owner: vec![NONE; n],
        parts: Vec::with_capacity(n),
        words,
        ids: Vec::with_capacity(n * words),
        dep: Vec::with_capacity(n * words),
        cur: Vec::with_capacity(n),
        mark: Vec::with_capacity(n),
        epoch: 0,
        seen: vec![0; n],
        classes: vec![Class::Full; n],
        union: Vec::new(),
        ids_u: Vec::with_capacity(words),
        dep_u: Vec::with_capacity(words),
        stacks: Vec::new(),
        applied: Vec::new(),
    };
    forward(&cx, &mut sw, composites);
    if opts.fuse {
        matmul_epilogues(&cx, &mut sw);
        siblings(&cx, &mut sw);
    }
    if opts.stack {
        stacks(&cx, &mut sw);
    }
    finish(cx, sw)
}

/// The forward phase (see the [module docs](self)).
fn forward(cx: &Ctx<'_>, sw: &mut Sweep, composites: &[Range<usize>]) {
    let (g, n) = (cx.g, cx.g.nodes().len());
    let mut spans = composites
        .iter()
        .filter(|_| cx.opts.fuse && cx.opts.composites)
        .peekable();
    let mut producers: Vec<u32> = Vec::new();
    let mut i = 0;
    while i < n {
        while spans.next_if(|r| r.start < i).is_some() {}
        let seeded = spans
            .next_if(|r| r.start == i)
            .and_then(|r| seed(cx, sw, r.clone()).map(|u| (u, r.end)));
        let (u, end) = match seeded {
            Some(seeded) => seeded,
            None => {
                let id = NodeId(i);
                let node = &g[id];
                let (kind, space) = match cx.roles[i] {
                    Role::Elementwise => (Some(ClusterKind::Elementwise), cx.shapes.of(id)),
                    Role::Reduce { axis, keepdims } => {
                        sw.classes[i] = Class::Reduced(keepdims);
                        (
                            Some(ClusterKind::Reduce { axis }),
                            cx.shapes.of(node.operands[0]),
                        )
                    }
                    Role::Matmul => (Some(ClusterKind::Matmul), cx.shapes.of(id)),
                    Role::Data if node.operands.is_empty() => {
                        i += 1;
                        continue;
                    }
                    Role::Data | Role::Opaque => (None, NONE),
                };
                let params = node.operands.len() as u32 + 1;
                (sw.add(kind, vec![id], space, params, g), i + 1)
            }
        };
        i = end;
        let Some(kind) = sw.parts[u as usize].kind.clone() else {
            continue;
        };
        if !cx.opts.fuse || !ewise_or_reduce(&kind) {
            continue;
        }
        // The element-wise and reduce groups it reads from, element-wise
        // ones first.
        producers.clear();
        for &m in &sw.parts[u as usize].nodes {
            for &o in &g[m].operands {
                if let Some(p) = sw.group_of(o, ewise_or_reduce) {
                    if p != u && !producers.contains(&p) {
                        producers.push(p);
                    }
                }
            }
        }
        if producers.is_empty() {
            continue;
        }
        producers.sort_by_key(|&p| {
            (
                !matches!(sw.parts[p as usize].kind, Some(ClusterKind::Elementwise)),
                p,
            )
        });
        let rule = |p: &Part| match (&kind, &p.kind) {
            (ClusterKind::Elementwise, Some(ClusterKind::Elementwise)) => "elementwise-chain",
            (ClusterKind::Elementwise, _) => "reduce-epilogue",
            (_, Some(ClusterKind::Elementwise)) => "reduce-prologue",
            _ => "reduce-chain",
        };
        let first_rule = rule(&sw.parts[producers[0] as usize]);
        producers.push(u);
        if sw.merge(cx, &producers, first_rule).is_some() {
            continue;
        }
        producers.pop();
        if producers.len() > 1 {
            for k in 0..producers.len() {
                let p = producers[k];
                let r = rule(&sw.parts[p as usize]);
                if sw.merge(cx, &[p, u], r).is_some() {
                    break;
                }
            }
        }
    }
}

/// The composite `r` as one unit when it forms a group within the limits
/// (as [`super::State`] seeds it).
fn seed(cx: &Ctx<'_>, sw: &mut Sweep, r: Range<usize>) -> Option<u32> {
    if r.len() < 2 || r.end > sw.owner.len() || r.len() > cx.opts.max_nodes {
        return None;
    }
    let nodes: Vec<NodeId> = r.clone().map(NodeId).collect();
    let member = |m: NodeId| r.contains(&m.0);
    let (kind, space) = validate_fast(&cx.facts(), &cx.shapes, &nodes, member, &mut sw.classes)?;
    let mut bound: usize = nodes.iter().map(|&m| cx.g[m].operands.len() + 1).sum();
    if bound > cx.opts.max_params {
        bound = super::count_params(&cx.facts(), &nodes, &member);
        if bound > cx.opts.max_params {
            return None;
        }
    }
    let u = sw.add(Some(kind), nodes, space, bound as u32, cx.g);
    sw.applied.push(("composite", String::new()));
    Some(u)
}

/// The matmul epilogues (see the [module docs](self)).
fn matmul_epilogues(cx: &Ctx<'_>, sw: &mut Sweep) {
    let mut rejected: Vec<u32> = Vec::new();
    for p in 0..sw.parts.len() as u32 {
        if sw.parts[p as usize].dead || sw.parts[p as usize].kind != Some(ClusterKind::Matmul) {
            continue;
        }
        rejected.clear();
        let mut m = p;
        'grow: loop {
            for k in 0..sw.parts[m as usize].nodes.len() {
                let x = sw.parts[m as usize].nodes[k];
                for &v in cx.users.of(x) {
                    let Some(e) = sw.group_of(v, |k| *k == ClusterKind::Elementwise) else {
                        continue;
                    };
                    if e == m || rejected.contains(&e) {
                        continue;
                    }
                    match sw.merge(cx, &[m, e], "matmul-epilogue") {
                        Some(s) => {
                            m = s;
                            continue 'grow;
                        }
                        None => rejected.push(e),
                    }
                }
            }
            break;
        }
    }
}

/// Most groups reading one value that [`siblings`] pairs up.
const SIBLING_READERS: usize = 16;

/// The siblings phase (see the [module docs](self)).
fn siblings(cx: &Ctx<'_>, sw: &mut Sweep) {
    let mut readers: Vec<u32> = Vec::new();
    for x in 0..cx.g.nodes().len() {
        let users = cx.users.of(NodeId(x));
        if users.len() < 2 {
            continue;
        }
        readers.clear();
        let ox = sw.owner[x];
        for &u in users {
            if let Some(p) = sw.group_of(u, ewise_or_reduce) {
                if p != ox && !readers.contains(&p) && readers.len() < SIBLING_READERS {
                    readers.push(p);
                }
            }
        }
        for i in 0..readers.len() {
            for j in i + 1..readers.len() {
                let (a, b) = (sw.cur[readers[i] as usize], sw.cur[readers[j] as usize]);
                if a != b && !sw.parts[a as usize].dead && !sw.parts[b as usize].dead {
                    sw.merge(cx, &[a, b], "siblings");
                }
            }
        }
    }
}

/// The parallel stacks (see the [module docs](self)).
fn stacks(cx: &Ctx<'_>, sw: &mut Sweep) {
    let mut cands: Vec<u32> = Vec::new();
    let mut chosen: Vec<u32> = Vec::new();
    for x in 0..cx.g.nodes().len() {
        let users = cx.users.of(NodeId(x));
        if users.len() < 2 {
            continue;
        }
        let ox = sw.owner[x];
        cands.clear();
        for &u in users {
            if let Some(p) = sw.group_of(u, |_| true) {
                if p != ox && !cands.contains(&p) {
                    cands.push(p);
                }
            }
        }
        chosen.clear();
        for &c in &cands {
            if chosen.len() >= cx.opts.max_stack {
                break;
            }
            if chosen.iter().all(|&d| sw.independent(c, d)) {
                chosen.push(c);
            }
        }
        if chosen.len() < 2 {
            continue;
        }
        // A stack is one unit for the dependences: its first group stands
        // for it.
        let s = sw.stacks.len() as u32;
        let w = sw.words;
        sw.ids_u.clear();
        sw.ids_u.resize(w, 0);
        sw.dep_u.clear();
        sw.dep_u.resize(w, 0);
        for &c in &chosen {
            let b = c as usize * w;
            for k in 0..w {
                sw.ids_u[k] |= sw.ids[b + k];
                sw.dep_u[k] |= sw.dep[b + k];
            }
            sw.parts[c as usize].stack = s;
        }
        for k in 0..w {
            sw.dep_u[k] &= !sw.ids_u[k];
        }
        let rep = chosen[0];
        for &c in &chosen[1..] {
            let b = c as usize * w;
            sw.ids[b..b + w].fill(0);
            sw.dep[b..b + w].fill(0);
        }
        sw.absorb(rep);
        sw.stacks.push(chosen.iter().map(|&c| c as usize).collect());
        sw.applied.push(("parallel-stack", String::new()));
    }
}

/// The plan: the units in a topological order (Kahn's algorithm, the
/// ready unit of smallest first node first), groups numbered in that
/// order.
fn finish(cx: Ctx<'_>, sw: Sweep) -> Result<FusionPlan, FuseError> {
    let (g, n) = (cx.g, cx.g.nodes().len());
    // Units numbered by first node: a node's unit is its stack, its group,
    // or itself.
    let mut uid = vec![NONE; n];
    let mut unit_of_part = vec![NONE; sw.parts.len()];
    let mut unit_of_stack = vec![NONE; sw.stacks.len()];
    let mut units: Vec<Unit> = Vec::new();
    for i in 0..n {
        let p = sw.owner[i];
        let (slot, unit) = if p == NONE || sw.parts[p as usize].kind.is_none() {
            (None, Unit::Node(NodeId(i)))
        } else {
            let s = sw.parts[p as usize].stack;
            if s != NONE {
                (
                    Some(&mut unit_of_stack[s as usize]),
                    Unit::Stack(s as usize),
                )
            } else {
                (
                    Some(&mut unit_of_part[p as usize]),
                    Unit::Cluster(p as usize),
                )
            }
        };
        uid[i] = match slot {
            Some(slot) if *slot != NONE => *slot,
            Some(slot) => {
                *slot = units.len() as u32;
                units.push(unit);
                *slot
            }
            None => {
                units.push(unit);
                units.len() as u32 - 1
            }
        };
    }
    let mut indeg = vec![0u32; units.len()];
    for i in 0..n {
        for &v in cx.users.of(NodeId(i)) {
            if uid[v.0] != uid[i] {
                indeg[uid[v.0] as usize] += 1;
            }
        }
    }
    let members = |u: Unit, f: &mut dyn FnMut(NodeId)| match u {
        Unit::Node(m) => f(m),
        Unit::Cluster(p) => sw.parts[p].nodes.iter().for_each(|&m| f(m)),
        Unit::Stack(s) => sw.stacks[s]
            .iter()
            .for_each(|&p| sw.parts[p].nodes.iter().for_each(|&m| f(m))),
    };
    let mut ready: BinaryHeap<Reverse<u32>> = (0..units.len() as u32)
        .filter(|&u| indeg[u as usize] == 0)
        .map(Reverse)
        .collect();
    let mut order = Vec::with_capacity(units.len());
    while let Some(Reverse(u)) = ready.pop() {
        order.push(units[u as usize]);
        members(units[u as usize], &mut |m| {
            for &v in cx.users.of(m) {
                let w = uid[v.0];
                if w != u {
                    indeg[w as usize] -= 1;
                    if indeg[w as usize] == 0 {
                        ready.push(Reverse(w));
                    }
                }
            }
        });
    }
    if order.len() != units.len() {
        return Err(FuseError {
            rule: "sweep",
            what: "the kernels' dependences form a cycle".into(),
        });
    }
    // Groups numbered in order of their units.
    let Sweep {
        owner,
        mut parts,
        stacks: part_stacks,
        applied,
        ..
    } = sw;
    let mut remap = vec![usize::MAX; parts.len()];
    let mut clusters = Vec::new();
    let mut stacks = Vec::new();
    for u in &mut order {
        let (Unit::Cluster(p) | Unit::Stack(p)) = *u else {
            continue;
        };
        let list = match *u {
            Unit::Stack(s) => &part_stacks[s][..],
            _ => std::slice::from_ref(&p),
        };
        let first = clusters.len();
        for &q in list {
            remap[q] = clusters.len();
            let part = &mut parts[q];
            clusters.push(Cluster {
                kind: part.kind.clone().unwrap_or(ClusterKind::Elementwise),
                nodes: std::mem::take(&mut part.nodes),
                space: cx.shapes.shape(part.space),
            });
        }
        *u = match *u {
            Unit::Stack(_) => {
                stacks.push((first..clusters.len()).collect());
                Unit::Stack(stacks.len() - 1)
            }
            _ => Unit::Cluster(first),
        };
    }
    let owner: Vec<Option<usize>> = owner
        .iter()
        .map(|&p| (p != NONE && remap[p as usize] != usize::MAX).then(|| remap[p as usize]))
        .collect();
    let layouts = store_layouts(g, &cx.users, &cx.is_output, cx.opts.fuse, |m| {
        owner[m.0].is_some()
    });
    let plan = FusionPlan {
        clusters,
        owner,
        stacks,
        order,
        rejections: Vec::new(),
        applied,
        roles: cx.roles,
        users: cx.users,
        is_output: cx.is_output,
        layouts,
        options: cx.opts,
    };
    if cfg!(debug_assertions) {
        plan.verify(g).map_err(|what| FuseError {
            rule: "sweep",
            what,
        })?;
    }
    Ok(plan)
}
