//! `Constant`, `ConstantOfShape`, `Range`, and the pass-throughs
//! `Identity` and `Dropout` (inference).

use dvm_isa::Opcode;

use super::NodeCx;
use crate::error::OnnxError;
use crate::import::Importer;
use crate::tensor_data;
use crate::value::{elem, Const, Value};

type R = Result<Vec<Value>, OnnxError>;

/// Largest constant `ConstantOfShape` and `Range` fold, in elements.
const FOLD_LIMIT: usize = 1 << 16;

pub(super) fn constant(_imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let c = if let Some(t) = cx.attr_t("value") {
        tensor_data::decode(t, None)?
    } else if cx.has_attr("value_float") {
        Const::scalar(elem::FLOAT, cx.attr_f("value_float", 0.0))
    } else if let Some(fs) = cx.attr_floats("value_floats") {
        Const {
            elem: elem::FLOAT,
            shape: vec![fs.len()],
            data: fs.iter().map(|&v| f64::from(v)).collect(),
        }
    } else if cx.has_attr("value_int") {
        Const::scalar(elem::INT64, cx.attr_i("value_int", 0) as f64)
    } else if let Some(is) = cx.attr_ints("value_ints") {
        Const {
            elem: elem::INT64,
            shape: vec![is.len()],
            data: is.iter().map(|&v| v as f64).collect(),
        }
    } else {
        return Err(cx.unsupported("a constant without a tensor, float(s) or int(s) value"));
    };
    Ok(vec![Value::Const(c)])
}

/// `ConstantOfShape`: folded when the shape is constant and small, a
/// filled graph tensor of symbolic shape otherwise.
pub(super) fn constant_of_shape(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let (_, dims) = imp
        .req(cx, 0)?
        .ints()
        .ok_or_else(|| cx.unsupported("the shape is computed at run time"))?;
    let fill = match cx.attr_t("value") {
        Some(t) => tensor_data::decode(t, None)?,
        None => Const::scalar(elem::FLOAT, 0.0),
    };
    let v = fill.data.first().copied().unwrap_or(0.0);
    let consts: Option<Vec<usize>> = dims
        .iter()
        .map(|d| d.as_const().and_then(|v| usize::try_from(v).ok()))
        .collect();
    if let Some(shape) = consts {
        let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if let Some(n) = n.filter(|&n| n <= FOLD_LIMIT) {
            return Ok(vec![Value::Const(Const {
                elem: fill.elem,
                shape,
                data: vec![v; n],
            })]);
        }
    }
    let dtype = crate::value::dtype_of(fill.elem).map_err(|r| cx.unsupported(r))?;
    let id = imp.g.full(dtype, &dims, v).map_err(|e| cx.graph_err(e))?;
    Ok(vec![Value::Runtime {
        id,
        elem: fill.elem,
    }])
}

/// `Range`: folded when all three inputs are constants; with a symbolic
/// `limit` (and constant integer `start` and `delta`) an `iota` of
/// `ceil((limit − start) / delta)` elements, scaled and shifted.
pub(super) fn range(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let mut vals = Vec::with_capacity(3);
    for i in 0..3 {
        let v = imp.req(cx, i)?;
        vals.push(v);
    }
    let singles: Option<Vec<f64>> = vals
        .iter()
        .map(|v| v.as_const().and_then(|c| c.single()))
        .collect();
    let Some(s) = singles else {
        return symbolic_range(imp, cx, &vals);
    };
    let (start, limit, delta) = (s[0], s[1], s[2]);
    if delta == 0.0 {
        return Err(cx.err("delta is 0"));
    }
    let n = ((limit - start) / delta).ceil().max(0.0) as usize;
    if n > FOLD_LIMIT {
        return Err(cx.unsupported(format!("a constant range of {n} elements")));
    }
    let e = vals[0].elem();
    let data = (0..n).map(|k| start + k as f64 * delta).collect();
    Ok(vec![Value::Const(Const {
        elem: e,
        shape: vec![n],
        data,
    })])
}

/// `Range(start, limit, delta)` whose `limit` is a symbolic dimension:
/// `start + delta · iota(n)`.
fn symbolic_range(imp: &mut Importer<'_>, cx: &NodeCx<'_>, vals: &[Value]) -> R {
    let int_scalar = |i: usize| -> Result<i64, OnnxError> {
        vals[i]
            .as_const()
            .and_then(|c| c.single())
            .filter(|v| v.fract() == 0.0)
            .map(|v| v as i64)
            .ok_or_else(|| {
                cx.unsupported(format!(
                    "input {i} of a range with a symbolic limit must be a constant integer"
                ))
            })
    };
    let (start, delta) = (int_scalar(0)?, int_scalar(2)?);
    let limit = match &vals[1] {
        Value::Runtime { id, .. } => imp.float_dims.get(id).cloned(),
        v => v
            .ints()
            .filter(|(_, d)| d.len() == 1)
            .map(|(_, d)| d[0].clone()),
    }
    .ok_or_else(|| cx.unsupported("a range whose limit is computed at run time"))?;
    if delta <= 0 {
        return Err(cx.unsupported(format!(
            "a range with a symbolic limit and delta {delta} (only positive deltas)"
        )));
    }
    let n = (limit - start)
        .div_ceil(delta)
        .map_err(|e| cx.err(format!("range length: {e}")))?;
    let e = vals[0].elem();
    let dtype = crate::value::dtype_of(e).map_err(|r| cx.unsupported(r))?;
    let mut id = imp.g.iota(dtype, &[n], 0).map_err(|e| cx.graph_err(e))?;
    if delta != 1 {
        id = imp
            .g
            .scalar(Opcode::MulS, id, delta as f64)
            .map_err(|e| cx.graph_err(e))?;
    }
    if start != 0 {
        id = imp
            .g
            .scalar(Opcode::AddS, id, start as f64)
            .map_err(|e| cx.graph_err(e))?;
    }
    Ok(vec![Value::Runtime { id, elem: e }])
}

pub(super) fn identity(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    Ok(vec![imp.req(cx, 0)?])
}

/// `Dropout` at inference: the identity (and an all-true mask if asked).
pub(super) fn dropout(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    if let Some(t) = imp.value(cx, 2)? {
        if t.as_const()
            .and_then(|c| c.single())
            .is_none_or(|v| v != 0.0)
        {
            return Err(cx.unsupported("dropout in training mode"));
        }
    }
    let x = imp.req(cx, 0)?;
    if cx.node.output.get(1).is_some_and(|m| !m.is_empty()) {
        return Err(cx.unsupported("the dropout mask output"));
    }
    Ok(vec![x])
}
