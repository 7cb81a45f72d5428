//! The softmax superinstruction one row at a time, with the scaled store of
//! the row before it woven into its loop.
//!
//! A softmax body ends `x − v[r]; exp; sum` (one superinstruction,
//! [`super::unary::col_map_fold`]), then `1/sum`, then the store of the
//! exponentials scaled by row (`crate::gm::store_tile_scaled`). Run one
//! after the other, the store's writes wait on the caches (each line is
//! fetched for ownership) while the floating-point pipes idle.
//! [`col_map_fold_row`] computes one row of the superinstruction and, in
//! the same loop, stores the previous row (already summed, its factor
//! known): after each block of `exp`, a block of the store, so the stores
//! drain while `exp` computes (`crate::gm::load_tile_map_rows` runs a tile
//! so when `crate::loadfold::plan_rows` allows). Row `r` of each step only
//! reads row `r` of the step before, so the bytes written, in UB and in
//! global memory, are those of the three passes.
//!
//! Outputs too large for the caches are woven the same way, with
//! non-temporal stores, and the next tile's prefetches spread over the
//! same blocks ([`ScaledRow::prefetch`]): the loads and stores then go
//! out at the pace of the arithmetic instead of in a burst between two
//! rows' `exp` loops.

use core::marker::PhantomData;

use super::binary::BinOp;
use super::tile2d::{fold_one, RedOp};
use super::ub::{range_of, view};
use super::unary::{Kern, Then, WithImm};
use super::UbArgs;
use crate::mem::PrefetchRun;

/// Elements of the row computed between two blocks of the stored row:
/// [`crate::math::exp_map`]'s block. (Blocks of 64 were slower: the
/// shorter `exp` loops cost more than the stores gain.)
const BLOCK: usize = crate::math::EXP_BLOCK;

/// A row of `f32`s stored with a factor on its way out: `dst[i] = x[i] ·
/// f` for the UB row `x` at byte offset `src`, as long as the row the
/// handler computes.
pub struct ScaledRow<'a> {
    /// The row in global memory.
    pub dst: &'a mut [f32],
    /// UB byte offset of the source row.
    pub src: u32,
    /// The factor.
    pub f: f32,
    /// Whether the stores are non-temporal (an output too large for the
    /// caches).
    pub stream: bool,
    /// What to prefetch over the row's store (the next tile's loads).
    pub prefetch: PrefetchRun,
}

/// A row handler: one row of the superinstruction (`args.n == 1`, the row
/// read from `src`, a row of a loaded tile in global memory) with the
/// store of `store`, if any, woven into it. Does nothing when an operand is
/// off (out of `ub`, misaligned, or overlapping where it must not).
pub type RowHandler = fn(ub: &mut [u8], src: &[u8], args: &UbArgs, store: Option<ScaledRow<'_>>);

/// `d[r] = K(O(src[r], v[0]))` for one row of `args.cols` elements at
/// `args.dst`, `v` at `args.b`, its fold `R` at `args.c` (as
/// [`super::unary::col_map_fold_gm`] for one row), storing `store` on the
/// way. The stored row must lie apart from the row written and the fold.
#[inline(always)]
pub(crate) fn col_map_fold_row<O, K, R, const REV: bool>(
    ub: &mut [u8],
    src: &[u8],
    a: &UbArgs,
    store: Option<ScaledRow<'_>>,
) where
    O: BinOp<f32>,
    K: Kern<f32> + Default,
    R: RedOp<f32>,
{
    let cols = a.cols as usize;
    let (Some(rd), Some(rv), Some(rf), Some(s)) = (
        range_of::<f32>(a.dst, cols),
        range_of::<f32>(a.b, 1),
        range_of::<f32>(a.c, 1),
        view::<f32>(src),
    ) else {
        return;
    };
    let rs = match &store {
        Some(st) => match range_of::<f32>(st.src, cols).filter(|_| st.dst.len() == cols) {
            Some(r) => Some(r),
            None => return,
        },
        None => None,
    };
    let apart = |x: &core::ops::Range<usize>, y: &core::ops::Range<usize>| {
        x.end <= y.start || y.end <= x.start
    };
    let aligned = (ub.as_ptr() as usize).is_multiple_of(4)
        && [a.dst, a.b, a.c].iter().all(|o| o.is_multiple_of(4))
        && store.as_ref().is_none_or(|st| st.src.is_multiple_of(4));
    let stored_ok = rs
        .as_ref()
        .is_none_or(|r| r.end <= ub.len() && apart(r, &rd) && apart(r, &rf));
    if cols == 0
        || s.len() != cols
        || !aligned
        || !stored_ok
        || !apart(&rf, &rd)
        || !apart(&rv, &rd)
        || [&rd, &rv, &rf].iter().any(|r| r.end > ub.len())
    {
        return;
    }
    let Some(v) = ub.get(rv).and_then(view::<f32>).map(|v| v[0]) else {
        return;
    };
    let k = Then(WithImm::<f32, O, REV>(v, PhantomData), K::default());
    let base = ub.as_mut_ptr();
    // SAFETY: `rd` lies inside `ub` (checked), 4-aligned (checked), and no
    // other reference into `ub` lives while `d` does: the stored row is
    // read through `x`, a pointer derived from the same `base`, over a
    // range apart from `rd` (checked).
    let d = unsafe { core::slice::from_raw_parts_mut(base.add(rd.start).cast::<f32>(), cols) };
    match store {
        None => k.run(d, s),
        Some(st) => {
            let start = rs.map_or(0, |r| r.start);
            // SAFETY: as above: inside `ub`, aligned, apart from `d`, and
            // only read while it lives.
            let x = unsafe {
                core::slice::from_raw_parts(
                    base.add(start).cast::<f32>().cast_const(),
                    st.dst.len(),
                )
            };
            let mut out = Out {
                dst: st.dst,
                x,
                f: st.f,
                at: 0,
                stream: st.stream,
                prefetch: st.prefetch,
            };
            let mut dc = d.chunks_exact_mut(BLOCK);
            let mut sc = s.chunks_exact(BLOCK);
            for (db, sb) in (&mut dc).zip(&mut sc) {
                k.run(db, sb);
                out.next(BLOCK);
            }
            k.run(dc.into_remainder(), sc.remainder());
            out.next(BLOCK);
        }
    }
    let fold = fold_one::<f32, R>(d);
    if let Some(f) = ub.get_mut(rf) {
        f.copy_from_slice(&fold.to_ne_bytes());
    }
}

/// The store of a [`ScaledRow`], a block at a time.
struct Out<'a> {
    dst: &'a mut [f32],
    x: &'a [f32],
    f: f32,
    /// Elements stored so far.
    at: usize,
    stream: bool,
    prefetch: PrefetchRun,
}

impl Out<'_> {
    /// Stores the next `n` elements (at most those left), prefetching their
    /// share of the run.
    #[inline(always)]
    fn next(&mut self, n: usize) {
        let end = (self.at + n).min(self.dst.len());
        self.prefetch.share(self.at, end, self.dst.len());
        if let (Some(d), Some(x)) = (self.dst.get_mut(self.at..end), self.x.get(self.at..end)) {
            crate::mem::store_scaled(d, x, self.f, self.stream);
        }
        self.at = end;
    }
}
