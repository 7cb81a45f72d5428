//! A norm's middle and tail as superinstructions (`crate::peephole`), each
//! one pass per row over `f32` tiles instead of one pass per instruction.
//!
//! The compiler's layer norm is `d = x − mean[r]` (a fused `brccol; sub`),
//! `t = d · d` and its row sums (a fused `mul; rsum`), then, with
//! `rs = rsqrt(var + ε)`, `d · rs[r]` (a fused `brccol; mul`), `· g` and
//! `+ b` (fused `brcrow`s of the weight and bias rows); an RMS norm has the
//! scale and the weight. Run one after the other, every instruction reads
//! and writes the whole tile once more. Here the middle ([`center_sq_sum`])
//! and the tail ([`scale_affine`]) each go over a row once, with the same
//! `f32` operations in the same order per element (no fused multiply-add),
//! so they write the same bytes as the instructions they replace.

use super::tile2d::{fold_one, Sum};
use core::marker::PhantomData;

use super::binary::{binary_core, Mul, Sub};
use super::ub::{range_of, view, view_mut, Split};
use super::unary::{map1_core, WithImm};
use super::UbArgs;
use core::ops::Range;

/// Whether two byte ranges share no byte.
fn apart(p: &Range<usize>, q: &Range<usize>) -> bool {
    p.end <= q.start || q.end <= p.start
}

/// `d = x − m[r]`, `t = d · d`, `v[r] = Σ t[r]` a row at a time, over
/// `rows = a.n` rows of `a.cols` `f32`s: `d` at `a.dst`, `x` at `a.a`
/// (identical to `d` or apart), the row means `m` at `a.b`, the sums `v`
/// at `a.c`, `t` at `a.k` (identical to `d` or apart). `m` and `v` lie
/// apart from the tiles, and from each other unless identical (each row's
/// mean is read before its sum is written). Each sum folds in
/// [`fold_one`]'s order, as `rsum` does. Does nothing when an operand is
/// off.
#[inline(always)]
pub(crate) fn center_sq_sum(ub: &mut [u8], a: &UbArgs) {
    let (rows, cols) = (a.n as usize, a.cols as usize);
    let Some(elems) = rows.checked_mul(cols) else {
        return;
    };
    let (Some(rd), Some(rx), Some(rm), Some(rv), Some(rt)) = (
        range_of::<f32>(a.dst, elems),
        range_of::<f32>(a.a, elems),
        range_of::<f32>(a.b, rows),
        range_of::<f32>(a.c, rows),
        range_of::<f32>(a.k, elems),
    ) else {
        return;
    };
    let tiles = [&rd, &rx, &rt];
    let same_or_apart = |p: &Range<usize>| p == &rd || apart(p, &rd);
    let vectors_apart = tiles.iter().all(|t| apart(t, &rm) && apart(t, &rv));
    if cols == 0
        || !same_or_apart(&rx)
        || !same_or_apart(&rt)
        || !(rx == rt || apart(&rx, &rt) || rx == rd)
        || !vectors_apart
        || !(rm == rv || apart(&rm, &rv))
        || tiles.iter().chain([&&rm, &&rv]).any(|r| r.end > ub.len())
    {
        return;
    }
    for r in 0..rows {
        let row = |p: &Range<usize>| p.start + r * cols * 4..p.start + (r + 1) * cols * 4;
        let (xr, dr, tr) = (row(&rx), row(&rd), row(&rt));
        let m_at = rm.start + r * 4;
        let Some(m) = ub.get(m_at..m_at + 4).and_then(view::<f32>).map(|v| v[0]) else {
            return;
        };
        // `d = x − m` (x is d itself or apart from it), as `binary_col`.
        {
            let Some(sp) = Split::new(ub, dr.clone()) else {
                return;
            };
            let (Some(x), Some(d)) = (
                sp.src(xr).and_then(|s| s.typed::<f32>()),
                view_mut::<f32>(sp.dst),
            ) else {
                return;
            };
            map1_core::<f32, _>(d, x, WithImm::<f32, Sub, false>(m, PhantomData));
        }
        // `t = d · d` (d is t itself or apart from it), then its sum, as
        // `binary_fold_cols`.
        let sum = {
            let Some(sp) = Split::new(ub, tr) else {
                return;
            };
            let (Some(d), Some(t)) = (
                sp.src(dr).and_then(|s| s.typed::<f32>()),
                view_mut::<f32>(sp.dst),
            ) else {
                return;
            };
            binary_core::<f32, Mul>(t, d, d);
            fold_one::<f32, Sum>(t)
        };
        let Some(v) = ub.get_mut(rv.start + r * 4..rv.start + r * 4 + 4) else {
            return;
        };
        v.copy_from_slice(&sum.to_ne_bytes());
    }
}

/// `d = ((d · s[r]) · g) + b` in place a row at a time, over `rows = a.n`
/// rows of `a.cols` `f32`s: `d` at `a.dst`, the row scales `s` at `a.b`,
/// the weight row `g` at `a.c`, the bias row `b` at `a.k`, each apart
/// from `d`. `a.flags`: [`AFFINE_BIAS`] when there is a bias. The
/// products and the sum round as the instructions did. Does nothing when
/// an operand is off.
#[inline(always)]
pub(crate) fn scale_affine(ub: &mut [u8], a: &UbArgs) {
    let (rows, cols) = (a.n as usize, a.cols as usize);
    let bias = a.flags & AFFINE_BIAS != 0;
    let Some(elems) = rows.checked_mul(cols) else {
        return;
    };
    let (Some(rd), Some(rs), Some(rg), Some(rb)) = (
        range_of::<f32>(a.dst, elems),
        range_of::<f32>(a.b, rows),
        range_of::<f32>(a.c, cols),
        range_of::<f32>(if bias { a.k } else { a.c }, cols),
    ) else {
        return;
    };
    let Some(sp) = Split::new(ub, rd) else {
        return;
    };
    let (Some(s), Some(g), Some(b), Some(d)) = (
        sp.disjoint::<f32>(rs),
        sp.disjoint::<f32>(rg),
        sp.disjoint::<f32>(rb),
        view_mut::<f32>(sp.dst),
    ) else {
        return;
    };
    if cols == 0 {
        return;
    }
    for (row, &f) in d.chunks_exact_mut(cols).zip(s) {
        let in_place = row.iter_mut().map(|o| {
            let x = *o;
            (o, x)
        });
        affine(in_place, f, g, b, a.flags);
    }
}

/// [`scale_affine`] of one row out of place: `out = ((x · f) · g) + b`
/// (without `+ b` unless `flags` has [`AFFINE_BIAS`]; `b` is then
/// ignored), the same products and sums per element. Does nothing unless
/// the four slices have one length. The row map of a norm's tail fused
/// with its store (`crate::gm::store_tile_affine`).
#[inline(always)]
pub(crate) fn affine_row(out: &mut [f32], x: &[f32], f: f32, g: &[f32], b: &[f32], flags: u32) {
    let n = out.len();
    if x.len() != n || g.len() != n || b.len() != n {
        return;
    }
    affine(out.iter_mut().zip(x.iter().copied()), f, g, b, flags);
}

/// `*o = ((x · f) · g[i]) + b[i]` for each `(o, x)` of `pairs`, without
/// `+ b[i]` unless `flags` has [`AFFINE_BIAS`]. Which operand of each step
/// came first in its instruction does not matter: the same value either
/// way (NaNs aside, whose sign and payload are unspecified, as for every
/// handler: `super::simd`).
#[inline(always)]
fn affine<'a>(
    pairs: impl Iterator<Item = (&'a mut f32, f32)>,
    f: f32,
    g: &[f32],
    b: &[f32],
    flags: u32,
) {
    if flags & AFFINE_BIAS != 0 {
        affine_with::<true>(pairs, f, g, b);
    } else {
        affine_with::<false>(pairs, f, g, b);
    }
}

/// [`affine`] with the bias fixed at compile time.
#[inline(always)]
fn affine_with<'a, const BIAS: bool>(
    pairs: impl Iterator<Item = (&'a mut f32, f32)>,
    f: f32,
    g: &[f32],
    b: &[f32],
) {
    for (((o, x), &w), &c) in pairs.zip(g).zip(b) {
        let y = x * f * w;
        *o = if BIAS { y + c } else { y };
    }
}

/// [`scale_affine`]'s flag: a bias row follows the weight.
pub(crate) const AFFINE_BIAS: u32 = 1;
