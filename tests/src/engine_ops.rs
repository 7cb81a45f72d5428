//! Cases for the operators real models need: trigonometry (rotary
//! embeddings), `iota` and `trilu` (positions, causal masks), …

use dvm_isa::DType;
use dvm_sym::Dim;

use super::{Builder, Case, Domain, F32, R};

/// Every case of this module.
pub(super) fn cases(out: &mut Vec<Case>) -> R<()> {
    trig(out)?;
    iota_trilu(out)?;
    Ok(())
}

/// `sin`/`cos` at half precision, and a rotary embedding: the angles
/// `pos · freq`, their sine and cosine, and the rotation of the two halves
/// of `x`, all element-wise and fused.
fn trig(out: &mut Vec<Case>) -> R<()> {
    for dt in [DType::F16, DType::BF16] {
        let mut b = Builder::new(format!("trig/{}-sin-cos", dt.name())).tol(1e-2, 1e-2);
        let x = b.input("x", dt, &[4, 65], Domain::Any)?;
        let s = b.g.sin(x)?;
        let c = b.g.cos(x)?;
        out.push(b.output(&[s, c])?);
    }
    for s in [1u64, 37] {
        let mut b = Builder::new(format!("trig/rotary-S={s}")).tol(1e-5, 1e-5);
        let sym = b.g.symbol("S", 1, 4096)?;
        let sd = Dim::from(sym);
        let h = 16i64;
        let x = b.input_dims(
            "x",
            F32,
            &[sd.clone(), Dim::from(2 * h)],
            &[s, 32],
            Domain::Any,
        )?;
        let pos = b.input_dims("pos", F32, &[sd, Dim::from(1)], &[s, 1], Domain::Positive)?;
        let freq: Vec<f64> = (0..h)
            .map(|i| 10000f64.powf(-(i as f64) / h as f64))
            .collect();
        let f = b.g.constant(F32, &[Dim::from(h)], &freq)?;
        let ang = b.g.mul(pos, f)?;
        let (sn, cs) = (b.g.sin(ang)?, b.g.cos(ang)?);
        let x1 = b.g.slice(x, &[(1, 0, h, 1)])?;
        let x2 = b.g.slice(x, &[(1, h, 2 * h, 1)])?;
        let a = b.g.mul(x1, cs)?;
        let bb = b.g.mul(x2, sn)?;
        let lo = b.g.sub(a, bb)?;
        let c = b.g.mul(x1, sn)?;
        let d = b.g.mul(x2, cs)?;
        let hi = b.g.add(c, d)?;
        let y = b.g.concat(&[lo, hi], 1)?;
        out.push(b.output(&[y])?);
    }
    Ok(())
}

/// `iota` at symbolic lengths (rotary positions computed in the graph),
/// `trilu` both ways with offsets, and causal masks (from `trilu` and from
/// two `iota`s and a comparison) feeding a softmax.
fn iota_trilu(out: &mut Vec<Case>) -> R<()> {
    for s in [1u64, 7, 130] {
        let mut b = Builder::new(format!("iota/positions-S={s}")).tol(1e-5, 1e-5);
        let sym = b.g.symbol("S", 1, 4096)?;
        let sd = Dim::from(sym);
        let x = b.input_dims("x", F32, &[sd.clone(), Dim::from(8)], &[s, 8], Domain::Any)?;
        let pos = b.g.iota(F32, &[sd.clone(), Dim::from(1)], 0)?;
        let ipos = b.g.iota(DType::I32, &[sd], 0)?;
        let freq: Vec<f64> = (0..8).map(|i| 10000f64.powf(-(i as f64) / 8.0)).collect();
        let f = b.g.constant(F32, &[Dim::from(8)], &freq)?;
        let ang = b.g.mul(pos, f)?;
        let c = b.g.cos(ang)?;
        let y = b.g.mul(x, c)?;
        out.push(b.output(&[y, ipos])?);
    }
    for (upper, k) in [(true, 0i64), (true, 2), (false, 0), (false, -1)] {
        let name = format!("trilu/{}-k={k}", if upper { "upper" } else { "lower" });
        let mut b = Builder::new(name).tol(0.0, 0.0);
        let x = b.input("x", F32, &[2, 5, 7], Domain::Any)?;
        let y = b.g.trilu(x, upper, k)?;
        out.push(b.output(&[y])?);
    }
    for s in [1u64, 33] {
        let mut b = Builder::new(format!("causal/trilu-softmax-S={s}")).tol(1e-5, 1e-6);
        let sym = b.g.symbol("S", 1, 4096)?;
        let sd = Dim::from(sym);
        let x = b.input_dims("x", F32, &[sd.clone(), sd.clone()], &[s, s], Domain::Any)?;
        let ones = b.g.full(F32, &[sd.clone(), sd.clone()], 1.0)?;
        let keep = b.g.trilu(ones, false, 0)?;
        let keep = b.g.scalar(dvm_isa::Opcode::NeS, keep, 0.0)?;
        let ninf = b.g.full(F32, &[], f64::NEG_INFINITY)?;
        let masked = b.g.where_(keep, x, ninf)?;
        let p = b.g.softmax(masked, -1)?;
        out.push(b.output(&[p])?);

        let mut b = Builder::new(format!("causal/iota-softmax-S={s}")).tol(1e-5, 1e-6);
        let sym = b.g.symbol("S", 1, 4096)?;
        let sd = Dim::from(sym);
        let x = b.input_dims("x", F32, &[sd.clone(), sd.clone()], &[s, s], Domain::Any)?;
        let i = b.g.iota(DType::I32, &[sd.clone(), Dim::from(1)], 0)?;
        let j = b.g.iota(DType::I32, &[Dim::from(1), sd], 1)?;
        let keep = b.g.binary(dvm_isa::Opcode::Le, j, i)?;
        let ninf = b.g.full(F32, &[], f64::NEG_INFINITY)?;
        let masked = b.g.where_(keep, x, ninf)?;
        let p = b.g.softmax(masked, -1)?;
        out.push(b.output(&[p])?);
    }
    Ok(())
}
