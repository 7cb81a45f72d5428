//! 2-D tile operations over a row-major `rows × cols` tile: reductions,
//! broadcasts, transpose. Source and destination are disjoint (verifier
//! rule); anything else makes the handler do nothing.
//!
//! Reductions accumulate in the compute type (`f32` for every float dtype,
//! wrapping `i32` for integers, rounded/wrapped once at the end), in a
//! fixed order that depends only on the shape (the same on every run and
//! target; no FMA):
//! - `axis = cols` (each row → one value): [`LANES`] independent
//!   accumulators per row (half as many for rows shorter than `4·LANES`, a
//!   quarter for rows shorter than `2·LANES`), element `i` of the row's
//!   main part going to lane `i % L`; the lanes are then folded by halving
//!   steps down to 4 lanes, those 4 in order, then the tail in order — so
//!   float sums vectorise (the summation order is not sequential);
//! - `axis = rows` (each column → one value): each column is folded in row
//!   order, top to bottom (sequential), [`COLS_BLOCK`] columns at a time
//!   with the accumulators in registers.
//!
//! Empty folds give the identity: 0 for sums, −inf / `MIN` for max, +inf /
//! `MAX` for min. Float max/min propagate NaN.

use core::ops::Range;

use super::binary::{binary_core, BinOp};
use super::ub::{range_of, two_mut, view, view_mut, Elem, Pod, Split, TSrc};
use super::UbArgs;

/// Independent accumulators per row for `axis = cols`.
pub(crate) const LANES: usize = 32;
/// Lanes left by the halving steps of the final accumulator fold.
const TREE_MIN: usize = 4;
/// Columns accumulated at a time (in registers) for `axis = rows`.
pub(crate) const COLS_BLOCK: usize = 32;

/// `$body` with `$l` the accumulator count [`fold_row`] uses for rows of
/// `$cols` elements: [`LANES`], or fewer for short rows, so that the final
/// fold costs less. Every fold along columns takes its count from here, so
/// they all fold a row in the same order.
macro_rules! by_lanes {
    ($cols:expr, $l:ident => $body:expr) => {{
        let cols: usize = $cols;
        if cols >= 4 * LANES {
            const $l: usize = LANES;
            $body
        } else if cols >= 2 * LANES {
            const $l: usize = LANES / 2;
            $body
        } else {
            const $l: usize = LANES / 4;
            $body
        }
    }};
}

/// A reduction: an associative fold with an identity.
pub(crate) trait RedOp<C> {
    /// Identity element.
    fn id() -> C;
    /// One fold step.
    fn f(acc: C, x: C) -> C;
    /// Whether [`fold_row`] splits the step in two independent chains:
    /// [`RedOp::lean`] (the step without NaN propagation) and
    /// [`RedOp::poison`] (the NaN, if any), merged with `f` at the end.
    /// A NaN-propagating max is a compare, an unordered compare, an or and
    /// a blend per step, all on the accumulator's chain; split, the chain
    /// is one max instruction and the NaN chain one blend. The result is
    /// the same for rows without NaN, and NaN for rows with one.
    const SPLIT: bool = false;
    /// The step for non-NaN `x` when `SPLIT`; otherwise `f`.
    #[inline(always)]
    fn lean(acc: C, x: C) -> C {
        Self::f(acc, x)
    }
    /// `x` if it is NaN, else `nan` (only used when `SPLIT`).
    #[inline(always)]
    fn poison(nan: C, _x: C) -> C {
        nan
    }
}

macro_rules! redop {
    ($(#[$m:meta])* $name:ident { $($c:ty => ($id:expr, |$a:ident, $x:ident| $e:expr $(, split |$la:ident, $lx:ident| $le:expr)?);)* }) => {
        $(#[$m])*
        pub(crate) struct $name;
        $(
            impl RedOp<$c> for $name {
                #[inline(always)]
                fn id() -> $c {
                    $id
                }
                #[inline(always)]
                fn f($a: $c, $x: $c) -> $c {
                    $e
                }
                $(
                    const SPLIT: bool = true;
                    #[inline(always)]
                    fn lean($la: $c, $lx: $c) -> $c {
                        $le
                    }
                    #[inline(always)]
                    fn poison(nan: $c, x: $c) -> $c {
                        if x.is_nan() { x } else { nan }
                    }
                )?
            }
        )*
    };
}

redop!(
    /// Sum (integers wrap).
    Sum {
        f32 => (-0.0, |a, x| a + x);
        i32 => (0, |a, x| a.wrapping_add(x));
    }
);
redop!(
    /// Maximum (NaN-propagating for floats).
    Max {
        f32 => (
            f32::NEG_INFINITY,
            |a, x| if x > a || x.is_nan() { x } else { a },
            split |a, x| if x > a { x } else { a }
        );
        i32 => (i32::MIN, |a, x| a.max(x));
    }
);
redop!(
    /// Minimum (NaN-propagating for floats).
    Min {
        f32 => (
            f32::INFINITY,
            |a, x| if x < a || x.is_nan() { x } else { a },
            split |a, x| if x < a { x } else { a }
        );
        i32 => (i32::MAX, |a, x| a.min(x));
    }
);

/// The disjoint source and destination of a 2-D op as typed slices.
#[inline(always)]
fn operands<'u, S: Pod, D: Pod>(
    ub: &'u mut [u8],
    a: &UbArgs,
    src_elems: usize,
    dst_elems: usize,
) -> Option<(&'u [S], &'u mut [D])> {
    let sp = Split::new(ub, range_of::<D>(a.dst, dst_elems)?)?;
    let src = sp.disjoint::<S>(range_of::<S>(a.a, src_elems)?)?;
    let dst = super::ub::view_mut::<D>(sp.dst)?;
    Some((src, dst))
}

/// Folds `L` accumulators into one: halving steps (`acc[i] ∘= acc[i + h]`
/// for `h = L/2, L/4, …` down to [`TREE_MIN`] lanes, each step one or two
/// full-width vector ops), then the remaining lanes in order.
///
/// Not inlined on purpose: inlined, the SLP vectoriser builds its vectors
/// from this tree's lane pairs and the accumulator loop of [`fold_row`]
/// falls apart into scalar and 2-lane code. Taking `&mut` (the halving
/// steps stored back) matters too: by value or `&`, the steps became
/// scalar code.
#[inline(never)]
fn fold_lanes<C: Copy, O: RedOp<C>, const L: usize>(acc: &mut [C; L]) -> C {
    lane_tree::<C, O, L>(acc)
}

/// The steps of [`fold_lanes`].
#[inline(always)]
fn lane_tree<C: Copy, O: RedOp<C>, const L: usize>(acc: &mut [C; L]) -> C {
    let mut h = L / 2;
    while h >= TREE_MIN {
        let (lo, hi) = acc.split_at_mut(h);
        for (a, b) in lo.iter_mut().zip(hi.iter()) {
            *a = O::f(*a, *b);
        }
        h /= 2;
    }
    let n = (2 * h).clamp(1, L);
    acc[..n].iter().fold(O::id(), |s, a| O::f(s, *a))
}

/// One step of independent accumulators over `xs` (one element each):
/// [`RedOp::lean`] into `acc` and, for ops that [`RedOp::SPLIT`], each NaN
/// into `nan` on its own chain (see [`merge_nan`]).
#[inline(always)]
fn accumulate<T: Elem, O: RedOp<T::C>>(acc: &mut [T::C], nan: &mut [T::C], xs: &[T]) {
    for (a, x) in acc.iter_mut().zip(xs) {
        *a = O::lean(*a, x.get());
    }
    if O::SPLIT {
        for (n, x) in nan.iter_mut().zip(xs) {
            *n = O::poison(*n, x.get());
        }
    }
}

/// Folds the NaN chain of [`accumulate`] back into `acc` (nothing for ops
/// that do not split).
#[inline(always)]
fn merge_nan<C: Copy, O: RedOp<C>>(acc: &mut [C], nan: &[C]) {
    if O::SPLIT {
        for (a, n) in acc.iter_mut().zip(nan) {
            *a = O::f(*a, *n);
        }
    }
}

/// Folds one row with `L` independent accumulators (element `i` of the
/// main part goes to lane `i % L`), then the lanes ([`fold_lanes`]), then
/// the tail (the last `len % L` elements) in order.
///
/// The shape matters for LLVM: a main part split off with `split_at`, a
/// zipped accumulator loop over fixed-size chunks and fixed-size halving
/// steps vectorise to full-width registers.
#[inline(always)]
fn fold_row<T: Elem, O: RedOp<T::C>, const L: usize>(row: &[T]) -> T::C {
    let (main, tail) = row.split_at(row.len() / L * L);
    // A copy, so that the lanes' loop keeps them in registers.
    let mut lanes = row_lanes::<T, O, L>(main);
    let mut s = fold_lanes::<T::C, O, L>(&mut lanes);
    for x in tail {
        s = O::f(s, x.get());
    }
    s
}

/// Handler of a reduction along `axis = cols` (`rows × cols → rows × 1`).
#[inline(always)]
pub(crate) fn reduce_cols<T: Elem, O: RedOp<T::C>>(ub: &mut [u8], a: &UbArgs) {
    let (rows, cols) = (a.n as usize, a.cols as usize);
    let Some(elems) = rows.checked_mul(cols) else {
        return;
    };
    let Some((src, dst)) = operands::<T, T>(ub, a, elems, rows) else {
        return;
    };
    fold_cols::<T, O>(src, dst, cols);
}

/// Rows of [`binary_fold_cols`] whose folds wait on the stack before they
/// are written.
const FOLD_CHUNK: usize = 64;

/// Handler of a binary op followed by a fold along the columns of its
/// result (`crate::peephole`): over `rows = a.n` rows of `a.cols`, `t = x
/// op y` a row at a time (`t` at `a.dst`; `x` at `a.a` and `y` at `a.b`,
/// each identical to `t` or disjoint from it), each row folded by `R`
/// right after it is written, into `v` (`rows` elements at `a.c`,
/// disjoint from all three). It writes what the two instructions did,
/// with the same arithmetic per element and each row folded in
/// [`fold_one`]'s order (that of [`reduce_cols`]), so the same bytes; the
/// row is folded while it is in L1 instead of after the whole tile. A
/// norm's sum of squares (`mul t ← d, d; rsum`) and a residual add
/// feeding a norm's mean (`add t ← x, r; rsum`) compile to this pair.
#[inline(always)]
pub(crate) fn binary_fold_cols<T: Elem, O: BinOp<T::C>, R: RedOp<T::C>>(ub: &mut [u8], a: &UbArgs) {
    let (rows, cols) = (a.n as usize, a.cols as usize);
    let Some(elems) = rows.checked_mul(cols) else {
        return;
    };
    let (Some(rt), Some(rx), Some(ry), Some(rv)) = (
        range_of::<T>(a.dst, elems),
        range_of::<T>(a.a, elems),
        range_of::<T>(a.b, elems),
        range_of::<T>(a.c, rows),
    ) else {
        return;
    };
    let apart = |p: &Range<usize>| rv.end <= p.start || p.end <= rv.start;
    if !(apart(&rt) && apart(&rx) && apart(&ry)) || rv.end > ub.len() {
        return;
    }
    if cols == 0 {
        // The binary op writes nothing; every fold is the identity.
        if let Some(v) = ub.get_mut(rv).and_then(view_mut::<T>) {
            v.fill(T::put(R::id()));
        }
        return;
    }
    let mut folds = [R::id(); FOLD_CHUNK];
    for r0 in (0..rows).step_by(FOLD_CHUNK) {
        let n = (rows - r0).min(FOLD_CHUNK);
        {
            let Some(sp) = Split::new(ub, rt.clone()) else {
                return;
            };
            let (Some(x), Some(y)) = (
                sp.src(rx.clone()).and_then(|s| s.typed::<T>()),
                sp.src(ry.clone()).and_then(|s| s.typed::<T>()),
            ) else {
                return;
            };
            let Some(t) = view_mut::<T>(sp.dst) else {
                return;
            };
            for (k, f) in folds[..n].iter_mut().enumerate() {
                let span = (r0 + k) * cols..(r0 + k + 1) * cols;
                let (Some(xr), Some(yr), Some(tr)) = (
                    x.span(span.clone()),
                    y.span(span.clone()),
                    t.get_mut(span.clone()),
                ) else {
                    return;
                };
                binary_core::<T, O>(tr, xr, yr);
                *f = fold_one::<T, R>(tr);
            }
        }
        let Some(v) = ub.get_mut(rv.clone()).and_then(view_mut::<T>) else {
            return;
        };
        for (d, f) in v.iter_mut().skip(r0).zip(&folds[..n]) {
            *d = T::put(*f);
        }
    }
}

/// [`binary_fold_cols`] with both sources in global memory (their loads
/// fused with it, `crate::loadfold::plan_pair`): `x` and `y` are the
/// loaded tiles, `rows × cols` elements each; `t` (at `a.dst`) and the
/// folds (at `a.c`) lie in `ub`, apart. The same arithmetic per element
/// and the same fold order, so the same bytes in `t` and the folds. Does
/// nothing when a length, range or alignment is off.
#[inline(always)]
pub(crate) fn binary_fold_cols_gm<T: Elem, O: BinOp<T::C>, R: RedOp<T::C>>(
    ub: &mut [u8],
    x: &[u8],
    y: &[u8],
    a: &UbArgs,
) {
    let (rows, cols) = (a.n as usize, a.cols as usize);
    let Some(elems) = rows.checked_mul(cols) else {
        return;
    };
    let (Some(rt), Some(rv), Some(x), Some(y)) = (
        range_of::<T>(a.dst, elems),
        range_of::<T>(a.c, rows),
        view::<T>(x),
        view::<T>(y),
    ) else {
        return;
    };
    if cols == 0 || x.len() != elems || y.len() != elems {
        return;
    }
    let Some((t, v)) = two_mut(ub, rt, rv) else {
        return;
    };
    let (Some(t), Some(v)) = (view_mut::<T>(t), view_mut::<T>(v)) else {
        return;
    };
    let rows_of = t
        .chunks_exact_mut(cols)
        .zip(x.chunks_exact(cols))
        .zip(y.chunks_exact(cols));
    for (((tr, xr), yr), f) in rows_of.zip(v) {
        binary_core::<T, O>(tr, TSrc::Slice(xr), TSrc::Slice(yr));
        *f = T::put(fold_one::<T, R>(tr));
    }
}

/// [`reduce_cols`] with its operands in global memory: `src` is `rows ×
/// cols` elements, `dst` `rows`, disjoint (a load-forwarded body, see
/// `crate::forward`). Does nothing when a length or alignment is off.
#[inline(always)]
pub(crate) fn reduce_cols_gm<T: Elem, O: RedOp<T::C>>(
    dst: &mut [u8],
    src: &[u8],
    _b: &[u8],
    a: &UbArgs,
) {
    let (rows, cols) = (a.n as usize, a.cols as usize);
    let (Some(d), Some(s)) = (view_mut::<T>(dst), view::<T>(src)) else {
        return;
    };
    if d.len() != rows || Some(s.len()) != rows.checked_mul(cols) {
        return;
    }
    fold_cols::<T, O>(s, d, cols);
}

/// The load of a full `rows × cols` tile (`src`, global memory, rows
/// contiguous) into the UB box at `a.a`, fused with the [`reduce_cols`]
/// that follows it (results at `a.dst`): each element is folded as it is
/// copied, so the fold's arithmetic runs under the load's memory traffic
/// (`crate::loadfold`). The same bytes as the load and then the fold (each
/// row folded in [`fold_one`]'s order). A [`GmHandler`](super::GmHandler) by
/// signature, with `ub` the whole UB; does nothing when a length, a range
/// or an alignment is off, or the box and the results overlap.
#[inline(always)]
pub(crate) fn load_reduce_cols<T: Elem, O: RedOp<T::C>>(
    ub: &mut [u8],
    src: &[u8],
    _b: &[u8],
    a: &UbArgs,
) {
    let (rows, cols) = (a.n as usize, a.cols as usize);
    let Some(elems) = rows.checked_mul(cols) else {
        return;
    };
    let (Some(rb), Some(rd), Some(s)) = (
        range_of::<T>(a.a, elems),
        range_of::<T>(a.dst, rows),
        view::<T>(src),
    ) else {
        return;
    };
    if s.len() != elems || cols == 0 || rb.end > ub.len() || rd.end > ub.len() {
        return;
    }
    let Some((bx, out)) = two_mut(ub, rb, rd) else {
        return;
    };
    let (Some(bx), Some(out)) = (view_mut::<T>(bx), view_mut::<T>(out)) else {
        return;
    };
    let rows_of = bx.chunks_exact_mut(cols).zip(s.chunks_exact(cols));
    by_lanes!(cols, L => {
        for ((d, row), o) in rows_of.zip(out) {
            *o = T::put(fold_row_copy::<T, O, L>(row, d));
        }
    })
}

/// [`fold_row`] of `row`, copying it to `dst` (of its length) on the way.
#[inline(always)]
fn fold_row_copy<T: Elem, O: RedOp<T::C>, const L: usize>(row: &[T], dst: &mut [T]) -> T::C {
    let (main, tail) = row.split_at(row.len() / L * L);
    let (dmain, dtail) = dst.split_at_mut(main.len().min(dst.len()));
    let (mut acc, mut nan) = ([O::id(); L], [O::id(); L]);
    let (blocks, _) = main.as_chunks::<L>();
    let (dblocks, _) = dmain.as_chunks_mut::<L>();
    for (c, d) in blocks.iter().zip(dblocks) {
        // Arrays: a copy of `L` elements in registers, not a `memmove`
        // call per block (as a slice copy of unknown length compiled to).
        *d = *c;
        accumulate::<T, O>(&mut acc, &mut nan, c);
    }
    merge_nan::<T::C, O>(&mut acc, &nan);
    let mut lanes = acc;
    let mut s = fold_lanes::<T::C, O, L>(&mut lanes);
    for (d, x) in dtail.iter_mut().zip(tail) {
        *d = *x;
        s = O::f(s, x.get());
    }
    s
}

/// `dst[r] = fold(src row r)` for a row-major `dst.len() × cols` source.
#[inline(always)]
fn fold_cols<T: Elem, O: RedOp<T::C>>(src: &[T], dst: &mut [T], cols: usize) {
    if cols == 0 {
        dst.fill(T::put(O::id()));
        return;
    }
    let mut folds = [O::id(); BATCH];
    for (s, d) in src.chunks(BATCH * cols).zip(dst.chunks_mut(BATCH)) {
        let f = &mut folds[..d.len()];
        fold_batch::<T, O>(s, cols, f);
        for (d, f) in d.iter_mut().zip(f.iter()) {
            *d = T::put(*f);
        }
    }
}

/// Rows whose lane trees [`fold_batch`] folds in one call.
const BATCH: usize = 16;

/// `dst[r] = fold(src row r)` for `dst.len()` rows of `cols`, each in
/// [`fold_row`]'s order ([`fold_batch`], [`BATCH`] rows at a time).
#[inline(always)]
pub(crate) fn fold_rows<T: Elem, O: RedOp<T::C>>(src: &[T], cols: usize, dst: &mut [T::C]) {
    if cols == 0 {
        dst.fill(O::id());
        return;
    }
    for (s, d) in src.chunks(BATCH * cols).zip(dst.chunks_mut(BATCH)) {
        fold_batch::<T, O>(s, cols, d);
    }
}

/// `dst[r] = fold(src row r)` for `dst.len()` rows of `cols` (at most
/// [`BATCH`]), each in [`fold_row`]'s order: every row's lanes first, then
/// the rows' lane folds ([`fold_lanes`]) in one call, then each row's
/// tail. One call per row had cost more than a short row's loop: its
/// lanes, stored by the caller, were loaded back at once by the callee in
/// other widths, which the core cannot forward from the stores; here they
/// have long left the store queue, and the rows' trees overlap. `cols >
/// 0`: its callers ([`fold_rows`], [`fold_cols`]) fill empty rows' folds
/// themselves.
#[inline(always)]
fn fold_batch<T: Elem, O: RedOp<T::C>>(src: &[T], cols: usize, dst: &mut [T::C]) {
    by_lanes!(cols, L => {
        let main = cols / L * L;
        let mut lanes = [[O::id(); L]; BATCH];
        for (row, ln) in src.chunks_exact(cols).zip(lanes.iter_mut()) {
            *ln = row_lanes::<T, O, L>(&row[..main]);
        }
        let n = dst.len().min(BATCH);
        fold_lanes_rows::<T::C, O, L>(&mut lanes[..n], &mut dst[..n]);
        for (row, d) in src.chunks_exact(cols).zip(dst.iter_mut()) {
            for x in &row[main..] {
                *d = O::f(*d, x.get());
            }
        }
    })
}

/// The `L` lanes of a row's main part (a whole number of `L`-element
/// chunks; element `i` to lane `i % L`), NaNs merged: what [`fold_lanes`]
/// folds.
#[inline(always)]
fn row_lanes<T: Elem, O: RedOp<T::C>, const L: usize>(main: &[T]) -> [T::C; L] {
    let (mut acc, mut nan) = ([O::id(); L], [O::id(); L]);
    for c in main.chunks_exact(L) {
        accumulate::<T, O>(&mut acc, &mut nan, c);
    }
    merge_nan::<T::C, O>(&mut acc, &nan);
    acc
}

/// [`fold_lanes`] of each row's lanes into `out`.
#[inline(never)]
fn fold_lanes_rows<C: Copy, O: RedOp<C>, const L: usize>(rows: &mut [[C; L]], out: &mut [C]) {
    for (acc, o) in rows.iter_mut().zip(out) {
        *o = lane_tree::<C, O, L>(acc);
    }
}

/// The fold of one row of a [`reduce_cols`], in the same order (the same
/// accumulator count for the row's length), for a superinstruction that
/// folds each row right after writing it.
#[inline(always)]
pub(crate) fn fold_one<T: Elem, O: RedOp<T::C>>(row: &[T]) -> T::C {
    by_lanes!(row.len(), L => fold_row::<T, O, L>(row))
}

/// Folds columns `j0..j0 + W` down all rows (top to bottom, in order) with
/// the accumulators in registers, and stores them to `d`.
#[inline(always)]
fn col_block<T: Elem, O: RedOp<T::C>, const W: usize>(
    src: &[T],
    cols: usize,
    j0: usize,
    d: &mut [T],
) {
    let (mut acc, mut nan) = ([O::id(); W], [O::id(); W]);
    for row in src.chunks_exact(cols) {
        let Some(r) = row.get(j0..).and_then(|r| r.first_chunk::<W>()) else {
            return;
        };
        accumulate::<T, O>(&mut acc, &mut nan, r);
    }
    merge_nan::<T::C, O>(&mut acc, &nan);
    for (d, a) in d.iter_mut().zip(acc.iter()) {
        *d = T::put(*a);
    }
}

/// Handler of a reduction along `axis = rows` (`rows × cols → 1 × cols`).
#[inline(always)]
pub(crate) fn reduce_rows<T: Elem, O: RedOp<T::C>>(ub: &mut [u8], a: &UbArgs) {
    let (rows, cols) = (a.n as usize, a.cols as usize);
    let Some(elems) = rows.checked_mul(cols) else {
        return;
    };
    let Some((src, dst)) = operands::<T, T>(ub, a, elems, cols) else {
        return;
    };
    if cols == 0 {
        return;
    }
    // Every column is folded in row order whatever block it falls in.
    let mut blocks = dst.chunks_exact_mut(COLS_BLOCK);
    let mut j0 = 0;
    for d in &mut blocks {
        col_block::<T, O, COLS_BLOCK>(src, cols, j0, d);
        j0 += COLS_BLOCK;
    }
    let mut blocks = blocks.into_remainder().chunks_exact_mut(COLS_BLOCK / 4);
    for d in &mut blocks {
        col_block::<T, O, { COLS_BLOCK / 4 }>(src, cols, j0, d);
        j0 += COLS_BLOCK / 4;
    }
    for d in blocks.into_remainder().chunks_exact_mut(1) {
        col_block::<T, O, 1>(src, cols, j0, d);
        j0 += 1;
    }
}

/// Handler of `brcrow`: the `1 × cols` source repeated for `rows` rows.
#[inline(always)]
pub(crate) fn broadcast_row<U: Pod>(ub: &mut [u8], a: &UbArgs) {
    let (rows, cols) = (a.n as usize, a.cols as usize);
    let Some(elems) = rows.checked_mul(cols) else {
        return;
    };
    let Some((src, dst)) = operands::<U, U>(ub, a, cols, elems) else {
        return;
    };
    if cols == 0 {
        return;
    }
    for row in dst.chunks_exact_mut(cols) {
        row.copy_from_slice(src);
    }
}

/// Handler of `brccol`: each element of the `rows × 1` source repeated
/// across its row of `cols`.
#[inline(always)]
pub(crate) fn broadcast_col<U: Pod>(ub: &mut [u8], a: &UbArgs) {
    let (rows, cols) = (a.n as usize, a.cols as usize);
    let Some(elems) = rows.checked_mul(cols) else {
        return;
    };
    let Some((src, dst)) = operands::<U, U>(ub, a, rows, elems) else {
        return;
    };
    if cols == 0 {
        return;
    }
    for (row, v) in dst.chunks_exact_mut(cols).zip(src) {
        row.fill(*v);
    }
}

/// Side of the square blocks `transpose` moves through registers.
const TB: usize = 8;

/// Handler of `transpose`: `dst` (`cols × rows`) = `srcᵀ` (`rows × cols`),
/// in 8×8 blocks (two bounds checks per 8 elements; edge blocks element by
/// element).
#[inline(always)]
pub(crate) fn transpose<U: Pod>(ub: &mut [u8], a: &UbArgs) {
    let (rows, cols) = (a.n as usize, a.cols as usize);
    let Some(elems) = rows.checked_mul(cols) else {
        return;
    };
    let Some((src, dst)) = operands::<U, U>(ub, a, elems, elems) else {
        return;
    };
    let (rf, cf) = (rows - rows % TB, cols - cols % TB);
    for i0 in (0..rf).step_by(TB) {
        for j0 in (0..cf).step_by(TB) {
            let mut t = [[U::default(); TB]; TB];
            for (ii, trow) in t.iter_mut().enumerate() {
                let o = (i0 + ii) * cols + j0;
                let Some(s) = src.get(o..o + TB) else { return };
                trow.copy_from_slice(s);
            }
            for jj in 0..TB {
                let o = (j0 + jj) * rows + i0;
                let Some(d) = dst.get_mut(o..o + TB) else {
                    return;
                };
                for (d, trow) in d.iter_mut().zip(t.iter()) {
                    *d = trow[jj];
                }
            }
        }
    }
    // Right edge (columns cf..cols of every row) and bottom edge (rows
    // rf..rows of the first cf columns).
    for i in 0..rows {
        let js = if i < rf { cf } else { 0 };
        for j in js..cols {
            if let (Some(v), Some(d)) = (src.get(i * cols + j), dst.get_mut(j * rows + i)) {
                *d = *v;
            }
        }
    }
}
