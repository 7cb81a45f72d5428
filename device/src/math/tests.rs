//! Sweeps of every math function against an `f64` reference.

extern crate std;

use super::*;
use std::println;

/// Every `STRIDE`-th f32 bit pattern (both signs, every exponent).
const STRIDE: usize = 101;

fn sweep() -> impl Iterator<Item = f32> {
    (0..=u32::MAX)
        .step_by(STRIDE)
        .map(f32::from_bits)
        .chain(specials())
}

fn specials() -> impl Iterator<Item = f32> {
    [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x8000_0001),
        f32::EPSILON,
        88.72283,
        88.72284,
        -87.33655,
        -103.97208,
        -103.97209,
        0.625,
        -0.625,
        1.5,
        3.92,
        -3.92,
        9.1,
    ]
    .into_iter()
}

/// Error of `got` in ulps of the f32 nearest to `want` (0 when both are the
/// same NaN/inf/zero class; `f64::INFINITY` when classes differ).
fn ulp_err(got: f32, want: f64) -> f64 {
    if want.is_nan() {
        return if got.is_nan() { 0.0 } else { f64::INFINITY };
    }
    let w32 = want as f32;
    if w32.is_infinite() || got.is_infinite() || got.is_nan() {
        return if got == w32 { 0.0 } else { f64::INFINITY };
    }
    let a = w32.abs();
    let ulp = if a < f32::MIN_POSITIVE {
        2f64.powi(-149)
    } else {
        let e = ((a.to_bits() >> 23) as i32) - 127;
        2f64.powi(e - 23)
    };
    (got as f64 - want).abs() / ulp
}

fn abs_err(got: f32, want: f64) -> f64 {
    if want.is_nan() {
        return if got.is_nan() { 0.0 } else { f64::INFINITY };
    }
    if want.is_infinite() {
        return if got as f64 == want {
            0.0
        } else {
            f64::INFINITY
        };
    }
    (got as f64 - want).abs()
}

/// Max ulp error of `f` against `r` over the sweep, restricted to inputs
/// where `keep(x)` holds; prints the worst case.
fn max_ulp(
    name: &str,
    f: impl Fn(f32) -> f32,
    r: impl Fn(f64) -> f64,
    keep: impl Fn(f32) -> bool,
) -> f64 {
    let mut worst = (0.0f64, 0.0f32);
    for x in sweep().filter(|x| keep(*x)) {
        let e = ulp_err(f(x), r(x as f64));
        if e > worst.0 || e.is_nan() {
            worst = (e, x);
        }
    }
    println!(
        "{name}: max {:.3} ulp at x = {:e} ({:#010x})",
        worst.0,
        worst.1,
        worst.1.to_bits()
    );
    worst.0
}

/// Max ulp error where the reference is a normal number (or 0/inf/NaN) and
/// `keep(x)`, and max absolute error where it is subnormal.
fn split_err(
    name: &str,
    f: impl Fn(f32) -> f32,
    r: impl Fn(f64) -> f64,
    keep: impl Fn(f32) -> bool,
) -> (f64, f64) {
    let (mut wu, mut wa) = ((0.0f64, 0.0f32), (0.0f64, 0.0f32));
    for x in sweep().filter(|x| keep(*x)) {
        let (got, want) = (f(x), r(x as f64));
        if want != 0.0 && want.abs() < f32::MIN_POSITIVE as f64 {
            let e = abs_err(got, want);
            if e > wa.0 || e.is_nan() {
                wa = (e, x);
            }
        } else {
            let e = ulp_err(got, want);
            if e > wu.0 || e.is_nan() {
                wu = (e, x);
            }
        }
    }
    println!(
        "{name}: max {:.3} ulp at x = {:e}; subnormal results: max abs {:e} at x = {:e}",
        wu.0, wu.1, wa.0, wa.1
    );
    (wu.0, wa.0)
}

fn any(_: f32) -> bool {
    true
}

fn check_specials(f: impl Fn(f32) -> f32, cases: &[(f32, f32)]) {
    for &(x, want) in cases {
        let got = f(x);
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "f({x:e}) = {got:e}, want {want:e}"
        );
    }
}

fn sigmoid64(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

#[test]
fn exp_bound() {
    let normal = max_ulp("exp", exp, f64::exp, |x| x.is_nan() || x > -87.33);
    assert!(normal <= 1.0, "{normal}");
    // Subnormal results: absolute error below one subnormal step.
    for x in sweep().filter(|x| (-110.0..=-87.3).contains(x)) {
        let e = abs_err(exp(x), (x as f64).exp());
        assert!(e <= 2f64.powi(-149), "exp({x:e}): {e:e}");
    }
    check_specials(
        exp,
        &[
            (f32::NAN, f32::NAN),
            (f32::INFINITY, f32::INFINITY),
            (f32::NEG_INFINITY, 0.0),
            (0.0, 1.0),
            (-0.0, 1.0),
            (88.8, f32::INFINITY),
            (-104.0, 0.0),
            (f32::MAX, f32::INFINITY),
            (f32::MIN, 0.0),
        ],
    );
}

/// `exp_map` gives `exp`'s bits block by block: over the sweep in its
/// order (blocks of every mix of fast, subnormal, overflowing and NaN
/// results), over blocks that are all in the fast range but for one
/// element at each position, and with a function before it.
#[test]
fn exp_map_is_exp() {
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    let xs: std::vec::Vec<f32> = sweep().collect();
    let mut got = std::vec![0f32; xs.len()];
    exp_map(&mut got, &xs, |x| x);
    for (&x, &g) in xs.iter().zip(&got) {
        assert!(
            same(g, exp(x)),
            "exp_map({x:e}) = {g:e}, exp = {:e}",
            exp(x)
        );
    }
    // A sweep of the range that takes the integer scaling, sorted so that
    // whole blocks do, with one outsider moved through a block.
    let fast: std::vec::Vec<f32> = (0..EXP_BLOCK * 40)
        .map(|i| -86.5 + 174.5 * i as f32 / (EXP_BLOCK * 40) as f32)
        .collect();
    let outsiders = [
        f32::NAN,
        -f32::NAN,
        -87.5,
        -100.0,
        -103.99,
        -104.5,
        88.5,
        88.8,
        89.5,
        f32::NEG_INFINITY,
        f32::INFINITY,
        -1e30,
        1e30,
        -1e6,
    ];
    for outsider in outsiders {
        for at in [
            0,
            1,
            EXP_BLOCK / 2,
            EXP_BLOCK - 1,
            EXP_BLOCK,
            3 * EXP_BLOCK + 5,
        ] {
            let mut x = fast.clone();
            x[at] = outsider;
            let n = x.len() - at % 7; // a tail block too
            let mut got = std::vec![0f32; n];
            exp_map(&mut got, &x[..n], |v| v * 1.0);
            for (&x, &g) in x.iter().zip(&got) {
                assert!(same(g, exp(x)), "exp_map({x:e}) = {g:e}");
            }
        }
    }
    // Blocks of nothing but one outsider (a masked row), and of every
    // outsider in turn.
    for outsider in outsiders {
        let x = std::vec![outsider; 2 * EXP_BLOCK + 3];
        let mut got = std::vec![0f32; x.len()];
        exp_map(&mut got, &x, |v| v);
        assert!(got.iter().all(|&g| same(g, exp(outsider))), "{outsider:e}");
    }
    let x: std::vec::Vec<f32> = (0..4 * EXP_BLOCK)
        .map(|i| outsiders[i % outsiders.len()])
        .collect();
    let mut got = std::vec![0f32; x.len()];
    exp_map(&mut got, &x, |v| v);
    for (&x, &g) in x.iter().zip(&got) {
        assert!(same(g, exp(x)), "exp_map({x:e}) = {g:e}");
    }
    // With a function before it: `exp(x − 3)`.
    let mut got = std::vec![0f32; fast.len()];
    exp_map(&mut got, &fast, |x| x - 3.0);
    for (&x, &g) in fast.iter().zip(&got) {
        assert!(same(g, exp(x - 3.0)), "exp({x:e} − 3) = {g:e}");
    }
}

#[test]
fn log_bound() {
    let m = max_ulp("log", log, f64::ln, |x| x > 0.0 && x.is_finite());
    assert!(m <= 1.0, "{m}");
    check_specials(
        log,
        &[
            (f32::NAN, f32::NAN),
            (-1.0, f32::NAN),
            (f32::NEG_INFINITY, f32::NAN),
            (-f32::from_bits(1), f32::NAN),
            (0.0, f32::NEG_INFINITY),
            (-0.0, f32::NEG_INFINITY),
            (f32::INFINITY, f32::INFINITY),
            (1.0, 0.0),
        ],
    );
}

#[test]
fn tanh_bound() {
    let m = max_ulp("tanh", tanh, f64::tanh, any);
    assert!(m <= 2.0, "{m}");
    check_specials(
        tanh,
        &[
            (f32::NAN, f32::NAN),
            (f32::INFINITY, 1.0),
            (f32::NEG_INFINITY, -1.0),
            (0.0, 0.0),
            (-0.0, -0.0),
            (10.0, 1.0),
            (-10.0, -1.0),
        ],
    );
}

#[test]
fn sigmoid_bound() {
    let (u, a) = split_err("sigmoid", sigmoid, sigmoid64, any);
    assert!(u <= 4.0 && a <= 2f64.powi(-148), "{u} {a:e}");
    check_specials(
        sigmoid,
        &[
            (f32::NAN, f32::NAN),
            (f32::INFINITY, 1.0),
            (f32::NEG_INFINITY, 0.0),
            (0.0, 0.5),
            (-0.0, 0.5),
        ],
    );
}

#[test]
fn silu_bound() {
    let r = |x: f64| {
        if x == f64::NEG_INFINITY {
            -0.0
        } else {
            x * sigmoid64(x)
        }
    };
    let (u, a) = split_err("silu", silu, r, any);
    assert!(u <= 4.0 && a <= 2f64.powi(-148), "{u} {a:e}");
    check_specials(
        silu,
        &[
            (f32::NAN, f32::NAN),
            (f32::INFINITY, f32::INFINITY),
            (f32::NEG_INFINITY, -0.0),
            (0.0, 0.0),
            (-0.0, -0.0),
        ],
    );
}

fn gelu_tanh64(x: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    if x == f64::NEG_INFINITY {
        return -0.0;
    }
    x * sigmoid64(2.0 * k * (x + 0.044715 * x * x * x))
}

#[test]
fn gelu_tanh_bound() {
    // The argument v = 2√(2/π)(x + 0.044715x³) carries ~2.5 ulp of relative
    // rounding, so the result's relative error grows with |v|.
    let (mut worst, mut at) = (0.0f64, 0.0f32);
    for x in sweep() {
        let want = gelu_tanh64(x as f64);
        let xd = x as f64;
        let v = (1.5957691216057308 * xd * (1.0 + 0.044715 * xd * xd)).abs();
        if want != 0.0 && want.abs() < f32::MIN_POSITIVE as f64 {
            assert!(
                abs_err(gelu_tanh(x), want) <= 2f64.powi(-142),
                "gelu_tanh({x:e})"
            );
        } else {
            let e = ulp_err(gelu_tanh(x), want) - 3.0 * if v.is_finite() { v } else { 0.0 };
            if e > worst {
                (worst, at) = (e, x);
            }
        }
    }
    println!("gelu_tanh: max (err - 3|v|) = {worst:.3} ulp at {at:e}");
    assert!(worst <= 4.0, "{worst}");
    check_specials(
        gelu_tanh,
        &[
            (f32::NAN, f32::NAN),
            (f32::INFINITY, f32::INFINITY),
            (f32::NEG_INFINITY, -0.0),
            (0.0, 0.0),
            (-20.0, -0.0),
            (1e30, 1e30),
        ],
    );
}

#[test]
fn erf_bound() {
    let small = max_ulp("erf", erf, libm::erf, |x| x.is_nan() || x.abs() >= 1e-37);
    assert!(small <= 2.0, "{small}");
    let mut worst = 0.0f64;
    for x in sweep() {
        worst = worst.max(abs_err(erf(x), libm::erf(x as f64)));
    }
    println!("erf: max abs err {worst:e}");
    assert!(worst <= 1.2e-7, "{worst:e}");
    check_specials(
        erf,
        &[
            (f32::NAN, f32::NAN),
            (f32::INFINITY, 1.0),
            (f32::NEG_INFINITY, -1.0),
            (0.0, 0.0),
            (-0.0, -0.0),
            (4.0, 1.0),
        ],
    );
}

fn gelu_erf64(x: f64) -> f64 {
    0.5 * x * libm::erfc(-x / std::f64::consts::SQRT_2)
}

#[test]
fn gelu_erf_bound() {
    let m = max_ulp("gelu_erf x>=-0.5", gelu_erf, gelu_erf64, |x| {
        x.is_nan() || (x >= -0.5 && x.abs() > 1e-37)
    });
    assert!(m <= 4.0, "{m}");
    let mut worst = 0.0f64;
    for x in sweep() {
        let e = abs_err(gelu_erf(x), gelu_erf64(x as f64)) / (x.abs() as f64).max(1.0);
        worst = worst.max(e);
    }
    println!("gelu_erf: max abs err / max(1,|x|) {worst:e}");
    assert!(worst <= 1.5e-7, "{worst:e}");
    check_specials(
        gelu_erf,
        &[
            (f32::NAN, f32::NAN),
            (f32::INFINITY, f32::INFINITY),
            (f32::NEG_INFINITY, -0.0),
            (0.0, 0.0),
            (-20.0, -0.0),
        ],
    );
}

#[test]
fn sqrt_rsqrt_recip() {
    let m = max_ulp("sqrt", sqrt, f64::sqrt, any);
    assert!(m <= 0.5, "{m}");
    let m = max_ulp("rsqrt", rsqrt, |x| 1.0 / x.sqrt(), any);
    assert!(m <= 1.5, "{m}");
    let m = max_ulp("recip", recip, |x| 1.0 / x, any);
    assert!(m <= 0.5, "{m}");
    check_specials(
        rsqrt,
        &[
            (0.0, f32::INFINITY),
            (-0.0, f32::NEG_INFINITY),
            (f32::INFINITY, 0.0),
            (-1.0, f32::NAN),
        ],
    );
    // The SIMD slice path agrees with the scalar one bit for bit.
    let xs: std::vec::Vec<f32> = sweep().step_by(97).collect();
    let mut out = std::vec![0.0f32; xs.len()];
    sqrt_slice(&mut out, &xs);
    for (o, x) in out.iter().zip(&xs) {
        assert!(o.to_bits() == sqrt(*x).to_bits() || (o.is_nan() && x.is_nan() || *x < 0.0));
    }
    let mut ys = xs.clone();
    sqrt_slice_inplace_with(&mut ys, |r| 1.0 / r);
    for (y, x) in ys.iter().zip(&xs) {
        assert!(y.to_bits() == rsqrt(*x).to_bits() || y.is_nan());
    }
}

fn same(a: f32, b: f64) -> bool {
    let b = b as f32;
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn rounding_exact() {
    for x in sweep().chain([
        0.5,
        1.5,
        2.5,
        -0.5,
        -1.5,
        -2.5,
        0.49999997,
        -0.49999997,
        8388607.5,
        -8388607.5,
        8388608.0,
        4194303.5,
    ]) {
        let d = x as f64;
        assert!(
            same(round(x), d.round_ties_even()),
            "round({x:e}) = {:e}",
            round(x)
        );
        assert!(same(floor(x), d.floor()), "floor({x:e}) = {:e}", floor(x));
        assert!(same(ceil(x), d.ceil()), "ceil({x:e}) = {:e}", ceil(x));
        assert_eq!(is_finite(x), x.is_finite());
    }
}

#[test]
fn pow_bound() {
    let mut worst = (0.0f64, 0.0f32, 0.0f32);
    let mut s = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let specials: std::vec::Vec<f32> = specials()
        .chain([
            2.0, -2.0, 3.0, -3.0, 0.25, 1e-3, 1e10, -1e10, 16777216.0, 16777217.0, 2.5, -2.5, 1e-45,
        ])
        .collect();
    let mut cases: std::vec::Vec<(f32, f32)> = std::vec::Vec::new();
    for &x in &specials {
        for &y in &specials {
            cases.push((x, y));
        }
    }
    for _ in 0..3_000_000 {
        let r = next();
        // Random base; exponents biased to produce in-range results.
        let x = f32::from_bits(r as u32);
        let y = match r >> 62 {
            0 => f32::from_bits((r >> 32) as u32),
            1 => ((r >> 32) as u32 % 64) as f32 - 32.0,
            _ => {
                let u = ((r >> 40) as u32) as f32 / 16_777_216.0 - 0.5;
                let lx = (x.abs() as f64).ln().abs().max(1e-3);
                (u as f64 * 180.0 / lx) as f32
            }
        };
        cases.push((x, y));
    }
    for (x, y) in cases {
        let got = pow(x, y);
        let want = (x as f64).powf(y as f64);
        // std's powf follows the same C99 special cases.
        let e = if want.abs() < f32::MIN_POSITIVE as f64 && want != 0.0 {
            // Subnormal results: one rounding of the internal value.
            (got as f64 - want).abs() / 2f64.powi(-149)
        } else {
            ulp_err(got, want)
        };
        if e > worst.0 {
            worst = (e, x, y);
        }
        if want.is_nan() || want == 0.0 || want.is_infinite() {
            assert!(
                same(got, want),
                "pow({x:e}, {y:e}) = {got:e}, want {want:e}"
            );
        }
    }
    println!(
        "pow: max {:.3} ulp at ({:e}, {:e})",
        worst.0, worst.1, worst.2
    );
    assert!(worst.0 <= 1.0, "{worst:?}");
    // The documented special cases.
    let n = f32::NAN;
    let inf = f32::INFINITY;
    for (x, y, want) in [
        (n, 0.0, 1.0),
        (n, -0.0, 1.0),
        (1.0, n, 1.0),
        (-1.0, inf, 1.0),
        (-1.0, -inf, 1.0),
        (-2.0, 0.5, n),
        (-0.0, 3.0, -0.0),
        (-0.0, -3.0, -inf),
        (-0.0, 0.5, 0.0),
        (0.0, -1.0, inf),
        (-0.0, -2.0, inf),
        (-inf, 3.0, -inf),
        (-inf, -3.0, -0.0),
        (-inf, 0.5, inf),
        (-inf, -0.5, 0.0),
        (0.5, inf, 0.0),
        (0.5, -inf, inf),
        (2.0, inf, inf),
        (2.0, -inf, 0.0),
        (inf, 2.0, inf),
        (inf, -2.0, 0.0),
        (-2.0, 3.0, -8.0),
        (-2.0, 2.0, 4.0),
        (n, 1.0, n),
        (2.0, n, n),
        (2.0, 200.0, inf),
        (-2.0, 201.0, -inf),
        (2.0, -200.0, 0.0),
        (-2.0, -201.0, -0.0),
    ] {
        let got = pow(x, y);
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "pow({x:e}, {y:e}) = {got:e}, want {want:e}"
        );
    }
}

#[test]
fn f16_exhaustive() {
    for h in 0..=u16::MAX {
        let want = half::f16::from_bits(h).to_f32();
        let got = f16_to_f32(h);
        assert_eq!(got.to_bits(), want.to_bits(), "f16 {h:#06x}");
        let back = f32_to_f16(got);
        assert_eq!(
            back,
            half::f16::from_f32(got).to_bits(),
            "f16 {h:#06x} round trip"
        );
    }
    let lows = [
        0u32, 1, 0x7ff, 0x800, 0x801, 0xfff, 0x1000, 0x1001, 0x17ff, 0x1800, 0x1fff, 0x0555, 0x1aaa,
    ];
    for hi in 0..(1u32 << 19) {
        for &lo in &lows {
            let x = f32::from_bits((hi << 13) | lo);
            let want = half::f16::from_f32(x).to_bits();
            assert_eq!(f32_to_f16(x), want, "f32 {:#010x}", x.to_bits());
        }
    }
}

#[test]
fn bf16_conversions() {
    let lows = [
        0u32, 1, 0x3fff, 0x7fff, 0x8000, 0x8001, 0xbfff, 0xffff, 0x5555,
    ];
    for hi in 0..=0xffffu32 {
        let h = hi as u16;
        assert_eq!(
            bf16_to_f32(h).to_bits(),
            half::bf16::from_bits(h).to_f32().to_bits()
        );
        for &lo in &lows {
            let x = f32::from_bits((hi << 16) | lo);
            assert_eq!(
                f32_to_bf16(x),
                half::bf16::from_f32(x).to_bits(),
                "f32 {:#010x}",
                x.to_bits()
            );
        }
    }
    // i32 → bf16: exact integer rounding to 8 significant bits, ties to even.
    let reference = |x: i32| -> u16 {
        let m = (x as i64).unsigned_abs();
        let k = 64 - m.leading_zeros();
        let r = if k <= 8 {
            m
        } else {
            let sh = k - 8;
            let q = m >> sh;
            let rem = m & ((1 << sh) - 1);
            let half = 1 << (sh - 1);
            let q = if rem > half || (rem == half && q & 1 == 1) {
                q + 1
            } else {
                q
            };
            q << sh
        };
        let v = if x < 0 { -(r as f64) } else { r as f64 };
        half::bf16::from_f32(v as f32).to_bits()
    };
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut xs = std::vec![
        0,
        1,
        -1,
        255,
        256,
        257,
        383,
        384,
        385,
        i32::MAX,
        i32::MIN,
        16_842_753,
        16_908_289,
        -16_908_289
    ];
    for _ in 0..2_000_000 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let sh = (s >> 59) as u32;
        xs.push((s as i32) >> sh);
    }
    for x in xs {
        assert_eq!(i32_to_bf16(x), reference(x), "i32 {x}");
    }
}

/// The `f64` fallback fused multiply-add rounds exactly as the hardware
/// one (`f32::mul_add`): on products and sums built to round near ties, to
/// cancel, to overflow and to land in the subnormal range, and on random
/// bit patterns (every exponent, NaN and infinities included).
#[test]
fn fma_soft_is_fused() {
    let same = |a: f32, b: f32, c: f32| {
        let (got, want) = (fma_soft(a, b, c), a.mul_add(b, c));
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "fma({a:e}, {b:e}, {c:e}) = {got:e}, want {want:e}"
        );
    };
    let ulp = f32::EPSILON;
    let edge = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        1.0 + ulp,
        1.0 - ulp / 2.0,
        1.5,
        f32::MIN_POSITIVE,
        1e-45,
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        3.0,
        1.0 / 3.0,
    ];
    for &a in &edge {
        for &b in &edge {
            for &c in &edge {
                same(a, b, c);
                same(a, b, -c);
            }
        }
    }
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for _ in 0..2_000_000 {
        let r = next();
        let (a, b) = (f32::from_bits(r as u32), f32::from_bits((r >> 32) as u32));
        // `c` near `−a·b` (cancellation), near the product's rounding
        // boundary (ties), or unrelated.
        let p = a * b;
        let c = match next() % 4 {
            0 => -p,
            1 => f32::from_bits(p.to_bits() ^ (next() as u32 & 0xff)),
            2 => p * f32::from_bits(0x3300_0000 + (next() as u32 & 0x00ff_ffff)),
            _ => f32::from_bits(next() as u32),
        };
        same(a, b, c);
        // Small magnitudes, where the results are subnormal.
        let sa = f32::from_bits((a.to_bits() & 0x807f_ffff) | 0x1000_0000);
        let sb = f32::from_bits((b.to_bits() & 0x807f_ffff) | 0x1000_0000);
        same(sa, sb, f32::from_bits(next() as u32 & 0x80ff_ffff));
    }
}

/// Sine and cosine: ≤ 1 ulp for |x| ≤ 2^27, absolute ≤ |x|·2^-50 up to
/// 2^50, NaN beyond.
fn trig_bound(name: &str, f: fn(f32) -> f32, r: fn(f64) -> f64) {
    const EXACT: f32 = 134_217_728.0; // 2^27
    const LIMIT: f32 = 1_125_899_906_842_624.0; // 2^50
    let m = max_ulp(name, f, r, |x| x.abs() <= EXACT);
    assert!(m <= 1.0, "{name}: {m} ulp");
    let mut worst = 0.0f64;
    for x in sweep().filter(|x| x.abs() > EXACT && x.abs() < LIMIT) {
        let e = abs_err(f(x), r(x as f64)) / (x.abs() as f64 * 2f64.powi(-50));
        worst = worst.max(e);
    }
    println!("{name}: large |x|: max error {worst:.3} · |x|·2^-50");
    assert!(worst <= 1.0, "{name}: large |x| error {worst} · |x|·2^-50");
    for x in sweep().filter(|x| x.abs() >= LIMIT || !x.is_finite()) {
        assert!(f(x).is_nan(), "{name}({x:e}) = {}", f(x));
    }
}

#[test]
fn sin_bound() {
    trig_bound("sin", sin, f64::sin);
    check_specials(sin, &[(0.0, 0.0), (-0.0, -0.0), (f32::INFINITY, f32::NAN)]);
    assert!(sin(-0.0).is_sign_negative());
}

#[test]
fn cos_bound() {
    trig_bound("cos", cos, f64::cos);
    check_specials(cos, &[(0.0, 1.0), (-0.0, 1.0), (f32::NAN, f32::NAN)]);
}
