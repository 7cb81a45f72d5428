//! Shapes and data movement: `Shape`, `Reshape`, `Transpose`, `Slice`,
//! `Concat`, `Split`, `Expand`, `Gather`, … On shape vectors and small
//! constants they fold at import; on runtime tensors they become graph
//! views.

use dvm_sym::Dim;

use super::{norm_axis, NodeCx};
use crate::error::OnnxError;
use crate::import::Importer;
use crate::value::{elem, Const, Value};

type R = Result<Vec<Value>, OnnxError>;

/// The constant integers of input `i` (an attribute before the opset that
/// made it an input: `attr`), or `None` when absent.
fn const_ints(
    imp: &Importer<'_>,
    cx: &NodeCx<'_>,
    i: usize,
    attr: &str,
) -> Result<Option<Vec<i64>>, OnnxError> {
    match imp.value(cx, i)? {
        Some(v) => {
            let c = v.as_const().ok_or_else(|| {
                cx.unsupported(format!(
                    "input {i} is computed at run time (it must fold to constants)"
                ))
            })?;
            Ok(Some(c.data.iter().map(|&x| x as i64).collect()))
        }
        None => Ok(cx.attr_ints(attr)),
    }
}

fn runtime(imp: &Importer<'_>, id: dvm_graph::NodeId, e: i32) -> Vec<Value> {
    let _ = imp;
    vec![Value::Runtime { id, elem: e }]
}

/// `Shape` with `start` / `end` (opset 15).
pub(super) fn shape(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let x = imp.req(cx, 0)?;
    let dims = imp.shape_of(&x);
    let r = dims.len() as i64;
    let clamp = |v: i64| (if v < 0 { v.saturating_add(r) } else { v }).clamp(0, r) as usize;
    let start = clamp(cx.attr_i("start", 0));
    let end = clamp(cx.attr_i("end", r));
    let dims = dims.get(start..end.max(start)).unwrap_or(&[]).to_vec();
    Ok(vec![Value::Ints {
        scalar: false,
        dims,
    }])
}

/// `Size`: the element count.
pub(super) fn size(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let x = imp.req(cx, 0)?;
    let n: Dim = imp.shape_of(&x).iter().product();
    Ok(vec![Value::Ints {
        scalar: true,
        dims: vec![n],
    }])
}

/// A reshape to `target` (which may hold one `-1`): folded for constants
/// and shape vectors, a graph reshape otherwise.
fn reshape_to(imp: &mut Importer<'_>, cx: &NodeCx<'_>, x: &Value, target: Vec<Dim>) -> R {
    let src = imp.shape_of(x);
    let total: Dim = src.iter().product();
    let minus = target.iter().filter(|d| d.as_const() == Some(-1)).count();
    if minus > 1 {
        return Err(cx.err("more than one -1 in the target shape"));
    }
    let mut target = target;
    if minus == 1 {
        let known: Dim = target.iter().filter(|d| d.as_const() != Some(-1)).product();
        let inferred = if let (Some(t), Some(k)) = (total.as_const(), known.as_const()) {
            (k != 0).then(|| Dim::from(t / k))
        } else {
            // Cancel the known factors symbolically: total / known as an
            // exact quotient when `known` is a product of total's factors.
            quotient(&src, &target)
        };
        if let Some(q) = inferred {
            for d in &mut target {
                if d.as_const() == Some(-1) {
                    *d = q.clone();
                }
            }
        }
    }
    match x {
        Value::Ints { dims, .. } if target.len() <= 1 => {
            return Ok(vec![Value::Ints {
                scalar: target.is_empty(),
                dims: dims.clone(),
            }]);
        }
        Value::Const(c) if target.iter().all(|d| d.as_const().is_some_and(|v| v >= 0)) => {
            let shape: Vec<usize> = target
                .iter()
                .map(|d| d.as_const().unwrap_or(0) as usize)
                .collect();
            if shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) != Some(c.data.len()) {
                return Err(cx.err(format!("cannot reshape {:?} to {shape:?}", c.shape)));
            }
            return Ok(vec![Value::Const(Const { shape, ..c.clone() })]);
        }
        _ => {}
    }
    let id = imp.tensor(cx, 0)?;
    let y = imp.g.reshape(id, &target).map_err(|e| cx.graph_err(e))?;
    Ok(runtime(imp, y, x.elem()))
}

/// `product(src) / product(known target dims)` when every known target
/// dim is one of `src`'s factors (a multiset difference), else `None`.
fn quotient(src: &[Dim], target: &[Dim]) -> Option<Dim> {
    let mut rest: Vec<Dim> = src.to_vec();
    let mut divisor = 1i64;
    for d in target {
        if d.as_const() == Some(-1) {
            continue;
        }
        if let Some(p) = rest.iter().position(|s| s == d) {
            rest.remove(p);
        } else if let Some(v) = d.as_const() {
            divisor = divisor.checked_mul(v)?;
        } else {
            return None;
        }
    }
    let q: Dim = rest.iter().product();
    if divisor == 1 {
        return Some(q);
    }
    // The constant part of what is left must absorb the divisor.
    let (consts, syms): (Vec<Dim>, Vec<Dim>) = rest.into_iter().partition(Dim::is_const);
    let c: i64 = consts.iter().filter_map(Dim::as_const).product();
    (divisor > 0 && c % divisor == 0).then(|| Dim::from(c / divisor) * syms.iter().product::<Dim>())
}

/// `Reshape` with `allowzero` (a `0` copies the input's dimension unless
/// `allowzero` is set) and one inferred `-1`.
pub(super) fn reshape(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let x = imp.req(cx, 0)?;
    let (_, shape) = imp
        .req(cx, 1)?
        .ints()
        .ok_or_else(|| cx.unsupported("the target shape is computed at run time"))?;
    let src = imp.shape_of(&x);
    let allowzero = cx.attr_i("allowzero", 0) != 0;
    let mut target = Vec::with_capacity(shape.len());
    for (i, d) in shape.into_iter().enumerate() {
        if d.as_const() == Some(0) && !allowzero {
            let s = src
                .get(i)
                .ok_or_else(|| cx.err(format!("target axis {i} copies an axis the input lacks")))?;
            target.push(s.clone());
        } else {
            target.push(d);
        }
    }
    reshape_to(imp, cx, &x, target)
}

/// `Flatten`: `[prod(d[..axis]), prod(d[axis..])]`.
pub(super) fn flatten(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let x = imp.req(cx, 0)?;
    let src = imp.shape_of(&x);
    let r = src.len() as i64;
    let mut axis = cx.attr_i("axis", 1);
    if axis < 0 {
        axis += r;
    }
    if !(0..=r).contains(&axis) {
        return Err(cx.err(format!("axis {axis} for rank {r}")));
    }
    let (a, b) = src.split_at(axis as usize);
    let target = vec![a.iter().product(), b.iter().product()];
    reshape_to(imp, cx, &x, target)
}

pub(super) fn transpose(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let x = imp.req(cx, 0)?;
    let rank = imp.shape_of(&x).len() as i64;
    let perm = cx
        .attr_ints("perm")
        .unwrap_or_else(|| (0..rank).rev().collect());
    if let Some(c) = x.as_const() {
        if let Some(t) = transpose_const(&c, &perm) {
            return Ok(vec![Value::Const(t)]);
        }
    }
    let id = imp.tensor(cx, 0)?;
    let y = imp.g.transpose(id, &perm).map_err(|e| cx.graph_err(e))?;
    Ok(runtime(imp, y, x.elem()))
}

/// `c` with its axes permuted (a weight an exporter transposes), or `None`
/// for a bad permutation.
fn transpose_const(c: &Const, perm: &[i64]) -> Option<Const> {
    let rank = c.shape.len();
    let perm: Vec<usize> = perm
        .iter()
        .map(|&p| usize::try_from(if p < 0 { p + rank as i64 } else { p }).ok())
        .collect::<Option<_>>()?;
    let mut seen = vec![false; rank];
    for &p in &perm {
        if p >= rank || std::mem::replace(&mut seen[p], true) {
            return None;
        }
    }
    if perm.len() != rank {
        return None;
    }
    let mut strides = vec![1usize; rank];
    for i in (0..rank.saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * c.shape[i + 1];
    }
    let shape: Vec<usize> = perm.iter().map(|&p| c.shape[p]).collect();
    let mut idx = vec![0usize; rank];
    let mut data = Vec::with_capacity(c.data.len());
    for _ in 0..c.data.len() {
        let off: usize = (0..rank).map(|k| idx[k] * strides[perm[k]]).sum();
        data.push(c.data[off]);
        for ax in (0..rank).rev() {
            idx[ax] += 1;
            if idx[ax] < shape[ax] {
                break;
            }
            idx[ax] = 0;
        }
    }
    Some(Const {
        elem: c.elem,
        shape,
        data,
    })
}

pub(super) fn squeeze(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let x = imp.req(cx, 0)?;
    let src = imp.shape_of(&x);
    let axes = const_ints(imp, cx, 1, "axes")?.unwrap_or_default();
    let axes: Vec<usize> = if axes.is_empty() {
        (0..src.len())
            .filter(|&i| src[i].as_const() == Some(1))
            .collect()
    } else {
        axes.iter()
            .map(|&a| norm_axis(cx, a, src.len()))
            .collect::<Result<_, _>>()?
    };
    let target: Vec<Dim> = src
        .iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, d)| d.clone())
        .collect();
    if !matches!(x, Value::Runtime { .. }) {
        return reshape_to(imp, cx, &x, target);
    }
    let id = imp.tensor(cx, 0)?;
    let ax: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
    let y = imp.g.squeeze(id, &ax).map_err(|e| cx.graph_err(e))?;
    Ok(runtime(imp, y, x.elem()))
}

pub(super) fn unsqueeze(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let x = imp.req(cx, 0)?;
    let src = imp.shape_of(&x);
    let axes = const_ints(imp, cx, 1, "axes")?.ok_or_else(|| cx.err("no axes"))?;
    if !matches!(x, Value::Runtime { .. }) {
        let out_rank = src.len() + axes.len();
        let axes: Vec<usize> = axes
            .iter()
            .map(|&a| norm_axis(cx, a, out_rank))
            .collect::<Result<_, _>>()?;
        let mut it = src.into_iter();
        let target: Vec<Dim> = (0..out_rank)
            .map(|i| {
                if axes.contains(&i) {
                    Some(Dim::from(1))
                } else {
                    it.next()
                }
            })
            .collect::<Option<_>>()
            .ok_or_else(|| cx.err("repeated axes"))?;
        if let Value::Ints { dims, .. } = &x {
            if target.len() == 1 {
                return Ok(vec![Value::Ints {
                    scalar: false,
                    dims: dims.clone(),
                }]);
            }
        }
        return reshape_to(imp, cx, &x, target);
    }
    let id = imp.tensor(cx, 0)?;
    let y = imp.g.unsqueeze(id, &axes).map_err(|e| cx.graph_err(e))?;
    Ok(runtime(imp, y, x.elem()))
}

/// Python's slice bounds of one axis of extent `n`.
fn bounds(n: i64, start: i64, end: i64) -> (i64, i64) {
    let fix = |v: i64| {
        if v < 0 {
            v.saturating_add(n).max(0)
        } else {
            v.min(n)
        }
    };
    (fix(start), fix(end))
}

/// `Slice` (inputs `starts`, `ends`, `axes`, `steps`).
pub(super) fn slice(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let x = imp.req(cx, 0)?;
    let src = imp.shape_of(&x);
    let starts = const_ints(imp, cx, 1, "starts")?.ok_or_else(|| cx.err("no starts"))?;
    // A symbolic end is accepted when it provably reaches the end of its
    // axis (`Shape` of the operand, or more): "to the end".
    let end_dims: Vec<Dim> = match imp.value(cx, 2)? {
        Some(v) => {
            v.ints()
                .ok_or_else(|| cx.unsupported("ends computed at run time"))?
                .1
        }
        None => cx
            .attr_ints("ends")
            .ok_or_else(|| cx.err("no ends"))?
            .into_iter()
            .map(Dim::from)
            .collect(),
    };
    let axes =
        const_ints(imp, cx, 3, "axes")?.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = const_ints(imp, cx, 4, "steps")?.unwrap_or_else(|| vec![1; starts.len()]);
    let mut ends = Vec::with_capacity(end_dims.len());
    for (k, d) in end_dims.iter().enumerate() {
        if let Some(v) = d.as_const() {
            ends.push(v);
            continue;
        }
        let axis = norm_axis(cx, *axes.get(k).unwrap_or(&0), src.len().max(1))?;
        let extent = src.get(axis).cloned().unwrap_or(Dim::from(1));
        if !imp.g.scope().prove_ge(d, &extent) {
            return Err(cx.unsupported(format!(
                "slice end `{d}` on axis {axis} of extent `{extent}` (a symbolic end must reach the end of its axis)"
            )));
        }
        ends.push(i64::MAX);
    }
    if starts.len() != ends.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(cx.err("starts, ends, axes and steps differ in length"));
    }
    if let Some(&s) = steps.iter().find(|&&s| s < 1) {
        return Err(cx.unsupported(format!("step {s} (only positive steps are supported)")));
    }
    // Symbolic int vectors and rank-1 constants fold.
    if let (Some((false, dims)), true) = (x.ints(), !matches!(x, Value::Runtime { .. })) {
        if axes.len() == 1 && norm_axis(cx, axes[0], 1)? == 0 {
            let (s, e) = bounds(dims.len() as i64, starts[0], ends[0]);
            let picked: Vec<Dim> = (s..e.max(s))
                .step_by(steps[0] as usize)
                .map(|i| dims[i as usize].clone())
                .collect();
            let v = Value::Ints {
                scalar: false,
                dims: picked,
            };
            return Ok(vec![
                if x.elem() == elem::INT64 || matches!(x, Value::Ints { .. }) {
                    v
                } else {
                    Value::Const(
                        v.as_const()
                            .map(|c| c.cast(x.elem()))
                            .ok_or_else(|| cx.err("fold"))?,
                    )
                },
            ]);
        }
    }
    let ranges: Vec<(i64, i64, i64, i64)> = (0..starts.len())
        .map(|i| (axes[i], starts[i], ends[i], steps[i]))
        .collect();
    let id = imp.tensor(cx, 0)?;
    let y = imp.g.slice(id, &ranges).map_err(|e| cx.graph_err(e))?;
    Ok(runtime(imp, y, x.elem()))
}

pub(super) fn concat(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let axis = cx.attr_i("axis", 0);
    let mut vals = Vec::new();
    for i in 0..cx.node.input.len() {
        if let Some(v) = imp.value(cx, i)? {
            vals.push((i, v));
        }
    }
    let first = vals.first().ok_or_else(|| cx.err("no operands"))?.1.clone();
    // Shape vectors concatenate into a shape vector.
    if vals
        .iter()
        .all(|(_, v)| !matches!(v, Value::Runtime { .. }))
        && vals.iter().any(|(_, v)| matches!(v, Value::Ints { .. }))
    {
        let mut dims = Vec::new();
        for (_, v) in &vals {
            let (_, d) = v
                .ints()
                .ok_or_else(|| cx.err("mixes shape vectors and other constants"))?;
            dims.extend(d);
        }
        return Ok(vec![Value::Ints {
            scalar: false,
            dims,
        }]);
    }
    let mut ids = Vec::with_capacity(vals.len());
    for (i, _) in &vals {
        ids.push(imp.tensor(cx, *i)?);
    }
    // Empty operands add nothing (unless all are empty).
    let empty = |g: &dvm_graph::Graph, id: &dvm_graph::NodeId| {
        g.nodes()[id.0]
            .shape
            .iter()
            .any(|d| d.as_const() == Some(0))
    };
    if ids.iter().any(|id| !empty(&imp.g, id)) {
        ids.retain(|id| !empty(&imp.g, id));
    }
    let dt = imp.g.nodes()[ids[0].0].dtype;
    for id in &mut ids {
        if imp.g.nodes()[id.0].dtype != dt {
            *id = imp.g.cast(*id, dt).map_err(|e| cx.graph_err(e))?;
        }
    }
    let y = imp.g.concat(&ids, axis).map_err(|e| cx.graph_err(e))?;
    Ok(runtime(imp, y, first.elem()))
}

/// `Split` by sizes (input from opset 13, attribute before) or into
/// `num_outputs` parts (opset 18).
pub(super) fn split(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let x = imp.req(cx, 0)?;
    let src = imp.shape_of(&x);
    let axis = norm_axis(cx, cx.attr_i("axis", 0), src.len())?;
    let n_out = cx.node.output.len();
    let extent = src[axis]
        .as_const()
        .ok_or_else(|| cx.unsupported(format!("split of the symbolic extent `{}`", src[axis])))?;
    let sizes = match const_ints(imp, cx, 1, "split")? {
        Some(s) => s,
        None => {
            let parts = cx.attr_i("num_outputs", n_out as i64).max(1);
            let chunk = (extent + parts - 1) / parts;
            (0..parts)
                .map(|k| (extent - k * chunk).clamp(0, chunk))
                .collect()
        }
    };
    let total = sizes.iter().try_fold(0i64, |a, &s| a.checked_add(s));
    if sizes.len() != n_out || total != Some(extent) || sizes.iter().any(|&s| s < 0) {
        return Err(cx.err(format!(
            "sizes {sizes:?} do not split extent {extent} into {n_out} outputs"
        )));
    }
    let id = imp.tensor(cx, 0)?;
    let mut outs = Vec::with_capacity(n_out);
    let mut start = 0;
    for s in sizes {
        let y = imp
            .g
            .slice(id, &[(axis as i64, start, start + s, 1)])
            .map_err(|e| cx.graph_err(e))?;
        outs.push(Value::Runtime {
            id: y,
            elem: x.elem(),
        });
        start += s;
    }
    Ok(outs)
}

/// `Expand`: bidirectional broadcast of the operand and the shape.
pub(super) fn expand(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let x = imp.req(cx, 0)?;
    let (_, shape) = imp
        .req(cx, 1)?
        .ints()
        .ok_or_else(|| cx.unsupported("the target shape is computed at run time"))?;
    let src = imp.shape_of(&x);
    let n = src.len().max(shape.len());
    let scope = imp.g.scope();
    let mut target = Vec::with_capacity(n);
    for i in 0..n {
        let a = (i + src.len() >= n).then(|| src[i + src.len() - n].clone());
        let b = (i + shape.len() >= n).then(|| shape[i + shape.len() - n].clone());
        let d = match (a, b) {
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (Some(a), Some(b)) => {
                if b.as_const() == Some(1) || scope.prove_eq(&a, &b) {
                    a
                } else if a.as_const() == Some(1) {
                    b
                } else {
                    return Err(cx.err(format!("cannot expand `{a}` to `{b}` at axis {i}")));
                }
            }
            (None, None) => unreachable!("i < max rank"),
        };
        target.push(d);
    }
    if target == src {
        return Ok(vec![x]);
    }
    let id = imp.tensor(cx, 0)?;
    let y = imp.g.expand(id, &target).map_err(|e| cx.graph_err(e))?;
    Ok(runtime(imp, y, x.elem()))
}

/// `Gather`: of constants or shape vectors with constant indices it folds;
/// with run-time indices or of a run-time tensor it is the graph's
/// `gather` (an embedding lookup; a constant table becomes a graph
/// constant).
pub(super) fn gather(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let x = imp.req(cx, 0)?;
    let idx = imp.req(cx, 1)?;
    let axis = cx.attr_i("axis", 0);
    let ic = match idx.as_const() {
        Some(ic) if x.as_const().is_some() || matches!(x, Value::Ints { .. }) => ic,
        _ => return graph_gather(imp, cx, &x, axis),
    };
    if let (Value::Ints { dims, .. }, 0 | -1) = (&x, axis) {
        let n = dims.len() as i64;
        let picked = ic
            .data
            .iter()
            .map(|&i| {
                let i = i as i64;
                let k = if i < 0 { i.saturating_add(n) } else { i };
                dims.get(usize::try_from(k).ok()?).cloned()
            })
            .collect::<Option<Vec<Dim>>>()
            .ok_or_else(|| cx.err(format!("index out of range for {n} elements")))?;
        if ic.shape.len() > 1 {
            return graph_gather(imp, cx, &x, axis);
        }
        return Ok(vec![Value::Ints {
            scalar: ic.shape.is_empty(),
            dims: picked,
        }]);
    }
    let Some(c) = x.as_const() else {
        return graph_gather(imp, cx, &x, axis);
    };
    let axis = norm_axis(cx, axis, c.shape.len())?;
    let outer: usize = c.shape[..axis].iter().product();
    let inner: usize = c.shape[axis + 1..].iter().product();
    let n = c.shape[axis];
    let mut data = Vec::with_capacity(outer * ic.data.len() * inner);
    for o in 0..outer {
        for &i in &ic.data {
            let i = i as i64;
            let k = if i < 0 { i.saturating_add(n as i64) } else { i };
            if !(0..n as i64).contains(&k) {
                return Err(cx.err(format!("index {i} out of range for extent {n}")));
            }
            let base = (o * n + k as usize) * inner;
            data.extend_from_slice(&c.data[base..base + inner]);
        }
    }
    let mut shape = c.shape[..axis].to_vec();
    shape.extend(&ic.shape);
    shape.extend(&c.shape[axis + 1..]);
    Ok(vec![Value::Const(Const {
        elem: c.elem,
        shape,
        data,
    })])
}

/// The graph's `gather` of the node's two inputs along `axis`.
fn graph_gather(imp: &mut Importer<'_>, cx: &NodeCx<'_>, x: &Value, axis: i64) -> R {
    let (xid, iid) = (imp.tensor(cx, 0)?, imp.tensor(cx, 1)?);
    let y = imp.g.gather(xid, iid, axis).map_err(|e| cx.graph_err(e))?;
    Ok(runtime(imp, y, x.elem()))
}

/// `Trilu`: the upper or lower triangle of the last two axes, with the
/// diagonal offset `k` a constant (default 0).
pub(super) fn trilu(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let k = match imp.value(cx, 1)? {
        None => 0,
        Some(v) => v
            .as_const()
            .and_then(|c| c.single())
            .map(|k| k as i64)
            .ok_or_else(|| cx.unsupported("a diagonal offset k computed at run time"))?,
    };
    let upper = cx.attr_i("upper", 1) != 0;
    let x = imp.req(cx, 0)?;
    let id = imp.tensor(cx, 0)?;
    let y = imp.g.trilu(id, upper, k).map_err(|e| cx.graph_err(e))?;
    Ok(vec![Value::Runtime {
        id: y,
        elem: x.elem(),
    }])
}
