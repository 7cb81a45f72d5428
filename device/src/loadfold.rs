//! A load fused with the fold along the columns that follows it.
//!
//! A norm's or a softmax's body starts `load x; rmax|rsum m ← x; …`: the
//! load copies the tile into UB, then the fold reads it back, each element
//! one arithmetic step. From DRAM the copy waits on memory while the ALUs
//! idle, and the fold then runs with the memory idle. When a body starts so
//! ([`plan`]), every full tile runs the pair as one pass instead
//! (`ops::tile2d::load_reduce_cols`): each element is folded as it is
//! copied, so the fold's arithmetic hides under the load's traffic. It
//! writes the same bytes as the pair (the box, and each row's fold in the
//! same order), so nothing else about the body changes. Tiles with a tail
//! or padding run the pair as two instructions.
//!
//! When the instruction after the fold is one that overwrites the whole
//! box in place and can read its source from global memory (the softmax
//! superinstruction, `ops::UbOp::from_gm`; [`plan_map`]), a full tile
//! skips the copy into UB altogether: the fold reads the tile in global
//! memory, then that instruction reads it there too and writes the box.
//! UB ends up with the same bytes (the box as the instruction writes it,
//! the folds), one tile's worth of writes and reads fewer.
//!
//! When, after that instruction (the softmax superinstruction), the body
//! goes on with an element-wise op on its row sums in place and the store
//! of its box scaled by them (a softmax's `1/sum` and its scaled store;
//! [`plan_rows`]), the three run a row at a time: each row is stored
//! while it is in L1, woven into the next row's arithmetic (and, for
//! outputs too large for the caches, with non-temporal stores and the next
//! tile's prefetches; `crate::ops::RowHandler`).
//!
//! A binary op with the row sums of its result whose two sources are the
//! two loads before it (a residual add before a norm's mean;
//! [`plan_pair`]) reads both tiles in global memory on full tiles,
//! skipping both copies into UB.
//!
//! At launch ([`fits`]) the pair is fused only when the loaded buffer
//! overlaps no writable buffer: the fused pass reads the tile as a slice.

use crate::gm::{GmBuf, StoreMap};
use dvm_isa::DType;

use crate::ops::{GmShape, Peep};
use crate::vinstr::{dead, written_first, VInstr};

/// The index of the load that starts a fusable pair in body `code` (the
/// fold is the next instruction), if any: the fold has a fused handler, its
/// source is exactly the loaded box (`rows` rows of `pitch` elements of
/// the fold's size) and its results lie outside the box.
pub fn plan(code: &[VInstr]) -> Option<u8> {
    code.windows(2)
        .take(u8::MAX as usize)
        .position(|w| {
            let [VInstr::Load { pattern: p, .. }, VInstr::Ub(op)] = w else {
                return false;
            };
            let Some(gm) = op
                .gm
                .filter(|g| g.shape == GmShape::FoldCols && g.load.is_some())
            else {
                return false;
            };
            let size = gm.size as u64;
            let a = &op.args;
            let boxed = (
                p.ub as u64,
                p.ub as u64 + p.rows as u64 * p.pitch as u64 * size,
            );
            let out = (a.dst as u64, a.dst as u64 + a.n as u64 * size);
            p.dtype.size() as u64 == size
                && a.a == p.ub
                && a.n == p.rows
                && a.cols == p.pitch
                && (out.1 <= boxed.0 || boxed.1 <= out.0)
        })
        .map(|i| i as u8)
}

/// Whether the instruction after the fused pair at `at` (see [`plan`])
/// overwrites the loaded box in place and reads it from global memory
/// when given it: its source and destination are exactly the box, `rows ×
/// cols` contiguous (the pitch is the width), in elements of the load's
/// size.
pub fn plan_map(code: &[VInstr], at: u8) -> bool {
    let at = at as usize;
    let (Some(VInstr::Load { pattern: p, .. }), Some(VInstr::Ub(op))) =
        (code.get(at), code.get(at + 2))
    else {
        return false;
    };
    let a = &op.args;
    op.from_gm.is_some()
        && p.dtype.size() == 4
        && a.a == p.ub
        && a.dst == p.ub
        && a.n == p.rows
        && a.cols == p.cols
        && p.pitch == p.cols
}

/// Whether the three instructions after the fused pair at `at` (see
/// [`plan_map`], which must hold) may run a row at a time
/// ([`crate::gm::load_tile_map_rows`]): the map folds each row of its box
/// into sums (`args.c`; a softmax's exponentials and their row sums), then
/// an element-wise `f32` op turns the sums into factors in place, then a
/// scaled store writes the box out with row `r` multiplied by factor `r`.
/// Row `r` of each only reads row `r` of the one before (the map reads its
/// row value `r` before it writes sum `r`, which may be the same element),
/// so running the three on one row, then the next, leaves the same bytes
/// in UB and in global memory as running each over the whole tile. The
/// store then writes each row while it is still in L1.
///
/// Only rows of at least [`ROWS_MIN_COLS`] elements run so: a row at a
/// time costs a few hundred instructions per row (three handler calls,
/// their checks, the lane folds) that short rows do not repay.
pub fn plan_rows(code: &[VInstr], at: u8) -> bool {
    let at = at as usize;
    let (
        Some(VInstr::Ub(map)),
        Some(VInstr::Ub(un)),
        Some(VInstr::Store {
            pattern: sp,
            map: StoreMap::Scale(factors),
            ..
        }),
    ) = (code.get(at + 2), code.get(at + 3), code.get(at + 4))
    else {
        return false;
    };
    let (m, u) = (&map.args, &un.args);
    m.cols >= ROWS_MIN_COLS
        && matches!(un.peep, Peep::Unary(DType::F32) | Peep::Exp(DType::F32))
        && u.a == m.c
        && u.dst == m.c
        && u.n == m.n
        && *factors == m.c
        && sp.dtype == DType::F32
        && sp.ub == m.dst
        && sp.rows == m.n
        && sp.pitch == m.cols
        && sp.cols == m.cols
        && sp.col_stride == 1
}

/// The shortest row [`plan_rows`] runs a row at a time: shorter rows run
/// faster over the whole tile, where the per-row calls and checks do not
/// repay themselves.
pub const ROWS_MIN_COLS: u32 = 256;

/// The index of the first of two loads that run fused with the binary op
/// and row sums after them (`load x; load y; t = x op y; v = Σ t[r]`, a
/// residual add before a norm's mean), if any: the op reads both tiles
/// from global memory (`ops::UbOp::from_gm_pair`) and writes `t` and the
/// sums as it did, skipping the two copies into UB. The op's sources are
/// exactly the two loaded boxes (`rows × cols` contiguous, apart, both
/// loads padded), and a box the op does not overwrite is dead: nothing reads it before writing
/// it, in this body (`code`, cyclically) or in the kernel's `others`.
pub fn plan_pair<'a>(
    code: &[VInstr],
    others: impl Iterator<Item = &'a [VInstr]> + Clone,
) -> Option<u8> {
    let boxed = |p: &dvm_isa::GmPattern, a: &crate::ops::UbArgs| {
        let size = p.dtype.size();
        let contiguous = p.rows == a.n && p.pitch == a.cols && p.cols == a.cols;
        let end = a.n.checked_mul(a.cols)?.checked_mul(size)?;
        contiguous.then_some((p.ub, p.ub.checked_add(end)?))
    };
    (0..code.len().min(u8::MAX as usize))
        .find(|&i| {
            // Padded loads: on a tile they do not run fused, they write
            // their whole boxes, so no element of a box skipped before
            // can reach the op.
            let (
                Some(VInstr::Load {
                    pattern: p,
                    pad: Some(_),
                }),
                Some(VInstr::Load {
                    pattern: q,
                    pad: Some(_),
                }),
                Some(VInstr::Ub(op)),
            ) = (code.get(i), code.get(i + 1), code.get(i + 2))
            else {
                return false;
            };
            let (Some(bp), Some(bq), Peep::BinarySumCols(_, dt)) =
                (boxed(p, &op.args), boxed(q, &op.args), op.peep)
            else {
                return false;
            };
            let apart = |x: (u32, u32), y: (u32, u32)| x.1 <= y.0 || y.1 <= x.0;
            // The result is one of the boxes or apart from both, as the
            // UB handler requires (it does nothing otherwise).
            let bt = (op.args.dst, op.args.dst.saturating_add(bp.1 - bp.0));
            let result_ok = bt == bp || bt == bq || (apart(bt, bp) && apart(bt, bq));
            let unwritten_dead = |b: (u32, u32)| {
                b.0 == op.args.dst
                    || (dead(b, &code[i + 3..], &code[..i])
                        && others.clone().all(|o| written_first(o, b)))
            };
            op.from_gm_pair.is_some()
                && apart(bp, bq)
                && result_ok
                && p.dtype.size() == dt.size()
                && q.dtype.size() == dt.size()
                && op.args.a == p.ub
                && op.args.b == q.ub
                && unwritten_dead(bp)
                && unwritten_dead(bq)
        })
        .map(|i| i as u8)
}

/// Whether the load at `at` of `code` may run fused under `bufs`: its
/// buffer overlaps no writable buffer of the launch.
pub fn fits(code: &[VInstr], at: u8, bufs: &[GmBuf<'_>]) -> bool {
    let Some(VInstr::Load { pattern, .. }) = code.get(at as usize) else {
        return false;
    };
    let Some(src) = bufs.get(pattern.buf as usize) else {
        return false;
    };
    bufs.iter()
        .filter(|b| b.writable())
        .all(|b| !b.overlaps(src))
}
