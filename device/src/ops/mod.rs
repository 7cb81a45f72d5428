//! UB-only instruction handlers: element-wise vector ops, 2-D tile ops
//! (reduce, broadcast, transpose) and the cube (matmul).
//!
//! [`resolve`] turns one decoded instruction into a [`UbOp`]: the handler
//! monomorphised for its opcode and dtype plus its operands, so that the
//! per-tile loop is one indirect call per instruction.
//!
//! # Semantics beyond the instruction table
//! - Floats: `f32` arithmetic; `f16`/`bf16` are widened to `f32`, computed,
//!   and rounded back to nearest even. Transcendentals are the
//!   [`crate::math`] approximations (error bounds there).
//! - Integers wrap (`i8` computes in `i32` and keeps the low byte); integer
//!   division by zero gives 0 and `MIN / −1` gives `MIN`.
//! - Immediates are `f32` bits for float dtypes and `i32` bits otherwise;
//!   `i8` ops with an immediate compute in `i32` (`maxs` with 300 gives
//!   300 wrapped to 44; `lts` with 300 is true).
//! - `max`/`min` (and their reductions) propagate NaN.
//! - `relu`: NaN stays NaN, −0 becomes +0.
//! - Bool inputs: any nonzero byte is true; bool outputs are 0 or 1.
//! - `cast`: one rounding everywhere. Float → float widens exactly or
//!   rounds to nearest even; float → int truncates toward zero and
//!   saturates, NaN → 0; int → float rounds to nearest even (`i32 → bf16`
//!   directly, not through `f32`); `i32 → i8` wraps (low byte); anything →
//!   bool is `x != 0` (NaN is true); bool → numeric is 0 or 1.
//! - `fill` converts its immediate like `cast` from `f32` (float dtypes) or
//!   `i32` (others); `iota` computes `start + i` in `f32` / wrapping `i32`.
//! - Reductions of an empty axis give the fold identity (floats: 0, −inf,
//!   +inf; integers: the `i32` identity 0 / `i32::MIN` / `i32::MAX`, wrapped
//!   for `i8`).
//!
//! # Aliasing
//! The verifier guarantees operand ranges of element-wise instructions are
//! identical or disjoint, and of the others disjoint. Handlers split UB
//! around the destination (safe split borrows): identical ranges run in
//! place, anything else (cannot happen after verification) does nothing.
//! No handler panics or touches memory outside `ub`.

mod binary;
mod cast;
mod compare;
mod ew;
mod matmul;
mod norm;
mod rowpipe;
pub mod simd;
mod tile2d;
mod ub;
mod unary;

#[cfg(test)]
mod tests;

use dvm_isa::{Axis, DType, Instr, MmFlags};

use self::binary::{binary, binary_gm, Add, And, Div, Max, Min, Mul, Or, Pow, Square, Sub};
use self::cast::{cast, copy, fill, iota};
use self::compare::{compare, compare_s, isfinite, select, Eq, Ge, Gt, Le, Lt, Ne};
use self::matmul::matmul;
use self::rowpipe::col_map_fold_row;
pub use self::rowpipe::{RowHandler, ScaledRow};
use self::simd::pick;
pub use self::simd::Simd;
use self::tile2d::{
    binary_fold_cols, binary_fold_cols_gm, broadcast_col, broadcast_row, load_reduce_cols,
    reduce_cols, reduce_cols_gm, reduce_rows, transpose, Max as FoldMax, Min as FoldMin, Sum,
};
pub(crate) use self::ub::{range_of, view};
use self::ub::{Bf16, Bool, F16};
use self::unary::{
    binary_col, binary_row, col_map_fold, col_map_fold_gm, scalar, scalar_gm, unary, unary_gm, Abs,
    Ceil, Cos, Erf, Exp, Floor, GeluErf, GeluTanh, Log, Neg, Not, Recip, Relu, Round, Rsqrt,
    Sigmoid, Silu, Sin, Sqrt, Tanh,
};

/// Operands of a UB-only instruction, in byte offsets and element counts.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UbArgs {
    /// Destination byte offset.
    pub dst: u32,
    /// First source byte offset (select: `cond`).
    pub a: u32,
    /// Second source byte offset (select: the `a` value operand).
    pub b: u32,
    /// Third source byte offset (select: the `b` value operand).
    pub c: u32,
    /// Element count, or rows (2-D), or m (matmul).
    pub n: u32,
    /// Columns (2-D), or n (matmul).
    pub cols: u32,
    /// k (matmul).
    pub k: u32,
    /// Scalar immediate bits (`imm`, `start`).
    pub imm: u32,
    /// Opcode-specific flags: reductions 0 = rows, 1 = cols; matmul
    /// `trans_a | trans_b << 1 | accumulate << 2`.
    pub flags: u32,
}

/// A UB handler: runs one instruction over `ub`.
///
/// Handlers may assume the instruction passed the verifier (ranges inside
/// `ub`, aligned, identical-or-disjoint); they still never panic or touch
/// memory outside `ub` if that were not so — they do nothing instead.
pub type Handler = fn(ub: &mut [u8], args: &UbArgs);

/// An element-wise handler whose operands are in global memory: `dst`
/// (written) and the sources `a` and `b` (`b` unused by one-source ops),
/// `args.n` elements each, disjoint. For load-forwarded bodies (see
/// [`crate::predecode`]); the same arithmetic as the UB handler, so the
/// same bytes. Does nothing when a length or alignment is off.
pub type GmHandler = fn(dst: &mut [u8], a: &[u8], b: &[u8], args: &UbArgs);

/// A [`GmHandler`] and how many sources it reads (`args.a`, then
/// `args.b`).
#[derive(Clone, Copy)]
pub struct GmOp {
    /// The handler.
    pub handler: GmHandler,
    /// 1 (`a`) or 2 (`a`, `b`).
    pub sources: u8,
    /// Bytes per element of every operand.
    pub size: u8,
    /// Element counts of the operands.
    pub shape: GmShape,
    /// For a fold along the columns: the fold fused with the load of its
    /// source, `handler(ub, box, _, args)` with `ub` the whole UB and `box`
    /// the loaded tile in global memory (`crate::loadfold`).
    pub load: Option<GmHandler>,
}

/// Element counts of a [`GmOp`]'s operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GmShape {
    /// Element-wise: `args.n` elements each.
    Ewise,
    /// A fold along the columns: sources `args.n × args.cols`, destination
    /// `args.n`.
    FoldCols,
}

impl GmShape {
    /// Elements of each source and of the destination under `args`.
    pub fn elems(self, args: &UbArgs) -> (u64, u64) {
        let n = args.n as u64;
        match self {
            GmShape::Ewise => (n, n),
            GmShape::FoldCols => (n * args.cols as u64, n),
        }
    }
}

/// A UB-only instruction resolved to its handler.
#[derive(Clone, Copy)]
pub struct UbOp {
    /// The handler.
    pub handler: Handler,
    /// Its operands.
    pub args: UbArgs,
    /// The same operation over global memory, for the element-wise unary,
    /// binary and with-scalar opcodes and the folds along columns over
    /// numeric dtypes ([`resolve_gm`]).
    pub gm: Option<GmOp>,
    /// What the predecoder's peephole pass may fuse it with.
    pub peep: Peep,
    /// The op with its source (`args.a`, a whole tile it overwrites in
    /// place) read from that tile's load in global memory instead of UB:
    /// `handler(ub, box, _, args)`, for the loaded tile `box`
    /// (`crate::loadfold`; the softmax superinstruction).
    pub from_gm: Option<GmHandler>,
    /// [`UbOp::from_gm`] one row at a time, storing a scaled row on the
    /// way (the softmax superinstruction; `crate::loadfold::plan_rows`).
    pub from_gm_row: Option<RowHandler>,
    /// The op with both sources (`args.a`, `args.b`, whole tiles) read
    /// from their loads in global memory instead of UB: `handler(ub, x, y,
    /// args)` (`crate::loadfold::plan_pair`; a binary op and the row sums
    /// of its result).
    pub from_gm_pair: Option<GmHandler>,
    /// The UB ranges it reads (each listed, [`Footprint::reads`]) and the
    /// range it writes. Some superinstructions also write outside `write`
    /// (the softmax superinstruction its row sums, a binary op with its
    /// row sums those, a norm's middle its squares and sums): a write
    /// left out only makes later liveness scans more conservative.
    pub foot: Footprint,
}

/// What the predecoder's peephole pass (`crate::peephole`) knows of an
/// instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peep {
    /// Nothing to fuse.
    None,
    /// `brccol` of elements of this dtype.
    BroadcastCol(DType),
    /// `brcrow` of elements of this dtype.
    BroadcastRow(DType),
    /// An element-wise binary op over numeric dtypes.
    Binary(BinKind, DType),
    /// The superinstruction of a `brccol` and a binary op
    /// ([`binary_col_handler`]); `true` when the column is the first operand.
    BinaryCol(BinKind, DType, bool),
    /// The superinstruction of a `brcrow` and a binary op
    /// ([`binary_row_handler`]); `true` when the row is the first operand.
    BinaryRow(BinKind, DType, bool),
    /// The superinstruction of a binary op and the sums along the columns
    /// of its result ([`binary_sum_cols_handler`]).
    BinarySumCols(BinKind, DType),
    /// `exp` of this dtype.
    Exp(DType),
    /// A sum along columns of this dtype.
    SumCols(DType),
    /// Another element-wise unary op of this float dtype: each element of
    /// its result depends only on the element at the same index.
    Unary(DType),
    /// A softmax's middle: `x − v[r]`, `exp` and the row sums
    /// ([`col_exp_sum_handler`]; its arguments as `unary::col_map_fold`
    /// reads them).
    SoftmaxMiddle,
    /// A norm's middle ([`center_sq_sum_handler`]; its arguments as
    /// `norm::center_sq_sum` reads them).
    Center,
    /// A norm's tail in place ([`scale_affine_handler`]; its arguments as
    /// `norm::scale_affine` reads them).
    Affine,
}

/// The binary ops a column broadcast can feed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinKind {
    /// `a + b`.
    Add,
    /// `a − b`.
    Sub,
    /// `a · b`.
    Mul,
    /// `a / b`.
    Div,
    /// `max(a, b)`.
    Max,
    /// `min(a, b)`.
    Min,
}

/// Read ranges a [`Footprint`] lists one by one; more widen the last one.
pub const FOOT_READS: usize = 4;

/// UB byte ranges `(start, end)` an instruction touches: the ranges it
/// reads (empty slots `(0, 0)`) and the range it writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// The read ranges, each listed once; past [`FOOT_READS`] ranges, the
    /// last one is the hull of the rest (only more conservative).
    pub reads: [(u32, u32); FOOT_READS],
    /// The written range.
    pub write: (u32, u32),
}

impl Footprint {
    /// The footprint of `instr` (from the instruction table's UB access
    /// list; byte offsets saturate, which only widens a range).
    pub fn of(instr: &Instr) -> Footprint {
        let mut f = Footprint::default();
        for acc in instr.ub_accesses().as_slice() {
            let end = acc
                .end()
                .map_or(u32::MAX, |e| e.min(u32::MAX as u64) as u32);
            match acc.kind {
                dvm_isa::AccessKind::Read => f.add_read((acc.addr, end)),
                dvm_isa::AccessKind::Write => f.write = (acc.addr, end),
            }
        }
        // An accumulating matmul also reads what it writes (the table lists
        // its destination as written only).
        if let Instr::Matmul { flags, .. } = instr {
            if flags.accumulate {
                f.add_read(f.write);
            }
        }
        f
    }

    /// Adds read range `r`: nothing for an empty range or one already
    /// listed; past [`FOOT_READS`] ranges, the last one widens to cover it.
    pub fn add_read(&mut self, r: (u32, u32)) {
        if r.0 >= r.1 || self.reads.contains(&r) {
            return;
        }
        if let Some(slot) = self.reads.iter_mut().find(|s| s.0 >= s.1) {
            *slot = r;
        } else {
            let last = &mut self.reads[FOOT_READS - 1];
            *last = (last.0.min(r.0), last.1.max(r.1));
        }
    }

    /// The read ranges of both footprints, and `self`'s write.
    pub fn with_reads_of(mut self, other: &Footprint) -> Footprint {
        for &r in &other.reads {
            self.add_read(r);
        }
        self
    }

    /// Whether some read range shares a byte with `t`.
    pub fn reads_from(&self, t: (u32, u32)) -> bool {
        self.reads.iter().any(|&r| overlaps(r, t))
    }
}

/// Whether two non-empty `(start, end)` byte ranges share a byte.
pub(crate) fn overlaps(a: (u32, u32), b: (u32, u32)) -> bool {
    a.0 < b.1 && b.0 < a.1 && a.0 < a.1 && b.0 < b.1
}

impl core::fmt::Debug for UbOp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("UbOp")
            .field("args", &self.args)
            .finish_non_exhaustive()
    }
}

impl UbOp {
    /// Whether the op can run a row at a time ([`UbOp::row`]).
    #[inline]
    pub fn by_rows(&self) -> bool {
        matches!(self.peep, Peep::Center | Peep::BinarySumCols(..))
    }

    /// The arguments of row `r` alone (`r < n`), for an op whose rows are
    /// independent: row `r` of its result depends only on row `r` of its
    /// tiles and element `r` of its per-row vectors, which the
    /// superinstruction's fusion checked lie apart or identical (a norm's
    /// middle; a binary op and the row sums of its result). Running each
    /// row so writes what running the op once does. `None` for other ops.
    #[inline]
    pub fn row(&self, r: u32) -> Option<UbArgs> {
        let a = &self.args;
        let (size, tiles) = match self.peep {
            // d, x and t; the means and the sums.
            Peep::Center => (4, [true, true, false, false, true]),
            // t, x and y; the sums.
            Peep::BinarySumCols(_, dt) => (dt.size(), [true, true, true, false, false]),
            _ => return None,
        };
        if r >= a.n {
            return None;
        }
        let tile = r.checked_mul(a.cols)?.checked_mul(size)?;
        let vector = r.checked_mul(size)?;
        let at = |off: u32, in_tile: bool| off.checked_add(if in_tile { tile } else { vector });
        Some(UbArgs {
            dst: at(a.dst, tiles[0])?,
            a: at(a.a, tiles[1])?,
            b: at(a.b, tiles[2])?,
            c: at(a.c, tiles[3])?,
            k: at(a.k, tiles[4])?,
            n: 1,
            ..*a
        })
    }

    /// Runs the instruction.
    #[inline]
    pub fn run(&self, ub: &mut [u8]) {
        (self.handler)(ub, &self.args)
    }
}

/// Handler for the float dtypes.
macro_rules! float_h {
    ($s:ident, $dt:expr, $f:ident :: < _ $(, $g:tt)* >) => {
        match $dt {
            DType::F32 => pick!($s, $f::<f32 $(, $g)*>),
            DType::F16 => pick!($s, $f::<F16 $(, $g)*>),
            DType::BF16 => pick!($s, $f::<Bf16 $(, $g)*>),
            _ => return None,
        }
    };
}

/// Handler for the numeric dtypes.
macro_rules! num_h {
    ($s:ident, $dt:expr, $f:ident :: < _ $(, $g:tt)* >) => {
        match $dt {
            DType::I32 => pick!($s, $f::<i32 $(, $g)*>),
            DType::I8 => pick!($s, $f::<i8 $(, $g)*>),
            d => float_h!($s, d, $f::<_ $(, $g)*>),
        }
    };
}

/// [`GmHandler`] for the float (`float`) or numeric (`num`) dtypes, or
/// `None` for another dtype.
macro_rules! gm_h {
    (float, $s:ident, $dt:expr, $f:ident :: < _ $(, $g:tt)* >) => {
        match $dt {
            DType::F32 => Some(pick!(@gm $s, $f::<f32 $(, $g)*>)),
            DType::F16 => Some(pick!(@gm $s, $f::<F16 $(, $g)*>)),
            DType::BF16 => Some(pick!(@gm $s, $f::<Bf16 $(, $g)*>)),
            _ => None,
        }
    };
    (num, $s:ident, $dt:expr, $f:ident :: < _ $(, $g:tt)* >) => {
        match $dt {
            DType::I32 => Some(pick!(@gm $s, $f::<i32 $(, $g)*>)),
            DType::I8 => Some(pick!(@gm $s, $f::<i8 $(, $g)*>)),
            d => gm_h!(float, $s, d, $f::<_ $(, $g)*>),
        }
    };
}

/// Handler for every dtype.
macro_rules! any_h {
    ($s:ident, $dt:expr, $f:ident :: < _ $(, $g:tt)* >) => {
        match $dt {
            DType::Bool => pick!($s, $f::<Bool $(, $g)*>),
            d => num_h!($s, d, $f::<_ $(, $g)*>),
        }
    };
}

/// Handler for the bool dtype.
macro_rules! bool_h {
    ($s:ident, $dt:expr, $f:ident :: < _ $(, $g:tt)* >) => {
        match $dt {
            DType::Bool => pick!($s, $f::<Bool $(, $g)*>),
            _ => return None,
        }
    };
}

/// Handler of a raw data movement by element size.
macro_rules! raw_h {
    ($s:ident, $dt:expr, $f:ident) => {
        match $dt.size() {
            1 => pick!($s, $f::<u8>),
            2 => pick!($s, $f::<u16>),
            _ => pick!($s, $f::<u32>),
        }
    };
}

/// Handler of a vector-with-scalar op over the numeric dtypes.
macro_rules! scalar_h {
    ($s:ident, $dt:expr, $op:ty, $rev:literal) => {
        match $dt {
            DType::F32 => pick!($s, scalar::<f32, $op, $rev>),
            DType::F16 => pick!($s, scalar::<F16, $op, $rev>),
            DType::BF16 => pick!($s, scalar::<Bf16, $op, $rev>),
            DType::I32 => pick!($s, scalar::<i32, $op, $rev>),
            DType::I8 => pick!($s, scalar::<i8, $op, $rev>),
            // The verifier refuses i64 in every instruction.
            DType::Bool | DType::I64 => return None,
        }
    };
}

/// Handler of a reduction for a dtype and axis.
macro_rules! reduce_h {
    ($s:ident, $dt:expr, $axis:expr, $op:ty) => {{
        // The AVX-512 copy of the fold along columns measured slower than
        // its AVX2 copy (see `Simd::at_most_avx2`).
        let r = $s.at_most_avx2();
        match $axis {
            Axis::Rows => num_h!($s, $dt, reduce_rows::<_, $op>),
            Axis::Cols => num_h!(r, $dt, reduce_cols::<_, $op>),
        }
    }};
}

/// The cast handler for a (from, to) pair; `None` for i64, which the
/// verifier refuses in every instruction.
fn cast_handler(simd: Simd, from: DType, to: DType) -> Option<Handler> {
    macro_rules! to {
        ($a:ty) => {
            match to {
                DType::F32 => pick!(simd, cast::<$a, f32>),
                DType::F16 => pick!(simd, cast::<$a, F16>),
                DType::BF16 => pick!(simd, cast::<$a, Bf16>),
                DType::I32 => pick!(simd, cast::<$a, i32>),
                DType::I8 => pick!(simd, cast::<$a, i8>),
                DType::Bool => pick!(simd, cast::<$a, Bool>),
                DType::I64 => return None,
            }
        };
    }
    Some(match from {
        DType::F32 => to!(f32),
        DType::F16 => to!(F16),
        DType::BF16 => to!(Bf16),
        DType::I32 => to!(i32),
        DType::I8 => to!(i8),
        DType::Bool => to!(Bool),
        DType::I64 => return None,
    })
}

/// The matmul handler for an (input, output) pair allowed by the verifier.
fn matmul_handler(simd: Simd, dt: DType, out: DType) -> Option<Handler> {
    // AVX-512 copies take 32-column micro-tiles (`matmul::NR_WIDE`); other
    // targets (the aarch64 firmware) never build them.
    macro_rules! nr {
        ($i:ty, $o:ty) => {{
            #[cfg(target_arch = "x86_64")]
            if simd.avx512() {
                return Some(pick!(simd, matmul::<$i, $o, { matmul::NR_WIDE }>));
            }
            pick!(simd, matmul::<$i, $o, { matmul::NR }>)
        }};
    }
    macro_rules! out {
        ($i:ty) => {
            match out {
                DType::F32 => nr!($i, f32),
                DType::F16 => nr!($i, F16),
                DType::BF16 => nr!($i, Bf16),
                _ => return None,
            }
        };
    }
    Some(match dt {
        DType::F32 => out!(f32),
        DType::F16 => out!(F16),
        DType::BF16 => out!(Bf16),
        DType::I8 if out == DType::I32 => pick!(simd, matmul::<i8, i32, { matmul::NR }>),
        _ => return None,
    })
}

fn mm_bits(f: MmFlags) -> u32 {
    (f.trans_a as u32 * matmul::TRANS_A)
        | (f.trans_b as u32 * matmul::TRANS_B)
        | (f.accumulate as u32 * matmul::ACCUMULATE)
}

/// Resolves a UB-only instruction (vector or cube pipe) to its handler;
/// `None` for loads, stores and control instructions, and for a dtype the
/// opcode does not allow (the verifier rejects those).
pub fn resolve(instr: &Instr) -> Option<UbOp> {
    resolve_with(instr, Simd::detect())
}

/// [`resolve`] with the handlers compiled for `simd` (see [`simd`]); every
/// choice gives bit-identical results.
///
/// This is the device's one dispatch table: one arm per opcode, no
/// catch-all, so an opcode added to the instruction table does not
/// compile until its row here says what its UB handler is, whether it has
/// a global-memory copy for load forwarding ([`UbOp::gm`], `-` for none)
/// and what the peephole pass may fuse it with ([`UbOp::peep`]).
pub fn resolve_with(instr: &Instr, simd: Simd) -> Option<UbOp> {
    let s = simd;
    // As in `reduce_h!`: the fold along columns at most AVX2.
    let r = s.at_most_avx2();
    use Instr as I;
    let un = |dst, src, n| UbArgs {
        dst,
        a: src,
        n,
        ..UbArgs::default()
    };
    let bin = |dst, a, b, n| UbArgs {
        dst,
        a,
        b,
        n,
        ..UbArgs::default()
    };
    let sc = |dst, a, n, imm: dvm_isa::Scalar| UbArgs {
        dst,
        a,
        n,
        imm: imm.0,
        ..UbArgs::default()
    };
    let tile = |dst, src, rows, cols| UbArgs {
        dst,
        a: src,
        n: rows,
        cols,
        ..UbArgs::default()
    };
    let gm_op = |sources: u8, shape: GmShape, dt: DType, h: Option<GmHandler>| {
        h.map(|handler| GmOp {
            handler,
            sources,
            size: dt.size() as u8,
            shape,
            load: None,
        })
    };
    let one = |dt, h| gm_op(1, GmShape::Ewise, dt, h);
    let two = |dt, h| gm_op(2, GmShape::Ewise, dt, h);
    let fold = |dt, h, load: Option<GmHandler>| {
        gm_op(1, GmShape::FoldCols, dt, h).map(|g| GmOp { load, ..g })
    };
    // The global-memory copy of a one-source (`gm1!`) or two-source
    // (`gm2!`) element-wise op over the dtypes of `gm_h!`'s `float` or
    // `num`, or none (`-`).
    macro_rules! gm1 {
        (-, $dt:ident, $($f:tt)*) => { None };
        ($g:ident, $dt:ident, $($f:tt)*) => { one($dt, gm_h!($g, s, $dt, $($f)*)) };
    }
    macro_rules! gm2 {
        (-, $dt:ident, $($f:tt)*) => { None };
        ($g:ident, $dt:ident, $($f:tt)*) => { two($dt, gm_h!($g, s, $dt, $($f)*)) };
    }
    // `dst[i] = f(src[i])`: the UB handler over the dtypes of `$h`, the
    // global-memory copy over those of `$g`, the peephole class.
    macro_rules! unary_op {
        ($h:ident, $g:tt, $f:ident, $dt:ident, $args:expr, $peep:expr) => {
            (
                $h!(s, $dt, unary::<_, $f>),
                $args,
                gm1!($g, $dt, unary_gm::<_, $f>),
                $peep,
            )
        };
    }
    // `dst[i] = a[i] op b[i]`; `fusable` ops feed the peephole pass as
    // `Peep::Binary` (their `BinKind` has the op's name), `-` ones not.
    macro_rules! binary_op {
        ($h:ident, $g:tt, $f:ident, $dt:ident, $args:expr, fusable) => {
            (
                $h!(s, $dt, binary::<_, $f>),
                $args,
                gm2!($g, $dt, binary_gm::<_, $f>),
                Peep::Binary(BinKind::$f, $dt),
            )
        };
        ($h:ident, $g:tt, $f:ident, $dt:ident, $args:expr, -) => {
            (
                $h!(s, $dt, binary::<_, $f>),
                $args,
                gm2!($g, $dt, binary_gm::<_, $f>),
                Peep::None,
            )
        };
    }
    // `dst[i] = a[i] op imm` (`imm op a[i]` when reversed), numeric dtypes.
    macro_rules! scalar_op {
        ($f:ident, $rev:literal, $dt:ident, $args:expr) => {
            (
                scalar_h!(s, $dt, $f, $rev),
                $args,
                gm1!(num, $dt, scalar_gm::<_, $f, $rev>),
                Peep::None,
            )
        };
    }
    // A fold along `$axis` (`flags` 0 rows, 1 columns); along the columns
    // it has a global-memory copy and one fused with its source's load.
    macro_rules! reduce_op {
        ($f:ty, $dt:ident, $axis:ident, $args:expr, $peep:expr) => {
            (
                reduce_h!(s, $dt, $axis, $f),
                UbArgs {
                    flags: $axis as u32,
                    ..$args
                },
                match $axis {
                    Axis::Cols => fold(
                        $dt,
                        gm_h!(num, r, $dt, reduce_cols_gm::<_, $f>),
                        gm_h!(num, r, $dt, load_reduce_cols::<_, $f>),
                    ),
                    Axis::Rows => None,
                },
                $peep,
            )
        };
    }
    // An op with no global-memory copy that the peephole pass leaves alone.
    macro_rules! plain {
        ($h:expr, $args:expr) => {
            ($h, $args, None, Peep::None)
        };
    }
    #[rustfmt::skip]
    let (handler, args, gm, peep): (Handler, UbArgs, Option<GmOp>, Peep) = match *instr {
        // ---- unary: UB dtypes, global-memory dtypes, functor, peephole class
        I::Abs { dt, dst, src, n } => unary_op!(num_h, num, Abs, dt, un(dst, src, n), Peep::None),
        I::Neg { dt, dst, src, n } => unary_op!(num_h, num, Neg, dt, un(dst, src, n), Peep::None),
        I::Relu { dt, dst, src, n } => unary_op!(num_h, num, Relu, dt, un(dst, src, n), Peep::None),
        I::Exp { dt, dst, src, n } => {
            unary_op!(float_h, float, Exp, dt, un(dst, src, n), Peep::Exp(dt))
        }
        I::Log { dt, dst, src, n } => {
            unary_op!(float_h, float, Log, dt, un(dst, src, n), Peep::Unary(dt))
        }
        I::Sqrt { dt, dst, src, n } => {
            unary_op!(float_h, float, Sqrt, dt, un(dst, src, n), Peep::Unary(dt))
        }
        I::Rsqrt { dt, dst, src, n } => {
            unary_op!(float_h, float, Rsqrt, dt, un(dst, src, n), Peep::Unary(dt))
        }
        I::Recip { dt, dst, src, n } => {
            unary_op!(float_h, float, Recip, dt, un(dst, src, n), Peep::Unary(dt))
        }
        I::Tanh { dt, dst, src, n } => {
            unary_op!(float_h, float, Tanh, dt, un(dst, src, n), Peep::Unary(dt))
        }
        I::Sigmoid { dt, dst, src, n } => {
            unary_op!(float_h, float, Sigmoid, dt, un(dst, src, n), Peep::Unary(dt))
        }
        I::GeluTanh { dt, dst, src, n } => {
            unary_op!(float_h, float, GeluTanh, dt, un(dst, src, n), Peep::None)
        }
        I::GeluErf { dt, dst, src, n } => {
            unary_op!(float_h, float, GeluErf, dt, un(dst, src, n), Peep::None)
        }
        I::Silu { dt, dst, src, n } => {
            unary_op!(float_h, float, Silu, dt, un(dst, src, n), Peep::None)
        }
        I::Floor { dt, dst, src, n } => {
            unary_op!(float_h, float, Floor, dt, un(dst, src, n), Peep::None)
        }
        I::Ceil { dt, dst, src, n } => {
            unary_op!(float_h, float, Ceil, dt, un(dst, src, n), Peep::None)
        }
        I::Round { dt, dst, src, n } => {
            unary_op!(float_h, float, Round, dt, un(dst, src, n), Peep::None)
        }
        I::Erf { dt, dst, src, n } => {
            unary_op!(float_h, float, Erf, dt, un(dst, src, n), Peep::None)
        }
        I::Not { dt, dst, src, n } => unary_op!(bool_h, -, Not, dt, un(dst, src, n), Peep::None),
        I::Sin { dt, dst, src, n } => {
            unary_op!(float_h, float, Sin, dt, un(dst, src, n), Peep::None)
        }
        I::Cos { dt, dst, src, n } => {
            unary_op!(float_h, float, Cos, dt, un(dst, src, n), Peep::None)
        }
        I::IsFinite { dt, dst, src, n } => {
            plain!(float_h!(s, dt, isfinite::<_>), un(dst, src, n))
        }
        // ---- binary: UB dtypes, global-memory dtypes, functor, fusable
        I::Add { dt, dst, a, b, n } => binary_op!(num_h, num, Add, dt, bin(dst, a, b, n), fusable),
        I::Sub { dt, dst, a, b, n } => binary_op!(num_h, num, Sub, dt, bin(dst, a, b, n), fusable),
        I::Mul { dt, dst, a, b, n } => binary_op!(num_h, num, Mul, dt, bin(dst, a, b, n), fusable),
        I::Div { dt, dst, a, b, n } => binary_op!(num_h, num, Div, dt, bin(dst, a, b, n), fusable),
        I::Max { dt, dst, a, b, n } => binary_op!(num_h, num, Max, dt, bin(dst, a, b, n), fusable),
        I::Min { dt, dst, a, b, n } => binary_op!(num_h, num, Min, dt, bin(dst, a, b, n), fusable),
        I::Pow { dt, dst, a, b, n } => binary_op!(float_h, float, Pow, dt, bin(dst, a, b, n), -),
        I::And { dt, dst, a, b, n } => binary_op!(bool_h, -, And, dt, bin(dst, a, b, n), -),
        I::Or { dt, dst, a, b, n } => binary_op!(bool_h, -, Or, dt, bin(dst, a, b, n), -),
        // ---- with scalar
        I::AddS { dt, dst, a, n, imm } => scalar_op!(Add, false, dt, sc(dst, a, n, imm)),
        I::SubS { dt, dst, a, n, imm } => scalar_op!(Sub, false, dt, sc(dst, a, n, imm)),
        I::RSubS { dt, dst, a, n, imm } => scalar_op!(Sub, true, dt, sc(dst, a, n, imm)),
        I::MulS { dt, dst, a, n, imm } => scalar_op!(Mul, false, dt, sc(dst, a, n, imm)),
        I::DivS { dt, dst, a, n, imm } => scalar_op!(Div, false, dt, sc(dst, a, n, imm)),
        I::RDivS { dt, dst, a, n, imm } => scalar_op!(Div, true, dt, sc(dst, a, n, imm)),
        I::MaxS { dt, dst, a, n, imm } => scalar_op!(Max, false, dt, sc(dst, a, n, imm)),
        I::MinS { dt, dst, a, n, imm } => scalar_op!(Min, false, dt, sc(dst, a, n, imm)),
        // `x^2` is `x · x` (the same bits as `pow`'s, faster).
        I::PowS { dt, dst, a, n, imm } => {
            let (h, g) = if imm.as_f32() == 2.0 {
                (
                    float_h!(s, dt, scalar::<_, Square, false>),
                    gm1!(float, dt, scalar_gm::<_, Square, false>),
                )
            } else {
                (
                    float_h!(s, dt, scalar::<_, Pow, false>),
                    gm1!(float, dt, scalar_gm::<_, Pow, false>),
                )
            };
            (h, sc(dst, a, n, imm), g, Peep::None)
        }
        // ---- comparisons and select
        I::Eq { dt, dst, a, b, n } => plain!(any_h!(s, dt, compare::<_, Eq>), bin(dst, a, b, n)),
        I::Ne { dt, dst, a, b, n } => plain!(any_h!(s, dt, compare::<_, Ne>), bin(dst, a, b, n)),
        I::Lt { dt, dst, a, b, n } => plain!(num_h!(s, dt, compare::<_, Lt>), bin(dst, a, b, n)),
        I::Le { dt, dst, a, b, n } => plain!(num_h!(s, dt, compare::<_, Le>), bin(dst, a, b, n)),
        I::Gt { dt, dst, a, b, n } => plain!(num_h!(s, dt, compare::<_, Gt>), bin(dst, a, b, n)),
        I::Ge { dt, dst, a, b, n } => plain!(num_h!(s, dt, compare::<_, Ge>), bin(dst, a, b, n)),
        I::EqS { dt, dst, a, n, imm } => {
            plain!(num_h!(s, dt, compare_s::<_, Eq>), sc(dst, a, n, imm))
        }
        I::NeS { dt, dst, a, n, imm } => {
            plain!(num_h!(s, dt, compare_s::<_, Ne>), sc(dst, a, n, imm))
        }
        I::LtS { dt, dst, a, n, imm } => {
            plain!(num_h!(s, dt, compare_s::<_, Lt>), sc(dst, a, n, imm))
        }
        I::LeS { dt, dst, a, n, imm } => {
            plain!(num_h!(s, dt, compare_s::<_, Le>), sc(dst, a, n, imm))
        }
        I::GtS { dt, dst, a, n, imm } => {
            plain!(num_h!(s, dt, compare_s::<_, Gt>), sc(dst, a, n, imm))
        }
        I::GeS { dt, dst, a, n, imm } => {
            plain!(num_h!(s, dt, compare_s::<_, Ge>), sc(dst, a, n, imm))
        }
        I::Select { dt, dst, cond, a, b, n } => plain!(
            raw_h!(s, dt, select),
            UbArgs { dst, a: cond, b: a, c: b, n, ..UbArgs::default() }
        ),
        // ---- data movement
        I::Cast { dt, to, dst, src, n } => plain!(cast_handler(s, dt, to)?, un(dst, src, n)),
        I::Copy { dt, dst, src, n } => plain!(
            match dt.size() {
                1 => pick!(s, copy::<1>),
                2 => pick!(s, copy::<2>),
                _ => pick!(s, copy::<4>),
            },
            un(dst, src, n)
        ),
        I::Fill { dt, dst, n, imm } => plain!(
            any_h!(s, dt, fill::<_>),
            UbArgs { dst, n, imm: imm.0, ..UbArgs::default() }
        ),
        I::Iota { dt, dst, n, start } => plain!(
            num_h!(s, dt, iota::<_>),
            UbArgs { dst, n, imm: start.0, ..UbArgs::default() }
        ),
        // ---- 2-D: a sum along the columns feeds the peephole pass
        I::ReduceSum { dt, axis, dst, src, rows, cols } => reduce_op!(
            Sum,
            dt,
            axis,
            tile(dst, src, rows, cols),
            match axis {
                Axis::Cols => Peep::SumCols(dt),
                Axis::Rows => Peep::None,
            }
        ),
        I::ReduceMax { dt, axis, dst, src, rows, cols } => {
            reduce_op!(FoldMax, dt, axis, tile(dst, src, rows, cols), Peep::None)
        }
        I::ReduceMin { dt, axis, dst, src, rows, cols } => {
            reduce_op!(FoldMin, dt, axis, tile(dst, src, rows, cols), Peep::None)
        }
        I::BroadcastRow { dt, dst, src, rows, cols } => (
            raw_h!(s, dt, broadcast_row),
            tile(dst, src, rows, cols),
            None,
            Peep::BroadcastRow(dt),
        ),
        I::BroadcastCol { dt, dst, src, rows, cols } => (
            raw_h!(s, dt, broadcast_col),
            tile(dst, src, rows, cols),
            None,
            Peep::BroadcastCol(dt),
        ),
        I::Transpose { dt, dst, src, rows, cols } => {
            plain!(raw_h!(s, dt, transpose), tile(dst, src, rows, cols))
        }
        // ---- cube
        I::Matmul { dt, out, flags, dst, a, b, m, n, k } => plain!(
            matmul_handler(s, dt, out)?,
            UbArgs { dst, a, b, n: m, cols: n, k, flags: mm_bits(flags), ..UbArgs::default() }
        ),
        // ---- GM and control: not UB-only (`crate::predecode` lowers them)
        I::Load { .. }
        | I::Gather { .. }
        | I::Store { .. }
        | I::StoreAdd { .. }
        | I::Barrier { .. }
        | I::End { .. } => return None,
    };
    Some(UbOp {
        handler,
        args,
        gm,
        peep,
        from_gm: None,
        from_gm_row: None,
        from_gm_pair: None,
        foot: Footprint::of(instr),
    })
}

/// The [`GmHandler`] of an element-wise unary, binary or with-scalar
/// instruction, or of a fold along the columns, over numeric dtypes
/// ([`UbOp::gm`] of [`resolve_with`]'s op); `None` for every other
/// instruction.
pub fn resolve_gm(instr: &Instr, simd: Simd) -> Option<GmOp> {
    resolve_with(instr, simd)?.gm
}

/// The handler of `op` (a [`Peep::Binary`] of `dt`) with one operand a
/// column broadcast across rows: the column is the second operand, or the
/// first with `col_first` (`unary::binary_col`).
pub fn binary_col_handler(simd: Simd, op: BinKind, dt: DType, col_first: bool) -> Option<Handler> {
    let s = simd;
    Some(by_kind!(op, O => if col_first {
        num_h!(s, dt, binary_col::<_, O, true>)
    } else {
        num_h!(s, dt, binary_col::<_, O, false>)
    }))
}

/// `$body` with the type `$o` the [`BinKind`] `$op`'s binary function.
macro_rules! by_kind {
    ($op:expr, $o:ident => $body:expr) => {
        match $op {
            BinKind::Add => {
                type $o = Add;
                $body
            }
            BinKind::Sub => {
                type $o = Sub;
                $body
            }
            BinKind::Mul => {
                type $o = Mul;
                $body
            }
            BinKind::Div => {
                type $o = Div;
                $body
            }
            BinKind::Max => {
                type $o = Max;
                $body
            }
            BinKind::Min => {
                type $o = Min;
                $body
            }
        }
    };
}
use by_kind;

/// The handler of `brcrow` then binary op `op` (`crate::peephole`): the row
/// first with `row_first` (`unary::binary_row`).
pub fn binary_row_handler(simd: Simd, op: BinKind, dt: DType, row_first: bool) -> Option<Handler> {
    let s = simd;
    Some(by_kind!(op, O => if row_first {
        num_h!(s, dt, binary_row::<_, O, true>)
    } else {
        num_h!(s, dt, binary_row::<_, O, false>)
    }))
}

/// The handler of binary op `op` then a sum along the columns of its
/// result (`crate::peephole`, `tile2d::binary_fold_cols`).
pub fn binary_sum_cols_handler(simd: Simd, op: BinKind, dt: DType) -> Option<Handler> {
    let s = simd;
    Some(by_kind!(op, O => num_h!(s, dt, binary_fold_cols::<_, O, Sum>)))
}

/// [`binary_sum_cols_handler`] with both sources read from their loads in
/// global memory (`tile2d::binary_fold_cols_gm`, `crate::loadfold`): the
/// same bytes.
pub fn binary_sum_cols_gm_handler(simd: Simd, op: BinKind, dt: DType) -> Option<GmHandler> {
    let s = simd;
    by_kind!(op, O => gm_h!(num, s, dt, binary_fold_cols_gm::<_, O, Sum>))
}

/// The handler of a norm's middle (`norm::center_sq_sum`): `x − m[r]`,
/// its squares and their row sums in one pass per row, over `f32`.
pub fn center_sq_sum_handler(simd: Simd) -> Handler {
    let s = simd;
    pick!(s, norm::center_sq_sum)
}

/// The handler of a norm's tail (`norm::scale_affine`): the row scale, the
/// weight row and the bias row in one pass per row, over `f32`.
pub fn scale_affine_handler(simd: Simd) -> Handler {
    let s = simd;
    pick!(s, norm::scale_affine)
}

/// A norm's tail for one row out of place (`norm::affine_row`): `out =
/// ((x · f) · g) + b`, with the bias when the flags (`norm::scale_affine`'s)
/// say so. The map of an affine store
/// (`crate::gm::store_tile_affine`).
pub type AffineRow = fn(out: &mut [f32], x: &[f32], f: f32, g: &[f32], b: &[f32], flags: u32);

/// [`AffineRow`] for this CPU's vector extensions.
pub fn affine_row_fn(simd: Simd) -> AffineRow {
    let s = simd;
    pick!(@affine s, norm::affine_row)
}

pub(crate) use norm::AFFINE_BIAS;

/// The handler of the softmax superinstruction (`unary::col_map_fold`):
/// `binary_col` of `op` with the column second, `exp` in place, and a sum
/// along columns, over `f32`. Only `x − v[r]` has one (`None` for other
/// ops and dtypes): the row maximum's subtraction a softmax compiles to.
pub fn col_exp_sum_handler(simd: Simd, op: BinKind, dt: DType, col_first: bool) -> Option<Handler> {
    let s = simd;
    match (op, dt, col_first) {
        (BinKind::Sub, DType::F32, false) => Some(pick!(s, col_map_fold::<Sub, Exp, Sum, false>)),
        _ => None,
    }
}

/// [`col_exp_sum_handler`] with its source read from a loaded tile in
/// global memory (`unary::col_map_fold_gm`, `crate::loadfold`): the same
/// copies, the same bytes.
pub fn col_exp_sum_gm_handler(
    simd: Simd,
    op: BinKind,
    dt: DType,
    col_first: bool,
) -> Option<GmHandler> {
    let s = simd;
    match (op, dt, col_first) {
        (BinKind::Sub, DType::F32, false) => {
            Some(pick!(@gm s, col_map_fold_gm::<Sub, Exp, Sum, false>))
        }
        _ => None,
    }
}

/// [`col_exp_sum_gm_handler`] one row at a time, weaving the scaled store
/// of another row into its loop (`rowpipe::col_map_fold_row`): the same
/// row, the same bytes.
pub fn col_exp_sum_row_handler(
    simd: Simd,
    op: BinKind,
    dt: DType,
    col_first: bool,
) -> Option<RowHandler> {
    let s = simd;
    match (op, dt, col_first) {
        (BinKind::Sub, DType::F32, false) => {
            Some(pick!(@row s, col_map_fold_row::<Sub, Exp, Sum, false>))
        }
        _ => None,
    }
}
