//! Run-time choice of the host CPU's vector extensions for the handlers.
//!
//! The handlers are plain Rust loops that the compiler vectorises for the
//! build's target. On x86-64 the baseline target has only SSE2 (4 `f32`
//! lanes); [`resolve_with`](super::resolve_with) can instead pick copies of
//! the same handlers compiled with AVX2 and FMA enabled (8 lanes) or with
//! AVX-512 (F, BW, VL, DQ: 16 lanes), when [`Simd::detect`] finds the CPU
//! supports them. Only the lane width changes: the code is the same,
//! nothing is contracted into FMA (Rust never contracts; the math
//! functions' explicit fused multiply-adds are fused in every copy, by a
//! library call in the baseline one) and no float operation is
//! reassociated, so every copy gives bit-identical results (checked by a
//! test for every tier the CPU has), up to the sign and payload of NaNs,
//! which Rust leaves unspecified. Other targets (the aarch64 firmware) have
//! one copy.

/// The vector extensions handlers may use, as a tier: each includes the
/// ones below it. Only [`Simd::detect`] and [`Simd::supported`] enable
/// extensions, so a `Simd` never promises more than the CPU has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Simd {
    tier: Tier,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Tier {
    Baseline,
    Avx2,
    Avx512,
}

#[cfg(target_arch = "x86_64")]
cpufeatures::new!(cpuid_avx2, "avx2", "fma");
#[cfg(target_arch = "x86_64")]
cpufeatures::new!(
    cpuid_avx512,
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512dq",
    "fma"
);

impl Simd {
    /// The build target's baseline (no run-time extension).
    pub const BASELINE: Simd = Simd {
        tier: Tier::Baseline,
    };

    /// The widest tier this CPU supports (cached after the first call).
    pub fn detect() -> Simd {
        let mut best = Simd::BASELINE;
        for s in Simd::supported() {
            best = best.max(s);
        }
        best
    }

    /// Every tier this CPU supports, the baseline first (for tests and
    /// benchmarks that compare them).
    pub fn supported() -> impl Iterator<Item = Simd> {
        #[cfg(target_arch = "x86_64")]
        let has = [true, cpuid_avx2::get(), cpuid_avx512::get()];
        #[cfg(not(target_arch = "x86_64"))]
        let has = [true, false, false];
        [Tier::Baseline, Tier::Avx2, Tier::Avx512]
            .into_iter()
            .zip(has)
            .filter(|&(_, h)| h)
            .map(|(tier, _)| Simd { tier })
    }

    /// Whether handlers compiled for AVX2 and FMA may run.
    pub fn avx2(self) -> bool {
        self.tier >= Tier::Avx2
    }

    /// Whether handlers compiled for AVX-512 (F, BW, VL, DQ) may run.
    pub fn avx512(self) -> bool {
        self.tier >= Tier::Avx512
    }

    /// This tier, but at most AVX2: for handlers whose AVX-512 copy was
    /// measured slower than their AVX2 copy (the fold along columns, whose
    /// per-row lane fold is a call LLVM compiles without the extensions).
    pub fn at_most_avx2(self) -> Simd {
        Simd {
            tier: self.tier.min(Tier::Avx2),
        }
    }

    /// The tier's name, for reports.
    pub fn name(self) -> &'static str {
        match self.tier {
            Tier::Baseline => "baseline",
            Tier::Avx2 => "AVX2",
            Tier::Avx512 => "AVX-512",
        }
    }
}

/// `$h` (a handler path) as a [`Handler`](super::Handler): on x86-64, a
/// copy of it compiled with AVX-512 when `$simd.avx512()`, or with AVX2
/// when `$simd.avx2()` (the handler and everything it inlines), otherwise
/// the baseline function. `pick!(@gm $simd, $h)` does the same for a
/// [`GmHandler`](super::GmHandler), `pick!(@row $simd, $h)` for a
/// [`RowHandler`](super::RowHandler), `pick!(@affine $simd, $h)` for an
/// [`AffineRow`](super::AffineRow).
macro_rules! pick {
    ($simd:ident, $($h:tt)+) => {
        pick!(@as Handler [ub: &mut [u8], a: &UbArgs] $simd, $($h)+)
    };
    (@gm $simd:ident, $($h:tt)+) => {
        pick!(@as GmHandler [d: &mut [u8], x: &[u8], y: &[u8], a: &UbArgs] $simd, $($h)+)
    };
    (@row $simd:ident, $($h:tt)+) => {
        pick!(@as RowHandler [d: &mut [u8], x: &[u8], a: &UbArgs, s: Option<ScaledRow<'_>>] $simd, $($h)+)
    };
    (@affine $simd:ident, $($h:tt)+) => {
        pick!(@as AffineRow [o: &mut [f32], x: &[f32], f: f32, g: &[f32], b: &[f32], fl: u32] $simd, $($h)+)
    };
    (@as $ty:ident [$($p:ident : $t:ty),*] $simd:ident, $($h:tt)+) => {{
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx2,fma")]
            unsafe fn wide($($p: $t),*) {
                $($h)+($($p),*)
            }
            fn shim($($p: $t),*) {
                // SAFETY: `shim` is only chosen below when `Simd::avx2()`
                // is true, which only `Simd::detect`/`Simd::supported` set,
                // after checking that this CPU supports AVX2.
                unsafe { wide($($p),*) }
            }
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,fma")]
            unsafe fn wide512($($p: $t),*) {
                $($h)+($($p),*)
            }
            fn shim512($($p: $t),*) {
                // SAFETY: as for `shim`, with AVX-512 F/BW/VL/DQ checked.
                unsafe { wide512($($p),*) }
            }
            if $simd.avx512() {
                shim512 as $ty
            } else if $simd.avx2() {
                shim as $ty
            } else {
                $($h)+ as $ty
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = $simd;
            $($h)+ as $ty
        }
    }};
}
pub(crate) use pick;
