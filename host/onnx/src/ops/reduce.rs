//! Reductions, softmax and the normalisations (dvm composites).

use dvm_graph::ReduceOp;
use dvm_sym::Dim;

use super::{norm_axis, NodeCx};
use crate::error::OnnxError;
use crate::import::Importer;
use crate::value::Value;

type R = Result<Vec<Value>, OnnxError>;

/// The `axes` of a reduction: the second input (ReduceSum from opset 13,
/// the others from 18) or the attribute; `None` for "all axes".
fn axes(imp: &Importer<'_>, cx: &NodeCx<'_>) -> Result<Option<Vec<i64>>, OnnxError> {
    if let Some(v) = imp.value(cx, 1)? {
        let c = v
            .as_const()
            .ok_or_else(|| cx.unsupported("axes computed at run time"))?;
        return Ok(Some(c.data.iter().map(|&a| a as i64).collect()));
    }
    Ok(cx.attr_ints("axes"))
}

fn reduce(imp: &mut Importer<'_>, cx: &NodeCx<'_>, op: ReduceOp) -> R {
    let x = imp.req(cx, 0)?;
    let keep = cx.attr_i("keepdims", 1) != 0;
    let rank = imp.shape_of(&x).len();
    let axes = match axes(imp, cx)? {
        Some(a) if !a.is_empty() => a,
        _ if cx.attr_i("noop_with_empty_axes", 0) != 0 => return Ok(vec![x]),
        _ => (0..rank as i64).collect(),
    };
    let id = imp.tensor(cx, 0)?;
    let y = imp
        .g
        .reduce(id, op, &axes, keep)
        .map_err(|e| cx.graph_err(e))?;
    Ok(vec![Value::Runtime {
        id: y,
        elem: x.elem(),
    }])
}

pub(super) fn sum(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    reduce(imp, cx, ReduceOp::Sum)
}

pub(super) fn mean(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    reduce(imp, cx, ReduceOp::Mean)
}

pub(super) fn max(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    reduce(imp, cx, ReduceOp::Max)
}

pub(super) fn min(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    reduce(imp, cx, ReduceOp::Min)
}

pub(super) fn softmax(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let e = imp.req(cx, 0)?.elem();
    let x = imp.tensor(cx, 0)?;
    let y = imp
        .g
        .softmax(x, cx.attr_i("axis", -1))
        .map_err(|e| cx.graph_err(e))?;
    Ok(vec![Value::Runtime { id: y, elem: e }])
}

pub(super) fn log_softmax(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let e = imp.req(cx, 0)?.elem();
    let x = imp.tensor(cx, 0)?;
    let y = imp
        .g
        .log_softmax(x, cx.attr_i("axis", -1))
        .map_err(|e| cx.graph_err(e))?;
    Ok(vec![Value::Runtime { id: y, elem: e }])
}

/// Checks a normalisation is over the last axis only and asks for no
/// statistics outputs; returns the last dimension.
fn last_axis_norm(imp: &Importer<'_>, cx: &NodeCx<'_>, x: &Value) -> Result<Dim, OnnxError> {
    let shape = imp.shape_of(x);
    let axis = norm_axis(cx, cx.attr_i("axis", -1), shape.len())?;
    if axis + 1 != shape.len() {
        return Err(cx.unsupported(format!(
            "normalisation from axis {axis} of a rank-{} tensor (only the last axis is supported)",
            shape.len()
        )));
    }
    if cx.node.output.iter().skip(1).any(|o| !o.is_empty()) {
        return Err(cx.unsupported("the mean / inverse-deviation outputs"));
    }
    Ok(shape[axis].clone())
}

/// A `[D]` weight: the operand reshaped when it has extra unit axes.
fn weight(
    imp: &mut Importer<'_>,
    cx: &NodeCx<'_>,
    i: usize,
    d: &Dim,
) -> Result<dvm_graph::NodeId, OnnxError> {
    let w = imp.tensor(cx, i)?;
    if imp.g.nodes()[w.0].shape.len() == 1 {
        return Ok(w);
    }
    imp.g
        .reshape(w, std::slice::from_ref(d))
        .map_err(|e| cx.graph_err(e))
}

pub(super) fn layer_norm(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let xv = imp.req(cx, 0)?;
    let d = last_axis_norm(imp, cx, &xv)?;
    let x = imp.tensor(cx, 0)?;
    let gamma = weight(imp, cx, 1, &d)?;
    let beta = match imp.value(cx, 2)? {
        Some(_) => weight(imp, cx, 2, &d)?,
        None => {
            let dt = imp.g.nodes()[x.0].dtype;
            imp.g.full(dt, &[d], 0.0).map_err(|e| cx.graph_err(e))?
        }
    };
    let eps = cx.attr_f("epsilon", 1e-5);
    let y = imp
        .g
        .layer_norm(x, gamma, beta, eps)
        .map_err(|e| cx.graph_err(e))?;
    Ok(vec![Value::Runtime {
        id: y,
        elem: xv.elem(),
    }])
}

pub(super) fn rms_norm(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let xv = imp.req(cx, 0)?;
    let d = last_axis_norm(imp, cx, &xv)?;
    let x = imp.tensor(cx, 0)?;
    let gamma = weight(imp, cx, 1, &d)?;
    let eps = cx.attr_f("epsilon", 1e-5);
    let y = imp.g.rms_norm(x, gamma, eps).map_err(|e| cx.graph_err(e))?;
    Ok(vec![Value::Runtime {
        id: y,
        elem: xv.elem(),
    }])
}
