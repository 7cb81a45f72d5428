//! Element-wise operators: unary, binary (with the scalar forms dvm fuses
//! best), comparisons, logic, `Where`, `Cast`. Constant operands fold; the
//! arithmetic of symbolic shape vectors folds into [`Dim`] expressions.

use dvm_isa::Opcode;
use dvm_sym::Dim;

use super::NodeCx;
use crate::error::OnnxError;
use crate::import::Importer;
use crate::value::{dtype_of, elem, zip_broadcast, Const, Value};

type R = Result<Vec<Value>, OnnxError>;

fn unary(imp: &mut Importer<'_>, cx: &NodeCx<'_>, code: Opcode, fold: fn(f64) -> f64) -> R {
    let x = imp.req(cx, 0)?;
    if let Some(c) = x.as_const() {
        let out_elem = if code == Opcode::Not {
            elem::BOOL
        } else {
            c.elem
        };
        return Ok(vec![Value::Const(Const {
            elem: out_elem,
            data: c.data.iter().map(|&v| fold(v)).collect(),
            shape: c.shape,
        })]);
    }
    let id = imp.tensor(cx, 0)?;
    let y = imp.g.unary(code, id).map_err(|e| cx.graph_err(e))?;
    Ok(vec![Value::Runtime {
        id: y,
        elem: x.elem(),
    }])
}

macro_rules! unary_fns {
    ($($name:ident => $code:ident, $fold:expr;)*) => {$(
        pub(super) fn $name(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
            unary(imp, cx, Opcode::$code, $fold)
        }
    )*};
}

unary_fns! {
    abs => Abs, f64::abs;
    neg => Neg, |v| -v;
    exp => Exp, f64::exp;
    log => Log, f64::ln;
    sqrt => Sqrt, f64::sqrt;
    reciprocal => Recip, |v| 1.0 / v;
    tanh => Tanh, f64::tanh;
    erf => Erf, libm::erf;
    sin => Sin, f64::sin;
    cos => Cos, f64::cos;
    sigmoid => Sigmoid, |v| 1.0 / (1.0 + (-v).exp());
    relu => Relu, |v| v.max(0.0);
    not => Not, |v| f64::from(u8::from(v == 0.0));
    floor => Floor, f64::floor;
    ceil => Ceil, f64::ceil;
    round => Round, |v| v.round_ties_even();
}

/// `Gelu` (opset 20): `approximate` is `none` (erf form) or `tanh`.
pub(super) fn gelu(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let code = match cx.attr_s("approximate").as_deref() {
        None | Some("none") => Opcode::GeluErf,
        Some("tanh") => Opcode::GeluTanh,
        Some(other) => return Err(cx.err(format!("approximate `{other}`"))),
    };
    let x = imp.req(cx, 0)?;
    let id = imp.tensor(cx, 0)?;
    let y = imp.g.unary(code, id).map_err(|e| cx.graph_err(e))?;
    Ok(vec![Value::Runtime {
        id: y,
        elem: x.elem(),
    }])
}

/// A binary operator: its tensor opcode, its with-scalar opcodes (scalar
/// right, scalar left), its fold on numbers and on dimensions.
struct Bin {
    code: Opcode,
    scalar_right: Option<Opcode>,
    scalar_left: Option<Opcode>,
    fold: fn(f64, f64, bool) -> f64,
    dims: Option<fn(&Dim, &Dim) -> Option<Dim>>,
    compare: bool,
}

fn int_div(a: f64, b: f64, int: bool) -> f64 {
    if int {
        if b == 0.0 {
            0.0
        } else {
            (a / b).trunc()
        }
    } else {
        a / b
    }
}

fn dim_div(a: &Dim, b: &Dim) -> Option<Dim> {
    if a == b {
        return Some(Dim::from(1));
    }
    match b.as_const() {
        Some(d) if d > 0 => a.div(d).ok(),
        _ => None,
    }
}

const fn bin(
    code: Opcode,
    r: Option<Opcode>,
    l: Option<Opcode>,
    fold: fn(f64, f64, bool) -> f64,
) -> Bin {
    Bin {
        code,
        scalar_right: r,
        scalar_left: l,
        fold,
        dims: None,
        compare: false,
    }
}

fn binary(imp: &mut Importer<'_>, cx: &NodeCx<'_>, op: &Bin) -> R {
    let a = imp.req(cx, 0)?;
    let b = imp.req(cx, 1)?;
    // Shape arithmetic on symbolic int vectors.
    if matches!(a, Value::Ints { .. }) || matches!(b, Value::Ints { .. }) {
        if let (Some((sa, da)), Some((sb, db))) = (a.ints(), b.ints()) {
            if let Some(v) = fold_dims(imp, op, (sa, &da), (sb, &db)) {
                return Ok(vec![v]);
            }
        }
    }
    if let (Some(ca), Some(cb)) = (a.as_const(), b.as_const()) {
        let int = elem::is_int(ca.elem);
        let out = if op.compare { elem::BOOL } else { ca.elem };
        let f = op.fold;
        // (Shapes that do not broadcast, or a result too large to fold,
        // are left to the graph.)
        if let Some(c) = zip_broadcast(&[&ca, &cb], out, |v| f(v[0], v[1], int)) {
            return Ok(vec![Value::Const(c)]);
        }
    }
    let out_elem = if op.compare {
        elem::BOOL
    } else if matches!(a, Value::Runtime { .. }) {
        a.elem()
    } else {
        b.elem()
    };
    let single = |v: &Value, other: &Value| -> Option<f64> {
        let c = v.as_const()?;
        let s = c.single()?;
        (c.shape.len() <= imp.shape_of(other).len()).then_some(s)
    };
    if let (Some(code), Some(s)) = (op.scalar_right, single(&b, &a)) {
        let x = imp.tensor(cx, 0)?;
        let y = imp.g.scalar(code, x, s).map_err(|e| cx.graph_err(e))?;
        return Ok(vec![Value::Runtime {
            id: y,
            elem: out_elem,
        }]);
    }
    if let (Some(code), Some(s)) = (op.scalar_left, single(&a, &b)) {
        let x = imp.tensor(cx, 1)?;
        let y = imp.g.scalar(code, x, s).map_err(|e| cx.graph_err(e))?;
        return Ok(vec![Value::Runtime {
            id: y,
            elem: out_elem,
        }]);
    }
    let x = imp.tensor(cx, 0)?;
    let mut y = imp.tensor(cx, 1)?;
    let (dx, dy) = (imp.g.nodes()[x.0].dtype, imp.g.nodes()[y.0].dtype);
    if dx != dy {
        y = imp.g.cast(y, dx).map_err(|e| cx.graph_err(e))?;
    }
    let z = imp.g.binary(op.code, x, y).map_err(|e| cx.graph_err(e))?;
    Ok(vec![Value::Runtime {
        id: z,
        elem: out_elem,
    }])
}

/// `op` over two int vectors (or scalars) of dimensions, broadcasting a
/// one-element side; `None` if a result is not expressible.
fn fold_dims(imp: &Importer<'_>, op: &Bin, a: (bool, &[Dim]), b: (bool, &[Dim])) -> Option<Value> {
    let n = a.1.len().max(b.1.len());
    if (a.1.len() != n && a.1.len() != 1) || (b.1.len() != n && b.1.len() != 1) {
        return None;
    }
    let pick = |v: &[Dim], i: usize| v[if v.len() == 1 { 0 } else { i }].clone();
    let scalar = a.0 && b.0;
    if op.compare {
        // Only equality of dimensions is decidable here.
        if op.code != Opcode::Eq {
            return None;
        }
        let scope = imp.g.scope();
        let mut data = Vec::with_capacity(n);
        for i in 0..n {
            let (x, y) = (pick(a.1, i), pick(b.1, i));
            if scope.prove_eq(&x, &y) {
                data.push(1.0);
            } else if scope.prove_ne(&x, &y) {
                data.push(0.0);
            } else {
                return None;
            }
        }
        return Some(Value::Const(Const {
            elem: elem::BOOL,
            shape: if scalar { vec![] } else { vec![n] },
            data,
        }));
    }
    let f = op.dims?;
    let dims = (0..n)
        .map(|i| f(&pick(a.1, i), &pick(b.1, i)))
        .collect::<Option<Vec<Dim>>>()?;
    Some(Value::Ints { scalar, dims })
}

macro_rules! binary_fns {
    ($($name:ident => $bin:expr;)*) => {$(
        pub(super) fn $name(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
            const OP: Bin = $bin;
            binary(imp, cx, &OP)
        }
    )*};
}

use Opcode as O;

binary_fns! {
    add => Bin { dims: Some(|a, b| Some(a.clone() + b.clone())), ..bin(O::Add, Some(O::AddS), Some(O::AddS), |a, b, _| a + b) };
    sub => Bin { dims: Some(|a, b| Some(a.clone() - b.clone())), ..bin(O::Sub, Some(O::SubS), Some(O::RSubS), |a, b, _| a - b) };
    mul => Bin { dims: Some(|a, b| Some(a.clone() * b.clone())), ..bin(O::Mul, Some(O::MulS), Some(O::MulS), |a, b, _| a * b) };
    div => Bin { dims: Some(dim_div), ..bin(O::Div, Some(O::DivS), Some(O::RDivS), int_div) };
    pow => bin(O::Pow, Some(O::PowS), None, |a, b, _| a.powf(b));
    equal => Bin { compare: true, ..bin(O::Eq, Some(O::EqS), Some(O::EqS), |a, b, _| f64::from(u8::from(a == b))) };
    less => Bin { compare: true, ..bin(O::Lt, Some(O::LtS), Some(O::GtS), |a, b, _| f64::from(u8::from(a < b))) };
    greater => Bin { compare: true, ..bin(O::Gt, Some(O::GtS), Some(O::LtS), |a, b, _| f64::from(u8::from(a > b))) };
    less_or_equal => Bin { compare: true, ..bin(O::Le, Some(O::LeS), Some(O::GeS), |a, b, _| f64::from(u8::from(a <= b))) };
    greater_or_equal => Bin { compare: true, ..bin(O::Ge, Some(O::GeS), Some(O::LeS), |a, b, _| f64::from(u8::from(a >= b))) };
    and => bin(O::And, None, None, |a, b, _| f64::from(u8::from(a != 0.0 && b != 0.0)));
    or => bin(O::Or, None, None, |a, b, _| f64::from(u8::from(a != 0.0 || b != 0.0)));
}

/// `Max` / `Min`: variadic, folded pairwise.
fn variadic(imp: &mut Importer<'_>, cx: &NodeCx<'_>, op: &Bin) -> R {
    if cx.node.input.len() == 1 {
        return Ok(vec![imp.req(cx, 0)?]);
    }
    if cx.node.input.len() != 2 {
        return Err(cx.unsupported(format!(
            "{} operands (two are supported)",
            cx.node.input.len()
        )));
    }
    binary(imp, cx, op)
}

pub(super) fn max(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    const OP: Bin = Bin {
        dims: Some(|a, b| Some(a.max(b))),
        ..bin(O::Max, Some(O::MaxS), Some(O::MaxS), |a, b, _| a.max(b))
    };
    variadic(imp, cx, &OP)
}

pub(super) fn min(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    const OP: Bin = Bin {
        dims: Some(|a, b| Some(a.min(b))),
        ..bin(O::Min, Some(O::MinS), Some(O::MinS), |a, b, _| a.min(b))
    };
    variadic(imp, cx, &OP)
}

/// `Where(cond, x, y)`: folded when the condition is constant.
pub(super) fn where_(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let c = imp.req(cx, 0)?;
    let x = imp.req(cx, 1)?;
    let y = imp.req(cx, 2)?;
    if let Some(cc) = c.as_const() {
        if let (Some((sx, dx)), Some((sy, dy))) = (x.ints(), y.ints()) {
            let n = cc.data.len().max(dx.len()).max(dy.len());
            let fits = |len: usize| len == 1 || len == n;
            let symbolic = matches!(x, Value::Ints { .. }) || matches!(y, Value::Ints { .. });
            if symbolic
                && cc.shape.len() <= 1
                && fits(cc.data.len())
                && fits(dx.len())
                && fits(dy.len())
            {
                let pick = |v: &[Dim], i: usize| v.get(if v.len() == 1 { 0 } else { i }).cloned();
                let dims = (0..n)
                    .map(|i| {
                        let k = cc.data.get(if cc.data.len() == 1 { 0 } else { i })?;
                        if *k != 0.0 {
                            pick(&dx, i)
                        } else {
                            pick(&dy, i)
                        }
                    })
                    .collect::<Option<Vec<Dim>>>();
                if let Some(dims) = dims {
                    return Ok(vec![Value::Ints {
                        scalar: cc.shape.is_empty() && sx && sy,
                        dims,
                    }]);
                }
            }
        }
        if let (Some(cx_), Some(cy)) = (x.as_const(), y.as_const()) {
            let folded = zip_broadcast(&[&cc, &cx_, &cy], cx_.elem, |v| {
                if v[0] != 0.0 {
                    v[1]
                } else {
                    v[2]
                }
            });
            if let Some(c) = folded {
                return Ok(vec![Value::Const(c)]);
            }
        }
    }
    let cond = imp.tensor(cx, 0)?;
    let a = imp.tensor(cx, 1)?;
    let mut b = imp.tensor(cx, 2)?;
    let (da, db) = (imp.g.nodes()[a.0].dtype, imp.g.nodes()[b.0].dtype);
    if da != db {
        b = imp.g.cast(b, da).map_err(|e| cx.graph_err(e))?;
    }
    let out = imp.g.where_(cond, a, b).map_err(|e| cx.graph_err(e))?;
    let e = if matches!(x, Value::Runtime { .. }) {
        x.elem()
    } else {
        y.elem()
    };
    Ok(vec![Value::Runtime { id: out, elem: e }])
}

fn cast_to(imp: &mut Importer<'_>, cx: &NodeCx<'_>, to: i32) -> R {
    let x = imp.req(cx, 0)?;
    if elem::is_int(to) {
        if let Value::Ints { .. } = x {
            return Ok(vec![x]);
        }
    }
    if let Some(c) = x.as_const() {
        return Ok(vec![Value::Const(c.cast(to))]);
    }
    let dtype = dtype_of(to).map_err(|r| cx.unsupported(r))?;
    let id = imp.tensor(cx, 0)?;
    if imp.g.nodes()[id.0].dtype == dtype {
        return Ok(vec![Value::Runtime { id, elem: to }]);
    }
    let y = imp.g.cast(id, dtype).map_err(|e| cx.graph_err(e))?;
    if let Some((_, dims)) = x.ints().filter(|(_, d)| d.len() == 1) {
        imp.float_dims.insert(y, dims[0].clone());
    }
    Ok(vec![Value::Runtime { id: y, elem: to }])
}

/// `Cast` to the `to` attribute's type.
pub(super) fn cast(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let to = cx.attr_i("to", 0) as i32;
    cast_to(imp, cx, to)
}

/// `CastLike`: to the second operand's type.
pub(super) fn cast_like(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let to = imp.req(cx, 1)?.elem();
    cast_to(imp, cx, to)
}

/// `Clip(x, min, max)` with optional bounds: `maxs` and `mins` for
/// constant bounds, `max` and `min` for computed ones.
pub(super) fn clip(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let x = imp.req(cx, 0)?;
    if let Some(c) = x.as_const() {
        let lo = imp.value(cx, 1)?.and_then(|v| v.as_const()?.single());
        let hi = imp.value(cx, 2)?.and_then(|v| v.as_const()?.single());
        let data = c
            .data
            .iter()
            .map(|&v| {
                let v = lo.map_or(v, |l| v.max(l));
                hi.map_or(v, |h| v.min(h))
            })
            .collect();
        return Ok(vec![Value::Const(Const { data, ..c })]);
    }
    let mut y = imp.tensor(cx, 0)?;
    for (i, scalar, tensor) in [
        (1, Opcode::MaxS, Opcode::Max),
        (2, Opcode::MinS, Opcode::Min),
    ] {
        let Some(bound) = imp.value(cx, i)? else {
            continue;
        };
        y = match bound.as_const().and_then(|c| c.single()) {
            Some(b) => imp.g.scalar(scalar, y, b),
            None => {
                let b = imp.tensor(cx, i)?;
                imp.g.binary(tensor, y, b)
            }
        }
        .map_err(|e| cx.graph_err(e))?;
    }
    Ok(vec![Value::Runtime {
        id: y,
        elem: x.elem(),
    }])
}
