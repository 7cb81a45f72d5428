//! `MatMul` and `Gemm`.

use super::NodeCx;
use crate::error::OnnxError;
use crate::import::Importer;
use crate::value::Value;

type R = Result<Vec<Value>, OnnxError>;

/// `MatMul` with NumPy semantics: a rank-1 operand is a row (left) or a
/// column (right) vector, removed again from the result.
pub(super) fn matmul(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let ea = imp.req(cx, 0)?.elem();
    let mut a = imp.tensor(cx, 0)?;
    let mut b = imp.tensor(cx, 1)?;
    let ra = imp.g.nodes()[a.0].shape.len();
    let rb = imp.g.nodes()[b.0].shape.len();
    let g = &mut imp.g;
    let ge = |e| cx.graph_err(e);
    if ra == 1 {
        a = g.unsqueeze(a, &[0]).map_err(ge)?;
    }
    if rb == 1 {
        b = g.unsqueeze(b, &[1]).map_err(ge)?;
    }
    let mut y = g.matmul(a, b, false, false).map_err(ge)?;
    if rb == 1 {
        y = g.squeeze(y, &[-1]).map_err(ge)?;
    }
    if ra == 1 {
        y = g.squeeze(y, &[if rb == 1 { -1 } else { -2 }]).map_err(ge)?;
    }
    Ok(vec![Value::Runtime { id: y, elem: ea }])
}

/// `Gemm`: `alpha · A' · B' + beta · C` with optional transposes.
pub(super) fn gemm(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let ea = imp.req(cx, 0)?.elem();
    let alpha = cx.attr_f("alpha", 1.0);
    let beta = cx.attr_f("beta", 1.0);
    let ta = cx.attr_i("transA", 0) != 0;
    let tb = cx.attr_i("transB", 0) != 0;
    let a = imp.tensor(cx, 0)?;
    let b = imp.tensor(cx, 1)?;
    let c = match imp.value(cx, 2)? {
        Some(_) if beta != 0.0 => Some(imp.tensor(cx, 2)?),
        _ => None,
    };
    let g = &mut imp.g;
    let ge = |e| cx.graph_err(e);
    let mut y = g.matmul(a, b, ta, tb).map_err(ge)?;
    if alpha != 1.0 {
        y = g.muls(y, alpha).map_err(ge)?;
    }
    if let Some(mut c) = c {
        if beta != 1.0 {
            c = g.muls(c, beta).map_err(ge)?;
        }
        y = g.add(y, c).map_err(ge)?;
    }
    Ok(vec![Value::Runtime { id: y, elem: ea }])
}
