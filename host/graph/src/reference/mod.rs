//! The reference device: a plain evaluator of graphs, the oracle in tests.
//!
//! [`run`] binds the symbols from the input shapes, [`decompose`](crate::decompose)s the
//! composites but the convolution and the poolings (so the decomposition
//! itself is what gets checked, and those are computed by their
//! definitions) and
//! evaluates, in order and at the concrete shapes, every primitive node the
//! outputs depend on.
//!
//! Numerics, following the instruction set's documentation:
//!
//! * Values are held as `f64`. Each element-wise op is computed in `f64` from
//!   its (exact) operand values and the result is **rounded to the node's
//!   dtype after every op**: f32 by `as f32`, f16/bf16 to nearest with ties
//!   to even (see [`round_float`]), overflow to ±inf.
//! * Integer ops are computed exactly in `i64` and **wrap** to the width of
//!   the dtype (two's complement); `i64` values are held as `f64`, exact
//!   up to 2^53. Integer division truncates toward zero;
//!   division by zero gives 0.
//! * Scalar immediates are what the instruction would carry: rounded to
//!   `f32` for float tensors, truncated and saturated to `i32` for integer
//!   tensors.
//! * `conv2d`, `max_pool2d` and `avg_pool2d` are evaluated by their
//!   definitions (nested loops, `f64` sums rounded once), not by the
//!   im2col decomposition the devices run: the comparison checks it.
//! * Other composites run as their decomposition, so every intermediate (the max,
//!   the exponentials, the sum, …) is rounded to the node's dtype like any
//!   other op: f16 softmax is computed in f16 steps, not internally in f32.
//! * Reductions and matmul **accumulate in `f64`** (integers in `i64`) and
//!   round once to the result dtype. An `i8` matmul gives `i32`.
//! * `max`/`min` (element-wise and reductions) propagate NaN, as PyTorch does.
//!   Reducing `max`/`min` over zero elements is an error.
//! * `cast`: float → int truncates toward zero and saturates, NaN → 0; int →
//!   int wraps; anything → bool is `x != 0`; bool → number is 0 or 1.
//! * Transcendentals use the `f64` functions of `std` (`erf` from `libm`):
//!   `sigmoid(x) = 1 / (1 + e^-x)`,
//!   `gelu_tanh(x) = x/2 · (1 + tanh(√(2/π)(x + 0.044715x³)))`,
//!   `gelu_erf(x) = x/2 · (1 + erf(x/√2))`,
//!   `silu(x) = x · sigmoid(x)`, `rsqrt(x) = 1/√x`, `round` is ties-to-even,
//!   `sin`/`cos` are `f64::sin`/`f64::cos` (the device gives NaN for
//!   `|x| ≥ 2^50`, where an `f32` carries no phase; the reference does not).

use std::thread;

use dvm_isa::{DType, Opcode};

use crate::{Graph, GraphError, Node, Op, ReduceOp};
use dvm_sym::Bindings;
use dvm_tensor::{convert, numel, round_float, wrap_int, Tensor};

/// Runs `graph` on `inputs` (by name), with `explicit` symbol values added to
/// those deduced from the input shapes. Returns the outputs in the graph's
/// output order, with their names.
///
/// # Errors
///
/// The binding errors of [`Graph::bind_tensors`] (missing, extra, wrong
/// rank/dtype/shape, range violations), [`GraphError::Eval`] naming a node
/// that cannot be evaluated (e.g. a `max` over zero elements, or a tensor too
/// large for memory).
pub fn run(
    graph: &Graph,
    inputs: &[(&str, &Tensor)],
    explicit: &Bindings,
) -> Result<Vec<(String, Tensor)>, GraphError> {
    let bindings = graph.bind_tensors(inputs, explicit)?;
    // Convolutions and poolings are evaluated by their definitions, not
    // by the decomposition the compiled path runs (module `window`).
    let g = crate::decompose::decompose_keeping_windows(graph)?;
    let mut values = eval(&g, &bindings, inputs, false)?;
    let mut out = Vec::with_capacity(g.outputs().len());
    for (name, id) in g.outputs() {
        let v = values[id.0]
            .as_ref()
            .ok_or_else(|| internal(&g[*id], "output value was freed"))?;
        out.push((name.clone(), v.to_tensor(&g[*id])?));
    }
    values.clear();
    Ok(out)
}

/// Evaluates every node of `graph` (not only those the outputs need), which
/// must contain no composites but `conv2d` and the poolings (call [`decompose`](crate::decompose) first), at `bindings` (from
/// [`Graph::bind_tensors`]).
/// Returns one tensor per node, indexed by node id.
///
/// # Errors
///
/// [`GraphError::Eval`] for a composite node or a node that cannot be
/// evaluated; [`GraphError::MissingInput`] / [`GraphError::InputDim`] if an
/// input tensor is absent or disagrees with the bound shape.
pub fn evaluate_nodes(
    graph: &Graph,
    bindings: &Bindings,
    inputs: &[(&str, &Tensor)],
) -> Result<Vec<Tensor>, GraphError> {
    let values = eval(graph, bindings, inputs, true)?;
    values
        .into_iter()
        .zip(graph.nodes())
        .map(|(v, node)| {
            v.ok_or_else(|| internal(node, "value was freed"))
                .and_then(|v| v.to_tensor(node))
        })
        .collect()
}

/// A node's value during evaluation: exact values of the node's dtype.
struct Value {
    shape: Vec<usize>,
    data: Vec<f64>,
}

impl Value {
    fn to_tensor(&self, node: &Node) -> Result<Tensor, GraphError> {
        let shape: Vec<u64> = self.shape.iter().map(|&d| d as u64).collect();
        Tensor::from_f64(node.dtype, &shape, &self.data).map_err(GraphError::from)
    }
}

fn internal(node: &Node, msg: &str) -> GraphError {
    GraphError::Eval {
        node: node.name.to_string(),
        op: node.op.name(),
        msg: format!("internal error: {msg}"),
    }
}

fn eval_error(node: &Node, msg: impl Into<String>) -> GraphError {
    GraphError::Eval {
        node: node.name.to_string(),
        op: node.op.name(),
        msg: msg.into(),
    }
}

fn eval(
    g: &Graph,
    bindings: &Bindings,
    inputs: &[(&str, &Tensor)],
    keep_all: bool,
) -> Result<Vec<Option<Value>>, GraphError> {
    // Bindings may come from the caller: check them against the facts, and
    // fill in what the recorded equalities determine.
    let mut completed = bindings.clone();
    g.scope()
        .complete_bindings(&mut completed)
        .map_err(|source| GraphError::Binding {
            context: "evaluating with the given bindings".to_owned(),
            source,
        })?;
    let bindings = &completed;
    let shapes = g.concrete_shapes(bindings)?;
    let n = g.nodes().len();
    // Free each value after its last use (unless kept).
    let mut last_use = vec![0usize; n];
    for (i, node) in g.nodes().iter().enumerate() {
        for o in &node.operands {
            last_use[o.0] = i;
        }
    }
    for (_, id) in g.outputs() {
        last_use[id.0] = usize::MAX;
    }
    // Only nodes the outputs depend on are evaluated (unless all are kept).
    let mut needed = vec![keep_all; n];
    for (_, id) in g.outputs() {
        needed[id.0] = true;
    }
    for i in (0..n).rev() {
        if needed[i] {
            for o in &g.nodes()[i].operands {
                needed[o.0] = true;
            }
        }
    }
    let mut values: Vec<Option<Value>> = Vec::with_capacity(n);
    for (i, node) in g.nodes().iter().enumerate() {
        if !needed[i] {
            values.push(None);
            continue;
        }
        let shape: Vec<usize> = shapes[i]
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<_, _>>()
            .map_err(|_| eval_error(node, "shape too large"))?;
        let count = numel(&shapes[i]).ok_or_else(|| eval_error(node, "shape too large"))?;
        // Refuse what cannot be allocated instead of aborting.
        let mut probe: Vec<f64> = Vec::new();
        if probe.try_reserve_exact(count).is_err() {
            return Err(eval_error(
                node,
                format!("cannot allocate {count} elements"),
            ));
        }
        drop(probe);
        let args: Vec<&Value> = node
            .operands
            .iter()
            .map(|o| {
                values[o.0]
                    .as_ref()
                    .ok_or_else(|| internal(node, "operand value was freed"))
            })
            .collect::<Result<_, _>>()?;
        let arg_dtypes: Vec<DType> = node.operands.iter().map(|o| g[*o].dtype).collect();
        let data = eval_node(g, node, &args, &arg_dtypes, &shape, bindings, inputs)?;
        if data.len() != count {
            return Err(internal(node, "result has the wrong element count"));
        }
        values.push(Some(Value { shape, data }));
        if !keep_all {
            for o in &node.operands {
                if last_use[o.0] == i {
                    values[o.0] = None;
                }
            }
        }
    }
    Ok(values)
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Strides that read `src` (right-aligned, extent-1 axes repeated) over
/// `out`; `None` unless `src` broadcasts to `out`.
fn broadcast_strides(src: &[usize], out: &[usize]) -> Option<Vec<usize>> {
    let st = strides(src);
    let off = out.len().checked_sub(src.len())?;
    (0..out.len())
        .map(|i| match i.checked_sub(off) {
            Some(j) if src[j] == out[i] && src[j] != 1 => Some(st[j]),
            Some(j) if src[j] != 1 => None,
            _ => Some(0),
        })
        .collect()
}

/// Offsets `base + Σ idx[i]·strides[i]` for every index of `shape`, row-major.
fn offsets(shape: &[usize], strides: &[usize], base: usize) -> Vec<usize> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return out;
    }
    let r = shape.len();
    if r == 0 {
        out.push(base);
        return out;
    }
    let mut idx = vec![0usize; r];
    let mut off = base;
    let (inner, inner_stride) = (shape[r - 1], strides[r - 1]);
    loop {
        out.extend((0..inner).map(|j| off + j * inner_stride));
        let mut ax = r - 1;
        loop {
            if ax == 0 {
                return out;
            }
            ax -= 1;
            idx[ax] += 1;
            off += strides[ax];
            if idx[ax] < shape[ax] {
                break;
            }
            off -= strides[ax] * shape[ax];
            idx[ax] = 0;
        }
    }
}

/// The elements of `src` at the offsets of `shape`/`strides`/`base`; `None`
/// if any offset would fall outside `src` (checked up front).
fn gather(src: &[f64], shape: &[usize], strides: &[usize], base: usize) -> Option<Vec<f64>> {
    if shape.contains(&0) {
        return Some(Vec::new());
    }
    let last = shape.iter().zip(strides).try_fold(base, |acc, (&d, &s)| {
        acc.checked_add((d - 1).checked_mul(s)?)
    })?;
    if last >= src.len() {
        return None;
    }
    Some(
        offsets(shape, strides, base)
            .into_iter()
            .map(|o| src[o])
            .collect(),
    )
}

/// `v` broadcast to `out`; `None` if it does not broadcast.
fn broadcast(v: &Value, out: &[usize]) -> Option<Vec<f64>> {
    if v.shape == out {
        return Some(v.data.clone());
    }
    gather(&v.data, out, &broadcast_strides(&v.shape, out)?, 0)
}

fn is_int(d: DType) -> bool {
    matches!(d, DType::I32 | DType::I8 | DType::Bool | DType::I64)
}

/// The immediate an instruction would carry for `v` on `dtype` tensors.
fn immediate(dtype: DType, v: f64) -> f64 {
    if dtype.is_float() {
        f64::from(v as f32)
    } else {
        f64::from(v as i32)
    }
}

fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

fn nan_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

/// A binary arithmetic opcode (tensor or scalar form, scalar already placed
/// as `b`) on float values; the result before rounding.
fn arith_f(code: Opcode, a: f64, b: f64) -> Option<f64> {
    use Opcode::*;
    Some(match code {
        Add | AddS => a + b,
        Sub | SubS => a - b,
        RSubS => b - a,
        Mul | MulS => a * b,
        Div | DivS => a / b,
        RDivS => b / a,
        Max | MaxS => nan_max(a, b),
        Min | MinS => nan_min(a, b),
        Pow | PowS => a.powf(b),
        _ => return None,
    })
}

/// The same on integers, exact in i64 (wrapped by the caller).
fn arith_i(code: Opcode, a: i64, b: i64) -> Option<i64> {
    use Opcode::*;
    let div = |x: i64, y: i64| if y == 0 { 0 } else { x.wrapping_div(y) };
    Some(match code {
        Add | AddS => a.wrapping_add(b),
        Sub | SubS => a.wrapping_sub(b),
        RSubS => b.wrapping_sub(a),
        Mul | MulS => a.wrapping_mul(b),
        Div | DivS => div(a, b),
        RDivS => div(b, a),
        Max | MaxS => a.max(b),
        Min | MinS => a.min(b),
        _ => return None,
    })
}

fn compare(code: Opcode, a: f64, b: f64) -> Option<bool> {
    use Opcode::*;
    Some(match code {
        Eq | EqS => a == b,
        Ne | NeS => a != b,
        Lt | LtS => a < b,
        Le | LeS => a <= b,
        Gt | GtS => a > b,
        Ge | GeS => a >= b,
        And => a != 0.0 && b != 0.0,
        Or => a != 0.0 || b != 0.0,
        _ => return None,
    })
}

/// `code(a, b)` for a node of result dtype `out` whose operands are `dt`.
fn binary_value(code: Opcode, dt: DType, out: DType, a: f64, b: f64) -> Option<f64> {
    if let Some(c) = compare(code, a, b) {
        return Some(f64::from(u8::from(c)));
    }
    if is_int(dt) {
        arith_i(code, a as i64, b as i64).map(|r| wrap_int(out, r))
    } else {
        arith_f(code, a, b).map(|r| round_float(out, r))
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn unary_value(code: Opcode, dt: DType, x: f64) -> Option<f64> {
    use Opcode::*;
    if is_int(dt) {
        let v = x as i64;
        let r = match code {
            Abs => v.wrapping_abs(),
            Neg => v.wrapping_neg(),
            Relu => v.max(0),
            Not => i64::from(v == 0),
            _ => return None,
        };
        return Some(wrap_int(dt, r));
    }
    let r = match code {
        Abs => x.abs(),
        Neg => -x,
        Exp => x.exp(),
        Log => x.ln(),
        Sqrt => x.sqrt(),
        Rsqrt => 1.0 / x.sqrt(),
        Recip => 1.0 / x,
        Tanh => x.tanh(),
        Sigmoid => sigmoid(x),
        Relu => {
            if x > 0.0 || x.is_nan() {
                x
            } else {
                0.0
            }
        }
        GeluTanh => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        GeluErf => 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)),
        Silu => x * sigmoid(x),
        Floor => x.floor(),
        Ceil => x.ceil(),
        Round => x.round_ties_even(),
        Erf => libm::erf(x),
        Sin => x.sin(),
        Cos => x.cos(),
        IsFinite => return Some(f64::from(u8::from(x.is_finite()))),
        _ => return None,
    };
    Some(round_float(dt, r))
}

#[allow(clippy::too_many_arguments)]
fn eval_node(
    g: &Graph,
    node: &Node,
    args: &[&Value],
    arg_dtypes: &[DType],
    shape: &[usize],
    bindings: &Bindings,
    inputs: &[(&str, &Tensor)],
) -> Result<Vec<f64>, GraphError> {
    let out = node.dtype;
    let bad_op = || internal(node, "opcode does not fit the op");
    let bad_shape = || internal(node, "operand shapes do not fit the result shape");
    let bcast = |v: &Value| broadcast(v, shape).ok_or_else(bad_shape);
    match &node.op {
        Op::Input => input_value(g, node, shape, inputs),
        Op::Constant(values) => {
            let n: usize = shape.iter().product();
            match values.as_slice() {
                [v] => Ok(vec![convert(out, *v); n]),
                vs if vs.len() == n => Ok(vs.iter().map(|&v| convert(out, v)).collect()),
                _ => Err(internal(node, "constant has the wrong number of values")),
            }
        }
        Op::Unary(code) => {
            let dt = arg_dtypes[0];
            args[0]
                .data
                .iter()
                .map(|&x| unary_value(*code, dt, x).ok_or_else(bad_op))
                .collect()
        }
        Op::Binary(code) => {
            let dt = arg_dtypes[0];
            let a = bcast(args[0])?;
            let b = bcast(args[1])?;
            a.iter()
                .zip(&b)
                .map(|(&x, &y)| binary_value(*code, dt, out, x, y).ok_or_else(bad_op))
                .collect()
        }
        Op::Scalar(code, v) => scalar(node, *code, arg_dtypes[0], args[0], *v),
        Op::ScalarDim(code, d) => {
            let v = d
                .eval(bindings)
                .map_err(|e| eval_error(node, e.to_string()))?;
            scalar(node, *code, arg_dtypes[0], args[0], v as f64)
        }
        Op::Where => {
            let c = bcast(args[0])?;
            let a = bcast(args[1])?;
            let b = bcast(args[2])?;
            Ok(c.iter()
                .zip(a.iter().zip(&b))
                .map(|(&c, (&a, &b))| if c != 0.0 { a } else { b })
                .collect())
        }
        Op::Cast => Ok(cast_values(arg_dtypes[0], node.dtype, &args[0].data)),
        Op::Reduce { op, axes, .. } => reduce(node, *op, axes, args[0], out),
        Op::MatMul { trans_a, trans_b } => {
            matmul(args[0], args[1], *trans_a, *trans_b, shape, out).ok_or_else(bad_shape)
        }
        Op::Reshape | Op::Squeeze { .. } | Op::Unsqueeze { .. } => Ok(args[0].data.clone()),
        Op::Transpose { perm } => {
            let st = strides(&args[0].shape);
            let pst: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
            gather(&args[0].data, shape, &pst, 0).ok_or_else(bad_shape)
        }
        Op::Slice { ranges } => slice(args[0], ranges, shape).ok_or_else(bad_shape),
        Op::Concat { axis } => concat(args, *axis, shape).ok_or_else(bad_shape),
        Op::Expand => bcast(args[0]),
        Op::Iota { axis } => Ok(iota_values(shape, *axis, out)),
        Op::Gather { axis } => gather_rows(node, args[0], args[1], *axis),
        Op::Conv2d(a) => window::conv2d(args[0], args[1], args.get(2).copied(), a, shape, out)
            .ok_or_else(bad_shape),
        Op::MaxPool2d(p) => window::pool2d(args[0], p, None, shape, out).ok_or_else(bad_shape),
        Op::AvgPool2d {
            pool,
            count_include_pad,
        } => window::pool2d(args[0], pool, Some(*count_include_pad), shape, out)
            .ok_or_else(bad_shape),
        Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::LayerNorm { .. }
        | Op::RmsNorm { .. }
        | Op::Trilu { .. } => Err(eval_error(
            node,
            "composite op: decompose the graph first (reference::run does)",
        )),
    }
}

/// An input's values, checked against the bound shape and dtype.
fn input_value(
    g: &Graph,
    node: &Node,
    shape: &[usize],
    inputs: &[(&str, &Tensor)],
) -> Result<Vec<f64>, GraphError> {
    let out = node.dtype;
    let Some((_, t)) = inputs.iter().find(|(n, _)| *n == node.name) else {
        return Err(GraphError::MissingInput {
            input: node.name.to_string(),
            expected: g
                .inputs()
                .iter()
                .map(|&i| format!("`{}`", g[i].name))
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    let same =
        t.shape().len() == shape.len() && t.shape().iter().zip(shape).all(|(&a, &b)| a == b as u64);
    if !same || t.dtype() != out {
        return Err(eval_error(
            node,
            format!(
                "input tensor is {}{:?}, but the bindings give {}{:?}",
                t.dtype(),
                t.shape(),
                out,
                shape
            ),
        ));
    }
    Ok(t.to_f64_vec())
}

/// `iota`: each element's index along `axis`, converted to `out`.
fn iota_values(shape: &[usize], axis: usize, out: DType) -> Vec<f64> {
    let n: usize = shape.iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let extent = shape[axis];
    (0..n)
        .map(|i| convert(out, ((i / inner.max(1)) % extent.max(1)) as f64))
        .collect()
}

/// `gather`: the slices of `x` along `axis` that `idx` selects, a
/// negative index counting from the end; one outside `-n..n` is an error
/// naming the index and the extent.
fn gather_rows(node: &Node, x: &Value, idx: &Value, axis: usize) -> Result<Vec<f64>, GraphError> {
    let outer: usize = x.shape[..axis].iter().product();
    let n = x.shape[axis];
    let inner: usize = x.shape[axis + 1..].iter().product();
    let mut out = Vec::with_capacity(outer * idx.data.len() * inner);
    for o in 0..outer {
        for &i in &idx.data {
            let k = if i < 0.0 { i + n as f64 } else { i };
            if !(0.0..n as f64).contains(&k) {
                return Err(eval_error(
                    node,
                    format!("index {i} is out of range for an axis of extent {n}"),
                ));
            }
            let start = (o * n + k as usize) * inner;
            out.extend_from_slice(&x.data[start..start + inner]);
        }
    }
    Ok(out)
}

/// `cast`: int → int wraps, otherwise [`convert`].
fn cast_values(from: DType, out: DType, data: &[f64]) -> Vec<f64> {
    data.iter()
        .map(|&v| {
            if is_int(from) && is_int(out) {
                wrap_int(out, v as i64)
            } else {
                convert(out, v)
            }
        })
        .collect()
}

/// `slice` at concrete shapes; `None` if the shapes do not fit.
fn slice(src: &Value, ranges: &[(usize, i64, i64, i64)], shape: &[usize]) -> Option<Vec<f64>> {
    let mut st = strides(&src.shape);
    let mut base = 0usize;
    for &(axis, start, _, step) in ranges {
        let n = src.shape[axis] as i64;
        let lo = if start >= 0 {
            start.min(n)
        } else {
            (n + start).max(0)
        };
        // Empty slices may start at `n`; nothing is read then.
        base += lo as usize * st[axis];
        st[axis] = st[axis].saturating_mul(usize::try_from(step).unwrap_or(usize::MAX));
    }
    if shape.iter().product::<usize>() == 0 {
        return Some(Vec::new());
    }
    gather(&src.data, shape, &st, base)
}

/// `concat` at concrete shapes; `None` if the shapes do not fit.
fn concat(args: &[&Value], axis: usize, shape: &[usize]) -> Option<Vec<f64>> {
    let outer: usize = shape[..axis].iter().product();
    let mut data = Vec::with_capacity(shape.iter().product());
    let chunks: Vec<usize> = args
        .iter()
        .map(|a| a.shape[axis..].iter().product())
        .collect();
    if args
        .iter()
        .zip(&chunks)
        .any(|(a, &c)| a.data.len() != outer * c)
    {
        return None;
    }
    for o in 0..outer {
        for (a, &c) in args.iter().zip(&chunks) {
            data.extend_from_slice(&a.data[o * c..(o + 1) * c]);
        }
    }
    Some(data)
}

fn scalar(node: &Node, code: Opcode, dt: DType, x: &Value, v: f64) -> Result<Vec<f64>, GraphError> {
    let imm = immediate(dt, v);
    x.data
        .iter()
        .map(|&a| {
            binary_value(code, dt, node.dtype, a, imm)
                .ok_or_else(|| internal(node, "opcode does not fit the op"))
        })
        .collect()
}

fn reduce(
    node: &Node,
    op: ReduceOp,
    axes: &[usize],
    x: &Value,
    out: DType,
) -> Result<Vec<f64>, GraphError> {
    // Output positions in input axis order, reduced axes with stride 0.
    let kept: Vec<usize> = (0..x.shape.len())
        .map(|i| if axes.contains(&i) { 1 } else { x.shape[i] })
        .collect();
    let kst = strides(&kept);
    let ost: Vec<usize> = (0..x.shape.len())
        .map(|i| if axes.contains(&i) { 0 } else { kst[i] })
        .collect();
    let n_out: usize = kept.iter().product();
    let count: usize = axes.iter().map(|&a| x.shape[a]).product();
    let targets = offsets(&x.shape, &ost, 0);
    match op {
        ReduceOp::Sum if is_int(out) => {
            let mut acc = vec![0i64; n_out];
            for (&t, &v) in targets.iter().zip(&x.data) {
                acc[t] = acc[t].wrapping_add(v as i64);
            }
            Ok(acc.into_iter().map(|a| wrap_int(out, a)).collect())
        }
        ReduceOp::Sum => {
            let mut acc = vec![0f64; n_out];
            for (&t, &v) in targets.iter().zip(&x.data) {
                acc[t] += v;
            }
            Ok(acc.into_iter().map(|a| round_float(out, a)).collect())
        }
        ReduceOp::Max | ReduceOp::Min => {
            if count == 0 && n_out > 0 {
                return Err(eval_error(node, "max/min over zero elements"));
            }
            let is_max = op == ReduceOp::Max;
            let mut acc: Vec<Option<f64>> = vec![None; n_out];
            for (&t, &v) in targets.iter().zip(&x.data) {
                acc[t] = Some(match acc[t] {
                    None => v,
                    Some(a) if is_max => nan_max(a, v),
                    Some(a) => nan_min(a, v),
                });
            }
            Ok(acc.into_iter().map(|a| a.unwrap_or(f64::NAN)).collect())
        }
        ReduceOp::Mean => Err(eval_error(
            node,
            "composite op: decompose the graph first (reference::run does)",
        )),
    }
}

/// Batched matmul with f64 accumulation, rounded once to `out`.
/// `None` if the shapes do not fit together.
fn matmul(
    a: &Value,
    b: &Value,
    ta: bool,
    tb: bool,
    shape: &[usize],
    out: DType,
) -> Option<Vec<f64>> {
    let (ra, rb, ro) = (a.shape.len(), b.shape.len(), shape.len());
    if ra < 2 || rb < 2 || ro < 2 {
        return None;
    }
    let (ar, ac) = (a.shape[ra - 2], a.shape[ra - 1]);
    let (br, bc) = (b.shape[rb - 2], b.shape[rb - 1]);
    let (m, k) = if ta { (ac, ar) } else { (ar, ac) };
    let (kb, n) = if tb { (bc, br) } else { (br, bc) };
    if k != kb || shape[ro - 2..] != [m, n] {
        return None;
    }
    let batch = &shape[..ro - 2];
    // Batch offsets of each operand (broadcast batch axes have stride 0).
    let batch_offsets = |v: &Value, r: usize| {
        let mat = v.shape[r - 2] * v.shape[r - 1];
        let bs: Vec<usize> = broadcast_strides(&v.shape[..r - 2], batch)?
            .into_iter()
            .map(|s| s * mat)
            .collect();
        Some(offsets(batch, &bs, 0))
    };
    let (aoff, boff) = (batch_offsets(a, ra)?, batch_offsets(b, rb)?);
    let mut result = Vec::with_capacity(shape.iter().product());
    for (&ao, &bo) in aoff.iter().zip(&boff) {
        // Pack A as m×k and B as k×n, row-major.
        let am: Vec<f64> = if ta {
            (0..m * k)
                .map(|i| a.data[ao + (i % k) * ac + i / k])
                .collect()
        } else {
            a.data[ao..ao + m * k].to_vec()
        };
        let bm: Vec<f64> = if tb {
            (0..k * n)
                .map(|i| b.data[bo + (i % n) * bc + i / n])
                .collect()
        } else {
            b.data[bo..bo + k * n].to_vec()
        };
        let mut c = vec![0f64; m * n];
        let rows = |c: &mut [f64], row0: usize| {
            for (ri, crow) in c.chunks_mut(n.max(1)).enumerate() {
                let i = row0 + ri;
                for p in 0..k {
                    let aip = am[i * k + p];
                    let brow = &bm[p * n..(p + 1) * n];
                    for (cj, &bj) in crow.iter_mut().zip(brow) {
                        *cj += aip * bj;
                    }
                }
            }
        };
        let work = m.saturating_mul(n).saturating_mul(k);
        let threads = thread::available_parallelism()
            .map_or(1, |t| t.get())
            .min(16);
        if work < (1 << 20) || threads < 2 || m < 2 || n == 0 {
            rows(&mut c, 0);
        } else {
            let per = m.div_ceil(threads);
            thread::scope(|s| {
                for (t, chunk) in c.chunks_mut(per * n).enumerate() {
                    let rows = &rows;
                    s.spawn(move || rows(chunk, t * per));
                }
            });
        }
        result.extend(c.into_iter().map(|v| {
            if is_int(out) {
                wrap_int(out, v as i64)
            } else {
                round_float(out, v)
            }
        }));
    }
    Some(result)
}

#[cfg(test)]
mod tests;
mod window;
