//! Cases for the operators real models need: trigonometry (rotary
//! embeddings), …

use dvm_isa::DType;
use dvm_sym::Dim;

use super::{Builder, Case, Domain, F32, R};

/// Every case of this module.
pub(super) fn cases(out: &mut Vec<Case>) -> R<()> {
    trig(out)?;
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
