//! Element-wise maps `dst[i] = f(src[i])`: the unary opcodes and (through
//! [`WithImm`]) the vector-with-scalar ones.
//!
//! `f32`/`i32` tiles run `f` directly over the UB slices (in place when
//! `dst == src`); `f16`/`bf16`/`i8`/`bool` tiles go through a stack buffer
//! of [`CHUNK`] compute values: convert in, run the same slice kernel,
//! convert out.

use core::marker::PhantomData;

use super::binary::{binary_core, BinOp};
use super::ub::{range_of, view, view_mut, Elem, Split, TSrc, CHUNK};
use super::UbArgs;
use crate::math;

/// An element-wise function over compute values, with slice kernels that
/// an op may override (e.g. with SIMD intrinsics).
pub(crate) trait Kern<C: Copy>: Copy {
    /// The function.
    fn f(&self, x: C) -> C;
    /// `dst[i] = f(src[i])` (equal lengths).
    #[inline(always)]
    fn run(&self, dst: &mut [C], src: &[C]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = self.f(*s);
        }
    }
    /// `xs[i] = f(xs[i])`.
    #[inline(always)]
    fn run_inplace(&self, xs: &mut [C]) {
        for x in xs {
            *x = self.f(*x);
        }
    }
    /// `dst[i] = f(a(src[i]))` (equal lengths): [`Then`]'s slice kernel,
    /// which the second function may override.
    #[inline(always)]
    fn run_after<A: Kern<C>>(&self, a: &A, dst: &mut [C], src: &[C]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = self.f(a.f(*s));
        }
    }
    /// `xs[i] = f(a(xs[i]))`.
    #[inline(always)]
    fn run_after_inplace<A: Kern<C>>(&self, a: &A, xs: &mut [C]) {
        for x in xs {
            *x = self.f(a.f(*x));
        }
    }
}

/// Runs `k` over `n` elements from byte offset `src` to `dst` (identical or
/// disjoint ranges).
#[inline(always)]
pub(crate) fn map1<T: Elem, K: Kern<T::C>>(ub: &mut [u8], dst: u32, src: u32, n: u32, k: K) {
    let n = n as usize;
    let (Some(rd), Some(rs)) = (range_of::<T>(dst, n), range_of::<T>(src, n)) else {
        return;
    };
    let Some(sp) = Split::new(ub, rd) else { return };
    let Some(src) = sp.src(rs).and_then(|s| s.typed::<T>()) else {
        return;
    };
    let Some(d) = view_mut::<T>(sp.dst) else {
        return;
    };
    map1_core::<T, K>(d, src, k);
}

/// [`map1`] with its operands in global memory: `dst` and `src` are `n`
/// elements each, disjoint (a load-forwarded body, see `crate::predecode`).
/// Does nothing when a length or alignment is off.
#[inline(always)]
pub(crate) fn map1_gm<T: Elem, K: Kern<T::C>>(dst: &mut [u8], src: &[u8], n: u32, k: K) {
    let (Some(d), Some(s)) = (view_mut::<T>(dst), view::<T>(src)) else {
        return;
    };
    if d.len() != n as usize || s.len() != n as usize {
        return;
    }
    map1_core::<T, K>(d, TSrc::Slice(s), k);
}

/// `d = k(src)` over equal-length slices (`src` may be `d` itself).
#[inline(always)]
pub(crate) fn map1_core<T: Elem, K: Kern<T::C>>(d: &mut [T], src: TSrc<'_, T>, k: K) {
    match src {
        TSrc::Alias => {
            if let Some(dc) = T::direct_mut(d) {
                k.run_inplace(dc);
                return;
            }
            let mut buf = [T::C::default(); CHUNK];
            for dc in d.chunks_mut(CHUNK) {
                let b = &mut buf[..dc.len().min(CHUNK)];
                for (b, x) in b.iter_mut().zip(dc.iter()) {
                    *b = x.get();
                }
                k.run_inplace(b);
                for (x, b) in dc.iter_mut().zip(b.iter()) {
                    *x = T::put(*b);
                }
            }
        }
        TSrc::Slice(s) => {
            if let (Some(dc), Some(sc)) = (T::direct_mut(d), T::direct(s)) {
                k.run(dc, sc);
                return;
            }
            let mut buf = [T::C::default(); CHUNK];
            for (dc, sc) in d.chunks_mut(CHUNK).zip(s.chunks(CHUNK)) {
                let b = &mut buf[..dc.len().min(CHUNK)];
                for (b, x) in b.iter_mut().zip(sc) {
                    *b = x.get();
                }
                k.run_inplace(b);
                for (x, b) in dc.iter_mut().zip(b.iter()) {
                    *x = T::put(*b);
                }
            }
        }
    }
}

/// Handler of a unary opcode.
#[inline(always)]
pub(crate) fn unary<T: Elem, K: Kern<T::C> + Default>(ub: &mut [u8], a: &UbArgs) {
    map1::<T, K>(ub, a.dst, a.a, a.n, K::default());
}

/// [`unary`] over global memory (see [`map1_gm`]).
#[inline(always)]
pub(crate) fn unary_gm<T: Elem, K: Kern<T::C> + Default>(
    dst: &mut [u8],
    src: &[u8],
    _b: &[u8],
    a: &UbArgs,
) {
    map1_gm::<T, K>(dst, src, a.n, K::default());
}

/// A binary op with its second (or, `REV`, first) operand fixed to the
/// instruction's immediate.
pub(crate) struct WithImm<C, O, const REV: bool>(pub C, pub PhantomData<O>);

impl<C: Copy, O, const REV: bool> Clone for WithImm<C, O, REV> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<C: Copy, O, const REV: bool> Copy for WithImm<C, O, REV> {}

impl<C: Copy, O: BinOp<C>, const REV: bool> Kern<C> for WithImm<C, O, REV> {
    #[inline(always)]
    fn f(&self, x: C) -> C {
        if REV {
            O::f(self.0, x)
        } else {
            O::f(x, self.0)
        }
    }
}

/// Handler of a vector-with-scalar opcode: `dst = a op imm` (`REV`:
/// `imm op a`).
#[inline(always)]
pub(crate) fn scalar<T: Elem, O: BinOp<T::C>, const REV: bool>(ub: &mut [u8], a: &UbArgs) {
    let k = WithImm::<T::C, O, REV>(T::imm(a.imm), PhantomData);
    map1::<T, _>(ub, a.dst, a.a, a.n, k);
}

/// [`scalar`] over global memory (see [`map1_gm`]).
#[inline(always)]
pub(crate) fn scalar_gm<T: Elem, O: BinOp<T::C>, const REV: bool>(
    dst: &mut [u8],
    src: &[u8],
    _b: &[u8],
    a: &UbArgs,
) {
    let k = WithImm::<T::C, O, REV>(T::imm(a.imm), PhantomData);
    map1_gm::<T, _>(dst, src, a.n, k);
}

/// Handler of a binary op whose one operand is a column broadcast across
/// the rows (what `brccol` then the binary op compute, without the
/// broadcast tile): over `rows = a.n` rows of `a.cols`, `dst = src op v[r]`
/// (`REV`: `v[r] op src`), `src` at `a.a` (identical to `dst` or disjoint),
/// the column `v` (`rows` elements) at `a.b`, disjoint from both. The
/// predecoder builds it (`crate::peephole`); the same arithmetic per
/// element as the binary handler on the broadcast tile, so the same bytes.
#[inline(always)]
pub(crate) fn binary_col<T: Elem, O: BinOp<T::C>, const REV: bool>(ub: &mut [u8], a: &UbArgs) {
    let Some((d, src, v, cols)) = tile_and_vector::<T>(ub, a, a.n as usize) else {
        return;
    };
    for (r, (dr, vr)) in d.chunks_exact_mut(cols).zip(v).enumerate() {
        let k = WithImm::<T::C, O, REV>(vr.get(), PhantomData);
        let Some(sr) = src.span(r * cols..(r + 1) * cols) else {
            return;
        };
        map1_core::<T, _>(dr, sr, k);
    }
}

/// Handler of a binary op whose one operand is a row broadcast down the
/// rows (what `brcrow` then the binary op compute, without the broadcast
/// tile): over `rows = a.n` rows of `a.cols`, `dst = src op v` row by row
/// (`REV`: `v op src`), `src` at `a.a` (identical to `dst` or disjoint),
/// the row `v` (`cols` elements) at `a.b`, disjoint from both. How a
/// norm's weight and bias (one row of a `[cols]` input) reach its rows.
/// The predecoder builds it (`crate::peephole`); the same arithmetic per
/// element as the binary handler on the broadcast tile, so the same bytes.
#[inline(always)]
pub(crate) fn binary_row<T: Elem, O: BinOp<T::C>, const REV: bool>(ub: &mut [u8], a: &UbArgs) {
    let Some((d, src, v, cols)) = tile_and_vector::<T>(ub, a, a.cols as usize) else {
        return;
    };
    for (r, dr) in d.chunks_exact_mut(cols).enumerate() {
        let Some(sr) = src.span(r * cols..(r + 1) * cols) else {
            return;
        };
        if REV {
            binary_core::<T, O>(dr, TSrc::Slice(v), sr);
        } else {
            binary_core::<T, O>(dr, sr, TSrc::Slice(v));
        }
    }
}

/// The operands of a binary op with a broadcast vector (`binary_col`,
/// `binary_row`): the destination tile (`a.n` rows of `a.cols` at
/// `a.dst`), its source tile (at `a.a`: the destination itself or
/// disjoint from it), the vector (`vec_len` elements at `a.b`, disjoint
/// from the destination) and the row length; `None` when an operand is
/// off or the rows are empty.
#[inline(always)]
fn tile_and_vector<'u, T: Elem>(
    ub: &'u mut [u8],
    a: &UbArgs,
    vec_len: usize,
) -> Option<TileAndVector<'u, T>> {
    let (rows, cols) = (a.n as usize, a.cols as usize);
    let elems = rows.checked_mul(cols)?;
    let rd = range_of::<T>(a.dst, elems)?;
    let (rs, rv) = (range_of::<T>(a.a, elems)?, range_of::<T>(a.b, vec_len)?);
    let sp = Split::new(ub, rd)?;
    let src = sp.src(rs)?.typed::<T>()?;
    let TSrc::Slice(v) = sp.src(rv)?.typed::<T>()? else {
        return None;
    };
    let d = view_mut::<T>(sp.dst)?;
    (cols > 0).then_some((d, src, v, cols))
}

/// [`tile_and_vector`]'s operands: the destination, its source, the
/// vector, the row length.
type TileAndVector<'u, T> = (&'u mut [T], TSrc<'u, T>, &'u [T], usize);

/// `B` after `A`: `x ↦ B(A(x))` with the intermediate kept as a compute
/// value (the same bits as running `A` then `B` over a tile whose element
/// type is the compute type).
#[derive(Clone, Copy)]
pub(crate) struct Then<A, B>(pub A, pub B);

impl<C: Copy, A: Kern<C>, B: Kern<C>> Kern<C> for Then<A, B> {
    #[inline(always)]
    fn f(&self, x: C) -> C {
        self.1.f(self.0.f(x))
    }
    #[inline(always)]
    fn run(&self, dst: &mut [C], src: &[C]) {
        self.1.run_after(&self.0, dst, src);
    }
    #[inline(always)]
    fn run_inplace(&self, xs: &mut [C]) {
        self.1.run_after_inplace(&self.0, xs);
    }
}

/// Rows per chunk of [`col_map_fold`]: the column values and the folds of
/// a chunk live on the stack.
const FOLD_ROWS: usize = 64;

/// Rows shorter than this run [`col_map_fold`]'s map over all the rows of
/// a batch at once.
const SHORT_ROW: usize = 64;

/// Handler of the superinstruction a softmax's middle becomes
/// (`crate::peephole`): over `rows = a.n` rows of `a.cols` `f32`s,
/// `dst = K(src op v[r])` (`REV`: `K(v[r] op src)`), then `fold[r] = R`
/// over row `r` of `dst`: the column-broadcast binary op, the in-place
/// unary op and the fold along columns it replaces, one row at a time
/// while the row is in L1, with the same arithmetic in the same order, so
/// the same bytes. `src` at `a.a` (identical to `dst` or disjoint), `v`
/// (`rows` values) at `a.b` and disjoint from `dst`, the fold's `rows`
/// results at `a.c`, disjoint from `dst` and `src` and either disjoint
/// from `v` or exactly `v` (row `r`'s value is read before its fold is
/// written). Does nothing when the operands break these rules.
#[inline(always)]
pub(crate) fn col_map_fold<O, K, R, const REV: bool>(ub: &mut [u8], a: &UbArgs)
where
    O: BinOp<f32>,
    K: Kern<f32> + Default,
    R: super::tile2d::RedOp<f32>,
{
    col_map_fold_in::<O, K, R, REV>(ub, None, a)
}

/// [`col_map_fold`] with its source read from `src` (a loaded tile in
/// global memory, `rows × cols` contiguous) instead of UB at `a.a`: what
/// the load of that tile and then the superinstruction leave in UB, since
/// the superinstruction overwrites the whole box in place
/// (`crate::loadfold`). A [`GmHandler`](super::GmHandler) by signature,
/// `ub` the whole UB; does nothing when a length or alignment is off.
#[inline(always)]
pub(crate) fn col_map_fold_gm<O, K, R, const REV: bool>(
    ub: &mut [u8],
    src: &[u8],
    _b: &[u8],
    a: &UbArgs,
) where
    O: BinOp<f32>,
    K: Kern<f32> + Default,
    R: super::tile2d::RedOp<f32>,
{
    col_map_fold_in::<O, K, R, REV>(ub, Some(src), a)
}

/// [`col_map_fold`], the source from `gm` when given (see
/// [`col_map_fold_gm`]).
#[inline(always)]
fn col_map_fold_in<O, K, R, const REV: bool>(ub: &mut [u8], gm: Option<&[u8]>, a: &UbArgs)
where
    O: BinOp<f32>,
    K: Kern<f32> + Default,
    R: super::tile2d::RedOp<f32>,
{
    let (rows, cols) = (a.n as usize, a.cols as usize);
    let Some(elems) = rows.checked_mul(cols) else {
        return;
    };
    let (Some(rd), Some(rs), Some(rv), Some(rf)) = (
        range_of::<f32>(a.dst, elems),
        range_of::<f32>(a.a, elems),
        range_of::<f32>(a.b, rows),
        range_of::<f32>(a.c, rows),
    ) else {
        return;
    };
    let apart = |x: &core::ops::Range<usize>, y: &core::ops::Range<usize>| {
        x.end <= y.start || y.end <= x.start
    };
    // From global memory the source is the slice; in UB, identical to the
    // destination or apart from it.
    let gm: Option<&[f32]> = match gm {
        Some(g) => match view::<f32>(g) {
            Some(v) if v.len() == elems => Some(v),
            _ => return,
        },
        None => None,
    };
    let src_ok = gm.is_some() || rs == rd || apart(&rs, &rd);
    let fold_ok =
        apart(&rf, &rd) && (gm.is_some() || apart(&rf, &rs)) && (rf == rv || apart(&rf, &rv));
    let aligned = (ub.as_ptr() as usize).is_multiple_of(4)
        && [a.dst, a.a, a.b, a.c].iter().all(|o| o.is_multiple_of(4));
    if cols == 0
        || !aligned
        || !src_ok
        || !apart(&rv, &rd)
        || !fold_ok
        || [&rd, &rv, &rf].iter().any(|r| r.end > ub.len())
        || (gm.is_none() && rs.end > ub.len())
    {
        return;
    }
    let row_bytes = cols * 4;
    let mut vals = [0f32; FOLD_ROWS];
    let mut folds = [0f32; FOLD_ROWS];
    let mut r0 = 0;
    while r0 < rows {
        let m = (rows - r0).min(FOLD_ROWS);
        let at = |r: &core::ops::Range<usize>, first: usize, len: usize| {
            r.start + first * len..r.start + (first + m) * len
        };
        let Some(v) = ub.get(at(&rv, r0, 4)).and_then(view::<f32>) else {
            return;
        };
        vals[..m].copy_from_slice(v);
        {
            let Some(sp) = Split::new(ub, at(&rd, r0, row_bytes)) else {
                return;
            };
            let src = match gm {
                Some(g) => match g.get(r0 * cols..(r0 + m) * cols) {
                    Some(s) => TSrc::Slice(s),
                    None => return,
                },
                None => match sp
                    .src(at(&rs, r0, row_bytes))
                    .and_then(|s| s.typed::<f32>())
                {
                    Some(s) => s,
                    None => return,
                },
            };
            let Some(d) = view_mut::<f32>(sp.dst) else {
                return;
            };
            let row_src = |i: usize| match src {
                TSrc::Alias => Some(TSrc::Alias),
                TSrc::Slice(s) => s.get(i * cols..(i + 1) * cols).map(TSrc::Slice),
            };
            if cols < SHORT_ROW {
                // Short rows: `O` row by row, then `K` over all of them in
                // one call (per row, `K`'s setup outweighed its work), then
                // the folds. The same values: `K` is element-wise.
                for (i, dr) in d.chunks_exact_mut(cols).enumerate() {
                    let Some(sr) = row_src(i) else { return };
                    map1_core::<f32, _>(dr, sr, WithImm::<f32, O, REV>(vals[i], PhantomData));
                }
                K::default().run_inplace(d);
            } else {
                for (i, dr) in d.chunks_exact_mut(cols).enumerate() {
                    let k = Then(WithImm::<f32, O, REV>(vals[i], PhantomData), K::default());
                    let Some(sr) = row_src(i) else { return };
                    map1_core::<f32, _>(dr, sr, k);
                }
            }
            super::tile2d::fold_rows::<f32, R>(d, cols, &mut folds[..m]);
        }
        let Some(f) = ub.get_mut(at(&rf, r0, 4)).and_then(view_mut::<f32>) else {
            return;
        };
        f.copy_from_slice(&folds[..m]);
        r0 += m;
    }
}

macro_rules! kern {
    ($(#[$m:meta])* $name:ident { $($c:ty => |$x:ident| $e:expr;)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Default)]
        pub(crate) struct $name;
        $(
            impl Kern<$c> for $name {
                #[inline(always)]
                fn f(&self, $x: $c) -> $c {
                    $e
                }
            }
        )*
    };
}

kern!(
    /// `|x|` (integers wrap: |MIN| = MIN).
    Abs {
        f32 => |x| f32::from_bits(x.to_bits() & 0x7fff_ffff);
        i32 => |x| x.wrapping_abs();
    }
);
kern!(
    /// `−x` (integers wrap).
    Neg {
        f32 => |x| -x;
        i32 => |x| x.wrapping_neg();
    }
);
kern!(
    /// `max(x, 0)`; for floats NaN stays NaN and −0 becomes +0.
    Relu {
        f32 => |x| if x <= 0.0 { 0.0 } else { x };
        i32 => |x| x.max(0);
    }
);
/// [`math::exp`]; over slices [`math::exp_map`] (the same bits).
#[derive(Clone, Copy, Default)]
pub(crate) struct Exp;

impl Kern<f32> for Exp {
    #[inline(always)]
    fn f(&self, x: f32) -> f32 {
        math::exp(x)
    }
    #[inline(always)]
    fn run(&self, dst: &mut [f32], src: &[f32]) {
        math::exp_map(dst, src, |x| x);
    }
    #[inline(always)]
    fn run_inplace(&self, xs: &mut [f32]) {
        self.run_after_inplace(&Id, xs);
    }
    #[inline(always)]
    fn run_after<A: Kern<f32>>(&self, a: &A, dst: &mut [f32], src: &[f32]) {
        math::exp_map(dst, src, |x| a.f(x));
    }
    /// Through a copy of each block: [`math::exp_map`] may read its
    /// source twice.
    #[inline(always)]
    fn run_after_inplace<A: Kern<f32>>(&self, a: &A, xs: &mut [f32]) {
        let mut copy = [0f32; math::EXP_BLOCK];
        for b in xs.chunks_mut(math::EXP_BLOCK) {
            let c = &mut copy[..b.len()];
            c.copy_from_slice(b);
            math::exp_map(b, c, |x| a.f(x));
        }
    }
}

/// The identity.
#[derive(Clone, Copy, Default)]
struct Id;

impl Kern<f32> for Id {
    #[inline(always)]
    fn f(&self, x: f32) -> f32 {
        x
    }
}
kern!(
    /// [`math::log`].
    Log { f32 => |x| math::log(x); }
);
kern!(
    /// [`math::recip`].
    Recip { f32 => |x| math::recip(x); }
);
kern!(
    /// [`math::tanh`].
    Tanh { f32 => |x| math::tanh(x); }
);
kern!(
    /// [`math::sigmoid`].
    Sigmoid { f32 => |x| math::sigmoid(x); }
);
kern!(
    /// [`math::gelu_tanh`].
    GeluTanh { f32 => |x| math::gelu_tanh(x); }
);
kern!(
    /// [`math::gelu_erf`].
    GeluErf { f32 => |x| math::gelu_erf(x); }
);
kern!(
    /// [`math::silu`].
    Silu { f32 => |x| math::silu(x); }
);
kern!(
    /// [`math::floor`].
    Floor { f32 => |x| math::floor(x); }
);
kern!(
    /// [`math::ceil`].
    Ceil { f32 => |x| math::ceil(x); }
);
kern!(
    /// [`math::round`].
    Round { f32 => |x| math::round(x); }
);
kern!(
    /// [`math::erf`].
    Erf { f32 => |x| math::erf(x); }
);
kern!(
    /// [`math::sin`].
    Sin { f32 => |x| math::sin(x); }
);
kern!(
    /// [`math::cos`].
    Cos { f32 => |x| math::cos(x); }
);
kern!(
    /// Logical not.
    Not { bool => |x| !x; }
);

/// Square root with the SIMD instruction over slices.
#[derive(Clone, Copy, Default)]
pub(crate) struct Sqrt;

impl Kern<f32> for Sqrt {
    #[inline(always)]
    fn f(&self, x: f32) -> f32 {
        math::sqrt(x)
    }
    #[inline(always)]
    fn run(&self, dst: &mut [f32], src: &[f32]) {
        math::sqrt_slice_with(dst, src, |r| r);
    }
    #[inline(always)]
    fn run_inplace(&self, xs: &mut [f32]) {
        math::sqrt_slice_inplace_with(xs, |r| r);
    }
}

/// `1/sqrt(x)` with the SIMD square root over slices.
#[derive(Clone, Copy, Default)]
pub(crate) struct Rsqrt;

impl Kern<f32> for Rsqrt {
    #[inline(always)]
    fn f(&self, x: f32) -> f32 {
        math::rsqrt(x)
    }
    #[inline(always)]
    fn run(&self, dst: &mut [f32], src: &[f32]) {
        math::sqrt_slice_with(dst, src, |r| 1.0 / r);
    }
    #[inline(always)]
    fn run_inplace(&self, xs: &mut [f32]) {
        math::sqrt_slice_inplace_with(xs, |r| 1.0 / r);
    }
}
