//! Decomposition of composites into primitives.
//!
//! | composite | primitives (PyTorch's formulation) |
//! |---|---|
//! | `mean(x, axes)` | `sum(x, axes) / n` with `n` the product of the reduced extents (`divs` by a constant, or [`Op::ScalarDim`] when symbolic) |
//! | `softmax(x, a)` | `m = max(x, a)`, `e = exp(x − m)`, `e · (1 / sum(e, a))` |
//! | `log_softmax(x, a)` | `m = max(x, a)`, `d = x − m`, `d − log(sum(exp(d), a))` |
//! | `layer_norm(x, g, b, ε)` | `μ = mean(x)`, `d = x − μ`, `v = mean(d·d)` (biased), `d · rsqrt(v + ε) · g + b` |
//! | `rms_norm(x, g, ε)` | `x · rsqrt(mean(x·x) + ε) · g` |
//! | `trilu(x, upper, k)` | `i, j = iota(i32, [N, M])`, `where(j − i ≥ k, x, 0)` (upper; `≤` for lower) |
//! | `conv2d(x, w, b)` | im2col: `x` padded with zeros (`concat` with constants), one strided `slice` `[N, C, OH, OW]` per kernel tap, `unsqueeze`d and `concat`enated to `[N, C, KH·KW, OH, OW]`, `reshape`d to `[N, C·KH·KW, OH·OW]` (`[N, G, C/G·KH·KW, OH·OW]` with G groups); `matmul` with the weight reshaped to `[O, C·KH·KW]` (`[G, O/G, C/G·KH·KW]`); `add` of the bias as `[O, 1]`; `reshape` to `[N, O, OH, OW]` |
//! | `max_pool2d(x)` | `x` padded with −∞, `max` over the strided slices of the kernel taps |
//! | `avg_pool2d(x)` | `x` padded with zeros, `add` over the strided slices of the kernel taps, `divs` by KH·KW (or `div` by a constant `[OH, OW]` of the taps inside the input, without `count_include_pad`) |
//!
//! Reductions inside composites keep their axes (`keepdims`) so the
//! following element-wise ops broadcast. Intermediate nodes are named after
//! the composite (`y.max`, `y.exp`, …); the last one keeps its name, so
//! outputs and later references are unchanged.
//!
//! A one-operand element-wise operator (`unary`, or with a scalar) that is
//! a convolution's only user moves above the convolution's final
//! `reshape`: `relu(conv2d(x, w, b))` becomes the matmul, the bias `add`,
//! the `relu` (named `conv.act`) over `[N, O, OH·OW]` and the `reshape`
//! (named as the `relu`), so that the fuser takes it into the matmul's
//! epilogue as it does after a plain matmul. A chain of such operators
//! moves one by one.

use std::ops::Range;
use std::sync::OnceLock;

use dvm_isa::{DType, Opcode};

use super::error::GraphError;
use super::shape::{keeps_dtype, quick_reduced};
use super::{check_name, to_shape, CompactString, Graph, Node, NodeId, Op, Operands, ReduceOp};
use dvm_sym::Dim;

/// A copy of `graph` in which every composite ([`Op::is_composite`]) is
/// replaced by primitives; node names, inputs, outputs and the symbol scope
/// carry over. A graph without composites is returned as an equal copy.
///
/// | composite | primitives (PyTorch's formulation) |
/// |---|---|
/// | `mean(x, axes)` | `sum(x, axes) / n` with `n` the product of the reduced extents (`divs` by a constant, or [`Op::ScalarDim`] when symbolic) |
/// | `softmax(x, a)` | `m = max(x, a)`, `e = exp(x − m)`, `e · (1 / sum(e, a))` |
/// | `log_softmax(x, a)` | `m = max(x, a)`, `d = x − m`, `d − log(sum(exp(d), a))` |
/// | `layer_norm(x, g, b, ε)` | `μ = mean(x)`, `d = x − μ`, `v = mean(d·d)` (biased), `d · rsqrt(v + ε) · g + b` |
/// | `rms_norm(x, g, ε)` | `x · rsqrt(mean(x·x) + ε) · g` |
/// | `trilu(x, upper, k)` | `i, j = iota(i32, [N, M])`, `where(j − i ≥ k, x, 0)` (upper; `≤` for lower) |
/// | `conv2d(x, w, b)` | im2col: `x` padded with zeros (`concat` with constants), one strided `slice` `[N, C, OH, OW]` per kernel tap, `unsqueeze`d and `concat`enated to `[N, C, KH·KW, OH, OW]`, `reshape`d to `[N, C·KH·KW, OH·OW]` (`[N, G, C/G·KH·KW, OH·OW]` with G groups); `matmul` with the weight reshaped to `[O, C·KH·KW]` (`[G, O/G, C/G·KH·KW]`); `add` of the bias as `[O, 1]`; `reshape` to `[N, O, OH, OW]` |
/// | `max_pool2d(x)` | `x` padded with −∞, `max` over the strided slices of the kernel taps |
/// | `avg_pool2d(x)` | `x` padded with zeros, `add` over the strided slices of the kernel taps, `divs` by KH·KW (or `div` by a constant `[OH, OW]` of the taps inside the input, without `count_include_pad`) |
///
/// Reductions inside composites keep their axes so that the following
/// element-wise ops broadcast; intermediate nodes are named after the
/// composite (`y.max`, `y.exp`, …) and the last one keeps its name.
///
/// # Errors
///
/// Only if a rewritten node fails its shape checks, which would be a bug in
/// the decomposition; the error names the node.
pub fn decompose(graph: &Graph) -> Result<Graph, GraphError> {
    decompose_with_spans(graph).map(|(g, _)| g)
}

/// [`decompose`], with the range of node ids each composite became
/// (ascending, disjoint). The fuser takes each range as one candidate group
/// (the fuser's `FusionPlan::with_composites`) instead of rediscovering
/// it operator by operator.
///
/// # Errors
///
/// As [`decompose`].
pub fn decompose_with_spans(graph: &Graph) -> Result<(Graph, Vec<Range<usize>>), GraphError> {
    decompose_but(graph, |_| false)
}

/// [`decompose`] leaving the convolutions and poolings whole: the
/// reference evaluator computes those by their definitions.
pub(crate) fn decompose_keeping_windows(graph: &Graph) -> Result<Graph, GraphError> {
    let keep = |op: &Op| matches!(op, Op::Conv2d(_) | Op::MaxPool2d(_) | Op::AvgPool2d { .. });
    decompose_but(graph, keep).map(|(g, _)| g)
}

/// [`decompose_with_spans`] of every composite but those `keep` names.
fn decompose_but(
    graph: &Graph,
    keep: fn(&Op) -> bool,
) -> Result<(Graph, Vec<Range<usize>>), GraphError> {
    let mut spans = Vec::new();
    let mut out = Graph {
        scope: graph.scope.clone(),
        ..Graph::default()
    };
    // Room for every node up front (a layer norm becomes 11 nodes): the
    // nodes are not regrown while decomposing.
    let composites = graph.nodes.iter().filter(|n| n.op.is_composite()).count();
    let room = graph.nodes.len() + 11 * composites;
    out.nodes.reserve(room);
    let mut map: Vec<NodeId> = Vec::with_capacity(graph.nodes.len());
    // Generated names are `composite.suffix`, the suffixes of one composite
    // distinct and without dots: when no name of the graph has a dot, they
    // clash with nothing and need no lookup.
    let dotless = graph.nodes.iter().all(|n| !n.name.contains('.'));
    let convs_decomposed = graph
        .nodes
        .iter()
        .any(|n| matches!(n.op, Op::Conv2d(_)) && !keep(&n.op));
    let mut sink = Sink::new(&graph.nodes, &graph.outputs, convs_decomposed);
    // With dots in names a generated name may clash: look names up then.
    let lookup = (!dotless).then_some(graph);
    for (i, node) in graph.nodes.iter().enumerate() {
        let operands: Operands = node.operands.iter().map(|o| map[o.0]).collect();
        let id = if node.op.is_composite() && !keep(&node.op) {
            let lo = out.nodes.len();
            let id = Rewriter::new(&mut out, Some(graph), &node.name, dotless, &operands)
                .composite(node, &operands)?;
            spans.push(lo..out.nodes.len());
            sink.produced(i, node);
            id
        } else if let Some(id) =
            sink.try_move(&mut out, lookup, i, node, node.operands.first(), &operands)
        {
            id
        } else {
            out.push(Node {
                op: node.op.clone(),
                operands,
                name: node.name.clone(),
                dtype: node.dtype,
                shape: node.shape.clone(),
            })
        };
        map.push(id);
    }
    out.outputs = graph
        .outputs
        .iter()
        .map(|(n, id)| (n.clone(), map[id.0]))
        .collect();
    Ok((out, spans))
}

/// How many nodes composite `op` becomes ([`Op::is_composite`]), or
/// `None` for any other operator (which stays one node). The fuser
/// decides over an eager window's operators with it before decomposing
/// them (the fuser's `FusionPlan::decide_recorded`).
pub fn decomposed_len(op: &Op) -> Option<usize> {
    match op {
        // max, sub, exp, sum, and recip and mul, or log and sub.
        Op::Softmax { .. } | Op::LogSoftmax { .. } => Some(6),
        // Two means of two nodes each, sub, sq, eps, rsqrt, norm, scale, add.
        Op::LayerNorm { .. } => Some(11),
        // sq, a mean of two nodes, eps, rsqrt, norm, scale.
        Op::RmsNorm { .. } => Some(7),
        // Two iotas, sub, a comparison, a zero and where.
        Op::Trilu { .. } => Some(6),
        // As many as the kernel has taps, and more: not one unit.
        Op::Conv2d(_) | Op::MaxPool2d(_) | Op::AvgPool2d { .. } => None,
        // A mean: sum and division.
        op if op.is_composite() => Some(2),
        _ => None,
    }
}

/// [`decompose_with_spans`] of a graph the caller gives up: the nodes
/// that are not composites move into the result instead of being copied
/// (the eager API decomposes its window this way). The result is equal to
/// `decompose_with_spans(&graph)`.
///
/// # Errors
///
/// As [`decompose`].
pub fn decompose_owned(mut graph: Graph) -> Result<(Graph, Vec<Range<usize>>), GraphError> {
    let composites = graph.nodes.iter().filter(|n| n.op.is_composite()).count();
    if composites == 0 {
        return Ok((graph, Vec::new()));
    }
    // Generated names need lookups in the original graph when a name has
    // a dot: copy then.
    if graph.nodes.iter().any(|n| n.name.contains('.')) {
        return decompose_with_spans(&graph);
    }
    let nodes = std::mem::take(&mut graph.nodes);
    let mut spans = Vec::with_capacity(composites);
    let mut out = Graph {
        scope: std::mem::take(&mut graph.scope),
        ..Graph::default()
    };
    out.nodes.reserve(nodes.len() + 11 * composites);
    let mut map: Vec<NodeId> = Vec::with_capacity(nodes.len());
    let mut sink = Sink::new(&nodes, &graph.outputs, true);
    for (i, mut node) in nodes.into_iter().enumerate() {
        let first = node.operands.first().copied();
        for o in node.operands.iter_mut() {
            *o = map[o.0];
        }
        let id = if node.op.is_composite() {
            let lo = out.nodes.len();
            let operands = std::mem::take(&mut node.operands);
            let id = Rewriter::new(&mut out, None, &node.name, true, &operands)
                .composite(&node, &operands)?;
            spans.push(lo..out.nodes.len());
            sink.produced(i, &node);
            id
        } else if let Some(id) =
            sink.try_move(&mut out, None, i, &node, first.as_ref(), &node.operands)
        {
            id
        } else {
            out.push(node)
        };
        map.push(id);
    }
    out.outputs = std::mem::take(&mut graph.outputs);
    for (_, id) in out.outputs.iter_mut() {
        *id = map[id.0];
    }
    Ok((out, spans))
}

/// Moves one-operand element-wise operators above the final `reshape` of
/// a convolution they alone use (see the module documentation).
struct Sink {
    /// Off: no convolution, or convolutions kept whole.
    on: bool,
    /// Users of each node of the graph being decomposed, an output
    /// counting as one.
    users: Vec<u32>,
    /// The node of that graph became a `reshape` of a result of its shape
    /// `[N, O, OH·OW]` that nothing else uses.
    movable: Vec<bool>,
}

impl Sink {
    fn new(nodes: &[Node], outputs: &[(String, NodeId)], allowed: bool) -> Sink {
        let on = allowed && nodes.iter().any(|n| matches!(n.op, Op::Conv2d(_)));
        if !on {
            return Sink {
                on,
                users: Vec::new(),
                movable: Vec::new(),
            };
        }
        let mut users = vec![0u32; nodes.len()];
        for n in nodes {
            for o in n.operands.iter() {
                users[o.0] += 1;
            }
        }
        for (_, id) in outputs {
            users[id.0] += 1;
        }
        Sink {
            on,
            users,
            movable: vec![false; nodes.len()],
        }
    }

    /// Composite `i` (`node`) was decomposed.
    fn produced(&mut self, i: usize, node: &Node) {
        if self.on && matches!(node.op, Op::Conv2d(_)) {
            self.movable[i] = true;
        }
    }

    /// If `node` (number `i`, first operand `old` in the graph being
    /// decomposed, `operands` in `out`) is a one-operand element-wise
    /// operator whose operand is a movable `reshape` that only it uses,
    /// turns that `reshape` into the operator over the reshape's operand
    /// (named `….act` after the reshape, or `….act_1`, … when `lookup`,
    /// the graph being decomposed, or `out` has that name) and pushes the
    /// `reshape` of it under `node`'s name; returns that new `reshape`.
    fn try_move(
        &mut self,
        out: &mut Graph,
        lookup: Option<&Graph>,
        i: usize,
        node: &Node,
        old: Option<&NodeId>,
        operands: &[NodeId],
    ) -> Option<NodeId> {
        if !self.on || !matches!(node.op, Op::Unary(_) | Op::Scalar(..)) {
            return None;
        }
        let ([r], Some(old)) = (operands, old) else {
            return None;
        };
        if !self.movable[old.0] || self.users[old.0] != 1 {
            return None;
        }
        let reshape = &out.nodes[r.0];
        if reshape.op != Op::Reshape {
            return None;
        }
        let inner = reshape.operands[0];
        let mut name = reshape.name.clone();
        name.push_str(".act");
        if let Some(orig) = lookup {
            let taken = |n: &str| out.find(n).is_some() || orig.find(n).is_some();
            if taken(&name) {
                name = (1..)
                    .map(|k| compact_str::format_compact!("{name}_{k}"))
                    .find(|n| !taken(n))?;
            }
        }
        if name.len() > super::MAX_NAME_LEN {
            return None;
        }
        if out.names.get().is_some() {
            // Keeps the name index right; the name is valid and unused.
            out.rename(*r, &name).ok()?;
        } else {
            out.nodes[r.0].name = name;
        }
        let inner_shape = out.nodes[inner.0].shape.clone();
        let moved = &mut out.nodes[r.0];
        moved.op = node.op.clone();
        moved.dtype = node.dtype;
        moved.shape = inner_shape;
        let id = out.push(Node {
            op: Op::Reshape,
            operands: std::iter::once(*r).collect(),
            name: node.name.clone(),
            dtype: node.dtype,
            shape: node.shape.clone(),
        });
        self.movable[i] = true;
        Some(id)
    }
}

struct Rewriter<'a> {
    g: &'a mut Graph,
    /// The graph being decomposed: new names must not clash with its names
    /// (`None`: it has no name with a dot, `dotless`).
    orig: Option<&'a Graph>,
    /// The composite's name: the final node takes it.
    name: &'a CompactString,
    /// No name of `orig` has a dot (generated names are then fresh).
    dotless: bool,
    /// The shapes of the composite's nodes follow from its operands'
    /// ([`settled`]): the rewriter gives them without inference.
    settled: bool,
}

/// The composite over `x` (operand, then weights) has operands whose
/// shapes settle its nodes' shapes: the operand has a float dtype that
/// the decompositions' opcodes accept ([`decomposes_in`]) and a shape of
/// settled dimensions ([`dvm_sym::SymbolScope::is_settled`]),
/// the weights its dtype and the shape of its last axis. Each element-wise
/// node of the decomposition then combines a node of the operand's shape
/// (its first operand, the `like` operand) with nodes of that shape, of it
/// reduced over an axis (kept as 1) or with the weights: the quick
/// inference gives it the first operand's dtype and shape, as it gives a
/// reduction its reduced shape; none needs a canonical form computed.
fn settled(g: &Graph, x: &[NodeId]) -> bool {
    let Some((&first, weights)) = x.split_first() else {
        return false;
    };
    let row = &g[first];
    let last = row.shape.last();
    row.dtype.is_float()
        && decomposes_in(row.dtype)
        && row.shape.iter().all(|d| g.scope().is_settled(d))
        && weights.iter().all(|&w| {
            let w = &g[w];
            w.dtype == row.dtype && w.shape.len() == 1 && last == w.shape.first()
        })
}

/// The element-wise operators of the decompositions, one per opcode: a
/// new one must be listed, as a settled composite's nodes are not checked
/// one by one (debug builds check each against the inference).
const ELEMENTWISE: [Op; 9] = {
    use Opcode::{Add, AddS, DivS, Exp, Log, Mul, Recip, Rsqrt, Sub};
    [
        Op::Binary(Sub),
        Op::Binary(Mul),
        Op::Binary(Add),
        Op::Unary(Exp),
        Op::Unary(Recip),
        Op::Unary(Log),
        Op::Unary(Rsqrt),
        Op::Scalar(AddS, 0.0),
        Op::Scalar(DivS, 1.0),
    ]
};

/// Every operator of [`ELEMENTWISE`] keeps dtype `dt` ([`keeps_dtype`]),
/// from a table made once per process: the nodes of a settled composite
/// then need no check of their own.
fn decomposes_in(dt: DType) -> bool {
    static TABLE: OnceLock<[bool; DType::ALL.len()]> = OnceLock::new();
    let table =
        TABLE.get_or_init(|| DType::ALL.map(|dt| ELEMENTWISE.iter().all(|op| keeps_dtype(op, dt))));
    table[dt as usize]
}

impl<'a> Rewriter<'a> {
    /// The rewriter of composite `name` over `x` into `g`.
    fn new(
        g: &'a mut Graph,
        orig: Option<&'a Graph>,
        name: &'a CompactString,
        dotless: bool,
        x: &[NodeId],
    ) -> Rewriter<'a> {
        let settled = settled(g, x);
        Rewriter {
            g,
            orig,
            name,
            dotless,
            settled,
        }
    }
}

impl Rewriter<'_> {
    /// A node named after the composite: `suffix` starts with the dot
    /// (`.max`), so that the name is the composite's with one push.
    fn node(&mut self, suffix: &str, op: Op, operands: &[NodeId]) -> Result<NodeId, GraphError> {
        self.node_in(suffix, op, operands, None)
    }

    /// [`Rewriter::node`] for an element-wise node that takes the dtype
    /// and shape of operand `like` ([`Graph::add_like`]).
    fn like(
        &mut self,
        suffix: &str,
        op: Op,
        operands: &[NodeId],
        like: NodeId,
    ) -> Result<NodeId, GraphError> {
        self.node_in(suffix, op, operands, Some(like))
    }

    fn node_in(
        &mut self,
        suffix: &str,
        op: Op,
        operands: &[NodeId],
        like: Option<NodeId>,
    ) -> Result<NodeId, GraphError> {
        // The composite's name copied (held inline, most are) and the
        // suffix pushed: one copy of a string, and no UTF-8 check, as
        // joining on a byte buffer would need.
        let mut base = self.name.clone();
        base.push_str(suffix);
        let name = if self.dotless {
            base
        } else {
            self.unclashed(base)
        };
        // Unused (checked above). The composite's name is valid and the
        // suffixes are a dot, lowercase letters and `_`: the name is valid
        // unless it grew too long, which is all there is left to check.
        if name.len() > super::MAX_NAME_LEN {
            check_name("node", &name)?;
        }
        debug_assert!(check_name("node", &name).is_ok());
        self.add(name, op, operands, like)
    }

    /// `base`, else the first of `base_1`, `base_2`, … that no node of
    /// the graphs has (out of line: with `dotless`, the common case,
    /// generated names clash with nothing).
    #[cold]
    fn unclashed(&self, base: CompactString) -> CompactString {
        let taken =
            |n: &str| self.g.find(n).is_some() || self.orig.is_some_and(|o| o.find(n).is_some());
        if !taken(&base) {
            return base;
        }
        (1..)
            .map(|i| compact_str::format_compact!("{base}_{i}"))
            .find(|n| !taken(n))
            .unwrap_or(base)
    }

    /// Adds node `name`: a reduction of `operands[0]` (no `like`), or an
    /// element-wise node that takes the dtype and shape of `like`
    /// ([`Graph::add_like`]); derived without inference when the
    /// composite is settled.
    fn add(
        &mut self,
        name: CompactString,
        op: Op,
        operands: &[NodeId],
        like: Option<NodeId>,
    ) -> Result<NodeId, GraphError> {
        if self.settled {
            // The dtype and shape the quick inference gives (see
            // `settled`), written straight into the node.
            let from = &self.g[like.unwrap_or(operands[0])];
            let dtype = from.dtype;
            let shape = match (&op, like) {
                (Op::Reduce { axes, keepdims, .. }, None) => {
                    quick_reduced(&from.shape, axes, *keepdims)
                }
                // One of `ELEMENTWISE`, which keep the dtype (`settled`).
                (Op::Unary(_) | Op::Scalar(..) | Op::Binary(_), Some(_)) => {
                    Some(to_shape(&from.shape))
                }
                _ => None,
            };
            if let Some(shape) = shape {
                return Ok(self.g.add_derived(Node {
                    op,
                    operands: Operands::from(operands),
                    name,
                    dtype,
                    shape,
                }));
            }
        }
        match like {
            Some(l) => self.g.add_like(name, op, operands, l),
            None => self.g.add_named(name, op, operands, None, None),
        }
    }

    /// The final node, named after the composite: a valid name of the
    /// original graph, which no generated name takes.
    /// It takes the dtype and shape of operand `like` ([`Graph::add_like`]).
    fn last_like(
        &mut self,
        op: Op,
        operands: &[NodeId],
        like: NodeId,
    ) -> Result<NodeId, GraphError> {
        self.add(self.name.clone(), op, operands, Some(like))
    }

    fn reduce(
        &mut self,
        suffix: &str,
        op: ReduceOp,
        x: NodeId,
        axes: &[usize],
    ) -> Result<NodeId, GraphError> {
        let op = Op::Reduce {
            op,
            axes: axes.to_vec(),
            keepdims: true,
        };
        self.node(suffix, op, &[x])
    }

    /// `sum(x, axes) / n`, the sum named with suffix `sum` and the division
    /// with `div`; without `div` the division is the final node.
    fn mean(
        &mut self,
        sum_suffix: &str,
        div: Option<&str>,
        x: NodeId,
        axes: &[usize],
        keepdims: bool,
    ) -> Result<NodeId, GraphError> {
        let shape = &self.g[x].shape;
        let constant = axes.iter().try_fold(1i64, |acc, &a| {
            shape[a].as_const().and_then(|c| acc.checked_mul(c))
        });
        let n = match constant {
            // Constant extents: their product (canonical already).
            Some(c) => Dim::val(c),
            None => {
                let n: Dim = axes.iter().map(|&a| &shape[a]).product();
                self.g.scope().canonical(&n)
            }
        };
        let sum = Op::Reduce {
            op: ReduceOp::Sum,
            axes: axes.to_vec(),
            keepdims,
        };
        let s = self.node(sum_suffix, sum, &[x])?;
        let div_op = match n.as_const() {
            Some(c) => Op::Scalar(Opcode::DivS, c as f64),
            None => Op::ScalarDim(Opcode::DivS, n),
        };
        match div {
            Some(suffix) => self.like(suffix, div_op, &[s], s),
            None => self.last_like(div_op, &[s], s),
        }
    }

    /// `trilu(x, upper, k)`: `where(j − i ≥ k, x, 0)` (upper) or
    /// `where(j − i ≤ k, x, 0)` (lower) over the last two axes `[N, M]`,
    /// with `i`, `j` from `iota(i32, [N, M])`.
    fn trilu(mut self, x: NodeId, upper: bool, k: i64) -> Result<NodeId, GraphError> {
        // The nodes change dtype (i32 indices, a bool mask): no shortcut.
        self.settled = false;
        let (dt, shape) = (self.g[x].dtype, self.g[x].shape.clone());
        let nm = shape[shape.len() - 2..].to_vec();
        let i = self.leaf(".row", Op::Iota { axis: 0 }, DType::I32, &nm)?;
        let j = self.leaf(".col", Op::Iota { axis: 1 }, DType::I32, &nm)?;
        let d = self.node(".diff", Op::Binary(Opcode::Sub), &[j, i])?;
        let code = if upper { Opcode::GeS } else { Opcode::LeS };
        let m = self.node(".mask", Op::Scalar(code, k as f64), &[d])?;
        let z = self.leaf(".zero", Op::Constant(vec![0.0]), dt, &[])?;
        self.add(self.name.clone(), Op::Where, &[m, x, z], None)
    }

    /// A node without operands (iota, constant) of `dtype` and `shape`.
    fn leaf(
        &mut self,
        suffix: &str,
        op: Op,
        dtype: DType,
        shape: &[Dim],
    ) -> Result<NodeId, GraphError> {
        let mut name = self.name.clone();
        name.push_str(suffix);
        let name = if self.dotless {
            name
        } else {
            self.unclashed(name)
        };
        if name.len() > super::MAX_NAME_LEN {
            check_name("node", &name)?;
        }
        self.g.add_named(name, op, &[], Some(dtype), Some(shape))
    }

    /// A node of declared `shape` (a reshape) named after the composite,
    /// or the final node (`suffix` `None`) that takes its name.
    fn shaped(
        &mut self,
        suffix: Option<&str>,
        op: Op,
        operands: &[NodeId],
        shape: &[Dim],
    ) -> Result<NodeId, GraphError> {
        let name = match suffix {
            None => self.name.clone(),
            Some(suffix) => self.fresh(suffix)?,
        };
        self.g.add_named(name, op, operands, None, Some(shape))
    }

    /// A generated name: the composite's with `suffix`, checked.
    fn fresh(&self, suffix: &str) -> Result<CompactString, GraphError> {
        let mut name = self.name.clone();
        name.push_str(suffix);
        let name = if self.dotless {
            name
        } else {
            self.unclashed(name)
        };
        check_name("node", &name)?;
        Ok(name)
    }

    /// The constant extent of `d` (checked when the composite was added).
    fn extent(&self, d: &Dim) -> Result<usize, GraphError> {
        d.as_const()
            .and_then(|c| usize::try_from(c).ok())
            .ok_or_else(|| GraphError::Invalid {
                node: self.name.to_string(),
                op: "decompose",
                msg: format!("extent {d} is not a constant"),
            })
    }

    /// `x` `[N, C, H, W]` padded by `pads` (top, left, bottom, right) with
    /// `fill`: concatenations with constants along H, then W.
    fn pad2d(&mut self, x: NodeId, pads: [usize; 4], fill: f64) -> Result<NodeId, GraphError> {
        let dt = self.g[x].dtype;
        let mut cur = x;
        for (axis, lo, hi, tag) in [(2, pads[0], pads[2], "h"), (3, pads[1], pads[3], "w")] {
            if lo == 0 && hi == 0 {
                continue;
            }
            let shape = self.g[cur].shape.to_vec();
            let side = |this: &mut Self, p: usize, which: &str| {
                let mut s = shape.clone();
                s[axis] = Dim::val(p as i64);
                let suffix = format!(".pad_{tag}{which}");
                this.leaf(&suffix, Op::Constant(vec![fill]), dt, &s)
            };
            let mut parts = Vec::with_capacity(3);
            if lo > 0 {
                parts.push(side(self, lo, "lo")?);
            }
            parts.push(cur);
            if hi > 0 {
                parts.push(side(self, hi, "hi")?);
            }
            cur = self.node(&format!(".pad_{tag}"), Op::Concat { axis }, &parts)?;
        }
        Ok(cur)
    }

    /// The strided slices `[N, C, OH, OW]` of the padded `xp`, one per
    /// kernel tap in row-major order (`a·KW + b` for tap `(a, b)`); a slice
    /// that would be all of `xp` is `xp` itself.
    fn taps(
        &mut self,
        xp: NodeId,
        kernel: [usize; 2],
        strides: [usize; 2],
        dilations: [usize; 2],
        out: [usize; 2],
    ) -> Result<Vec<NodeId>, GraphError> {
        let hw = [
            self.extent(&self.g[xp].shape[2])?,
            self.extent(&self.g[xp].shape[3])?,
        ];
        let mut taps = Vec::with_capacity(kernel[0] * kernel[1]);
        for a in 0..kernel[0] {
            for b in 0..kernel[1] {
                let mut ranges = Vec::with_capacity(2);
                for (i, k) in [a, b].into_iter().enumerate() {
                    let start = k * dilations[i];
                    let end = start + (out[i] - 1) * strides[i] + 1;
                    if start != 0 || end != hw[i] || (strides[i] != 1 && out[i] > 1) {
                        ranges.push((i + 2, start as i64, end as i64, strides[i] as i64));
                    }
                }
                if ranges.is_empty() {
                    taps.push(xp);
                } else {
                    let t = self.node(&format!(".tap{a}_{b}"), Op::Slice { ranges }, &[xp])?;
                    taps.push(t);
                }
            }
        }
        Ok(taps)
    }

    /// `conv2d(x, w[, b])` as im2col and a matmul (see the table above).
    fn conv2d(mut self, x: &[NodeId], a: &super::op::Conv2d) -> Result<NodeId, GraphError> {
        self.settled = false;
        let (xs, ws) = (self.g[x[0]].shape.clone(), self.g[x[1]].shape.clone());
        let n = xs[0].clone();
        let c = self.extent(&xs[1])?;
        let mut wd = [0usize; 4];
        for (i, d) in wd.iter_mut().enumerate() {
            *d = self.extent(&ws[i])?;
        }
        let [o, cg, kh, kw] = wd;
        let (h, w) = (self.extent(&xs[2])?, self.extent(&xs[3])?);
        let extent = |i: usize, e: usize, k: usize| {
            super::op::window_extent(e, a.pads[i], a.pads[i + 2], k, a.strides[i], a.dilations[i])
                .map_err(|m| GraphError::Invalid {
                    node: self.name.to_string(),
                    op: "conv2d",
                    msg: m,
                })
        };
        let (oh, ow) = (extent(0, h, kh)?, extent(1, w, kw)?);
        let (g, kk, l) = (a.groups, kh * kw, oh * ow);
        let d = |v: usize| Dim::val(v as i64);
        let xp = self.pad2d(x[0], a.pads, 0.0)?;
        let taps = self.taps(xp, [kh, kw], a.strides, a.dilations, [oh, ow])?;
        let stacked = if taps.len() == 1 {
            taps[0]
        } else {
            let mut cols = Vec::with_capacity(taps.len());
            for (i, &t) in taps.iter().enumerate() {
                let u = Op::Unsqueeze { axes: vec![2] };
                cols.push(self.node(&format!(".col{i}"), u, &[t])?);
            }
            self.node(".cols", Op::Concat { axis: 2 }, &cols)?
        };
        let (cols_shape, w_shape) = if g == 1 {
            (vec![n.clone(), d(c * kk), d(l)], vec![d(o), d(c * kk)])
        } else {
            (
                vec![n.clone(), d(g), d(cg * kk), d(l)],
                vec![d(g), d(o / g), d(cg * kk)],
            )
        };
        let cols = self.shaped(Some(".im2col"), Op::Reshape, &[stacked], &cols_shape)?;
        let wm = self.shaped(Some(".wmat"), Op::Reshape, &[x[1]], &w_shape)?;
        let mm = Op::MatMul {
            trans_a: false,
            trans_b: false,
        };
        let mut y = self.node(".mm", mm, &[wm, cols])?;
        if g > 1 {
            let s = [n.clone(), d(o), d(l)];
            y = self.shaped(Some(".ungroup"), Op::Reshape, &[y], &s)?;
        }
        if let Some(&b) = x.get(2) {
            let bc = self.shaped(Some(".bias"), Op::Reshape, &[b], &[d(o), d(1)])?;
            y = self.node(".add", Op::Binary(Opcode::Add), &[y, bc])?;
        }
        self.shaped(None, Op::Reshape, &[y], &[n, d(o), d(oh), d(ow)])
    }

    /// The window's output extents over `x`.
    fn pool_out(&self, x: NodeId, p: &super::op::Pool2d) -> Result<[usize; 2], GraphError> {
        let s = &self.g[x].shape;
        let mut out = [0; 2];
        for i in 0..2 {
            let e = self.extent(&s[i + 2])?;
            out[i] = super::op::window_extent(
                e,
                p.pads[i],
                p.pads[i + 2],
                p.kernel[i],
                p.strides[i],
                p.dilations[i],
            )
            .map_err(|m| GraphError::Invalid {
                node: self.name.to_string(),
                op: "pool2d",
                msg: m,
            })?;
        }
        Ok(out)
    }

    /// `op` folded over `taps` left to right (intermediate nodes).
    fn fold(&mut self, taps: &[NodeId], op: Opcode, tag: &str) -> Result<NodeId, GraphError> {
        let mut acc = taps[0];
        for (i, &t) in taps.iter().enumerate().skip(1) {
            acc = self.node(&format!(".{tag}{i}"), Op::Binary(op), &[acc, t])?;
        }
        Ok(acc)
    }

    /// `max_pool2d(x)`: −∞ padding and `max` over the taps.
    fn max_pool2d(mut self, x: NodeId, p: &super::op::Pool2d) -> Result<NodeId, GraphError> {
        self.settled = false;
        let out = self.pool_out(x, p)?;
        let xp = self.pad2d(x, p.pads, f64::NEG_INFINITY)?;
        let taps = self.taps(xp, p.kernel, p.strides, p.dilations, out)?;
        let (last, rest) = taps.split_last().expect("a kernel has a tap");
        if rest.is_empty() {
            let s = self.g[*last].shape.to_vec();
            return self.shaped(None, Op::Reshape, &[*last], &s);
        }
        let acc = self.fold(rest, Opcode::Max, "max")?;
        self.add(
            self.name.clone(),
            Op::Binary(Opcode::Max),
            &[acc, *last],
            None,
        )
    }

    /// `avg_pool2d(x)`: zero padding, `add` over the taps, and a division
    /// by the kernel's size or by the taps inside the input.
    fn avg_pool2d(
        mut self,
        x: NodeId,
        p: &super::op::Pool2d,
        count_include_pad: bool,
    ) -> Result<NodeId, GraphError> {
        self.settled = false;
        let out = self.pool_out(x, p)?;
        let s = &self.g[x].shape;
        let hw = [self.extent(&s[2])?, self.extent(&s[3])?];
        let xp = self.pad2d(x, p.pads, 0.0)?;
        let taps = self.taps(xp, p.kernel, p.strides, p.dilations, out)?;
        let sum = self.fold(&taps, Opcode::Add, "sum")?;
        let kk = p.kernel[0] * p.kernel[1];
        // Taps inside the input of each output position along H and W.
        let inside = |i: usize| -> Vec<usize> {
            (0..out[i])
                .map(|o| {
                    (0..p.kernel[i])
                        .map(|k| o * p.strides[i] + k * p.dilations[i])
                        .filter(|&t| t >= p.pads[i] && t < p.pads[i] + hw[i])
                        .count()
                })
                .collect()
        };
        let counts: Vec<f64> = if count_include_pad {
            Vec::new()
        } else {
            let (ch, cw) = (inside(0), inside(1));
            ch.iter()
                .flat_map(|&a| cw.iter().map(move |&b| (a * b) as f64))
                .collect()
        };
        if counts.iter().all(|&c| c == kk as f64) {
            let div = Op::Scalar(Opcode::DivS, kk as f64);
            return self.add(self.name.clone(), div, &[sum], Some(sum));
        }
        let dt = self.g[x].dtype;
        let shape = [Dim::val(out[0] as i64), Dim::val(out[1] as i64)];
        let k = self.leaf(".count", Op::Constant(counts), dt, &shape)?;
        self.add(self.name.clone(), Op::Binary(Opcode::Div), &[sum, k], None)
    }

    fn composite(mut self, node: &Node, x: &[NodeId]) -> Result<NodeId, GraphError> {
        use Opcode::{Add, Exp, Log, Mul, Recip, Rsqrt, Sub};
        match node.op {
            Op::Reduce {
                op: ReduceOp::Mean,
                ref axes,
                keepdims,
            } => self.mean(".sum", None, x[0], axes, keepdims),
            Op::Softmax { axis } => {
                let m = self.reduce(".max", ReduceOp::Max, x[0], &[axis])?;
                let d = self.like(".sub", Op::Binary(Sub), &[x[0], m], x[0])?;
                let e = self.like(".exp", Op::Unary(Exp), &[d], d)?;
                let s = self.reduce(".sum", ReduceOp::Sum, e, &[axis])?;
                // One reciprocal per row and a multiply per element: a
                // division per element costs several times a multiply.
                let r = self.like(".recip", Op::Unary(Recip), &[s], s)?;
                self.last_like(Op::Binary(Mul), &[e, r], e)
            }
            Op::LogSoftmax { axis } => {
                let m = self.reduce(".max", ReduceOp::Max, x[0], &[axis])?;
                let d = self.like(".sub", Op::Binary(Sub), &[x[0], m], x[0])?;
                let e = self.like(".exp", Op::Unary(Exp), &[d], d)?;
                let s = self.reduce(".sum", ReduceOp::Sum, e, &[axis])?;
                let l = self.like(".log", Op::Unary(Log), &[s], s)?;
                self.last_like(Op::Binary(Sub), &[d, l], d)
            }
            Op::LayerNorm { eps } => {
                let axis = self.g[x[0]].shape.len() - 1;
                let mu = self.mean(".mean_sum", Some(".mean"), x[0], &[axis], true)?;
                let d = self.like(".sub", Op::Binary(Sub), &[x[0], mu], x[0])?;
                let sq = self.like(".sq", Op::Binary(Mul), &[d, d], d)?;
                let var = self.mean(".var_sum", Some(".var"), sq, &[axis], true)?;
                let ve = self.like(".eps", Op::Scalar(Opcode::AddS, eps), &[var], var)?;
                let r = self.like(".rsqrt", Op::Unary(Rsqrt), &[ve], ve)?;
                let n = self.like(".norm", Op::Binary(Mul), &[d, r], d)?;
                // The weights have the shape of the last axis (checked
                // when the composite was added).
                let gy = self.like(".scale", Op::Binary(Mul), &[n, x[1]], n)?;
                self.last_like(Op::Binary(Add), &[gy, x[2]], gy)
            }
            Op::RmsNorm { eps } => {
                let axis = self.g[x[0]].shape.len() - 1;
                let sq = self.like(".sq", Op::Binary(Mul), &[x[0], x[0]], x[0])?;
                let ms = self.mean(".ms_sum", Some(".ms"), sq, &[axis], true)?;
                let ve = self.like(".eps", Op::Scalar(Opcode::AddS, eps), &[ms], ms)?;
                let r = self.like(".rsqrt", Op::Unary(Rsqrt), &[ve], ve)?;
                let n = self.like(".norm", Op::Binary(Mul), &[x[0], r], x[0])?;
                self.last_like(Op::Binary(Mul), &[n, x[1]], n)
            }
            Op::Trilu { upper, k } => self.trilu(x[0], upper, k),
            Op::Conv2d(ref a) => self.conv2d(x, a),
            Op::MaxPool2d(ref p) => self.max_pool2d(x[0], p),
            Op::AvgPool2d {
                ref pool,
                count_include_pad,
            } => self.avg_pool2d(x[0], pool, count_include_pad),
            _ => {
                let id = self.g.push(Node {
                    operands: Operands::from(x),
                    ..node.clone()
                });
                Ok(id)
            }
        }
    }
}
