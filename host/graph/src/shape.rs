//! Shape and dtype inference: the checks every node passes when it is added.

use dvm_isa::{DType, DTypeSet, Opcode};

use super::error::GraphError;
use super::op::{accepts_dtype, is_comparison, opcode_dtypes, opcode_kind, OpcodeKind};
use super::{check_name, CompactString, Graph, Node, NodeId, Op, Operands, ReduceOp, Shape};
use dvm_sym::{Dim, SymbolScope};
use dvm_tensor::{convert, numel};

/// Operand facts needed by inference.
#[derive(Clone, Copy)]
pub(crate) struct Arg<'a> {
    pub(crate) name: &'a str,
    pub(crate) dtype: DType,
    pub(crate) shape: &'a [Dim],
}

/// The node being checked, for error messages.
pub(crate) struct Ctx<'a> {
    pub(crate) node: &'a str,
    pub(crate) op: &'static str,
}

impl Ctx<'_> {
    pub(crate) fn invalid(&self, msg: impl Into<String>) -> GraphError {
        GraphError::Invalid {
            node: self.node.to_owned(),
            op: self.op,
            msg: msg.into(),
        }
    }

    pub(crate) fn arity(&self, expected: &'static str, got: usize) -> GraphError {
        GraphError::Arity {
            node: self.node.to_owned(),
            op: self.op,
            expected,
            got,
        }
    }

    fn dtype(&self, index: usize, arg: &Arg, allowed: DTypeSet) -> GraphError {
        GraphError::DType {
            node: self.node.to_owned(),
            op: self.op,
            operand: format!("operand {index} (`{}`)", arg.name),
            dtype: arg.dtype,
            allowed,
        }
    }

    fn mismatch(&self, what: &str, lhs: &[Dim], rhs: &[Dim], ld: &Dim, rd: &Dim) -> GraphError {
        GraphError::ShapeMismatch {
            node: self.node.to_owned(),
            op: self.op,
            lhs: lhs.to_vec(),
            rhs: rhs.to_vec(),
            what: what.to_owned(),
            dims: Box::new((ld.clone(), rd.clone())),
        }
    }
}

/// Normalises an axis (`-1` is the last) against `rank`.
pub(crate) fn norm_axis(cx: &Ctx<'_>, axis: i64, rank: usize) -> Result<usize, GraphError> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&a) {
        Ok(a as usize)
    } else if r == 0 {
        Err(cx.invalid(format!(
            "axis {axis} is out of range: the operand has rank 0 (no axes)"
        )))
    } else {
        Err(cx.invalid(format!(
            "axis {axis} is out of range for rank {rank} (valid: {}..={})",
            -r,
            r - 1
        )))
    }
}

/// Checks a list of axes: each below `rank`, no repeats; returns them sorted.
fn sorted_axes(cx: &Ctx<'_>, axes: &[usize], rank: usize) -> Result<Vec<usize>, GraphError> {
    let mut v = axes.to_vec();
    if let Some(&a) = v.iter().find(|&&a| a >= rank) {
        return Err(cx.invalid(format!("axis {a} is out of range for rank {rank}")));
    }
    v.sort_unstable();
    if let Some(w) = v.windows(2).find(|w| w[0] == w[1]) {
        return Err(cx.invalid(format!("axis {} is listed twice", w[0])));
    }
    Ok(v)
}

fn product(dims: &[Dim]) -> Dim {
    dims.iter().product()
}

impl Graph {
    /// Adds a node: the generic form behind every builder method.
    ///
    /// `op` carries normalised (non-negative) axes. `dtype` is required by
    /// [`Op::Input`], [`Op::Constant`] and [`Op::Cast`] (the target type) and
    /// ignored otherwise; `shape` is required by `Input`, `Constant`,
    /// [`Op::Reshape`] and [`Op::Expand`] (the target shape, in which `-1`
    /// means "inferred" for reshape and "keep the operand's extent" for
    /// expand) and ignored otherwise. Without `name` the node is named after
    /// its op and id (`add_7`).
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownNode`] for a foreign operand id;
    /// [`GraphError::InvalidName`] / [`GraphError::DuplicateName`] for the
    /// name; otherwise the shape, dtype, arity and attribute errors described
    /// in the [module docs](super), each naming the node and its op. The
    /// graph is unchanged on error.
    pub fn add_node(
        &mut self,
        name: Option<&str>,
        op: Op,
        operands: &[NodeId],
        dtype: Option<DType>,
        shape: Option<&[Dim]>,
    ) -> Result<NodeId, GraphError> {
        let name = match name {
            Some(n) => {
                check_name("node", n)?;
                if self.find(n).is_some() {
                    return Err(GraphError::DuplicateName {
                        kind: "node",
                        name: n.to_owned(),
                    });
                }
                CompactString::from(n)
            }
            None => self
                .fresh_name(&format!("{}_{}", op.name(), self.nodes.len()))
                .into(),
        };
        self.add_named(name, op, operands, dtype, shape)
    }

    /// [`Graph::add_node`] with a name that the caller knows to be valid
    /// and unused: the name is neither checked nor looked up (the eager
    /// API copies windows whose names are unique by construction). A name
    /// that breaks the contract is caught by a debug assertion; in release
    /// builds it leaves two nodes of one name, and [`Graph::find`] finds
    /// the first.
    ///
    /// # Errors
    /// As [`Graph::add_node`], except for the name's checks.
    pub fn add_named(
        &mut self,
        name: CompactString,
        op: Op,
        operands: &[NodeId],
        dtype: Option<DType>,
        shape: Option<&[Dim]>,
    ) -> Result<NodeId, GraphError> {
        debug_assert!(self.find(&name).is_none() && check_name("node", &name).is_ok());
        // The operands' facts: on the stack for up to four operands.
        let arg = |id: NodeId| {
            self.check(id).map(|n| Arg {
                name: &n.name,
                dtype: n.dtype,
                shape: &n.shape,
            })
        };
        let mut few = [Arg {
            name: "",
            dtype: DType::F32,
            shape: &[],
        }; 4];
        let many: Vec<Arg<'_>>;
        let args: &[Arg<'_>] = if operands.len() <= few.len() {
            for (slot, &id) in few.iter_mut().zip(operands) {
                *slot = arg(id)?;
            }
            &few[..operands.len()]
        } else {
            many = operands
                .iter()
                .map(|&id| arg(id))
                .collect::<Result<_, _>>()?;
            &many
        };
        let (op, dtype, shape) = match quick_infer(&self.scope, &op, args) {
            Some((dt, s)) => (op, dt, s),
            None => {
                let cx = Ctx {
                    node: &name,
                    op: op.name(),
                };
                infer(&self.scope, &cx, op, args, dtype, shape)?
            }
        };
        Ok(self.push(Node {
            op,
            operands: Operands::from(operands),
            name,
            dtype,
            shape,
        }))
    }
}

impl Graph {
    /// [`Graph::add_named`] for an element-wise node whose result is known
    /// to take the dtype and shape of its operand `like` (a decomposition's
    /// node over a row and a reduced row, say): a unary or scalar op on
    /// `like`, or a binary op (not a comparison) over operands of constant
    /// shapes, each of which has `like`'s extent or 1 on every axis
    /// (right-aligned, no more axes than `like`), all of `like`'s float
    /// dtype, which the opcode accepts. That is what [`Graph::add_named`]
    /// infers for them, without its general inference; anything else goes
    /// through [`Graph::add_named`], errors included.
    pub(crate) fn add_like(
        &mut self,
        name: CompactString,
        op: Op,
        operands: &[NodeId],
        like: NodeId,
    ) -> Result<NodeId, GraphError> {
        let known = match self.nodes.get(like.0) {
            Some(l) if operands.contains(&like) => self.is_like(&op, operands, like, l),
            _ => false,
        };
        if !known {
            return self.add_named(name, op, operands, None, None);
        }
        let l = &self.nodes[like.0];
        let (dtype, shape) = (l.dtype, l.shape.clone());
        Ok(self.add_derived(Node {
            op,
            operands: Operands::from(operands),
            name,
            dtype,
            shape,
        }))
    }

    /// Appends `node`, whose dtype and shape the caller derived from its
    /// operands as [`Graph::add_named`] would infer them (a decomposition
    /// knows them from the composite's), and whose name is known to be
    /// valid and unused. Debug builds check the derivation against the
    /// inference.
    pub(crate) fn add_derived(&mut self, node: Node) -> NodeId {
        #[cfg(debug_assertions)]
        {
            let args = self.args_of(&node.operands);
            let cx = Ctx {
                node: &node.name,
                op: node.op.name(),
            };
            let inferred = quick_infer(&self.scope, &node.op, &args).or_else(|| {
                infer(&self.scope, &cx, node.op.clone(), &args, None, None)
                    .ok()
                    .map(|(_, d, s)| (d, s))
            });
            let derived = Some((node.dtype, node.shape.clone()));
            debug_assert_eq!(inferred, derived, "derived {}", node.name);
        }
        self.push(node)
    }

    /// [`Graph::add_like`]'s test: `op` over `operands` gives the dtype
    /// and shape of `like`, node `id`, one of the operands.
    fn is_like(&self, op: &Op, operands: &[NodeId], id: NodeId, like: &Node) -> bool {
        let dt = like.dtype;
        if !dt.is_float() || !keeps_dtype(op, dt) {
            return false;
        }
        match (op, operands) {
            (Op::Unary(_) | Op::Scalar(..), [_]) => true,
            (Op::Binary(_), [_, _]) => {
                let l = &like.shape[..];
                l.iter().all(Dim::is_const)
                    && operands.iter().all(|&o| {
                        o == id
                            || self.nodes.get(o.0).is_some_and(|n| {
                                n.dtype == dt
                                    && n.shape.len() <= l.len()
                                    && n.shape.iter().rev().zip(l.iter().rev()).all(|(d, e)| {
                                        d.is_const() && (d == e || d.as_const() == Some(1))
                                    })
                            })
                    })
            }
            _ => false,
        }
    }
}

/// The instruction set accepts `code`, of graph role `kind`, for elements
/// of `dtype`, and it is not a comparison (whose result is bool).
fn accepts(code: Opcode, kind: OpcodeKind, dtype: DType) -> bool {
    opcode_kind(code) == Some(kind)
        && !is_comparison(code)
        && opcode_dtypes(code).is_none_or(|d| accepts_dtype(d, dtype))
}

/// `op` is an element-wise operator whose result has its operands'
/// dtype `dtype`, as [`quick_infer`] infers it: a unary (not `isfinite`),
/// scalar or binary opcode, not a comparison, that accepts `dtype`.
pub(crate) fn keeps_dtype(op: &Op, dtype: DType) -> bool {
    match *op {
        Op::Unary(code) => code != Opcode::IsFinite && accepts(code, OpcodeKind::Unary, dtype),
        Op::Scalar(code, _) => accepts(code, OpcodeKind::Scalar, dtype),
        Op::Binary(code) => accepts(code, OpcodeKind::Binary, dtype),
        _ => false,
    }
}

type Inferred = (Op, DType, Shape);

impl Graph {
    /// The inference arguments of existing nodes `operands` (for checks
    /// against the full inference: tests and debug assertions).
    #[cfg(any(test, debug_assertions))]
    fn args_of(&self, operands: &[NodeId]) -> Vec<Arg<'_>> {
        operands
            .iter()
            .map(|&o| Arg {
                name: &self[o].name,
                dtype: self[o].dtype,
                shape: &self[o].shape,
            })
            .collect()
    }

    /// Node `id` inferred again from its operands with [`infer`] alone
    /// (for tests of the quick path).
    #[cfg(test)]
    pub(crate) fn reinfer(&self, id: NodeId) -> Result<Inferred, GraphError> {
        let node = &self[id];
        let args = self.args_of(&node.operands);
        let cx = Ctx {
            node: &node.name,
            op: node.op.name(),
        };
        let (dtype, shape) = match node.op {
            Op::Input | Op::Constant(_) | Op::Cast | Op::Iota { .. } => {
                (Some(node.dtype), Some(&node.shape[..]))
            }
            Op::Reshape | Op::Expand => (None, Some(&node.shape[..])),
            _ => (None, None),
        };
        infer(&self.scope, &cx, node.op.clone(), &args, dtype, shape)
    }
}

/// [`infer`]'s answer for the common operators that need neither a proof
/// nor an error path: element-wise (not comparisons) and reduce operators
/// over operands of one float dtype the opcode accepts, binary ones over
/// settled shapes ([`quick_broadcast`]) that are equal or differ by 1s
/// (right-aligned),
/// reductions over sorted axes in range. `None` for anything else, which goes through
/// [`infer`]; where this answers, [`infer`] answers the same (the graph
/// tests re-infer every node of generated graphs).
fn quick_infer(scope: &SymbolScope, op: &Op, args: &[Arg<'_>]) -> Option<(DType, Shape)> {
    let a = args.first()?;
    if !a.dtype.is_float() || args.iter().any(|b| b.dtype != a.dtype) {
        return None;
    }
    match (op, args) {
        (Op::Unary(_) | Op::Scalar(..), [_]) if keeps_dtype(op, a.dtype) => {
            Some((a.dtype, Shape::from(a.shape)))
        }
        (Op::Binary(_), [_, b]) if keeps_dtype(op, a.dtype) => {
            quick_broadcast(scope, a.shape, b.shape).map(|s| (a.dtype, s))
        }
        (Op::Reduce { axes, keepdims, .. }, [_]) => {
            quick_reduced(a.shape, axes, *keepdims).map(|s| (a.dtype, s))
        }
        _ => None,
    }
}

/// [`quick_infer`]'s shape of a reduction of `shape` over `axes`: `None`
/// unless the axes are sorted, unique and in range.
pub(crate) fn quick_reduced(shape: &[Dim], axes: &[usize], keepdims: bool) -> Option<Shape> {
    let sorted = axes.windows(2).all(|w| w[0] < w[1]);
    let in_range = axes.last().is_some_and(|&l| l < shape.len());
    (sorted && in_range).then(|| reduced_shape(shape, axes, keepdims))
}

/// [`broadcast`] of shapes whose dimensions are settled (constants, or
/// symbols that are their own canonical form: [`SymbolScope::is_settled`])
/// and pair up as equal or 1 against anything; `None` when a pair does not,
/// or a dimension is not settled ([`broadcast`] puts those in canonical
/// form, which may have changed since the operands were made).
fn quick_broadcast(scope: &SymbolScope, a: &[Dim], b: &[Dim]) -> Option<Shape> {
    if a == b {
        return a
            .iter()
            .all(|d| d.is_const() || scope.is_settled(d))
            .then(|| Shape::from(a));
    }
    let r = a.len().max(b.len());
    let mut out = Shape::with_capacity(r);
    for i in 0..r {
        let da = (i + a.len()).checked_sub(r).map(|j| &a[j]);
        let db = (i + b.len()).checked_sub(r).map(|j| &b[j]);
        let d = match (da, db) {
            // An axis only one side has: the other side's implicit 1.
            (Some(d), None) | (None, Some(d)) => d,
            (Some(da), Some(db)) => match (da.as_const(), db.as_const()) {
                (Some(x), Some(y)) if x == y || y == 1 => da,
                (Some(1), Some(_)) => db,
                (Some(_), Some(_)) => return None,
                _ if da == db || db.as_const() == Some(1) => da,
                (Some(1), _) => db,
                _ => return None,
            },
            (None, None) => return None,
        };
        if !d.is_const() && !scope.is_settled(d) {
            return None;
        }
        out.push(d.clone());
    }
    Some(out)
}

/// Most nodes of one extent's expression ([`Dim::size`]): beyond it
/// a node's shape is refused rather than carried on. Every operation
/// canonicalises its result's extents, at a cost that grows with their
/// size (faster than linearly: bounds are taken of the arguments of every
/// `min` and `max` inside), and an operator that uses an extent twice
/// (a slice with a negative start and a non-negative end) doubles it
/// along a chain of such operators: without a limit a graph of a few
/// dozen operators could keep the compiler busy for hours. Real models'
/// extents are a few dozen nodes; a chain of 250 slices and concats along
/// one axis reaches this.
pub(crate) const MAX_EXTENT_NODES: usize = 1024;

/// Checks `op` over `args` and computes the result's dtype and shape.
///
/// # Errors
///
/// As the checks of each operator say, and [`GraphError::Invalid`] when an
/// extent of the result's shape has more than [`MAX_EXTENT_NODES`] nodes.
pub(crate) fn infer(
    scope: &SymbolScope,
    cx: &Ctx<'_>,
    op: Op,
    args: &[Arg],
    dtype: Option<DType>,
    shape: Option<&[Dim]>,
) -> Result<Inferred, GraphError> {
    let inferred = infer_op(scope, cx, op, args, dtype, shape)?;
    for (axis, d) in inferred.2.iter().enumerate() {
        if d.size() > MAX_EXTENT_NODES {
            return Err(cx.invalid(format!(
                "the symbolic extent of axis {axis} grows beyond {MAX_EXTENT_NODES} terms \
                 (a long chain of slices or concatenations along one axis?); declare \
                 the inputs it comes from with concrete extents on that axis"
            )));
        }
    }
    Ok(inferred)
}

/// The inputs of one inference: the operands and the declared dtype/shape.
struct Rule<'a> {
    scope: &'a SymbolScope,
    cx: &'a Ctx<'a>,
    args: &'a [Arg<'a>],
    dtype: Option<DType>,
    shape: Option<&'a [Dim]>,
}

impl Rule<'_> {
    fn need(&self, n: usize, text: &'static str) -> Result<(), GraphError> {
        if self.args.len() == n {
            Ok(())
        } else {
            Err(self.cx.arity(text, self.args.len()))
        }
    }

    fn want_dtype(&self) -> Result<DType, GraphError> {
        self.dtype
            .ok_or_else(|| self.cx.invalid("needs a result dtype"))
    }

    fn want_shape(&self) -> Result<&[Dim], GraphError> {
        self.shape
            .ok_or_else(|| self.cx.invalid("needs a target shape"))
    }

    fn canon(&self, d: &Dim) -> Dim {
        self.scope.canonical(d)
    }
}

/// [`infer`] before its check of the result's extents.
fn infer_op(
    scope: &SymbolScope,
    cx: &Ctx<'_>,
    op: Op,
    args: &[Arg],
    dtype: Option<DType>,
    shape: Option<&[Dim]>,
) -> Result<Inferred, GraphError> {
    let r = Rule {
        scope,
        cx,
        args,
        dtype,
        shape,
    };
    match op {
        Op::Input => infer_input(&r),
        Op::Constant(values) => infer_constant(&r, values),
        Op::Unary(_) | Op::Binary(_) | Op::Scalar(..) | Op::ScalarDim(..) => {
            infer_elementwise(&r, op)
        }
        Op::Where => infer_where(&r),
        Op::Cast => {
            r.need(1, "1")?;
            Ok((Op::Cast, r.want_dtype()?, Shape::from(args[0].shape)))
        }
        Op::Reduce {
            op: rop,
            axes,
            keepdims,
        } => infer_reduce(&r, rop, &axes, keepdims),
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            r.need(1, "1")?;
            let a = &args[0];
            float_only(cx, 0, a)?;
            sorted_axes(cx, &[axis], a.shape.len())?;
            Ok((op, a.dtype, Shape::from(a.shape)))
        }
        Op::LayerNorm { .. } | Op::RmsNorm { .. } => infer_norm(&r, op),
        Op::MatMul { trans_a, trans_b } => infer_matmul(&r, trans_a, trans_b),
        Op::Reshape => {
            r.need(1, "1")?;
            let a = &args[0];
            let s = reshape(scope, cx, a.shape, r.want_shape()?)?;
            Ok((Op::Reshape, a.dtype, s))
        }
        Op::Transpose { perm } => infer_transpose(&r, perm),
        Op::Slice { ranges } => infer_slice(&r, ranges),
        Op::Concat { axis } => infer_concat(&r, axis),
        Op::Expand => {
            r.need(1, "1")?;
            let a = &args[0];
            let s = expand(scope, cx, a.shape, r.want_shape()?)?;
            Ok((Op::Expand, a.dtype, s))
        }
        Op::Squeeze { axes } => infer_squeeze(&r, &axes),
        Op::Unsqueeze { axes } => infer_unsqueeze(&r, &axes),
        Op::Iota { axis } => infer_iota(&r, axis),
        Op::Trilu { upper, k } => {
            r.need(1, "1")?;
            let a = &args[0];
            if a.shape.len() < 2 {
                return Err(cx.invalid(format!(
                    "operand 0 (`{}`) has shape {}: trilu needs rank >= 2",
                    a.name,
                    super::ShapeDisplay(a.shape)
                )));
            }
            Ok((Op::Trilu { upper, k }, a.dtype, Shape::from(a.shape)))
        }
        Op::Gather { axis } => infer_gather(&r, axis),
        Op::Conv2d(attrs) => infer_conv2d(&r, attrs),
        op @ (Op::MaxPool2d(_) | Op::AvgPool2d { .. }) => infer_pool2d(&r, op),
    }
}

/// `gather`: a table of rank ≥ 1, an axis of it, `i32` or `i64` indices;
/// the result is `x.shape[..axis] ++ idx.shape ++ x.shape[axis+1..]`.
fn infer_gather(r: &Rule<'_>, axis: usize) -> Result<Inferred, GraphError> {
    r.need(2, "2")?;
    let (x, idx) = (&r.args[0], &r.args[1]);
    sorted_axes(r.cx, &[axis], x.shape.len())?;
    if !matches!(idx.dtype, DType::I32 | DType::I64) {
        return Err(r.cx.invalid(format!(
            "operand 1 (`{}`) is {}: gather indices are i32 or i64",
            idx.name, idx.dtype
        )));
    }
    let mut s = Shape::with_capacity(x.shape.len() + idx.shape.len() - 1);
    s.extend(x.shape[..axis].iter().cloned());
    s.extend(idx.shape.iter().cloned());
    s.extend(x.shape[axis + 1..].iter().cloned());
    Ok((Op::Gather { axis }, x.dtype, s))
}

/// `iota`: a numeric dtype, a declared shape, an axis of it.
fn infer_iota(r: &Rule<'_>, axis: usize) -> Result<Inferred, GraphError> {
    r.need(0, "0")?;
    let dt = r.want_dtype()?;
    if !accepts_dtype(DTypeSet::NUM, dt) {
        return Err(r.cx.invalid(format!(
            "dtype {dt} cannot hold indices (allowed: {})",
            DTypeSet::NUM
        )));
    }
    let s = declared_shape(r.scope, r.cx, r.want_shape()?)?;
    sorted_axes(r.cx, &[axis], s.len())?;
    Ok((Op::Iota { axis }, dt, s))
}

/// `input`: the declared dtype and shape.
fn infer_input(r: &Rule<'_>) -> Result<Inferred, GraphError> {
    r.need(0, "0")?;
    let dt = r.want_dtype()?;
    let s = declared_shape(r.scope, r.cx, r.want_shape()?)?;
    Ok((Op::Input, dt, s))
}

/// `constant`: one value per element, or one fill value.
fn infer_constant(r: &Rule<'_>, values: Vec<f64>) -> Result<Inferred, GraphError> {
    let cx = r.cx;
    r.need(0, "0")?;
    let dt = r.want_dtype()?;
    let s = declared_shape(r.scope, cx, r.want_shape()?)?;
    let count = s.iter().map(Dim::as_const).collect::<Option<Vec<_>>>();
    if values.len() != 1 {
        let count = count
            .and_then(|c| {
                c.iter()
                    .map(|&d| u64::try_from(d).ok())
                    .collect::<Option<Vec<_>>>()
            })
            .and_then(|c| numel(&c));
        match count {
            Some(n) if n == values.len() => {}
            Some(n) => {
                return Err(cx.invalid(format!(
                    "shape {} has {n} elements but {} values are given",
                    super::ShapeDisplay(&s),
                    values.len()
                )))
            }
            None => {
                return Err(cx.invalid(format!(
                    "a constant of symbolic shape {} must have exactly one value (a fill), got {}",
                    super::ShapeDisplay(&s),
                    values.len()
                )))
            }
        }
    }
    let values = values.into_iter().map(|v| convert(dt, v)).collect();
    Ok((Op::Constant(values), dt, s))
}

/// Element-wise opcodes: unary, binary (broadcast) and scalar forms.
fn infer_elementwise(r: &Rule<'_>, op: Op) -> Result<Inferred, GraphError> {
    let (cx, args) = (r.cx, r.args);
    match op {
        Op::Unary(code) => {
            r.need(1, "1")?;
            check_kind(cx, code, OpcodeKind::Unary)?;
            let a = &args[0];
            check_dtype(cx, code, 0, a)?;
            let dt = if code == Opcode::IsFinite {
                DType::Bool
            } else {
                a.dtype
            };
            Ok((op, dt, Shape::from(a.shape)))
        }
        Op::Binary(code) => {
            r.need(2, "2")?;
            check_kind(cx, code, OpcodeKind::Binary)?;
            same_dtype(cx, &args[0], &args[1])?;
            check_dtype(cx, code, 0, &args[0])?;
            let s = broadcast(r.scope, cx, args[0].shape, args[1].shape)?;
            let dt = if is_comparison(code) {
                DType::Bool
            } else {
                args[0].dtype
            };
            Ok((op, dt, s))
        }
        Op::Scalar(code, _) | Op::ScalarDim(code, _) => {
            r.need(1, "1")?;
            check_kind(cx, code, OpcodeKind::Scalar)?;
            let a = &args[0];
            check_dtype(cx, code, 0, a)?;
            let dt = if is_comparison(code) {
                DType::Bool
            } else {
                a.dtype
            };
            let op = match op {
                Op::ScalarDim(c, d) => match r.canon(&d).as_const() {
                    // A constant is an ordinary scalar.
                    Some(v) => Op::Scalar(c, v as f64),
                    None => Op::ScalarDim(c, r.canon(&d)),
                },
                other => other,
            };
            Ok((op, dt, Shape::from(a.shape)))
        }
        other => Err(cx.invalid(format!("`{}` is not element-wise", other.name()))),
    }
}

/// `where(cond, a, b)`: a bool condition, broadcast over all three.
fn infer_where(r: &Rule<'_>) -> Result<Inferred, GraphError> {
    let (cx, args) = (r.cx, r.args);
    r.need(3, "3 (cond, a, b)")?;
    if args[0].dtype != DType::Bool {
        return Err(cx.dtype(0, &args[0], DType::Bool.set()));
    }
    same_dtype(cx, &args[1], &args[2])?;
    let s = broadcast(r.scope, cx, args[0].shape, args[1].shape)?;
    let s = broadcast(r.scope, cx, &s, args[2].shape)?;
    Ok((Op::Where, args[1].dtype, s))
}

/// Reductions: numeric operands (float for mean), at least one axis.
fn infer_reduce(
    r: &Rule<'_>,
    rop: ReduceOp,
    axes: &[usize],
    keepdims: bool,
) -> Result<Inferred, GraphError> {
    let cx = r.cx;
    r.need(1, "1")?;
    let a = &r.args[0];
    let allowed = if rop == ReduceOp::Mean {
        DTypeSet::FLOAT
    } else {
        DTypeSet::NUM
    };
    if !accepts_dtype(allowed, a.dtype) {
        return Err(cx.dtype(0, a, allowed));
    }
    if axes.is_empty() {
        return Err(cx.invalid("no axes to reduce (list every axis for a full reduction)"));
    }
    let axes = sorted_axes(cx, axes, a.shape.len())?;
    let s = reduced_shape(a.shape, &axes, keepdims);
    Ok((
        Op::Reduce {
            op: rop,
            axes,
            keepdims,
        },
        a.dtype,
        s,
    ))
}

/// Layer and RMS norm: float `x`, weights of shape `[last axis]`.
fn infer_norm(r: &Rule<'_>, op: Op) -> Result<Inferred, GraphError> {
    let (cx, args) = (r.cx, r.args);
    let eps = match op {
        Op::LayerNorm { eps } => {
            r.need(3, "3 (x, gamma, beta)")?;
            eps
        }
        Op::RmsNorm { eps } => {
            r.need(2, "2 (x, gamma)")?;
            eps
        }
        ref other => return Err(cx.invalid(format!("`{}` is not a norm", other.name()))),
    };
    if !eps.is_finite() || eps < 0.0 {
        return Err(cx.invalid(format!("eps must be finite and >= 0, got {eps}")));
    }
    let x = &args[0];
    float_only(cx, 0, x)?;
    let Some(last) = x.shape.last() else {
        return Err(cx.invalid("normalises the last axis: needs rank >= 1, got a scalar"));
    };
    for w in &args[1..] {
        same_dtype(cx, x, w)?;
        let ok = matches!(w.shape, [d] if r.scope.prove_eq(d, last));
        if !ok {
            let wd = w.shape.last().cloned().unwrap_or(Dim::ZERO);
            return Err(cx.mismatch(
                &format!("weight `{}` must have shape [{last}]:", w.name),
                x.shape,
                w.shape,
                last,
                &wd,
            ));
        }
    }
    Ok((op, x.dtype, Shape::from(x.shape)))
}

/// `matmul`: contraction dims equal, batch axes broadcast.
fn infer_matmul(r: &Rule<'_>, trans_a: bool, trans_b: bool) -> Result<Inferred, GraphError> {
    let cx = r.cx;
    r.need(2, "2")?;
    let (a, b) = (&r.args[0], &r.args[1]);
    same_dtype(cx, a, b)?;
    if !DTypeSet::MM_IN.contains(a.dtype) {
        return Err(cx.dtype(0, a, DTypeSet::MM_IN));
    }
    for (i, x) in [a, b].into_iter().enumerate() {
        if x.shape.len() < 2 {
            return Err(cx.invalid(format!(
                "operand {i} (`{}`) has shape {}: matmul needs rank >= 2",
                x.name,
                super::ShapeDisplay(x.shape)
            )));
        }
    }
    let (ra, rb) = (a.shape.len(), b.shape.len());
    let (m, ka) = if trans_a {
        (&a.shape[ra - 1], &a.shape[ra - 2])
    } else {
        (&a.shape[ra - 2], &a.shape[ra - 1])
    };
    let (kb, n) = if trans_b {
        (&b.shape[rb - 1], &b.shape[rb - 2])
    } else {
        (&b.shape[rb - 2], &b.shape[rb - 1])
    };
    if !r.scope.prove_eq(ka, kb) {
        return Err(cx.mismatch("contraction dims", a.shape, b.shape, ka, kb));
    }
    let mut s = broadcast(r.scope, cx, &a.shape[..ra - 2], &b.shape[..rb - 2])?;
    s.push(r.canon(m));
    s.push(r.canon(n));
    let dt = if a.dtype == DType::I8 {
        DType::I32
    } else {
        a.dtype
    };
    Ok((Op::MatMul { trans_a, trans_b }, dt, s))
}

/// `transpose`: `perm` is a permutation of the axes.
fn infer_transpose(r: &Rule<'_>, perm: Vec<usize>) -> Result<Inferred, GraphError> {
    let cx = r.cx;
    r.need(1, "1")?;
    let a = &r.args[0];
    let rank = a.shape.len();
    let mut seen = vec![false; rank];
    if perm.len() != rank {
        return Err(cx.invalid(format!(
            "permutation {perm:?} has {} entries for rank {rank}",
            perm.len()
        )));
    }
    for &p in &perm {
        if p >= rank || std::mem::replace(&mut seen[p], true) {
            return Err(cx.invalid(format!("{perm:?} is not a permutation of 0..{rank}")));
        }
    }
    let s = perm.iter().map(|&p| a.shape[p].clone()).collect();
    Ok((Op::Transpose { perm }, a.dtype, s))
}

/// `slice`: each axis once, steps >= 1.
fn infer_slice(
    r: &Rule<'_>,
    mut ranges: Vec<(usize, i64, i64, i64)>,
) -> Result<Inferred, GraphError> {
    let cx = r.cx;
    r.need(1, "1")?;
    let a = &r.args[0];
    ranges.sort_by_key(|t| t.0);
    let axes: Vec<usize> = ranges.iter().map(|t| t.0).collect();
    sorted_axes(cx, &axes, a.shape.len())?;
    let mut s = Shape::from(a.shape);
    for &(axis, start, end, step) in &ranges {
        if step < 1 {
            return Err(cx.invalid(format!("axis {axis}: step must be >= 1, got {step}")));
        }
        let len = slice_len(&a.shape[axis], start, end)
            .div_ceil(step)
            .map_err(|e| cx.invalid(format!("axis {axis}: {e}")))?;
        s[axis] = r.canon(&len);
    }
    Ok((Op::Slice { ranges }, a.dtype, s))
}

/// `concat`: same dtype and rank, equal extents off the axis.
fn infer_concat(r: &Rule<'_>, axis: usize) -> Result<Inferred, GraphError> {
    let (cx, args) = (r.cx, r.args);
    if args.is_empty() {
        return Err(cx.arity("at least 1", 0));
    }
    let first = &args[0];
    let rank = first.shape.len();
    sorted_axes(cx, &[axis], rank)?;
    let mut total = Dim::ZERO;
    for (i, x) in args.iter().enumerate() {
        same_dtype(cx, first, x)?;
        if x.shape.len() != rank {
            return Err(cx.invalid(format!(
                "operand {i} (`{}`) has rank {} but operand 0 has rank {rank}",
                x.name,
                x.shape.len()
            )));
        }
        for (k, (d0, d)) in first.shape.iter().zip(x.shape).enumerate() {
            if k != axis && !r.scope.prove_eq(d0, d) {
                return Err(cx.mismatch(
                    &format!("axis {k} of operand 0 and operand {i} (`{}`):", x.name),
                    first.shape,
                    x.shape,
                    d0,
                    d,
                ));
            }
        }
        total += &x.shape[axis];
    }
    let mut s = Shape::from(first.shape);
    s[axis] = r.canon(&total);
    Ok((Op::Concat { axis }, first.dtype, s))
}

/// `squeeze`: the listed axes have extent 1.
fn infer_squeeze(r: &Rule<'_>, axes: &[usize]) -> Result<Inferred, GraphError> {
    let cx = r.cx;
    r.need(1, "1")?;
    let a = &r.args[0];
    let axes = sorted_axes(cx, axes, a.shape.len())?;
    for &ax in &axes {
        if r.canon(&a.shape[ax]).as_const() != Some(1) {
            return Err(cx.invalid(format!(
                "axis {ax} of {} has extent `{}`, not 1",
                super::ShapeDisplay(a.shape),
                a.shape[ax]
            )));
        }
    }
    let s = a
        .shape
        .iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, d)| d.clone())
        .collect();
    Ok((Op::Squeeze { axes }, a.dtype, s))
}

/// `unsqueeze`: extent-1 axes at the listed output positions.
fn infer_unsqueeze(r: &Rule<'_>, axes: &[usize]) -> Result<Inferred, GraphError> {
    r.need(1, "1")?;
    let a = &r.args[0];
    let out_rank = a.shape.len() + axes.len();
    let axes = sorted_axes(r.cx, axes, out_rank)?;
    let mut rest = a.shape.iter();
    let s = (0..out_rank)
        .map(|i| {
            if axes.contains(&i) {
                Dim::ONE
            } else {
                rest.next().cloned().unwrap_or(Dim::ONE)
            }
        })
        .collect();
    Ok((Op::Unsqueeze { axes }, a.dtype, s))
}

/// A declared shape (inputs, constants), canonicalised; rejects dimensions
/// that are provably negative.
fn declared_shape(scope: &SymbolScope, cx: &Ctx<'_>, shape: &[Dim]) -> Result<Shape, GraphError> {
    shape
        .iter()
        .enumerate()
        .map(|(i, d)| declared_dim(scope, cx, i, d))
        .collect()
}

/// Dimension `i` of a declared shape, canonicalised; provably negative is an error.
fn declared_dim(scope: &SymbolScope, cx: &Ctx<'_>, i: usize, d: &Dim) -> Result<Dim, GraphError> {
    let c = scope.canonical(d);
    if scope.prove_lt(&c, &Dim::ZERO) {
        Err(cx.invalid(format!(
            "dimension {i} (`{d}`) is negative (only reshape and expand accept -1)"
        )))
    } else {
        Ok(c)
    }
}

fn check_kind(cx: &Ctx<'_>, code: Opcode, kind: OpcodeKind) -> Result<(), GraphError> {
    if opcode_kind(code) == Some(kind) {
        Ok(())
    } else {
        Err(cx.invalid(format!(
            "opcode `{}` is not a {} element-wise opcode",
            code.mnemonic(),
            match kind {
                OpcodeKind::Unary => "unary",
                OpcodeKind::Binary => "binary",
                OpcodeKind::Scalar => "with-scalar",
            }
        )))
    }
}

fn check_dtype(cx: &Ctx<'_>, code: Opcode, index: usize, a: &Arg) -> Result<(), GraphError> {
    let allowed = opcode_dtypes(code).unwrap_or(DTypeSet::ANY);
    if accepts_dtype(allowed, a.dtype) {
        Ok(())
    } else {
        Err(cx.dtype(index, a, allowed))
    }
}

fn float_only(cx: &Ctx<'_>, index: usize, a: &Arg) -> Result<(), GraphError> {
    if a.dtype.is_float() {
        Ok(())
    } else {
        Err(cx.dtype(index, a, DTypeSet::FLOAT))
    }
}

fn same_dtype(cx: &Ctx<'_>, a: &Arg, b: &Arg) -> Result<(), GraphError> {
    if a.dtype == b.dtype {
        Ok(())
    } else {
        Err(GraphError::DTypeMismatch {
            node: cx.node.to_owned(),
            op: cx.op,
            lhs: a.dtype,
            rhs: b.dtype,
        })
    }
}

/// NumPy broadcast of two shapes under the strict policy.
pub(crate) fn broadcast(
    scope: &SymbolScope,
    cx: &Ctx<'_>,
    a: &[Dim],
    b: &[Dim],
) -> Result<Shape, GraphError> {
    let r = a.len().max(b.len());
    let one = Dim::ONE;
    (0..r)
        .map(|i| {
            let da = (i + a.len()).checked_sub(r).map_or(&one, |j| &a[j]);
            let db = (i + b.len()).checked_sub(r).map_or(&one, |j| &b[j]);
            scope
                .broadcast(da, db)
                .map(|d| scope.canonical(&d))
                .map_err(|source| GraphError::Broadcast {
                    node: cx.node.to_owned(),
                    op: cx.op,
                    lhs: a.to_vec(),
                    rhs: b.to_vec(),
                    axis: i,
                    source: Box::new(source),
                })
        })
        .collect()
}

/// The shape after reducing `axes` (sorted).
pub(crate) fn reduced_shape(shape: &[Dim], axes: &[usize], keepdims: bool) -> Shape {
    shape
        .iter()
        .enumerate()
        .filter_map(|(i, d)| match (axes.contains(&i), keepdims) {
            (false, _) => Some(d.clone()),
            (true, true) => Some(Dim::ONE),
            (true, false) => None,
        })
        .collect()
}

/// The extent of Python's slice `start..end` (step 1) of an axis of
/// extent `n >= 0`: both bounds count from the end when negative, then
/// clamp to `0..=n`; `i64::MAX` is "to the end".
///
/// Written, where the bounds' signs allow, with `n` once: `min(e, n) −
/// min(s, n)` spelt out would hold `n` twice, and a chain of slices of
/// slices (each one's `n` the extent before) would double the expression
/// at every step.
fn slice_len(n: &Dim, start: i64, end: i64) -> Dim {
    let (s, e) = (Dim::val(start), Dim::val(end));
    let zero = &Dim::ZERO;
    match (start >= 0, end >= 0) {
        (true, true) if end <= start => Dim::ZERO,
        // `n − min(s, n)`.
        (true, true) if end == i64::MAX => (n - &s).max(zero),
        // `min(e, n) − min(s, n)`, with `e > s`.
        (true, true) => (&e - &s).min(&(n - &s).max(zero)),
        // `max(n + e, 0) − min(s, n)`.
        (true, false) => (n + &e - &s).max(zero),
        // `n − max(n + s, 0)`.
        (false, true) if end == i64::MAX => (-&s).min(n),
        (false, true) => {
            let lo = (n + &s).max(zero);
            (e.min(n) - lo).max(zero)
        }
        (false, false) if end <= start => Dim::ZERO,
        // `max(n + e, 0) − max(n + s, 0)`, with `e > s`.
        (false, false) => (&e - &s).min(&(n + &e).max(zero)),
    }
}

fn is_minus_one(d: &Dim) -> bool {
    d.as_const() == Some(-1)
}

fn reshape(
    scope: &SymbolScope,
    cx: &Ctx<'_>,
    input: &[Dim],
    target_in: &[Dim],
) -> Result<Shape, GraphError> {
    let holes = target_in.iter().filter(|d| is_minus_one(d)).count();
    if holes > 1 {
        return Err(cx.invalid("at most one target dimension may be -1"));
    }
    let mut target: Shape = target_in
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if is_minus_one(d) {
                Ok(d.clone())
            } else {
                declared_dim(scope, cx, i, d)
            }
        })
        .collect::<Result<_, _>>()?;
    let total = scope.canonical(&product(input));
    if let Some(hole) = target.iter().position(is_minus_one) {
        // Cancel target dims against equal input dims; divide the rest.
        let mut rest: Vec<Dim> = input.iter().map(|d| scope.canonical(d)).collect();
        let mut unmatched = Dim::ONE;
        for (i, t) in target.iter().enumerate() {
            if i == hole || t.as_const() == Some(1) {
                continue;
            }
            match rest.iter().position(|d| d == t) {
                Some(j) => {
                    rest.swap_remove(j);
                }
                None => unmatched *= t,
            }
        }
        let rest = scope.canonical(&product(&rest));
        let unmatched = scope.canonical(&unmatched);
        let inferred = match unmatched.as_const() {
            Some(c) if c > 0 => rest
                .div(c)
                .ok()
                .map(|q| scope.canonical(&q))
                .filter(|q| scope.prove_eq(&(q * c), &rest)),
            _ => None,
        };
        let Some(inferred) = inferred else {
            if unmatched.as_const() == Some(0) {
                return Err(cx.invalid(format!(
                    "cannot infer the -1 in {}: the other extents multiply to 0",
                    super::ShapeDisplay(&target)
                )));
            }
            return Err(cx.invalid(format!(
                "cannot infer the -1 in {}: `{rest}` elements are not provably divisible by `{unmatched}`",
                super::ShapeDisplay(&target)
            )));
        };
        target[hole] = inferred;
    }
    let count = scope.canonical(&product(&target));
    if !scope.prove_eq(&count, &total) {
        return Err(cx.mismatch("element counts", input, &target, &total, &count));
    }
    Ok(target)
}

fn expand(
    scope: &SymbolScope,
    cx: &Ctx<'_>,
    input: &[Dim],
    target: &[Dim],
) -> Result<Shape, GraphError> {
    if target.len() < input.len() {
        return Err(cx.invalid(format!(
            "cannot expand {} to the lower rank {}",
            super::ShapeDisplay(input),
            super::ShapeDisplay(target)
        )));
    }
    let off = target.len() - input.len();
    let mut out = Shape::with_capacity(target.len());
    for (i, t) in target.iter().enumerate() {
        let src = i.checked_sub(off).map(|j| &input[j]);
        if is_minus_one(t) {
            match src {
                Some(d) => out.push(scope.canonical(d)),
                None => {
                    return Err(cx.invalid(format!(
                        "target axis {i} is -1 but has no operand axis to keep"
                    )))
                }
            }
            continue;
        }
        let t = declared_dim(scope, cx, i, t)?;
        if let Some(d) = src {
            let d = scope.canonical(d);
            if d.as_const() != Some(1) && !scope.prove_eq(&d, &t) {
                return Err(cx.mismatch(
                    &format!("axis {i} (operand dims must be 1 or equal to the target):"),
                    input,
                    target,
                    &d,
                    &t,
                ));
            }
        }
        out.push(t);
    }
    Ok(out)
}

/// Taps of one window at most: the decompositions of `conv2d` and the
/// poolings have one slice per tap.
pub(crate) const MAX_WINDOW_TAPS: usize = 1024;

/// The extent of `axis` of operand `index`, which must be a constant:
/// the window operators slice at offsets fixed when the node is built.
fn concrete_axis(cx: &Ctx<'_>, index: usize, a: &Arg, axis: usize) -> Result<usize, GraphError> {
    a.shape[axis]
        .as_const()
        .and_then(|c| usize::try_from(c).ok())
        .ok_or_else(|| {
            cx.invalid(format!(
                "operand {index} (`{}`) has shape {}: axis {axis} must be a constant extent \
                 ({} slices its input at offsets fixed when the graph is built; only the \
                 batch axis may be symbolic)",
                a.name,
                super::ShapeDisplay(a.shape),
                cx.op
            ))
        })
}

/// Operand `index` has rank 4 (`[N, C, H, W]` or `[O, C, KH, KW]`).
fn rank4(cx: &Ctx<'_>, index: usize, a: &Arg, layout: &str) -> Result<(), GraphError> {
    if a.shape.len() == 4 {
        Ok(())
    } else {
        Err(cx.invalid(format!(
            "operand {index} (`{}`) has shape {}: {} needs rank 4 ({layout})",
            a.name,
            super::ShapeDisplay(a.shape),
            cx.op
        )))
    }
}

/// The output extents (OH, OW) of a window over `[H, W]`, with the
/// window's parameters checked.
fn window_out(
    cx: &Ctx<'_>,
    hw: [usize; 2],
    kernel: [usize; 2],
    strides: [usize; 2],
    pads: [usize; 4],
    dilations: [usize; 2],
) -> Result<[usize; 2], GraphError> {
    let taps = kernel[0].saturating_mul(kernel[1]);
    if taps > MAX_WINDOW_TAPS {
        return Err(cx.invalid(format!(
            "kernel {}x{} has {taps} taps, more than the {MAX_WINDOW_TAPS} supported",
            kernel[0], kernel[1]
        )));
    }
    let mut out = [0; 2];
    for (i, axis) in ["H", "W"].iter().enumerate() {
        out[i] = super::op::window_extent(
            hw[i],
            pads[i],
            pads[i + 2],
            kernel[i],
            strides[i],
            dilations[i],
        )
        .map_err(|m| cx.invalid(format!("along {axis}: {m}")))?;
    }
    Ok(out)
}

/// `conv2d`: x `[N, C, H, W]`, weight `[O, C/groups, KH, KW]`, an optional
/// bias `[O]`, all of one float dtype; C, H, W and the weight's extents
/// constant.
fn infer_conv2d(r: &Rule<'_>, attrs: Box<super::op::Conv2d>) -> Result<Inferred, GraphError> {
    let cx = r.cx;
    if !matches!(r.args.len(), 2 | 3) {
        return Err(cx.arity("2 or 3", r.args.len()));
    }
    let (x, w) = (&r.args[0], &r.args[1]);
    float_only(cx, 0, x)?;
    same_dtype(cx, x, w)?;
    rank4(cx, 0, x, "[N, C, H, W]")?;
    rank4(cx, 1, w, "[O, C/groups, KH, KW]")?;
    let c = concrete_axis(cx, 0, x, 1)?;
    let hw = [concrete_axis(cx, 0, x, 2)?, concrete_axis(cx, 0, x, 3)?];
    let mut wd = [0usize; 4];
    for (i, d) in wd.iter_mut().enumerate() {
        *d = concrete_axis(cx, 1, w, i)?;
    }
    let [o, cg, kh, kw] = wd;
    let g = attrs.groups;
    if g == 0 {
        return Err(cx.invalid("groups must be at least 1"));
    }
    if c % g != 0 || o % g != 0 || cg.checked_mul(g) != Some(c) {
        return Err(cx.invalid(format!(
            "operand 0 (`{}`) has {c} channels and operand 1 (`{}`) has shape {}: with \
             {g} group(s) the channels must be a multiple of the groups and the weight \
             [O, C/groups, KH, KW] with O a multiple of the groups",
            x.name,
            w.name,
            super::ShapeDisplay(w.shape)
        )));
    }
    if o == 0 || cg == 0 {
        return Err(cx.invalid(format!(
            "operand 1 (`{}`) has shape {}: no channels",
            w.name,
            super::ShapeDisplay(w.shape)
        )));
    }
    if let Some(b) = r.args.get(2) {
        same_dtype(cx, x, b)?;
        if b.shape.len() != 1 || b.shape[0].as_const() != Some(o as i64) {
            return Err(cx.invalid(format!(
                "operand 2 (`{}`) has shape {}: the bias must be [{o}]",
                b.name,
                super::ShapeDisplay(b.shape)
            )));
        }
    }
    let [oh, ow] = window_out(cx, hw, [kh, kw], attrs.strides, attrs.pads, attrs.dilations)?;
    let mut s = Shape::with_capacity(4);
    s.extend([
        x.shape[0].clone(),
        Dim::val(o as i64),
        Dim::val(oh as i64),
        Dim::val(ow as i64),
    ]);
    Ok((Op::Conv2d(attrs), x.dtype, s))
}

/// `max_pool2d` and `avg_pool2d`: x `[N, C, H, W]` of a float dtype with
/// H, W constant; every window holds at least one element of the input.
fn infer_pool2d(r: &Rule<'_>, op: Op) -> Result<Inferred, GraphError> {
    let cx = r.cx;
    r.need(1, "1")?;
    let p = match &op {
        Op::MaxPool2d(p) | Op::AvgPool2d { pool: p, .. } => p,
        _ => return Err(cx.invalid("not a pooling")),
    };
    let x = &r.args[0];
    float_only(cx, 0, x)?;
    rank4(cx, 0, x, "[N, C, H, W]")?;
    let hw = [concrete_axis(cx, 0, x, 2)?, concrete_axis(cx, 0, x, 3)?];
    let out = window_out(cx, hw, p.kernel, p.strides, p.pads, p.dilations)?;
    for (i, axis) in ["H", "W"].iter().enumerate() {
        // The first and the last window are the ones that reach furthest
        // into the padding.
        for o in [0, out[i] - 1] {
            let start = o * p.strides[i];
            let inside = (0..p.kernel[i])
                .map(|k| start + k * p.dilations[i])
                .any(|t| t >= p.pads[i] && t < p.pads[i] + hw[i]);
            if !inside {
                return Err(cx.invalid(format!(
                    "along {axis}: window {o} lies entirely in the padding (pads {} and {} \
                     against kernel {} with dilation {})",
                    p.pads[i],
                    p.pads[i + 2],
                    p.kernel[i],
                    p.dilations[i]
                )));
            }
        }
    }
    let mut s = Shape::from(x.shape);
    s[2] = Dim::val(out[0] as i64);
    s[3] = Dim::val(out[1] as i64);
    let dt = x.dtype;
    Ok((op, dt, s))
}
