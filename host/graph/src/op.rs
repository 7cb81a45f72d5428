//! Graph operators.
//!
//! Element-wise operators reuse the instruction set's opcodes: a graph
//! `Unary(Opcode::Exp)` lowers to the `exp` instruction, so adding a vector
//! opcode to the table makes it available in graphs without a new variant.
//! Composites (softmax, layernorm, …) are decomposed into primitives before
//! compilation.

use dvm_isa::{DType, DTypeSet, Instr, Opcode};

/// A reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Σ.
    Sum,
    /// Σ / count.
    Mean,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
}

/// One operator of a graph. Operands are the node's inputs, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A graph input (bound at run time). No operands.
    Input,
    /// A constant tensor, row-major values (converted to the node's dtype).
    /// A single value fills the whole shape, which may then be symbolic.
    Constant(Vec<f64>),
    /// Element-wise unary: a vector-pipe opcode of the `abs`…`cos` rows.
    Unary(Opcode),
    /// Element-wise binary with NumPy broadcasting: `add`…`or`, and the
    /// comparisons `eq`…`ge` (result bool).
    Binary(Opcode),
    /// Element-wise with a scalar: `adds`…`pows`, `eqs`…`ges`.
    Scalar(Opcode, f64),
    /// `where(cond, a, b)` with broadcasting.
    Where,
    /// Conversion to the node's dtype.
    Cast,
    /// Reduction over `axes` (sorted, unique), keeping them as extent 1 when
    /// `keepdims`.
    Reduce {
        /// The reduction.
        op: ReduceOp,
        /// Axes reduced.
        axes: Vec<usize>,
        /// Keep reduced axes as extent 1.
        keepdims: bool,
    },
    /// `softmax` along `axis` (composite).
    Softmax {
        /// Axis.
        axis: usize,
    },
    /// `log_softmax` along `axis` (composite).
    LogSoftmax {
        /// Axis.
        axis: usize,
    },
    /// Layer normalisation over the last axis: operands x, gamma, beta
    /// (composite).
    LayerNorm {
        /// ε.
        eps: f64,
    },
    /// RMS normalisation over the last axis: operands x, gamma (composite).
    RmsNorm {
        /// ε.
        eps: f64,
    },
    /// Matrix product of the last two axes with broadcast batch axes.
    MatMul {
        /// Transpose the last two axes of the first operand.
        trans_a: bool,
        /// Transpose the last two axes of the second operand.
        trans_b: bool,
    },
    /// Reshape to the node's shape (same element count).
    Reshape,
    /// Permutation of the axes: output axis `i` is input axis `perm[i]`.
    Transpose {
        /// The permutation.
        perm: Vec<usize>,
    },
    /// Slice `start..end` with `step` along each listed axis, with Python's
    /// rules: a negative `start`/`end` counts from the end of the axis, and
    /// both are then clamped to `0..=extent` (so `end = i64::MAX` means "to
    /// the end"). Each axis appears at most once.
    Slice {
        /// (axis, start, end, step) with step ≥ 1.
        ranges: Vec<(usize, i64, i64, i64)>,
    },
    /// Concatenation of the operands along `axis`.
    Concat {
        /// Axis.
        axis: usize,
    },
    /// Broadcast to the node's shape.
    Expand,
    /// Removes the listed extent-1 axes.
    Squeeze {
        /// Axes.
        axes: Vec<usize>,
    },
    /// Inserts extent-1 axes at the listed output positions.
    Unsqueeze {
        /// Axes.
        axes: Vec<usize>,
    },
    /// Element-wise with a scalar that is a symbolic dimension, evaluated
    /// when the symbols are bound (same opcodes as [`Op::Scalar`]). The
    /// decomposition of `mean` over a symbolic extent divides by it with
    /// `ScalarDim(DivS, n)`; at concrete shapes it is `Scalar(op, n as f64)`.
    ScalarDim(Opcode, dvm_sym::Dim),
    /// Indices along `axis` of the node's (declared, possibly symbolic)
    /// shape: element `[i0, …, ik, …]` is `ik`. No operands; the dtype is
    /// numeric. ONNX `Range(0, n, 1)` is the rank-1 case.
    Iota {
        /// The axis whose index each element holds.
        axis: usize,
    },
    /// The upper (`upper`) or lower triangle of the last two axes, the
    /// rest zero, as ONNX `Trilu`: element `[…, i, j]` is kept when
    /// `j − i ≥ k` (upper) or `j − i ≤ k` (lower). Composite: `iota`,
    /// `sub`, a comparison and `where`.
    Trilu {
        /// Keep the upper triangle (else the lower).
        upper: bool,
        /// Diagonal offset: 0 is the main diagonal, > 0 above it.
        k: i64,
    },
    /// Rows of the first operand selected along `axis` by the second, an
    /// `i32` or `i64` index tensor computed at run time (ONNX `Gather`, an
    /// embedding lookup): the result has shape
    /// `x.shape[..axis] ++ idx.shape ++ x.shape[axis+1..]`. A negative
    /// index counts from the end of the axis; one outside `-n..n` is an
    /// error of the reference evaluator and is clamped into the axis on
    /// the compiled devices (see the `gather` instruction).
    Gather {
        /// The axis of the first operand the indices select along.
        axis: usize,
    },
    /// 2-D convolution (ONNX `Conv`, PyTorch `conv2d`): operands x
    /// `[N, C, H, W]`, weight `[O, C/groups, KH, KW]` and an optional bias
    /// `[O]`; the result is `[N, O, OH, OW]` with
    /// `OH = ⌊(H + pad_top + pad_bottom − dh·(KH−1) − 1) / sh⌋ + 1` (and so
    /// for W). Composite: im2col (zero padding, one strided slice per
    /// kernel tap, stacked) and a matmul with the reshaped weight.
    Conv2d(Box<Conv2d>),
    /// 2-D max pooling over the last two axes of `[N, C, H, W]`, padding
    /// counting as −∞ (ONNX `MaxPool`). Composite: `max` over the strided
    /// slices of each kernel tap.
    MaxPool2d(Box<Pool2d>),
    /// 2-D average pooling over the last two axes of `[N, C, H, W]` (ONNX
    /// `AveragePool`): the sum over the window divided by the kernel's
    /// size when `count_include_pad`, else by the number of taps inside
    /// the input. Composite: `add` over the strided slices of each tap and
    /// a division.
    AvgPool2d {
        /// The window.
        pool: Box<Pool2d>,
        /// Padded positions count in the divisor.
        count_include_pad: bool,
    },
}

/// The attributes of [`Op::Conv2d`]; the kernel's extents are the
/// weight's last two.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Conv2d {
    /// Strides along H and W (≥ 1).
    pub strides: [usize; 2],
    /// Zero padding: top, left, bottom, right.
    pub pads: [usize; 4],
    /// Dilations along H and W (≥ 1): the taps of the kernel are this far
    /// apart.
    pub dilations: [usize; 2],
    /// Channel groups (≥ 1): input channels `C` and output channels `O`
    /// are split into `groups` equal parts, part `g` of the output
    /// computed from part `g` of the input.
    pub groups: usize,
}

impl Default for Conv2d {
    /// Stride 1, no padding, no dilation, one group.
    fn default() -> Conv2d {
        Conv2d {
            strides: [1, 1],
            pads: [0; 4],
            dilations: [1, 1],
            groups: 1,
        }
    }
}

/// The window of [`Op::MaxPool2d`] and [`Op::AvgPool2d`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pool2d {
    /// Kernel extents along H and W (≥ 1).
    pub kernel: [usize; 2],
    /// Strides along H and W (≥ 1).
    pub strides: [usize; 2],
    /// Padding: top, left, bottom, right.
    pub pads: [usize; 4],
    /// Dilations along H and W (≥ 1).
    pub dilations: [usize; 2],
}

impl Pool2d {
    /// A `kernel` window with stride 1, no padding and no dilation.
    pub fn new(kernel: [usize; 2]) -> Pool2d {
        Pool2d {
            kernel,
            strides: [1, 1],
            pads: [0; 4],
            dilations: [1, 1],
        }
    }
}

/// The output extent of a window sliding over an axis of extent `input`
/// padded by `pad_lo` and `pad_hi`:
/// `⌊(input + pad_lo + pad_hi − dilation·(kernel−1) − 1) / stride⌋ + 1`.
///
/// # Errors
///
/// A message when `kernel`, `stride` or `dilation` is 0, when the
/// arithmetic overflows, or when the dilated kernel is larger than the
/// padded input.
pub fn window_extent(
    input: usize,
    pad_lo: usize,
    pad_hi: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
) -> Result<usize, String> {
    if kernel == 0 || stride == 0 || dilation == 0 {
        return Err(format!(
            "kernel {kernel}, stride {stride} and dilation {dilation} must all be at least 1"
        ));
    }
    let too_big = || "window arithmetic overflows".to_owned();
    let span = dilation
        .checked_mul(kernel - 1)
        .and_then(|s| s.checked_add(1))
        .ok_or_else(too_big)?;
    let padded = input
        .checked_add(pad_lo)
        .and_then(|p| p.checked_add(pad_hi))
        .ok_or_else(too_big)?;
    if span > padded {
        return Err(format!(
            "the kernel spans {span} (kernel {kernel}, dilation {dilation}), more than the \
             padded input's {padded} ({input} + padding {pad_lo} + {pad_hi})"
        ));
    }
    Ok((padded - span) / stride + 1)
}

impl Op {
    /// The operator's name in the graph text format and in error messages:
    /// the opcode mnemonic for element-wise ops (`add`, `exp`, `adds`, …),
    /// otherwise `input`, `constant`, `where`, `cast`, `reduce_sum`,
    /// `reduce_mean`, `reduce_max`, `reduce_min`, `softmax`, `log_softmax`,
    /// `layer_norm`, `rms_norm`, `matmul`, `reshape`, `transpose`, `slice`,
    /// `concat`, `expand`, `squeeze`, `unsqueeze`, `iota`, `trilu`, `gather`,
    /// `conv2d`, `max_pool2d`, `avg_pool2d`.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input => "input",
            Op::Constant(_) => "constant",
            Op::Unary(c) | Op::Binary(c) | Op::Scalar(c, _) | Op::ScalarDim(c, _) => c.mnemonic(),
            Op::Where => "where",
            Op::Cast => "cast",
            Op::Reduce { op, .. } => match op {
                ReduceOp::Sum => "reduce_sum",
                ReduceOp::Mean => "reduce_mean",
                ReduceOp::Max => "reduce_max",
                ReduceOp::Min => "reduce_min",
            },
            Op::Softmax { .. } => "softmax",
            Op::LogSoftmax { .. } => "log_softmax",
            Op::LayerNorm { .. } => "layer_norm",
            Op::RmsNorm { .. } => "rms_norm",
            Op::MatMul { .. } => "matmul",
            Op::Reshape => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::Slice { .. } => "slice",
            Op::Concat { .. } => "concat",
            Op::Expand => "expand",
            Op::Squeeze { .. } => "squeeze",
            Op::Unsqueeze { .. } => "unsqueeze",
            Op::Iota { .. } => "iota",
            Op::Trilu { .. } => "trilu",
            Op::Gather { .. } => "gather",
            Op::Conv2d(_) => "conv2d",
            Op::MaxPool2d(_) => "max_pool2d",
            Op::AvgPool2d { .. } => "avg_pool2d",
        }
    }

    /// True for composites that [`decompose`](crate::decompose)
    /// rewrites into primitives: softmax, log-softmax, layer norm, RMS norm,
    /// mean reductions, trilu, and the 2-D convolution and poolings.
    pub fn is_composite(&self) -> bool {
        matches!(
            self,
            Op::Softmax { .. }
                | Op::Conv2d(_)
                | Op::MaxPool2d(_)
                | Op::AvgPool2d { .. }
                | Op::LogSoftmax { .. }
                | Op::LayerNorm { .. }
                | Op::RmsNorm { .. }
                | Op::Trilu { .. }
                | Op::Reduce {
                    op: ReduceOp::Mean,
                    ..
                }
        )
    }
}

/// The dtype of a node's result given its operand dtypes, when the op fixes
/// it (comparisons give bool; `Cast`, `Input`, `Constant` take the declared
/// one; an `i8` matmul gives `i32`). `first` is the first operand's dtype, so
/// for `Where` (whose first operand is the bool condition) use the second
/// operand's dtype instead; [`Node::dtype`](crate::Node) always holds
/// the answer.
pub fn result_dtype(op: &Op, first: Option<DType>) -> Option<DType> {
    match op {
        Op::Binary(code) | Op::Scalar(code, _) | Op::ScalarDim(code, _) if is_comparison(*code) => {
            Some(DType::Bool)
        }
        Op::Unary(Opcode::IsFinite) => Some(DType::Bool),
        // Integer matmuls accumulate and produce i32.
        Op::MatMul { .. } if first == Some(DType::I8) => Some(DType::I32),
        Op::Input | Op::Constant(_) | Op::Cast | Op::Iota { .. } => None,
        _ => first,
    }
}

/// True for the comparison opcodes (tensor and scalar forms).
pub fn is_comparison(code: Opcode) -> bool {
    use Opcode::*;
    matches!(
        code,
        Eq | Ne | Lt | Le | Gt | Ge | EqS | NeS | LtS | LeS | GtS | GeS
    )
}

/// How an opcode is used in graphs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpcodeKind {
    /// `abs` … `isfinite`, `sin`, `cos`: one tensor operand ([`Op::Unary`]).
    Unary,
    /// `add` … `or`, `eq` … `ge`: two tensor operands ([`Op::Binary`]).
    Binary,
    /// `adds` … `pows`, `eqs` … `ges`: a tensor and a scalar ([`Op::Scalar`]).
    Scalar,
}

/// The graph role of an opcode; `None` for opcodes graphs do not use
/// directly (data movement, reductions, matmul, loads, stores, control).
pub fn opcode_kind(code: Opcode) -> Option<OpcodeKind> {
    match code as u8 {
        0x10..=0x24 => Some(OpcodeKind::Unary),
        0x30..=0x38 | 0x50..=0x55 => Some(OpcodeKind::Binary),
        0x40..=0x48 | 0x58..=0x5d => Some(OpcodeKind::Scalar),
        _ => None,
    }
}

/// The instruction dtype whose rules a graph dtype follows in shape and
/// dtype checks: `i64` those of `i32`, the rest their own.
pub fn device_dtype(dtype: DType) -> DType {
    if dtype == DType::I64 {
        DType::I32
    } else {
        dtype
    }
}

/// `set` accepts graph dtype `dtype`: its [`device_dtype`] is in it.
pub fn accepts_dtype(set: DTypeSet, dtype: DType) -> bool {
    set.contains(device_dtype(dtype))
}

/// The dtypes the instruction set accepts for `code`'s element type (its
/// `dt` field), read from the instruction table (once per process).
pub fn opcode_dtypes(code: Opcode) -> Option<DTypeSet> {
    static TABLE: std::sync::OnceLock<Vec<Option<DTypeSet>>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u8::MAX)
            .map(|b| Opcode::from_u8(b).and_then(read_dtypes))
            .collect()
    })[code as usize]
}

/// [`opcode_dtypes`] read from the instruction table.
fn read_dtypes(code: Opcode) -> Option<DTypeSet> {
    // Zeroed operand words: on the stack for every opcode but the widest.
    let n = code.fields().len();
    let small = [0u64; 16];
    let big;
    let raw: &[u64] = if n <= small.len() {
        &small[..n]
    } else {
        big = vec![0u64; n];
        &big
    };
    let instr = Instr::from_raw(code, raw)?;
    let mut set = None;
    instr.dtype_rules(|field, _, allowed| {
        if field == "dt" {
            set = Some(allowed);
        }
    });
    set
}
