//! Symbolic legality: when a set of graph nodes may form one kernel group,
//! for every binding of the graph's symbols.
//!
//! Shapes are compared with the graph's [`SymbolScope`]: two dimensions are
//! the same when they are the same canonical expression or the scope proves
//! them equal under its ranges and recorded equalities
//! ([`SymbolScope::prove_eq`]). "Equal at the shape at hand" is never enough:
//! `S` against `T`, or `S` against `min(S, 8)`, do not fuse even when the
//! current binding makes them equal.
//!
//! [`validate`] decides whether a node set is a well-formed group and derives
//! its kind and iteration space; the fusion rules call it on every candidate
//! merge, and the consistency check calls it on every group a rewrite made.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasherDefault;

use dvm_graph::{Graph, NodeId, Op, ShapeDisplay};
use dvm_sym::{Dim, SymbolScope};

use super::{FusionKind, IdHasher, Role};

/// The operands of a non-reduce member of a reduce group, by class: whether
/// any is full-size, whether every reduced one kept its axis, and whether
/// the reduced ones disagree on how they broadcast back.
#[derive(Clone, Copy, Debug)]
struct OperandMix {
    full: bool,
    reduced: Option<bool>,
    mixed: bool,
}

impl OperandMix {
    /// Classifies `operands` (`class` gives each one's class in the group).
    fn of(operands: &[NodeId], axis: usize, class: impl Fn(NodeId) -> Class) -> OperandMix {
        let mut m = OperandMix {
            full: false,
            reduced: None,
            mixed: false,
        };
        for &o in operands {
            match class(o) {
                Class::Full => m.full = true,
                Class::Reduced(k) => {
                    m.mixed |= m
                        .reduced
                        .is_some_and(|r| realigns(r, axis) != realigns(k, axis));
                    m.reduced = Some(m.reduced.map_or(k, |r| r && k));
                }
            }
        }
        m
    }

    /// Whether the member cannot be computed in the group: reduced operands
    /// that broadcast back differently, or, for a full-size result, one
    /// that does not broadcast back along the axis at all.
    fn drops_axis(&self, axis: usize) -> bool {
        self.mixed || (self.full && self.reduced.is_some_and(|k| !realigns(k, axis)))
    }
}

/// Whether a [`Role::Composite`] with `operands` (the first full-size)
/// cannot be computed in a reduce group along `axis`: its primitives meet
/// each weight (the operands after the first) with a full-size value, one
/// element-wise node each, as [`OperandMix`] judges them.
fn composite_drops_axis(operands: &[NodeId], axis: usize, class: impl Fn(NodeId) -> Class) -> bool {
    operands[1..]
        .iter()
        .any(|&w| OperandMix::of(&[operands[0], w], axis, &class).drops_axis(axis))
}

/// The class of member `o` in `classes` (sorted by node); full-size when
/// it has none yet.
fn class_of(classes: &[(NodeId, Class)], o: NodeId) -> Class {
    classes
        .binary_search_by_key(&o, |(m, _)| *m)
        .map_or(Class::Full, |i| classes[i].1)
}

/// Whether a value reduced along `axis` broadcasts back along it: its axis
/// is kept, or dropped from the front (NumPy's right alignment re-inserts a
/// leading axis).
fn realigns(keepdims: bool, axis: usize) -> bool {
    keepdims || axis == 0
}

/// Why a candidate fusion was rejected (printed by `dvm explain`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Two shapes that must be equal are not provably equal for every
    /// binding (they may be equal for some).
    SpaceMismatch {
        /// The node whose shape does not fit.
        node: String,
        /// Its shape.
        shape: String,
        /// The group's iteration space.
        space: String,
        /// The first dimension pair that is not provably equal.
        dims: (String, String),
    },
    /// A node that must be stored would be computed over a larger space
    /// than its own shape (several tiles would store the same elements).
    BroadcastStore {
        /// The node.
        node: String,
        /// Its shape.
        shape: String,
        /// The group's iteration space.
        space: String,
    },
    /// Two reductions fold different axes or spaces.
    AxisMismatch {
        /// The reduction that does not fit.
        node: String,
        /// Its axis.
        axis: usize,
        /// The group's axis.
        group_axis: usize,
    },
    /// A reduction of a value that is already reduced along the axis.
    ReduceOfReduced {
        /// The reduction.
        node: String,
    },
    /// A reduced value without its kept axis meets full values (NumPy
    /// broadcasting would align it with a different axis).
    DroppedAxis {
        /// The node.
        node: String,
    },
    /// A matmul and a reduction in one group.
    MatmulReduce,
    /// Two matmuls in one group.
    TwoMatmuls,
    /// A node of the group feeds the matmul (matmul groups have epilogues only).
    MatmulPrologue {
        /// The node.
        node: String,
    },
    /// Merging would create a cycle between kernels.
    Cycle {
        /// A node on the path that leaves the group and comes back.
        via: String,
    },
    /// The group would exceed the node limit.
    TooManyNodes {
        /// Nodes.
        n: usize,
        /// Limit.
        limit: usize,
    },
    /// The group would exceed the kernel parameter limit.
    TooManyParams {
        /// Parameters.
        n: usize,
        /// Limit.
        limit: usize,
    },
    /// A member of a stack (stacked groups are not merged further).
    Stacked,
    /// A node that is not an element-wise, reduce or matmul operator.
    NotFusible {
        /// The node.
        node: String,
        /// Its operator.
        op: &'static str,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::SpaceMismatch {
                node,
                shape,
                space,
                dims: (a, b),
            } => write!(
                f,
                "`{node}` {shape} does not fit the space {space}: `{a}` and `{b}` are not provably equal for every binding"
            ),
            Reason::BroadcastStore { node, shape, space } => write!(
                f,
                "`{node}` {shape} is stored but would be computed over the larger space {space}"
            ),
            Reason::AxisMismatch {
                node,
                axis,
                group_axis,
            } => write!(
                f,
                "`{node}` reduces axis {axis} of a different space than the group's axis {group_axis}"
            ),
            Reason::ReduceOfReduced { node } => {
                write!(f, "`{node}` reduces a value already reduced in the group")
            }
            Reason::DroppedAxis { node } => write!(
                f,
                "`{node}` mixes a reduced value without keepdims with values of another layout"
            ),
            Reason::MatmulReduce => f.write_str("a matmul and a reduction cannot share a kernel"),
            Reason::TwoMatmuls => f.write_str("one matmul per kernel"),
            Reason::MatmulPrologue { node } => write!(
                f,
                "`{node}` would feed the matmul (matmul kernels take epilogues only)"
            ),
            Reason::Cycle { via } => {
                write!(f, "merging would create a cycle between kernels through `{via}`")
            }
            Reason::TooManyNodes { n, limit } => {
                write!(f, "the kernel would have {n} nodes (limit {limit})")
            }
            Reason::TooManyParams { n, limit } => write!(
                f,
                "the kernel would need {n} buffer parameters (limit {limit})"
            ),
            Reason::Stacked => f.write_str("already stacked with other kernels"),
            Reason::NotFusible { node, op } => {
                write!(f, "`{node}` ({op}) is not fused: groups stop at views and data movement")
            }
        }
    }
}

/// True when `a == b` for every binding the scope allows.
pub fn dim_eq(scope: &SymbolScope, a: &Dim, b: &Dim) -> bool {
    if a == b {
        return true;
    }
    if a.is_const() && b.is_const() {
        return false;
    }
    scope.prove_eq(a, b)
}

/// True when `d` is provably 1.
fn is_one(scope: &SymbolScope, d: &Dim) -> bool {
    match d.as_const() {
        Some(v) => v == 1,
        None => scope.prove_eq(d, &Dim::ONE),
    }
}

/// Checks that `shape` equals `space` for every binding; returns the first
/// pair of dimensions that is not provably equal.
pub fn same_shape(
    scope: &SymbolScope,
    shape: &[Dim],
    space: &[Dim],
) -> Result<(), (String, String)> {
    if shape.len() != space.len() {
        return Err((
            format!("rank {}", shape.len()),
            format!("rank {}", space.len()),
        ));
    }
    for (a, b) in shape.iter().zip(space) {
        if !dim_eq(scope, a, b) {
            return Err((a.to_string(), b.to_string()));
        }
    }
    Ok(())
}

/// Checks that `shape` broadcasts (NumPy rules, right-aligned) into `space`
/// for every binding: each dimension is provably 1 or provably equal to the
/// space's.
pub fn broadcasts_into(
    scope: &SymbolScope,
    shape: &[Dim],
    space: &[Dim],
) -> Result<(), (String, String)> {
    if shape.len() > space.len() {
        return Err((
            format!("rank {}", shape.len()),
            format!("rank {}", space.len()),
        ));
    }
    let lead = space.len() - shape.len();
    for (i, d) in shape.iter().enumerate() {
        let s = &space[lead + i];
        if !(dim_eq(scope, d, s) || is_one(scope, d)) {
            return Err((d.to_string(), s.to_string()));
        }
    }
    Ok(())
}

/// The consumers of every node of a graph (each listed once, ascending),
/// stored flat.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Users {
    /// The range of `flat` of every node, as `[start, end]`: one bounds
    /// check per look-up (the fuser asks thousands of times a pass).
    spans: Vec<[u32; 2]>,
    flat: Vec<NodeId>,
}

impl Users {
    /// The consumers of every node of `g`.
    pub fn new(g: &Graph) -> Users {
        let nodes = g.nodes();
        let n = nodes.len();
        let mut spans = vec![[0u32; 2]; n];
        for node in nodes {
            each_operand(&node.operands, n, |o| spans[o][1] += 1);
        }
        // Counts to empty ranges at their starts, then filled in node order
        // (so each list is ascending), the end advancing.
        let mut start = 0;
        for s in &mut spans {
            let count = s[1];
            *s = [start, start];
            start += count;
        }
        let mut flat = vec![NodeId(0); start as usize];
        for (i, node) in nodes.iter().enumerate() {
            each_operand(&node.operands, n, |o| {
                let s = &mut spans[o];
                flat[s[1] as usize] = NodeId(i);
                s[1] += 1;
            });
        }
        Users { spans, flat }
    }

    /// The consumers of `n` (empty for a foreign id).
    #[inline]
    pub fn of(&self, n: NodeId) -> &[NodeId] {
        match self.spans.get(n.0) {
            Some(&[a, b]) => &self.flat[a as usize..b as usize],
            None => &[],
        }
    }
}

/// Calls `f` once on each operand in `ops` below `n` (an operand may
/// repeat), in order; most operators have one or two.
#[inline]
fn each_operand(ops: &[NodeId], n: usize, mut f: impl FnMut(usize)) {
    match *ops {
        [] => {}
        [a] => {
            if a.0 < n {
                f(a.0);
            }
        }
        [a, b] => {
            if a.0 < n {
                f(a.0);
            }
            if b != a && b.0 < n {
                f(b.0);
            }
        }
        _ => {
            for (k, o) in ops.iter().enumerate() {
                if o.0 < n && !ops[..k].contains(o) {
                    f(o.0);
                }
            }
        }
    }
}

impl fmt::Debug for Users {
    /// As the offsets of a flat list: every node's start, then the end
    /// (the form plans have always been printed in).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let off: Vec<u32> = self
            .spans
            .iter()
            .map(|s| s[0])
            .chain([self.flat.len() as u32])
            .collect();
        f.debug_struct("Users")
            .field("off", &off)
            .field("flat", &self.flat)
            .finish()
    }
}

/// What [`validate`] needs to know about the graph.
pub struct Facts<'a> {
    /// The graph.
    pub graph: &'a Graph,
    /// Consumers of every node.
    pub users: &'a Users,
    /// Whether each node is a graph output.
    pub is_output: &'a [bool],
    /// Role of every node.
    pub roles: &'a [Role],
}

impl Facts<'_> {
    /// True when `n`'s value leaves a group whose members satisfy `member`.
    pub fn materialized(&self, n: NodeId, member: &(impl Fn(NodeId) -> bool + ?Sized)) -> bool {
        self.is_output[n.0] || self.users.of(n).iter().any(|&u| !member(u))
    }

    fn name(&self, n: NodeId) -> String {
        self.graph[n].name.to_string()
    }

    fn shape(&self, n: NodeId) -> &[Dim] {
        &self.graph[n].shape
    }
}

/// Value class of a node inside a reduce group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Full,
    /// Reduced along the axis, kept as extent 1 (`true`) or dropped.
    Reduced(bool),
}

/// Decides whether `nodes` (compute nodes, ascending ids; `member` answers
/// membership) form one well-formed group for every binding, and derives the
/// group's kind and symbolic iteration space.
///
/// Rules: at most one matmul, never together with a reduction, and nothing of
/// the group feeds it; every reduction folds the same axis of the same space
/// and reads a full value of exactly that space; a node computed from a
/// reduced value and full values reads the reduced value with its axis kept;
/// every node's shape broadcasts into the space, and a node whose value
/// leaves the group has exactly the space's shape (or, for reduced values,
/// the reduced shape).
///
/// # Errors
/// The [`Reason`] the node set is not a group.
pub fn validate(
    facts: &Facts<'_>,
    nodes: &[NodeId],
    member: &dyn Fn(NodeId) -> bool,
) -> Result<(FusionKind, Vec<Dim>), Reason> {
    let g = facts.graph;
    let scope = g.scope();
    let mut matmul = None;
    let mut first_reduce = None;
    for &n in nodes {
        match facts.roles[n.0] {
            Role::Matmul => {
                if matmul.is_some() {
                    return Err(Reason::TwoMatmuls);
                }
                matmul = Some(n);
            }
            Role::Reduce { .. } | Role::Composite { .. } => {
                if first_reduce.is_none() {
                    first_reduce = Some(n);
                }
            }
            Role::Elementwise => {}
            Role::Data | Role::Opaque => {
                return Err(Reason::NotFusible {
                    node: facts.name(n),
                    op: g[n].op.name(),
                })
            }
        }
    }
    if matmul.is_some() && first_reduce.is_some() {
        return Err(Reason::MatmulReduce);
    }
    let mismatch = |n: NodeId, space: &[Dim], d| mismatch(facts, n, space, d);
    let stored_over = |n: NodeId, space: &[Dim]| stored_over(facts, member, n, space);

    if let Some(mm) = matmul {
        if let Some(&o) = g[mm].operands.iter().find(|&&o| member(o)) {
            return Err(Reason::MatmulPrologue {
                node: facts.name(o),
            });
        }
        let space = g[mm].shape.to_vec();
        for &n in nodes {
            if n == mm {
                continue;
            }
            broadcasts_into(scope, facts.shape(n), &space).map_err(|d| mismatch(n, &space, d))?;
            stored_over(n, &space)?;
        }
        return Ok((FusionKind::Matmul, space));
    }

    if let Some(r0) = first_reduce {
        let (Role::Reduce { axis, .. } | Role::Composite { axis }) = facts.roles[r0.0] else {
            return Err(Reason::MatmulReduce);
        };
        let space = facts.shape(g[r0].operands[0]).to_vec();
        reduce_classes(facts, nodes, member, axis, &space)?;
        return Ok((FusionKind::Reduce { axis }, space));
    }

    // Element-wise: the space is the shape of a stored node (all stored
    // nodes share it); every other node broadcasts into it.
    let anchor = nodes
        .iter()
        .copied()
        .filter(|&n| facts.materialized(n, member))
        .max_by_key(|&n| (facts.shape(n).len(), n.0))
        .or_else(|| nodes.last().copied());
    let Some(anchor) = anchor else {
        return Ok((FusionKind::Elementwise, Vec::new()));
    };
    let space = facts.shape(anchor).to_vec();
    for &n in nodes {
        broadcasts_into(scope, facts.shape(n), &space).map_err(|d| mismatch(n, &space, d))?;
        stored_over(n, &space)?;
    }
    Ok((FusionKind::Elementwise, space))
}

/// The [`Reason::SpaceMismatch`] of member `n` against `space`, at the
/// dimensions `a` and `b`.
fn mismatch(facts: &Facts<'_>, n: NodeId, space: &[Dim], (a, b): (String, String)) -> Reason {
    Reason::SpaceMismatch {
        node: facts.name(n),
        shape: ShapeDisplay(facts.shape(n)).to_string(),
        space: ShapeDisplay(space).to_string(),
        dims: (a, b),
    }
}

/// Whether member `n`, when stored from the group (`member`), has exactly
/// the shape `space` (else it would be stored from several tiles).
fn stored_over(
    facts: &Facts<'_>,
    member: &dyn Fn(NodeId) -> bool,
    n: NodeId,
    space: &[Dim],
) -> Result<(), Reason> {
    let scope = facts.graph.scope();
    if facts.materialized(n, member) && same_shape(scope, facts.shape(n), space).is_err() {
        return Err(Reason::BroadcastStore {
            node: facts.name(n),
            shape: ShapeDisplay(facts.shape(n)).to_string(),
            space: ShapeDisplay(space).to_string(),
        });
    }
    Ok(())
}

/// The walk of [`validate`] over the members of a reduce group folding
/// `axis` of `space`: each member's class from its operands', or the
/// [`Reason`] a member does not fit.
fn reduce_classes(
    facts: &Facts<'_>,
    nodes: &[NodeId],
    member: &dyn Fn(NodeId) -> bool,
    axis: usize,
    space: &[Dim],
) -> Result<(), Reason> {
    let g = facts.graph;
    let scope = g.scope();
    let mismatch = |n: NodeId, space: &[Dim], d| mismatch(facts, n, space, d);
    let stored_over = |n: NodeId, space: &[Dim]| stored_over(facts, member, n, space);
    let mut reduced = space.to_vec();
    reduced[axis] = Dim::ONE;
    let mut classes: Vec<(NodeId, Class)> = Vec::with_capacity(nodes.len());
    // Members are ascending, so `classes` is sorted by node.
    for &n in nodes {
        let node = &g[n];
        let class = match facts.roles[n.0] {
            Role::Reduce { axis: a, .. } | Role::Composite { axis: a } => {
                let x = node.operands[0];
                if a != axis {
                    return Err(Reason::AxisMismatch {
                        node: facts.name(n),
                        axis: a,
                        group_axis: axis,
                    });
                }
                same_shape(scope, facts.shape(x), space).map_err(|d| mismatch(n, space, d))?;
                let class = |o: NodeId| {
                    if member(o) {
                        class_of(&classes, o)
                    } else {
                        Class::Full
                    }
                };
                if class(x) != Class::Full {
                    return Err(Reason::ReduceOfReduced {
                        node: facts.name(n),
                    });
                }
                match facts.roles[n.0] {
                    Role::Reduce { keepdims, .. } => Class::Reduced(keepdims),
                    _ if composite_drops_axis(&node.operands, axis, class) => {
                        return Err(Reason::DroppedAxis {
                            node: facts.name(n),
                        })
                    }
                    _ => Class::Full,
                }
            }
            _ => {
                let mix = OperandMix::of(&node.operands, axis, |o| {
                    if member(o) {
                        class_of(&classes, o)
                    } else {
                        Class::Full
                    }
                });
                if mix.full {
                    if mix.drops_axis(axis) {
                        return Err(Reason::DroppedAxis {
                            node: facts.name(n),
                        });
                    }
                    broadcasts_into(scope, facts.shape(n), space)
                        .map_err(|d| mismatch(n, space, d))?;
                    stored_over(n, space)?;
                    Class::Full
                } else {
                    if mix.drops_axis(axis) {
                        return Err(Reason::DroppedAxis {
                            node: facts.name(n),
                        });
                    }
                    let dropped: Vec<Dim> = space
                        .iter()
                        .enumerate()
                        .filter(|&(i, _)| i != axis)
                        .map(|(_, d)| d.clone())
                        .collect();
                    if same_shape(scope, facts.shape(n), &reduced).is_ok() {
                        Class::Reduced(true)
                    } else {
                        same_shape(scope, facts.shape(n), &dropped)
                            .map_err(|d| mismatch(n, &dropped, d))?;
                        Class::Reduced(false)
                    }
                }
            }
        };
        classes.push((n, class));
    }
    Ok(())
}

/// Role of graph node `n` for the fuser.
pub fn role_of(g: &Graph, n: NodeId) -> Role {
    let node = &g[n];
    match &node.op {
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Scalar(..)
        | Op::ScalarDim(..)
        | Op::Where
        | Op::Cast => Role::Elementwise,
        Op::Reduce { op, axes, keepdims } => {
            if axes.len() == 1 && *op != dvm_graph::ReduceOp::Mean {
                Role::Reduce {
                    axis: axes[0],
                    keepdims: *keepdims,
                }
            } else {
                Role::Opaque
            }
        }
        Op::MatMul { .. } => {
            let ranks_ok = node
                .operands
                .iter()
                .all(|o| g.node(*o).is_some_and(|x| x.shape.len() >= 2));
            if ranks_ok {
                Role::Matmul
            } else {
                Role::Opaque
            }
        }
        // An iota is materialised like a constant at each bound shape
        // (see `dvm_compile::lower`): data its consumers load.
        Op::Input
        | Op::Constant(_)
        | Op::Iota { .. }
        | Op::Reshape
        | Op::Transpose { .. }
        | Op::Slice { .. }
        | Op::Expand
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. } => Role::Data,
        // A gather is a kernel of its own (`dvm_compile::codegen::gather`).
        Op::Concat { .. }
        | Op::Gather { .. }
        | Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::LayerNorm { .. }
        | Op::RmsNorm { .. }
        | Op::Trilu { .. }
        | Op::Conv2d(_)
        | Op::MaxPool2d(_)
        | Op::AvgPool2d { .. } => Role::Opaque,
    }
}

/// Role of node `n` of a graph whose composites are not decomposed (the
/// eager API's recorded window), for a decision over its operators that
/// equals the decision over its decomposition: a softmax, log-softmax,
/// layer or RMS norm is a [`Role::Composite`], a mean along one axis a
/// reduction (its sum and division are one), any other node as
/// [`role_of`] says. `None` for a composite that has no such role (a mean
/// over several axes, whose division fuses apart from its sum): decide on
/// the decomposition instead.
pub fn role_of_recorded(g: &Graph, n: NodeId) -> Option<Role> {
    let node = &g[n];
    let rank = node.shape.len();
    match node.op {
        Op::Softmax { axis } | Op::LogSoftmax { axis } if axis < rank => {
            Some(Role::Composite { axis })
        }
        Op::LayerNorm { .. } | Op::RmsNorm { .. } if rank > 0 => {
            Some(Role::Composite { axis: rank - 1 })
        }
        Op::Reduce {
            op: dvm_graph::ReduceOp::Mean,
            ref axes,
            keepdims,
        } => match axes[..] {
            [axis] => Some(Role::Reduce { axis, keepdims }),
            _ => None,
        },
        ref op if op.is_composite() => None,
        _ => Some(role_of(g, n)),
    }
}

/// The shapes of a graph's nodes interned to small ids, with the symbolic
/// relations [`validate`] asks about memoised per pair of shapes: the fuser
/// asks the same questions (does this node's shape fit that space?) for
/// every candidate merge, and a proof with the symbol scope costs far more
/// than a table lookup. Two ids are equal exactly when the shapes are the
/// same expressions; the relations are [`same_shape`] and
/// [`broadcasts_into`] themselves, so the answers are exactly as strict.
pub(crate) struct Shapes {
    /// Shape id of every node.
    of: Vec<u32>,
    memo: RefCell<ShapeMemo>,
}

#[derive(Default)]
struct ShapeMemo {
    /// Distinct shapes (the nodes' and derived ones).
    list: Vec<Vec<Dim>>,
    /// `(a, b, relation)` → answer.
    rel: HashMap<u64, bool, BuildHasherDefault<IdHasher>>,
    /// `(space, axis)` → (the space with the axis set to 1, the space
    /// without the axis).
    derived: HashMap<u64, (u32, u32), BuildHasherDefault<IdHasher>>,
    /// Emptied lists of earlier passes, for new shapes, and a scratch shape
    /// ([`Shapes::reduced`]): a pass allocates no list a pass before it had.
    pool: Vec<Vec<Dim>>,
    scratch: Vec<Dim>,
}

/// Above this many distinct shapes, [`ShapeMemo::intern`] hashes instead
/// of scanning.
const SCAN_SHAPES: usize = 32;

impl ShapeMemo {
    fn intern(&mut self, shape: &[Dim]) -> u32 {
        let found = if self.list.len() <= SCAN_SHAPES {
            self.list.iter().position(|s| s.as_slice() == shape)
        } else {
            self.list.iter().rposition(|s| s.as_slice() == shape)
        };
        match found {
            Some(i) => i as u32,
            None => {
                let mut v = self.pool.pop().unwrap_or_default();
                v.extend_from_slice(shape);
                self.list.push(v);
                (self.list.len() - 1) as u32
            }
        }
    }
}

/// Relations memoised by [`Shapes`].
#[derive(Clone, Copy)]
enum Rel {
    Same = 0,
    Broadcasts = 1,
}

/// The memory of a [`Shapes`], kept for the next one ([`Shapes::new_in`]).
#[derive(Default)]
pub(crate) struct ShapeBuffers {
    of: Vec<u32>,
    memo: ShapeMemo,
}

impl Shapes {
    /// Interns the shape of every node of `g`, in `b`'s memory.
    pub(crate) fn new_in(g: &Graph, b: ShapeBuffers) -> Shapes {
        let ShapeBuffers { mut of, mut memo } = b;
        of.clear();
        of.reserve(g.nodes().len());
        for mut v in memo.list.drain(..) {
            v.clear();
            memo.pool.push(v);
        }
        memo.rel.clear();
        memo.derived.clear();
        for node in g.nodes() {
            // Most operators have the shape of an operand.
            let id = node
                .operands
                .iter()
                .filter_map(|o| of.get(o.0).copied())
                .find(|&i| memo.list[i as usize] == *node.shape)
                .unwrap_or_else(|| memo.intern(&node.shape));
            of.push(id);
        }
        Shapes {
            of,
            memo: RefCell::new(memo),
        }
    }

    /// Its memory, for a later [`Shapes::new_in`].
    pub(crate) fn into_buffers(self) -> ShapeBuffers {
        ShapeBuffers {
            of: self.of,
            memo: self.memo.into_inner(),
        }
    }

    /// The shape id of node `n`.
    pub(crate) fn of(&self, n: NodeId) -> u32 {
        self.of[n.0]
    }

    /// The shape `id` (a copy).
    pub(crate) fn shape(&self, id: u32) -> Vec<Dim> {
        self.memo.borrow().list[id as usize].clone()
    }

    fn relation(&self, scope: &SymbolScope, rel: Rel, a: u32, b: u32) -> bool {
        let key = (u64::from(a) << 33) | (u64::from(b) << 1) | rel as u64;
        let mut memo = self.memo.borrow_mut();
        if let Some(&v) = memo.rel.get(&key) {
            return v;
        }
        let (x, y) = (&memo.list[a as usize], &memo.list[b as usize]);
        let v = match rel {
            Rel::Same => same_shape(scope, x, y).is_ok(),
            Rel::Broadcasts => broadcasts_into(scope, x, y).is_ok(),
        };
        memo.rel.insert(key, v);
        v
    }

    /// [`same_shape`] of shapes `a` and `b`.
    #[inline]
    pub(crate) fn same(&self, scope: &SymbolScope, a: u32, b: u32) -> bool {
        // Equal expressions are equal and broadcast-compatible.
        a == b || self.relation(scope, Rel::Same, a, b)
    }

    /// [`broadcasts_into`] of shape `a` into shape `b`.
    #[inline]
    pub(crate) fn broadcasts(&self, scope: &SymbolScope, a: u32, b: u32) -> bool {
        a == b || self.relation(scope, Rel::Broadcasts, a, b)
    }

    /// Space `space` with `axis` set to 1 (the kept reduced shape), and
    /// without `axis` (the dropped reduced shape).
    fn reduced(&self, space: u32, axis: usize) -> (u32, u32) {
        let key = (u64::from(space) << 32) | axis as u64;
        let mut memo = self.memo.borrow_mut();
        if let Some(&v) = memo.derived.get(&key) {
            return v;
        }
        let mut shape = std::mem::take(&mut memo.scratch);
        shape.clear();
        shape.extend_from_slice(&memo.list[space as usize]);
        shape[axis] = Dim::ONE;
        let kept = memo.intern(&shape);
        shape.remove(axis);
        let dropped = memo.intern(&shape);
        memo.scratch = shape;
        let v = (kept, dropped);
        memo.derived.insert(key, v);
        v
    }

    /// The id of the rank-0 shape.
    fn scalar(&self) -> u32 {
        self.memo.borrow_mut().intern(&[])
    }

    /// The rank of shape `id`.
    fn rank(&self, id: u32) -> usize {
        self.memo.borrow().list[id as usize].len()
    }
}

/// [`validate`] with the shape relations looked up in `shapes`: whether
/// `nodes` form a group, and its kind and space (a shape id), or `None`
/// exactly when [`validate`] returns an error (call it for the reason).
/// The checks and their order are [`validate`]'s. `classes` is scratch
/// with an entry per graph node: a reduce group writes each member's
/// class there before any later member reads it (operands come before
/// their users, members are visited in ascending order), so entries left
/// from earlier calls are never read.
pub(crate) fn validate_fast<M: Fn(NodeId) -> bool>(
    facts: &Facts<'_>,
    shapes: &Shapes,
    nodes: &[NodeId],
    member: M,
    classes: &mut [Class],
) -> Option<(FusionKind, u32)> {
    let g = facts.graph;
    let mut matmul = None;
    let mut first_reduce = None;
    for &n in nodes {
        match facts.roles[n.0] {
            Role::Matmul => {
                if matmul.is_some() {
                    return None;
                }
                matmul = Some(n);
            }
            Role::Reduce { .. } | Role::Composite { .. } => {
                if first_reduce.is_none() {
                    first_reduce = Some(n);
                }
            }
            Role::Elementwise => {}
            Role::Data | Role::Opaque => return None,
        }
    }
    if matmul.is_some() && first_reduce.is_some() {
        return None;
    }
    let fits = |n: NodeId, space: u32| fits_space(facts, shapes, &member, n, space);

    if let Some(mm) = matmul {
        if g[mm].operands.iter().any(|&o| member(o)) {
            return None;
        }
        let space = shapes.of(mm);
        for &n in nodes {
            if n != mm && !fits(n, space) {
                return None;
            }
        }
        return Some((FusionKind::Matmul, space));
    }

    if let Some(r0) = first_reduce {
        let (Role::Reduce { axis, .. } | Role::Composite { axis }) = facts.roles[r0.0] else {
            return None;
        };
        let space = shapes.of(g[r0].operands[0]);
        let mut step = ReduceStep::new(facts, shapes, space, axis);
        for &n in nodes {
            let class = step.class(n, &member, &fits, &|o: NodeId| classes[o.0])?;
            classes[n.0] = class;
        }
        return Some((FusionKind::Reduce { axis }, space));
    }

    let anchor = nodes
        .iter()
        .copied()
        .filter(|&n| facts.materialized(n, &member))
        .max_by_key(|&n| (shapes.rank(shapes.of(n)), n.0))
        .or_else(|| nodes.last().copied());
    let Some(anchor) = anchor else {
        return Some((FusionKind::Elementwise, shapes.scalar()));
    };
    let space = shapes.of(anchor);
    for &n in nodes {
        if !fits(n, space) {
            return None;
        }
    }
    Some((FusionKind::Elementwise, space))
}

/// Whether member `n` of a group (membership `member`) fits the group's
/// space: its shape broadcasts into the space, and equals it if the value
/// is [materialized](Facts::materialized). A node of the space's own shape
/// fits without the users scan.
fn fits_space(
    facts: &Facts<'_>,
    shapes: &Shapes,
    member: &impl Fn(NodeId) -> bool,
    n: NodeId,
    space: u32,
) -> bool {
    let scope = facts.graph.scope();
    let s = shapes.of(n);
    s == space
        || (shapes.broadcasts(scope, s, space)
            && (!facts.materialized(n, member) || shapes.same(scope, s, space)))
}

/// One member of a reduce group in the walks of [`validate_fast`] and
/// [`validate_onto`] (the same checks): its class from its operands', or
/// `None` when it does not fit the group's space and axis.
struct ReduceStep<'a, 'g> {
    facts: &'a Facts<'g>,
    shapes: &'a Shapes,
    scope: &'g SymbolScope,
    space: u32,
    axis: usize,
    /// The space's reduced shapes (kept and dropped axis), once asked.
    derived: Option<(u32, u32)>,
}

impl<'a, 'g> ReduceStep<'a, 'g> {
    fn new(facts: &'a Facts<'g>, shapes: &'a Shapes, space: u32, axis: usize) -> Self {
        ReduceStep {
            facts,
            shapes,
            scope: facts.graph.scope(),
            space,
            axis,
            derived: None,
        }
    }

    /// The class of member `n`; `class_of` gives a member operand's
    /// class, `fits` whether a full-size member fits the space.
    fn class(
        &mut self,
        n: NodeId,
        member: &impl Fn(NodeId) -> bool,
        fits: &impl Fn(NodeId, u32) -> bool,
        class_of: &impl Fn(NodeId) -> Class,
    ) -> Option<Class> {
        let (shapes, scope, space, axis) = (self.shapes, self.scope, self.space, self.axis);
        let node = &self.facts.graph[n];
        match self.facts.roles[n.0] {
            Role::Reduce { axis: a, .. } | Role::Composite { axis: a } => {
                let x = node.operands[0];
                if a != axis || !shapes.same(scope, shapes.of(x), space) {
                    return None;
                }
                let class = |o: NodeId| if member(o) { class_of(o) } else { Class::Full };
                if class(x) != Class::Full {
                    return None;
                }
                match self.facts.roles[n.0] {
                    Role::Reduce { keepdims, .. } => Some(Class::Reduced(keepdims)),
                    // A composite's value has its first operand's shape:
                    // the space's.
                    _ => {
                        (!composite_drops_axis(&node.operands, axis, class)).then_some(Class::Full)
                    }
                }
            }
            _ => {
                let mix = OperandMix::of(&node.operands, axis, |o| {
                    if member(o) {
                        class_of(o)
                    } else {
                        Class::Full
                    }
                });
                if mix.full {
                    if mix.drops_axis(axis) || !fits(n, space) {
                        return None;
                    }
                    Some(Class::Full)
                } else {
                    if mix.drops_axis(axis) {
                        return None;
                    }
                    let (kept, dropped) = *self
                        .derived
                        .get_or_insert_with(|| shapes.reduced(space, axis));
                    let s = shapes.of(n);
                    if shapes.same(scope, s, kept) {
                        Some(Class::Reduced(true))
                    } else if shapes.same(scope, s, dropped) {
                        Some(Class::Reduced(false))
                    } else {
                        None
                    }
                }
            }
        }
    }
}

/// A reduce group validated before, as [`validate_onto`] takes it.
pub(crate) struct Base<'a, B: Fn(NodeId) -> bool> {
    /// Membership (of either group, when it is two: see
    /// [`validate_onto`]).
    pub member: B,
    /// Its space (a shape id).
    pub space: u32,
    /// Its folded axis.
    pub axis: usize,
    /// Its members' classes (entries of other nodes are not read).
    pub classes: &'a [Class],
}

/// Scratch of [`validate_onto`]. `classes` and `mark` have an entry per
/// graph node; a node's class in the union is in `classes` when its mark
/// is `epoch` (a fresh value: no entry holds it yet).
pub(crate) struct Onto<'a> {
    pub classes: &'a mut [Class],
    pub mark: &'a mut [u32],
    pub epoch: u32,
    /// The nodes checked, ascending: the new members and the members of
    /// the base whose class may have changed (their classes are the
    /// union's, the other members' are the base's).
    pub checked: &'a mut Vec<NodeId>,
    /// Members of the base to check, descending, each once: on entry,
    /// those to check besides the new members (none, or [`crossings`]).
    pub queue: &'a mut Vec<NodeId>,
}

/// The members to check first ([`Onto::queue`]) when [`validate_onto`]
/// validates the union of two reduce groups of the same axis and space,
/// each with its classes in `classes`, onto both: `y`'s members
/// (ascending) and `x`'s (`in_x`) that read a value of the other group
/// whose class there is not full-size. Their own group saw that value from
/// outside, as full-size; every other member reads the classes its own
/// group saw, until the walk finds one that changed.
pub(crate) fn crossings(
    facts: &Facts<'_>,
    y: &[NodeId],
    in_x: impl Fn(NodeId) -> bool,
    classes: &[Class],
    queue: &mut Vec<NodeId>,
) {
    queue.clear();
    for &n in y {
        let reduced = |o: NodeId| classes[o.0] != Class::Full;
        if facts.graph[n]
            .operands
            .iter()
            .any(|&o| in_x(o) && reduced(o))
        {
            queue.push(n);
        }
        if reduced(n) {
            queue.extend(facts.users.of(n).iter().filter(|&&u| in_x(u)));
        }
    }
    queue.sort_unstable_by(|p, q| q.cmp(p));
    queue.dedup();
}

/// [`validate_fast`] of the union of reduce group `base` and the nodes
/// `new` (ascending), with the same answer, checking only what the union
/// changes; `None` when it does not apply (a reduction of `new` folds
/// another space or axis than `base`'s), `Some(answer)` otherwise.
///
/// The union's space and axis are `base`'s. A member of `base` whose
/// operands have the classes they had in `base` (a new member, outside
/// `base` before, counted as full-size there) keeps its class, and passes
/// again every check it passed: so do the classes it reads, and a value
/// stored from the union was stored from `base` (a check only becomes
/// weaker when users join the group). So the walk checks the new members
/// and, from each checked node whose class is not what `base` saw, its
/// users in `base`, in ascending order as [`validate_fast`] does: a merge
/// that adds a prologue (full-size values) or an epilogue to a reduce
/// group checks only the new members.
///
/// `base` may also be two such groups of the same axis and space (the
/// union's, as in [`validate_fast`], whose first reduction is one of
/// theirs), each validated on its own, with no new members: the same
/// holds with each member's classes those of its own group (a value of
/// the other group counted as full-size there), and the walk starts from
/// the members that read a value whose class that changes
/// ([`crossings`]).
pub(crate) fn validate_onto<M: Fn(NodeId) -> bool, B: Fn(NodeId) -> bool>(
    facts: &Facts<'_>,
    shapes: &Shapes,
    new: &[NodeId],
    member: M,
    base: &Base<'_, B>,
    sc: &mut Onto<'_>,
) -> Option<Option<(FusionKind, u32)>> {
    let g = facts.graph;
    let (space, axis) = (base.space, base.axis);
    // `base` holds element-wise and reduce nodes: any other role among the
    // new members makes the union invalid, as in `validate_fast`.
    for &n in new {
        match facts.roles[n.0] {
            Role::Elementwise => {}
            Role::Reduce { axis: a, .. } | Role::Composite { axis: a } => {
                if a != axis || shapes.of(g[n].operands[0]) != space {
                    return None;
                }
            }
            Role::Matmul | Role::Data | Role::Opaque => return Some(None),
        }
    }
    let fits = |n: NodeId, space: u32| fits_space(facts, shapes, &member, n, space);
    let mut step = ReduceStep::new(facts, shapes, space, axis);
    sc.checked.clear();
    let mut next_new = new.iter().copied().peekable();
    loop {
        let n = match (next_new.peek(), sc.queue.last()) {
            (Some(&a), Some(&b)) if b < a => sc.queue.pop(),
            (Some(_), _) => next_new.next(),
            (None, _) => sc.queue.pop(),
        };
        let Some(n) = n else { break };
        let (classes, mark, epoch) = (&*sc.classes, &*sc.mark, sc.epoch);
        let class_of = |o: NodeId| {
            if mark[o.0] == epoch {
                classes[o.0]
            } else {
                base.classes[o.0]
            }
        };
        let Some(class) = step.class(n, &member, &fits, &class_of) else {
            return Some(None);
        };
        let before = if (base.member)(n) {
            base.classes[n.0]
        } else {
            Class::Full
        };
        sc.classes[n.0] = class;
        sc.mark[n.0] = sc.epoch;
        sc.checked.push(n);
        if class != before {
            for &u in facts.users.of(n) {
                if (base.member)(u) {
                    // Descending, each once (users come after `n`).
                    if let Err(at) = sc.queue.binary_search_by(|q| u.cmp(q)) {
                        sc.queue.insert(at, u);
                    }
                }
            }
        }
    }
    Some(Some((FusionKind::Reduce { axis }, space)))
}

/// One of the two groups of a candidate union, as [`validate_union`]
/// reads it.
pub(crate) struct Side<'a> {
    /// Its id in the driver's node owners.
    pub id: u32,
    /// Its kind.
    pub kind: &'a FusionKind,
    /// Its members, ascending.
    pub nodes: &'a [NodeId],
    /// Its space (a shape id) when known: a reduce group's members then
    /// have their classes in the driver's classes.
    pub space: Option<u32>,
}

/// Whether the union of groups `a` and `b` (its members `union`,
/// ascending; `member` its membership; `owner` every node's group id)
/// forms a group: its kind, space, and whether it was validated onto one
/// of the two ([`validate_onto_larger`], else [`validate_fast`], whose
/// answer it is). Validated onto one, the union's classes are in
/// `sc.classes` for the nodes in `sc.checked` (the others keep theirs in
/// `class_of`); otherwise every member's class is in `sc.classes`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn validate_union<M: Fn(NodeId) -> bool>(
    facts: &Facts<'_>,
    shapes: &Shapes,
    union: &[NodeId],
    member: M,
    owner: &[u32],
    sides: (Side<'_>, Side<'_>),
    class_of: &[Class],
    sc: &mut Onto<'_>,
) -> Option<(FusionKind, u32, bool)> {
    if let Some(found) =
        validate_onto_larger(facts, shapes, union, &member, owner, sides, class_of, sc)
    {
        return found.map(|(k, sp)| (k, sp, true));
    }
    validate_fast(facts, shapes, union, member, sc.classes).map(|(k, sp)| (k, sp, false))
}

/// [`validate_union`] onto the larger of groups `a` and `b`, when it is a
/// reduce group of at least [`super::ONTO_MIN`] members whose space is
/// known ([`validate_onto`], reading its members' classes in `class_of`):
/// only what the merge changes is checked. `None` when that does not
/// apply (then call [`validate_fast`]), else [`validate_fast`]'s answer.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn validate_onto_larger<M: Fn(NodeId) -> bool>(
    facts: &Facts<'_>,
    shapes: &Shapes,
    union: &[NodeId],
    member: M,
    owner: &[u32],
    (a, b): (Side<'_>, Side<'_>),
    class_of: &[Class],
    sc: &mut Onto<'_>,
) -> Option<Option<(FusionKind, u32)>> {
    let (x, y) = if a.nodes.len() >= b.nodes.len() {
        (a, b)
    } else {
        (b, a)
    };
    let (&FusionKind::Reduce { axis }, Some(space), true) =
        (x.kind, x.space, x.nodes.len() >= super::ONTO_MIN)
    else {
        return None;
    };
    // `y` a reduce group of the same axis and space: its classes are
    // known too, and only what changes where the two groups meet is
    // validated (a reduce chain).
    let both = y.kind == x.kind && y.space == Some(space);
    let (xx, yy) = (x.id, y.id);
    let base = Base {
        member: |m: NodeId| {
            let o = owner[m.0];
            o == xx || (both && o == yy)
        },
        space,
        axis,
        classes: class_of,
    };
    let new: &[NodeId] = if both {
        let in_x = |m: NodeId| owner[m.0] == xx;
        crossings(facts, y.nodes, in_x, class_of, sc.queue);
        &[]
    } else {
        sc.queue.clear();
        y.nodes
    };
    let found = validate_onto(facts, shapes, new, &member, &base, sc)?;
    // The tests check the claim: the whole union's answer, and the
    // classes of the members the walk skipped unchanged.
    if cfg!(debug_assertions) {
        let mut classes = vec![Class::Full; owner.len()];
        let full = validate_fast(facts, shapes, union, &member, &mut classes);
        debug_assert_eq!(found, full);
        debug_assert!(
            found.is_none()
                || union
                    .iter()
                    .all(|&n| sc.checked.contains(&n) || class_of[n.0] == classes[n.0]),
            "a member the walk skipped changed its class"
        );
    }
    Some(found)
}
