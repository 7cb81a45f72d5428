//! Generic element-wise engines for instructions whose operands have
//! different element types (comparisons, select, cast, isfinite).
//!
//! When no source aliases the destination the work is one zipped loop over
//! typed UB slices. A source may alias the destination only when its byte
//! range is identical (so its element size is the destination's); then the
//! loop runs in chunks of [`CHUNK`] elements and copies each aliased source
//! chunk to the stack before the destination chunk is written.

use super::ub::{range_of, view, view_mut, Pod, Split, TSrc, CHUNK};

/// The `len` source elements at `off`: the source slice itself, or (when
/// it aliases the destination) a copy in `buf`.
#[inline(always)]
fn fetch<'o, A: Pod>(
    src: TSrc<'o, A>,
    dst: &[u8],
    off: usize,
    len: usize,
    buf: &'o mut [A; CHUNK],
) -> Option<&'o [A]> {
    match src {
        TSrc::Slice(s) => s.get(off..off + len),
        TSrc::Alias => {
            let s = view::<A>(dst)?.get(off..off + len)?;
            let b = buf.get_mut(..len)?;
            b.copy_from_slice(s);
            Some(b)
        }
    }
}

/// The destination chunk `off..off+len` as `[D]`.
#[inline(always)]
fn out<D: Pod>(dst: &mut [u8], off: usize, len: usize) -> Option<&mut [D]> {
    view_mut::<D>(dst)?.get_mut(off..off + len)
}

/// `dst[i] = f(a[i])` over `n` elements.
#[inline(always)]
pub(crate) fn ew1<A: Pod, D: Pod>(ub: &mut [u8], dst: u32, a: u32, n: u32, f: impl Fn(A) -> D) {
    let n = n as usize;
    let (Some(rd), Some(ra)) = (range_of::<D>(dst, n), range_of::<A>(a, n)) else {
        return;
    };
    let Some(sp) = Split::new(ub, rd) else { return };
    let Some(sa) = sp.src(ra).and_then(|s| s.typed::<A>()) else {
        return;
    };
    if let TSrc::Slice(a) = sa {
        if let Some(d) = view_mut::<D>(sp.dst) {
            for (d, a) in d.iter_mut().zip(a) {
                *d = f(*a);
            }
        }
        return;
    }
    let mut ba = [A::default(); CHUNK];
    let mut off = 0;
    while off < n {
        let len = (n - off).min(CHUNK);
        let Some(xa) = fetch(sa, sp.dst, off, len, &mut ba) else {
            return;
        };
        let Some(d) = out::<D>(sp.dst, off, len) else {
            return;
        };
        for (d, a) in d.iter_mut().zip(xa) {
            *d = f(*a);
        }
        off += len;
    }
}

/// `dst[i] = f(a[i], b[i])` over `n` elements.
#[inline(always)]
pub(crate) fn ew2<A: Pod, B: Pod, D: Pod>(
    ub: &mut [u8],
    dst: u32,
    a: u32,
    b: u32,
    n: u32,
    f: impl Fn(A, B) -> D,
) {
    let n = n as usize;
    let (Some(rd), Some(ra), Some(rb)) = (
        range_of::<D>(dst, n),
        range_of::<A>(a, n),
        range_of::<B>(b, n),
    ) else {
        return;
    };
    let Some(sp) = Split::new(ub, rd) else { return };
    let (Some(sa), Some(sb)) = (
        sp.src(ra).and_then(|s| s.typed::<A>()),
        sp.src(rb).and_then(|s| s.typed::<B>()),
    ) else {
        return;
    };
    if let (TSrc::Slice(a), TSrc::Slice(b)) = (sa, sb) {
        if let Some(d) = view_mut::<D>(sp.dst) {
            for ((d, a), b) in d.iter_mut().zip(a).zip(b) {
                *d = f(*a, *b);
            }
        }
        return;
    }
    let mut ba = [A::default(); CHUNK];
    let mut bb = [B::default(); CHUNK];
    let mut off = 0;
    while off < n {
        let len = (n - off).min(CHUNK);
        let (Some(xa), Some(xb)) = (
            fetch(sa, sp.dst, off, len, &mut ba),
            fetch(sb, sp.dst, off, len, &mut bb),
        ) else {
            return;
        };
        let Some(d) = out::<D>(sp.dst, off, len) else {
            return;
        };
        for ((d, a), b) in d.iter_mut().zip(xa).zip(xb) {
            *d = f(*a, *b);
        }
        off += len;
    }
}

/// `dst[i] = f(a[i], b[i], c[i])` over `n` elements.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn ew3<A: Pod, B: Pod, C: Pod, D: Pod>(
    ub: &mut [u8],
    dst: u32,
    a: u32,
    b: u32,
    c: u32,
    n: u32,
    f: impl Fn(A, B, C) -> D,
) {
    let n = n as usize;
    let (Some(rd), Some(ra), Some(rb), Some(rc)) = (
        range_of::<D>(dst, n),
        range_of::<A>(a, n),
        range_of::<B>(b, n),
        range_of::<C>(c, n),
    ) else {
        return;
    };
    let Some(sp) = Split::new(ub, rd) else { return };
    let (Some(sa), Some(sb), Some(sc)) = (
        sp.src(ra).and_then(|s| s.typed::<A>()),
        sp.src(rb).and_then(|s| s.typed::<B>()),
        sp.src(rc).and_then(|s| s.typed::<C>()),
    ) else {
        return;
    };
    if let (TSrc::Slice(a), TSrc::Slice(b), TSrc::Slice(c)) = (sa, sb, sc) {
        if let Some(d) = view_mut::<D>(sp.dst) {
            for (((d, a), b), c) in d.iter_mut().zip(a).zip(b).zip(c) {
                *d = f(*a, *b, *c);
            }
        }
        return;
    }
    let mut ba = [A::default(); CHUNK];
    let mut bb = [B::default(); CHUNK];
    let mut bc = [C::default(); CHUNK];
    let mut off = 0;
    while off < n {
        let len = (n - off).min(CHUNK);
        let (Some(xa), Some(xb), Some(xc)) = (
            fetch(sa, sp.dst, off, len, &mut ba),
            fetch(sb, sp.dst, off, len, &mut bb),
            fetch(sc, sp.dst, off, len, &mut bc),
        ) else {
            return;
        };
        let Some(d) = out::<D>(sp.dst, off, len) else {
            return;
        };
        for (((d, a), b), c) in d.iter_mut().zip(xa).zip(xb).zip(xc) {
            *d = f(*a, *b, *c);
        }
        off += len;
    }
}
