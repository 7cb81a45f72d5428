//! Lowering a graph at concrete shapes into a plan: buffers, views and one
//! kernel group per operator.
//!
//! Views cost nothing: transpose, slice, expand, squeeze, unsqueeze and
//! reshape of a dense view only change the strides the consumers' loads use.
//! Every other operator becomes one [`Group`] (the fusion issue merges them);
//! reductions over several axes become one group per axis, concatenation
//! one copy group per operand. Graph outputs that are views of other buffers
//! are materialised by a copy.

use dvm_isa::{DType, Opcode};

use crate::compile::view::contiguous_strides;
use crate::compile::{Group, GroupKind, Node as GNode, View};
use crate::graph::{Graph, Op, ReduceOp};
use crate::sym::Bindings;

/// Index of a buffer in [`Plan::buffers`].
pub type BufId = usize;

/// Where a buffer's contents come from.
#[derive(Clone, Debug, PartialEq)]
pub enum BufKind {
    /// Graph input `i` (in [`Graph::inputs`] order).
    Input(usize),
    /// A constant, already converted to little-endian bytes.
    Const(Vec<u8>),
    /// Written by a kernel of the plan.
    Temp,
}

/// One buffer of a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Buf {
    /// Source.
    pub kind: BufKind,
    /// Size in bytes.
    pub bytes: u64,
}

/// One kernel launch of a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// Name (the graph node it comes from, plus a suffix when it takes several).
    pub name: String,
    /// What it computes.
    pub group: Group,
    /// Buffers bound to the group's inputs, then its outputs.
    pub args: Vec<BufId>,
}

/// A graph at concrete shapes, ready to compile and run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Buffers.
    pub buffers: Vec<Buf>,
    /// Kernel launches in order.
    pub steps: Vec<Step>,
    /// Graph outputs: name, buffer, dtype, shape (dense in the buffer).
    pub outputs: Vec<(String, BufId, DType, Vec<u64>)>,
}

/// Why a graph could not be lowered.
#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    /// Shapes could not be evaluated.
    #[error(transparent)]
    Graph(Box<crate::graph::GraphError>),
    /// The graph still holds an operator lowering does not handle
    /// (composites must be decomposed first).
    #[error("node `{node}`: {what}")]
    Unsupported {
        /// Node name.
        node: String,
        /// What is wrong.
        what: String,
    },
}

impl From<crate::graph::GraphError> for LowerError {
    fn from(e: crate::graph::GraphError) -> LowerError {
        LowerError::Graph(Box::new(e))
    }
}

#[derive(Clone, Debug)]
struct Value {
    buf: BufId,
    view: View,
}

/// Lowers `graph` (composites decomposed) at `bindings`.
///
/// # Errors
/// [`LowerError`] naming the node at fault.
pub fn lower(graph: &Graph, bindings: &Bindings) -> Result<Plan, LowerError> {
    let shapes = graph.concrete_shapes(bindings)?;
    let mut plan = Plan::default();
    let mut values: Vec<Option<Value>> = Vec::with_capacity(graph.nodes().len());
    let input_index = |id: usize| graph.inputs().iter().position(|n| n.0 == id);
    for (id, node) in graph.nodes().iter().enumerate() {
        let shape = &shapes[id];
        let unsupported = |what: &str| LowerError::Unsupported {
            node: node.name.clone(),
            what: what.to_string(),
        };
        let arg = |k: usize| -> Result<&Value, LowerError> {
            node.operands
                .get(k)
                .and_then(|o| values.get(o.0))
                .and_then(|v| v.as_ref())
                .ok_or_else(|| unsupported("missing operand"))
        };
        let dt = node.dtype;
        let value = match &node.op {
            Op::Input => {
                let i =
                    input_index(id).ok_or_else(|| unsupported("input not in the input list"))?;
                new_buf(&mut plan, BufKind::Input(i), dt, shape)
            }
            Op::Constant(vals) => {
                let n = shape.iter().product::<u64>() as usize;
                let t = crate::tensor::Tensor::from_f64(dt, shape, &broadcast_const(vals, n))
                    .map_err(|e| unsupported(&e.to_string()))?;
                new_buf(&mut plan, BufKind::Const(t.into_bytes()), dt, shape)
            }
            Op::Unary(code) => {
                let x = arg(0)?.clone();
                ewise(
                    &mut plan,
                    &node.name,
                    shape,
                    dt,
                    &[x],
                    GNode::Unary(*code, 0),
                )?
            }
            Op::Binary(code) => {
                let (a, b) = (arg(0)?.clone(), arg(1)?.clone());
                ewise(
                    &mut plan,
                    &node.name,
                    shape,
                    dt,
                    &[a, b],
                    GNode::Binary(*code, 0, 1),
                )?
            }
            Op::Scalar(code, v) => {
                let x = arg(0)?.clone();
                ewise(
                    &mut plan,
                    &node.name,
                    shape,
                    dt,
                    &[x],
                    GNode::Scalar(*code, 0, *v),
                )?
            }
            Op::ScalarDim(code, d) => {
                let v = d.eval(bindings).map_err(|e| unsupported(&e.to_string()))? as f64;
                let x = arg(0)?.clone();
                ewise(
                    &mut plan,
                    &node.name,
                    shape,
                    dt,
                    &[x],
                    GNode::Scalar(*code, 0, v),
                )?
            }
            Op::Where => {
                let (c, a, b) = (arg(0)?.clone(), arg(1)?.clone(), arg(2)?.clone());
                ewise(
                    &mut plan,
                    &node.name,
                    shape,
                    dt,
                    &[c, a, b],
                    GNode::Select(0, 1, 2),
                )?
            }
            Op::Cast => {
                let x = arg(0)?.clone();
                ewise(&mut plan, &node.name, shape, dt, &[x], GNode::Cast(0))?
            }
            Op::Reduce { op, axes, keepdims } => {
                let code = match op {
                    ReduceOp::Sum => Opcode::ReduceSum,
                    ReduceOp::Max => Opcode::ReduceMax,
                    ReduceOp::Min => Opcode::ReduceMin,
                    ReduceOp::Mean => return Err(unsupported("mean must be decomposed first")),
                };
                let mut v = arg(0)?.clone();
                for (k, &axis) in axes.iter().enumerate().rev() {
                    let mut out_shape = v.view.shape.clone();
                    if axis >= out_shape.len() {
                        return Err(unsupported("reduce axis out of range"));
                    }
                    out_shape[axis] = 1;
                    let out = View::contiguous(dt, &out_shape);
                    let buf = temp(&mut plan, dt, &out_shape);
                    let group = Group {
                        kind: GroupKind::Reduce {
                            shape: v.view.shape.clone(),
                            axis,
                        },
                        inputs: vec![v.view.clone()],
                        nodes: vec![
                            (GNode::Input(0), v.view.dtype),
                            (GNode::Reduce(code, 0), dt),
                        ],
                        outputs: vec![(1, out.clone())],
                    };
                    plan.steps.push(Step {
                        name: step_name(&node.name, k, axes.len()),
                        group,
                        args: vec![v.buf, buf],
                    });
                    v = Value { buf, view: out };
                }
                if !keepdims {
                    v.view = dense(dt, shape, v.view.offset);
                }
                v
            }
            Op::MatMul { trans_a, trans_b } => {
                let (a, b) = (arg(0)?.clone(), arg(1)?.clone());
                matmul(&mut plan, &node.name, shape, dt, a, b, *trans_a, *trans_b)
                    .ok_or_else(|| unsupported("operand shapes do not form a matmul"))?
            }
            Op::Reshape => {
                let x = arg(0)?.clone();
                let x = if is_dense(&x.view) {
                    x
                } else {
                    copy(&mut plan, &node.name, &x)?
                };
                Value {
                    buf: x.buf,
                    view: dense(dt, shape, x.view.offset),
                }
            }
            Op::Transpose { perm } => {
                let x = arg(0)?;
                Value {
                    buf: x.buf,
                    view: x.view.permute(perm),
                }
            }
            Op::Slice { ranges } => {
                let x = arg(0)?;
                let mut view = x.view.clone();
                for &(axis, start, _end, step) in ranges {
                    let n = *view
                        .shape
                        .get(axis)
                        .ok_or_else(|| unsupported("slice axis"))?
                        as i64;
                    let lo = if start >= 0 {
                        start.min(n)
                    } else {
                        (n + start).max(0)
                    };
                    view.offset += lo as u64 * view.strides[axis];
                    view.strides[axis] *= step as u64;
                    view.shape[axis] = shape[axis];
                }
                Value { buf: x.buf, view }
            }
            Op::Expand => {
                let x = arg(0)?;
                let view = x
                    .view
                    .broadcast_to(shape)
                    .ok_or_else(|| unsupported("expand to an incompatible shape"))?;
                Value { buf: x.buf, view }
            }
            Op::Squeeze { .. } | Op::Unsqueeze { .. } => {
                let x = arg(0)?;
                // Dropping or inserting extent-1 axes: keep the strides of
                // the other axes in order.
                let mut strides = Vec::with_capacity(shape.len());
                let mut src = x
                    .view
                    .shape
                    .iter()
                    .zip(&x.view.strides)
                    .filter(|(e, _)| **e != 1);
                for &e in shape {
                    if e == 1 {
                        strides.push(0);
                    } else {
                        let (_, s) = src.next().ok_or_else(|| unsupported("squeeze shapes"))?;
                        strides.push(*s);
                    }
                }
                Value {
                    buf: x.buf,
                    view: View {
                        dtype: dt,
                        offset: x.view.offset,
                        shape: shape.clone(),
                        strides,
                    },
                }
            }
            Op::Concat { axis } => {
                let axis = *axis;
                let out = new_buf(&mut plan, BufKind::Temp, dt, shape);
                let mut start = 0u64;
                for (k, o) in node.operands.iter().enumerate() {
                    let v = values
                        .get(o.0)
                        .and_then(|v| v.clone())
                        .ok_or_else(|| unsupported("missing operand"))?;
                    let mut dst = out.view.clone();
                    dst.offset += start * dst.strides[axis];
                    dst.shape[axis] = v.view.shape[axis];
                    start += v.view.shape[axis];
                    if v.view.numel() == 0 {
                        continue;
                    }
                    plan.steps.push(Step {
                        name: step_name(&node.name, k, node.operands.len()),
                        group: copy_group(&v.view, &dst),
                        args: vec![v.buf, out.buf],
                    });
                }
                out
            }
            Op::Softmax { .. }
            | Op::LogSoftmax { .. }
            | Op::LayerNorm { .. }
            | Op::RmsNorm { .. } => {
                return Err(unsupported("composites must be decomposed before lowering"))
            }
        };
        values.push(Some(value));
    }
    // Outputs: dense buffers of their own.
    let mut used: Vec<BufId> = Vec::new();
    for (name, id) in graph.outputs() {
        let v =
            values
                .get(id.0)
                .and_then(|v| v.clone())
                .ok_or_else(|| LowerError::Unsupported {
                    node: name.clone(),
                    what: "output of an unknown node".into(),
                })?;
        let own = is_dense(&v.view)
            && v.view.offset == 0
            && matches!(plan.buffers[v.buf].kind, BufKind::Temp)
            && !used.contains(&v.buf);
        let v = if own { v } else { copy(&mut plan, name, &v)? };
        used.push(v.buf);
        plan.outputs
            .push((name.clone(), v.buf, v.view.dtype, v.view.shape.clone()));
    }
    Ok(plan)
}

fn step_name(node: &str, k: usize, n: usize) -> String {
    if n > 1 {
        format!("{node}.{k}")
    } else {
        node.to_string()
    }
}

fn broadcast_const(vals: &[f64], n: usize) -> Vec<f64> {
    if vals.len() == 1 && n != 1 {
        vec![vals[0]; n]
    } else {
        vals.to_vec()
    }
}

fn dense(dt: DType, shape: &[u64], offset: u64) -> View {
    View {
        dtype: dt,
        offset,
        shape: shape.to_vec(),
        strides: contiguous_strides(shape),
    }
}

/// True when the view is row-major dense (extent-1 axes may have any stride).
fn is_dense(v: &View) -> bool {
    let want = contiguous_strides(&v.shape);
    v.shape
        .iter()
        .zip(v.strides.iter().zip(&want))
        .all(|(e, (s, w))| *e == 1 || s == w)
}

fn new_buf(plan: &mut Plan, kind: BufKind, dt: DType, shape: &[u64]) -> Value {
    let bytes = shape.iter().product::<u64>() * dt.size() as u64;
    plan.buffers.push(Buf { kind, bytes });
    Value {
        buf: plan.buffers.len() - 1,
        view: View::contiguous(dt, shape),
    }
}

fn temp(plan: &mut Plan, dt: DType, shape: &[u64]) -> BufId {
    new_buf(plan, BufKind::Temp, dt, shape).buf
}

fn ewise(
    plan: &mut Plan,
    name: &str,
    shape: &[u64],
    dt: DType,
    args: &[Value],
    op: GNode,
) -> Result<Value, LowerError> {
    let mut inputs = Vec::with_capacity(args.len());
    let mut nodes = Vec::with_capacity(args.len() + 1);
    for (k, a) in args.iter().enumerate() {
        let v = a
            .view
            .broadcast_to(shape)
            .ok_or_else(|| LowerError::Unsupported {
                node: name.to_string(),
                what: "operand does not broadcast to the result".into(),
            })?;
        nodes.push((GNode::Input(k), v.dtype));
        inputs.push(v);
    }
    let n = args.len();
    let op = match op {
        GNode::Unary(c, _) => GNode::Unary(c, n - 1),
        GNode::Binary(c, _, _) => GNode::Binary(c, 0, 1),
        GNode::Scalar(c, _, v) => GNode::Scalar(c, 0, v),
        GNode::Select(..) => GNode::Select(0, 1, 2),
        GNode::Cast(_) => GNode::Cast(0),
        other => other,
    };
    nodes.push((op, dt));
    let out = new_buf(plan, BufKind::Temp, dt, shape);
    let mut args_ids: Vec<BufId> = args.iter().map(|a| a.buf).collect();
    args_ids.push(out.buf);
    plan.steps.push(Step {
        name: name.to_string(),
        group: Group {
            kind: GroupKind::Elementwise {
                shape: shape.to_vec(),
            },
            inputs,
            nodes,
            outputs: vec![(n, out.view.clone())],
        },
        args: args_ids,
    });
    Ok(out)
}

fn copy_group(src: &View, dst: &View) -> Group {
    Group {
        kind: GroupKind::Elementwise {
            shape: dst.shape.clone(),
        },
        inputs: vec![src.clone()],
        nodes: vec![(GNode::Input(0), src.dtype)],
        outputs: vec![(0, dst.clone())],
    }
}

/// Materialises `v` into a fresh dense buffer.
fn copy(plan: &mut Plan, name: &str, v: &Value) -> Result<Value, LowerError> {
    let out = new_buf(plan, BufKind::Temp, v.view.dtype, &v.view.shape);
    plan.steps.push(Step {
        name: format!("{name}.copy"),
        group: copy_group(&v.view, &out.view),
        args: vec![v.buf, out.buf],
    });
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn matmul(
    plan: &mut Plan,
    name: &str,
    shape: &[u64],
    dt: DType,
    a: Value,
    b: Value,
    trans_a: bool,
    trans_b: bool,
) -> Option<Value> {
    let swap = |v: &View| {
        let r = v.shape.len();
        let mut perm: Vec<usize> = (0..r).collect();
        if r >= 2 {
            perm.swap(r - 1, r - 2);
        }
        v.permute(&perm)
    };
    let mut av = if trans_a {
        swap(&a.view)
    } else {
        a.view.clone()
    };
    let mut bv = if trans_b {
        swap(&b.view)
    } else {
        b.view.clone()
    };
    // NumPy: a vector operand is a 1×k row (a) or k×1 column (b).
    if av.shape.len() == 1 {
        av = View {
            shape: vec![1, av.shape[0]],
            strides: vec![0, av.strides[0]],
            ..av
        };
    }
    if bv.shape.len() == 1 {
        bv = View {
            shape: vec![bv.shape[0], 1],
            strides: vec![bv.strides[0], 0],
            ..bv
        };
    }
    let (ra, rb) = (av.shape.len(), bv.shape.len());
    let (m, k) = (av.shape[ra - 2], av.shape[ra - 1]);
    let (k2, n) = (bv.shape[rb - 2], bv.shape[rb - 1]);
    if k != k2 {
        return None;
    }
    let nb = ra.max(rb) - 2;
    let mut batch = vec![1u64; nb];
    for (i, slot) in batch.iter_mut().enumerate() {
        let pick = |v: &View| {
            let lead = nb - (v.shape.len() - 2);
            if i < lead {
                1
            } else {
                v.shape[i - lead]
            }
        };
        let (x, y) = (pick(&av), pick(&bv));
        *slot = if x == 1 { y } else { x };
    }
    let mut ash = batch.clone();
    ash.extend([m, k]);
    let mut bsh = batch.clone();
    bsh.extend([k, n]);
    let av = av.broadcast_to(&ash)?;
    let bv = bv.broadcast_to(&bsh)?;
    let mut osh = batch.clone();
    osh.extend([m, n]);
    if osh.iter().product::<u64>() != shape.iter().product::<u64>() {
        return None;
    }
    let out = new_buf(plan, BufKind::Temp, dt, &osh);
    let acc = if dt == DType::I8 || dt == DType::I32 {
        DType::I32
    } else {
        DType::F32
    };
    let mut nodes = vec![(GNode::Matmul, acc)];
    if acc != dt {
        nodes.push((GNode::Cast(0), dt));
    }
    let last = nodes.len() - 1;
    plan.steps.push(Step {
        name: name.to_string(),
        group: Group {
            kind: GroupKind::Matmul {
                batch,
                m,
                n,
                k,
                acc,
            },
            inputs: vec![av, bv],
            nodes,
            outputs: vec![(last, out.view.clone())],
        },
        args: vec![a.buf, b.buf, out.buf],
    });
    Some(Value {
        buf: out.buf,
        view: dense(dt, shape, 0),
    })
}
