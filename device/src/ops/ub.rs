//! Typed, checked views of UB and the element types handlers work on.
//!
//! A handler turns its byte offsets into ranges once ([`range`]), splits UB
//! around the destination ([`Split`]) so that sources are shared borrows and
//! the destination a mutable one, and views each as a typed slice with
//! `zerocopy` (length and alignment checked once). Any failure (cannot
//! happen after verification) makes the handler do nothing, or, with the
//! `extra-checks` feature, panics ([`gap`]): a verifier gap shows as a
//! crash to the fuzzers instead of a silently skipped instruction.
//!
//! [`Elem`] is a UB element type with the type its arithmetic runs in:
//! `f32` and `i32` compute in place; `f16`/`bf16` compute in `f32` and round
//! back (round to nearest even); `i8` computes in `i32` and wraps; `bool`
//! reads any nonzero byte as true and writes 0/1.

use core::ops::Range;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::math;

/// Elements per chunk when a handler goes through a stack buffer.
pub(crate) const CHUNK: usize = 256;

/// Plain data that UB bytes can be viewed as.
pub(crate) trait Pod:
    Copy + Default + FromBytes + IntoBytes + Immutable + KnownLayout + 'static
{
}
impl<T: Copy + Default + FromBytes + IntoBytes + Immutable + KnownLayout + 'static> Pod for T {}

/// An IEEE binary16 element (raw bits).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(transparent)]
pub(crate) struct F16(pub u16);

/// A bfloat16 element (raw bits).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(transparent)]
pub(crate) struct Bf16(pub u16);

/// A bool element: one byte, nonzero reads as true, written as 0 or 1.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(transparent)]
pub(crate) struct Bool(pub u8);

/// A UB element type and the type its arithmetic runs in.
pub(crate) trait Elem: Pod {
    /// Compute type: `f32` for floats, `i32` for integers, `bool` for bool.
    type C: Copy + Default + PartialEq + 'static;
    /// Element → compute value (exact).
    fn get(self) -> Self::C;
    /// Compute value → element (rounds to nearest even / wraps / 0-1).
    fn put(c: Self::C) -> Self;
    /// The scalar immediate: `f32` bits for floats, `i32` bits otherwise.
    fn imm(bits: u32) -> Self::C;
    /// The slice itself when the compute type is the element type.
    #[inline(always)]
    fn direct_mut(_: &mut [Self]) -> Option<&mut [Self::C]> {
        None
    }
    /// The slice itself when the compute type is the element type.
    #[inline(always)]
    fn direct(_: &[Self]) -> Option<&[Self::C]> {
        None
    }
}

impl Elem for f32 {
    type C = f32;
    #[inline(always)]
    fn get(self) -> f32 {
        self
    }
    #[inline(always)]
    fn put(c: f32) -> f32 {
        c
    }
    #[inline(always)]
    fn imm(bits: u32) -> f32 {
        f32::from_bits(bits)
    }
    #[inline(always)]
    fn direct_mut(s: &mut [f32]) -> Option<&mut [f32]> {
        Some(s)
    }
    #[inline(always)]
    fn direct(s: &[f32]) -> Option<&[f32]> {
        Some(s)
    }
}

impl Elem for F16 {
    type C = f32;
    #[inline(always)]
    fn get(self) -> f32 {
        math::f16_to_f32(self.0)
    }
    #[inline(always)]
    fn put(c: f32) -> F16 {
        F16(math::f32_to_f16(c))
    }
    #[inline(always)]
    fn imm(bits: u32) -> f32 {
        f32::from_bits(bits)
    }
}

impl Elem for Bf16 {
    type C = f32;
    #[inline(always)]
    fn get(self) -> f32 {
        math::bf16_to_f32(self.0)
    }
    #[inline(always)]
    fn put(c: f32) -> Bf16 {
        Bf16(math::f32_to_bf16(c))
    }
    #[inline(always)]
    fn imm(bits: u32) -> f32 {
        f32::from_bits(bits)
    }
}

impl Elem for i32 {
    type C = i32;
    #[inline(always)]
    fn get(self) -> i32 {
        self
    }
    #[inline(always)]
    fn put(c: i32) -> i32 {
        c
    }
    #[inline(always)]
    fn imm(bits: u32) -> i32 {
        bits as i32
    }
    #[inline(always)]
    fn direct_mut(s: &mut [i32]) -> Option<&mut [i32]> {
        Some(s)
    }
    #[inline(always)]
    fn direct(s: &[i32]) -> Option<&[i32]> {
        Some(s)
    }
}

impl Elem for i8 {
    type C = i32;
    #[inline(always)]
    fn get(self) -> i32 {
        self as i32
    }
    #[inline(always)]
    fn put(c: i32) -> i8 {
        c as i8
    }
    #[inline(always)]
    fn imm(bits: u32) -> i32 {
        bits as i32
    }
}

impl Elem for Bool {
    type C = bool;
    #[inline(always)]
    fn get(self) -> bool {
        self.0 != 0
    }
    #[inline(always)]
    fn put(c: bool) -> Bool {
        Bool(c as u8)
    }
    #[inline(always)]
    fn imm(bits: u32) -> bool {
        bits != 0
    }
}

/// A handler's operand failed a check that verification guarantees:
/// `None` (the handler does nothing), or with the `extra-checks` feature a
/// panic naming `what`.
#[cold]
#[inline(never)]
pub(crate) fn gap<T>(what: &str) -> Option<T> {
    if cfg!(feature = "extra-checks") {
        panic!("verifier gap: {what}");
    }
    None
}

/// Byte range of `n` elements of `size` bytes at byte offset `off`.
#[inline(always)]
pub(crate) fn range(off: u32, n: usize, size: usize) -> Option<Range<usize>> {
    let start = off as usize;
    match n.checked_mul(size).and_then(|b| start.checked_add(b)) {
        Some(end) => Some(start..end),
        None => gap("a UB range overflows"),
    }
}

/// Two disjoint byte ranges of `ub` as two mutable views, in the order
/// given; `None` when they overlap or one leaves `ub`.
#[inline(always)]
pub(crate) fn two_mut(
    ub: &mut [u8],
    p: Range<usize>,
    q: Range<usize>,
) -> Option<(&mut [u8], &mut [u8])> {
    if p.start > p.end || q.start > q.end || p.end.max(q.end) > ub.len() {
        return gap("a UB range leaves the UB");
    }
    if p.end <= q.start {
        let (lo, hi) = ub.split_at_mut(q.start);
        Some((lo.get_mut(p)?, hi.get_mut(..q.end - q.start)?))
    } else if q.end <= p.start {
        let (lo, hi) = ub.split_at_mut(p.start);
        Some((hi.get_mut(..p.end - p.start)?, lo.get_mut(q)?))
    } else {
        gap("two UB ranges that must be disjoint overlap")
    }
}

/// Byte range of `n` elements of `T` at `off`.
#[inline(always)]
pub(crate) fn range_of<T>(off: u32, n: usize) -> Option<Range<usize>> {
    range(off, n, core::mem::size_of::<T>())
}

/// `bytes` as a `[T]` (None when misaligned or not a whole number of `T`).
#[inline(always)]
pub(crate) fn view<T: Pod>(bytes: &[u8]) -> Option<&[T]> {
    <[T]>::ref_from_bytes(bytes)
        .ok()
        .or_else(|| gap("a UB operand is misaligned"))
}

/// `bytes` as a `&mut [T]` (None when misaligned or not a whole number of `T`).
#[inline(always)]
pub(crate) fn view_mut<T: Pod>(bytes: &mut [u8]) -> Option<&mut [T]> {
    match <[T]>::mut_from_bytes(bytes) {
        Ok(v) => Some(v),
        Err(_) => gap("a UB operand is misaligned"),
    }
}

/// A source operand relative to the destination.
#[derive(Clone, Copy)]
pub(crate) enum Src<'a> {
    /// Disjoint from the destination.
    Bytes(&'a [u8]),
    /// The destination's own bytes (identical range).
    Alias,
}

/// UB split around a destination range: the bytes before it, the
/// destination (mutable) and the bytes after it.
pub(crate) struct Split<'a> {
    pre: &'a [u8],
    /// The destination bytes.
    pub dst: &'a mut [u8],
    post: &'a [u8],
    start: usize,
    end: usize,
}

impl<'a> Split<'a> {
    /// Splits `ub` around `r`; None when `r` leaves `ub`.
    #[inline(always)]
    pub fn new(ub: &'a mut [u8], r: Range<usize>) -> Option<Split<'a>> {
        if r.start > r.end || r.end > ub.len() {
            return gap("a UB destination leaves the UB");
        }
        let (pre, rest) = ub.split_at_mut(r.start);
        let (dst, post) = rest.split_at_mut(r.end - r.start);
        Some(Split {
            pre,
            dst,
            post,
            start: r.start,
            end: r.end,
        })
    }

    /// Locates a source range: identical to the destination, or entirely
    /// before or after it. None when it partially overlaps or leaves UB.
    #[inline(always)]
    pub fn src(&self, r: Range<usize>) -> Option<Src<'a>> {
        let src = if r.start == self.start && r.end == self.end {
            Some(Src::Alias)
        } else if r.end <= self.start {
            self.pre.get(r).map(Src::Bytes)
        } else if r.start >= self.end {
            self.post
                .get(r.start - self.end..r.end - self.end)
                .map(Src::Bytes)
        } else {
            None
        };
        src.or_else(|| gap("a UB source overlaps its destination in part or leaves the UB"))
    }

    /// A source that must be disjoint from the destination.
    #[inline(always)]
    pub fn disjoint<T: Pod>(&self, r: Range<usize>) -> Option<&'a [T]> {
        match self.src(r)? {
            // An empty range "identical" to an empty destination is fine.
            Src::Alias if self.start == self.end => Some(&[]),
            Src::Alias => gap("a UB source that must be disjoint is the destination"),
            Src::Bytes(b) => view(b),
        }
    }
}

/// A typed source operand.
#[derive(Clone, Copy)]
pub(crate) enum TSrc<'a, T> {
    /// Disjoint from the destination.
    Slice(&'a [T]),
    /// The destination's own elements.
    Alias,
}

impl<'a, T> TSrc<'a, T> {
    /// Elements `span` of the source: that part of the slice, or still the
    /// destination itself (which the caller slices the same way); `None`
    /// when the span leaves the slice.
    #[inline(always)]
    pub fn span(self, span: core::ops::Range<usize>) -> Option<TSrc<'a, T>> {
        match self {
            TSrc::Alias => Some(TSrc::Alias),
            TSrc::Slice(s) => s.get(span).map(TSrc::Slice),
        }
    }
}

impl<'a> Src<'a> {
    /// Views the source as `[T]`.
    #[inline(always)]
    pub fn typed<T: Pod>(self) -> Option<TSrc<'a, T>> {
        match self {
            Src::Alias => Some(TSrc::Alias),
            Src::Bytes(b) => view(b).map(TSrc::Slice),
        }
    }
}
