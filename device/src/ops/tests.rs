//! Every handler against a plain scalar reference interpreter (f64 where it
//! matters) on random data, odd sizes, every allowed dtype and the aliasing
//! patterns the verifier allows.

extern crate std;

use std::vec::Vec;
use std::{format, vec};

use dvm_isa::{Axis, DType, Instr, MmFlags, Opcode, Pipe, Scalar};
use zerocopy::IntoBytes;

use super::{resolve, resolve_with, Simd};

// ---- harness ----------------------------------------------------------------------

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
}

const SIZES: [u32; 6] = [1, 3, 17, 64, 1000, 4099];

/// A 64-byte aligned UB of `bytes` bytes.
struct Ub(Vec<Align64>);

#[derive(
    Clone,
    Copy,
    zerocopy::FromBytes,
    zerocopy::IntoBytes,
    zerocopy::Immutable,
    zerocopy::KnownLayout,
)]
#[repr(C, align(64))]
struct Align64([u8; 64]);

impl Ub {
    fn new(bytes: usize) -> Ub {
        Ub(vec![Align64([0; 64]); bytes.div_ceil(64)])
    }
    fn bytes(&mut self) -> &mut [u8] {
        self.0.as_mut_bytes()
    }
}

fn dec(dt: DType, ub: &[u8], off: u32, i: usize) -> f64 {
    let o = off as usize + i * dt.size() as usize;
    match dt {
        DType::F32 => f32::from_le_bytes(ub[o..o + 4].try_into().unwrap()) as f64,
        DType::F16 => half::f16::from_le_bytes(ub[o..o + 2].try_into().unwrap()).to_f64(),
        DType::BF16 => half::bf16::from_le_bytes(ub[o..o + 2].try_into().unwrap()).to_f64(),
        DType::I32 => i32::from_le_bytes(ub[o..o + 4].try_into().unwrap()) as f64,
        DType::I8 => ub[o] as i8 as f64,
        DType::Bool => (ub[o] != 0) as u8 as f64,
        DType::I64 => i64::from_le_bytes(ub[o..o + 8].try_into().unwrap()) as f64,
    }
}

fn raw(dt: DType, ub: &[u8], off: u32, i: usize) -> u32 {
    let s = dt.size() as usize;
    let o = off as usize + i * s;
    let mut b = [0u8; 4];
    b[..s].copy_from_slice(&ub[o..o + s]);
    u32::from_le_bytes(b)
}

/// Rounds `v` to `dt` (floats: to f32 first, as the handlers compute).
fn round_to(dt: DType, v: f64) -> f64 {
    match dt {
        DType::F32 => v as f32 as f64,
        DType::F16 => half::f16::from_f32(v as f32).to_f64(),
        DType::BF16 => half::bf16::from_f32(v as f32).to_f64(),
        DType::I32 => v as i64 as i32 as f64,
        DType::I8 => v as i64 as i8 as f64,
        DType::Bool => (v != 0.0) as u8 as f64,
        DType::I64 => v as i64 as f64,
    }
}

fn enc(dt: DType, ub: &mut [u8], off: u32, i: usize, v: f64) {
    let o = off as usize + i * dt.size() as usize;
    match dt {
        DType::F32 => ub[o..o + 4].copy_from_slice(&(v as f32).to_le_bytes()),
        DType::F16 => ub[o..o + 2].copy_from_slice(&half::f16::from_f32(v as f32).to_le_bytes()),
        DType::BF16 => ub[o..o + 2].copy_from_slice(&half::bf16::from_f32(v as f32).to_le_bytes()),
        DType::I32 => ub[o..o + 4].copy_from_slice(&(v as i64 as i32).to_le_bytes()),
        DType::I8 => ub[o] = v as i64 as i8 as u8,
        DType::Bool => ub[o] = v as u8,
        DType::I64 => ub[o..o + 8].copy_from_slice(&(v as i64).to_le_bytes()),
    }
}

/// Spacing of `dt` numbers at `w`.
fn ulp(dt: DType, w: f64) -> f64 {
    let (mant, emin) = match dt {
        DType::F32 => (23, -126),
        DType::F16 => (10, -14),
        DType::BF16 => (7, -126),
        _ => return 0.0,
    };
    let e = if w == 0.0 {
        emin
    } else {
        (w.abs().log2().floor() as i32).max(emin)
    };
    2f64.powi(e - mant)
}

/// What one output element must be.
#[derive(Clone, Copy, Debug)]
enum Want {
    /// Exact raw bits.
    Bits(u32),
    /// Exact value (ints, bools).
    Val(f64),
    /// The ideal value `v`, with allowed error `ulps` f32 ulps or `abs`.
    F { v: f64, ulps: f64, abs: f64 },
}

fn check(dt: DType, got: f64, got_raw: u32, want: Want) -> bool {
    match want {
        Want::Bits(b) => got_raw == b,
        Want::Val(v) => got == v,
        Want::F { v, ulps, abs } => {
            if v.is_nan() {
                return got.is_nan();
            }
            let w = round_to(dt, v);
            if w.is_infinite() || got.is_infinite() {
                // Allow an approximation to land just past the largest finite value.
                return got == w
                    || (ulps > 0.0 && (got - v).abs() <= ulps * ulp(DType::F32, v) + ulp(dt, v));
            }
            if got.is_nan() {
                return false;
            }
            let slack = if dt == DType::F32 { 0.5 } else { 1.0 } * ulp(dt, w);
            (got - v).abs() <= ulps * ulp(DType::F32, w) + abs + slack
        }
    }
}

// ---- random data --------------------------------------------------------------------

/// A random value for `dt`, in a domain suited to `op`.
fn value(rng: &mut Rng, dt: DType, op: Opcode) -> f64 {
    match dt {
        DType::Bool => return (rng.below(2)) as f64,
        DType::I8 => return (rng.next() as i8) as f64,
        DType::I32 => {
            return match rng.below(8) {
                0 => [0, 1, -1, i32::MIN, i32::MAX, 7, -7][rng.below(7) as usize] as f64,
                1..=3 => rng.next() as i32 as f64,
                _ => (rng.next() as i32 % 1000) as f64,
            }
        }
        _ => {}
    }
    if rng.below(20) == 0 {
        // Sums and dot products are compared with an f64 reference that does
        // not overflow: no huge values, and no inf/NaN in matmul.
        let s: &[f64] = match op {
            Opcode::Matmul => &[0.0, -0.0, 1.0, -1.0, 0.5],
            Opcode::ReduceSum => &[0.0, -0.0, f64::INFINITY, f64::NAN, 1.0, -2.5],
            _ => &[
                0.0,
                -0.0,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NAN,
                1.0,
                -1.0,
                0.5,
                -2.5,
                1e-30,
                3e38,
            ],
        };
        return s[rng.below(s.len() as u64) as usize];
    }
    use Opcode::*;
    let r = match op {
        Exp => 90.0,
        Log | Sqrt | Rsqrt => {
            return rng.range(0.0, 1.0).powi(3) * 1e4 * if rng.below(10) == 0 { -1.0 } else { 1.0 }
        }
        Tanh | Sigmoid | Silu | GeluErf | Erf => 12.0,
        Sin | Cos => 100.0,
        GeluTanh => 3.0,
        Pow | PowS => 4.0,
        Floor | Ceil | Round => {
            return (rng.range(-50.0, 50.0) * 2.0).round() / 4.0
                + if rng.below(2) == 0 {
                    0.0
                } else {
                    rng.range(-1.0, 1.0)
                }
        }
        Matmul => 2.0,
        _ => 100.0,
    };
    rng.range(-r, r)
}

/// Fills `n` elements of `dt` at `off` with random values for `op`.
fn fill(rng: &mut Rng, ub: &mut [u8], dt: DType, off: u32, n: usize, op: Opcode) {
    for i in 0..n {
        let v = value(rng, dt, op);
        enc(dt, ub, off, i, v);
        if dt == DType::Bool && rng.below(8) == 0 {
            // Non-canonical truth values: any nonzero byte is true.
            ub[off as usize + i] = 1 + rng.below(255) as u8;
        }
    }
}

// ---- the reference interpreter ------------------------------------------------------

fn wrap(dt: DType, v: i64) -> f64 {
    match dt {
        DType::I32 => v as i32 as f64,
        DType::I8 => v as i8 as f64,
        _ => unreachable!(),
    }
}

fn fmax(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

fn fmin(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

fn sig(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// The reference of a unary opcode on a float input (ideal value, ulps, abs).
fn ref_unary_f(op: Opcode, x: f64) -> (f64, f64, f64) {
    use Opcode::*;
    // Inputs are f32 (or narrower) values.
    match op {
        Abs => (x.abs(), 0.0, 0.0),
        Neg => (-x, 0.0, 0.0),
        Relu => (if x <= 0.0 { 0.0 } else { x }, 0.0, 0.0),
        Exp => (x.exp(), 1.0, 0.0),
        Log => (x.ln(), 1.0, 0.0),
        Sqrt => (x.sqrt(), 0.0, 0.0),
        Rsqrt => (1.0 / x.sqrt(), 1.5, 0.0),
        Recip => (1.0 / x, 0.0, 0.0),
        Tanh => (x.tanh(), 2.0, 0.0),
        Sigmoid => (sig(x), 4.0, 3e-45),
        Silu => (
            if x == f64::NEG_INFINITY {
                -0.0
            } else {
                x * sig(x)
            },
            4.0,
            1e-43,
        ),
        GeluTanh => {
            let v = 2.0 * (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
            let r = if x == f64::NEG_INFINITY {
                -0.0
            } else {
                x * sig(v)
            };
            (
                r,
                4.0 + 3.0 * if v.is_finite() { v.abs() } else { 0.0 },
                1e-43,
            )
        }
        GeluErf => (
            if x == f64::NEG_INFINITY {
                -0.0
            } else {
                0.5 * x * libm::erfc(-x / std::f64::consts::SQRT_2)
            },
            4.0,
            1.5e-7 * x.abs().max(1.0),
        ),
        Erf => (libm::erf(x), 2.0, 1e-37),
        // |x| ≥ 2^50 has no phase left: NaN (see `math::sin`).
        Sin | Cos if x.abs() >= 2f64.powi(50) => (f64::NAN, 0.0, 0.0),
        Sin => (x.sin(), 1.0, 0.0),
        Cos => (x.cos(), 1.0, 0.0),
        Floor => (x.floor(), 0.0, 0.0),
        Ceil => (x.ceil(), 0.0, 0.0),
        Round => (x.round_ties_even(), 0.0, 0.0),
        _ => unreachable!("{op:?}"),
    }
}

fn ref_binary_f(op: Opcode, a: f64, b: f64) -> (f64, f64) {
    use Opcode::*;
    // Basic ops in f64 then rounded to f32 are the correctly rounded f32 ops.
    let r = match op {
        Add | AddS => a + b,
        Sub | SubS => a - b,
        RSubS => b - a,
        Mul | MulS => a * b,
        Div | DivS => a / b,
        RDivS => b / a,
        Max | MaxS => fmax(a, b),
        Min | MinS => fmin(a, b),
        Pow | PowS => return ((a as f32 as f64).powf(b as f32 as f64), 1.0),
        _ => unreachable!("{op:?}"),
    };
    (r as f32 as f64, 0.0)
}

fn ref_binary_i(op: Opcode, dt: DType, a: i64, b: i64) -> f64 {
    use Opcode::*;
    let v = match op {
        Add | AddS => a + b,
        Sub | SubS => a - b,
        RSubS => b - a,
        Mul | MulS => a.wrapping_mul(b),
        Div | DivS | RDivS => {
            let (x, y) = if op == RDivS { (b, a) } else { (a, b) };
            if y == 0 {
                0
            } else {
                x / y
            }
        }
        Max | MaxS => a.max(b),
        Min | MinS => a.min(b),
        _ => unreachable!("{op:?}"),
    };
    wrap(dt, v)
}

fn ref_cmp(op: Opcode, a: f64, b: f64) -> bool {
    use Opcode::*;
    match op {
        Eq | EqS => a == b,
        Ne | NeS => a != b,
        Lt | LtS => a < b,
        Le | LeS => a <= b,
        Gt | GtS => a > b,
        Ge | GeS => a >= b,
        _ => unreachable!(),
    }
}

/// Exact `i32 → bf16` rounding (nearest even on 8 significant bits).
fn i32_to_bf16_ref(x: i32) -> f64 {
    let m = (x as i64).unsigned_abs();
    let k = 64 - m.leading_zeros();
    let r = if k <= 8 {
        m
    } else {
        let sh = k - 8;
        let (q, rem, half) = (m >> sh, m & ((1 << sh) - 1), 1u64 << (sh - 1));
        (if rem > half || (rem == half && q & 1 == 1) {
            q + 1
        } else {
            q
        }) << sh
    };
    if x < 0 {
        -(r as f64)
    } else {
        r as f64
    }
}

fn ref_cast(from: DType, to: DType, v: f64) -> Want {
    let out = match to {
        DType::F32 | DType::F16 | DType::BF16 => {
            if from == DType::I32 && to == DType::BF16 {
                i32_to_bf16_ref(v as i32)
            } else {
                round_to(to, v)
            }
        }
        DType::I32 => {
            if from.is_float() {
                v as i32 as f64 // saturating, NaN → 0, truncating
            } else {
                v
            }
        }
        DType::I8 => {
            if from.is_float() {
                v as i8 as f64
            } else {
                v as i64 as i8 as f64
            }
        }
        DType::Bool => (v != 0.0) as u8 as f64,
        // No instruction accepts i64.
        DType::I64 => v,
    };
    if out.is_nan() {
        Want::F {
            v: f64::NAN,
            ulps: 0.0,
            abs: 0.0,
        }
    } else {
        Want::Val(out)
    }
}

/// Offsets and the output of an instruction, for the checker.
struct Out {
    dt: DType,
    off: u32,
    want: Vec<Want>,
}

/// What `instr` must write, computed from the UB before it runs.
fn reference(instr: &Instr, ub: &[u8]) -> Out {
    use Instr as I;
    let unary_f = |dt: DType, op: Opcode, src: u32, n: u32| -> Vec<Want> {
        (0..n as usize)
            .map(|i| {
                let x = dec(dt, ub, src, i);
                if dt.is_float() {
                    let (v, ulps, abs) = ref_unary_f(op, x);
                    Want::F { v, ulps, abs }
                } else {
                    let x = x as i64;
                    Want::Val(match op {
                        Opcode::Abs => wrap(dt, x.abs()),
                        Opcode::Neg => wrap(dt, -x),
                        Opcode::Relu => x.max(0) as f64,
                        Opcode::Not => (x == 0) as u8 as f64,
                        _ => unreachable!(),
                    })
                }
            })
            .collect()
    };
    let binary = |dt: DType,
                  op: Opcode,
                  a: &dyn Fn(usize) -> f64,
                  b: &dyn Fn(usize) -> f64,
                  n: u32|
     -> Vec<Want> {
        (0..n as usize)
            .map(|i| {
                let (x, y) = (a(i), b(i));
                if dt.is_float() {
                    let (v, ulps) = ref_binary_f(op, x, y);
                    Want::F { v, ulps, abs: 0.0 }
                } else if dt == DType::Bool {
                    let (x, y) = (x != 0.0, y != 0.0);
                    Want::Val(if op == Opcode::And { x & y } else { x | y } as u8 as f64)
                } else {
                    Want::Val(ref_binary_i(op, dt, x as i64, y as i64))
                }
            })
            .collect()
    };
    let op = instr.opcode();
    match *instr {
        I::Abs { dt, dst, src, n }
        | I::Neg { dt, dst, src, n }
        | I::Relu { dt, dst, src, n }
        | I::Exp { dt, dst, src, n }
        | I::Log { dt, dst, src, n }
        | I::Sqrt { dt, dst, src, n }
        | I::Rsqrt { dt, dst, src, n }
        | I::Recip { dt, dst, src, n }
        | I::Tanh { dt, dst, src, n }
        | I::Sigmoid { dt, dst, src, n }
        | I::GeluTanh { dt, dst, src, n }
        | I::GeluErf { dt, dst, src, n }
        | I::Silu { dt, dst, src, n }
        | I::Floor { dt, dst, src, n }
        | I::Ceil { dt, dst, src, n }
        | I::Round { dt, dst, src, n }
        | I::Erf { dt, dst, src, n }
        | I::Sin { dt, dst, src, n }
        | I::Cos { dt, dst, src, n }
        | I::Not { dt, dst, src, n } => Out {
            dt,
            off: dst,
            want: unary_f(dt, op, src, n),
        },
        I::IsFinite { dt, dst, src, n } => Out {
            dt: DType::Bool,
            off: dst,
            want: (0..n as usize)
                .map(|i| Want::Val(dec(dt, ub, src, i).is_finite() as u8 as f64))
                .collect(),
        },
        I::Add { dt, dst, a, b, n }
        | I::Sub { dt, dst, a, b, n }
        | I::Mul { dt, dst, a, b, n }
        | I::Div { dt, dst, a, b, n }
        | I::Max { dt, dst, a, b, n }
        | I::Min { dt, dst, a, b, n }
        | I::Pow { dt, dst, a, b, n }
        | I::And { dt, dst, a, b, n }
        | I::Or { dt, dst, a, b, n } => Out {
            dt,
            off: dst,
            want: binary(dt, op, &|i| dec(dt, ub, a, i), &|i| dec(dt, ub, b, i), n),
        },
        I::AddS { dt, dst, a, n, imm }
        | I::SubS { dt, dst, a, n, imm }
        | I::RSubS { dt, dst, a, n, imm }
        | I::MulS { dt, dst, a, n, imm }
        | I::DivS { dt, dst, a, n, imm }
        | I::RDivS { dt, dst, a, n, imm }
        | I::MaxS { dt, dst, a, n, imm }
        | I::MinS { dt, dst, a, n, imm }
        | I::PowS { dt, dst, a, n, imm } => {
            let s = if dt.is_float() {
                imm.as_f32() as f64
            } else {
                imm.as_i32() as f64
            };
            Out {
                dt,
                off: dst,
                want: binary(dt, op, &|i| dec(dt, ub, a, i), &|_| s, n),
            }
        }
        I::Eq { dt, dst, a, b, n }
        | I::Ne { dt, dst, a, b, n }
        | I::Lt { dt, dst, a, b, n }
        | I::Le { dt, dst, a, b, n }
        | I::Gt { dt, dst, a, b, n }
        | I::Ge { dt, dst, a, b, n } => Out {
            dt: DType::Bool,
            off: dst,
            want: (0..n as usize)
                .map(|i| Want::Val(ref_cmp(op, dec(dt, ub, a, i), dec(dt, ub, b, i)) as u8 as f64))
                .collect(),
        },
        I::EqS { dt, dst, a, n, imm }
        | I::NeS { dt, dst, a, n, imm }
        | I::LtS { dt, dst, a, n, imm }
        | I::LeS { dt, dst, a, n, imm }
        | I::GtS { dt, dst, a, n, imm }
        | I::GeS { dt, dst, a, n, imm } => {
            let s = if dt.is_float() {
                imm.as_f32() as f64
            } else {
                imm.as_i32() as f64
            };
            Out {
                dt: DType::Bool,
                off: dst,
                want: (0..n as usize)
                    .map(|i| Want::Val(ref_cmp(op, dec(dt, ub, a, i), s) as u8 as f64))
                    .collect(),
            }
        }
        I::Select {
            dt,
            dst,
            cond,
            a,
            b,
            n,
        } => Out {
            dt,
            off: dst,
            want: (0..n as usize)
                .map(|i| {
                    Want::Bits(if ub[cond as usize + i] != 0 {
                        raw(dt, ub, a, i)
                    } else {
                        raw(dt, ub, b, i)
                    })
                })
                .collect(),
        },
        I::Cast {
            dt,
            to,
            dst,
            src,
            n,
        } => Out {
            dt: to,
            off: dst,
            want: (0..n as usize)
                .map(|i| ref_cast(dt, to, dec(dt, ub, src, i)))
                .collect(),
        },
        I::Copy { dt, dst, src, n } => Out {
            dt,
            off: dst,
            want: (0..n as usize)
                .map(|i| Want::Bits(raw(dt, ub, src, i)))
                .collect(),
        },
        I::Fill { dt, dst, n, imm } => {
            let v = if dt.is_float() {
                round_to(dt, imm.as_f32() as f64)
            } else {
                round_to(dt, imm.as_i32() as f64)
            };
            let w = if v.is_nan() {
                Want::F {
                    v,
                    ulps: 0.0,
                    abs: 0.0,
                }
            } else {
                Want::Val(v)
            };
            Out {
                dt,
                off: dst,
                want: vec![w; n as usize],
            }
        }
        I::Iota { dt, dst, n, start } => Out {
            dt,
            off: dst,
            want: (0..n as usize)
                .map(|i| {
                    if dt.is_float() {
                        let v = (start.as_f32() + i as f32) as f64;
                        if v.is_nan() {
                            Want::F {
                                v,
                                ulps: 0.0,
                                abs: 0.0,
                            }
                        } else {
                            Want::Val(round_to(dt, v))
                        }
                    } else {
                        Want::Val(wrap(dt, start.as_i32() as i64 + i as i64))
                    }
                })
                .collect(),
        },
        I::ReduceSum {
            dt,
            axis,
            dst,
            src,
            rows,
            cols,
        }
        | I::ReduceMax {
            dt,
            axis,
            dst,
            src,
            rows,
            cols,
        }
        | I::ReduceMin {
            dt,
            axis,
            dst,
            src,
            rows,
            cols,
        } => {
            let (outer, inner) = match axis {
                Axis::Rows => (cols, rows),
                Axis::Cols => (rows, cols),
            };
            let at = |o: u32, i: u32| match axis {
                Axis::Rows => dec(dt, ub, src, (i * cols + o) as usize),
                Axis::Cols => dec(dt, ub, src, (o * cols + i) as usize),
            };
            let want = (0..outer)
                .map(|o| {
                    let xs: Vec<f64> = (0..inner).map(|i| at(o, i)).collect();
                    match op {
                        Opcode::ReduceSum if dt.is_float() => {
                            let s: f64 = xs.iter().sum();
                            let mag: f64 = xs.iter().map(|x| x.abs()).sum();
                            let v = if xs.iter().any(|x| x.is_nan())
                                || (mag.is_infinite() && s.is_nan())
                            {
                                f64::NAN
                            } else {
                                s
                            };
                            Want::F {
                                v,
                                ulps: 0.0,
                                abs: mag * inner as f64 * 2f64.powi(-24),
                            }
                        }
                        Opcode::ReduceSum => {
                            Want::Val(wrap(dt, xs.iter().map(|x| *x as i64).sum()))
                        }
                        Opcode::ReduceMax => {
                            let v = xs.iter().fold(f64::NEG_INFINITY, |a, x| fmax(a, *x));
                            // Empty integer folds store the i32 identity, wrapped.
                            let v = if !dt.is_float() && inner == 0 {
                                wrap(dt, i32::MIN as i64)
                            } else {
                                v
                            };
                            if v.is_nan() {
                                Want::F {
                                    v,
                                    ulps: 0.0,
                                    abs: 0.0,
                                }
                            } else {
                                Want::Val(v)
                            }
                        }
                        _ => {
                            let v = xs.iter().fold(f64::INFINITY, |a, x| fmin(a, *x));
                            let v = if !dt.is_float() && inner == 0 {
                                wrap(dt, i32::MAX as i64)
                            } else {
                                v
                            };
                            if v.is_nan() {
                                Want::F {
                                    v,
                                    ulps: 0.0,
                                    abs: 0.0,
                                }
                            } else {
                                Want::Val(v)
                            }
                        }
                    }
                })
                .collect();
            Out { dt, off: dst, want }
        }
        I::BroadcastRow {
            dt,
            dst,
            src,
            rows,
            cols,
        } => Out {
            dt,
            off: dst,
            want: (0..rows * cols)
                .map(|e| Want::Bits(raw(dt, ub, src, (e % cols) as usize)))
                .collect(),
        },
        I::BroadcastCol {
            dt,
            dst,
            src,
            rows,
            cols,
        } => Out {
            dt,
            off: dst,
            want: (0..rows * cols)
                .map(|e| Want::Bits(raw(dt, ub, src, (e / cols) as usize)))
                .collect(),
        },
        I::Transpose {
            dt,
            dst,
            src,
            rows,
            cols,
        } => Out {
            dt,
            off: dst,
            // dst[j][i] = src[i][j]; dst is cols × rows.
            want: (0..rows * cols)
                .map(|e| {
                    let (j, i) = (e / rows, e % rows);
                    Want::Bits(raw(dt, ub, src, (i * cols + j) as usize))
                })
                .collect(),
        },
        I::Matmul {
            dt,
            out,
            flags,
            dst,
            a,
            b,
            m,
            n,
            k,
        } => {
            let av = |i: u32, p: u32| {
                dec(
                    dt,
                    ub,
                    a,
                    if flags.trans_a { p * m + i } else { i * k + p } as usize,
                )
            };
            let bv = |p: u32, j: u32| {
                dec(
                    dt,
                    ub,
                    b,
                    if flags.trans_b { j * k + p } else { p * n + j } as usize,
                )
            };
            let want = (0..m * n)
                .map(|e| {
                    let (i, j) = (e / n, e % n);
                    let old = if flags.accumulate {
                        dec(out, ub, dst, e as usize)
                    } else {
                        0.0
                    };
                    if dt == DType::I8 {
                        let s: i64 = (0..k).map(|p| av(i, p) as i64 * bv(p, j) as i64).sum();
                        Want::Val(wrap(DType::I32, s + old as i64))
                    } else {
                        let s: f64 = (0..k).map(|p| av(i, p) * bv(p, j)).sum::<f64>() + old;
                        let mag: f64 =
                            (0..k).map(|p| (av(i, p) * bv(p, j)).abs()).sum::<f64>() + old.abs();
                        Want::F {
                            v: s,
                            ulps: 0.0,
                            abs: mag * (k + 2) as f64 * 2f64.powi(-24),
                        }
                    }
                })
                .collect();
            Out {
                dt: out,
                off: dst,
                want,
            }
        }
        I::Load { .. }
        | I::Gather { .. }
        | I::Store { .. }
        | I::StoreAdd { .. }
        | I::Barrier {}
        | I::End {} => {
            unreachable!()
        }
    }
}

/// Runs `instr` on `ub` (after `prep` fills it) and checks the destination
/// against the reference and every other byte for being untouched.
fn run_check(instr: &Instr, ub: &mut Ub, what: &str) {
    let op = resolve(instr).unwrap_or_else(|| panic!("{what}: no handler"));
    let before = ub.bytes().to_vec();
    let out = reference(instr, &before);
    op.run(ub.bytes());
    // Every copy of the handler this CPU can run (baseline, AVX2, AVX-512)
    // gives the same bits as the one for its widest extensions, up to the
    // sign and payload of NaNs, which Rust leaves unspecified. (Without
    // extensions, e.g. on aarch64, there is one copy.)
    for simd in Simd::supported().filter(|&s| s != Simd::detect()) {
        let mut base = before.clone();
        resolve_with(instr, simd)
            .unwrap_or_else(|| panic!("{what}: no {} handler", simd.name()))
            .run(&mut base);
        for i in 0..out.want.len() {
            let (b, w) = (
                raw(out.dt, &base, out.off, i),
                raw(out.dt, ub.bytes(), out.off, i),
            );
            let nan = |u: &[u8]| dec(out.dt, u, out.off, i).is_nan();
            assert!(
                b == w || (nan(&base) && nan(ub.bytes())),
                "{what}: element {i}: {} handler {b:#x}, {} handler {w:#x}",
                simd.name(),
                Simd::detect().name()
            );
        }
    }
    let after = ub.bytes();
    let size = out.dt.size() as usize;
    let (lo, hi) = (out.off as usize, out.off as usize + out.want.len() * size);
    assert!(
        after[..lo] == before[..lo] && after[hi..] == before[hi..],
        "{what}: wrote outside dst"
    );
    let mut bad = 0;
    for (i, w) in out.want.iter().enumerate() {
        let got = dec(out.dt, after, out.off, i);
        let got_raw = raw(out.dt, after, out.off, i);
        if !check(out.dt, got, got_raw, *w) {
            if bad < 5 {
                std::eprintln!("{what}: element {i}: got {got:e} ({got_raw:#x}), want {w:?}");
            }
            bad += 1;
        }
    }
    assert!(
        bad == 0,
        "{what}: {bad} of {} elements wrong",
        out.want.len()
    );
}

// ---- element-wise opcodes -------------------------------------------------------------

/// The dtypes `op`'s (first) dtype field allows.
fn allowed(op: Opcode) -> Vec<DType> {
    let mut rng = Rng(7);
    let mut next = || rng.next();
    let mut out = Vec::new();
    for dt in DType::INSTR {
        let mut ok = true;
        let mut first = true;
        let i = with_dtype(Instr::sample(op, &mut next), dt, dt);
        i.dtype_rules(|_, d, set| {
            if first {
                ok = set.contains(d);
                first = false;
            }
        });
        if ok {
            out.push(dt);
        }
    }
    out
}

/// `instr` with its dtype fields set to `dt` (and `to`/`out` to `to`).
fn with_dtype(instr: Instr, dt: DType, to: DType) -> Instr {
    use Instr as I;
    let mut i = instr;
    macro_rules! set {
        ($($v:ident),*) => {
            match &mut i {
                $( I::$v { dt: d, .. } => *d = dt, )*
                I::Cast { dt: d, to: t, .. } => { *d = dt; *t = to; }
                I::Matmul { dt: d, out: o, .. } => { *d = dt; *o = to; }
                _ => {}
            }
        };
    }
    set!(
        Abs,
        Neg,
        Exp,
        Log,
        Sqrt,
        Rsqrt,
        Recip,
        Tanh,
        Sigmoid,
        Relu,
        GeluTanh,
        GeluErf,
        Silu,
        Floor,
        Ceil,
        Round,
        Erf,
        Sin,
        Cos,
        Not,
        IsFinite,
        Add,
        Sub,
        Mul,
        Div,
        Max,
        Min,
        Pow,
        And,
        Or,
        AddS,
        SubS,
        RSubS,
        MulS,
        DivS,
        RDivS,
        MaxS,
        MinS,
        PowS,
        Eq,
        Ne,
        Lt,
        Le,
        Gt,
        Ge,
        EqS,
        NeS,
        LtS,
        LeS,
        GtS,
        GeS,
        Select,
        Copy,
        Fill,
        Iota,
        ReduceSum,
        ReduceMax,
        ReduceMin,
        BroadcastRow,
        BroadcastCol,
        Transpose,
        Load,
        Gather,
        Store,
        StoreAdd
    );
    i
}

/// A region size that holds `n` elements of any dtype, 64-byte aligned.
fn region(n: u32) -> u32 {
    (n * 4).next_multiple_of(64)
}

/// Builds an element-wise instruction of `op` over `n` elements with the
/// given operand slots (0 = dst region, 1 = a, 2 = b, 3 = c); equal slots
/// alias.
fn ew_instr(op: Opcode, dt: DType, n: u32, slots: [u32; 4], imm: Scalar) -> Instr {
    use Instr as I;
    let r = region(n);
    let [d, a, b, c] = slots.map(|s| s * r);
    let mut rng = Rng(3);
    let mut next = || rng.next();
    match with_dtype(Instr::sample(op, &mut next), dt, dt) {
        I::Select { dt, .. } => I::Select {
            dt,
            dst: d,
            cond: a,
            a: b,
            b: c,
            n,
        },
        mut x => {
            set_fields(&mut x, d, a, b, n, imm);
            x
        }
    }
}

/// Sets the common element-wise fields of `i`.
fn set_fields(i: &mut Instr, d: u32, a_: u32, b_: u32, n_: u32, imm_: Scalar) {
    use Instr as I;
    macro_rules! un { ($($v:ident),*) => { match i {
        $( I::$v { dst, src, n, .. } => { *dst = d; *src = a_; *n = n_; } )*
        I::Cast { dst, src, n, .. } | I::Copy { dst, src, n, .. } => { *dst = d; *src = a_; *n = n_; }
        I::Add { dst, a, b, n, .. } | I::Sub { dst, a, b, n, .. } | I::Mul { dst, a, b, n, .. }
        | I::Div { dst, a, b, n, .. } | I::Max { dst, a, b, n, .. } | I::Min { dst, a, b, n, .. }
        | I::Pow { dst, a, b, n, .. } | I::And { dst, a, b, n, .. } | I::Or { dst, a, b, n, .. }
        | I::Eq { dst, a, b, n, .. } | I::Ne { dst, a, b, n, .. } | I::Lt { dst, a, b, n, .. }
        | I::Le { dst, a, b, n, .. } | I::Gt { dst, a, b, n, .. } | I::Ge { dst, a, b, n, .. } => {
            *dst = d; *a = a_; *b = b_; *n = n_;
        }
        I::AddS { dst, a, n, imm, .. } | I::SubS { dst, a, n, imm, .. } | I::RSubS { dst, a, n, imm, .. }
        | I::MulS { dst, a, n, imm, .. } | I::DivS { dst, a, n, imm, .. } | I::RDivS { dst, a, n, imm, .. }
        | I::MaxS { dst, a, n, imm, .. } | I::MinS { dst, a, n, imm, .. } | I::PowS { dst, a, n, imm, .. }
        | I::EqS { dst, a, n, imm, .. } | I::NeS { dst, a, n, imm, .. } | I::LtS { dst, a, n, imm, .. }
        | I::LeS { dst, a, n, imm, .. } | I::GtS { dst, a, n, imm, .. } | I::GeS { dst, a, n, imm, .. } => {
            *dst = d; *a = a_; *n = n_; *imm = imm_;
        }
        I::Fill { dst, n, imm, .. } => { *dst = d; *n = n_; *imm = imm_; }
        I::Iota { dst, n, start, .. } => { *dst = d; *n = n_; *start = imm_; }
        _ => unreachable!(),
    } } }
    un!(
        Abs, Neg, Exp, Log, Sqrt, Rsqrt, Recip, Tanh, Sigmoid, Relu, GeluTanh, GeluErf, Silu,
        Floor, Ceil, Round, Erf, Sin, Cos, Not, IsFinite
    );
}

/// A random immediate for `op` on `dt`.
fn imm_for(rng: &mut Rng, op: Opcode, dt: DType) -> Scalar {
    if dt.is_float() {
        let v = match rng.below(6) {
            0 => 2.0,
            1 => 0.0,
            2 => -3.0,
            _ => value(rng, DType::F32, op) as f32,
        };
        Scalar::f32(v)
    } else {
        Scalar::i32(match rng.below(6) {
            0 => 0,
            1 => -1,
            2 => 300,
            _ => value(rng, DType::I32, op) as i32,
        })
    }
}

/// Element-wise opcodes, dtypes of their operands by slot (dst, a, b, c).
fn ew_slots(op: Opcode, dt: DType) -> Option<[DType; 4]> {
    use Opcode::*;
    let b = DType::Bool;
    Some(match op {
        Abs | Neg | Exp | Log | Sqrt | Rsqrt | Recip | Tanh | Sigmoid | Relu | GeluTanh
        | GeluErf | Silu | Floor | Ceil | Round | Erf | Sin | Cos | Not | AddS | SubS | RSubS
        | MulS | DivS | RDivS | MaxS | MinS | PowS | Copy => [dt, dt, dt, dt],
        IsFinite | EqS | NeS | LtS | LeS | GtS | GeS => [b, dt, dt, dt],
        Add | Sub | Mul | Div | Max | Min | Pow | And | Or => [dt, dt, dt, dt],
        Eq | Ne | Lt | Le | Gt | Ge => [b, dt, dt, dt],
        Select => [dt, b, dt, dt],
        Fill | Iota => [dt, dt, dt, dt],
        _ => return None,
    })
}

/// Aliasing patterns (dst, a, b, c slots) allowed for the operand dtypes:
/// identical ranges need equal element sizes.
fn patterns(op: Opcode, ty: [DType; 4]) -> Vec<[u32; 4]> {
    let mut out = vec![[0, 1, 2, 3]];
    let ins = match op {
        Opcode::Fill | Opcode::Iota => 0,
        Opcode::Select => 3,
        o if ew_slots(o, DType::F32).is_some() && o.fields().contains(&"b") => 2,
        _ => 1,
    };
    let cand: &[[u32; 4]] = &[
        [0, 0, 2, 3],
        [0, 1, 0, 3],
        [0, 1, 1, 3],
        [0, 0, 0, 3],
        [0, 1, 2, 0],
        [0, 0, 0, 0],
        [0, 1, 1, 1],
    ];
    for p in cand {
        // Slots beyond the op's inputs must keep their own region.
        if (1..4).any(|s| s > ins && p[s] != s as u32) {
            continue;
        }
        // Every pair sharing a region must have equal element sizes.
        let ok = (0..=ins).all(|x| (0..=ins).all(|y| p[x] != p[y] || ty[x].size() == ty[y].size()));
        if ok && !out.contains(p) {
            out.push(*p);
        }
    }
    out
}

#[test]
fn elementwise_all_dtypes_sizes_and_aliasing() {
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    for &op in Opcode::ALL {
        let Some(_) = ew_slots(op, DType::F32) else {
            continue;
        };
        if op == Opcode::Cast {
            continue;
        }
        for dt in allowed(op) {
            let ty = ew_slots(op, dt).unwrap();
            for &n in &SIZES {
                for p in patterns(op, ty) {
                    let imm = imm_for(&mut rng, op, dt);
                    let instr = ew_instr(op, dt, n, p, imm);
                    let mut ub = Ub::new(region(n) as usize * 4);
                    // Random bytes everywhere, then typed values per input slot.
                    for b in ub.bytes().iter_mut() {
                        *b = rng.next() as u8;
                    }
                    // Each region gets values of the first input slot that uses it
                    // (or of dst when no input does).
                    for r in 0..4u32 {
                        let owner = (1..4).find(|&s| p[s] == r).or((r == 0).then_some(0));
                        if let Some(s) = owner {
                            fill(&mut rng, ub.bytes(), ty[s], r * region(n), n as usize, op);
                        }
                    }
                    run_check(
                        &instr,
                        &mut ub,
                        &format!("{} {dt} n={n} slots={p:?}", op.mnemonic()),
                    );
                }
            }
        }
    }
}

#[test]
fn cast_all_pairs_sizes_and_aliasing() {
    let mut rng = Rng(0xca57);
    for from in DType::INSTR {
        for to in DType::INSTR {
            for &n in &SIZES {
                let mut slots = vec![[0u32, 1, 2, 3]];
                if from.size() == to.size() {
                    slots.push([0, 0, 2, 3]);
                }
                for p in slots {
                    let instr = Instr::Cast {
                        dt: from,
                        to,
                        dst: p[0] * region(n),
                        src: p[1] * region(n),
                        n,
                    };
                    let mut ub = Ub::new(region(n) as usize * 2);
                    for b in ub.bytes().iter_mut() {
                        *b = rng.next() as u8;
                    }
                    for i in 0..n as usize {
                        let v = match (from, rng.below(4)) {
                            (DType::F32 | DType::F16 | DType::BF16, 0) => rng.range(-3e9, 3e9),
                            (DType::F32 | DType::F16 | DType::BF16, 1) => rng.range(-200.0, 200.0),
                            _ => value(&mut rng, from, Opcode::Cast),
                        };
                        enc(from, ub.bytes(), p[1] * region(n), i, v);
                    }
                    run_check(
                        &instr,
                        &mut ub,
                        &format!("cast {from}->{to} n={n} slots={p:?}"),
                    );
                }
            }
        }
    }
}

// ---- 2-D and cube ----------------------------------------------------------------------

const SHAPES: [(u32, u32); 9] = [
    (1, 1),
    (1, 17),
    (17, 1),
    (3, 5),
    (7, 33),
    (16, 16),
    (33, 130),
    (5, 300),
    (130, 9),
];

#[test]
fn reductions() {
    let mut rng = Rng(0x7ed);
    for op in [Opcode::ReduceSum, Opcode::ReduceMax, Opcode::ReduceMin] {
        for dt in allowed(op) {
            for (rows, cols) in SHAPES.into_iter().chain([(0, 5), (5, 0)]) {
                for axis in [Axis::Rows, Axis::Cols] {
                    let src = region(rows.max(1) * cols.max(1)) * 2;
                    let (dst, srco) = (0, src / 2);
                    let instr = match op {
                        Opcode::ReduceSum => Instr::ReduceSum {
                            dt,
                            axis,
                            dst,
                            src: srco,
                            rows,
                            cols,
                        },
                        Opcode::ReduceMax => Instr::ReduceMax {
                            dt,
                            axis,
                            dst,
                            src: srco,
                            rows,
                            cols,
                        },
                        _ => Instr::ReduceMin {
                            dt,
                            axis,
                            dst,
                            src: srco,
                            rows,
                            cols,
                        },
                    };
                    let mut ub = Ub::new(src as usize);
                    fill(&mut rng, ub.bytes(), dt, srco, (rows * cols) as usize, op);
                    run_check(
                        &instr,
                        &mut ub,
                        &format!("{} {dt} {axis:?} {rows}x{cols}", op.mnemonic()),
                    );
                }
            }
        }
    }
}

#[test]
fn broadcast_and_transpose() {
    let mut rng = Rng(0xb4c);
    for dt in DType::INSTR {
        for (rows, cols) in SHAPES
            .into_iter()
            .chain([(0, 3), (3, 0), (64, 64), (9, 8), (8, 9)])
        {
            let big = region(rows * cols).max(64);
            for op in [
                Opcode::BroadcastRow,
                Opcode::BroadcastCol,
                Opcode::Transpose,
            ] {
                let (dst, src) = (0, big);
                let instr = match op {
                    Opcode::BroadcastRow => Instr::BroadcastRow {
                        dt,
                        dst,
                        src,
                        rows,
                        cols,
                    },
                    Opcode::BroadcastCol => Instr::BroadcastCol {
                        dt,
                        dst,
                        src,
                        rows,
                        cols,
                    },
                    _ => Instr::Transpose {
                        dt,
                        dst,
                        src,
                        rows,
                        cols,
                    },
                };
                let mut ub = Ub::new(big as usize * 2);
                for b in ub.bytes().iter_mut() {
                    *b = rng.next() as u8;
                }
                run_check(
                    &instr,
                    &mut ub,
                    &format!("{} {dt} {rows}x{cols}", op.mnemonic()),
                );
            }
        }
    }
}

#[test]
fn matmul_all_pairs_flags_and_edges() {
    let mut rng = Rng(0x3a7);
    let pairs = [
        (DType::F32, DType::F32),
        (DType::F32, DType::F16),
        (DType::F32, DType::BF16),
        (DType::F16, DType::F32),
        (DType::F16, DType::F16),
        (DType::F16, DType::BF16),
        (DType::BF16, DType::F32),
        (DType::BF16, DType::F16),
        (DType::BF16, DType::BF16),
        (DType::I8, DType::I32),
    ];
    let dims = [
        (1, 1, 1),
        (3, 5, 7),
        (4, 8, 64),
        (33, 31, 65),
        (37, 70, 130),
        (2, 9, 0),
        (64, 40, 3),
        // Across the host's 64 × 128 blocks: partial blocks in both
        // directions, a partial micro-tile and a partial depth slice.
        (130, 137, 70),
    ];
    for (dt, out) in pairs {
        for &(m, n, k) in &dims {
            for fl in 0..8u64 {
                let flags = MmFlags {
                    trans_a: fl & 1 != 0,
                    trans_b: fl & 2 != 0,
                    accumulate: fl & 4 != 0,
                };
                let r = |e: u32| (e.max(1) * 4).next_multiple_of(64);
                let (dst, a, b) = (0, r(m * n), r(m * n) + r(m * k));
                let total = b + r(k * n);
                let instr = Instr::Matmul {
                    dt,
                    out,
                    flags,
                    dst,
                    a,
                    b,
                    m,
                    n,
                    k,
                };
                let mut ub = Ub::new(total as usize);
                fill(
                    &mut rng,
                    ub.bytes(),
                    out,
                    dst,
                    (m * n) as usize,
                    Opcode::Matmul,
                );
                fill(
                    &mut rng,
                    ub.bytes(),
                    dt,
                    a,
                    (m * k) as usize,
                    Opcode::Matmul,
                );
                fill(
                    &mut rng,
                    ub.bytes(),
                    dt,
                    b,
                    (k * n) as usize,
                    Opcode::Matmul,
                );
                run_check(
                    &instr,
                    &mut ub,
                    &format!("matmul {dt}->{out} {m}x{n}x{k} {flags:?}"),
                );
            }
        }
    }
}

// ---- coverage --------------------------------------------------------------------------

/// `resolve` gives a handler exactly for the vector and cube opcodes with
/// dtypes the table allows, and covers every allowed dtype combination.
#[test]
fn resolve_covers_every_vector_and_cube_opcode() {
    let mut rng = Rng(0xc0fe);
    for &op in Opcode::ALL {
        let ub_only = matches!(op.pipe(), Pipe::Vector | Pipe::Cube);
        let mut seen: Vec<Vec<DType>> = Vec::new();
        let mut combos: Vec<Vec<DType>> = Vec::new();
        for _ in 0..3000 {
            let instr = Instr::sample(op, &mut || rng.next());
            let mut ok = true;
            let mut dts = Vec::new();
            instr.dtype_rules(|_, d, set| {
                ok &= set.contains(d);
                dts.push(d);
            });
            if let Instr::Matmul { dt, out, .. } = instr {
                ok &= if dt == DType::I8 {
                    out == DType::I32
                } else {
                    out.is_float()
                };
            }
            if !combos.contains(&dts) {
                combos.push(dts.clone());
            }
            let r = resolve(&instr);
            if !ub_only {
                assert!(
                    r.is_none(),
                    "{}: GM/control opcodes are not UB-only",
                    op.mnemonic()
                );
                continue;
            }
            assert_eq!(r.is_some(), ok, "{} {dts:?}", op.mnemonic());
            if ok && !seen.contains(&dts) {
                seen.push(dts);
            }
        }
        if ub_only {
            // Every allowed combination was produced by sampling and resolved.
            let expect = match op {
                Opcode::Matmul => 10,
                Opcode::Cast => 36,
                _ => allowed(op).len(),
            };
            assert_eq!(
                seen.len(),
                expect,
                "{}: combinations {seen:?}",
                op.mnemonic()
            );
        }
    }
}

/// Out-of-range or partially overlapping operands (rejected by the
/// verifier) make handlers do nothing instead of panicking.
#[test]
fn bad_operands_do_nothing() {
    let mut rng = Rng(0xbad);
    for &op in Opcode::ALL {
        if !matches!(op.pipe(), Pipe::Vector | Pipe::Cube) {
            continue;
        }
        for _ in 0..200 {
            let mut instr = Instr::sample(op, &mut || rng.next());
            // Keep sizes small but offsets anywhere near the UB.
            shrink(&mut instr, &mut rng);
            if let Some(h) = resolve(&instr) {
                let mut ub = Ub::new(1024);
                h.run(ub.bytes());
                let mut odd = Ub::new(1024 + 64);
                h.run(&mut odd.bytes()[1..1000]);
            }
        }
    }
}

fn shrink(i: &mut Instr, rng: &mut Rng) {
    let mut small = |x: &mut u32, lim: u64| *x = rng.below(lim) as u32;
    use Instr as I;
    match i {
        I::ReduceSum {
            dst,
            src,
            rows,
            cols,
            ..
        }
        | I::ReduceMax {
            dst,
            src,
            rows,
            cols,
            ..
        }
        | I::ReduceMin {
            dst,
            src,
            rows,
            cols,
            ..
        }
        | I::BroadcastRow {
            dst,
            src,
            rows,
            cols,
            ..
        }
        | I::BroadcastCol {
            dst,
            src,
            rows,
            cols,
            ..
        }
        | I::Transpose {
            dst,
            src,
            rows,
            cols,
            ..
        } => {
            small(dst, 1100);
            small(src, 1100);
            small(rows, 40);
            small(cols, 40);
        }
        I::Matmul {
            dst, a, b, m, n, k, ..
        } => {
            small(dst, 1100);
            small(a, 1100);
            small(b, 1100);
            small(m, 20);
            small(n, 20);
            small(k, 20);
        }
        I::Select {
            dst, cond, a, b, n, ..
        } => {
            small(dst, 1100);
            small(cond, 1100);
            small(a, 1100);
            small(b, 1100);
            small(n, 300);
        }
        _ => {
            let (mut d, mut a, mut b, mut n) = (0, 0, 0, 0);
            small(&mut d, 1100);
            small(&mut a, 1100);
            small(&mut b, 1100);
            small(&mut n, 300);
            set_fields(i, d, a, b, n, Scalar(rng.next() as u32));
        }
    }
}

// ---- superinstructions ---------------------------------------------------------------

/// The softmax superinstruction (`x − v[r]`, `exp` in place, sum along
/// columns) gives the bytes of the three handlers it replaces, in every
/// tier this CPU has, with its sums over `v` or apart; with operands that
/// break its rules (sums one element into `v`, misaligned, out of UB) it
/// writes nothing.
#[test]
fn col_exp_sum_matches_its_three_handlers() {
    use super::{binary_col_handler, col_exp_sum_handler, BinKind, UbArgs};
    let mut rng = Rng(0x5f7);
    for (rows, cols) in [(1, 1), (3, 7), (4, 96), (5, 200), (21, 768), (70, 33)] {
        let tile = rows * cols * 4;
        let (x, v) = (0u32, tile);
        for s in [v, v + rows * 4 + 64] {
            let mut ub = Ub::new((v + rows * 8 + 256) as usize);
            for (i, b) in ub.bytes().chunks_exact_mut(4).enumerate() {
                let u = (rng.next() >> 40) as f32 / (1u64 << 24) as f32;
                let f = if (i as u32) < rows * cols {
                    80.0 * u - 40.0
                } else {
                    6.0 * u - 3.0
                };
                b.copy_from_slice(&f.to_le_bytes());
            }
            let before = ub.bytes().to_vec();
            // Aligned copies of the starting UB.
            let copy = || {
                let mut c = Ub::new(before.len());
                c.bytes().copy_from_slice(&before);
                c
            };
            // The three handlers.
            let mut want = copy();
            let want = want.bytes();
            let bc = binary_col_handler(Simd::detect(), BinKind::Sub, DType::F32, false).unwrap();
            bc(
                want,
                &UbArgs {
                    dst: x,
                    a: x,
                    b: v,
                    n: rows,
                    cols,
                    ..UbArgs::default()
                },
            );
            let n = rows * cols;
            resolve(&Instr::Exp {
                dt: DType::F32,
                dst: x,
                src: x,
                n,
            })
            .unwrap()
            .run(want);
            resolve(&Instr::ReduceSum {
                dt: DType::F32,
                axis: Axis::Cols,
                dst: s,
                src: x,
                rows,
                cols,
            })
            .unwrap()
            .run(want);
            let args = UbArgs {
                dst: x,
                a: x,
                b: v,
                c: s,
                n: rows,
                cols,
                ..UbArgs::default()
            };
            for simd in Simd::supported() {
                let h = col_exp_sum_handler(simd, BinKind::Sub, DType::F32, false).unwrap();
                let mut got = copy();
                h(got.bytes(), &args);
                assert!(
                    got.bytes() == &*want,
                    "{rows}x{cols} sums at {s}: {} tier differs",
                    simd.name()
                );
                // Rule breakers leave the UB alone.
                let bad = [
                    UbArgs { c: v + 4, ..args },
                    UbArgs { c: v + 2, ..args },
                    UbArgs { c: x, ..args },
                    UbArgs { b: x, ..args },
                    UbArgs {
                        c: before.len() as u32,
                        ..args
                    },
                    UbArgs {
                        n: rows + 1000,
                        ..args
                    },
                ];
                for (k, b) in bad.iter().enumerate() {
                    if rows == 1 && k == 0 {
                        continue; // one row: v + 4 is past `v`, apart from it
                    }
                    let mut got = copy();
                    h(got.bytes(), b);
                    assert!(
                        got.bytes() == &before[..],
                        "{rows}x{cols}: bad operands {k} wrote"
                    );
                }
            }
        }
    }
    assert!(col_exp_sum_handler(Simd::detect(), BinKind::Add, DType::F32, false).is_none());
    assert!(col_exp_sum_handler(Simd::detect(), BinKind::Sub, DType::F16, false).is_none());
}

/// Float max/min along columns split NaN tracking off the accumulator
/// chain (`RedOp::SPLIT`): a NaN anywhere in a row (main part or tail, for
/// every accumulator count) still makes the row's result NaN, infinities
/// still win, and rows without NaN give the plain max/min.
#[test]
fn split_max_min_propagate_nan() {
    let mut rng = Rng(0x4a4);
    for cols in [5u32, 40, 64, 100, 128, 200, 768] {
        let rows = 6u32;
        let n = (rows * cols) as usize;
        for (k, op) in [Opcode::ReduceMax, Opcode::ReduceMin]
            .into_iter()
            .enumerate()
        {
            let mut v: Vec<f32> = (0..n)
                .map(|_| ((rng.next() >> 40) as f32 / (1u64 << 24) as f32) * 20.0 - 10.0)
                .collect();
            // Row 0 clean; row 1 NaN at its first element; row 2 at its
            // last (a tail element when the row has one); row 3 an infinity
            // of the winning sign; row 4 a NaN and that infinity; row 5 a
            // NaN in the middle.
            let c = cols as usize;
            let win = if k == 0 {
                f32::INFINITY
            } else {
                f32::NEG_INFINITY
            };
            v[c] = f32::NAN;
            v[3 * c - 1] = f32::NAN;
            v[3 * c + c / 2] = win;
            v[4 * c + 1 % c] = win;
            v[4 * c + c - 1] = f32::NAN;
            v[5 * c + c / 2] = f32::NAN;
            let src = region(n as u32);
            let mut ub = Ub::new(src as usize + n * 4 + 64);
            ub.bytes()[src as usize..src as usize + n * 4].copy_from_slice(v.as_bytes());
            // Along the rows, each column is a fold: the NaNs above land in
            // columns 0, c − 1 and c / 2, the infinities in c / 2 and 1 % c.
            for axis in [Axis::Cols, Axis::Rows] {
                let (dt, dst) = (DType::F32, 0);
                let instr = [
                    Instr::ReduceMax {
                        dt,
                        axis,
                        dst,
                        src,
                        rows,
                        cols,
                    },
                    Instr::ReduceMin {
                        dt,
                        axis,
                        dst,
                        src,
                        rows,
                        cols,
                    },
                ][k];
                let lines: Vec<Vec<f32>> = match axis {
                    Axis::Cols => v.chunks(c).map(|r| r.to_vec()).collect(),
                    Axis::Rows => (0..c)
                        .map(|j| v.iter().skip(j).step_by(c).cloned().collect())
                        .collect(),
                };
                for simd in Simd::supported() {
                    let mut u = Ub::new(ub.0.len() * 64);
                    u.bytes()[..ub.bytes().len()].copy_from_slice(ub.bytes());
                    resolve_with(&instr, simd).unwrap().run(u.bytes());
                    for (r, row) in lines.iter().enumerate() {
                        let got =
                            f32::from_le_bytes(u.bytes()[r * 4..r * 4 + 4].try_into().unwrap());
                        let what =
                            format!("{op:?} {axis:?} {} {rows}x{cols} line {r}", simd.name());
                        if row.iter().any(|x| x.is_nan()) {
                            assert!(got.is_nan(), "{what}: {got}");
                        } else {
                            let want = if k == 0 {
                                row.iter().cloned().fold(f32::NEG_INFINITY, f32::max)
                            } else {
                                row.iter().cloned().fold(f32::INFINITY, f32::min)
                            };
                            assert_eq!(got, want, "{what}");
                        }
                    }
                }
            }
        }
    }
}
