//! Comparisons (bool results), select and isfinite.
//!
//! Floats compare in `f32` (exact for `f16`/`bf16`), IEEE style: every
//! comparison with NaN is false except `ne`; `−0 == +0`. `i8` compares as
//! `i32`, so `i8` against an immediate outside −128..=127 behaves as the
//! integers do (`lts` with 300 is always true). Bool operands (eq/ne)
//! compare their truth values.

use super::ew::{ew1, ew2, ew3};
use super::ub::{Bool, Elem, Pod};
use super::UbArgs;
use crate::math;

/// A comparison of compute values.
pub(crate) trait CmpOp<C> {
    /// The comparison.
    fn f(a: C, b: C) -> bool;
}

macro_rules! cmpop {
    ($(#[$m:meta])* $name:ident, $op:tt, [$($c:ty),*]) => {
        $(#[$m])*
        pub(crate) struct $name;
        $(
            impl CmpOp<$c> for $name {
                #[inline(always)]
                fn f(a: $c, b: $c) -> bool {
                    a $op b
                }
            }
        )*
    };
}

cmpop!(
    /// `a == b`.
    Eq, ==, [f32, i32, bool]
);
cmpop!(
    /// `a != b`.
    Ne, !=, [f32, i32, bool]
);
cmpop!(
    /// `a < b`.
    Lt, <, [f32, i32]
);
cmpop!(
    /// `a <= b`.
    Le, <=, [f32, i32]
);
cmpop!(
    /// `a > b`.
    Gt, >, [f32, i32]
);
cmpop!(
    /// `a >= b`.
    Ge, >=, [f32, i32]
);

/// Handler of `a op b` with a bool result.
#[inline(always)]
pub(crate) fn compare<T: Elem, O: CmpOp<T::C>>(ub: &mut [u8], a: &UbArgs) {
    ew2::<T, T, Bool>(ub, a.dst, a.a, a.b, a.n, |x, y| {
        Bool(O::f(x.get(), y.get()) as u8)
    });
}

/// Handler of `a op imm` with a bool result.
#[inline(always)]
pub(crate) fn compare_s<T: Elem, O: CmpOp<T::C>>(ub: &mut [u8], a: &UbArgs) {
    let imm = T::imm(a.imm);
    ew1::<T, Bool>(ub, a.dst, a.a, a.n, |x| Bool(O::f(x.get(), imm) as u8));
}

/// Handler of `select`: `dst = cond ? a : b`, moving raw elements of `U`
/// (`u8`/`u16`/`u32`, by dtype size). Operands: `a` = cond, `b` = a,
/// `c` = b.
#[inline(always)]
pub(crate) fn select<U: Pod>(ub: &mut [u8], a: &UbArgs) {
    ew3::<Bool, U, U, U>(
        ub,
        a.dst,
        a.a,
        a.b,
        a.c,
        a.n,
        |c, x, y| if c.0 != 0 { x } else { y },
    );
}

/// Handler of `isfinite` over a float dtype.
#[inline(always)]
pub(crate) fn isfinite<T: Elem<C = f32>>(ub: &mut [u8], a: &UbArgs) {
    ew1::<T, Bool>(
        ub,
        a.dst,
        a.a,
        a.n,
        |x| Bool(math::is_finite(x.get()) as u8),
    );
}
