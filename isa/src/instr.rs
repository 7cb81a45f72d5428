//! The instruction set, defined once.
//!
//! One row per opcode: code, variant, mnemonic, pipe, operand fields (in
//! encoding order), the dtype rule of each dtype field, the UB ranges read and
//! written (`read(addr, elements, dtype)`), and the global-memory access of
//! loads and stores. Everything else (enum, encoder, decoder, verifier access
//! rules, assembler text) is generated from this table by `define_isa!`.
//!
//! UB addresses are byte offsets; element counts `n`, `rows`, `cols`, `m`, `k`
//! are elements. Element-wise instructions run over `n` elements regardless
//! of tails: a tile's padding lanes are computed and never stored.

use crate::access::GmPattern;
use crate::dtype::DType;
use crate::operand::{Axis, GridDim, MmFlags, PadMode, Scalar};
use crate::table::define_isa;

/// One operand field of an opcode, as the table declares it
/// ([`Opcode::operands`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldInfo {
    /// The field's name (its assembler key).
    pub name: &'static str,
    /// The field's Rust type (`u32`, `DType`, `Scalar`, …).
    pub ty: &'static str,
    /// Packed width in bits: 8, 16, 32 or 64.
    pub bits: u32,
}

/// Elements of a `rows × cols` box as u64 (never overflows).
const fn box_elems(rows: u32, cols: u32) -> u64 {
    rows as u64 * cols as u64
}

/// Elements of the folded side of a reduction.
const fn reduced_elems(axis: Axis, rows: u32, cols: u32) -> u64 {
    match axis {
        Axis::Rows => cols as u64,
        Axis::Cols => rows as u64,
    }
}

/// Elements of a matmul operand: `a` is m×k, `b` is k×n (transposes keep the count).
const fn mm_elems(x: u32, y: u32) -> u64 {
    x as u64 * y as u64
}

#[allow(clippy::too_many_arguments)]
const fn pattern(
    dtype: DType,
    buf: u8,
    row_dim: GridDim,
    col_dim: GridDim,
    ub: u32,
    pitch: u32,
    rows: u32,
    cols: u32,
    row_total: u32,
    col_total: u32,
    base: u64,
    step: [u64; 3],
    row_stride: u64,
    col_stride: u64,
) -> GmPattern {
    GmPattern {
        buf,
        dtype,
        row_dim,
        col_dim,
        ub,
        pitch,
        rows,
        cols,
        row_total,
        col_total,
        base,
        step,
        row_stride,
        col_stride,
    }
}

define_isa! {
    // ---- vector unary: dst[i] = f(src[i]) --------------------------------
    /// `|x|`.
    0x10 Abs "abs" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in NUM] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `-x`.
    0x11 Neg "neg" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in NUM] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `e^x`.
    0x12 Exp "exp" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// Natural logarithm.
    0x13 Log "log" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// Square root.
    0x14 Sqrt "sqrt" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `1 / sqrt(x)`.
    0x15 Rsqrt "rsqrt" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `1 / x`.
    0x16 Recip "recip" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// Hyperbolic tangent.
    0x17 Tanh "tanh" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `1 / (1 + e^-x)`.
    0x18 Sigmoid "sigmoid" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `max(x, 0)`.
    0x19 Relu "relu" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in NUM] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// GELU, tanh approximation: `x/2 · (1 + tanh(√(2/π)(x + 0.044715x³)))`.
    0x1a GeluTanh "gelu_tanh" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// GELU, exact form: `x/2 · (1 + erf(x/√2))`.
    0x1b GeluErf "gelu_erf" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `x · sigmoid(x)`.
    0x1c Silu "silu" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// Round toward −∞.
    0x1d Floor "floor" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// Round toward +∞.
    0x1e Ceil "ceil" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// Round to nearest, ties to even.
    0x1f Round "round" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// Error function.
    0x20 Erf "erf" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// Logical not of a bool tile.
    0x21 Not "not" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in BOOL] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `dst[i] = src[i]` is neither infinite nor NaN; `dst` is bool.
    0x22 IsFinite "isfinite" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(src, n as u64, dt), write(dst, n as u64, DType::Bool)] gm [];
    /// Sine (radians): ≤ 1 ulp for `|x| ≤ 2^27`, NaN for `|x| ≥ 2^50` and ±inf.
    0x23 Sin "sin" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// Cosine (radians): ≤ 1 ulp for `|x| ≤ 2^27`, NaN for `|x| ≥ 2^50` and ±inf.
    0x24 Cos "cos" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];

    // ---- vector binary: dst[i] = a[i] op b[i] -----------------------------
    /// `a + b` (integers wrap).
    0x30 Add "add" Vector { dt: DType, dst: u32, a: u32, b: u32, n: u32 }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), read(b, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `a − b` (integers wrap).
    0x31 Sub "sub" Vector { dt: DType, dst: u32, a: u32, b: u32, n: u32 }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), read(b, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `a · b` (integers wrap).
    0x32 Mul "mul" Vector { dt: DType, dst: u32, a: u32, b: u32, n: u32 }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), read(b, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `a / b` (integer division truncates; division by zero gives 0).
    0x33 Div "div" Vector { dt: DType, dst: u32, a: u32, b: u32, n: u32 }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), read(b, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `max(a, b)`.
    0x34 Max "max" Vector { dt: DType, dst: u32, a: u32, b: u32, n: u32 }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), read(b, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `min(a, b)`.
    0x35 Min "min" Vector { dt: DType, dst: u32, a: u32, b: u32, n: u32 }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), read(b, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `a ^ b`.
    0x36 Pow "pow" Vector { dt: DType, dst: u32, a: u32, b: u32, n: u32 }
        dtypes [dt in FLOAT] ub [read(a, n as u64, dt), read(b, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// Logical and of bool tiles.
    0x37 And "and" Vector { dt: DType, dst: u32, a: u32, b: u32, n: u32 }
        dtypes [dt in BOOL] ub [read(a, n as u64, dt), read(b, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// Logical or of bool tiles.
    0x38 Or "or" Vector { dt: DType, dst: u32, a: u32, b: u32, n: u32 }
        dtypes [dt in BOOL] ub [read(a, n as u64, dt), read(b, n as u64, dt), write(dst, n as u64, dt)] gm [];

    // ---- vector with scalar: dst[i] = a[i] op imm -------------------------
    /// `a + imm`.
    0x40 AddS "adds" Vector { dt: DType, dst: u32, a: u32, n: u32, imm: Scalar }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `a − imm`.
    0x41 SubS "subs" Vector { dt: DType, dst: u32, a: u32, n: u32, imm: Scalar }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `imm − a`.
    0x42 RSubS "rsubs" Vector { dt: DType, dst: u32, a: u32, n: u32, imm: Scalar }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `a · imm`.
    0x43 MulS "muls" Vector { dt: DType, dst: u32, a: u32, n: u32, imm: Scalar }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `a / imm`.
    0x44 DivS "divs" Vector { dt: DType, dst: u32, a: u32, n: u32, imm: Scalar }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `imm / a`.
    0x45 RDivS "rdivs" Vector { dt: DType, dst: u32, a: u32, n: u32, imm: Scalar }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `max(a, imm)`.
    0x46 MaxS "maxs" Vector { dt: DType, dst: u32, a: u32, n: u32, imm: Scalar }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `min(a, imm)`.
    0x47 MinS "mins" Vector { dt: DType, dst: u32, a: u32, n: u32, imm: Scalar }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `a ^ imm`.
    0x48 PowS "pows" Vector { dt: DType, dst: u32, a: u32, n: u32, imm: Scalar }
        dtypes [dt in FLOAT] ub [read(a, n as u64, dt), write(dst, n as u64, dt)] gm [];

    // ---- comparisons and select: dst is bool -----------------------------
    /// `a == b`.
    0x50 Eq "eq" Vector { dt: DType, dst: u32, a: u32, b: u32, n: u32 }
        dtypes [dt in ANY] ub [read(a, n as u64, dt), read(b, n as u64, dt), write(dst, n as u64, DType::Bool)] gm [];
    /// `a != b`.
    0x51 Ne "ne" Vector { dt: DType, dst: u32, a: u32, b: u32, n: u32 }
        dtypes [dt in ANY] ub [read(a, n as u64, dt), read(b, n as u64, dt), write(dst, n as u64, DType::Bool)] gm [];
    /// `a < b`.
    0x52 Lt "lt" Vector { dt: DType, dst: u32, a: u32, b: u32, n: u32 }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), read(b, n as u64, dt), write(dst, n as u64, DType::Bool)] gm [];
    /// `a <= b`.
    0x53 Le "le" Vector { dt: DType, dst: u32, a: u32, b: u32, n: u32 }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), read(b, n as u64, dt), write(dst, n as u64, DType::Bool)] gm [];
    /// `a > b`.
    0x54 Gt "gt" Vector { dt: DType, dst: u32, a: u32, b: u32, n: u32 }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), read(b, n as u64, dt), write(dst, n as u64, DType::Bool)] gm [];
    /// `a >= b`.
    0x55 Ge "ge" Vector { dt: DType, dst: u32, a: u32, b: u32, n: u32 }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), read(b, n as u64, dt), write(dst, n as u64, DType::Bool)] gm [];
    /// `a == imm`.
    0x58 EqS "eqs" Vector { dt: DType, dst: u32, a: u32, n: u32, imm: Scalar }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), write(dst, n as u64, DType::Bool)] gm [];
    /// `a != imm`.
    0x59 NeS "nes" Vector { dt: DType, dst: u32, a: u32, n: u32, imm: Scalar }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), write(dst, n as u64, DType::Bool)] gm [];
    /// `a < imm`.
    0x5a LtS "lts" Vector { dt: DType, dst: u32, a: u32, n: u32, imm: Scalar }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), write(dst, n as u64, DType::Bool)] gm [];
    /// `a <= imm`.
    0x5b LeS "les" Vector { dt: DType, dst: u32, a: u32, n: u32, imm: Scalar }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), write(dst, n as u64, DType::Bool)] gm [];
    /// `a > imm`.
    0x5c GtS "gts" Vector { dt: DType, dst: u32, a: u32, n: u32, imm: Scalar }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), write(dst, n as u64, DType::Bool)] gm [];
    /// `a >= imm`.
    0x5d GeS "ges" Vector { dt: DType, dst: u32, a: u32, n: u32, imm: Scalar }
        dtypes [dt in NUM] ub [read(a, n as u64, dt), write(dst, n as u64, DType::Bool)] gm [];
    /// `cond ? a : b`.
    0x60 Select "select" Vector { dt: DType, dst: u32, cond: u32, a: u32, b: u32, n: u32 }
        dtypes [dt in ANY]
        ub [read(cond, n as u64, DType::Bool), read(a, n as u64, dt), read(b, n as u64, dt), write(dst, n as u64, dt)] gm [];

    // ---- data movement inside UB -----------------------------------------
    /// Converts `n` elements from `dt` to `to` (floats to ints truncate toward
    /// zero and saturate; NaN becomes 0; to bool is `x != 0`).
    0x61 Cast "cast" Vector { dt: DType, to: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in ANY, to in ANY] ub [read(src, n as u64, dt), write(dst, n as u64, to)] gm [];
    /// `dst[i] = src[i]`.
    0x62 Copy "copy" Vector { dt: DType, dst: u32, src: u32, n: u32 }
        dtypes [dt in ANY] ub [read(src, n as u64, dt), write(dst, n as u64, dt)] gm [];
    /// `dst[i] = imm`.
    0x63 Fill "fill" Vector { dt: DType, dst: u32, n: u32, imm: Scalar }
        dtypes [dt in ANY] ub [write(dst, n as u64, dt)] gm [];
    /// `dst[i] = start + i`.
    0x64 Iota "iota" Vector { dt: DType, dst: u32, n: u32, start: Scalar }
        dtypes [dt in NUM] ub [write(dst, n as u64, dt)] gm [];

    // ---- 2-D tile operations (row-major, `rows × cols`) ------------------
    /// Sum along `axis`.
    0x70 ReduceSum "rsum" Vector { dt: DType, axis: Axis, dst: u32, src: u32, rows: u32, cols: u32 }
        dtypes [dt in NUM]
        ub [read(src, box_elems(rows, cols), dt), write(dst, reduced_elems(axis, rows, cols), dt)] gm [];
    /// Maximum along `axis`.
    0x71 ReduceMax "rmax" Vector { dt: DType, axis: Axis, dst: u32, src: u32, rows: u32, cols: u32 }
        dtypes [dt in NUM]
        ub [read(src, box_elems(rows, cols), dt), write(dst, reduced_elems(axis, rows, cols), dt)] gm [];
    /// Minimum along `axis`.
    0x72 ReduceMin "rmin" Vector { dt: DType, axis: Axis, dst: u32, src: u32, rows: u32, cols: u32 }
        dtypes [dt in NUM]
        ub [read(src, box_elems(rows, cols), dt), write(dst, reduced_elems(axis, rows, cols), dt)] gm [];
    /// Repeats the `1 × cols` row `src` `rows` times.
    0x78 BroadcastRow "brcrow" Vector { dt: DType, dst: u32, src: u32, rows: u32, cols: u32 }
        dtypes [dt in ANY] ub [read(src, cols as u64, dt), write(dst, box_elems(rows, cols), dt)] gm [];
    /// Repeats the `rows × 1` column `src` `cols` times.
    0x79 BroadcastCol "brccol" Vector { dt: DType, dst: u32, src: u32, rows: u32, cols: u32 }
        dtypes [dt in ANY] ub [read(src, rows as u64, dt), write(dst, box_elems(rows, cols), dt)] gm [];
    /// `dst` (`cols × rows`) is the transpose of `src` (`rows × cols`).
    0x7a Transpose "transpose" Vector { dt: DType, dst: u32, src: u32, rows: u32, cols: u32 }
        dtypes [dt in ANY] ub [read(src, box_elems(rows, cols), dt), write(dst, box_elems(rows, cols), dt)] gm [];

    // ---- cube -------------------------------------------------------------
    /// `dst (m×n) [+]= a (m×k) · b (k×n)`, products accumulated in `out`'s
    /// accumulator type (f32 for floats, i32 for i8).
    0x80 Matmul "matmul" Cube {
        dt: DType, out: DType, flags: MmFlags, dst: u32, a: u32, b: u32, m: u32, n: u32, k: u32
    }
        dtypes [dt in MM_IN, out in MM_OUT]
        ub [read(a, mm_elems(m, k), dt), read(b, mm_elems(k, n), dt), write(dst, mm_elems(m, n), out)] gm [];

    // ---- global memory ----------------------------------------------------
    /// Global memory → UB: the tile's box of parameter `buf` into
    /// `rows × pitch` UB elements at `ub`; with `pad=fill` every element of
    /// that box outside the valid region becomes `padv`.
    0x90 Load "load" Load {
        dt: DType, pad: PadMode, buf: u8, row_dim: GridDim, col_dim: GridDim,
        ub: u32, pitch: u32, rows: u32, cols: u32, row_total: u32, col_total: u32, padv: Scalar,
        base: u64, step0: u64, step1: u64, step2: u64, row_stride: u64, col_stride: u64
    }
        dtypes [dt in ANY]
        ub [write(ub, box_elems(rows, pitch), dt)]
        gm [Load(pattern(dt, buf, row_dim, col_dim, ub, pitch, rows, cols, row_total, col_total,
                         base, [step0, step1, step2], row_stride, col_stride))];
    /// Global memory → UB by index (an embedding lookup): row `r` of the
    /// `rows × pitch` UB box at `ub` becomes row `i` of the tile's table in
    /// parameter `buf`, where `i` is the i32 `idx[r]`, plus `extent` when
    /// negative, clamped to `0 ..= extent − 1`; the table has `extent` rows.
    0x91 Gather "gather" Load {
        dt: DType, buf: u8, col_dim: GridDim,
        ub: u32, idx: u32, pitch: u32, rows: u32, cols: u32, extent: u32, col_total: u32,
        base: u64, step0: u64, step1: u64, step2: u64, row_stride: u64, col_stride: u64
    }
        dtypes [dt in ANY]
        ub [read(idx, rows as u64, DType::I32), write(ub, box_elems(rows, pitch), dt)]
        gm [Gather(pattern(dt, buf, GridDim::None, col_dim, ub, pitch, extent, cols, 0, col_total,
                           base, [step0, step1, step2], row_stride, col_stride))];
    /// UB → global memory: the valid region of the tile's box.
    0x98 Store "store" Store {
        dt: DType, buf: u8, row_dim: GridDim, col_dim: GridDim,
        ub: u32, pitch: u32, rows: u32, cols: u32, row_total: u32, col_total: u32,
        base: u64, step0: u64, step1: u64, step2: u64, row_stride: u64, col_stride: u64
    }
        dtypes [dt in ANY]
        ub [read(ub, box_elems(rows, pitch), dt)]
        gm [Store(pattern(dt, buf, row_dim, col_dim, ub, pitch, rows, cols, row_total, col_total,
                          base, [step0, step1, step2], row_stride, col_stride))];
    /// UB → global memory, adding into the destination atomically per element
    /// (for split reductions).
    0x99 StoreAdd "store_add" Store {
        dt: DType, buf: u8, row_dim: GridDim, col_dim: GridDim,
        ub: u32, pitch: u32, rows: u32, cols: u32, row_total: u32, col_total: u32,
        base: u64, step0: u64, step1: u64, step2: u64, row_stride: u64, col_stride: u64
    }
        dtypes [dt in NUM]
        ub [read(ub, box_elems(rows, pitch), dt)]
        gm [StoreAdd(pattern(dt, buf, row_dim, col_dim, ub, pitch, rows, cols, row_total, col_total,
                             base, [step0, step1, step2], row_stride, col_stride))];

    // ---- control ----------------------------------------------------------
    /// Waits until every pipe has drained.
    0xf0 Barrier "barrier" Control {} dtypes [] ub [] gm [];
    /// End of the tile body; must be the last instruction and appear once.
    0xff End "end" Control {} dtypes [] ub [] gm [];
}
