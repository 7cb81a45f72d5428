//! Predecode superinstructions: pairs of virtual instructions fused into
//! one handler, with the same result.
//!
//! `brccol t ← v` followed by a binary op reading `t` (`x − t`, `x / t`,
//! …) is how the compiler applies a per-row value (a softmax's max and sum,
//! a norm's mean and scale) to a tile: the broadcast writes a whole tile
//! only for the binary op to read it back. When nothing reads `t`
//! afterwards, the pair becomes one handler that applies `v[r]` to row `r`
//! directly ([`crate::ops::binary_col_handler`]): one pass instead of two,
//! and a tile less of UB traffic. "Afterwards" is cyclic: the body runs
//! again for the next tile, so `t` must be overwritten (or the kernel end)
//! before any read, scanning to the end of the body and on from its start.
//!
//! `brcrow t ← v` followed by a binary op reading `t` is the same with a
//! row (a norm's weight and bias, one row of a `[cols]` input, applied to
//! every row of the tile): [`crate::ops::binary_row_handler`].
//!
//! A binary op whose result a sum along the columns reads next (a norm's
//! sum of squares, a residual add before a norm's mean) becomes one
//! handler that folds each row right after writing it, while it is in L1
//! ([`crate::ops::binary_sum_cols_handler`]); it writes what the pair did.
//!
//! A norm's middle (`x − m[r]`, then the squares and their row sums) and
//! its tail (the row scale, the weight row, the bias row, all in place)
//! each become one handler too (`crate::ops::norm`).
//!
//! An op whose tile only its store reads next becomes part of the store
//! (`crate::gm::StoreMap`): an `f32` row scale (a softmax's last step) or
//! a norm's tail maps each row on its way to global memory, a chunk at a
//! time from L1, and the tile is never written back to UB. The store's
//! writes then go out while the next rows compute, and the pass that read
//! the tile back for the store is gone.
//!
//! Another sweep fuses a softmax's middle: `x − v[r]` (a fused pair),
//! `exp` in place, and the sum along columns of the result become one
//! handler ([`crate::ops::col_exp_sum_handler`]) that works a row at a
//! time while it is in L1: one pass over the tile instead of three. It
//! writes what the three did, so it needs no liveness condition, only
//! operands that line up (the sums must not clobber a `v[r]` still to be
//! read).

use dvm_isa::DType;

use crate::gm::{AffineStore, StoreMap};
use crate::ops::{
    affine_row_fn, binary_col_handler, binary_row_handler, binary_sum_cols_gm_handler,
    binary_sum_cols_handler, center_sq_sum_handler, col_exp_sum_gm_handler, col_exp_sum_handler,
    col_exp_sum_row_handler, overlaps, scale_affine_handler, BinKind, Footprint, Peep, Simd,
    UbArgs, UbOp, AFFINE_BIAS,
};
use crate::vinstr::{dead, written_first, VInstr};

/// The fused op for `brc` (a `brccol` or a `brcrow`) then `bin` (a binary
/// op), if `bin` reads the broadcast tile as exactly one operand and the
/// broadcast vector is disjoint from its destination. Returns it and the
/// broadcast tile's range.
fn fuse(brc: &UbOp, bin: &UbOp, simd: Simd) -> Option<(UbOp, (u32, u32))> {
    let (by_col, bdt) = match brc.peep {
        Peep::BroadcastCol(d) => (true, d),
        Peep::BroadcastRow(d) => (false, d),
        _ => return None,
    };
    let Peep::Binary(op, dt) = bin.peep else {
        return None;
    };
    let size = dt.size();
    if bdt.size() != size {
        return None;
    }
    let (rows, cols) = (brc.args.n, brc.args.cols);
    let elems = rows.checked_mul(cols)?;
    // A column of `rows` or a row of `cols`, broadcast to the tile.
    let (vec_len, min_len) = if by_col { (rows, cols) } else { (cols, rows) };
    if bin.args.n != elems || min_len < 2 {
        return None;
    }
    let bytes = elems.checked_mul(size)?;
    let t = brc.args.dst;
    let tr = (t, t.checked_add(bytes)?);
    let v = brc.args.a;
    let vr = (v, v.checked_add(vec_len.checked_mul(size)?)?);
    let (vec_first, other) = match (bin.args.a == t, bin.args.b == t) {
        (true, false) => (true, bin.args.b),
        (false, true) => (false, bin.args.a),
        _ => return None,
    };
    let dr = (bin.args.dst, bin.args.dst.checked_add(bytes)?);
    let or = (other, other.checked_add(bytes)?);
    if overlaps(vr, dr) {
        return None;
    }
    let (handler, peep) = if by_col {
        (
            binary_col_handler(simd, op, dt, vec_first)?,
            Peep::BinaryCol(op, dt, vec_first),
        )
    } else {
        (
            binary_row_handler(simd, op, dt, vec_first)?,
            Peep::BinaryRow(op, dt, vec_first),
        )
    };
    let fused = UbOp {
        handler,
        args: UbArgs {
            dst: bin.args.dst,
            a: other,
            b: v,
            n: rows,
            cols,
            ..UbArgs::default()
        },
        gm: None,
        peep,
        from_gm: None,
        from_gm_row: None,
        from_gm_pair: None,
        foot: {
            let mut f = Footprint {
                write: dr,
                ..Footprint::default()
            };
            f.add_read(or);
            f.add_read(vr);
            f
        },
    };
    Some((fused, tr))
}

/// The softmax superinstruction for `bc` (a fused `x − v[r]` into `d`),
/// then `exp` of `d` in place, then a sum along the columns of `d`, if
/// their shapes and operands line up and the sums are disjoint from the
/// tiles and either disjoint from `v` or exactly `v` (see
/// `ops::unary::col_map_fold`). All three results stay as they were (the
/// difference is overwritten in place by `exp` anyway), so no liveness
/// condition applies.
fn fuse_exp_sum(bc: &UbOp, exp: &UbOp, sum: &UbOp, simd: Simd) -> Option<UbOp> {
    let (Peep::BinaryCol(op, dt, col_first), Peep::Exp(edt), Peep::SumCols(sdt)) =
        (bc.peep, exp.peep, sum.peep)
    else {
        return None;
    };
    let (rows, cols) = (bc.args.n, bc.args.cols);
    let d = bc.args.dst;
    let elems = rows.checked_mul(cols)?;
    let in_place = exp.args.dst == d && exp.args.a == d && exp.args.n == elems;
    let sums_d = sum.args.a == d && sum.args.n == rows && sum.args.cols == cols;
    if edt != dt || sdt != dt || !in_place || !sums_d {
        return None;
    }
    let size = dt.size();
    let rs = sum.args.dst;
    let span = |at: u32, n: u32| Some((at, at.checked_add(n.checked_mul(size)?)?));
    let (dr, ar, vr, sr) = (
        span(d, elems)?,
        span(bc.args.a, elems)?,
        span(bc.args.b, rows)?,
        span(rs, rows)?,
    );
    if overlaps(sr, dr) || overlaps(sr, ar) || (sr != vr && overlaps(sr, vr)) {
        return None;
    }
    let handler = col_exp_sum_handler(simd, op, dt, col_first)?;
    Some(UbOp {
        handler,
        args: UbArgs { c: rs, ..bc.args },
        gm: None,
        peep: Peep::SoftmaxMiddle,
        from_gm: col_exp_sum_gm_handler(simd, op, dt, col_first),
        from_gm_row: col_exp_sum_row_handler(simd, op, dt, col_first),
        from_gm_pair: None,
        // It also writes the sums: `write` lists only the tile, which makes
        // any later liveness scan more conservative, never less (it is
        // built after the pair scans of this body).
        foot: bc.foot,
    })
}

/// The superinstruction for `bin` (a binary op into tile `t`) then `sum`
/// (a sum along the columns of exactly `t`), if the sums lie apart from
/// `t` and from the binary op's sources (`ops::tile2d::binary_fold_cols`).
/// It writes what the pair did, so no liveness condition applies.
fn fuse_binary_sum(bin: &UbOp, sum: &UbOp, simd: Simd) -> Option<UbOp> {
    let (Peep::Binary(op, dt), Peep::SumCols(sdt)) = (bin.peep, sum.peep) else {
        return None;
    };
    let (rows, cols) = (sum.args.n, sum.args.cols);
    let elems = rows.checked_mul(cols)?;
    if sdt != dt || sum.args.a != bin.args.dst || bin.args.n != elems {
        return None;
    }
    let size = dt.size();
    let span = |at: u32, n: u32| Some((at, at.checked_add(n.checked_mul(size)?)?));
    let vr = span(sum.args.dst, rows)?;
    for at in [bin.args.dst, bin.args.a, bin.args.b] {
        if overlaps(vr, span(at, elems)?) {
            return None;
        }
    }
    let handler = binary_sum_cols_handler(simd, op, dt)?;
    Some(UbOp {
        handler,
        args: UbArgs {
            c: sum.args.dst,
            n: rows,
            cols,
            ..bin.args
        },
        gm: None,
        peep: Peep::BinarySumCols(op, dt),
        from_gm: None,
        from_gm_row: None,
        from_gm_pair: binary_sum_cols_gm_handler(simd, op, dt),
        // It also writes the sums: as for the softmax superinstruction,
        // leaving them out of `write` only makes later scans more
        // conservative.
        foot: bin.foot,
    })
}

/// A norm's middle for `sub` (a fused `x − m[r]` into `d`) then `sq` (a
/// fused `d · d` into `t` with its row sums into `v`), if their shapes
/// line up and the operands lie as `ops::norm::center_sq_sum` needs: the
/// tiles identical or apart, the means and the sums apart from every tile
/// and from each other unless identical. It writes what the pair did.
fn fuse_center(sub: &UbOp, sq: &UbOp, simd: Simd) -> Option<UbOp> {
    let (
        Peep::BinaryCol(BinKind::Sub, DType::F32, false),
        Peep::BinarySumCols(BinKind::Mul, DType::F32),
    ) = (sub.peep, sq.peep)
    else {
        return None;
    };
    let (rows, cols) = (sub.args.n, sub.args.cols);
    let d = sub.args.dst;
    if sq.args.a != d || sq.args.b != d || sq.args.n != rows || sq.args.cols != cols {
        return None;
    }
    let elems = rows.checked_mul(cols)?;
    let span = |at: u32, n: u32| Some((at, at.checked_add(n.checked_mul(4)?)?));
    let (dr, xr, tr) = (
        span(d, elems)?,
        span(sub.args.a, elems)?,
        span(sq.args.dst, elems)?,
    );
    let (mr, vr) = (span(sub.args.b, rows)?, span(sq.args.c, rows)?);
    let same_or_apart = |p: (u32, u32), q: (u32, u32)| p == q || !overlaps(p, q);
    let tiles = [dr, xr, tr];
    if !same_or_apart(xr, dr)
        || !same_or_apart(tr, dr)
        || !same_or_apart(xr, tr)
        || tiles.iter().any(|&t| overlaps(t, mr) || overlaps(t, vr))
        || !same_or_apart(mr, vr)
    {
        return None;
    }
    Some(UbOp {
        handler: center_sq_sum_handler(simd),
        args: UbArgs {
            dst: d,
            a: sub.args.a,
            b: sub.args.b,
            c: sq.args.c,
            k: sq.args.dst,
            n: rows,
            cols,
            ..UbArgs::default()
        },
        gm: None,
        peep: Peep::Center,
        from_gm: None,
        from_gm_row: None,
        from_gm_pair: None,
        // It also writes `t` and the sums: as for the other
        // superinstructions that write more than `write` lists, later scans
        // only get more conservative.
        foot: sub.foot,
    })
}

/// A norm's tail for `scale` (a fused `d · s[r]` in place), `weight` (a
/// fused `d · g` in place) and, if any, `bias` (a fused `d + b` in place),
/// all `f32` over the same tile (`ops::norm::scale_affine`). Each fused op
/// already keeps its vector apart from the tile.
fn fuse_affine(scale: &UbOp, weight: &UbOp, bias: Option<&UbOp>, simd: Simd) -> Option<UbOp> {
    // Either operand of each step may come first: the same products and
    // sums (`ops::norm::scale_affine`).
    let (
        Peep::BinaryCol(BinKind::Mul, DType::F32, _),
        Peep::BinaryRow(BinKind::Mul, DType::F32, _),
    ) = (scale.peep, weight.peep)
    else {
        return None;
    };
    if bias.is_some_and(|b| !matches!(b.peep, Peep::BinaryRow(BinKind::Add, DType::F32, _))) {
        return None;
    }
    let d = scale.args.dst;
    let (rows, cols) = (scale.args.n, scale.args.cols);
    let in_place =
        |op: &UbOp| op.args.dst == d && op.args.a == d && op.args.n == rows && op.args.cols == cols;
    if !in_place(scale) || !in_place(weight) || bias.is_some_and(|b| !in_place(b)) {
        return None;
    }
    let flags = if bias.is_some() { AFFINE_BIAS } else { 0 };
    Some(UbOp {
        handler: scale_affine_handler(simd),
        args: UbArgs {
            dst: d,
            a: d,
            b: scale.args.b,
            c: weight.args.b,
            k: bias.map_or(0, |b| b.args.b),
            n: rows,
            cols,
            flags,
            ..UbArgs::default()
        },
        gm: None,
        peep: Peep::Affine,
        from_gm: None,
        from_gm_row: None,
        from_gm_pair: None,
        // The three ops' reads; the tile is all it writes.
        foot: [Some(weight), bias]
            .into_iter()
            .flatten()
            .fold(scale.foot, |f, op| f.with_reads_of(&op.foot)),
    })
}

/// The byte range of the `f32` tile of `rows × cols` elements at UB `at`
/// if `pattern`'s box is exactly that tile, with contiguous columns and
/// rows apart in global memory: what a store that maps the tile's rows on
/// their way out needs.
fn store_box(pattern: &dvm_isa::GmPattern, at: u32, rows: u32, cols: u32) -> Option<(u32, u32)> {
    let apart_rows = rows <= 1 || pattern.row_stride >= pattern.cols as u64;
    let exact = pattern.dtype == DType::F32
        && pattern.ub == at
        && pattern.rows == rows
        && pattern.pitch == cols
        && pattern.col_stride == 1
        && apart_rows;
    let bytes = rows.checked_mul(cols)?.checked_mul(4)?;
    exact.then_some((at, at.checked_add(bytes)?))
}

/// The scaled store for `mul` (an `f32` row scale `x · v[r]`, a fused
/// pair) then `store` of its result, if the store's box is exactly the
/// scaled tile and its rows are contiguous and apart in global memory:
/// the store reads `x` where the scale read it and multiplies row `r` by
/// `v[r]` on its way out (`gm::store_tile_scaled`), the same products.
/// The scaled tile is then never written: the caller checks that nothing
/// reads it. Returns the store and the scaled tile's range.
fn fuse_scale_store(mul: &UbOp, store: &VInstr) -> Option<(VInstr, (u32, u32))> {
    let (
        Peep::BinaryCol(BinKind::Mul, DType::F32, _),
        VInstr::Store {
            pattern,
            stream,
            map: StoreMap::Copy,
        },
    ) = (mul.peep, store)
    else {
        return None;
    };
    let scaled = store_box(pattern, mul.args.dst, mul.args.n, mul.args.cols)?;
    let store = VInstr::Store {
        pattern: dvm_isa::GmPattern {
            ub: mul.args.a,
            ..*pattern
        },
        stream: *stream,
        map: StoreMap::Scale(mul.args.b),
    };
    Some((store, scaled))
}

/// The affine store for `tail` (a norm's tail in place, [`fuse_affine`])
/// then `store` of its tile, if the store's box is exactly the tile and
/// its rows are contiguous and apart in global memory: the store maps each
/// row as the tail would have (`gm::store_tile_affine`), the same bytes in
/// global memory. The tile then keeps what the tail read: the caller
/// checks that nothing reads it. Returns the store and the tile's range.
fn fuse_affine_store(tail: &UbOp, store: &VInstr, simd: Simd) -> Option<(VInstr, (u32, u32))> {
    let (
        Peep::Affine,
        VInstr::Store {
            pattern,
            stream,
            map: StoreMap::Copy,
        },
    ) = (tail.peep, store)
    else {
        return None;
    };
    let a = &tail.args;
    let tile = store_box(pattern, a.dst, a.n, a.cols)?;
    let map = AffineStore {
        scale: a.b,
        weight: a.c,
        bias: a.k,
        flags: a.flags,
        row: affine_row_fn(simd),
    };
    let store = VInstr::Store {
        pattern: *pattern,
        stream: *stream,
        map: StoreMap::Affine(map),
    };
    Some((store, tile))
}

/// Fuses the pairs of body `code[start..end]`, writing the result from
/// `code[to]` on (`to ≤ start`: in place), and returns where it ends.
/// `others` are the ranges of `code` that hold the kernel's other bodies
/// (which share the UB): a broadcast tile is dead only if each of them
/// writes it before reading it.
pub(crate) fn fuse_body(
    code: &mut [VInstr],
    (start, end): (usize, usize),
    to: usize,
    others: &[(usize, usize)],
) -> usize {
    let simd = Simd::detect();
    let end = sweep::<2>(code, (start, end), to, |code, r, w| {
        let (Some(VInstr::Ub(brc)), Some(VInstr::Ub(bin))) = (code.get(r), code.get(r + 1)) else {
            return None;
        };
        let (fused, t) = fuse(brc, bin, simd)?;
        let elsewhere = others
            .iter()
            .all(|&(s, e)| code.get(s..e).is_some_and(|o| written_first(o, t)));
        (elsewhere && dead(t, &code[r + 2..end], &code[to..w])).then_some(VInstr::Ub(fused))
    });
    // Each binary op whose result a sum along columns reads next
    // ([`fuse_binary_sum`]).
    let end = sweep::<2>(code, (to, end), to, |code, r, _| match code.get(r..r + 2) {
        Some([VInstr::Ub(a), VInstr::Ub(b)]) => fuse_binary_sum(a, b, simd).map(VInstr::Ub),
        _ => None,
    });
    // Each norm's middle ([`fuse_center`]).
    let end = sweep::<2>(code, (to, end), to, |code, r, _| match code.get(r..r + 2) {
        Some([VInstr::Ub(a), VInstr::Ub(b)]) => fuse_center(a, b, simd).map(VInstr::Ub),
        _ => None,
    });
    // Each norm's tail, with a bias, then without ([`fuse_affine`]).
    let end = sweep::<3>(code, (to, end), to, |code, r, _| match code.get(r..r + 3) {
        Some([VInstr::Ub(a), VInstr::Ub(b), VInstr::Ub(c)]) => {
            fuse_affine(a, b, Some(c), simd).map(VInstr::Ub)
        }
        _ => None,
    });
    let end = sweep::<2>(code, (to, end), to, |code, r, _| match code.get(r..r + 2) {
        Some([VInstr::Ub(a), VInstr::Ub(b)]) => fuse_affine(a, b, None, simd).map(VInstr::Ub),
        _ => None,
    });
    // Each `binary_col; exp; sum` run ([`fuse_exp_sum`]).
    let end = sweep::<3>(code, (to, end), to, |code, r, _| match code.get(r..r + 3) {
        Some([VInstr::Ub(a), VInstr::Ub(b), VInstr::Ub(c)]) => {
            fuse_exp_sum(a, b, c, simd).map(VInstr::Ub)
        }
        _ => None,
    });
    // Each row scale, and each norm's tail, whose tile only its store reads
    // ([`fuse_scale_store`], [`fuse_affine_store`]).
    sweep::<2>(code, (to, end), to, |code, r, w| {
        let (Some(VInstr::Ub(op)), Some(store)) = (code.get(r), code.get(r + 1)) else {
            return None;
        };
        let (fused, t) =
            fuse_scale_store(op, store).or_else(|| fuse_affine_store(op, store, simd))?;
        let elsewhere = others
            .iter()
            .all(|&(s, e)| code.get(s..e).is_some_and(|o| written_first(o, t)));
        (elsewhere && dead(t, &code[r + 2..end], &code[to..w])).then_some(fused)
    })
}

/// Rewrites `code[start..end]` from `code[to]` on (`to ≤ start`), each run
/// of `N` instructions that `fuse` (given the code, the run's start and the
/// next write position) makes one instruction becoming that instruction;
/// returns where the body now ends.
fn sweep<const N: usize>(
    code: &mut [VInstr],
    (start, end): (usize, usize),
    to: usize,
    mut fuse: impl FnMut(&[VInstr], usize, usize) -> Option<VInstr>,
) -> usize {
    let (mut r, mut w) = (start, to);
    while r < end {
        if r + N <= end {
            if let Some(v) = fuse(code, r, w) {
                code[w] = v;
                w += 1;
                r += N;
                continue;
            }
        }
        code[w] = code[r];
        w += 1;
        r += 1;
    }
    w
}
