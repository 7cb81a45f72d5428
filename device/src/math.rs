//! Branch-free scalar math for the vector handlers.
//!
//! Every function here is an `#[inline(always)]` scalar `f32` function built
//! from arithmetic, bit operations and selects (`if c { a } else { b }` on
//! values already computed, which LLVM turns into blends), so that a loop
//! over a slice calling it vectorises. None of them branches on the input,
//! panics, or touches memory.
//!
//! Error bounds are measured by the unit tests at the bottom of this file
//! against an `f64` reference over a sweep of every 101st `f32` bit pattern
//! (about 42 million inputs, both signs, all exponents) plus special values.
//! "ulp" is the spacing of `f32` numbers at the reference value (for results
//! in the subnormal range, the subnormal spacing 2^-149).
//!
//! The module also holds the `f16`/`bf16` ⇄ `f32` conversions used by the
//! handlers: branch-free versions of `half`'s conversions (round to nearest
//! even, NaN payloads kept and quietened exactly as `half` does), bit-exact
//! with `half` (tested exhaustively for `f16 → f32`, and on every `f32`
//! exponent/sign with many mantissas, including every rounding tie, for
//! `f32 → f16`).

// The coefficients are the f32 values of fitted constants, written with
// the digits the fits printed; the extra digits round away identically.
#![allow(clippy::excessive_precision)]

// ---- selects and bit helpers --------------------------------------------

#[inline(always)]
fn sel(c: bool, a: f32, b: f32) -> f32 {
    if c {
        a
    } else {
        b
    }
}

#[inline(always)]
fn abs(x: f32) -> f32 {
    f32::from_bits(x.to_bits() & 0x7fff_ffff)
}

/// `|mag|` with the sign of `sign`.
#[inline(always)]
fn copysign(mag: f32, sign: f32) -> f32 {
    f32::from_bits((mag.to_bits() & 0x7fff_ffff) | (sign.to_bits() & 0x8000_0000))
}

/// `a·b + c` rounded once (IEEE `fusedMultiplyAdd`), the same bits on every
/// target and SIMD tier.
///
/// - aarch64 with NEON: the `fmla` instruction.
/// - x86-64 with an OS: `f32::mul_add`, LLVM's `fma` intrinsic, which
///   becomes `vfmadd` in handlers compiled for AVX2 (with FMA) or AVX-512
///   and a call to the C library's correctly rounded `fmaf` in baseline
///   code (CPUs without FMA: correct, but slow). `core` has no stable
///   `mul_add`, hence the `std` link on these targets.
/// - anything else: [`fma_soft`], exact arithmetic in `f64`.
#[inline(always)]
#[allow(unused_unsafe)]
fn mul_add(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    {
        use core::arch::aarch64::{vdup_n_f32, vfma_f32, vget_lane_f32};
        // SAFETY: NEON is enabled for this target (cfg above); the
        // intrinsics only compute on values.
        unsafe { vget_lane_f32::<0>(vfma_f32(vdup_n_f32(c), vdup_n_f32(a), vdup_n_f32(b))) }
    }
    #[cfg(all(target_arch = "x86_64", not(target_os = "none")))]
    {
        std::primitive::f32::mul_add(a, b, c)
    }
    #[cfg(not(any(
        all(target_arch = "aarch64", target_feature = "neon"),
        all(target_arch = "x86_64", not(target_os = "none"))
    )))]
    {
        fma_soft(a, b, c)
    }
}

/// `a·b + c` rounded once, with `f64` arithmetic only (branch-free, so it
/// vectorises): the product is exact in `f64` (24 + 24 bits ≤ 53), the sum
/// is rounded to odd (if inexact, of the two neighbours of the exact sum
/// the one whose last bit is 1), and rounding that to `f32` is correct
/// because `f64` has more than 24 + 1 bits (Boldo & Melquiond, "Emulation
/// of FMA and correctly rounded sums: proved algorithms using rounding to
/// odd", 2008).
#[cfg_attr(
    any(
        all(target_arch = "aarch64", target_feature = "neon"),
        all(target_arch = "x86_64", not(target_os = "none"))
    ),
    allow(dead_code)
)]
#[inline(always)]
fn fma_soft(a: f32, b: f32, c: f32) -> f32 {
    let p = a as f64 * b as f64;
    let c = c as f64;
    let s = p + c;
    // Knuth's TwoSum: `err` is the exact `p + c − s`.
    let bc = s - p;
    let err = (p - (s - bc)) + (c - bc);
    // `s` is finite here whenever `err` is, and `err ≠ 0` means `s` was
    // rounded; an even `s` then moves one step toward the exact sum, to its
    // odd neighbour (up in magnitude when `err` has the sign of `s`).
    let bits = s.to_bits();
    let inexact_even = err != 0.0 && err.is_finite() && bits & 1 == 0;
    let away = (err > 0.0) == (s > 0.0);
    let odd = if away { bits + 1 } else { bits - 1 };
    let s = if inexact_even { f64::from_bits(odd) } else { s };
    s as f32
}

/// Horner evaluation of `c[0]·x^(N-1) + … + c[N-1]` (`N ≥ 1`), one fused
/// multiply-add per step.
///
/// It starts from `c[0]` rather than `0·x + c[0]`: without fast-math LLVM
/// may not fold `0·x` (it is NaN for an infinite `x`), so the literal form
/// costs a multiply-add per call.
#[inline(always)]
fn horner<const N: usize>(x: f32, c: [f32; N]) -> f32 {
    let mut p = c[0];
    let mut i = 1;
    while i < N {
        p = mul_add(p, x, c[i]);
        i += 1;
    }
    p
}

// ---- exp / log ---------------------------------------------------------------

/// `e^x`.
///
/// Cody–Waite reduction `x = n·ln2 + r` (`|r| ≤ ln2/2`), a degree-6
/// polynomial `1 + r·(1 + r·P(r))` for `e^r`, and a two-step scaling by
/// `2^n` so that subnormal results are rounded once. Every step is a fused
/// multiply-add (`mul_add`): nine in all, with the reduction.
///
/// `P` (degree 4) minimises the relative error of `e^r` on
/// `|r| ≤ 1.0005·ln2/2` (Lawson's iteration on a Chebyshev grid,
/// `device/tools/fit_exp.py`): at most 3.1e-9, about 0.03 ulp, so the
/// result's error is the rounding of the last steps.
///
/// **Error:** ≤ 1 ulp for results in the normal range (measured 0.86 ulp);
/// for subnormal results (x < −87.34) absolute error ≤ 2^-149.
/// **Special values:** NaN → NaN; +inf → +inf; −inf → +0; overflows
/// (x > 88.7228) to +inf; underflows (x < −103.97) to +0.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let (y, n) = exp_parts(x, -104.0);
    scale2(y, n)
}

/// `dst[i] = exp(pre(src[i]))` over the common length of the slices: the
/// same bits as [`exp`], faster.
///
/// [`exp`]'s last step, `y·2^n` by two multiplications (`scale2`), is
/// there for the results it must round: subnormal ones and overflows.
/// When `n ∈ −125..=127`, `y·2^n` (`y ∈ [0.7, 1.42]`) is a normal number,
/// and adding `n` to `y`'s exponent field gives it exactly, as the two
/// exact multiplications do. So each block of [`EXP_BLOCK`] elements is
/// computed that way, one integer addition instead of two multiplications
/// and five integer steps, and without [`exp`]'s clamps (no-ops in that
/// range), while the loop keeps the least and greatest `t = M + n`. When
/// either is outside the range (so is the `t` of a NaN, an infinity or any
/// `x` the clamps would move: no such integer), a second pass over the
/// block finishes [`exp`]'s way: `t` again from the clamped input, `y`
/// back from the first pass's sum (the same `y` wherever the clamps moved
/// nothing), `scale2` for the rounding, and the clamped inputs' results
/// (+0 below, +inf above, NaN) without multiplying a subnormal, which
/// x86 cores take microcode assists for. The one branch is per block, on
/// what the block held, never on an element; the vector units run the
/// rest. A softmax's `exp(x − max)` stays in the fast range unless its row
/// spans more than 86; a masked position (`−inf`) sends its block through
/// the second pass, which costs less than [`exp`] alone.
#[inline(always)]
pub fn exp_map(dst: &mut [f32], src: &[f32], pre: impl Fn(f32) -> f32) {
    const M: u32 = 0x4b40_0000;
    const LO: f32 = -104.0;
    let n = dst.len().min(src.len());
    let (mut dst, mut src) = (&mut dst[..n], &src[..n]);
    // Blocks split off one at a time, not `chunks(..).zip(chunks(..))`:
    // where LLVM does not inline that zip's constructor (in a large
    // caller), each call divides by the block size, at every block.
    while !dst.is_empty() {
        let k = dst.len().min(EXP_BLOCK);
        let (d, dr) = core::mem::take(&mut dst).split_at_mut(k);
        let (s, sr) = src.split_at(k);
        (dst, src) = (dr, sr);
        let (mut lo, mut hi) = (u32::MAX, 0u32);
        for (d, &x) in d.iter_mut().zip(s) {
            // Unclamped: the clamps change nothing in the range kept.
            let (y, Pow2(t)) = exp_reduced(pre(x));
            // `(M + n) << 23` wraps to `n << 23`: `M`'s low 9 bits are 0.
            *d = f32::from_bits(y.to_bits().wrapping_add(t << 23));
            lo = lo.min(t);
            hi = hi.max(t);
        }
        if lo >= M - 125 && hi <= M + 127 {
            continue;
        }
        for (d, &x) in d.iter_mut().zip(s) {
            let x = pre(x);
            // Within exp's clamps, the pass above computed exp's `y` and
            // `t`: `t` again by one multiply-add, `y` back from the sum.
            let Pow2(t) = exp_t(sel(x > 89.0, 89.0, sel(x < LO, LO, x)));
            let y = f32::from_bits(d.to_bits().wrapping_sub(t << 23));
            // Clamped below, exp rounds `y·2^−150` (`y < 1`) to +0, as
            // `0·2^n` is; above, `y·2^128` (`y > 1`) overflows as `2·2^128`
            // does (and neither multiplies a subnormal).
            let y = sel(x < LO, 0.0, sel(x > 89.0, 2.0, y));
            *d = sel(x.is_nan(), x, scale2(y, Pow2(t)));
        }
    }
}

/// Elements per block of [`exp_map`].
pub const EXP_BLOCK: usize = 256;

/// `e^x = y·2^n` with `y ∈ [0.7, 1.42]` (NaN for NaN), after NaN-preserving
/// clamping of `x` to `[lo, 89]`; `lo ≥ −120` keeps `n ∈ -174..=128`.
#[inline(always)]
fn exp_parts(x: f32, lo: f32) -> (f32, Pow2) {
    // NaN-preserving clamps (a NaN compares false and stays).
    let x = sel(x > 89.0, 89.0, x);
    let x = sel(x < lo, lo, x);
    exp_reduced(x)
}

/// The `t` of [`exp_reduced`]: `x·log2(e) + MAGIC`, rounded once.
#[inline(always)]
fn exp_t(x: f32) -> Pow2 {
    Pow2(mul_add(x, core::f32::consts::LOG2_E, 12_582_912.0).to_bits())
}

/// [`exp_parts`] without the clamps: `y` and `t = n + MAGIC` (as bits)
/// for any `x`. For `x` outside `[lo, 89]` (or NaN) both are meaningless,
/// except that then `t` is not `M + n` for any `n ∈ −125..=127` (see
/// [`exp_map`]); inside, the clamps change nothing.
#[inline(always)]
fn exp_reduced(x: f32) -> (f32, Pow2) {
    const C1: f32 = 0.693_359_4; // 355/512, exact
    const C2: f32 = -2.121_944_4e-4;
    const MAGIC: f32 = 12_582_912.0; // 1.5·2^23: adding it rounds to an integer
    let Pow2(tb) = exp_t(x);
    let t = f32::from_bits(tb);
    let nf = t - MAGIC;
    let r = mul_add(-nf, C2, mul_add(-nf, C1, x));
    let p = horner(
        r,
        [
            1.381_453_967e-3,
            8.368_745_126e-3,
            4.166_839_079e-2,
            1.666_652_040e-1,
            4.999_999_343e-1,
        ],
    );
    (mul_add(mul_add(p, r, 1.0), r, 1.0), Pow2(t.to_bits()))
}

/// The `2^n` of [`exp_parts`], held as the bits of `t = n + MAGIC` (`MAGIC
/// = 1.5·2^23`, whose bits `M` are even and a multiple of 2^9), from which
/// [`scale2`] builds its two factors without computing `n` itself.
#[derive(Clone, Copy)]
struct Pow2(u32);

/// `y·2^n` for `n ∈ -174..=128`, rounded once: two exact power-of-two
/// factors `2^n1 · 2^n2` (`n1 = ⌊n/2⌋`, `n2 = n − n1`), so subnormal
/// results round only at the last product.
///
/// With `t = M + n`: `n1 + 127 = (t >> 1) + 127 − M/2` (`M` even), and
/// `(n2 + 127) << 23 = (t << 23) + (254 << 23) − ((n1 + 127) << 23)` in
/// wrapping `u32` arithmetic (`M << 23` wraps to 0). Both exponents lie in
/// `40..=191`. For a NaN `y` the factors are meaningless and the product is
/// NaN.
#[inline(always)]
fn scale2(y: f32, Pow2(t): Pow2) -> f32 {
    const M: u32 = 0x4b40_0000;
    let b1 = ((t >> 1).wrapping_add(127u32.wrapping_sub(M >> 1))) << 23;
    let b2 = (t << 23).wrapping_add(254 << 23).wrapping_sub(b1);
    y * f32::from_bits(b1) * f32::from_bits(b2)
}

/// `x · sigmoid(v)` with one rounding into the subnormal range: for `v < 0`
/// it is `x·e^v/(1 + e^v)` with the `2^n` of `e^v` applied last.
#[inline(always)]
fn mul_sigmoid(x: f32, v: f32) -> f32 {
    // Down to −120 so that |x|·e^v (|x| ≤ 200) still rounds correctly to 0.
    let (y, n) = exp_parts(-abs(v), -120.0);
    let e = scale2(y, n);
    let s = 1.0 / (1.0 + e);
    sel(v >= 0.0, x * s, scale2(x * y * s, n))
}

/// Natural logarithm.
///
/// `x = m·2^e` with `m ∈ [√½, √2)`, `log(m) = f − f²/2 + f³·P(f)` with
/// `f = m − 1` and a degree-8 `P` (Cephes coefficients); subnormal inputs
/// are scaled by 2^23 first.
///
/// **Error:** ≤ 1 ulp over all positive finite `f32` (measured 0.80 ulp). **Special values:** NaN → NaN; x < 0 (incl. −inf) → NaN;
/// ±0 → −inf; +inf → +inf; 1 → +0.
#[inline(always)]
pub fn log(x: f32) -> f32 {
    const SQRTH: f32 = core::f32::consts::FRAC_1_SQRT_2;
    let sub = x < f32::MIN_POSITIVE;
    let xs = sel(sub, x * 8_388_608.0, x);
    let bits = xs.to_bits();
    let e0 = ((bits >> 23) & 0xff) as i32 - 126 - if sub { 23 } else { 0 };
    // m in [0.5, 1).
    let m = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000);
    let lo = m < SQRTH;
    let e = (e0 - lo as i32) as f32;
    let f = sel(lo, m + m - 1.0, m - 1.0);
    let z = f * f;
    let p = horner(
        f,
        [
            7.037_683_6e-2,
            -1.151_461e-1,
            1.167_699_9e-1,
            -1.242_014_1e-1,
            1.424_932_3e-1,
            -1.666_805_8e-1,
            2.000_071_4e-1,
            -2.499_999_4e-1,
            3.333_333_1e-1,
        ],
    );
    let mut y = p * f * z;
    y += -2.121_944_4e-4 * e;
    y += -0.5 * z;
    let r = f + y + 0.693_359_4 * e;
    // Special cases: x == inf → inf, x == 0 → −inf, x < 0 or NaN → NaN.
    let r = sel(x == f32::INFINITY, x, r);
    let r = sel(x == 0.0, f32::NEG_INFINITY, r);
    sel(x < 0.0 || x.is_nan(), f32::NAN, r)
}

// ---- activation functions ------------------------------------------------------

/// Hyperbolic tangent.
///
/// `|x| < 0.625`: `x + x·z·P(z)` with `z = x²` (Cephes, degree 4);
/// otherwise `1 − 2/(e^{2|x|} + 1)`; the sign is copied from `x`.
///
/// **Error:** ≤ 2 ulp everywhere (measured 1.35 ulp).
/// **Special values:** NaN → NaN; ±inf → ±1; ±0 → ±0; |x| > 9.1 → ±1.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let ax = abs(x);
    let z = ax * ax;
    let p = horner(
        z,
        [
            -5.704_988_7e-3,
            2.063_908_9e-2,
            -5.373_971_6e-2,
            1.333_144_2e-1,
            -3.333_328_2e-1,
        ],
    );
    let small = ax + ax * z * p;
    let e = exp(ax + ax);
    let large = 1.0 - 2.0 / (e + 1.0);
    copysign(sel(ax < 0.625, small, large), x)
}

/// Logistic sigmoid `1 / (1 + e^-x)`.
///
/// With `e = e^{−|x|}` (never overflows) and `s = 1/(1 + e)`: `s` for
/// `x ≥ 0`, `e·s` for `x < 0`, so both tails keep their relative accuracy.
///
/// **Error:** ≤ 4 ulp for results in the normal range (measured 2.78 ulp);
/// absolute error ≤ 2^-148 for subnormal results (x < −87.3).
/// **Special values:** NaN → NaN; +inf → 1; −inf → +0; ±0 → 0.5.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    let e = exp(-abs(x));
    let s = 1.0 / (1.0 + e);
    sel(x >= 0.0, s, e * s)
}

/// SiLU (swish) `x · sigmoid(x)`.
///
/// **Error:** ≤ 4 ulp for results in the normal range; absolute error
/// ≤ 2^-148 for subnormal results. **Special values:** NaN → NaN;
/// +inf → +inf; −inf → −0; ±0 → ±0.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    // silu(−200) is −0, so −inf gives −0 instead of −inf·0 = NaN.
    let x = sel(x < -200.0, -200.0, x);
    mul_sigmoid(x, x)
}

/// GELU, tanh approximation: `x/2 · (1 + tanh(√(2/π)(x + 0.044715x³)))`,
/// evaluated as the identical `x · sigmoid(2√(2/π)·x·(1 + 0.044715x²))`,
/// which has no cancellation for negative `x`.
///
/// **Error:** for results in the normal range ≤ `4 + 3·|v|` ulp, where
/// `v = 2√(2/π)(x + 0.044715x³)` is the sigmoid argument (its ~3 ulp of
/// rounding in f32 is amplified by `|v|`: ≤ 5 ulp for |x| ≤ 0.3, ≤ 25 ulp
/// at x = −3 where the result is −0.004); absolute error ≤ 2^-148 for
/// subnormal results. **Special values:** NaN → NaN; +inf → +inf;
/// −inf → −0; x < −12 → −0.
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    const K0: f32 = 1.595_769_1; // 2·√(2/π)
    const K1: f32 = 0.071_354_816; // 2·√(2/π)·0.044715
                                   // For x < −12 the result is −0 in f32; clamping avoids −inf·0 = NaN.
    let x = sel(x < -12.0, -12.0, x);
    mul_sigmoid(x, x * (K0 + K1 * (x * x)))
}

/// Error function.
///
/// `|x| < 1`: `x + x·P(x²)` with a degree-7 `P` (so the large leading term
/// `x` is exact); `1 ≤ |x| < 3.92`: a degree-14 polynomial in `|x| − 2.46`;
/// beyond, ±1 (erf(3.92) rounds to 1 in f32). Coefficients are Chebyshev
/// fits made for this crate (fit error 3e-11 and 7e-9).
///
/// **Error:** ≤ 2 ulp everywhere outside the subnormal range (measured max:
/// see the tests), i.e. absolute ≤ 1.2e-7. **Special values:** NaN → NaN;
/// ±inf → ±1; ±0 → ±0.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let ax = abs(x);
    let t = ax * ax;
    let q = horner(
        t,
        [
            -9.667_045e-6,
            1.126_595_9e-4,
            -8.484_08e-4,
            5.221_031_6e-3,
            -2.686_543e-2,
            1.128_378_2e-1,
            -3.761_263_8e-1,
            1.283_791_7e-1,
        ],
    );
    let p1 = ax + ax * q;
    let s = ax - 2.46;
    let p2 = horner(
        s,
        [
            1.098_925_1e-6,
            8.318_214e-8,
            -1.736_399e-5,
            2.478_697_6e-5,
            7.591_612e-5,
            -2.998_320_9e-4,
            3.557_79e-4,
            4.596_072_5e-4,
            -2.937_091_5e-3,
            6.799_373e-3,
            -9.914_207e-3,
            9.832_501e-3,
            -6.534_517e-3,
            2.656_233e-3,
            9.994_966_4e-1,
        ],
    );
    let r = sel(ax >= 3.92, 1.0, p2);
    copysign(sel(ax < 1.0, p1, r), x)
}

/// GELU, exact form: `x/2 · (1 + erf(x/√2))`.
///
/// **Error:** absolute ≤ 1.5e-7·max(1, |x|) everywhere (measured
/// 1.1e-7·max(1, |x|)), and ≤ 4 ulp relative for `x ≥ −0.5` (measured
/// 1.7 ulp, outside the subnormal range). For x < −0.5 only the absolute
/// bound holds: `1 + erf` cancels, and results of magnitude below ≈1e-7·|x|
/// (x < −5.5) come out as −0.
/// **Special values:** NaN → NaN; +inf → +inf; −inf → −0.
#[inline(always)]
pub fn gelu_erf(x: f32) -> f32 {
    // For x < −10 the form gives exactly −0; clamping avoids −inf·0 = NaN.
    let x = sel(x < -10.0, -10.0, x);
    0.5 * x * (1.0 + erf(x * core::f32::consts::FRAC_1_SQRT_2))
}

// ---- roots and reciprocals -------------------------------------------------------

/// Square root, correctly rounded (the hardware instruction via `libm`).
///
/// Scalar: `libm::sqrtf` is an inline `sqrtss`/`fsqrt` and does not
/// vectorise, so the slice handlers use [`sqrt_slice`] instead.
/// **Special values:** IEEE: NaN → NaN, x < 0 → NaN, ±0 → ±0, +inf → +inf.
#[inline(always)]
pub fn sqrt(x: f32) -> f32 {
    libm::sqrtf(x)
}

/// `1 / sqrt(x)`: correctly rounded square root, then a correctly rounded
/// division (≤ 1 ulp). **Special values:** NaN → NaN; x < 0 → NaN;
/// ±0 → ±inf; +inf → +0.
#[inline(always)]
pub fn rsqrt(x: f32) -> f32 {
    1.0 / sqrt(x)
}

/// `1 / x`, IEEE division (correctly rounded).
#[inline(always)]
pub fn recip(x: f32) -> f32 {
    1.0 / x
}

/// Four square roots with the SIMD instruction of the target.
#[inline(always)]
#[allow(unused_unsafe)]
fn sqrt4(v: [f32; 4]) -> [f32; 4] {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{__m128, _mm_sqrt_ps};
        // SAFETY: SSE is part of the x86_64 baseline, so `_mm_sqrt_ps` is
        // available; `[f32; 4]` and `__m128` are both 16 bytes of plain
        // data, every bit pattern valid for either.
        unsafe {
            core::mem::transmute::<__m128, [f32; 4]>(_mm_sqrt_ps(core::mem::transmute::<
                [f32; 4],
                __m128,
            >(v)))
        }
    }
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    {
        use core::arch::aarch64::{float32x4_t, vsqrtq_f32};
        // SAFETY: NEON is enabled for this target (cfg above); `[f32; 4]`
        // and `float32x4_t` are both 16 bytes of plain data, every bit
        // pattern valid for either.
        unsafe {
            core::mem::transmute::<float32x4_t, [f32; 4]>(vsqrtq_f32(core::mem::transmute::<
                [f32; 4],
                float32x4_t,
            >(v)))
        }
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        all(target_arch = "aarch64", target_feature = "neon")
    )))]
    {
        v.map(sqrt)
    }
}

/// `out[i] = f(sqrt(src[i]))` four lanes at a time with the hardware SIMD
/// square root (correctly rounded, IEEE special values). `out` and `src`
/// must have equal lengths (extra elements of the longer are ignored).
#[inline(always)]
pub fn sqrt_slice_with(out: &mut [f32], src: &[f32], f: impl Fn(f32) -> f32) {
    let mut o = out.chunks_exact_mut(4);
    let mut s = src.chunks_exact(4);
    for (o, s) in (&mut o).zip(&mut s) {
        if let Ok(v) = <[f32; 4]>::try_from(s) {
            let r = sqrt4(v);
            for (o, r) in o.iter_mut().zip(r) {
                *o = f(r);
            }
        }
    }
    for (o, s) in o.into_remainder().iter_mut().zip(s.remainder()) {
        *o = f(sqrt(*s));
    }
}

/// In-place form of [`sqrt_slice_with`]: `x[i] = f(sqrt(x[i]))`.
#[inline(always)]
pub fn sqrt_slice_inplace_with(xs: &mut [f32], f: impl Fn(f32) -> f32) {
    let mut c = xs.chunks_exact_mut(4);
    for x in &mut c {
        if let Ok(v) = <[f32; 4]>::try_from(&*x) {
            let r = sqrt4(v);
            for (x, r) in x.iter_mut().zip(r) {
                *x = f(r);
            }
        }
    }
    for x in c.into_remainder() {
        *x = f(sqrt(*x));
    }
}

/// `out[i] = sqrt(src[i])` with the hardware SIMD square root.
#[inline]
pub fn sqrt_slice(out: &mut [f32], src: &[f32]) {
    sqrt_slice_with(out, src, |r| r)
}

// ---- rounding -------------------------------------------------------------

/// Round to nearest, ties to even (IEEE `roundeven`), exact.
///
/// `(|x| + 2^23) − 2^23` rounds `|x| < 2^23` to an integer in the current
/// (nearest-even) mode; larger magnitudes, infinities and NaN are returned
/// unchanged; the sign is kept (−0.4 → −0).
#[inline(always)]
pub fn round(x: f32) -> f32 {
    const TWO23: f32 = 8_388_608.0;
    let ax = abs(x);
    let r = copysign((ax + TWO23) - TWO23, x);
    sel(ax < TWO23, r, x)
}

/// Round toward −∞, exact. Integers (incl. |x| ≥ 2^23), ±0, ±inf and NaN
/// are returned unchanged; results of zero keep the sign of `x`
/// (floor(−0) = −0).
#[inline(always)]
pub fn floor(x: f32) -> f32 {
    let r = round(x);
    copysign(sel(r > x, r - 1.0, r), x)
}

/// Round toward +∞, exact. Integers (incl. |x| ≥ 2^23), ±0, ±inf and NaN
/// are returned unchanged; results of zero keep the sign of `x`
/// (ceil(−0.5) = −0).
#[inline(always)]
pub fn ceil(x: f32) -> f32 {
    let r = round(x);
    copysign(sel(r < x, r + 1.0, r), x)
}

/// True when `x` is neither infinite nor NaN.
#[inline(always)]
pub fn is_finite(x: f32) -> bool {
    x.to_bits() & 0x7f80_0000 != 0x7f80_0000
}

// ---- sine and cosine ---------------------------------------------------------------

/// `x` reduced by multiples of π/2: `(r, q)` with `x = q·π/2 + r`,
/// `|r| ≤ π/4`, in `f64`.
///
/// `q = round(x·2/π)`; `r = x − q·P1 − q·P2 − q·P3` where `P1`, `P2` hold 26
/// bits of π/2 each and `P3` the next 53. For `|x| ≤ 2^27` (so `q < 2^27`)
/// the products `q·P1`, `q·P2` and the first two differences are exact, and
/// `r` is within 2^-53 relative (plus 2^-78 absolute) of the true remainder.
/// Beyond, the products round and the phase error grows as `|x|·2^-52`.
#[inline(always)]
fn reduce_half_pi(x: f32) -> (f64, i64) {
    const TWO_OVER_PI: f64 = core::f64::consts::FRAC_2_PI;
    const P1: f64 = 1.570_796_310_901_641_8;
    const P2: f64 = 1.589_325_471_229_585_7e-8;
    const P3: f64 = 6.123_233_995_736_766e-17;
    // 1.5·2^52: adding and subtracting it rounds to an integer (ties to
    // even) for |v| < 2^51.
    const MAGIC: f64 = 6_755_399_441_055_744.0;
    let x = x as f64;
    let q = (x * TWO_OVER_PI + MAGIC) - MAGIC;
    let r = x - q * P1;
    let r = r - q * P2;
    let r = r - q * P3;
    (r, q as i64)
}

/// `sin r` for `|r| ≤ π/4 + ε`: Taylor terms to `r^13` (truncation
/// ≤ 2e-13 relative), in `f64`.
#[inline(always)]
fn sin_poly(r: f64) -> f64 {
    let z = r * r;
    let p = -1.0 / 6_227_020_800.0;
    let p = p * z + 1.0 / 39_916_800.0;
    let p = p * z - 1.0 / 362_880.0;
    let p = p * z + 1.0 / 5_040.0;
    let p = p * z - 1.0 / 120.0;
    let p = p * z + 1.0 / 6.0;
    // r·(1 − z·p) rather than r − r·z·p keeps the sign of r = −0.
    r * (1.0 - z * p)
}

/// `cos r` for `|r| ≤ π/4 + ε`: Taylor terms to `r^14` (truncation
/// ≤ 1e-14), in `f64`.
#[inline(always)]
fn cos_poly(r: f64) -> f64 {
    let z = r * r;
    let p = -1.0 / 87_178_291_200.0;
    let p = p * z + 1.0 / 479_001_600.0;
    let p = p * z - 1.0 / 3_628_800.0;
    let p = p * z + 1.0 / 40_320.0;
    let p = p * z - 1.0 / 720.0;
    let p = p * z + 1.0 / 24.0;
    let p = p * z - 0.5;
    1.0 + z * p
}

/// `sin(q·π/2 + r)` (`odd` selects cosine: `cos x = sin(x + π/2)`).
#[inline(always)]
fn sin_quadrant(x: f32, odd: i64) -> f32 {
    // The range where the reduction is valid (see `reduce_half_pi`).
    const LIMIT: f32 = 1_125_899_906_842_624.0; // 2^50
    let (r, q) = reduce_half_pi(x);
    // `q` saturates for huge `x`, whose result is NaN below: wrap.
    let q = q.wrapping_add(odd);
    let (s, c) = (sin_poly(r), cos_poly(r));
    let v = if q & 1 == 0 { s } else { c };
    let v = if q & 2 == 0 { v } else { -v };
    let v = v as f32;
    sel(abs(x) < LIMIT, v, f32::NAN)
}

/// Sine.
///
/// Reduction by π/2 in `f64` (exact for `|x| ≤ 2^27`, see
/// `reduce_half_pi`), Taylor polynomials of `sin` and `cos` in `f64` on
/// `|r| ≤ π/4`, and one rounding to `f32`: plain `f64` multiplies and adds,
/// so the bits are the same on every target.
///
/// **Error:** ≤ 1 ulp for `|x| ≤ 2^27` (measured 0.5 ulp: the result is
/// the correctly rounded value but for ties within 1e-13); for
/// `2^27 < |x| < 2^50`, absolute error ≤ `|x|·2^-50` (the phase is reduced
/// in `f64`; such inputs are spaced 16 or more apart).
/// **Special values:** NaN → NaN; ±inf → NaN; `|x| ≥ 2^50` → NaN (no
/// phase information left); ±0 → ±0.
#[inline(always)]
pub fn sin(x: f32) -> f32 {
    sin_quadrant(x, 0)
}

/// Cosine: `sin(x + π/2)` by the same reduction and polynomials as
/// [`sin`], with the quadrant moved by one.
///
/// **Error:** as [`sin`]: ≤ 1 ulp for `|x| ≤ 2^27` (measured 0.5 ulp);
/// absolute error ≤ `|x|·2^-50` for `2^27 < |x| < 2^50`.
/// **Special values:** NaN → NaN; ±inf → NaN; `|x| ≥ 2^50` → NaN;
/// cos(±0) = 1.
#[inline(always)]
pub fn cos(x: f32) -> f32 {
    sin_quadrant(x, 1)
}

// ---- pow ---------------------------------------------------------------------------

#[inline(always)]
fn self_f64(c: bool, a: f64, b: f64) -> f64 {
    if c {
        a
    } else {
        b
    }
}

/// `ln(a)` for positive normal `f64` `a` (every `|x|` of an `f32` is one),
/// relative error ≈ 1e-15.
#[inline(always)]
fn ln_f64(a: f64) -> f64 {
    const LN2: f64 = core::f64::consts::LN_2;
    const SQRT2: f64 = core::f64::consts::SQRT_2;
    // 2^52 + 2^51: adding it to a small integer-valued f64 gives its bits.
    const MAGIC: f64 = 6_755_399_441_055_744.0;
    let bits = a.to_bits();
    let e_bits = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000); // [1, 2)
    let hi = m > SQRT2;
    let m = self_f64(hi, m * 0.5, m);
    let e_int = e_bits + hi as i64;
    let e = f64::from_bits((e_int + MAGIC.to_bits() as i64) as u64) - MAGIC;
    // ln(m) = 2·atanh(s), s = (m−1)/(m+1), |s| ≤ 0.1716.
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut p = 1.0 / 15.0;
    p = p * s2 + 1.0 / 13.0;
    p = p * s2 + 1.0 / 11.0;
    p = p * s2 + 1.0 / 9.0;
    p = p * s2 + 1.0 / 7.0;
    p = p * s2 + 1.0 / 5.0;
    p = p * s2 + 1.0 / 3.0;
    let lnm = 2.0 * s + 2.0 * s * s2 * p;
    e * LN2 + lnm
}

/// `e^w` in `f64` for `w` in about −750..=700 (callers clamp), relative
/// error ≈ 1e-14.
#[inline(always)]
fn exp_f64(w: f64) -> f64 {
    const INV_LN2: f64 = core::f64::consts::LOG2_E;
    const LN2_HI: f64 = 6.931_471_803_691_238_164_9e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    const MAGIC: f64 = 6_755_399_441_055_744.0;
    let t = w * INV_LN2 + MAGIC;
    let n = t.to_bits() as i64 - MAGIC.to_bits() as i64;
    let nf = t - MAGIC;
    let r = w - nf * LN2_HI - nf * LN2_LO; // |r| ≤ 0.35
    let mut p = 1.0 / 479_001_600.0; // 1/12!
    p = p * r + 1.0 / 39_916_800.0;
    p = p * r + 1.0 / 3_628_800.0;
    p = p * r + 1.0 / 362_880.0;
    p = p * r + 1.0 / 40_320.0;
    p = p * r + 1.0 / 5_040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    p * f64::from_bits(((n + 1023) as u64) << 52)
}

/// `x^y`, computed as `e^{y·ln|x|}` in `f64` internally and rounded once to
/// `f32`, with the sign and special cases of C99/IEEE `pow`.
///
/// **Error:** ≤ 1 ulp for every finite, nonzero, non-subnormal result
/// (measured max: see the tests; internally ≈ 1e-13 relative before the
/// final rounding); subnormal results are rounded once from that value.
///
/// **Special values** (all branch-free selects):
/// - `pow(x, ±0) = 1` for every `x`, even NaN; `pow(1, y) = 1` for every
///   `y`, even NaN; `pow(−1, ±inf) = 1`;
/// - `x < 0` finite and `y` finite non-integer → NaN;
/// - negative `x` (incl. −0 and −inf) with odd-integer `y` gives the sign
///   of `x`: `pow(−0, 3) = −0`, `pow(−0, −3) = −inf`, `pow(−inf, 3) = −inf`,
///   `pow(−inf, −3) = −0`, `pow(−2, 3) = −8`; even or non-odd `y` gives a
///   positive result (`pow(−0, 0.5) = +0`, `pow(−inf, 0.5) = +inf`);
/// - `pow(±0, y<0) = +inf` (±inf for odd `y`), `pow(±0, y>0) = +0` (±0 odd);
/// - `|x| < 1`: `y = +inf → +0`, `y = −inf → +inf`; `|x| > 1`: the reverse;
/// - `pow(+inf, y) = +inf` for `y > 0`, `+0` for `y < 0`;
/// - overflow → ±inf, underflow → ±0; any other NaN operand → NaN.
#[inline(always)]
pub fn pow(x: f32, y: f32) -> f32 {
    const TWO24: f32 = 16_777_216.0;
    let ax = abs(x);
    let ay = abs(y);
    // Integer classification of y: every |y| ≥ 2^24 (and ±inf) is an even integer.
    let yi = y as i32;
    let big = ay >= TWO24;
    let is_int = big || yi as f32 == y;
    let is_odd = !big && is_int && (yi & 1) != 0;
    // ln|x| with exact ±inf for |x| = 0 and |x| = inf.
    let a = ax as f64;
    let l = ln_f64(a);
    let l = self_f64(ax == 0.0, f64::NEG_INFINITY, l);
    let l = self_f64(ax == f32::INFINITY, f64::INFINITY, l);
    let w = y as f64 * l;
    // Clamp (NaN-preserving) to where f32 results are 0 or inf anyway.
    let w = self_f64(w > 100.0, 100.0, w);
    let w = self_f64(w < -120.0, -120.0, w);
    let mag = exp_f64(w) as f32;
    let mag = sel(x.is_nan() || y.is_nan() || w.is_nan(), f32::NAN, mag);
    // Sign: negative x (sign bit, so −0 and −inf too) with odd-integer y.
    let neg = x.to_bits() >> 31 != 0 && is_odd;
    let r = sel(neg, -mag, mag);
    // Negative finite base with a finite non-integer exponent.
    let r = sel(
        x < 0.0 && ax != f32::INFINITY && !is_int && ay != f32::INFINITY,
        f32::NAN,
        r,
    );
    // pow(−1, ±inf) = 1 (the generic path gives inf·0 = NaN).
    let r = sel(ax == 1.0 && ay == f32::INFINITY, 1.0, r);
    sel(y == 0.0 || x == 1.0, 1.0, r)
}

// ---- f16 / bf16 conversions ---------------------------------------------------------

/// `f16` bits → `f32`, exact (NaNs quietened with their payload, as `half`).
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    const MAGIC: f32 = 6.103_515_6e-5; // 2^-14 = f32::from_bits(113 << 23)
    let h = h as u32;
    let em = (h & 0x7fff) << 13; // exponent and mantissa, aligned
    let exp = em & (0x7c00 << 13);
    let normal = f32::from_bits(em + ((127 - 15) << 23));
    // Subnormal or zero: treat the bits as 2^-14·(1 + m) and subtract 2^-14.
    let sub = f32::from_bits(em + (113 << 23)) - MAGIC;
    let special = f32::from_bits(
        em | 0x7f80_0000
            | if em & 0x007f_ffff != 0 {
                0x0040_0000
            } else {
                0
            },
    );
    let mag = sel(exp == 0, sub, sel(exp == 0x7c00 << 13, special, normal));
    f32::from_bits(mag.to_bits() | ((h & 0x8000) << 16))
}

/// `f32` → `f16` bits, round to nearest even; overflow → ±inf; NaN → quiet
/// NaN with the top mantissa bits kept (as `half`).
#[inline(always)]
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = (bits >> 16) & 0x8000;
    let a = bits & 0x7fff_ffff;
    // Normal results: rebias, round to nearest even on bit 13.
    let odd = (a >> 13) & 1;
    let normal = a
        .wrapping_add((15u32.wrapping_sub(127) << 23).wrapping_add(0xfff))
        .wrapping_add(odd)
        >> 13;
    // Subnormal results (a < 2^-14): the FPU rounds when adding 0.5 (2^-1):
    // the f16 subnormal mantissa lands in the low bits.
    let denorm_magic = f32::from_bits(((127 - 15) + (23 - 10) + 1) << 23);
    let sub = (f32::from_bits(a) + denorm_magic).to_bits() - denorm_magic.to_bits();
    let nan = 0x7e00 | ((a >> 13) & 0x3ff);
    let r = if a >= (127 + 16) << 23 {
        0x7c00
    } else if a < 113 << 23 {
        sub
    } else {
        normal
    };
    let r = if a > 0x7f80_0000 { nan } else { r };
    (r | sign) as u16
}

/// `bf16` bits → `f32`, exact (NaNs quietened, as `half`).
#[inline(always)]
pub fn bf16_to_f32(h: u16) -> f32 {
    let b = (h as u32) << 16;
    f32::from_bits(if b & 0x7fff_ffff > 0x7f80_0000 {
        b | 0x0040_0000
    } else {
        b
    })
}

/// `f32` → `bf16` bits, round to nearest even; NaN → quiet NaN with the top
/// mantissa bits kept (as `half`).
#[inline(always)]
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    let rounded = (b.wrapping_add(0x7fff + ((b >> 16) & 1))) >> 16;
    let nan = (b >> 16) | 0x0040;
    (if b & 0x7fff_ffff > 0x7f80_0000 {
        nan
    } else {
        rounded
    }) as u16
}

/// `i32` → `bf16` bits, correctly rounded (nearest even). Not on a hot path:
/// `x as f32` would round twice.
#[inline]
pub fn i32_to_bf16(x: i32) -> u16 {
    let f = x as f32; // nearest even, may be inexact
    let back = f as i64; // exact: |f| ≤ 2^31
    let xi = x as i64;
    if back == xi {
        return f32_to_bf16(f);
    }
    // Round to odd: the f32 value truncated toward zero, lowest bit set;
    // rounding that to 8 bits is then the correct rounding of x.
    let trunc = if back.abs() > xi.abs() {
        f32::from_bits(f.to_bits().wrapping_sub(1))
    } else {
        f
    };
    f32_to_bf16(f32::from_bits(trunc.to_bits() | 1))
}

#[cfg(test)]
mod tests;
