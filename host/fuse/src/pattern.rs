//! The rules of [`super::rules`] as incremental rewrite rules, applied to a
//! fixed point. The driver ([`super::FusionPlan::with_scratch`]) asks each
//! rule in turn ([`rules`]: the table's order) for a patch and restarts
//! from the first after every applied patch, so an earlier rule always
//! wins a contested operator. Each rule keeps a worklist of candidates
//! and the pairs it found illegal.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;

use super::rules::{Joins, Kinds, RuleDef, RULES};
use super::{FuseOptions, IdHasher, IdSet, Log, Patch, Rejection, Rule, State};
use dvm_graph::NodeId;

/// Tries to merge the groups of candidate `c`: the patch on success, or the
/// reason logged against `rule` (and `via`, the shared input of siblings).
fn merge_or_reject(
    st: &State<'_>,
    log: &mut Log,
    rule: &'static str,
    c: &Cand,
    via: Option<NodeId>,
) -> Option<Patch> {
    match st.merge(c.a, c.b, log.keep) {
        Ok(merged) => Some(Patch::Merge {
            a: c.a,
            b: c.b,
            merged,
        }),
        Err(reason) => {
            if let Some(reason) = reason {
                log.reject(Rejection {
                    rule,
                    a: c.na,
                    b: c.nb,
                    via,
                    reason,
                });
            }
            None
        }
    }
}

/// A candidate pair: groups `a` and `b`, found through nodes `na` and `nb`
/// (and the shared input `via` for siblings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cand {
    /// First group (the producer for an edge).
    pub a: usize,
    /// Second group (the consumer for an edge).
    pub b: usize,
    /// A node of `a`.
    pub na: NodeId,
    /// A node of `b`.
    pub nb: NodeId,
    /// The common input of siblings.
    pub via: Option<NodeId>,
}

/// A queued candidate edge of a vertical rule, packed: its group and node
/// ids as `u32` (as [`State`] holds them), 16 bytes instead of the 48 of a
/// [`Cand`], so that a queue for a window's groups stays a small
/// allocation.
#[derive(Clone, Copy)]
struct Edge([u32; 4]);

impl Edge {
    fn pack(c: &Cand) -> Edge {
        Edge([c.a as u32, c.b as u32, c.na.0 as u32, c.nb.0 as u32])
    }

    fn unpack(self) -> Cand {
        let [a, b, na, nb] = self.0;
        Cand {
            a: a as usize,
            b: b as usize,
            na: NodeId(na as usize),
            nb: NodeId(nb as usize),
            via: None,
        }
    }
}

/// A queued candidate pair of the siblings rule, packed as [`Edge`] with
/// the common input.
#[derive(Clone, Copy)]
struct Pair(Edge, u32);

impl Pair {
    fn pack(c: &Cand, via: NodeId) -> Pair {
        Pair(Edge::pack(c), via.0 as u32)
    }

    fn unpack(self) -> Cand {
        Cand {
            via: Some(NodeId(self.1 as usize)),
            ..self.0.unpack()
        }
    }
}

/// Pairs of group ids, packed into one key, for the memo of examined
/// pairs (8 bytes a slot instead of 16).
fn pair_key(a: usize, b: usize) -> u64 {
    (a as u64) << 32 | b as u64
}

/// Merges a producer group into a consumer group along a data edge (a
/// [`Joins::Edge`] rule).
struct Vertical {
    name: &'static str,
    producer: Kinds,
    consumer: Kinds,
    init: bool,
    work: VecDeque<Edge>,
    /// Pairs of groups whose merge was rejected (a rejected pair stays
    /// rejected). An accepted pair needs no entry: the driver applies the
    /// merge at once and both groups are gone.
    tried: IdSet<u64>,
}

impl Vertical {
    fn new(name: &'static str, producer: Kinds, consumer: Kinds) -> Vertical {
        Vertical {
            name,
            producer,
            consumer,
            init: false,
            work: VecDeque::new(),
            tried: IdSet::default(),
        }
    }
}

/// The edges between group `c` and its neighbour groups, one per ordered
/// pair of groups (producer first), found from the members in ascending
/// order (each member's users, then its operands). Members found to have
/// no such edge are marked interior and skipped from then on
/// (`State::interior`): a group made by a merge would otherwise be
/// walked whole again, though only its members next to other groups
/// have edges.
pub fn neighbour_edges(st: &mut State<'_>, c: usize, out: &mut Vec<Cand>) {
    out.clear();
    let push = |cand: Cand, out: &mut Vec<Cand>| {
        if !out.iter().any(|q| q.a == cand.a && q.b == cand.b) {
            out.push(cand);
        }
    };
    let mut interior = std::mem::take(&mut st.interior);
    for &m in &st.group(c).nodes {
        if interior[m.0] {
            continue;
        }
        let mut edge = false;
        for &u in st.users(m) {
            if let Some(cu) = st.owner(u) {
                if cu != c {
                    edge = true;
                    push(
                        Cand {
                            a: c,
                            b: cu,
                            na: m,
                            nb: u,
                            via: None,
                        },
                        out,
                    );
                }
            }
        }
        for &o in &st.graph()[m].operands {
            if let Some(co) = st.owner(o) {
                if co != c {
                    edge = true;
                    push(
                        Cand {
                            a: co,
                            b: c,
                            na: o,
                            nb: m,
                            via: None,
                        },
                        out,
                    );
                }
            }
        }
        interior[m.0] = !edge;
    }
    st.interior = interior;
}

impl Rule for Vertical {
    fn name(&self) -> &'static str {
        self.name
    }

    fn next(&mut self, st: &State<'_>, log: &mut Log) -> Option<Patch> {
        if !self.init {
            self.init = true;
            self.work.reserve(st.group_ids());
            // Producers' outgoing edges in graph order (each edge once).
            // Interior nodes have none (`State::interior`): by the time a
            // later rule starts, most members of merged groups are.
            for m in (0..st.graph().nodes().len()).map(NodeId) {
                if st.interior[m.0] {
                    continue;
                }
                let Some(cm) = st.owner(m) else { continue };
                if !self.producer.has(&st.group(cm).kind) {
                    continue;
                }
                for &u in st.users(m) {
                    if let Some(cu) = st.owner(u) {
                        if cu != cm && self.consumer.has(&st.group(cu).kind) {
                            self.work.push_back(Edge::pack(&Cand {
                                a: cm,
                                b: cu,
                                na: m,
                                nb: u,
                                via: None,
                            }));
                        }
                    }
                }
            }
        }
        while let Some(c) = self.work.pop_front().map(Edge::unpack) {
            // Stale: a group merged away since the candidate was queued.
            if st.owner(c.na) != Some(c.a) || st.owner(c.nb) != Some(c.b) {
                continue;
            }
            if !self.producer.has(&st.group(c.a).kind) || !self.consumer.has(&st.group(c.b).kind) {
                continue;
            }
            let key = pair_key(c.a, c.b);
            if self.tried.contains(&key) {
                continue;
            }
            if let Some(patch) = merge_or_reject(st, log, self.name, &c, None) {
                return Some(patch);
            }
            self.tried.insert(key);
        }
        None
    }

    fn notify(&mut self, st: &State<'_>, _c: usize, edges: &[Cand]) {
        if self.init {
            for cand in edges {
                if self.producer.has(&st.group(cand.a).kind)
                    && self.consumer.has(&st.group(cand.b).kind)
                {
                    self.work.push_back(Edge::pack(cand));
                }
            }
        }
    }

    fn reset(&mut self) {
        self.init = false;
        self.work.clear();
        self.tried.clear();
    }
}

/// Merges two groups that read a common input (a [`Joins::Siblings`]
/// rule).
struct Siblings {
    name: &'static str,
    /// Kinds of both groups.
    of: Kinds,
    init: bool,
    work: VecDeque<Pair>,
    /// Rejected pairs of groups, smaller id first (as in [`Vertical`]).
    tried: IdSet<u64>,
    /// [`Siblings::queue_readers`]'s scratch, kept so that queueing after
    /// a merge does not allocate: each reader's group, and the positions
    /// of the readers in the group `only`.
    groups: Vec<Option<usize>>,
    mine: Vec<usize>,
    /// [`Rule::notify`]'s scratch: the new group's inputs.
    inputs: Vec<NodeId>,
}

impl Siblings {
    /// Queues every pair of groups reading `x` that may merge as siblings,
    /// where one of them is `only` (all pairs when `None`).
    ///
    /// A pair may merge only when neither group is a matmul group nor
    /// holds `x`. Both facts hold for as long as the two groups live (a
    /// group's kind and members never change: a merge makes a new group,
    /// whose pairs are queued again), so a pair failing them would only be
    /// skipped when popped. Leaving such readers out here keeps the queue
    /// linear in a node read by many matmuls (a shared weight), whose
    /// pairs of readers would otherwise be queued, quadratically many.
    ///
    /// A value with more than [`SIBLING_ALL`] readers pairs each reader
    /// only with the next [`SIBLING_WINDOW`] in node order
    /// ([`Siblings::queue_window`]), so that its pairs, and the work after
    /// each merge, stay linear in its readers.
    fn queue_readers(&mut self, st: &State<'_>, x: NodeId, only: Option<usize>) {
        let users = st.users(x);
        if users.len() < 2 {
            return;
        }
        if users.len() > SIBLING_ALL {
            self.queue_window(st, x, users, only);
            return;
        }
        let ox = st.owner(x);
        let of = self.of;
        let sibling = |u: NodeId| sibling_group(st, of, ox, u);
        let mut dependent =
            (users.len() >= DEPENDENCE_READERS).then(|| Dependence::new(st, users, sibling));
        // Each reader's group, looked up once; with `only`, the positions
        // of its readers, so that a pair without it is never visited: a
        // merge re-queues the pairs of the new group alone, and visiting
        // every pair of readers each time would make a node read by n
        // groups cost n^3. The pairs are queued in the same order as by
        // visiting every pair.
        let (mut groups, mut mine) = (
            std::mem::take(&mut self.groups),
            std::mem::take(&mut self.mine),
        );
        groups.clear();
        groups.extend(users.iter().map(|&u| sibling(u)));
        mine.clear();
        if let Some(o) = only {
            mine.extend((0..users.len()).filter(|&i| groups[i] == Some(o)));
        }
        for (i, &u) in users.iter().enumerate() {
            let Some(cu) = groups[i] else { continue };
            let partners: &mut dyn Iterator<Item = usize> = match only {
                Some(o) if cu != o => &mut mine.iter().copied().filter(|&j| j > i),
                _ => &mut (i + 1..users.len()),
            };
            for j in partners {
                let (v, Some(cv)) = (users[j], groups[j]) else {
                    continue;
                };
                self.queue_pair(st, x, (u, cu), (v, cv), only, dependent.as_mut());
            }
        }
        (self.groups, self.mine) = (groups, mine);
    }

    /// Queues readers `u` (in group `cu`) and `v` (in `cv`) of `x` as a
    /// pair, unless the groups are one, neither is `only` (when given), or
    /// `dependent` knows a path between them through other units.
    fn queue_pair(
        &mut self,
        st: &State<'_>,
        x: NodeId,
        (u, cu): (NodeId, usize),
        (v, cv): (NodeId, usize),
        only: Option<usize>,
        dependent: Option<&mut Dependence>,
    ) {
        if cu == cv || only.is_some_and(|o| o != cu && o != cv) {
            return;
        }
        if dependent.is_some_and(|d| d.through_others(st, cu, cv, only)) {
            // The merge's own cycle search agrees.
            debug_assert!(st.path_between(cu, cv, false).is_some());
            return;
        }
        self.work.push_back(Pair::pack(
            &Cand {
                a: cu,
                b: cv,
                na: u,
                nb: v,
                via: Some(x),
            },
            x,
        ));
    }

    /// [`Siblings::queue_readers`] for a value with many readers: the
    /// pairs of readers at most [`SIBLING_WINDOW`] apart in node order
    /// (with `only`, those with a reader in `only`, found from its
    /// members, so that the value's other readers are never visited),
    /// each pair once, the earlier reader's first, with the dependence
    /// searches bounded by each chunk of readers' window.
    fn queue_window(&mut self, st: &State<'_>, x: NodeId, users: &[NodeId], only: Option<usize>) {
        let n = users.len();
        let ox = st.owner(x);
        let of = self.of;
        let sibling = |u: NodeId| sibling_group(st, of, ox, u);
        // The readers in `only`, by index in `users` (ascending; a reader
        // listed once per operand that is `x`).
        let mut mine = std::mem::take(&mut self.mine);
        mine.clear();
        if let Some(o) = only {
            for &m in &st.group(o).nodes {
                if st.graph()[m].operands.contains(&x) {
                    let at = users.partition_point(|&u| u < m);
                    mine.extend((at..n).take_while(|&i| users[i] == m));
                }
            }
            mine.sort_unstable();
            mine.dedup();
        }
        // The first readers of the pairs, as runs of indices: all of them,
        // or those at most a window before a reader in `only` (overlapping
        // windows merged, so that no pair is queued twice).
        let mut run = only.is_none().then_some((0, n));
        for &m in &mine {
            let (a, b) = (m.saturating_sub(SIBLING_WINDOW), m + 1);
            match run {
                Some((ra, rb)) if a <= rb => run = Some((ra, rb.max(b))),
                _ => {
                    if let Some(r) = run.replace((a, b)) {
                        self.queue_run(st, x, users, only, &mine, r, &sibling);
                    }
                }
            }
        }
        if let Some(r) = run {
            self.queue_run(st, x, users, only, &mine, r, &sibling);
        }
        self.mine = mine;
    }

    /// Queues the pairs of [`Siblings::queue_window`] whose first reader
    /// is in `first` (indices into `users`), a chunk of readers at a time.
    #[allow(clippy::too_many_arguments)]
    fn queue_run(
        &mut self,
        st: &State<'_>,
        x: NodeId,
        users: &[NodeId],
        only: Option<usize>,
        mine: &[usize],
        first: (usize, usize),
        sibling: &dyn Fn(NodeId) -> Option<usize>,
    ) {
        let n = users.len();
        let mut a = first.0;
        while a < first.1 {
            let b = (a + SIBLING_CHUNK).min(first.1);
            // The searches reach no further than the chunk's last partner.
            let window = &users[a..(b + SIBLING_WINDOW).min(n)];
            let mut dependent = Dependence::new(st, window, sibling);
            for i in a..b {
                let Some(cu) = sibling(users[i]) else {
                    continue;
                };
                let last = (i + SIBLING_WINDOW).min(n - 1);
                let all = only.is_none_or(|o| o == cu);
                let from = mine.partition_point(|&j| j <= i);
                let partners: &mut dyn Iterator<Item = usize> = if all {
                    &mut (i + 1..=last)
                } else {
                    &mut mine[from..].iter().copied().take_while(|&j| j <= last)
                };
                for j in partners {
                    let (v, Some(cv)) = (users[j], sibling(users[j])) else {
                        continue;
                    };
                    let u = users[i];
                    self.queue_pair(st, x, (u, cu), (v, cv), only, Some(&mut dependent));
                }
            }
            a = b;
        }
    }
}

/// The group of `u`, a reader of a value owned by group `ox` (if any), when
/// it may merge as a sibling: of kinds `of`, and not the value's own.
fn sibling_group(st: &State<'_>, of: Kinds, ox: Option<usize>, u: NodeId) -> Option<usize> {
    st.owner(u)
        .filter(|&c| ox != Some(c) && of.has(&st.group(c).kind))
}

/// Readers of one value up to which [`Siblings::queue_readers`] pairs
/// every reader with every other; beyond, each with the next
/// [`SIBLING_WINDOW`] in node order, so that the pairs of a value
/// thousands of operators read (an input every layer adds, a shared
/// bias), and the work after each merge, stay linear in its readers
/// instead of quadratic.
const SIBLING_ALL: usize = 32;

/// Later readers, in node order, each reader of a value with more than
/// [`SIBLING_ALL`] readers is paired with.
const SIBLING_WINDOW: usize = 16;

/// Readers whose pairs [`Siblings::queue_run`] queues under one bound of
/// the dependence searches.
const SIBLING_CHUNK: usize = 64;

/// Readers of one input from which [`Siblings::queue_readers`] leaves out
/// the pairs of groups that depend on each other through other units: an
/// input every layer of a model reads (a mask, a shared bias) has readers
/// in every layer, and each such pair would cost a cycle search as long as
/// the distance between the layers.
const DEPENDENCE_READERS: usize = 16;

/// Which pairs of groups reading one input depend on each other through
/// other units, from searches bounded by the readers' positions
/// ([`State::reached_from`], [`State::reaching`]), each made once per
/// group and kept for the input's other pairs.
///
/// A pair left out this way is one the merge would reject: a path
/// between the two groups through other units exists, and it stays while
/// both groups live (a merge or a stack contracts units, which removes no
/// path and keeps an intermediate unit apart from the two groups, since
/// a group that merges is gone). A pair with a direct edge is asked as
/// before: the edge alone does not forbid the merge.
struct Dependence {
    /// The smallest and largest position of the readers' groups.
    lo: u32,
    hi: u32,
    /// Per group: what it reaches up to `hi`, or what reaches it from
    /// `lo`, as bits by distance in positions ([`State::reached_from`],
    /// [`State::reaching`]).
    forward: HashMap<usize, Vec<u64>, BuildHasherDefault<IdHasher>>,
    backward: HashMap<usize, Vec<u64>, BuildHasherDefault<IdHasher>>,
}

impl Dependence {
    fn new(st: &State<'_>, users: &[NodeId], sibling: impl Fn(NodeId) -> Option<usize>) -> Self {
        let positions = users
            .iter()
            .filter_map(|&u| sibling(u))
            .map(|c| st.position(c));
        let (lo, hi) = positions.fold((u32::MAX, 0), |(lo, hi), p| (lo.min(p), hi.max(p)));
        Dependence {
            lo,
            hi,
            forward: HashMap::default(),
            backward: HashMap::default(),
        }
    }

    /// Whether a path between groups `a` and `b` runs through other units
    /// (known to, when `true`). With `only`, one of them is `only`, whose
    /// searches serve every pair: forward to the later groups, backward to
    /// the earlier ones.
    fn through_others(&mut self, st: &State<'_>, a: usize, b: usize, only: Option<usize>) -> bool {
        let (pa, pb) = (st.position(a), st.position(b));
        let (early, late, k) = if pa < pb {
            (a, b, pb - pa)
        } else {
            (b, a, pa - pb)
        };
        let bit = |bits: &[u64]| bits[k as usize / 64] >> (k % 64) & 1 == 1;
        let reached = if only == Some(late) {
            let bits = self.backward.entry(late).or_insert_with(|| {
                let mut bits = Vec::new();
                st.reaching(late, self.lo, &mut bits);
                bits
            });
            bit(bits)
        } else {
            let bits = self.forward.entry(early).or_insert_with(|| {
                let mut bits = Vec::new();
                st.reached_from(early, self.hi, &mut bits);
                bits
            });
            bit(bits)
        };
        reached && !Self::direct(st, early, late)
    }

    /// Whether a member of group `early` is an operand of group `late`.
    fn direct(st: &State<'_>, early: usize, late: usize) -> bool {
        st.group(early)
            .nodes
            .iter()
            .any(|&m| st.users(m).iter().any(|&u| st.owner(u) == Some(late)))
    }
}

impl Rule for Siblings {
    fn name(&self) -> &'static str {
        self.name
    }

    fn next(&mut self, st: &State<'_>, log: &mut Log) -> Option<Patch> {
        if !self.init {
            self.init = true;
            self.work.reserve(st.group_ids());
            // The readers of an interior node are in its group or in none
            // (`State::interior`): no pair to queue.
            for x in 0..st.graph().nodes().len() {
                if !st.interior[x] {
                    self.queue_readers(st, NodeId(x), None);
                }
            }
        }
        while let Some(c) = self.work.pop_front().map(Pair::unpack) {
            if st.owner(c.na) != Some(c.a) || st.owner(c.nb) != Some(c.b) {
                continue;
            }
            // Both groups alive: still siblings (`Siblings::queue_readers`).
            debug_assert!([c.a, c.b].iter().all(|&k| {
                let x = c.via.unwrap_or(c.na);
                st.owner(x) != Some(k) && self.of.has(&st.group(k).kind)
            }));
            let key = pair_key(c.a.min(c.b), c.a.max(c.b));
            if self.tried.contains(&key) {
                continue;
            }
            if let Some(patch) = merge_or_reject(st, log, self.name, &c, c.via) {
                return Some(patch);
            }
            self.tried.insert(key);
        }
        None
    }

    fn notify(&mut self, st: &State<'_>, c: usize, _edges: &[Cand]) {
        if !self.init {
            return;
        }
        // Each input of the group once (a second time would queue the same
        // pairs again): an input all its members read comes up once per
        // member.
        let mut inputs = std::mem::take(&mut self.inputs);
        inputs.clear();
        for &m in &st.group(c).nodes {
            for &o in &st.graph()[m].operands {
                if st.owner(o) != Some(c) && !inputs.contains(&o) {
                    inputs.push(o);
                }
            }
        }
        for &o in &inputs {
            self.queue_readers(st, o, Some(c));
        }
        self.inputs = inputs;
    }

    fn reset(&mut self) {
        self.init = false;
        self.work.clear();
        self.tried.clear();
    }
}

/// Stacks independent groups that read a common input into one parallel
/// launch (a [`Joins::Stack`] rule).
struct ParallelStack {
    name: &'static str,
    /// Kinds of every member.
    of: Kinds,
    max: usize,
    next_node: usize,
    /// Per group id: the units it reaches up to a position, as bits
    /// ([`State::reached_from`]), stamped with the generation they were
    /// found in (`(generation, limit, bits)`). Only the current
    /// generation's are valid: a stack or a merge changes the units and
    /// starts a new one, in O(1) however many groups were asked about.
    reach: Vec<(u32, u32, Vec<u64>)>,
    /// The current generation of `reach` (never 0, which marks no entry).
    generation: u32,
    /// Per group id: the last scan of a node that listed it as a
    /// candidate (a stamp of `scans`), so that a node's candidates are
    /// kept distinct without searching them (a weight that every matmul
    /// reads has thousands).
    listed: Vec<u32>,
    /// Scans of a node so far (never reset, so that no stamp is reused).
    scans: u32,
    /// Scratch of [`Rule::next`]: the groups reading a node, and those
    /// chosen for a stack (kept so that a scan allocates them once).
    cands: Vec<usize>,
    chosen: Vec<usize>,
}

impl ParallelStack {
    fn new(name: &'static str, of: Kinds, max: usize) -> ParallelStack {
        ParallelStack {
            name,
            of,
            max,
            next_node: 0,
            reach: Vec::new(),
            generation: 1,
            listed: Vec::new(),
            scans: 0,
            cands: Vec::new(),
            chosen: Vec::new(),
        }
    }

    /// Forgets every group's reach (the units changed).
    fn invalidate(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            // Wrapped: no stale stamp may pass for the new generation.
            self.reach.iter_mut().for_each(|r| r.0 = 0);
            self.generation = 1;
        }
    }

    /// Whether groups `c` and `d` depend on each other: the earlier one in
    /// the units' topological numbering reaches the later one. Both are
    /// numbered at most `limit` (the candidates' largest position), which
    /// bounds the reach search: the reach found for one pair serves the
    /// later pairs of the same node. (A search for one path,
    /// [`State::path_from`], costs more here: the reach of a group is asked
    /// for again for other pairs.)
    fn dependent(&mut self, st: &State<'_>, c: usize, d: usize, limit: u32) -> bool {
        let (pc, pd) = (st.position(c), st.position(d));
        let (lo, p_lo, p_hi) = if pc < pd { (c, pc, pd) } else { (d, pd, pc) };
        if self.reach.len() < st.group_ids() {
            self.reach.resize_with(st.group_ids(), Default::default);
        }
        let r = &mut self.reach[lo];
        if r.0 != self.generation || r.1 < p_hi {
            st.reached_from(lo, limit, &mut r.2);
            (r.0, r.1) = (self.generation, limit);
        }
        let k = (p_hi - p_lo) as usize;
        r.2[k / 64] >> (k % 64) & 1 == 1
    }
}

impl Rule for ParallelStack {
    fn name(&self) -> &'static str {
        self.name
    }

    fn next(&mut self, st: &State<'_>, _log: &mut Log) -> Option<Patch> {
        let n = st.graph().nodes().len();
        if self.listed.len() < st.group_ids() {
            self.listed.resize(st.group_ids(), u32::MAX);
        }
        while self.next_node < n {
            let x = NodeId(self.next_node);
            self.next_node += 1;
            if st.users(x).len() < 2 {
                continue;
            }
            self.scans = self.scans.wrapping_add(1);
            if self.scans == u32::MAX {
                // Wrapped (`u32::MAX` marks no scan): forget every stamp.
                self.listed.iter_mut().for_each(|s| *s = u32::MAX);
                self.scans = 0;
            }
            let stamp = self.scans;
            self.cands.clear();
            for &u in st.users(x) {
                if let Some(c) = st.owner(u) {
                    let fresh = !st.is_stacked(c) && st.owner(x) != Some(c);
                    if fresh && self.listed[c] != stamp && self.of.has(&st.group(c).kind) {
                        self.listed[c] = stamp;
                        self.cands.push(c);
                    }
                }
            }
            if self.cands.len() < 2 {
                continue;
            }
            let limit = self.cands.iter().map(|&c| st.position(c)).max();
            let limit = limit.unwrap_or(0);
            let mut chosen = std::mem::take(&mut self.chosen);
            chosen.clear();
            for i in 0..self.cands.len() {
                if chosen.len() >= self.max {
                    break;
                }
                let c = self.cands[i];
                if !chosen.iter().any(|&d| self.dependent(st, c, d, limit)) {
                    chosen.push(c);
                }
            }
            self.chosen = chosen;
            if self.chosen.len() >= 2 {
                // The stack changes the units: what reaches what.
                self.invalidate();
                return Some(Patch::Stack {
                    members: self.chosen.clone(),
                });
            }
        }
        None
    }

    fn notify(&mut self, _st: &State<'_>, _c: usize, _edges: &[Cand]) {
        // Merges after stacking started restart the scan.
        self.next_node = 0;
        self.invalidate();
    }

    fn reset(&mut self) {
        self.next_node = 0;
        self.invalidate();
    }
}

/// The rules of [`RULES`] for `opts`, in its (priority) order: the merges
/// when `opts` fuses, the stacks when it stacks.
pub fn rules(opts: &FuseOptions) -> Vec<Box<dyn Rule>> {
    let mut r: Vec<Box<dyn Rule>> = Vec::new();
    for &RuleDef { name, joins } in &RULES {
        match joins {
            Joins::Edge { producer, consumer } if opts.fuse => {
                r.push(Box::new(Vertical::new(name, producer, consumer)));
            }
            Joins::Siblings { of } if opts.fuse => r.push(Box::new(Siblings {
                name,
                of,
                init: false,
                work: VecDeque::new(),
                tried: IdSet::default(),
                groups: Vec::new(),
                mine: Vec::new(),
                inputs: Vec::new(),
            })),
            Joins::Stack { of } if opts.stack => {
                r.push(Box::new(ParallelStack::new(name, of, opts.max_stack)));
            }
            _ => {}
        }
    }
    r
}
