//! The cube: `dst (m×n) [+]= a (m×k) · b (k×n)`.
//!
//! Blocked GEMM without heap: the output is processed in `MC × NC` blocks
//! whose accumulators live in a stack array (`f32` for float inputs, `i32`
//! for `i8`); for each `KC` slice of `k` the block's panels of `a` and `b`
//! are packed (converted to the accumulator type, transposes resolved,
//! edges zero-padded) into `MR`-row and `NR`-column micro-panels, and an
//! `MR × NR` register-blocked micro-kernel runs `k` innermost over them.
//! The block is written once at the end, so `f16`/`bf16` outputs are
//! rounded once (and `accumulate` adds the old `dst` before that rounding).
//!
//! Float accumulation is plain `f32` multiply-add (no FMA contraction), in
//! `KC`-long partial sums per micro-tile; `i8` products accumulate in
//! wrapping `i32`. Stack use: `(MC + NC)·KC + MC·NC` accumulators
//! (20 KiB on aarch64, 80 KiB elsewhere).

use super::ub::{range_of, view_mut, Bf16, Pod, Split, F16};
use super::UbArgs;

/// Micro-kernel rows: eight rows of accumulators.
pub(crate) const MR: usize = 8;
/// Micro-kernel columns where vectors hold 8 `f32` (AVX2, and NEON's
/// register pairs): 8 × 8 accumulators in eight AVX2 or sixteen NEON
/// registers. Handlers compiled for AVX-512 use [`NR_WIDE`].
pub(crate) const NR: usize = 8;
/// Micro-kernel columns for AVX-512 (`f32`: [`Acc::kernel_fast`]): each
/// accumulator row two 16-lane registers (sixteen in all), and each depth
/// step two loads of `b`, eight broadcasts of `a`, sixteen multiplies and
/// sixteen adds. (Without fused multiply-adds, which would change the
/// bits, a step of the 8 × 16 kernel paid nine loads for sixteen
/// arithmetic instructions and ran load-bound; over [`NR`] the compiler
/// paired two rows per register and spent a permute per pair and step;
/// left to itself over 16 columns it vectorised along the depth and ran
/// 17× slower, hence the hand-written kernel.)
pub(crate) const NR_WIDE: usize = 32;
/// Output block rows. On the AI-CPU firmware (aarch64) the blocks are
/// 32 × 32 to fit its 64 KiB stack.
#[cfg(target_arch = "aarch64")]
pub(crate) const MC: usize = 32;
/// Output block columns.
#[cfg(target_arch = "aarch64")]
pub(crate) const NC: usize = 32;
/// Output block rows. Elsewhere (the host's CPU device) the blocks are
/// 64 × 128: each packed panel of `b` serves twice the rows and each panel
/// of `a` four times the columns (a 768 × 768 GEMM 1.4× faster than with
/// 32 × 32 blocks and four-row micro-tiles on a Zen 3).
#[cfg(not(target_arch = "aarch64"))]
pub(crate) const MC: usize = 64;
/// Output block columns.
#[cfg(not(target_arch = "aarch64"))]
pub(crate) const NC: usize = 128;
/// Depth of one packed slice. It fixes the order of the additions (every
/// output element sums `KC`-long partial sums, in order), so it is the
/// same on every target: the block and micro-tile sizes do not change a
/// bit of the result.
pub(crate) const KC: usize = 64;

/// `MmFlags` bits in [`UbArgs::flags`].
pub(crate) const TRANS_A: u32 = 1;
/// `MmFlags` bits in [`UbArgs::flags`].
pub(crate) const TRANS_B: u32 = 2;
/// `MmFlags` bits in [`UbArgs::flags`].
pub(crate) const ACCUMULATE: u32 = 4;

/// An accumulator type.
pub(crate) trait Acc: Copy + Default + 'static {
    /// `acc + a·b`.
    fn madd(acc: Self, a: Self, b: Self) -> Self;
    /// `a + b`.
    fn add(a: Self, b: Self) -> Self;
    /// Runs [`kernel`] with hand-written vector code, if this type has
    /// one for `NR` columns on this CPU: the same bits. `false` if not.
    #[inline(always)]
    fn kernel_fast<const NR: usize>(
        _ap: &[G<Self, MR>],
        _bp: &[G<Self, NR>],
        _c: &mut [G<Self, NR>],
    ) -> bool {
        false
    }
}

impl Acc for f32 {
    #[inline(always)]
    fn madd(acc: f32, a: f32, b: f32) -> f32 {
        acc + a * b
    }
    #[inline(always)]
    fn add(a: f32, b: f32) -> f32 {
        a + b
    }
    #[inline(always)]
    fn kernel_fast<const NR: usize>(
        ap: &[G<f32, MR>],
        bp: &[G<f32, NR>],
        c: &mut [G<f32, NR>],
    ) -> bool {
        #[cfg(all(target_arch = "x86_64", not(target_os = "none")))]
        if NR == NR_WIDE && std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: `NR == NR_WIDE`, so `G<f32, NR>` is `G<f32,
            // NR_WIDE>` and the casts keep lengths and layouts; AVX-512 F
            // was detected just above.
            unsafe {
                let bp = &*(bp as *const [G<f32, NR>] as *const [G<f32, NR_WIDE>]);
                let c = &mut *(c as *mut [G<f32, NR>] as *mut [G<f32, NR_WIDE>]);
                wide::kernel_8x32(ap, bp, c);
            }
            return true;
        }
        let _ = (ap, bp, c);
        false
    }
}

/// The AVX-512 micro-kernel.
#[cfg(all(target_arch = "x86_64", not(target_os = "none")))]
mod wide {
    use super::{G, MR, NC, NR_WIDE};
    use core::arch::x86_64::{
        __m512, _mm512_add_ps, _mm512_loadu_ps, _mm512_mul_ps, _mm512_set1_ps, _mm512_setzero_ps,
        _mm512_storeu_ps,
    };

    /// [`super::kernel`] over `MR × NR_WIDE` `f32`s, with the same
    /// operations in the same order (`acc + a·b` per step from zero, then
    /// added into `c`), so the same bits.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn kernel_8x32(
        ap: &[G<f32, MR>],
        bp: &[G<f32, NR_WIDE>],
        c: &mut [G<f32, NR_WIDE>],
    ) {
        const _: () = assert!(NR_WIDE == 32);
        let mut lo: [__m512; MR] = [_mm512_setzero_ps(); MR];
        let mut hi: [__m512; MR] = [_mm512_setzero_ps(); MR];
        for (a, b) in ap.iter().zip(bp) {
            // SAFETY: `b.0` holds `NR_WIDE` (32) `f32`s: two vectors.
            let (b0, b1) = unsafe {
                (
                    _mm512_loadu_ps(b.0.as_ptr()),
                    _mm512_loadu_ps(b.0.as_ptr().add(16)),
                )
            };
            for ((l, h), &av) in lo.iter_mut().zip(hi.iter_mut()).zip(a.0.iter()) {
                let av = _mm512_set1_ps(av);
                *l = _mm512_add_ps(*l, _mm512_mul_ps(av, b0));
                *h = _mm512_add_ps(*h, _mm512_mul_ps(av, b1));
            }
        }
        for (row, (l, h)) in c
            .iter_mut()
            .step_by(NC / NR_WIDE)
            .zip(lo.into_iter().zip(hi))
        {
            let p = row.0.as_mut_ptr();
            // SAFETY: `row.0` holds 32 `f32`s, read then written.
            unsafe {
                _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), l));
                _mm512_storeu_ps(p.add(16), _mm512_add_ps(_mm512_loadu_ps(p.add(16)), h));
            }
        }
    }
}

impl Acc for i32 {
    #[inline(always)]
    fn madd(acc: i32, a: i32, b: i32) -> i32 {
        acc.wrapping_add(a.wrapping_mul(b))
    }
    #[inline(always)]
    fn add(a: i32, b: i32) -> i32 {
        a.wrapping_add(b)
    }
}

/// A matmul input element.
pub(crate) trait MmIn: Pod {
    /// Accumulator type.
    type A: Acc;
    /// The element as an accumulator value (exact).
    fn load(self) -> Self::A;
    /// [`pack_rows`] of `W` full runs (`panel.len()` depths each) with
    /// vector code, for a prefix of the depths: returns how many it
    /// packed (a multiple of 8; 0 where there is no such code). By
    /// default the runs are first converted into accumulator values, whole
    /// (into a `W × KC` block on the stack), then transposed; `f32`
    /// transposes its source directly.
    #[inline(always)]
    fn pack_fast<const W: usize>(
        src: &[Self],
        stride: usize,
        panel: &mut [G<Self::A, W>],
    ) -> usize {
        let depths = fast_depths::<Self::A, W>(src.len(), stride, panel.len());
        if depths == 0 {
            return 0;
        }
        // Whole runs converted at a time (long loops vectorise), then
        // transposed from the block.
        let mut block = [[Self::A::default(); KC]; W];
        for (r, row) in block.iter_mut().enumerate() {
            let o = r * stride;
            let Some(run) = src.get(o..o + depths) else {
                return 0;
            };
            for (d, x) in row.iter_mut().zip(run) {
                *d = x.load();
            }
        }
        // SAFETY: `fast_depths` checked AVX, `W ∈ {8, 16, 32}` and 4-byte
        // accumulators (moved as `f32` bit patterns, which the shuffles
        // keep); the block's `W` rows, `KC` apart, hold `depths ≤ KC`
        // values each.
        unsafe { transpose_runs(block.as_ptr().cast::<f32>(), KC, depths, panel) };
        depths
    }
}

/// Groups `0..depths` of `panel` from `W` runs of 4-byte values, run `r`
/// at `src + r·stride`: 8 × 8 register transposes (a no-op where there
/// are none; [`fast_depths`] is then 0).
///
/// # Safety
/// When `depths > 0`: the CPU has AVX, `W` is 8, 16 or 32, `depths ≤
/// panel.len()` is a multiple of 8, `A` is 4 bytes, and the `W` runs of
/// `depths` values at `src` are readable and apart from `panel`.
#[inline(always)]
unsafe fn transpose_runs<A, const W: usize>(
    src: *const f32,
    stride: usize,
    depths: usize,
    panel: &mut [G<A, W>],
) {
    #[cfg(all(target_arch = "x86_64", not(target_os = "none")))]
    for p in (0..depths).step_by(8) {
        for half in 0..W / 8 {
            // SAFETY: as the caller guarantees: rows `8·half..8·half + 8`
            // hold depths `p..p + 8` (`p + 8 ≤ depths`), and groups `p..p +
            // 8` of `panel` have lanes `8·half..8·half + 8`, `W` apart.
            unsafe {
                transpose::t8x8(
                    src.add(8 * half * stride + p),
                    stride,
                    panel.as_mut_ptr().add(p).cast::<f32>().add(8 * half),
                    W,
                );
            }
        }
    }
    let _ = (src, stride, depths, panel);
}

/// How many leading depths (a multiple of 8) [`MmIn::pack_fast`] packs for
/// a panel of `W` runs of `kc` values in a source of `len` elements with
/// the runs `stride` apart: all full groups of 8 where the CPU has AVX,
/// `W` is 8, 16 or 32, accumulators are 4 bytes and every run lies inside the
/// source; 0 otherwise (and on other targets).
#[inline(always)]
fn fast_depths<A, const W: usize>(len: usize, stride: usize, kc: usize) -> usize {
    #[cfg(all(target_arch = "x86_64", not(target_os = "none")))]
    {
        let fits = (W.max(1) - 1)
            .checked_mul(stride)
            .and_then(|o| o.checked_add(kc))
            .is_some_and(|end| end <= len);
        if (W == 8 || W == 16 || W == 32)
            && core::mem::size_of::<A>() == 4
            && fits
            && std::arch::is_x86_feature_detected!("avx")
        {
            return kc.min(KC) / 8 * 8;
        }
    }
    let _ = (len, stride, kc);
    0
}

/// A matmul output element.
pub(crate) trait MmOut<A>: Pod {
    /// The element as an accumulator value (exact).
    fn get(self) -> A;
    /// The accumulator rounded (nearest even) to the element.
    fn put(a: A) -> Self;
}

macro_rules! mm_float {
    ($($t:ty),*) => {$(
        impl MmIn for $t {
            type A = f32;
            #[inline(always)]
            fn load(self) -> f32 {
                super::ub::Elem::get(self)
            }
        }
        impl MmOut<f32> for $t {
            #[inline(always)]
            fn get(self) -> f32 {
                super::ub::Elem::get(self)
            }
            #[inline(always)]
            fn put(a: f32) -> Self {
                <$t as super::ub::Elem>::put(a)
            }
        }
    )*};
}
mm_float!(F16, Bf16);

impl MmIn for f32 {
    type A = f32;
    #[inline(always)]
    fn load(self) -> f32 {
        self
    }
    #[inline(always)]
    fn pack_fast<const W: usize>(src: &[f32], stride: usize, panel: &mut [G<f32, W>]) -> usize {
        let depths = fast_depths::<f32, W>(src.len(), stride, panel.len());
        // SAFETY: `fast_depths` checked AVX, `W ∈ {8, 16, 32}` and that rows
        // `0..W`, `stride` apart, hold depths `0..depths` inside `src`.
        unsafe { transpose_runs(src.as_ptr(), stride, depths, panel) };
        depths
    }
}

impl MmOut<f32> for f32 {
    #[inline(always)]
    fn get(self) -> f32 {
        self
    }
    #[inline(always)]
    fn put(a: f32) -> Self {
        a
    }
}

/// An 8 × 8 transpose of `f32`s in AVX registers, for packing panels.
#[cfg(all(target_arch = "x86_64", not(target_os = "none")))]
mod transpose {
    use core::arch::x86_64::{
        _mm256_loadu_ps, _mm256_permute2f128_ps, _mm256_shuffle_ps, _mm256_storeu_ps,
        _mm256_unpackhi_ps, _mm256_unpacklo_ps,
    };

    /// Writes column `q` of the 8 × 8 block whose row `r` is the 8 values
    /// at `src + r·stride` to the 8 values at `dst + q·dst_stride`.
    ///
    /// # Safety
    /// The CPU must support AVX; the 8 source rows must be readable and
    /// the 8 destinations writable, the two apart.
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn t8x8(src: *const f32, stride: usize, dst: *mut f32, dst_stride: usize) {
        // SAFETY: as the caller guarantees.
        unsafe {
            let r = |i: usize| _mm256_loadu_ps(src.add(i * stride));
            let (r0, r1, r2, r3) = (r(0), r(1), r(2), r(3));
            let (r4, r5, r6, r7) = (r(4), r(5), r(6), r(7));
            // Pairs of rows interleaved: t0 = r0[0] r1[0] r0[1] r1[1] | r0[4] …
            let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
            let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
            let (t4, t5) = (_mm256_unpacklo_ps(r4, r5), _mm256_unpackhi_ps(r4, r5));
            let (t6, t7) = (_mm256_unpacklo_ps(r6, r7), _mm256_unpackhi_ps(r6, r7));
            // Four rows: s0 = r0..r3 [0] | r0..r3 [4], s1 the same for 1 and 5, …
            let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let s1 = _mm256_shuffle_ps::<0xee>(t0, t2);
            let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let s3 = _mm256_shuffle_ps::<0xee>(t1, t3);
            let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let s5 = _mm256_shuffle_ps::<0xee>(t4, t6);
            let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let s7 = _mm256_shuffle_ps::<0xee>(t5, t7);
            // Low halves give columns 0–3, high halves 4–7.
            let w = |q: usize, v| _mm256_storeu_ps(dst.add(q * dst_stride), v);
            w(0, _mm256_permute2f128_ps::<0x20>(s0, s4));
            w(1, _mm256_permute2f128_ps::<0x20>(s1, s5));
            w(2, _mm256_permute2f128_ps::<0x20>(s2, s6));
            w(3, _mm256_permute2f128_ps::<0x20>(s3, s7));
            w(4, _mm256_permute2f128_ps::<0x31>(s0, s4));
            w(5, _mm256_permute2f128_ps::<0x31>(s1, s5));
            w(6, _mm256_permute2f128_ps::<0x31>(s2, s6));
            w(7, _mm256_permute2f128_ps::<0x31>(s3, s7));
        }
    }
}

impl MmIn for i8 {
    type A = i32;
    #[inline(always)]
    fn load(self) -> i32 {
        self as i32
    }
}

impl MmOut<i32> for i32 {
    #[inline(always)]
    fn get(self) -> i32 {
        self
    }
    #[inline(always)]
    fn put(a: i32) -> i32 {
        a
    }
}

/// `N` values of one depth step (or one accumulator row), 16-byte aligned
/// so that strict-alignment targets (`aarch64-unknown-none`) load and store
/// them as whole vector registers.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
pub(crate) struct G<A, const N: usize>([A; N]);

/// The `MR × NR` micro-kernel: `k` innermost over packed panels (`ap`:
/// `kc` groups of `MR`, `bp`: `kc` groups of `NR`), accumulators in
/// registers, added into the block accumulators `c` (row `i` of the tile
/// is `c[i·NC/NR]`) at the end.
#[inline(always)]
fn kernel<A: Acc, const NR: usize>(ap: &[G<A, MR>], bp: &[G<A, NR>], c: &mut [G<A, NR>]) {
    if A::kernel_fast(ap, bp, c) {
        return;
    }
    let mut acc = [[A::default(); NR]; MR];
    for (a, b) in ap.iter().zip(bp) {
        // Whole-group copies keep the 16-byte alignment of the loads.
        let (a, b) = (*a, *b);
        for (row, av) in acc.iter_mut().zip(a.0) {
            for (c, bv) in row.iter_mut().zip(b.0) {
                *c = A::madd(*c, av, bv);
            }
        }
    }
    for (crow, arow) in c.iter_mut().step_by(NC / NR).zip(acc.iter()) {
        for (c, a) in crow.0.iter_mut().zip(arow.iter()) {
            *c = A::add(*c, *a);
        }
    }
}

/// Packs rows `i0..i0+mc` × depth `p0..p0+kc` of `a` into `MR`-row panels
/// (`kc` groups per panel, zero-padded rows).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn pack_a<I: MmIn>(
    a: &[I],
    trans: bool,
    m: usize,
    k: usize,
    i0: usize,
    mc: usize,
    p0: usize,
    kc: usize,
    ap: &mut [G<I::A, MR>],
) -> Option<()> {
    let panels = mc.div_ceil(MR);
    let ap = ap.get_mut(..panels * kc)?;
    if !mc.is_multiple_of(MR) {
        ap.fill(G([I::A::default(); MR]));
    }
    for (ip, panel) in ap.chunks_exact_mut(kc).enumerate() {
        let r0 = i0 + ip * MR;
        let rows = (mc - ip * MR).min(MR);
        if trans {
            // a is k×m: the MR values of one depth are contiguous.
            for (p, g) in panel.iter_mut().enumerate() {
                let o = (p0 + p) * m + r0;
                for (g, x) in g.0.iter_mut().zip(a.get(o..o + rows)?) {
                    *g = x.load();
                }
            }
        } else {
            // a is m×k: each row's kc values are contiguous.
            pack_rows(a.get(r0 * k + p0..)?, k, rows, kc, panel)?;
        }
    }
    Some(())
}

/// Packs `rows ≤ W` runs of `kc` contiguous values, run `r` at
/// `src[r·stride..]`, into `kc` groups of `W`: group `p` holds the runs'
/// `p`-th values (lanes from `rows` on are left as they are). A transpose:
/// full panels go through [`MmIn::pack_fast`] (8 × 8 register transposes
/// where the CPU has AVX), the rest one value at a time.
#[inline(always)]
fn pack_rows<I: MmIn, const W: usize>(
    src: &[I],
    stride: usize,
    rows: usize,
    kc: usize,
    panel: &mut [G<I::A, W>],
) -> Option<()> {
    let panel = panel.get_mut(..kc)?;
    let done = if rows == W {
        I::pack_fast(src, stride, panel)
    } else {
        0
    };
    for r in 0..rows {
        let o = r * stride;
        for (g, x) in panel[done..].iter_mut().zip(src.get(o + done..o + kc)?) {
            if let Some(g) = g.0.get_mut(r) {
                *g = x.load();
            }
        }
    }
    Some(())
}

/// Packs depth `p0..p0+kc` × columns `j0..j0+nc` of `b` into `NR`-column
/// panels (`kc` groups per panel, zero-padded columns).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn pack_b<I: MmIn, const NR: usize>(
    b: &[I],
    trans: bool,
    n: usize,
    k: usize,
    j0: usize,
    nc: usize,
    p0: usize,
    kc: usize,
    bp: &mut [G<I::A, NR>],
) -> Option<()> {
    let panels = nc.div_ceil(NR);
    let bp = bp.get_mut(..panels * kc)?;
    if !nc.is_multiple_of(NR) {
        bp.fill(G([I::A::default(); NR]));
    }
    for (jp, panel) in bp.chunks_exact_mut(kc).enumerate() {
        let c0 = j0 + jp * NR;
        let cols = (nc - jp * NR).min(NR);
        if trans {
            // b is n×k: each column's kc values are contiguous.
            pack_rows(b.get(c0 * k + p0..)?, k, cols, kc, panel)?;
        } else {
            // b is k×n: the NR values of one depth are contiguous.
            for (p, g) in panel.iter_mut().enumerate() {
                let o = (p0 + p) * n + c0;
                for (g, x) in g.0.iter_mut().zip(b.get(o..o + cols)?) {
                    *g = x.load();
                }
            }
        }
    }
    Some(())
}

/// Handler of `matmul` with input `I` and output `O`, `NR`-column
/// micro-tiles ([`NR`] or [`NR_WIDE`]: the same bits either way).
/// Operands: `a`, `b`, `dst`; `n` = m, `cols` = n, `k`; `flags` = trans_a
/// | trans_b << 1 | accumulate << 2.
#[inline(always)]
pub(crate) fn matmul<I: MmIn, O: MmOut<I::A>, const NR: usize>(ub: &mut [u8], args: &UbArgs) {
    // The packed `b` panels and the block accumulators, sized for this
    // width (an array length may not depend on `NR` itself, but it may
    // be spelt out for each width the handlers use).
    let zero = G([I::A::default(); NR]);
    if NR == NR_WIDE {
        let mut bp = [zero; NC / NR_WIDE * KC];
        let mut c = [zero; MC * (NC / NR_WIDE)];
        let _ = run::<I, O, NR>(ub, args, &mut bp, &mut c);
    } else {
        let mut bp = [zero; NC / self::NR * KC];
        let mut c = [zero; MC * (NC / self::NR)];
        let _ = run::<I, O, NR>(ub, args, &mut bp, &mut c);
    }
}

/// [`matmul`] with its `b` panels (`NC / NR · KC` groups) and block
/// accumulators (`MC · NC / NR`, zeroed) in `bp` and `c`.
#[inline(always)]
fn run<I: MmIn, O: MmOut<I::A>, const NR: usize>(
    ub: &mut [u8],
    args: &UbArgs,
    bp: &mut [G<I::A, NR>],
    c: &mut [G<I::A, NR>],
) -> Option<()> {
    let (m, n, k) = (args.n as usize, args.cols as usize, args.k as usize);
    let sp = Split::new(ub, range_of::<O>(args.dst, m.checked_mul(n)?)?)?;
    let a = sp.disjoint::<I>(range_of::<I>(args.a, m.checked_mul(k)?)?)?;
    let b = sp.disjoint::<I>(range_of::<I>(args.b, k.checked_mul(n)?)?)?;
    let dst = view_mut::<O>(sp.dst)?;
    let (ta, tb) = (args.flags & TRANS_A != 0, args.flags & TRANS_B != 0);
    let accumulate = args.flags & ACCUMULATE != 0;

    let zero = I::A::default();
    let mut ap = [G([zero; MR]); MC / MR * KC];
    let cg = NC / NR;
    for j0 in (0..n).step_by(NC) {
        let nc = (n - j0).min(NC);
        for i0 in (0..m).step_by(MC) {
            let mc = (m - i0).min(MC);
            // Block accumulators: the old dst or zero (`c` comes zeroed for
            // the first block).
            if (i0, j0) != (0, 0) {
                c.fill(G([zero; NR]));
            }
            if accumulate {
                for (i, crow) in c.chunks_exact_mut(cg).take(mc).enumerate() {
                    let o = (i0 + i) * n + j0;
                    // A group of `NR` at a time (vector code).
                    for (g, d) in crow.iter_mut().zip(dst.get(o..o + nc)?.chunks(NR)) {
                        for (a, d) in g.0.iter_mut().zip(d) {
                            *a = d.get();
                        }
                    }
                }
            }
            for p0 in (0..k).step_by(KC) {
                let kc = (k - p0).min(KC);
                pack_a(a, ta, m, k, i0, mc, p0, kc, &mut ap)?;
                pack_b(b, tb, n, k, j0, nc, p0, kc, bp)?;
                for (ip, apan) in ap.chunks_exact(kc).take(mc.div_ceil(MR)).enumerate() {
                    for (jp, bpan) in bp.chunks_exact(kc).take(nc.div_ceil(NR)).enumerate() {
                        kernel(apan, bpan, c.get_mut(ip * MR * cg + jp..)?);
                    }
                }
            }
            for (i, crow) in c.chunks_exact(cg).take(mc).enumerate() {
                let o = (i0 + i) * n + j0;
                for (g, d) in crow.iter().zip(dst.get_mut(o..o + nc)?.chunks_mut(NR)) {
                    for (d, a) in d.iter_mut().zip(g.0) {
                        *d = O::put(a);
                    }
                }
            }
        }
    }
    Some(())
}
