//! The operator fuser: which graph operators share a kernel.
//!
//! The pass runs once on the symbolic (decomposed) graph, before any shape
//! is bound. It starts with each decomposed composite (softmax, norms,
//! mean: [`FusionPlan::with_composites`]) that forms a group as one group
//! and every other element-wise, reduce and matmul operator in a group of
//! its own, and applies rewrite rules ([`pattern`]) until none
//! applies (a fixed point), in the style of tract's optimiser: each rule
//! looks at the current state and returns a [`Patch`] (merge two groups, or
//! stack independent groups into one launch); the driver applies it and
//! checks the state's consistency before asking again.
//!
//! A merge is legal only when [`legality::validate`] proves, with the graph's
//! symbol scope, that the merged nodes form one iteration space for every
//! binding, and when it creates no cycle between kernels. Every rejected
//! candidate is recorded with its [`Reason`] for `dvm explain`.
//!
//! The result, a [`FusionPlan`], lists the groups (with their kind and
//! symbolic space), the stacks, and an order of units (groups, stacks and
//! the remaining data/view nodes) that respects every dependence.
//! The compiler's lowering (`dvm_compile::lower`) turns it into kernels at bound shapes; a fused group
//! that does not compile there (its live tiles do not fit the UB, or it
//! exceeds the executor's capacity) is split, never failed.
//!
//! - [`legality`]: symbolic shape checks and group validation.
//! - [`rules`]: the fusion rules, defined once for both drivers.
//! - [`pattern`]: the rules as rewrite rules, applied to a fixed point.
//! - [`sweep`]: the one-pass fuser of the eager API.

pub mod legality;
pub mod pattern;
pub mod rules;
pub mod sweep;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::ops::Range;

use dvm_graph::{Graph, NodeId, ShapeDisplay};
use dvm_sym::Dim;

use legality::{role_of, validate, validate_fast, validate_union, Class, Facts, Shapes};
pub use legality::{role_of_recorded, Reason, Users};
use rules::Refusal;

/// How the fuser treats a graph node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Inputs, constants and views: no kernel of their own (a view may be
    /// materialised by a copy).
    Data,
    /// An element-wise operator.
    Elementwise,
    /// A reduction along one axis.
    Reduce {
        /// The axis.
        axis: usize,
        /// Whether the axis is kept with extent 1.
        keepdims: bool,
    },
    /// A matmul of operands of rank ≥ 2.
    Matmul,
    /// A softmax, log-softmax, layer norm or RMS norm not decomposed: a
    /// reduce group of its own along `axis` of its first operand's shape,
    /// whose value is full-size. Only the eager API's decision over the
    /// recorded operators sees one ([`role_of_recorded`]); a decomposed
    /// graph has none.
    Composite {
        /// The axis its reductions fold.
        axis: usize,
    },
    /// Anything else (concat, reductions over several axes, matmul of
    /// vectors): lowered on its own.
    Opaque,
}

/// What a fusion group computes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FusionKind {
    /// Element-wise over the space.
    Elementwise,
    /// Element-wise with folds of one axis of the space.
    Reduce {
        /// The folded axis.
        axis: usize,
    },
    /// One matmul with an element-wise epilogue over its output space.
    Matmul,
}

impl FusionKind {
    /// A short name: `elementwise`, `reduce(axis 1)`, `matmul`.
    pub fn describe(&self) -> String {
        match self {
            FusionKind::Elementwise => "elementwise".into(),
            FusionKind::Reduce { axis } => format!("reduce(axis {axis})"),
            FusionKind::Matmul => "matmul".into(),
        }
    }
}

/// One fusion group: graph nodes computed by one kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct FusionGroup {
    /// Kind.
    pub kind: FusionKind,
    /// Members, ascending (a topological order).
    pub nodes: Vec<NodeId>,
    /// Symbolic iteration space (reduce: before the fold; matmul: the output).
    pub space: Vec<Dim>,
}

/// One step of a fusion plan's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// A data, view or opaque node, lowered on its own.
    Node(NodeId),
    /// A fusion group ([`FusionPlan::groups`] index).
    Group(usize),
    /// Independent groups launched together ([`FusionPlan::stacks`] index).
    Stack(usize),
}

/// A rejected fusion candidate.
#[derive(Clone, Debug, PartialEq)]
pub struct Rejection {
    /// The rule that proposed it.
    pub rule: &'static str,
    /// A node of the first group (the producer for vertical rules).
    pub a: NodeId,
    /// A node of the second group (the consumer for vertical rules).
    pub b: NodeId,
    /// The shared input of sibling candidates.
    pub via: Option<NodeId>,
    /// Why it was rejected.
    pub reason: Reason,
}

/// Fuser settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FuseOptions {
    /// Merge operators into groups (`false`: one kernel per operator).
    pub fuse: bool,
    /// Stack independent groups that share an input into parallel launches.
    pub stack: bool,
    /// At run time, pack consecutive small kernels into sequence launches.
    pub sequence: bool,
    /// Most nodes in one group.
    pub max_nodes: usize,
    /// Most buffer parameters of one kernel (the verifier's limit is 32).
    pub max_params: usize,
    /// Most groups in one parallel stack.
    pub max_stack: usize,
    /// Record why candidates were rejected and describe every rewrite (for
    /// `dvm explain`); the eager API turns it off to keep the decision cheap.
    pub reasons: bool,
    /// Start each decomposed composite (softmax, norms, mean) as one group
    /// when it forms one ([`FusionPlan::with_composites`]); `false`: every
    /// operator starts alone and the rules rediscover them.
    pub composites: bool,
    /// Decide with the one-pass [`sweep`] instead of the rules to a fixed
    /// point, when no reasons are asked for and the graph has at most
    /// [`sweep::MAX_UNITS`] units: the eager API's choice, a fraction of
    /// the work for a window of a few dozen operators. The plans are
    /// legal all the same; they may group differently where the rules'
    /// order of merges would.
    pub sweep: bool,
}

impl FuseOptions {
    /// The eager API's options: the one-pass sweep over recorded
    /// operators, without rejection reasons (nothing reads them there).
    pub fn eager() -> FuseOptions {
        FuseOptions {
            reasons: false,
            sweep: true,
            ..FuseOptions::default()
        }
    }
}

impl Default for FuseOptions {
    fn default() -> Self {
        FuseOptions {
            fuse: true,
            stack: true,
            sequence: true,
            max_nodes: 64,
            max_params: dvm_isa::verify::MAX_PARAMS,
            max_stack: 8,
            reasons: true,
            composites: true,
            sweep: false,
        }
    }
}

impl FuseOptions {
    /// No fusion and no stacking: one kernel per operator.
    pub fn off() -> FuseOptions {
        FuseOptions {
            fuse: false,
            stack: false,
            sequence: false,
            ..FuseOptions::default()
        }
    }
}

/// A bug in the fuser caught by its consistency check (reported, never
/// panicked on).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fusion consistency check failed after rule `{rule}`: {what}")]
pub struct FuseError {
    /// The rule whose rewrite broke an invariant.
    pub rule: &'static str,
    /// The broken invariant.
    pub what: String,
}

/// A rewrite proposed by a rule.
#[derive(Clone, Debug, PartialEq)]
pub enum Patch {
    /// Replace groups `a` and `b` by `merged`.
    Merge {
        /// First group.
        a: usize,
        /// Second group.
        b: usize,
        /// The validated union.
        merged: FusionGroup,
    },
    /// Launch these independent groups together.
    Stack {
        /// Members.
        members: Vec<usize>,
    },
}

/// A rewrite rule: proposes the next patch for the current state.
///
/// Rules keep their own worklists of candidates: [`Rule::next`] examines
/// candidates until one is legal, and [`Rule::notify`] tells the rule about
/// the group a patch created, so that only the candidates around it are
/// examined again (a rejected pair of groups stays rejected: merges only add
/// paths between units, and a group's members never change).
pub trait Rule {
    /// Name (for logs and `dvm explain`).
    fn name(&self) -> &'static str;
    /// The next patch, or `None` at this rule's fixed point. Rejected
    /// candidates go to `log`.
    fn next(&mut self, st: &State<'_>, log: &mut Log) -> Option<Patch>;
    /// Group `c` was created by a merge; `edges` are its edges to the
    /// neighbouring groups ([`pattern::neighbour_edges`]).
    fn notify(&mut self, st: &State<'_>, c: usize, edges: &[pattern::Cand]);
    /// Forgets everything about the last pass, keeping its memory, so that
    /// the rule can run a new pass ([`FuseScratch`]).
    fn reset(&mut self);
}

pub use dvm_sym::{IdHasher, IdSet};

/// Rejections found by the rules.
#[derive(Debug, Default)]
pub struct Log {
    /// Whether to keep them (see [`FuseOptions::reasons`]).
    pub keep: bool,
    /// Rejections in the order they were found.
    pub rejections: Vec<Rejection>,
}

impl Log {
    /// Records a rejection (when reasons are kept).
    pub fn reject(&mut self, r: Rejection) {
        if self.keep {
            self.rejections.push(r);
        }
    }
}

const NONE: u32 = u32::MAX;

/// The fewest members of a reduce group that [`State::merge`] validates a
/// union onto ([`legality::validate_onto`]): below, re-validating the
/// whole union costs about as little.
const ONTO_MIN: usize = 6;

/// No union accepted (see `State::accepted`).
const NOT_ACCEPTED: (usize, usize, u32, u32, bool) = (usize::MAX, usize::MAX, NONE, 0, false);

/// Scratch of [`State::merge`]: the merged member list, the value classes
/// of a reduce group, and the nodes [`legality::validate_onto`] checked and
/// has yet to check.
type MergeScratch = (Vec<NodeId>, Vec<Class>, Vec<NodeId>, Vec<NodeId>);

/// Scratch of [`State::topo_order`]: every node's unit's first node,
/// whether each unit (by its first node) is taken, and the units waiting
/// with the unit each waits on.
type OrderScratch = (Vec<u32>, Vec<bool>, Vec<(u32, u32)>);

/// Scratch of [`State::contract`]: the units ahead and behind (with their
/// positions) and the positions they and the two contracted units hold.
type Window = (Vec<(u32, Unit)>, Vec<(u32, Unit)>, Vec<u32>);

/// Buffers one fusion pass hands on to the next ([`FusionPlan::with_scratch`]).
///
/// A pass builds some twenty vectors and maps of working state, sized by the
/// graph, and drops them when the plan is made. A context that decides
/// window after window (the eager API) keeps them here instead: the next
/// pass clears and refills them, so it neither allocates them again nor
/// writes into memory the allocator hands out cold.
#[derive(Default)]
pub struct FuseScratch {
    buffers: Option<Buffers>,
    /// The rules of the last pass and the options they were made for.
    rules: Option<(RuleKey, Vec<Box<dyn Rule>>)>,
    /// The working state of the last [`sweep`].
    sweep: Option<sweep::Sweep>,
}

/// The options [`pattern::rules`] makes its rules from.
type RuleKey = (bool, bool, usize);

/// [`RuleKey`] of `opts`.
fn rule_key(opts: &FuseOptions) -> RuleKey {
    (opts.fuse, opts.stack, opts.max_stack)
}

impl FuseScratch {
    /// The rules for `opts`: the last pass's, reset, when they were made
    /// for the same options, else new ones.
    fn rules(&mut self, opts: &FuseOptions) -> Vec<Box<dyn Rule>> {
        let key = rule_key(opts);
        match self.rules.take() {
            Some((k, mut rules)) if k == key => {
                rules.iter_mut().for_each(|r| r.reset());
                rules
            }
            _ => pattern::rules(opts),
        }
    }
}

/// [`State`]'s own vectors, kept between passes by [`FuseScratch`] (each
/// as the field of the same name).
#[derive(Default)]
struct Buffers {
    owner: Vec<u32>,
    groups: Vec<FusionGroup>,
    stack_of: Vec<u32>,
    stacks: Vec<Vec<usize>>,
    scratch: (Vec<u32>, Vec<NodeId>),
    merge_scratch: MergeScratch,
    class_of: Vec<Class>,
    spare: Vec<Vec<NodeId>>,
    space_id: Vec<u32>,
    params: Vec<u32>,
    pos: Vec<u32>,
    window: Window,
    moved: Vec<Unit>,
    visited: Vec<(u32, Unit)>,
    seeded: Vec<usize>,
    interior: Vec<bool>,
    order_scratch: OrderScratch,
    shapes: legality::ShapeBuffers,
}

/// `v` emptied and refilled with `n` copies of `x`, keeping its memory.
fn refill<T: Clone>(mut v: Vec<T>, n: usize, x: T) -> Vec<T> {
    v.clear();
    v.resize(n, x);
    v
}

/// `v` emptied, with room for at least `n` elements, keeping its memory.
fn emptied<T>(mut v: Vec<T>, n: usize) -> Vec<T> {
    v.clear();
    v.reserve(n);
    v
}

/// The fuser's working state: groups over the graph's compute nodes.
pub struct State<'g> {
    g: &'g Graph,
    roles: Vec<Role>,
    users: Users,
    is_output: Vec<bool>,
    /// Group of each node (`NONE` for data and opaque nodes).
    owner: Vec<u32>,
    /// Groups by id; merged-away groups are left empty (ids are never reused).
    /// A group's `space` is only filled in when rewrites are described
    /// ([`FuseOptions::reasons`]); the plan's groups always have it.
    groups: Vec<FusionGroup>,
    /// Stack of each group (`NONE` when not stacked).
    stack_of: Vec<u32>,
    stacks: Vec<Vec<usize>>,
    opts: FuseOptions,
    /// Interned node shapes and memoised shape relations.
    shapes: Shapes,
    scratch: RefCell<(Vec<u32>, Vec<NodeId>)>,
    epoch: Cell<u32>,
    /// Scratch of [`State::merge`] (see [`MergeScratch`]).
    merge_scratch: RefCell<MergeScratch>,
    /// The value class of every member of a reduce group whose space is
    /// known (`space_id`), so that a merge into it validates only what it
    /// changes ([`legality::validate_onto`]).
    class_of: Vec<Class>,
    /// Member lists of merged-away groups, reused for new groups.
    spare: RefCell<Vec<Vec<NodeId>>>,
    /// The space (a shape id) of every group, once known.
    space_id: Vec<u32>,
    /// The groups, space and parameter bound of the last union
    /// [`State::merge`] accepted, for [`State::apply`], and whether it
    /// was validated onto one of them ([`legality::validate_onto`]). Its
    /// classes are then in the merge scratch: those of the nodes
    /// `validate_onto` checked (the others keep theirs), else every
    /// member's. Reset by every merge attempt.
    accepted: Cell<(usize, usize, u32, u32, bool)>,
    /// An upper bound of every group's buffer parameters ([`count_params`]):
    /// a union needs at most the sum of its parts' (its external operands
    /// and stored values are among theirs), so a merge looks closer only
    /// when that sum exceeds the limit ([`State::params_onto`], then the
    /// count).
    params: Vec<u32>,
    /// Position of every node's unit in a topological order of the units
    /// (all members of a group or stack share it; distinct units have
    /// distinct positions). Starts as the node ids (the graph's order) and
    /// is kept valid across merges and stacks by [`State::contract`].
    pos: Vec<u32>,
    /// Scratch of [`State::contract`]: the units found between the two
    /// contracted ones, behind and ahead, with their positions.
    window: Window,
    /// The units the last patch moved, for [`State::check`].
    moved: Vec<Unit>,
    /// The units the last complete search of [`State::path_from`] visited
    /// (with their positions), and its two groups: when that search let
    /// the merge through, [`State::contract`] takes them as the units
    /// ahead instead of searching again.
    visited: RefCell<Vec<(u32, Unit)>>,
    visited_for: Cell<(usize, usize)>,
    /// The groups [`State::seed`] made from composites.
    seeded: Vec<usize>,
    /// Nodes known to have no edge to another group's node: every user and
    /// operand is in the node's own group or in none (data and opaque
    /// nodes never join one). Set by [`pattern::neighbour_edges`], which
    /// then skips them; a group only grows, so a node stays interior.
    interior: Vec<bool>,
    /// Scratch of [`State::topo_order`].
    order_scratch: RefCell<OrderScratch>,
}

impl<'g> State<'g> {
    /// The initial state: every composite range of `composites` that forms
    /// a group ([`State::seed`]) is one group, every other element-wise,
    /// reduce and matmul operator a group of its own.
    fn new(g: &'g Graph, opts: FuseOptions, composites: &[Range<usize>]) -> State<'g> {
        State::with_buffers(g, opts, composites, Buffers::default())
    }

    /// [`State::new`] in `b`'s memory.
    fn with_buffers(
        g: &'g Graph,
        opts: FuseOptions,
        composites: &[Range<usize>],
        b: Buffers,
    ) -> State<'g> {
        let n = g.nodes().len();
        let users = Users::new(g);
        let mut is_output = vec![false; n];
        for (_, id) in g.outputs() {
            if let Some(o) = is_output.get_mut(id.0) {
                *o = true;
            }
        }
        let roles: Vec<Role> = (0..n).map(|i| role_of(g, NodeId(i))).collect();
        let (ms0, ms1, ms2, ms3) = b.merge_scratch;
        let (w0, w1, w2) = b.window;
        let mut pos = emptied(b.pos, n);
        pos.extend(0..n as u32);
        let mut st = State {
            g,
            roles,
            users,
            is_output,
            owner: refill(b.owner, n, NONE),
            groups: emptied(b.groups, 2 * n),
            stack_of: emptied(b.stack_of, 2 * n),
            stacks: emptied(b.stacks, 0),
            opts,
            shapes: Shapes::new_in(g, b.shapes),
            scratch: RefCell::new((refill(b.scratch.0, n, 0), emptied(b.scratch.1, 0))),
            epoch: Cell::new(0),
            merge_scratch: RefCell::new((
                emptied(ms0, 0),
                refill(ms1, n, Class::Full),
                emptied(ms2, 0),
                emptied(ms3, 0),
            )),
            class_of: refill(b.class_of, n, Class::Full),
            spare: RefCell::new(b.spare),
            space_id: emptied(b.space_id, 2 * n),
            accepted: Cell::new(NOT_ACCEPTED),
            params: emptied(b.params, 2 * n),
            pos,
            window: (emptied(w0, 0), emptied(w1, 0), emptied(w2, 0)),
            moved: emptied(b.moved, 0),
            visited: RefCell::new(emptied(b.visited, 0)),
            visited_for: Cell::new((usize::MAX, usize::MAX)),
            seeded: emptied(b.seeded, 0),
            interior: refill(b.interior, n, false),
            order_scratch: RefCell::new(b.order_scratch),
        };
        let mut spans = composites
            .iter()
            .filter(|_| opts.fuse && opts.composites)
            .peekable();
        let mut i = 0;
        while i < n {
            while spans.next_if(|r| r.start < i).is_some() {}
            if let Some(r) = spans.next_if(|r| r.start == i) {
                if st.seed(r.clone()) {
                    i = r.end;
                    continue;
                }
            }
            let id = NodeId(i);
            i += 1;
            if !matches!(
                st.roles[id.0],
                Role::Elementwise | Role::Reduce { .. } | Role::Composite { .. } | Role::Matmul
            ) {
                continue;
            }
            // A single operator is always a group: its space is its shape
            // (a reduction's: its operand's). Spaces are filled in when the
            // plan is made (see `FusionGroup::space` in `State::groups`).
            let kind = match st.roles[id.0] {
                Role::Reduce { axis, .. } | Role::Composite { axis } => FusionKind::Reduce { axis },
                Role::Matmul => FusionKind::Matmul,
                _ => FusionKind::Elementwise,
            };
            st.owner[id.0] = st.groups.len() as u32;
            // In a member list an earlier pass's merges left, if any.
            let mut nodes = st.spare.get_mut().pop().unwrap_or_default();
            nodes.clear();
            nodes.push(id);
            st.groups.push(FusionGroup {
                kind,
                nodes,
                space: Vec::new(),
            });
            st.stack_of.push(NONE);
            st.params.push(g[id].operands.len() as u32 + 1);
            let space = match st.roles[id.0] {
                Role::Reduce { keepdims, .. } => {
                    st.class_of[id.0] = Class::Reduced(keepdims);
                    st.shapes.of(g[id].operands[0])
                }
                Role::Composite { .. } => st.shapes.of(g[id].operands[0]),
                _ => st.shapes.of(id),
            };
            st.space_id.push(space);
        }
        st
    }

    /// Makes the nodes `r` (a decomposed composite) one group when they
    /// form one: within the node and parameter limits and valid for every
    /// binding ([`validate_fast`]). A contiguous range of compute nodes
    /// lies on no cycle: every path that leaves it reaches only later
    /// nodes. Returns whether it did.
    fn seed(&mut self, r: Range<usize>) -> bool {
        if r.len() < 2 || r.end > self.owner.len() || r.len() > self.opts.max_nodes {
            return false;
        }
        let member = |m: NodeId| r.contains(&m.0);
        let mut nodes = self.spare.get_mut().pop().unwrap_or_default();
        nodes.clear();
        nodes.reserve(r.len().next_power_of_two());
        nodes.extend(r.clone().map(NodeId));
        // The validation of a reduce group leaves its members' classes: in
        // `class_of`, where the group keeps them. A range that forms no
        // group gets them back full-size, as they were. (`State::facts`'s
        // fields spelled out: it would borrow `class_of` too.)
        let facts = Facts {
            graph: self.g,
            users: &self.users,
            is_output: &self.is_output,
            roles: &self.roles,
        };
        let found = validate_fast(&facts, &self.shapes, &nodes, member, &mut self.class_of);
        let bound = found.as_ref().and_then(|_| {
            let bound: usize = nodes.iter().map(|&m| self.g[m].operands.len() + 1).sum();
            if bound <= self.opts.max_params {
                return Some(bound);
            }
            let bound = self.count_params(&nodes, member);
            (bound <= self.opts.max_params).then_some(bound)
        });
        let (Some((kind, space)), Some(bound)) = (found, bound) else {
            self.class_of[r.clone()].fill(Class::Full);
            self.spare.get_mut().push(nodes);
            return false;
        };
        let id = self.groups.len();
        for &m in &nodes {
            self.owner[m.0] = id as u32;
            self.pos[m.0] = r.start as u32;
        }
        self.groups.push(FusionGroup {
            kind,
            nodes,
            space: Vec::new(),
        });
        self.stack_of.push(NONE);
        self.params.push(bound as u32);
        self.space_id.push(space);
        self.seeded.push(id);
        true
    }

    /// The graph.
    pub fn graph(&self) -> &'g Graph {
        self.g
    }

    /// The facts legality needs.
    pub fn facts(&self) -> Facts<'_> {
        Facts {
            graph: self.g,
            users: &self.users,
            is_output: &self.is_output,
            roles: &self.roles,
        }
    }

    /// Consumers of node `n`.
    pub fn users(&self, n: NodeId) -> &[NodeId] {
        self.users.of(n)
    }

    /// The live group holding node `n`.
    pub fn owner(&self, n: NodeId) -> Option<usize> {
        let o = self.owner[n.0];
        (o != NONE).then_some(o as usize)
    }

    /// Group `c` (empty when merged away).
    pub fn group(&self, c: usize) -> &FusionGroup {
        &self.groups[c]
    }

    /// Number of group ids handed out so far.
    pub fn group_ids(&self) -> usize {
        self.groups.len()
    }

    /// Whether group `c` is in a stack.
    pub fn is_stacked(&self, c: usize) -> bool {
        self.stack_of[c] != NONE
    }

    /// The options.
    pub fn options(&self) -> &FuseOptions {
        &self.opts
    }

    fn unit(&self, n: NodeId) -> Unit {
        match self.owner(n) {
            None => Unit::Node(n),
            Some(c) if self.stack_of[c] != NONE => Unit::Stack(self.stack_of[c] as usize),
            Some(c) => Unit::Group(c),
        }
    }

    /// Calls `f` on every node of unit `u`.
    fn for_members(&self, u: Unit, mut f: impl FnMut(NodeId)) {
        match u {
            Unit::Node(n) => f(n),
            Unit::Group(c) => self.groups[c].nodes.iter().for_each(|&n| f(n)),
            Unit::Stack(s) => {
                for &c in &self.stacks[s] {
                    self.groups[c].nodes.iter().for_each(|&n| f(n));
                }
            }
        }
    }

    /// Sets, in `bits` (resized), bit `p - position(c)` for the position `p`
    /// of every unit numbered at most `limit` that group `c` reaches along
    /// edges (any path, direct ones included; see [`State::position`]).
    ///
    /// The positions number the units in a topological order, so a path
    /// from `c` to a unit numbered `p` only runs through units numbered
    /// below `p`: the search never enters a unit beyond `limit`, and costs
    /// what lies between `c` and `limit` instead of everything downstream
    /// of `c` (a group early in a long chain reaches the rest of it).
    pub fn reached_from(&self, c: usize, limit: u32, bits: &mut Vec<u64>) {
        self.reach_search::<true>(c, limit, bits);
    }

    /// [`State::reached_from`] against the edges: bit `position(c) - p`
    /// for the position `p` of every unit numbered at least `floor` that
    /// reaches group `c`.
    pub fn reaching(&self, c: usize, floor: u32, bits: &mut Vec<u64>) {
        self.reach_search::<false>(c, floor, bits);
    }

    /// The search of [`State::reached_from`] (`FORWARD`, along users, up to
    /// position `bound`) or of [`State::reaching`] (along operands, down to
    /// `bound`).
    #[inline]
    fn reach_search<const FORWARD: bool>(&self, c: usize, bound: u32, bits: &mut Vec<u64>) {
        let base = self.position(c);
        let span = if FORWARD {
            bound.saturating_sub(base)
        } else {
            base.saturating_sub(bound)
        };
        bits.clear();
        bits.resize((span as usize + 1).div_ceil(64), 0);
        let within = |p: u32| if FORWARD { p <= bound } else { p >= bound };
        let next = |m: NodeId| -> &[NodeId] {
            if FORWARD {
                self.users.of(m)
            } else {
                &self.g[m].operands
            }
        };
        let epoch = self.next_epoch();
        let mut scratch = self.scratch.borrow_mut();
        let (seen, work) = &mut *scratch;
        work.clear();
        // `c`'s members are marked first: the search never re-enters `c`.
        for &m in &self.groups[c].nodes {
            seen[m.0] = epoch;
        }
        for &m in &self.groups[c].nodes {
            work.extend(
                next(m)
                    .iter()
                    .filter(|v| seen[v.0] != epoch && within(self.pos[v.0])),
            );
        }
        while let Some(x) = work.pop() {
            if seen[x.0] == epoch {
                continue;
            }
            let k = self.pos[x.0].abs_diff(base) as usize;
            bits[k / 64] |= 1 << (k % 64);
            let u = self.unit(x);
            self.for_members(u, |m| seen[m.0] = epoch);
            self.for_members(u, |m| {
                work.extend(
                    next(m)
                        .iter()
                        .filter(|v| seen[v.0] != epoch && within(self.pos[v.0])),
                );
            });
        }
    }

    /// The position of group `c` in the units' topological numbering.
    pub fn position(&self, c: usize) -> u32 {
        self.unit_pos(Unit::Group(c))
    }

    /// A node on a path from group `a` to group `b` (or back) that runs
    /// through other units (any path at all when `direct` is true), treating
    /// every group and stack as one unit.
    pub fn path_between(&self, a: usize, b: usize, direct: bool) -> Option<NodeId> {
        self.path_from(a, b, direct)
            .or_else(|| self.path_from(b, a, direct))
    }

    /// A node on a path from group `a` to group `b` (`a != b`, neither
    /// stacked) through other units, or along a direct edge when `direct`.
    ///
    /// Units are numbered in a topological order ([`State::pos`]): a path
    /// from `a` to `b` only visits units numbered between theirs, so the
    /// search never leaves that window. (Node ids would not do: a path can
    /// enter a group or stack at a late member and leave it from an early
    /// one.)
    fn path_from(&self, a: usize, b: usize, direct: bool) -> Option<NodeId> {
        let (ca, cb) = (&self.groups[a], &self.groups[b]);
        let pb = self.pos[cb.nodes.first()?.0];
        let pa = self.pos[ca.nodes.first()?.0];
        if pa > pb {
            return None;
        }
        let (aa, bb) = (a as u32, b as u32);
        self.visited_for.set((usize::MAX, usize::MAX));
        let mut visited = self.visited.borrow_mut();
        visited.clear();
        if !direct && pb - pa == 1 {
            // No position between the two: no unit to pass through (a
            // merge along an edge in a chain mostly finds them adjacent).
            self.visited_for.set((a, b));
            return None;
        }
        // Epoch-stamped visited marks: no clearing between searches.
        let epoch = self.next_epoch();
        let mut scratch = self.scratch.borrow_mut();
        let (seen, work) = &mut *scratch;
        work.clear();
        for &m in &ca.nodes {
            for &u in self.users.of(m) {
                let o = self.owner[u.0];
                if o == bb {
                    if direct {
                        return Some(m);
                    }
                } else if o != aa && self.pos[u.0] < pb {
                    work.push(u);
                }
            }
        }
        while let Some(x) = work.pop() {
            if seen[x.0] == epoch {
                continue;
            }
            let mut hit = false;
            let ux = self.unit(x);
            visited.push((self.pos[x.0], ux));
            self.for_members(ux, |m| {
                if hit || seen[m.0] == epoch {
                    return;
                }
                seen[m.0] = epoch;
                for &u in self.users.of(m) {
                    let o = self.owner[u.0];
                    if o == bb {
                        hit = true;
                        return;
                    }
                    if o != aa && self.pos[u.0] < pb && seen[u.0] != epoch {
                        work.push(u);
                    }
                }
            });
            if hit {
                return Some(x);
            }
        }
        self.visited_for.set((a, b));
        None
    }

    /// The position of unit `u` ([`State::pos`]).
    fn unit_pos(&self, u: Unit) -> u32 {
        match u {
            Unit::Node(n) => self.pos[n.0],
            Unit::Group(c) => self.pos[self.groups[c].nodes[0].0],
            Unit::Stack(s) => self.pos[self.groups[self.stacks[s][0]].nodes[0].0],
        }
    }

    /// Gives every member of unit `u` position `p`.
    fn set_pos(&mut self, u: Unit, p: u32) {
        let (pos, groups) = (&mut self.pos, &self.groups);
        match u {
            Unit::Node(n) => pos[n.0] = p,
            Unit::Group(c) => groups[c].nodes.iter().for_each(|n| pos[n.0] = p),
            Unit::Stack(s) => {
                for &c in &self.stacks[s] {
                    groups[c].nodes.iter().for_each(|n| pos[n.0] = p);
                }
            }
        }
    }

    /// First half of contracting units `x` and `y` into one (a merge, or a
    /// group joining a stack), before the ownership changes: finds the
    /// units numbered strictly between them that the earlier one reaches
    /// (ahead) and that reach the later one (behind), as in Pearce and
    /// Kelly's dynamic topological order. The two sets are disjoint when
    /// the contraction creates no cycle. [`State::renumber`] finishes.
    fn contract(&mut self, x: Unit, y: Unit) {
        let (px, py) = (self.unit_pos(x), self.unit_pos(y));
        let (lo, hi) = if px < py { (px, py) } else { (py, px) };
        let (first, last) = if px < py { (x, y) } else { (y, x) };
        let (mut ahead, mut behind, mut pool) = std::mem::take(&mut self.window);
        ahead.clear();
        behind.clear();
        pool.clear();
        // The merge's own cycle search already found the units ahead.
        let cached = match (first, last) {
            (Unit::Group(f), Unit::Group(l)) => self.visited_for.get() == (f, l),
            _ => false,
        };
        self.visited_for.set((usize::MAX, usize::MAX));
        if cached {
            ahead.extend_from_slice(&self.visited.borrow());
            if ahead.is_empty() {
                // Nothing between them depends on the earlier unit: the
                // merged unit can take the later one's place.
                pool.push(hi);
                self.window = (ahead, behind, pool);
                return;
            }
        }
        if hi - lo > 1 {
            let dirs: &[bool] = if cached { &[false] } else { &[true, false] };
            for &forward in dirs {
                let epoch = self.next_epoch();
                let mut scratch = self.scratch.borrow_mut();
                let (seen, work) = &mut *scratch;
                work.clear();
                let out = if forward { &mut ahead } else { &mut behind };
                let step = |m: NodeId, work: &mut Vec<NodeId>| {
                    let next: &[NodeId] = if forward {
                        self.users.of(m)
                    } else {
                        &self.g[m].operands
                    };
                    for &v in next {
                        let p = self.pos[v.0];
                        if p > lo && p < hi {
                            work.push(v);
                        }
                    }
                };
                self.for_members(if forward { first } else { last }, |m| step(m, work));
                while let Some(v) = work.pop() {
                    if seen[v.0] == epoch {
                        continue;
                    }
                    let u = self.unit(v);
                    out.push((self.pos[v.0], u));
                    self.for_members(u, |m| seen[m.0] = epoch);
                    self.for_members(u, |m| step(m, work));
                }
            }
        }
        pool.push(lo);
        pool.push(hi);
        pool.extend(ahead.iter().chain(behind.iter()).map(|e| e.0));
        pool.sort_unstable();
        ahead.sort_unstable_by_key(|e| e.0);
        behind.sort_unstable_by_key(|e| e.0);
        self.window = (ahead, behind, pool);
    }

    /// Second half of [`State::contract`], once `merged` is the contracted
    /// unit: the units behind keep their order and come first, then
    /// `merged`, then the units ahead in their order, on the positions the
    /// window used (one fewer unit: its last free position is dropped).
    /// Units behind only move down and units ahead only move up, so every
    /// edge that leaves the window still goes forward.
    fn renumber(&mut self, merged: Unit) {
        let (ahead, behind, pool) = std::mem::take(&mut self.window);
        for (i, &(_, u)) in behind.iter().enumerate() {
            self.set_pos(u, pool[i]);
            self.moved.push(u);
        }
        self.set_pos(merged, pool[behind.len()]);
        if let Unit::Stack(_) = merged {
            self.moved.push(merged);
        }
        let skip = pool.len() - ahead.len();
        for (i, &(_, u)) in ahead.iter().enumerate() {
            self.set_pos(u, pool[skip + i]);
            self.moved.push(u);
        }
        self.window = (ahead, behind, pool);
    }

    /// Edges of unit `u` that go backward in [`State::pos`]: a node on one,
    /// or `None`. (Positions shared by two units are caught by
    /// [`State::check_all`].)
    fn misordered(&self, u: Unit) -> Option<NodeId> {
        // A group that joined a stack later in the same rewrite.
        let u = match u {
            Unit::Group(c) if self.stack_of[c] != NONE => Unit::Stack(self.stack_of[c] as usize),
            u => u,
        };
        let p = self.unit_pos(u);
        let mut bad = None;
        self.for_members(u, |m| {
            if let Some(&o) = self.g[m].operands.iter().find(|o| self.pos[o.0] > p) {
                bad = Some(o);
            }
            if let Some(&v) = self.users.of(m).iter().find(|v| self.pos[v.0] < p) {
                bad = Some(v);
            }
        });
        bad
    }

    /// Checks that groups `a` and `b` may merge and returns the union.
    ///
    /// # Errors
    /// The [`Reason`] they may not.
    pub fn try_merge(&self, a: usize, b: usize) -> Result<FusionGroup, Reason> {
        match self.merge(a, b, true) {
            Ok(mut c) => {
                if c.space.is_empty() {
                    c.space = self.space_of(&c.nodes, a, b);
                }
                Ok(c)
            }
            Err(r) => Err(r.unwrap_or(Reason::Stacked)),
        }
    }

    /// [`State::try_merge`] for the rules: the union's `space` is filled in
    /// only when rewrites are described, and the reason only when `reason`
    /// is true (`Err(None)` otherwise).
    pub(crate) fn merge(
        &self,
        a: usize,
        b: usize,
        reason: bool,
    ) -> Result<FusionGroup, Option<Reason>> {
        self.accepted.set(NOT_ACCEPTED);
        if self.is_stacked(a) || self.is_stacked(b) {
            return Err(Some(Reason::Stacked));
        }
        let mut scratch = self.merge_scratch.borrow_mut();
        let mut union = Candidate {
            st: self,
            a,
            b,
            scratch: &mut scratch,
            via: None,
            onto: false,
        };
        let found = rules::check_merge(&mut union, &self.opts);
        let (via, onto) = (union.via, union.onto);
        let (kind, space_id, bound) = found.map_err(|refusal| match refusal {
            Refusal::TooManyNodes(n) => Some(Reason::TooManyNodes {
                n,
                limit: self.opts.max_nodes,
            }),
            Refusal::Cycle => reason.then(|| Reason::Cycle {
                via: via.map_or_else(String::new, |v| self.g[v].name.to_string()),
            }),
            Refusal::Invalid => reason.then(|| {
                match validate(&self.facts(), &scratch.0, &self.member_of(a, b)) {
                    Err(r) => r,
                    // Unreachable: the two validations agree.
                    Ok(_) => Reason::MatmulReduce,
                }
            }),
            Refusal::TooManyParams(n) => Some(Reason::TooManyParams {
                n,
                limit: self.opts.max_params,
            }),
        })?;
        let space = if self.opts.reasons {
            self.shapes.shape(space_id)
        } else {
            Vec::new()
        };
        self.accepted.set((a, b, space_id, bound as u32, onto));
        // The merged list becomes the group's; a spare list (the last
        // one a merge left) is the next scratch.
        let spare = self.spare.borrow_mut().pop().unwrap_or_default();
        let members = std::mem::replace(&mut scratch.0, spare);
        Ok(FusionGroup {
            kind,
            nodes: members,
            space,
        })
    }

    /// Membership of the union of groups `a` and `b`.
    fn member_of(&self, a: usize, b: usize) -> impl Fn(NodeId) -> bool + '_ {
        let (aa, bb) = (a as u32, b as u32);
        move |m: NodeId| {
            let o = self.owner[m.0];
            o == aa || o == bb
        }
    }

    /// Group `c` as [`legality::validate_union`] reads it.
    fn side(&self, c: usize) -> legality::Side<'_> {
        let cl = &self.groups[c];
        legality::Side {
            id: c as u32,
            kind: &cl.kind,
            nodes: &cl.nodes,
            space: (self.space_id[c] != NONE).then_some(self.space_id[c]),
        }
    }

    /// The space of the group `nodes`, made of groups `a` and `b` (empty if
    /// it is not a group).
    fn space_of(&self, nodes: &[NodeId], a: usize, b: usize) -> Vec<Dim> {
        let (aa, bb) = (a as u32, b as u32);
        let member = |m: NodeId| {
            let o = self.owner[m.0];
            o == aa || o == bb
        };
        let mut scratch = self.merge_scratch.borrow_mut();
        validate_fast(&self.facts(), &self.shapes, nodes, member, &mut scratch.1)
            .map(|(_, s)| self.shapes.shape(s))
            .unwrap_or_default()
    }

    /// [`count_params`] of a candidate group, with the visited marks of
    /// [`State::path_from`] instead of a list of seen operands.
    fn count_params<M: Fn(NodeId) -> bool>(&self, nodes: &[NodeId], member: M) -> usize {
        let epoch = self.next_epoch();
        let mut scratch = self.scratch.borrow_mut();
        count_params_marked(&self.facts(), nodes, member, &mut scratch.0, epoch)
    }

    /// An upper bound of the buffer parameters of the union of groups `x`
    /// and `y` ([`count_params`]), from `y`'s edges alone: `x`'s bound
    /// ([`State::params`]) corrected by exactly what the merge changes, so
    /// exact when `x`'s is. An operand of `y` outside the union is a new
    /// parameter unless `x` reads it too; a member of `x` that `y` reads
    /// (stored for `y`) stays stored only when it is an output or read
    /// outside the union; a member of `y` that `x` reads is one of `x`'s
    /// operands no longer; and a member of `y` is stored when it is an
    /// output or read outside the union.
    fn params_onto(&self, x: usize, y: usize) -> usize {
        let (xx, yy) = (x as u32, y as u32);
        let outside = |u: &NodeId| {
            let o = self.owner[u.0];
            o != xx && o != yy
        };
        let in_x = |u: &NodeId| self.owner[u.0] == xx;
        let epoch = self.next_epoch();
        let mut scratch = self.scratch.borrow_mut();
        let seen = &mut scratch.0;
        let (mut added, mut removed) = (0, 0);
        for &n in &self.groups[y].nodes {
            for &o in &self.g[n].operands {
                let oo = self.owner[o.0];
                if oo == yy || seen[o.0] == epoch {
                    continue;
                }
                seen[o.0] = epoch;
                let users = self.users.of(o);
                if oo == xx {
                    if !self.is_output[o.0] && !users.iter().any(outside) {
                        removed += 1;
                    }
                } else if !users.iter().any(in_x) {
                    added += 1;
                }
            }
            let users = self.users.of(n);
            if users.iter().any(in_x) {
                removed += 1;
            }
            if self.is_output[n.0] || users.iter().any(outside) {
                added += 1;
            }
        }
        // Every member removed was counted in `x`'s exact count, which
        // its bound is at least.
        self.params[x] as usize + added - removed
    }

    /// A fresh epoch for the visited marks in `scratch.0` (cleared when the
    /// counter wraps).
    fn next_epoch(&self) -> u32 {
        let epoch = self.epoch.get().wrapping_add(1);
        self.epoch.set(epoch);
        if epoch == 0 {
            self.scratch.borrow_mut().0.iter_mut().for_each(|s| *s = 0);
            self.epoch.set(1);
            return 1;
        }
        epoch
    }

    /// Applies `patch`; returns the group it created (merges) or `None`.
    fn apply(&mut self, patch: Patch) -> Option<usize> {
        match patch {
            Patch::Merge { a, b, merged } => {
                self.moved.clear();
                self.contract(Unit::Group(a), Unit::Group(b));
                let id = self.groups.len();
                for &n in &merged.nodes {
                    self.owner[n.0] = id as u32;
                }
                // Keep both member lists for later groups: this pass's
                // merges' and the next pass's singletons. (Every group
                // takes one and every merge gives two back, so a pass
                // leaves fewer lists than it found unless it made new
                // ones: one per group of its plan.)
                let spare = self.spare.get_mut();
                spare.push(std::mem::take(&mut self.groups[a].nodes));
                spare.push(std::mem::take(&mut self.groups[b].nodes));
                let (pa, pb, space, params, onto) = self.accepted.replace(NOT_ACCEPTED);
                let known = (pa, pb) == (a, b);
                if known && matches!(merged.kind, FusionKind::Reduce { .. }) {
                    let (_, classes, checked, _) = self.merge_scratch.get_mut();
                    let changed = if onto {
                        &checked[..]
                    } else {
                        &merged.nodes[..]
                    };
                    for &n in changed {
                        self.class_of[n.0] = classes[n.0];
                    }
                }
                self.groups.push(merged);
                self.stack_of.push(NONE);
                self.space_id.push(if known { space } else { NONE });
                let bound = self.params[a] + self.params[b];
                self.params
                    .push(if known { params.min(bound) } else { bound });
                self.renumber(Unit::Group(id));
                Some(id)
            }
            Patch::Stack { members } => {
                // The stack grows one group at a time, each a contraction.
                self.moved.clear();
                let s = self.stacks.len();
                self.stacks.push(Vec::with_capacity(members.len()));
                for &c in &members {
                    if self.stacks[s].is_empty() {
                        self.stacks[s].push(c);
                        self.stack_of[c] = s as u32;
                        self.moved.push(Unit::Stack(s));
                        continue;
                    }
                    self.contract(Unit::Stack(s), Unit::Group(c));
                    self.stacks[s].push(c);
                    self.stack_of[c] = s as u32;
                    self.renumber(Unit::Stack(s));
                }
                None
            }
        }
    }

    /// The consistency check run after every rewrite, on what it touched:
    /// the new group is sorted and owns exactly its members; a new stack
    /// holds live groups with no edge between them; and every edge of the
    /// units the rewrite renumbered (and of a new stack) still goes forward
    /// in the units' topological numbering. (The merged group was
    /// validated by [`State::try_merge`] in the same rewrite, whose search
    /// for a path between the two groups is exact: the merge creates no
    /// cycle between kernels. An edge between two stacked groups through
    /// other units would be a cycle through the stack.) Builds with debug
    /// assertions (the tests) also run [`State::check_all`], which
    /// re-validates every group and the whole order, after every rewrite.
    fn check(&self, rule: &'static str, created: Option<usize>) -> Result<(), FuseError> {
        let bad = |what: String| FuseError { rule, what };
        if let Some(c) = created {
            let cl = &self.groups[c];
            if cl.nodes.is_empty() || !cl.nodes.windows(2).all(|w| w[0] < w[1]) {
                return Err(bad(format!("group {c} is empty or not sorted")));
            }
            if let Some(n) = cl.nodes.iter().find(|n| self.owner[n.0] != c as u32) {
                return Err(bad(format!("node `{}` has a stale owner", self.g[*n].name)));
            }
        } else if let Some(members) = self.stacks.last() {
            let s = (self.stacks.len() - 1) as u32;
            for &a in members {
                let cl = &self.groups[a];
                if cl.nodes.is_empty() || self.stack_of[a] != s {
                    return Err(bad("a stack holds a dead or foreign group".into()));
                }
                let dependent = cl.nodes.iter().any(|&m| {
                    self.users.of(m).iter().any(|&u| {
                        let o = self.owner[u.0];
                        o != a as u32 && o != NONE && self.stack_of[o as usize] == s
                    })
                });
                if dependent {
                    return Err(bad("a stack holds dependent groups".into()));
                }
            }
        }
        for &u in &self.moved {
            if let Some(via) = self.misordered(u) {
                return Err(bad(format!(
                    "{u:?} is part of a cycle through `{}`",
                    self.g[via].name
                )));
            }
        }
        if cfg!(debug_assertions) {
            self.check_all(rule)?;
        }
        Ok(())
    }

    /// The whole-state check: ownership matches the groups, every live
    /// group is valid, stacks hold live groups, and the units are acyclic.
    fn check_all(&self, rule: &'static str) -> Result<(), FuseError> {
        let bad = |what: String| FuseError { rule, what };
        for (c, cl) in self.groups.iter().enumerate() {
            for &n in &cl.nodes {
                if self.owner[n.0] != c as u32 {
                    return Err(bad(format!("node `{}` has a stale owner", self.g[n].name)));
                }
            }
            if cl.nodes.is_empty() {
                continue;
            }
            let member = |m: NodeId| self.owner[m.0] == c as u32;
            let (kind, space) = validate(&self.facts(), &cl.nodes, &member)
                .map_err(|r| bad(format!("group {c} is invalid: {r}")))?;
            if kind != cl.kind || (!cl.space.is_empty() && space != cl.space) {
                return Err(bad(format!("group {c} has a stale kind or space")));
            }
        }
        for (i, &o) in self.owner.iter().enumerate() {
            if o != NONE && !self.groups[o as usize].nodes.contains(&NodeId(i)) {
                return Err(bad(format!(
                    "node `{}` is not in its group",
                    self.g[NodeId(i)].name
                )));
            }
        }
        for (s, members) in self.stacks.iter().enumerate() {
            for &c in members {
                if self.groups[c].nodes.is_empty() || self.stack_of[c] != s as u32 {
                    return Err(bad(format!("stack {s} holds a dead or foreign group")));
                }
            }
        }
        // The units' numbering: one position per unit, distinct between
        // units, increasing along every edge.
        let mut unit_at: std::collections::HashMap<u32, Unit> = Default::default();
        for i in 0..self.owner.len() {
            let (u, p) = (self.unit(NodeId(i)), self.pos[i]);
            if *unit_at.entry(p).or_insert(u) != u {
                return Err(bad(format!("two units share position {p}")));
            }
            for &v in self.users.of(NodeId(i)) {
                if self.unit(v) != u && self.pos[v.0] <= p {
                    return Err(bad(format!(
                        "`{}` is numbered before its operand `{}`: a cycle between kernels",
                        self.g[v].name,
                        self.g[NodeId(i)].name
                    )));
                }
            }
        }
        self.topo_order().map(|_| ()).map_err(bad)
    }

    /// Units in an order respecting every edge (ties broken by smallest node
    /// id), or a description of the cycle.
    ///
    /// That order is Kahn's algorithm taking the ready unit of smallest
    /// first node at every step. Found here without in-degrees or a heap:
    /// the units are visited in order of their first nodes, and one with a
    /// member operand in a unit not yet taken waits (merged groups and
    /// stacks have such edges to units of later first nodes) until the
    /// unit it waits on is taken. Waiting units come before every unit not
    /// yet visited, so the first of them that is ready is the smallest
    /// ready unit; otherwise it is the next visited unit that is.
    fn topo_order(&self) -> Result<Vec<Unit>, String> {
        let n = self.g.nodes().len();
        let mut scratch = self.order_scratch.borrow_mut();
        let (first, taken, waiting) = &mut *scratch;
        // Every unit is known by its first (smallest) node, which orders
        // the ties: the first node of every node's unit.
        first.clear();
        first.resize(n, NONE);
        let mut units = 0;
        for i in 0..n {
            if first[i] == NONE {
                self.for_members(self.unit(NodeId(i)), |m| first[m.0] = i as u32);
                units += 1;
            }
        }
        taken.clear();
        taken.resize(n, false);
        // The first node of a unit not yet taken that unit `f` reads from,
        // or `None` when `f` is ready.
        let blocker = |f: u32, first: &[u32], taken: &[bool]| {
            // Stops at the first such operand.
            let among = |nodes: &[NodeId]| {
                nodes.iter().find_map(|&m| {
                    self.g[m]
                        .operands
                        .iter()
                        .map(|o| first[o.0])
                        .find(|&s| s != f && !taken[s as usize])
                })
            };
            match self.unit(NodeId(f as usize)) {
                Unit::Node(n) => among(&[n]),
                Unit::Group(c) => among(&self.groups[c].nodes),
                Unit::Stack(s) => self.stacks[s]
                    .iter()
                    .find_map(|&c| among(&self.groups[c].nodes)),
            }
        };
        // Units visited but not ready, ascending, with the unit each waits on.
        waiting.clear();
        let mut order = Vec::with_capacity(units);
        let mut next = 0;
        loop {
            let mut ready = None;
            for k in 0..waiting.len() {
                let (f, on) = waiting[k];
                if taken[on as usize] {
                    match blocker(f, first, taken) {
                        None => {
                            waiting.remove(k);
                            ready = Some(f);
                            break;
                        }
                        Some(b) => waiting[k].1 = b,
                    }
                }
            }
            while ready.is_none() && next < n {
                let f = next as u32;
                next += 1;
                if first[f as usize] != f {
                    continue;
                }
                match blocker(f, first, taken) {
                    None => ready = Some(f),
                    Some(b) => waiting.push((f, b)),
                }
            }
            let Some(f) = ready else { break };
            taken[f as usize] = true;
            order.push(self.unit(NodeId(f as usize)));
        }
        if order.len() != units {
            return Err("the kernels' dependences form a cycle".into());
        }
        Ok(order)
    }
}

/// A candidate merge of groups `a` and `b` of a [`State`], as
/// [`rules::check_merge`] asks about it.
struct Candidate<'s, 'g> {
    st: &'s State<'g>,
    a: usize,
    b: usize,
    /// [`State::merge`]'s scratch: the union's members (once validated)
    /// and its classes.
    scratch: &'s mut MergeScratch,
    /// A node on the path that closes a cycle, once found.
    via: Option<NodeId>,
    /// Whether the union was validated onto one of the groups.
    onto: bool,
}

impl Candidate<'_, '_> {
    /// The larger group first (the one validated onto).
    fn larger_first(&self) -> (usize, usize) {
        let cl = |c: usize| self.st.groups[c].nodes.len();
        if cl(self.a) >= cl(self.b) {
            (self.a, self.b)
        } else {
            (self.b, self.a)
        }
    }
}

impl rules::Union for Candidate<'_, '_> {
    fn size(&self) -> usize {
        self.st.groups[self.a].nodes.len() + self.st.groups[self.b].nodes.len()
    }

    fn closes_cycle(&mut self) -> bool {
        self.via = self.st.path_between(self.a, self.b, false);
        self.via.is_some()
    }

    fn validate(&mut self) -> Option<(FusionKind, u32)> {
        let (st, a, b) = (self.st, self.a, self.b);
        let (ca, cb) = (&st.groups[a].nodes, &st.groups[b].nodes);
        let (nodes, classes, checked, queue) = &mut *self.scratch;
        // Merge the two ascending member lists.
        let n = ca.len() + cb.len();
        nodes.clear();
        if nodes.capacity() < n {
            // Room to grow: groups mostly grow one neighbour at a time.
            *nodes = Vec::with_capacity(n.next_power_of_two());
        }
        let (mut i, mut j) = (0, 0);
        while i < ca.len() && j < cb.len() {
            if ca[i] < cb[j] {
                nodes.push(ca[i]);
                i += 1;
            } else {
                nodes.push(cb[j]);
                j += 1;
            }
        }
        nodes.extend_from_slice(&ca[i..]);
        nodes.extend_from_slice(&cb[j..]);
        let epoch = st.next_epoch();
        let mut marks = st.scratch.borrow_mut();
        let mut sc = legality::Onto {
            classes,
            mark: &mut marks.0,
            epoch,
            checked,
            queue,
        };
        let sides = (st.side(a), st.side(b));
        let facts = st.facts();
        let member = st.member_of(a, b);
        let (kind, space, onto) = validate_union(
            &facts,
            &st.shapes,
            nodes,
            member,
            &st.owner,
            sides,
            &st.class_of,
            &mut sc,
        )?;
        self.onto = onto;
        Some((kind, space))
    }

    fn param_bound(&self) -> usize {
        (self.st.params[self.a] + self.st.params[self.b]) as usize
    }

    /// The larger part's bound corrected from the smaller part's edges
    /// ([`State::params_onto`]), then the count.
    fn tighter_params(&mut self, step: usize) -> Option<usize> {
        let st = self.st;
        let nodes = &self.scratch.0;
        match step {
            1 => {
                let (x, y) = self.larger_first();
                let bound = st.params_onto(x, y);
                debug_assert!(bound >= st.count_params(nodes, st.member_of(x, y)));
                Some(bound)
            }
            2 => Some(st.count_params(nodes, st.member_of(self.a, self.b))),
            _ => None,
        }
    }
}

/// [`count_params`] with the operands seen marked `epoch` in `seen` (an
/// entry per graph node, none of them `epoch` yet) instead of a list.
pub(crate) fn count_params_marked(
    facts: &Facts<'_>,
    nodes: &[NodeId],
    member: impl Fn(NodeId) -> bool,
    seen: &mut [u32],
    epoch: u32,
) -> usize {
    let mut count = 0;
    for &n in nodes {
        for &o in &facts.graph[n].operands {
            if !member(o) && seen[o.0] != epoch {
                seen[o.0] = epoch;
                count += 1;
            }
        }
        // Stored: a graph output, or read outside the group
        // ([`Facts::materialized`]).
        if facts.materialized(n, &member) {
            count += 1;
        }
    }
    count
}

/// Distinct buffers a group reads (external operands) plus the values it
/// stores.
pub fn count_params(facts: &Facts<'_>, nodes: &[NodeId], member: &dyn Fn(NodeId) -> bool) -> usize {
    let mut ext: Vec<NodeId> = Vec::new();
    let mut stored = 0;
    for &n in nodes {
        for &o in &facts.graph[n].operands {
            if !member(o) && !ext.contains(&o) {
                ext.push(o);
            }
        }
        if facts.materialized(n, member) {
            stored += 1;
        }
    }
    ext.len() + stored
}

/// The fuser's result: groups, stacks and an order of units.
#[derive(Clone, Debug)]
pub struct FusionPlan {
    /// Fusion groups (live only), indexed by [`Unit::Group`].
    pub groups: Vec<FusionGroup>,
    /// Group of each graph node (`None` for data, view and opaque nodes).
    pub owner: Vec<Option<usize>>,
    /// Parallel stacks: groups launched together.
    pub stacks: Vec<Vec<usize>>,
    /// Every unit, in an order respecting the dependences.
    pub order: Vec<Unit>,
    /// Rejected candidates between groups that stayed apart (the last
    /// reason per pair of groups; empty unless [`FuseOptions::reasons`]).
    pub rejections: Vec<Rejection>,
    /// Applied rewrites: rule and a description (descriptions are empty
    /// unless [`FuseOptions::reasons`]).
    pub applied: Vec<(&'static str, String)>,
    /// Role of every node.
    pub roles: Vec<Role>,
    /// Consumers of every node.
    pub users: Users,
    /// Whether each node is a graph output.
    pub is_output: Vec<bool>,
    /// Store layouts: a group value read only through a transpose is stored
    /// in the transposed order (`Some(perm)`), so the transpose is dense and
    /// a reshape after it needs no copy kernel (e.g. attention heads merged
    /// back into the hidden axis).
    pub layouts: Vec<Option<Vec<usize>>>,
    /// The options the plan was made with.
    pub options: FuseOptions,
}

impl FusionPlan {
    /// Runs the fusion pass on `graph` (composites decomposed): the rules
    /// of [`pattern::rules`] to a fixed point, checking consistency after
    /// every rewrite.
    ///
    /// # Errors
    /// [`FuseError`] if a rewrite broke the consistency check (a bug in a
    /// rule; the message names it).
    pub fn new(graph: &Graph, opts: &FuseOptions) -> Result<FusionPlan, FuseError> {
        Self::with_composites(graph, opts, &[])
    }

    /// [`FusionPlan::new`], starting from one group per decomposed
    /// composite (`composites`: the node ranges of
    /// [`dvm_graph::decompose_with_spans`]) instead of one per operator.
    /// A softmax or a norm always forms one reduce group, so the pass need
    /// not rediscover it operator by operator; a range that does not form a
    /// group (beyond [`FuseOptions::max_nodes`], a shape not provably
    /// equal) starts as single operators. Each one taken is recorded as a
    /// `composite` rewrite.
    ///
    /// # Errors
    /// As [`FusionPlan::new`].
    pub fn with_composites(
        graph: &Graph,
        opts: &FuseOptions,
        composites: &[Range<usize>],
    ) -> Result<FusionPlan, FuseError> {
        Self::with_scratch(graph, opts, composites, &mut FuseScratch::default())
    }

    /// The eager API's decision over `recorded`, a window whose composites
    /// are not decomposed: the sweep over its operators, each softmax,
    /// norm and mean one unit ([`role_of_recorded`]), which finds the
    /// groups [`FusionPlan::with_scratch`] finds with the sweep on its
    /// decomposition ([`FuseOptions::sweep`]). Map it onto the
    /// decomposition with [`sweep::Decided::expand`].
    ///
    /// `None` when it cannot decide over the operators: without
    /// [`FuseOptions::sweep`] or with [`FuseOptions::reasons`], when the
    /// options do not seed composites or do not fuse, for a mean over
    /// several axes or a composite over a limit on its own, or for more
    /// than [`sweep::MAX_UNITS`] units. Decide on the decomposition then.
    ///
    /// # Errors
    /// A [`FuseError`] when the final groups form a cycle (a bug).
    pub fn decide_recorded(
        recorded: &Graph,
        opts: &FuseOptions,
        scratch: &mut FuseScratch,
    ) -> Option<Result<sweep::Decided, FuseError>> {
        if !opts.sweep || opts.reasons {
            return None;
        }
        sweep::decide_recorded(recorded, opts, &mut scratch.sweep)
    }

    /// [`FusionPlan::with_composites`] in the working memory of earlier
    /// passes, which it leaves in `scratch` for the next one. The plan is
    /// the same.
    ///
    /// # Errors
    /// As [`FusionPlan::new`] (`scratch` is then left empty).
    pub fn with_scratch(
        graph: &Graph,
        opts: &FuseOptions,
        composites: &[Range<usize>],
        scratch: &mut FuseScratch,
    ) -> Result<FusionPlan, FuseError> {
        if opts.sweep && !opts.reasons && (opts.fuse || opts.stack) {
            if let Some(plan) = sweep::plan(graph, opts, composites, &mut scratch.sweep) {
                return plan;
            }
        }
        let buffers = scratch.buffers.take().unwrap_or_default();
        let mut st = State::with_buffers(graph, *opts, composites, buffers);
        let mut log = Log {
            keep: opts.reasons,
            rejections: Vec::new(),
        };
        let mut applied = Vec::with_capacity(graph.nodes().len());
        for &c in &st.seeded {
            let text = if opts.reasons {
                let cl = &st.groups[c];
                let space = st.shapes.shape(st.space_id[c]);
                format!(
                    "{{{}}} → {} over {}",
                    names_of(&st, c),
                    cl.kind.describe(),
                    ShapeDisplay(&space)
                )
            } else {
                String::new()
            };
            applied.push(("composite", text));
        }
        if cfg!(debug_assertions) && !st.seeded.is_empty() {
            st.check_all("composite")?;
        }
        let mut rules = scratch.rules(opts);
        let mut edges = Vec::new();
        // Every patch removes a group or stacks some: the loop terminates;
        // the bound is a second line of defence.
        let limit = 4 * graph.nodes().len() + 16;
        for _ in 0..limit {
            let mut patched = false;
            for rule in rules.iter_mut() {
                if let Some(p) = rule.next(&st, &mut log) {
                    let name = rule.name();
                    let text = if opts.reasons {
                        describe(&st, &p)
                    } else {
                        String::new()
                    };
                    let created = st.apply(p);
                    st.check(name, created)?;
                    if let Some(c) = created {
                        pattern::neighbour_edges(&mut st, c, &mut edges);
                        for r in rules.iter_mut() {
                            r.notify(&st, c, &edges);
                        }
                    }
                    applied.push((name, text));
                    patched = true;
                    break;
                }
            }
            if !patched {
                break;
            }
        }
        let (plan, buffers) = Self::finish(st, log, applied)?;
        scratch.buffers = Some(buffers);
        scratch.rules = Some((rule_key(opts), rules));
        Ok(plan)
    }

    /// One group per operator, no stacks (`--no-fuse`).
    pub fn unfused(graph: &Graph) -> FusionPlan {
        let st = State::new(graph, FuseOptions::off(), &[]);
        let log = Log::default();
        match Self::finish(st, log, Vec::new()) {
            Ok((p, _)) => p,
            // Singleton groups cannot form a cycle; keep a total function.
            Err(_) => FusionPlan {
                groups: Vec::new(),
                owner: vec![None; graph.nodes().len()],
                stacks: Vec::new(),
                order: (0..graph.nodes().len())
                    .map(|i| Unit::Node(NodeId(i)))
                    .collect(),
                rejections: Vec::new(),
                applied: Vec::new(),
                roles: vec![Role::Opaque; graph.nodes().len()],
                users: Users::new(graph),
                is_output: vec![false; graph.nodes().len()],
                layouts: vec![None; graph.nodes().len()],
                options: FuseOptions::off(),
            },
        }
    }

    /// Records, for `dvm explain`, why neighbouring groups that no rule
    /// proposed to merge (e.g. a matmul feeding a reduction) cannot merge.
    fn reject_neighbours(st: &State<'_>, log: &mut Log) {
        let seen: HashSet<(u32, u32)> = log
            .rejections
            .iter()
            .map(|r| (st.owner[r.a.0], st.owner[r.b.0]))
            .collect();
        let mut extra: Vec<Rejection> = Vec::new();
        // The pairs already asked about: the state does not change
        // here, so a pair's answer does not either.
        let mut asked: IdSet<(u32, u32)> = IdSet::default();
        for p in 0..st.owner.len() {
            let a = st.owner[p];
            if a == NONE {
                continue;
            }
            for &c in st.users.of(NodeId(p)) {
                let b = st.owner[c.0];
                if b == NONE || a == b || seen.contains(&(a, b)) || !asked.insert((a, b)) {
                    continue;
                }
                if let Err(reason) = st.try_merge(a as usize, b as usize) {
                    extra.push(Rejection {
                        rule: "neighbours",
                        a: NodeId(p),
                        b: c,
                        via: None,
                        reason,
                    });
                }
            }
        }
        log.rejections.extend(extra);
    }

    /// The plan of the pass that left `st`, and `st`'s buffers for the next.
    fn finish(
        mut st: State<'_>,
        mut log: Log,
        applied: Vec<(&'static str, String)>,
    ) -> Result<(FusionPlan, Buffers), FuseError> {
        if st.opts.fuse && st.opts.reasons {
            Self::reject_neighbours(&st, &mut log);
        }
        let order = st.topo_order().map_err(|what| FuseError {
            rule: "final",
            what,
        })?;
        // The spaces of the groups that stay.
        for c in 0..st.groups.len() {
            let cl = &st.groups[c];
            if cl.nodes.is_empty() || !cl.space.is_empty() {
                continue;
            }
            let space = match st.space_id[c] {
                NONE => st.space_of(&cl.nodes, c, c),
                id => st.shapes.shape(id),
            };
            st.groups[c].space = space;
        }
        // Compact: live groups numbered in order of their first unit.
        let mut remap = vec![usize::MAX; st.groups.len()];
        let mut groups = Vec::new();
        let mut stacks: Vec<Vec<usize>> = Vec::new();
        let mut stack_remap = vec![usize::MAX; st.stacks.len()];
        let mut live = std::mem::take(&mut st.groups);
        let mut take = |c: usize, remap: &mut Vec<usize>, groups: &mut Vec<FusionGroup>| {
            remap[c] = groups.len();
            groups.push(std::mem::replace(
                &mut live[c],
                FusionGroup {
                    kind: FusionKind::Elementwise,
                    nodes: Vec::new(),
                    space: Vec::new(),
                },
            ));
        };
        for u in &order {
            match *u {
                Unit::Group(c) => take(c, &mut remap, &mut groups),
                Unit::Stack(s) => {
                    for &c in &st.stacks[s] {
                        take(c, &mut remap, &mut groups);
                    }
                    stack_remap[s] = stacks.len();
                    stacks.push(st.stacks[s].iter().map(|&c| remap[c]).collect());
                }
                Unit::Node(_) => {}
            }
        }
        let order: Vec<Unit> = order
            .into_iter()
            .map(|u| match u {
                Unit::Group(c) => Unit::Group(remap[c]),
                Unit::Stack(s) => Unit::Stack(stack_remap[s]),
                n => n,
            })
            .collect();
        let owner: Vec<Option<usize>> = st
            .owner
            .iter()
            .map(|&o| (o != NONE).then(|| remap[o as usize]))
            .collect();
        // Rejections between groups that stayed apart, last reason per pair.
        let mut rejections: Vec<Rejection> = Vec::new();
        let mut pairs: IdSet<(Option<usize>, Option<usize>)> = IdSet::default();
        for r in log.rejections.into_iter().rev() {
            let (ua, ub) = (owner[r.a.0], owner[r.b.0]);
            if ua != ub && pairs.insert((ua, ub)) {
                rejections.push(r);
            }
        }
        rejections.reverse();
        let layouts = store_layouts(st.g, &st.users, &st.is_output, st.opts.fuse, |m| {
            st.owner[m.0] != NONE
        });
        live.clear();
        let buffers = Buffers {
            owner: st.owner,
            groups: live,
            stack_of: st.stack_of,
            stacks: st.stacks,
            scratch: st.scratch.into_inner(),
            merge_scratch: st.merge_scratch.into_inner(),
            class_of: st.class_of,
            spare: st.spare.into_inner(),
            space_id: st.space_id,
            params: st.params,
            pos: st.pos,
            window: st.window,
            moved: st.moved,
            visited: st.visited.into_inner(),
            seeded: st.seeded,
            interior: st.interior,
            order_scratch: st.order_scratch.into_inner(),
            shapes: st.shapes.into_buffers(),
        };
        let plan = FusionPlan {
            groups,
            owner,
            stacks,
            order,
            rejections,
            applied,
            roles: st.roles,
            users: st.users,
            layouts,
            is_output: st.is_output,
            options: st.opts,
        };
        Ok((plan, buffers))
    }

    /// The facts of `graph` (the graph this plan was made for).
    pub fn facts<'a>(&'a self, graph: &'a Graph) -> Facts<'a> {
        Facts {
            graph,
            users: &self.users,
            is_output: &self.is_output,
            roles: &self.roles,
        }
    }

    /// Checks the plan against `graph`, the graph it was made for: every
    /// node's group holds it and every group's members are owned by it,
    /// each group is valid ([`legality::validate`]) with its kind and
    /// space, within the node and parameter limits, the groups of a stack
    /// read nothing from each other, and the order lists every unit once,
    /// each after the units it reads from.
    ///
    /// # Errors
    /// The first broken invariant, described.
    pub fn verify(&self, graph: &Graph) -> Result<(), String> {
        let n = graph.nodes().len();
        if self.owner.len() != n {
            return Err(format!("{} owners for {n} nodes", self.owner.len()));
        }
        let facts = self.facts(graph);
        let name = |m: NodeId| graph[m].name.to_string();
        for (c, cl) in self.groups.iter().enumerate() {
            if cl.nodes.is_empty() || !cl.nodes.windows(2).all(|w| w[0] < w[1]) {
                return Err(format!("group {c} is empty or not sorted"));
            }
            if cl.nodes.last().is_some_and(|m| m.0 >= n) {
                return Err(format!("group {c} holds a node the graph does not have"));
            }
            if let Some(&m) = cl.nodes.iter().find(|m| self.owner[m.0] != Some(c)) {
                return Err(format!(
                    "node `{}` is in group {c} but not owned by it",
                    name(m)
                ));
            }
            let member = |m: NodeId| self.owner[m.0] == Some(c);
            let (kind, space) = validate(&facts, &cl.nodes, &member)
                .map_err(|r| format!("group {c} is invalid: {r}"))?;
            if kind != cl.kind || space != cl.space {
                return Err(format!("group {c} has a stale kind or space"));
            }
            if self.options.fuse && cl.nodes.len() > self.options.max_nodes {
                return Err(format!("group {c} has {} nodes", cl.nodes.len()));
            }
            let params = count_params(&facts, &cl.nodes, &member);
            if params > self.options.max_params {
                return Err(format!("group {c} has {params} parameters"));
            }
        }
        for (i, o) in self.owner.iter().enumerate() {
            if let Some(c) = *o {
                if self
                    .groups
                    .get(c)
                    .is_none_or(|cl| !cl.nodes.contains(&NodeId(i)))
                {
                    return Err(format!("node `{}` is not in its group", name(NodeId(i))));
                }
            }
        }
        let mut stack_of = vec![usize::MAX; self.groups.len()];
        for (s, members) in self.stacks.iter().enumerate() {
            for &c in members {
                match stack_of.get_mut(c) {
                    Some(x) if *x == usize::MAX => *x = s,
                    _ => return Err(format!("stack {s} holds group {c} twice or a foreign one")),
                }
            }
        }
        let unit = |m: usize| match self.owner[m] {
            Some(c) if stack_of[c] != usize::MAX => Unit::Stack(stack_of[c]),
            Some(c) => Unit::Group(c),
            None => Unit::Node(NodeId(m)),
        };
        let mut pos: HashMap<Unit, usize> = HashMap::with_capacity(self.order.len());
        for (k, &u) in self.order.iter().enumerate() {
            if pos.insert(u, k).is_some() {
                return Err(format!("{u:?} is listed twice in the order"));
            }
        }
        for m in 0..n {
            let u = unit(m);
            let Some(&pu) = pos.get(&u) else {
                return Err(format!("the order misses {u:?}"));
            };
            for &o in &graph[NodeId(m)].operands {
                let v = unit(o.0);
                if v == u {
                    let (a, b) = (self.owner[o.0], self.owner[m]);
                    if matches!(u, Unit::Stack(_)) && a != b {
                        return Err(format!(
                            "`{}` reads `{}` within one stack",
                            name(NodeId(m)),
                            name(o)
                        ));
                    }
                } else if pos.get(&v).is_none_or(|&pv| pv >= pu) {
                    return Err(format!(
                        "`{}` is ordered before its operand `{}`",
                        name(NodeId(m)),
                        name(o)
                    ));
                }
            }
        }
        if pos.len() != self.order.len()
            || self.order.iter().any(|u| match *u {
                Unit::Node(m) => m.0 >= n || unit(m.0) != *u,
                Unit::Group(c) => c >= self.groups.len() || stack_of[c] != usize::MAX,
                Unit::Stack(s) => s >= self.stacks.len(),
            })
        {
            return Err("the order lists a unit that is not one".into());
        }
        Ok(())
    }

    /// Groups that compute something (one kernel each when nothing is split).
    pub fn kernel_groups(&self) -> usize {
        self.groups.len()
    }
}

/// The transposed store layouts (see [`FusionPlan::layouts`]): a group
/// member that is not a graph output and whose only consumer is a transpose
/// whose result is not dense otherwise.
fn store_layouts(
    g: &Graph,
    users: &Users,
    is_output: &[bool],
    fuse: bool,
    in_group: impl Fn(NodeId) -> bool,
) -> Vec<Option<Vec<usize>>> {
    let n = g.nodes().len();
    let mut out = vec![None; n];
    if !fuse {
        return out;
    }
    // From the transposes (few) to the value each reads: its only user.
    for (t, node) in g.nodes().iter().enumerate() {
        let dvm_graph::Op::Transpose { perm } = &node.op else {
            continue;
        };
        let Some(&id) = node.operands.first() else {
            continue;
        };
        if !in_group(id) || is_output[id.0] || users.of(id) != [NodeId(t)] {
            continue;
        }
        let identity = perm.iter().enumerate().all(|(k, &p)| k == p);
        if !identity && perm.len() == g[id].shape.len() {
            out[id.0] = Some(perm.clone());
        }
    }
    out
}

/// The member names of group `c`, comma-separated.
fn names_of(st: &State<'_>, c: usize) -> String {
    st.groups[c]
        .nodes
        .iter()
        .map(|n| st.g[*n].name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn describe(st: &State<'_>, p: &Patch) -> String {
    let names = |c: usize| names_of(st, c);
    match p {
        Patch::Merge { a, b, merged } => format!(
            "{{{}}} + {{{}}} → {} over {}",
            names(*a),
            names(*b),
            merged.kind.describe(),
            ShapeDisplay(&merged.space)
        ),
        Patch::Stack { members } => format!(
            "parallel stack of {}",
            members
                .iter()
                .map(|&c| format!("{{{}}}", names(c)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

#[cfg(test)]
pub(crate) mod tests;

impl FusionPlan {
    /// The plan's groups (kind, iteration space, member names), its stacks
    /// and its unit order, one line each: a stable text for comparing the
    /// plans of two versions of the pass, or two ways of deciding one.
    pub fn outline(&self, g: &Graph) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        for cl in &self.groups {
            let names: Vec<&str> = cl.nodes.iter().map(|&n| g[n].name.as_str()).collect();
            let _ = writeln!(
                s,
                "  {} {} {:?}",
                cl.kind.describe(),
                ShapeDisplay(&cl.space),
                names
            );
        }
        let _ = writeln!(s, "  stacks {:?}", self.stacks);
        let _ = writeln!(s, "  order {:?}", self.order);
        s
    }
}
