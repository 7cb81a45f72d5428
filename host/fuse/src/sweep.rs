//! The one-sweep fuser: the eager API's decision, a fraction of the rules'
//! work ([`FuseOptions::sweep`]).
//!
//! The rules of [`super::pattern`] run to a fixed point over a state that
//! keeps a topological numbering of the units up to date after every
//! rewrite, so that each candidate's cycle search stays bounded on graphs
//! of thousands of nodes. A recorded eager window is a few dozen
//! operators, decided once per new structure while the caller waits for a
//! value: there the bookkeeping costs more than the decisions. This pass
//! applies the same rules ([`super::rules::RULES`]: which groups each
//! joins, each join proved by the same checks), in a fixed order of
//! phases:
//!
//! 1. **Forward**: the units in graph order (a decomposed composite that
//!    forms a group is one unit, as in [`FusionPlan::with_composites`]);
//!    a unit joins the groups it reads from along the edge rules between
//!    element-wise and reduce groups (those not
//!    `RuleDef::from_matmul`): all of them when their union is a group,
//!    else the first that takes it, in the order of the rules that join
//!    them (element-wise producers before reductions).
//! 2. The other rules in the table's order:
//!    - **matmul epilogues**: each matmul group takes the element-wise
//!      groups that read it (`matmul-epilogue`). Coming after the forward
//!      phase, a reduction has taken its prologue first, as the rules'
//!      priority says;
//!    - **siblings**: groups that read a common value merge when their
//!      union is a group (`siblings`);
//!    - **parallel stacks**: independent groups reading a common value
//!      share a launch (`parallel-stack`), at most
//!      [`FuseOptions::max_stack`].
//!
//! Cycles between kernels are ruled out with dependence sets: every unit
//! has an id, every live unit the set of ids it absorbed, the set of ids
//! it depends on and the set of ids that depend on it (transitively, kept
//! closed across merges). A union of units is acyclic exactly when no
//! other unit it depends on depends on it in turn: when its two sets do
//! not meet. The sets are `u128`s ([`MAX_UNITS`]). The plan's order is
//! the units' numbering by first node when every edge goes forward in it,
//! else Kahn's algorithm with the ready unit of smallest first node first.
//!
//! The plan is checked ([`FusionPlan::verify`]) in builds with debug
//! assertions; the tests compare the two passes' plans. (The phases are
//! kept out of line, one call each, so that a profile names them.)

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Range;

use super::legality::{
    self, role_of, validate_fast, validate_onto_larger, Class, Facts, ShapeBuffers, Shapes, Side,
    Users,
};
use super::rules::{self, forward_rule, Joins, Kinds, FORWARD_CONSUMERS, RULES};
use super::{
    count_params_marked, store_layouts, FuseError, FuseOptions, FusionGroup, FusionKind,
    FusionPlan, Role, Unit,
};
use dvm_graph::{decomposed_len, Graph, NodeId};
use dvm_sym::Dim;

/// No unit (a source node: an input or a constant).
const NONE: u32 = u32::MAX;

/// A set of unit ids.
type Set = u128;

/// The closed sets of a unit or a union of units: the ids it absorbed,
/// the ids it depends on and the ids that depend on it (not its own).
#[derive(Clone, Copy)]
struct Sets {
    ids: Set,
    dep: Set,
    desc: Set,
}

/// Most units a sweep numbers (the bits of its sets of unit ids, a
/// `u128`): a graph with more goes to the rules. A recorded window of
/// 64 operators has at most 64 once its composites are seeded.
pub const MAX_UNITS: usize = Set::BITS as usize;

/// What a sweep reads and does not change.
struct Ctx<'g> {
    g: &'g Graph,
    opts: FuseOptions,
    roles: Vec<Role>,
    /// The first node of each node's decomposition and their count at the
    /// end (a node's size, [`Part::size`], is the difference); empty when
    /// every node is its own (a decomposed graph).
    starts: Vec<u32>,
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
    kind: Option<FusionKind>,
    /// The ids it absorbed, the ids it depends on, and the ids that depend
    /// on it (not its own): closed sets.
    ids: Set,
    dep: Set,
    desc: Set,
    /// Members, ascending.
    nodes: Vec<NodeId>,
    /// Nodes of its decomposition: its members' count, but for the
    /// composites of a recorded window ([`decide_recorded`]).
    size: u32,
    /// The group's space (a shape id).
    space: u32,
    /// An upper bound of its buffer parameters ([`super::count_params`]).
    params: u32,
    /// Merged into another unit.
    dead: bool,
    /// Its parallel stack, or `NONE`.
    stack: u32,
}

impl Part {
    /// The group, unit `p`, as [`legality::validate_union`] reads it
    /// (`None` for a node lowered on its own).
    fn side(&self, p: u32) -> Option<Side<'_>> {
        let kind = self.kind.as_ref()?;
        Some(Side {
            id: p,
            kind,
            nodes: &self.nodes,
            space: Some(self.space),
        })
    }
}

/// The working state of a sweep, kept between sweeps
/// ([`super::FuseScratch`]): the next one clears and refills its vectors.
#[derive(Default)]
pub(super) struct Sweep {
    /// Unit of every node (`NONE` for sources).
    owner: Vec<u32>,
    parts: Vec<Part>,
    /// The live unit that absorbed each id.
    cur: Vec<u32>,
    /// Members of the candidate union: units marked with `epoch`.
    mark: Vec<u32>,
    epoch: u32,
    /// Node marks for counting parameters (`epoch` too).
    seen: Vec<u32>,
    /// Scratch classes of a validation, and the classes of every member of
    /// a reduce group as its validation left them.
    classes: Vec<Class>,
    class_of: Vec<Class>,
    /// Scratch of [`legality::validate_onto`].
    checked: Vec<NodeId>,
    queue: Vec<NodeId>,
    /// Member lists of merged-away units, for new ones.
    spare: Vec<Vec<NodeId>>,
    /// Scratch: a candidate union's members.
    union: Vec<NodeId>,
    stacks: Vec<Vec<usize>>,
    applied: Vec<(&'static str, String)>,
    shapes: ShapeBuffers,
    /// Scratch of [`arrange`].
    order: OrderBuffers,
}

/// Scratch of [`arrange`]: the unit of every node, of every group and
/// stack, the in-degrees and the ready units.
#[derive(Default)]
struct OrderBuffers {
    uid: Vec<u32>,
    of_part: Vec<u32>,
    of_stack: Vec<u32>,
    indeg: Vec<u32>,
    ready: BinaryHeap<Reverse<u32>>,
    units: Vec<Unit>,
}

impl Sweep {
    /// Emptied for a graph of `n` nodes (the marks keep their stamps: an
    /// epoch is never reused).
    fn reset(&mut self, n: usize) {
        self.owner.clear();
        self.owner.resize(n, NONE);
        // (A merged-away unit's list went to `spare` at the merge.)
        for mut part in self.parts.drain(..) {
            if part.nodes.capacity() > 0 {
                part.nodes.clear();
                self.spare.push(part.nodes);
            }
        }
        self.cur.clear();
        self.mark.clear();
        if self.seen.len() < n {
            self.seen.resize(n, 0);
        }
        if self.classes.len() < n {
            self.classes.resize(n, Class::Full);
        }
        self.class_of.clear();
        self.class_of.resize(n, Class::Full);
        self.stacks.clear();
        self.applied = Vec::with_capacity(n);
    }

    /// A new unit of `members`; its dependences are those of the units
    /// its members read. There must be an id left ([`MAX_UNITS`]).
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        kind: Option<FusionKind>,
        members: impl IntoIterator<Item = NodeId>,
        size: u32,
        space: u32,
        params: u32,
        g: &Graph,
    ) -> u32 {
        debug_assert!(self.parts.len() < MAX_UNITS);
        let mut nodes = self.spare.pop().unwrap_or_default();
        nodes.clear();
        nodes.extend(members);
        let p = self.parts.len() as u32;
        let mut dep: Set = 0;
        for &m in &nodes {
            self.owner[m.0] = p;
        }
        for &m in &nodes {
            for &o in &g[m].operands {
                if let Some(q) = self.parts.get(self.owner[o.0] as usize) {
                    dep |= q.ids | q.dep;
                }
            }
        }
        // Every unit it depends on has it as a descendant now.
        self.cur.push(p);
        let ids: Set = 1 << p;
        let mut bits = dep;
        while bits != 0 {
            let x = &mut self.parts[self.cur[bits.trailing_zeros() as usize] as usize];
            x.desc |= ids;
            bits &= !x.ids;
        }
        self.mark.push(0);
        self.parts.push(Part {
            kind,
            ids,
            dep,
            desc: 0,
            nodes,
            size,
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

    /// The ids, dependences and descendants of the union of units `list`.
    fn union_sets(&self, list: &[u32]) -> Sets {
        let (mut ids, mut dep, mut desc): (Set, Set, Set) = (0, 0, 0);
        for &p in list {
            let part = &self.parts[p as usize];
            ids |= part.ids;
            dep |= part.dep;
            desc |= part.desc;
        }
        Sets {
            ids,
            dep: dep & !ids,
            desc: desc & !ids,
        }
    }

    /// Merges the groups `list` (live, unstacked, distinct) into one when
    /// the rules' legality check accepts the union
    /// ([`rules::check_merge`]); returns the surviving unit (the one of
    /// smallest first node).
    fn merge(&mut self, cx: &Ctx<'_>, list: &mut [u32], rule: &'static str) -> Option<u32> {
        let total: usize = list
            .iter()
            .map(|&p| self.parts[p as usize].size as usize)
            .sum();
        let sets = self.union_sets(list);
        let union = std::mem::take(&mut self.union);
        let mut cand = Candidate {
            sw: self,
            cx,
            list,
            total,
            sets,
            union,
            sorted: true,
            epoch: 0,
            onto: false,
        };
        let found = rules::check_merge(&mut cand, &cx.opts);
        let Candidate {
            list,
            union,
            sorted,
            onto,
            ..
        } = cand;
        let Ok((kind, space, params)) = found else {
            self.union = union;
            return None;
        };
        let s = list[0];
        if matches!(kind, FusionKind::Reduce { .. }) {
            let changed = if onto { &self.checked[..] } else { &union[..] };
            for &m in changed {
                self.class_of[m.0] = self.classes[m.0];
            }
        }
        // The survivor's list grows in place when the others' members all
        // come after its own (a unit joining the groups it reads);
        // otherwise it takes the union and leaves its list as scratch.
        let mut nodes = std::mem::take(&mut self.parts[s as usize].nodes);
        if sorted {
            nodes.extend_from_slice(&union[nodes.len()..]);
            self.union = union;
        } else {
            self.union = std::mem::replace(&mut nodes, union);
        }
        for &p in &list[1..] {
            let part = &mut self.parts[p as usize];
            part.dead = true;
            let spare = std::mem::take(&mut part.nodes);
            for &m in &spare {
                self.owner[m.0] = s;
            }
            self.spare.push(spare);
        }
        let part = &mut self.parts[s as usize];
        part.nodes = nodes;
        part.size = total as u32;
        part.kind = Some(kind);
        part.space = space;
        part.params = params as u32;
        self.absorb(s, sets);
        self.applied.push((rule, String::new()));
        Some(s)
    }

    /// The union `list` of [`Candidate`] in order of first nodes, its
    /// units marked with a fresh epoch (returned) and its members in
    /// `union` (sorted), with whether the parts' lists came in order.
    #[inline]
    fn gather(&mut self, list: &mut [u32], union: &mut Vec<NodeId>) -> (u32, bool) {
        let first = |p: u32| self.parts[p as usize].nodes[0];
        if let [a, b] = list {
            if first(*b) < first(*a) {
                std::mem::swap(a, b);
            }
        } else {
            list.sort_unstable_by_key(|&p| first(p));
        }
        let epoch = self.next_epoch();
        for &p in list.iter() {
            self.mark[p as usize] = epoch;
        }
        union.clear();
        let mut sorted = true;
        for &p in list.iter() {
            let nodes = &self.parts[p as usize].nodes;
            sorted &= union.last().is_none_or(|l| *l < nodes[0]);
            union.extend_from_slice(nodes);
        }
        if !sorted {
            union.sort_unstable();
        }
        (epoch, sorted)
    }

    /// Whether `union`, the members of groups `list` (marked `epoch`),
    /// forms a group: its kind, space, and whether it was validated onto
    /// one of the groups (its changed classes then in `checked`). Two
    /// groups go to [`legality::validate_union`]'s steps, as in
    /// [`super::State::merge`], after a shortcut for a single
    /// element-wise node joining an element-wise group.
    fn validate(
        &mut self,
        cx: &Ctx<'_>,
        list: &[u32],
        union: &[NodeId],
        epoch: u32,
    ) -> Option<(FusionKind, u32, bool)> {
        // A fresh epoch for `validate_union`'s node marks (`seen`), newer
        // than `epoch`, which `count_params` marks `seen` with afterwards.
        let onto_epoch = self.next_epoch();
        let facts = cx.facts();
        let (owner, mark) = (&self.owner, &self.mark);
        let member = |m: NodeId| {
            let o = owner[m.0];
            o != NONE && mark[o as usize] == epoch
        };
        let mut sc = legality::Onto {
            classes: &mut self.classes,
            mark: &mut self.seen,
            epoch: onto_epoch,
            checked: &mut self.checked,
            queue: &mut self.queue,
        };
        if let [a, b] = *list {
            let (pa, pb) = (&self.parts[a as usize], &self.parts[b as usize]);
            if let Some(space) = joins_elementwise(&facts, &cx.shapes, pa, pb) {
                if cfg!(debug_assertions) {
                    let mut classes = vec![Class::Full; owner.len()];
                    let full = validate_fast(&facts, &cx.shapes, union, member, &mut classes);
                    debug_assert_eq!(full, Some((FusionKind::Elementwise, space)));
                }
                return Some((FusionKind::Elementwise, space, false));
            }
            if let (Some(sa), Some(sb)) = (pa.side(a), pb.side(b)) {
                let (shapes, class_of) = (&cx.shapes, &self.class_of);
                let sides = (sa, sb);
                let onto = validate_onto_larger(
                    &facts, shapes, union, member, owner, sides, class_of, &mut sc,
                );
                if let Some(found) = onto {
                    return found.map(|(k, sp)| (k, sp, true));
                }
            }
        }
        validate_fast(&facts, &cx.shapes, union, member, sc.classes).map(|(k, sp)| (k, sp, false))
    }

    /// Makes `s` the unit of the union whose sets are `sets`: every unit
    /// that depends on the union now depends on what it depends on, and
    /// every unit it depends on has its descendants (which keeps every set
    /// closed).
    fn absorb(&mut self, s: u32, sets: Sets) {
        let Sets { ids, dep, desc } = sets;
        let part = &mut self.parts[s as usize];
        // Its own ids name it already.
        let mut bits = ids & !part.ids;
        (part.ids, part.dep, part.desc) = (ids, dep, desc);
        while bits != 0 {
            self.cur[bits.trailing_zeros() as usize] = s;
            bits &= bits - 1;
        }
        // Each unit once: its ids leave the walk when it is updated.
        let mut bits = desc;
        while bits != 0 {
            let q = &mut self.parts[self.cur[bits.trailing_zeros() as usize] as usize];
            q.dep |= dep | ids;
            bits &= !q.ids;
        }
        let mut bits = dep;
        while bits != 0 {
            let q = &mut self.parts[self.cur[bits.trailing_zeros() as usize] as usize];
            q.desc |= desc | ids;
            bits &= !q.ids;
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
        count_params_marked(&cx.facts(), nodes, member, &mut self.seen, epoch)
    }

    /// Whether live units `a` and `b` are independent: neither depends on
    /// the other.
    fn independent(&self, a: u32, b: u32) -> bool {
        let (a, b) = (&self.parts[a as usize], &self.parts[b as usize]);
        a.dep & b.ids == 0 && b.dep & a.ids == 0
    }

    /// The live group holding `n`, when it is one of `kinds`.
    fn group_of(&self, n: NodeId, ok: impl Fn(&FusionKind) -> bool) -> Option<u32> {
        let p = self.owner[n.0];
        if p == NONE {
            return None;
        }
        let part = &self.parts[p as usize];
        (part.stack == NONE && part.kind.as_ref().is_some_and(ok)).then_some(p)
    }
}

/// A candidate merge of a sweep's groups `list`, as [`rules::check_merge`]
/// asks about it.
struct Candidate<'s, 'l, 'c, 'g> {
    sw: &'s mut Sweep,
    cx: &'c Ctx<'g>,
    list: &'l mut [u32],
    /// Its nodes (of the decomposition).
    total: usize,
    /// Its closed sets.
    sets: Sets,
    /// Its members, once validated ([`Sweep::gather`]), and whether the
    /// parts' lists came in order.
    union: Vec<NodeId>,
    sorted: bool,
    /// The epoch its units are marked with, once validated.
    epoch: u32,
    /// Whether it was validated onto one of the groups.
    onto: bool,
}

impl rules::Union for Candidate<'_, '_, '_, '_> {
    #[inline]
    fn size(&self) -> usize {
        self.total
    }

    #[inline]
    fn closes_cycle(&mut self) -> bool {
        self.sets.dep & self.sets.desc != 0
    }

    #[inline]
    fn validate(&mut self) -> Option<(FusionKind, u32)> {
        (self.epoch, self.sorted) = self.sw.gather(self.list, &mut self.union);
        let found = self
            .sw
            .validate(self.cx, self.list, &self.union, self.epoch);
        let (kind, space, onto) = found?;
        self.onto = onto;
        Some((kind, space))
    }

    #[inline]
    fn param_bound(&self) -> usize {
        let parts = &self.sw.parts;
        self.list
            .iter()
            .map(|&p| parts[p as usize].params as usize)
            .sum()
    }

    #[inline]
    fn tighter_params(&mut self, step: usize) -> Option<usize> {
        (step == 1).then(|| self.sw.count_params(self.cx, &self.union, self.epoch))
    }
}

/// The space of element-wise group `a` joined by `b`, a single
/// element-wise node after all of `a`'s members whose value leaves the
/// union and has `a`'s space (shape id), without walking `a`: what
/// [`validate_fast`] finds. Adding members only turns values inside
/// (each member of `a` still fits `a`'s space), and the node, of the
/// space's rank and the last member, is the anchor. `None` when the
/// pair is not of that form.
fn joins_elementwise(facts: &Facts<'_>, shapes: &Shapes, a: &Part, b: &Part) -> Option<u32> {
    let elementwise = Some(FusionKind::Elementwise);
    let (&[n], Some(&last)) = (&b.nodes[..], a.nodes.last()) else {
        return None;
    };
    // Its users all come after it, outside the union.
    let leaves = facts.is_output[n.0] || !facts.users.of(n).is_empty();
    (a.kind == elementwise
        && b.kind == elementwise
        && last < n
        && leaves
        && shapes.of(n) == a.space)
        .then_some(a.space)
}

/// The plan of `graph` (composites decomposed into the ranges
/// `composites`) by the sweep; see the [module docs](self).
///
/// `None` when the graph has more than [`MAX_UNITS`] units (the caller
/// runs the rules instead); else the plan, or a [`FuseError`] when the
/// final units form a cycle (a bug; the caller then runs the graph
/// unfused).
pub(super) fn plan(
    graph: &Graph,
    opts: &FuseOptions,
    composites: &[Range<usize>],
    scratch: &mut Option<Sweep>,
) -> Option<Result<FusionPlan, FuseError>> {
    let g = graph;
    let mut sw = scratch.take().unwrap_or_default();
    let roles = (0..g.nodes().len())
        .map(|i| role_of(g, NodeId(i)))
        .collect();
    let cx = Ctx::new(g, opts, roles, Vec::new(), &mut sw);
    let arranged = sweep(&cx, &mut sw, composites).map(|()| arrange(&cx, &mut sw));
    sw.shapes = cx.shapes.into_buffers();
    *scratch = Some(sw);
    Some(arranged?.and_then(|a| a.assemble(g, *opts, cx.roles, cx.users, cx.is_output)))
}

/// The sweep's decision over `recorded`, a graph whose composites are not
/// decomposed (the eager API's window): each softmax, norm and mean is one
/// unit ([`legality::role_of_recorded`]) of the size of its
/// decomposition. Its groups, mapped onto the decomposition
/// ([`Decided::expand`]), are those [`plan`] finds there: a composite is
/// seeded as one group in both, its members' classes are the ones its
/// role gives, and the limits count the decomposed nodes.
///
/// `None` when it cannot decide so: the options do not seed composites,
/// a composite has no recorded role or exceeds a limit on its own, or
/// the graph has more than [`MAX_UNITS`] units. The caller then decides
/// on the decomposition.
pub(super) fn decide_recorded(
    recorded: &Graph,
    opts: &FuseOptions,
    scratch: &mut Option<Sweep>,
) -> Option<Result<Decided, FuseError>> {
    let g = recorded;
    let n = g.nodes().len();
    if !opts.fuse || !opts.composites {
        return None;
    }
    let mut roles = Vec::with_capacity(n);
    let mut starts = Vec::with_capacity(n + 1);
    let mut next = 0u32;
    for (i, node) in g.nodes().iter().enumerate() {
        roles.push(legality::role_of_recorded(g, NodeId(i))?);
        let size = match decomposed_len(&node.op) {
            Some(size) => {
                // As `seed` refuses it, and `State::seed`: the buffers it
                // reads, each once, and its value.
                let ops = &node.operands;
                let distinct = (0..ops.len())
                    .filter(|&k| !ops[..k].contains(&ops[k]))
                    .count();
                if size > opts.max_nodes || distinct + 1 > opts.max_params {
                    return None;
                }
                size as u32
            }
            None => 1,
        };
        starts.push(next);
        next += size;
    }
    starts.push(next);
    let mut sw = scratch.take().unwrap_or_default();
    let cx = Ctx::new(g, opts, roles, starts, &mut sw);
    let arranged = sweep(&cx, &mut sw, &[]).map(|()| arrange(&cx, &mut sw));
    sw.shapes = cx.shapes.into_buffers();
    *scratch = Some(sw);
    Some(arranged?.map(|arranged| Decided {
        arranged,
        starts: cx.starts,
        opts: *opts,
    }))
}

/// Runs the phases: the forward one, then a phase for each rule it did
/// not apply, in the rules' order; `None` when the graph has more units
/// than a [`Set`] numbers.
fn sweep(cx: &Ctx<'_>, sw: &mut Sweep, composites: &[Range<usize>]) -> Option<()> {
    sw.reset(cx.g.nodes().len());
    if !forward(cx, sw, composites) {
        return None;
    }
    for rule in &RULES {
        let (fuse, name) = (cx.opts.fuse, rule.name);
        match rule.joins {
            Joins::Edge { producer, consumer } if fuse && rule.from_matmul() => {
                epilogues(cx, sw, name, producer, consumer);
            }
            Joins::Siblings { of } if fuse => siblings(cx, sw, name, of),
            Joins::Stack { of } if cx.opts.stack => stacks(cx, sw, name, of),
            // The forward phase's, or not asked for.
            _ => {}
        }
    }
    Some(())
}

impl<'g> Ctx<'g> {
    /// The facts of `g`, the shapes interned in `sw`'s buffers (given back
    /// with [`Shapes::into_buffers`]).
    fn new(
        g: &'g Graph,
        opts: &FuseOptions,
        roles: Vec<Role>,
        starts: Vec<u32>,
        sw: &mut Sweep,
    ) -> Ctx<'g> {
        Ctx {
            g,
            opts: *opts,
            roles,
            starts,
            users: Users::new(g),
            is_output: outputs_of(g),
            shapes: Shapes::new_in(g, std::mem::take(&mut sw.shapes)),
        }
    }
}

/// Whether each node of `g` is an output.
fn outputs_of(g: &Graph) -> Vec<bool> {
    let mut v = vec![false; g.nodes().len()];
    for (_, id) in g.outputs() {
        if let Some(o) = v.get_mut(id.0) {
            *o = true;
        }
    }
    v
}

/// A decision over a recorded window's operators ([`FusionPlan::decide_recorded`]),
/// to be mapped onto its decomposition.
#[derive(Clone)]
pub struct Decided {
    arranged: Arranged,
    /// The first node of each recorded node's decomposition, and their
    /// count at the end.
    starts: Vec<u32>,
    opts: FuseOptions,
}

impl Decided {
    /// The same decision with every group's space rewritten by `dim`,
    /// extent by extent: the decision of a window that differs from the
    /// decided one only in those extents (a symbolic copy,
    /// the runtime's eager API), when `dim` is a bijection that keeps every
    /// extent below 2. The sweep compares extents only for equality and
    /// against 1, so such a window's own decision has the same groups,
    /// stacks and order.
    pub fn with_spaces(mut self, mut dim: impl FnMut(&Dim) -> Dim) -> Decided {
        for c in &mut self.arranged.groups {
            for d in &mut c.space {
                *d = dim(d);
            }
        }
        self
    }

    /// The plan of `decomposed`, the decomposition of the window decided:
    /// every group's members replaced by the nodes they became.
    ///
    /// # Errors
    /// A [`FuseError`] when `decomposed` is not that decomposition (its
    /// node count differs), or, in builds with debug assertions, when the
    /// plan does not check out ([`FusionPlan::verify`]).
    pub fn expand(&self, decomposed: &Graph) -> Result<FusionPlan, FuseError> {
        let (d, starts) = (decomposed, &self.starts);
        if starts.last().map(|&n| n as usize) != Some(d.nodes().len()) {
            return Err(FuseError {
                rule: "sweep",
                what: "the decomposition does not match the decided window".into(),
            });
        }
        let span = |m: NodeId| (starts[m.0]..starts[m.0 + 1]).map(|k| NodeId(k as usize));
        let a = &self.arranged;
        let arranged = Arranged {
            groups: a
                .groups
                .iter()
                .map(|c| FusionGroup {
                    kind: c.kind.clone(),
                    nodes: c.nodes.iter().flat_map(|&m| span(m)).collect(),
                    space: c.space.clone(),
                })
                .collect(),
            stacks: a.stacks.clone(),
            order: a
                .order
                .iter()
                .map(|&u| match u {
                    Unit::Node(m) => Unit::Node(NodeId(starts[m.0] as usize)),
                    u => u,
                })
                .collect(),
            applied: a.applied.clone(),
        };
        let roles = (0..d.nodes().len())
            .map(|i| role_of(d, NodeId(i)))
            .collect();
        arranged.assemble(d, self.opts, roles, Users::new(d), outputs_of(d))
    }
}

/// A sweep's groups, stacks and order.
#[derive(Clone)]
struct Arranged {
    groups: Vec<FusionGroup>,
    stacks: Vec<Vec<usize>>,
    order: Vec<Unit>,
    applied: Vec<(&'static str, String)>,
}

impl Arranged {
    /// The plan of `g` with these groups, `g`'s facts given.
    ///
    /// # Errors
    /// In builds with debug assertions, when the plan does not check out
    /// ([`FusionPlan::verify`]).
    fn assemble(
        self,
        g: &Graph,
        opts: FuseOptions,
        roles: Vec<Role>,
        users: Users,
        is_output: Vec<bool>,
    ) -> Result<FusionPlan, FuseError> {
        let mut owner = vec![None; g.nodes().len()];
        for (c, cl) in self.groups.iter().enumerate() {
            for &m in &cl.nodes {
                owner[m.0] = Some(c);
            }
        }
        let layouts = store_layouts(g, &users, &is_output, opts.fuse, |m| owner[m.0].is_some());
        let plan = FusionPlan {
            groups: self.groups,
            owner,
            stacks: self.stacks,
            order: self.order,
            rejections: Vec::new(),
            applied: self.applied,
            roles,
            users,
            is_output,
            layouts,
            options: opts,
        };
        if cfg!(debug_assertions) {
            plan.verify(g).map_err(|what| FuseError {
                rule: "sweep",
                what,
            })?;
        }
        Ok(plan)
    }
}

/// The forward phase (see the [module docs](self)); `false` when the
/// graph has more units than a [`Set`] numbers.
#[inline(never)]
fn forward(cx: &Ctx<'_>, sw: &mut Sweep, composites: &[Range<usize>]) -> bool {
    let (g, n) = (cx.g, cx.g.nodes().len());
    let mut spans = composites
        .iter()
        .filter(|_| cx.opts.fuse && cx.opts.composites)
        .peekable();
    let (mut producers, mut all): (Vec<u32>, Vec<u32>) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < n {
        if sw.parts.len() >= MAX_UNITS {
            return false;
        }
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
                    Role::Elementwise => (Some(FusionKind::Elementwise), cx.shapes.of(id)),
                    Role::Reduce { axis, keepdims } => {
                        sw.class_of[i] = Class::Reduced(keepdims);
                        (
                            Some(FusionKind::Reduce { axis }),
                            cx.shapes.of(node.operands[0]),
                        )
                    }
                    Role::Composite { axis } => (
                        Some(FusionKind::Reduce { axis }),
                        cx.shapes.of(node.operands[0]),
                    ),
                    Role::Matmul => (Some(FusionKind::Matmul), cx.shapes.of(id)),
                    Role::Data if node.operands.is_empty() => {
                        i += 1;
                        continue;
                    }
                    Role::Data | Role::Opaque => (None, NONE),
                };
                let params = node.operands.len() as u32 + 1;
                let size = match cx.starts.get(i..i + 2) {
                    Some(&[a, b]) => b - a,
                    _ => 1,
                };
                (sw.add(kind, [id], size, space, params, g), i + 1)
            }
        };
        i = end;
        let Some(kind) = sw.parts[u as usize].kind.clone() else {
            continue;
        };
        if !cx.opts.fuse || !FORWARD_CONSUMERS.has(&kind) {
            continue;
        }
        // The groups it reads from that an edge rule of this phase joins
        // it with, in the order of those rules.
        let joins = |p: &FusionKind| forward_rule(p, &kind);
        producers.clear();
        for &m in &sw.parts[u as usize].nodes {
            for &o in &g[m].operands {
                if let Some(p) = sw.group_of(o, |k| joins(k).is_some()) {
                    if p != u && !producers.contains(&p) {
                        producers.push(p);
                    }
                }
            }
        }
        if producers.is_empty() {
            continue;
        }
        // The rule joining a producer, and its priority.
        let rule = |p: &Part| {
            p.kind
                .as_ref()
                .and_then(joins)
                .map_or((0, ""), |(i, r)| (i, r.name))
        };
        if producers.len() > 1 {
            producers.sort_by_key(|&p| (rule(&sw.parts[p as usize]).0, p));
        }
        let first_rule = rule(&sw.parts[producers[0] as usize]).1;
        if let [p] = producers[..] {
            sw.merge(cx, &mut [p, u], first_rule);
            continue;
        }
        all.clear();
        all.extend_from_slice(&producers);
        all.push(u);
        if sw.merge(cx, &mut all, first_rule).is_some() {
            continue;
        }
        for &p in &producers {
            let r = rule(&sw.parts[p as usize]).1;
            if sw.merge(cx, &mut [p, u], r).is_some() {
                break;
            }
        }
    }
    true
}

/// The composite `r` as one unit when it forms a group within the limits
/// (as [`super::State`] seeds it).
fn seed(cx: &Ctx<'_>, sw: &mut Sweep, r: Range<usize>) -> Option<u32> {
    if r.len() < 2 || r.end > sw.owner.len() || r.len() > cx.opts.max_nodes {
        return None;
    }
    let mut nodes = std::mem::take(&mut sw.union);
    nodes.clear();
    nodes.extend(r.clone().map(NodeId));
    let member = |m: NodeId| r.contains(&m.0);
    let found = validate_fast(&cx.facts(), &cx.shapes, &nodes, member, &mut sw.classes);
    let mut bound: usize = nodes.iter().map(|&m| cx.g[m].operands.len() + 1).sum();
    if found.is_some() && bound > cx.opts.max_params {
        bound = super::count_params(&cx.facts(), &nodes, &member);
    }
    sw.union = nodes;
    let (kind, space) = found.filter(|_| bound <= cx.opts.max_params)?;
    if matches!(kind, FusionKind::Reduce { .. }) {
        sw.class_of[r.clone()].copy_from_slice(&sw.classes[r.clone()]);
    }
    let size = r.len() as u32;
    let u = sw.add(Some(kind), r.map(NodeId), size, space, bound as u32, cx.g);
    sw.applied.push(("composite", String::new()));
    Some(u)
}

/// The matmul epilogues (see the [module docs](self)): each group of
/// `producer` kinds takes the groups of `consumer` kinds that read it,
/// named `rule`.
#[inline(never)]
fn epilogues(cx: &Ctx<'_>, sw: &mut Sweep, rule: &'static str, producer: Kinds, consumer: Kinds) {
    let mut rejected: Vec<u32> = Vec::new();
    for p in 0..sw.parts.len() as u32 {
        let part = &sw.parts[p as usize];
        if part.dead || !part.kind.as_ref().is_some_and(|k| producer.has(k)) {
            continue;
        }
        rejected.clear();
        let mut m = p;
        'grow: loop {
            for k in 0..sw.parts[m as usize].nodes.len() {
                let x = sw.parts[m as usize].nodes[k];
                for &v in cx.users.of(x) {
                    let Some(e) = sw.group_of(v, |k| consumer.has(k)) else {
                        continue;
                    };
                    if e == m || rejected.contains(&e) {
                        continue;
                    }
                    match sw.merge(cx, &mut [m, e], rule) {
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

/// The siblings phase (see the [module docs](self)): groups of kinds `of`,
/// named `rule`.
#[inline(never)]
fn siblings(cx: &Ctx<'_>, sw: &mut Sweep, rule: &'static str, of: Kinds) {
    let mut readers: Vec<u32> = Vec::new();
    for x in 0..cx.g.nodes().len() {
        let users = cx.users.of(NodeId(x));
        if users.len() < 2 {
            continue;
        }
        readers.clear();
        let ox = sw.owner[x];
        for &u in users {
            if let Some(p) = sw.group_of(u, |k| of.has(k)) {
                if p != ox && !readers.contains(&p) && readers.len() < SIBLING_READERS {
                    readers.push(p);
                }
            }
        }
        for i in 0..readers.len() {
            for j in i + 1..readers.len() {
                let (a, b) = (sw.cur[readers[i] as usize], sw.cur[readers[j] as usize]);
                if a != b && !sw.parts[a as usize].dead && !sw.parts[b as usize].dead {
                    sw.merge(cx, &mut [a, b], rule);
                }
            }
        }
    }
}

/// The parallel stacks (see the [module docs](self)): groups of kinds
/// `of`, named `rule`.
#[inline(never)]
fn stacks(cx: &Ctx<'_>, sw: &mut Sweep, rule: &'static str, of: Kinds) {
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
            if let Some(p) = sw.group_of(u, |k| of.has(k)) {
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
        let sets = sw.union_sets(&chosen);
        for &c in &chosen {
            sw.parts[c as usize].stack = s;
        }
        let rep = chosen[0];
        for &c in &chosen[1..] {
            let part = &mut sw.parts[c as usize];
            (part.ids, part.dep, part.desc) = (0, 0, 0);
        }
        sw.absorb(rep, sets);
        sw.stacks.push(chosen.iter().map(|&c| c as usize).collect());
        sw.applied.push((rule, String::new()));
    }
}

/// The units of `ob` in a topological order, the ready unit of smallest
/// number first (fewer than all when they form a cycle).
fn kahn(cx: &Ctx<'_>, sw: &Sweep, ob: &mut OrderBuffers) -> Vec<Unit> {
    let n = cx.g.nodes().len();
    ob.indeg.clear();
    ob.indeg.resize(ob.units.len(), 0);
    for i in 0..n {
        for &v in cx.users.of(NodeId(i)) {
            if ob.uid[v.0] != ob.uid[i] {
                ob.indeg[ob.uid[v.0] as usize] += 1;
            }
        }
    }
    ob.ready.clear();
    for u in 0..ob.units.len() as u32 {
        if ob.indeg[u as usize] == 0 {
            ob.ready.push(Reverse(u));
        }
    }
    let mut order = Vec::with_capacity(ob.units.len());
    while let Some(Reverse(u)) = ob.ready.pop() {
        let unit = ob.units[u as usize];
        order.push(unit);
        let (uid, indeg, ready) = (&ob.uid, &mut ob.indeg, &mut ob.ready);
        let mut release = |m: NodeId| {
            for &v in cx.users.of(m) {
                let w = uid[v.0];
                if w != u {
                    indeg[w as usize] -= 1;
                    if indeg[w as usize] == 0 {
                        ready.push(Reverse(w));
                    }
                }
            }
        };
        match unit {
            Unit::Node(m) => release(m),
            Unit::Group(p) => sw.parts[p].nodes.iter().for_each(|&m| release(m)),
            Unit::Stack(s) => {
                for &p in &sw.stacks[s] {
                    sw.parts[p].nodes.iter().for_each(|&m| release(m));
                }
            }
        }
    }
    order
}

/// The units in a topological order (Kahn's algorithm, the ready unit of
/// smallest first node first), groups numbered in that order.
///
/// # Errors
/// A [`FuseError`] when the final units form a cycle (a bug).
#[inline(never)]
fn arrange(cx: &Ctx<'_>, sw: &mut Sweep) -> Result<Arranged, FuseError> {
    let n = cx.g.nodes().len();
    let mut ob = std::mem::take(&mut sw.order);
    // Units numbered by first node: a node's unit is its stack, its group,
    // or itself.
    ob.uid.clear();
    ob.uid.resize(n, NONE);
    ob.of_part.clear();
    ob.of_part.resize(sw.parts.len(), NONE);
    ob.of_stack.clear();
    ob.of_stack.resize(sw.stacks.len(), NONE);
    ob.units.clear();
    for i in 0..n {
        let p = sw.owner[i];
        let (slot, unit) = match sw.parts.get(p as usize) {
            Some(part) if part.kind.is_some() && part.stack != NONE => (
                Some(&mut ob.of_stack[part.stack as usize]),
                Unit::Stack(part.stack as usize),
            ),
            Some(part) if part.kind.is_some() => {
                (Some(&mut ob.of_part[p as usize]), Unit::Group(p as usize))
            }
            _ => (None, Unit::Node(NodeId(i))),
        };
        ob.uid[i] = match slot {
            Some(slot) if *slot != NONE => *slot,
            Some(slot) => {
                *slot = ob.units.len() as u32;
                ob.units.push(unit);
                *slot
            }
            None => {
                ob.units.push(unit);
                ob.units.len() as u32 - 1
            }
        };
    }
    // Most often the units' numbering is already an order: every edge
    // goes forward. Otherwise Kahn's algorithm.
    let forward = (0..n).all(|i| {
        let u = ob.uid[i];
        cx.users.of(NodeId(i)).iter().all(|v| ob.uid[v.0] >= u)
    });
    let mut order = if forward {
        ob.units.clone()
    } else {
        kahn(cx, sw, &mut ob)
    };
    let complete = order.len() == ob.units.len();
    sw.order = ob;
    if !complete {
        return Err(FuseError {
            rule: "sweep",
            what: "the kernels' dependences form a cycle".into(),
        });
    }
    // Groups numbered in order of their units.
    let mut groups = Vec::new();
    let mut stacks = Vec::new();
    for u in &mut order {
        let (Unit::Group(p) | Unit::Stack(p)) = *u else {
            continue;
        };
        let list = match *u {
            Unit::Stack(s) => &sw.stacks[s][..],
            _ => std::slice::from_ref(&p),
        };
        let first = groups.len();
        for &q in list {
            let part = &sw.parts[q];
            // A copy: the member list stays for the next sweep, with room
            // to grow.
            groups.push(FusionGroup {
                kind: part.kind.clone().unwrap_or(FusionKind::Elementwise),
                nodes: part.nodes.clone(),
                space: cx.shapes.shape(part.space),
            });
        }
        *u = match *u {
            Unit::Stack(_) => {
                stacks.push((first..groups.len()).collect());
                Unit::Stack(stacks.len() - 1)
            }
            _ => Unit::Group(first),
        };
    }
    Ok(Arranged {
        groups,
        stacks,
        order,
        applied: std::mem::take(&mut sw.applied),
    })
}
