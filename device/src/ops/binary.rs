//! Element-wise binary opcodes `dst[i] = a[i] op b[i]`.
//!
//! Every pair of `dst`, `a`, `b` is identical or disjoint (verifier rule);
//! all four aliasing patterns run in one pass: `f32`/`i32` directly over
//! the UB slices, other dtypes through stack buffers of [`CHUNK`] compute
//! values (each chunk is read completely before it is written).

use super::ub::{range_of, view, view_mut, Elem, Split, TSrc, CHUNK};
use super::UbArgs;
use crate::math;

/// A binary function over compute values.
pub(crate) trait BinOp<C> {
    /// The function.
    fn f(a: C, b: C) -> C;
}

/// Copies elements `off..off+len` of a source into `buf` as compute values;
/// `dst` is the destination's elements (read when the source aliases it).
#[inline(always)]
fn load<T: Elem>(src: TSrc<'_, T>, dst: &[T], off: usize, buf: &mut [T::C]) -> Option<()> {
    let s = match src {
        TSrc::Alias => dst,
        TSrc::Slice(s) => s.get(off..off + buf.len())?,
    };
    for (b, x) in buf.iter_mut().zip(s) {
        *b = x.get();
    }
    Some(())
}

/// Handler of a binary opcode.
#[inline(always)]
pub(crate) fn binary<T: Elem, O: BinOp<T::C>>(ub: &mut [u8], args: &UbArgs) {
    let n = args.n as usize;
    let (Some(rd), Some(ra), Some(rb)) = (
        range_of::<T>(args.dst, n),
        range_of::<T>(args.a, n),
        range_of::<T>(args.b, n),
    ) else {
        return;
    };
    let Some(sp) = Split::new(ub, rd) else { return };
    let (Some(a), Some(b)) = (
        sp.src(ra).and_then(|s| s.typed::<T>()),
        sp.src(rb).and_then(|s| s.typed::<T>()),
    ) else {
        return;
    };
    let Some(d) = view_mut::<T>(sp.dst) else {
        return;
    };
    binary_core::<T, O>(d, a, b);
}

/// [`binary`] with its operands in global memory: `dst`, `a` and `b` are
/// `n` elements each, disjoint (a load-forwarded body, see
/// `crate::predecode`). Does nothing when a length or alignment is off.
#[inline(always)]
pub(crate) fn binary_gm<T: Elem, O: BinOp<T::C>>(
    dst: &mut [u8],
    a: &[u8],
    b: &[u8],
    args: &UbArgs,
) {
    let n = args.n as usize;
    let (Some(d), Some(a), Some(b)) = (view_mut::<T>(dst), view::<T>(a), view::<T>(b)) else {
        return;
    };
    if d.len() != n || a.len() != n || b.len() != n {
        return;
    }
    binary_core::<T, O>(d, TSrc::Slice(a), TSrc::Slice(b));
}

/// `d = a op b` over equal-length slices (a source may be `d` itself).
#[inline(always)]
pub(crate) fn binary_core<T: Elem, O: BinOp<T::C>>(d: &mut [T], a: TSrc<'_, T>, b: TSrc<'_, T>) {
    if let Some(dc) = T::direct_mut(d) {
        direct::<T, O>(dc, a, b);
        return;
    }
    let mut ba = [T::C::default(); CHUNK];
    let mut bb = [T::C::default(); CHUNK];
    for (i, dc) in d.chunks_mut(CHUNK).enumerate() {
        let len = dc.len().min(CHUNK);
        let (xa, xb) = (&mut ba[..len], &mut bb[..len]);
        let off = i * CHUNK;
        if load(a, dc, off, xa).is_none() || load(b, dc, off, xb).is_none() {
            return;
        }
        for (x, y) in xa.iter_mut().zip(xb.iter()) {
            *x = O::f(*x, *y);
        }
        for (d, x) in dc.iter_mut().zip(xa.iter()) {
            *d = T::put(*x);
        }
    }
}

/// The four aliasing patterns over `f32`/`i32` slices.
#[inline(always)]
fn direct<T: Elem, O: BinOp<T::C>>(d: &mut [T::C], a: TSrc<'_, T>, b: TSrc<'_, T>) {
    let a = match a {
        TSrc::Alias => None,
        TSrc::Slice(s) => match T::direct(s) {
            Some(s) => Some(s),
            None => return,
        },
    };
    let b = match b {
        TSrc::Alias => None,
        TSrc::Slice(s) => match T::direct(s) {
            Some(s) => Some(s),
            None => return,
        },
    };
    match (a, b) {
        (Some(a), Some(b)) => {
            for ((d, a), b) in d.iter_mut().zip(a).zip(b) {
                *d = O::f(*a, *b);
            }
        }
        (None, Some(b)) => {
            for (d, b) in d.iter_mut().zip(b) {
                *d = O::f(*d, *b);
            }
        }
        (Some(a), None) => {
            for (d, a) in d.iter_mut().zip(a) {
                *d = O::f(*a, *d);
            }
        }
        (None, None) => {
            for d in d.iter_mut() {
                *d = O::f(*d, *d);
            }
        }
    }
}

macro_rules! binop {
    ($(#[$m:meta])* $name:ident { $($c:ty => |$a:ident, $b:ident| $e:expr;)* }) => {
        $(#[$m])*
        pub(crate) struct $name;
        $(
            impl BinOp<$c> for $name {
                #[inline(always)]
                fn f($a: $c, $b: $c) -> $c {
                    $e
                }
            }
        )*
    };
}

binop!(
    /// `a + b` (integers wrap).
    Add {
        f32 => |a, b| a + b;
        i32 => |a, b| a.wrapping_add(b);
    }
);
binop!(
    /// `a − b` (integers wrap).
    Sub {
        f32 => |a, b| a - b;
        i32 => |a, b| a.wrapping_sub(b);
    }
);
binop!(
    /// `a · b` (integers wrap).
    Mul {
        f32 => |a, b| a * b;
        i32 => |a, b| a.wrapping_mul(b);
    }
);
binop!(
    /// `a / b`; integers truncate, `x / 0 = 0`, `MIN / −1 = MIN` (wraps).
    Div {
        f32 => |a, b| a / b;
        i32 => |a, b| {
            let q = a.wrapping_div(if b == 0 { 1 } else { b });
            if b == 0 { 0 } else { q }
        };
    }
);
binop!(
    /// `max(a, b)`; for floats a NaN operand gives NaN (like
    /// `torch.maximum`), and `max(±0, ∓0)` is the second operand.
    Max {
        f32 => |a, b| if a > b || a.is_nan() { a } else { b };
        i32 => |a, b| a.max(b);
    }
);
binop!(
    /// `min(a, b)`; for floats a NaN operand gives NaN, and `min(±0, ∓0)`
    /// is the second operand.
    Min {
        f32 => |a, b| if a < b || a.is_nan() { a } else { b };
        i32 => |a, b| a.min(b);
    }
);
binop!(
    /// [`math::pow`].
    Pow {
        f32 => |a, b| math::pow(a, b);
    }
);
binop!(
    /// `a · a`: `pows` with the immediate 2 (exactly `pow(a, 2)`, correctly
    /// rounded, same special values).
    Square {
        f32 => |a, _b| a * a;
    }
);
binop!(
    /// Logical and.
    And {
        bool => |a, b| a & b;
    }
);
binop!(
    /// Logical or.
    Or {
        bool => |a, b| a | b;
    }
);
