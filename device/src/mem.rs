//! Memory hints and non-temporal stores: the primitives under both the UB
//! handlers that store a row on the way (`crate::ops::rowpipe`) and the
//! global-memory moves (`crate::gm`). Below both, so neither imports the
//! other for them.

/// A contiguous run of bytes to prefetch over a row's store, a share of
/// it per block stored (`crate::ops::ScaledRow`), so that the loads of the
/// next tile go out at the pace of the stores.
#[derive(Clone, Copy, Debug, Default)]
pub struct PrefetchRun {
    pub(crate) addr: usize,
    pub(crate) bytes: usize,
}

impl PrefetchRun {
    /// Nothing to prefetch.
    pub const NONE: PrefetchRun = PrefetchRun { addr: 0, bytes: 0 };

    /// Prefetches the lines of the run's share for elements `at..end` of a
    /// store of `len` elements (the shares of `0..len` cover the run once).
    #[inline(always)]
    pub fn share(&self, at: usize, end: usize, len: usize) {
        if self.bytes == 0 || len == 0 {
            return;
        }
        let line = |i: usize| (self.bytes * i / len).div_ceil(64) * 64;
        let mut o = line(at);
        let hi = line(end.min(len));
        while o < hi {
            prefetch(self.addr.wrapping_add(o));
            o += 64;
        }
    }
}

/// A read prefetch hint for the line at `addr` (never faults).
#[inline(always)]
pub(crate) fn prefetch(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` is a hint; it never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8)
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `prfm` is a hint; it never faults, whatever the address.
    unsafe {
        core::arch::asm!("prfm pldl1keep, [{0}]", in(reg) addr, options(nostack, preserves_flags, readonly))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = addr;
}

/// `dst[i] = src[i] · f` for `i < n`, in order.
///
/// # Safety
/// `src` valid for reads and `dst` for writes of `n` `f32`s (any
/// alignment); no overlap.
#[inline(always)]
pub(crate) unsafe fn scale_run(dst: *mut f32, src: *const f32, n: usize, f: f32) {
    for i in 0..n {
        // SAFETY: `i < n`, as the caller guarantees.
        unsafe { dst.add(i).write_unaligned(src.add(i).read_unaligned() * f) };
    }
}

/// `dst[i] = src[i] · f` over two slices of one length (nothing
/// otherwise), with non-temporal stores when `stream` (where the target has
/// them): a row of a softmax's scaled store (`crate::ops::ScaledRow`).
#[inline(always)]
pub(crate) fn store_scaled(dst: &mut [f32], src: &[f32], f: f32, stream: bool) {
    if dst.len() != src.len() {
        return;
    }
    if stream {
        // SAFETY: two slices of `dst.len()` elements, which cannot overlap
        // (one is borrowed mutably).
        unsafe { stream_scaled(dst.as_mut_ptr(), src.as_ptr(), dst.len(), f, || {}) };
    } else {
        for (d, x) in dst.iter_mut().zip(src) {
            *d = *x * f;
        }
    }
}

/// [`scale_run`] with non-temporal stores where the target has them
/// (x86-64; the same products: SSE multiplies round as scalar ones do),
/// calling `per_line` before each line stored (a prefetch cursor's
/// step).
///
/// # Safety
/// As [`scale_run`].
#[inline(always)]
pub(crate) unsafe fn stream_scaled(
    dst: *mut f32,
    src: *const f32,
    n: usize,
    f: f32,
    mut per_line: impl FnMut(),
) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_loadu_ps, _mm_mul_ps, _mm_set1_ps, _mm_stream_ps};
        let misaligned = (dst as usize) & 15;
        if !misaligned.is_multiple_of(4) {
            // Not even element-aligned: no vector stores.
            // SAFETY: as the caller guarantees.
            unsafe { scale_run(dst, src, n, f) };
            return;
        }
        let head = ((16 - misaligned) & 15) / 4;
        let head = head.min(n);
        // SAFETY: the head, 16-element blocks and tail below partition
        // `0..n`; the blocks' destinations are 16-byte aligned.
        unsafe {
            scale_run(dst, src, head, f);
            let k = _mm_set1_ps(f);
            let mut i = head;
            while i + 16 <= n {
                per_line();
                let (s, d) = (src.add(i), dst.add(i));
                let v0 = _mm_mul_ps(_mm_loadu_ps(s), k);
                let v1 = _mm_mul_ps(_mm_loadu_ps(s.add(4)), k);
                let v2 = _mm_mul_ps(_mm_loadu_ps(s.add(8)), k);
                let v3 = _mm_mul_ps(_mm_loadu_ps(s.add(12)), k);
                _mm_stream_ps(d, v0);
                _mm_stream_ps(d.add(4), v1);
                _mm_stream_ps(d.add(8), v2);
                _mm_stream_ps(d.add(12), v3);
                i += 16;
            }
            scale_run(dst.add(i), src.add(i), n - i, f);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        for _ in 0..(n * 4).div_ceil(64) {
            per_line();
        }
        // SAFETY: as the caller guarantees.
        unsafe { scale_run(dst, src, n, f) };
    }
}
