//! Data movement inside UB: `cast`, `copy`, `fill`, `iota`.
//!
//! `cast` semantics (one rounding everywhere):
//! - float → float: exact widening or round to nearest even;
//! - float → int: truncate toward zero, saturate, NaN → 0 (Rust `as`);
//! - int → float: round to nearest even (`i32 → bf16` is rounded once, not
//!   through `f32`);
//! - int → int: `i32 → i8` wraps (keeps the low byte), `i8 → i32` extends;
//! - anything → bool: `x != 0` (NaN is true, −0 is false);
//! - bool → numeric: 0 or 1 (any nonzero byte reads as true).

use super::ew::ew1;
use super::ub::{range, range_of, view_mut, Bf16, Bool, Elem, Pod, F16};
use super::UbArgs;
use crate::math;

/// An element value in the widest form of its kind.
#[derive(Clone, Copy)]
pub(crate) enum Val {
    /// A float (exact for f32, f16, bf16).
    F(f32),
    /// An integer.
    I(i32),
    /// A truth value.
    B(bool),
}

/// An element type that `cast` reads and writes.
pub(crate) trait CastElem: Pod {
    /// The element's value.
    fn to_val(self) -> Val;
    /// The element nearest to `v` (rules in the module doc).
    fn from_val(v: Val) -> Self;
}

impl CastElem for f32 {
    #[inline(always)]
    fn to_val(self) -> Val {
        Val::F(self)
    }
    #[inline(always)]
    fn from_val(v: Val) -> f32 {
        match v {
            Val::F(x) => x,
            Val::I(i) => i as f32,
            Val::B(b) => b as u8 as f32,
        }
    }
}

impl CastElem for F16 {
    #[inline(always)]
    fn to_val(self) -> Val {
        Val::F(self.get())
    }
    #[inline(always)]
    fn from_val(v: Val) -> F16 {
        match v {
            Val::F(x) => F16::put(x),
            // Exact in f32 up to 2^24; anything larger overflows f16 anyway.
            Val::I(i) => F16::put(i as f32),
            Val::B(b) => F16::put(b as u8 as f32),
        }
    }
}

impl CastElem for Bf16 {
    #[inline(always)]
    fn to_val(self) -> Val {
        Val::F(self.get())
    }
    #[inline(always)]
    fn from_val(v: Val) -> Bf16 {
        match v {
            Val::F(x) => Bf16::put(x),
            Val::I(i) => Bf16(math::i32_to_bf16(i)),
            Val::B(b) => Bf16::put(b as u8 as f32),
        }
    }
}

impl CastElem for i32 {
    #[inline(always)]
    fn to_val(self) -> Val {
        Val::I(self)
    }
    #[inline(always)]
    fn from_val(v: Val) -> i32 {
        match v {
            Val::F(x) => x as i32,
            Val::I(i) => i,
            Val::B(b) => b as i32,
        }
    }
}

impl CastElem for i8 {
    #[inline(always)]
    fn to_val(self) -> Val {
        Val::I(self as i32)
    }
    #[inline(always)]
    fn from_val(v: Val) -> i8 {
        match v {
            Val::F(x) => x as i8,
            Val::I(i) => i as i8,
            Val::B(b) => b as i8,
        }
    }
}

impl CastElem for Bool {
    #[inline(always)]
    fn to_val(self) -> Val {
        Val::B(self.0 != 0)
    }
    #[inline(always)]
    fn from_val(v: Val) -> Bool {
        Bool(match v {
            Val::F(x) => x != 0.0,
            Val::I(i) => i != 0,
            Val::B(b) => b,
        } as u8)
    }
}

/// Handler of `cast` from `A` to `D`.
#[inline(always)]
pub(crate) fn cast<A: CastElem, D: CastElem>(ub: &mut [u8], a: &UbArgs) {
    ew1::<A, D>(ub, a.dst, a.a, a.n, |x| D::from_val(x.to_val()));
}

/// Handler of `copy` for elements of `S` bytes (a memmove; identical ranges
/// are a no-op).
#[inline(always)]
pub(crate) fn copy<const S: usize>(ub: &mut [u8], a: &UbArgs) {
    let n = a.n as usize;
    let (Some(rd), Some(rs)) = (range(a.dst, n, S), range(a.a, n, S)) else {
        return;
    };
    if rd.end <= ub.len() && rs.end <= ub.len() && rd != rs {
        ub.copy_within(rs, rd.start);
    }
}

/// Handler of `fill`: every element becomes the immediate converted to `T`
/// (floats round to nearest even, `i8` keeps the low byte, bool is
/// `imm != 0`).
#[inline(always)]
pub(crate) fn fill<T: Elem>(ub: &mut [u8], a: &UbArgs) {
    let v = T::put(T::imm(a.imm));
    let Some(r) = range_of::<T>(a.dst, a.n as usize) else {
        return;
    };
    if let Some(d) = ub.get_mut(r).and_then(view_mut::<T>) {
        d.fill(v);
    }
}

/// `self + i` in the compute type (floats: `start + (i as f32)` rounded
/// once in f32; integers wrap).
pub(crate) trait Step: Copy {
    /// `self + i`.
    fn step(self, i: usize) -> Self;
}

impl Step for f32 {
    #[inline(always)]
    fn step(self, i: usize) -> f32 {
        self + i as f32
    }
}

impl Step for i32 {
    #[inline(always)]
    fn step(self, i: usize) -> i32 {
        self.wrapping_add(i as i32)
    }
}

/// Handler of `iota`: `dst[i] = start + i` (immediate `start`).
#[inline(always)]
pub(crate) fn iota<T: Elem>(ub: &mut [u8], a: &UbArgs)
where
    T::C: Step,
{
    let start = T::imm(a.imm);
    let Some(r) = range_of::<T>(a.dst, a.n as usize) else {
        return;
    };
    if let Some(d) = ub.get_mut(r).and_then(view_mut::<T>) {
        for (i, d) in d.iter_mut().enumerate() {
            *d = T::put(start.step(i));
        }
    }
}
