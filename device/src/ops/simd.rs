//! Run-time choice of the host CPU's vector extensions for the handlers.
//!
//! The handlers are plain Rust loops that the compiler vectorises for the
//! build's target. On x86-64 the baseline target has only SSE2 (4 `f32`
//! lanes); [`resolve_with`](super::resolve_with) can instead pick copies of
//! the same handlers compiled with AVX2 enabled (8 lanes), when
//! [`Simd::detect`] finds the CPU supports it. Only the lane width changes:
//! the code is the same, nothing is contracted into FMA and no float
//! operation is reassociated, so both copies give bit-identical results
//! (checked by a test), up to the sign and payload of NaNs, which Rust
//! leaves unspecified. Other targets (the aarch64 firmware) have one copy.

/// The vector extensions handlers may use. Only [`Simd::detect`] enables
/// extensions, so a `Simd` never promises more than the CPU has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Simd {
    avx2: bool,
}

#[cfg(target_arch = "x86_64")]
cpufeatures::new!(cpuid_avx2, "avx2");

impl Simd {
    /// The build target's baseline (no run-time extension).
    pub const BASELINE: Simd = Simd { avx2: false };

    /// What this CPU supports (cached after the first call).
    pub fn detect() -> Simd {
        #[cfg(target_arch = "x86_64")]
        {
            Simd {
                avx2: cpuid_avx2::get(),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Simd::BASELINE
        }
    }

    /// Whether handlers compiled for AVX2 may run.
    pub fn avx2(self) -> bool {
        self.avx2
    }
}

/// `$h` (a handler path) as a [`Handler`](super::Handler): on x86-64 with
/// `$simd.avx2()`, a copy of it compiled with AVX2 enabled (the handler and
/// everything it inlines), otherwise the baseline function.
macro_rules! pick {
    ($simd:ident, $($h:tt)+) => {{
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx2")]
            unsafe fn wide(ub: &mut [u8], a: &UbArgs) {
                $($h)+(ub, a)
            }
            fn shim(ub: &mut [u8], a: &UbArgs) {
                // SAFETY: `shim` is only chosen below when `Simd::avx2()`
                // is true, which only `Simd::detect` sets, after checking
                // that this CPU supports AVX2.
                unsafe { wide(ub, a) }
            }
            if $simd.avx2() {
                shim as Handler
            } else {
                $($h)+ as Handler
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = $simd;
            $($h)+ as Handler
        }
    }};
}
pub(crate) use pick;
