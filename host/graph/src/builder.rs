//! The builder API: one method per operator, each checked when called.
//!
//! Every method appends a node named after its op and id (`add_7`; rename it
//! with [`Graph::rename`]) and returns its id. Axes are `i64` and may be
//! negative (`-1` is the last axis). Errors are those of
//! [`Graph::add_node`]; the graph is unchanged when a method fails.

use dvm_isa::{DType, Opcode};

use super::error::GraphError;
use super::shape::{norm_axis, Ctx};
use super::{Graph, NodeId, Op, ReduceOp};
use dvm_sym::Dim;

macro_rules! unary_ops {
    ($($(#[$doc:meta])* $name:ident => $code:ident;)*) => {$(
        $(#[$doc])*
        ///
        /// # Errors
        ///
        /// [`GraphError::DType`] if the instruction set's rule for the opcode
        /// rejects the operand's dtype, or [`GraphError::UnknownNode`].
        pub fn $name(&mut self, x: NodeId) -> Result<NodeId, GraphError> {
            self.unary(Opcode::$code, x)
        }
    )*};
}

macro_rules! binary_ops {
    ($($(#[$doc:meta])* $name:ident => $code:ident;)*) => {$(
        $(#[$doc])*
        ///
        /// # Errors
        ///
        /// [`GraphError::Broadcast`] if the shapes do not broadcast,
        /// [`GraphError::DTypeMismatch`] / [`GraphError::DType`] for the
        /// dtypes, or [`GraphError::UnknownNode`].
        pub fn $name(&mut self, a: NodeId, b: NodeId) -> Result<NodeId, GraphError> {
            self.binary(Opcode::$code, a, b)
        }
    )*};
}

macro_rules! scalar_ops {
    ($($(#[$doc:meta])* $name:ident => $code:ident;)*) => {$(
        $(#[$doc])*
        ///
        /// # Errors
        ///
        /// [`GraphError::DType`] if the opcode rejects the operand's dtype, or
        /// [`GraphError::UnknownNode`].
        pub fn $name(&mut self, x: NodeId, value: f64) -> Result<NodeId, GraphError> {
            self.scalar(Opcode::$code, x, value)
        }
    )*};
}

impl Graph {
    /// Declares a graph input `name` of `dtype` and symbolic `shape`.
    ///
    /// # Errors
    ///
    /// [`GraphError::InvalidName`] / [`GraphError::DuplicateName`] for the
    /// name, [`GraphError::Invalid`] for a provably negative dimension.
    pub fn input(&mut self, name: &str, dtype: DType, shape: &[Dim]) -> Result<NodeId, GraphError> {
        self.add_node(Some(name), Op::Input, &[], Some(dtype), Some(shape))
    }

    /// A constant of `dtype` and `shape` with row-major `values` (converted
    /// to `dtype` as `cast` converts). A single value fills the whole shape,
    /// which may then be symbolic.
    ///
    /// # Errors
    ///
    /// [`GraphError::Invalid`] if the number of values is neither 1 nor the
    /// shape's element count.
    pub fn constant(
        &mut self,
        dtype: DType,
        shape: &[Dim],
        values: &[f64],
    ) -> Result<NodeId, GraphError> {
        self.add_node(
            None,
            Op::Constant(values.to_vec()),
            &[],
            Some(dtype),
            Some(shape),
        )
    }

    /// A tensor of `shape` filled with `value`.
    ///
    /// # Errors
    ///
    /// As [`Graph::constant`].
    pub fn full(&mut self, dtype: DType, shape: &[Dim], value: f64) -> Result<NodeId, GraphError> {
        self.constant(dtype, shape, &[value])
    }

    /// An element-wise unary opcode (`abs` … `isfinite`, `sin`, `cos`).
    ///
    /// # Errors
    ///
    /// [`GraphError::Invalid`] for an opcode that is not unary,
    /// [`GraphError::DType`] if its dtype rule rejects the operand.
    pub fn unary(&mut self, code: Opcode, x: NodeId) -> Result<NodeId, GraphError> {
        self.add_node(None, Op::Unary(code), &[x], None, None)
    }

    /// An element-wise binary opcode (`add` … `or`, `eq` … `ge`) with NumPy
    /// broadcasting.
    ///
    /// # Errors
    ///
    /// [`GraphError::Invalid`] for an opcode that is not binary;
    /// [`GraphError::Broadcast`], [`GraphError::DTypeMismatch`],
    /// [`GraphError::DType`].
    pub fn binary(&mut self, code: Opcode, a: NodeId, b: NodeId) -> Result<NodeId, GraphError> {
        self.add_node(None, Op::Binary(code), &[a, b], None, None)
    }

    /// An element-wise with-scalar opcode (`adds` … `pows`, `eqs` … `ges`).
    /// The scalar is an instruction immediate: `f32` for float tensors, `i32`
    /// (truncated, saturated) for integer ones.
    ///
    /// # Errors
    ///
    /// [`GraphError::Invalid`] for an opcode that is not with-scalar,
    /// [`GraphError::DType`].
    pub fn scalar(&mut self, code: Opcode, x: NodeId, value: f64) -> Result<NodeId, GraphError> {
        self.add_node(None, Op::Scalar(code, value), &[x], None, None)
    }

    /// A with-scalar opcode whose scalar is the value of a dimension (e.g.
    /// `divs` by `S`), known when the symbols are bound.
    ///
    /// # Errors
    ///
    /// As [`Graph::scalar`].
    pub fn scalar_dim(&mut self, code: Opcode, x: NodeId, dim: &Dim) -> Result<NodeId, GraphError> {
        self.add_node(None, Op::ScalarDim(code, dim.clone()), &[x], None, None)
    }

    crate::for_each_unary_op!(unary_ops);

    crate::for_each_binary_op!(binary_ops);

    crate::for_each_scalar_op!(scalar_ops);

    /// `cond ? a : b` element-wise, with broadcasting of all three.
    ///
    /// # Errors
    ///
    /// [`GraphError::DType`] if `cond` is not bool,
    /// [`GraphError::DTypeMismatch`] if `a` and `b` differ,
    /// [`GraphError::Broadcast`].
    pub fn where_(&mut self, cond: NodeId, a: NodeId, b: NodeId) -> Result<NodeId, GraphError> {
        self.add_node(None, Op::Where, &[cond, a, b], None, None)
    }

    /// Conversion to `dtype` (floats → ints truncate and saturate, NaN → 0;
    /// to bool is `x != 0`).
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownNode`].
    pub fn cast(&mut self, x: NodeId, dtype: DType) -> Result<NodeId, GraphError> {
        self.add_node(None, Op::Cast, &[x], Some(dtype), None)
    }

    /// The would-be name of the next node, for errors raised before it exists.
    fn next_name(&self, op: &str) -> String {
        self.fresh_name(&format!("{op}_{}", self.nodes().len()))
    }

    fn rank(&self, x: NodeId) -> Result<usize, GraphError> {
        Ok(self.check(x)?.shape.len())
    }

    fn norm_axes(
        &self,
        op: &'static str,
        axes: &[i64],
        rank: usize,
    ) -> Result<Vec<usize>, GraphError> {
        let name = self.next_name(op);
        let cx = Ctx { node: &name, op };
        axes.iter().map(|&a| norm_axis(&cx, a, rank)).collect()
    }

    /// Reduction `op` over `axes` (at least one), keeping them as extent 1
    /// when `keepdims`.
    ///
    /// # Errors
    ///
    /// [`GraphError::Invalid`] for no axes, an out-of-range or repeated axis;
    /// [`GraphError::DType`] (sum/max/min need a numeric dtype, mean a float).
    pub fn reduce(
        &mut self,
        x: NodeId,
        op: ReduceOp,
        axes: &[i64],
        keepdims: bool,
    ) -> Result<NodeId, GraphError> {
        let probe = Op::Reduce {
            op,
            axes: Vec::new(),
            keepdims,
        };
        let axes = self.norm_axes(probe.name(), axes, self.rank(x)?)?;
        self.add_node(None, Op::Reduce { op, axes, keepdims }, &[x], None, None)
    }

    /// Sum over `axes`.
    ///
    /// # Errors
    ///
    /// As [`Graph::reduce`].
    pub fn sum(&mut self, x: NodeId, axes: &[i64], keepdims: bool) -> Result<NodeId, GraphError> {
        self.reduce(x, ReduceOp::Sum, axes, keepdims)
    }

    /// Mean over `axes` (composite: a sum divided by the element count).
    ///
    /// # Errors
    ///
    /// As [`Graph::reduce`].
    pub fn mean(&mut self, x: NodeId, axes: &[i64], keepdims: bool) -> Result<NodeId, GraphError> {
        self.reduce(x, ReduceOp::Mean, axes, keepdims)
    }

    /// Maximum over `axes`.
    ///
    /// # Errors
    ///
    /// As [`Graph::reduce`].
    pub fn reduce_max(
        &mut self,
        x: NodeId,
        axes: &[i64],
        keepdims: bool,
    ) -> Result<NodeId, GraphError> {
        self.reduce(x, ReduceOp::Max, axes, keepdims)
    }

    /// Minimum over `axes`.
    ///
    /// # Errors
    ///
    /// As [`Graph::reduce`].
    pub fn reduce_min(
        &mut self,
        x: NodeId,
        axes: &[i64],
        keepdims: bool,
    ) -> Result<NodeId, GraphError> {
        self.reduce(x, ReduceOp::Min, axes, keepdims)
    }

    /// Softmax along `axis` (composite).
    ///
    /// # Errors
    ///
    /// [`GraphError::Invalid`] for a bad axis, [`GraphError::DType`] unless float.
    pub fn softmax(&mut self, x: NodeId, axis: i64) -> Result<NodeId, GraphError> {
        let axis = self.norm_axes("softmax", &[axis], self.rank(x)?)?[0];
        self.add_node(None, Op::Softmax { axis }, &[x], None, None)
    }

    /// Log-softmax along `axis` (composite).
    ///
    /// # Errors
    ///
    /// [`GraphError::Invalid`] for a bad axis, [`GraphError::DType`] unless float.
    pub fn log_softmax(&mut self, x: NodeId, axis: i64) -> Result<NodeId, GraphError> {
        let axis = self.norm_axes("log_softmax", &[axis], self.rank(x)?)?[0];
        self.add_node(None, Op::LogSoftmax { axis }, &[x], None, None)
    }

    /// Layer normalisation over the last axis: `(x − mean) / sqrt(var + eps)
    /// · gamma + beta` with the biased variance; `gamma` and `beta` have
    /// shape `[D]` where `D` is the last dimension of `x` (composite).
    ///
    /// # Errors
    ///
    /// [`GraphError::ShapeMismatch`] for weights of the wrong shape,
    /// [`GraphError::DType`] / [`GraphError::DTypeMismatch`],
    /// [`GraphError::Invalid`] for a scalar `x` or a bad `eps`.
    pub fn layer_norm(
        &mut self,
        x: NodeId,
        gamma: NodeId,
        beta: NodeId,
        eps: f64,
    ) -> Result<NodeId, GraphError> {
        self.add_node(None, Op::LayerNorm { eps }, &[x, gamma, beta], None, None)
    }

    /// RMS normalisation over the last axis: `x / sqrt(mean(x²) + eps) ·
    /// gamma` (composite).
    ///
    /// # Errors
    ///
    /// As [`Graph::layer_norm`].
    pub fn rms_norm(&mut self, x: NodeId, gamma: NodeId, eps: f64) -> Result<NodeId, GraphError> {
        self.add_node(None, Op::RmsNorm { eps }, &[x, gamma], None, None)
    }

    /// Matrix product over the last two axes, batch axes broadcast;
    /// `trans_a`/`trans_b` transpose the last two axes of an operand. `i8`
    /// operands give an `i32` result.
    ///
    /// # Errors
    ///
    /// [`GraphError::ShapeMismatch`] if the contraction dims are not provably
    /// equal, [`GraphError::Broadcast`] for the batch axes,
    /// [`GraphError::Invalid`] for rank < 2, [`GraphError::DType`].
    pub fn matmul(
        &mut self,
        a: NodeId,
        b: NodeId,
        trans_a: bool,
        trans_b: bool,
    ) -> Result<NodeId, GraphError> {
        self.add_node(None, Op::MatMul { trans_a, trans_b }, &[a, b], None, None)
    }

    /// Reshape to `shape`; one dimension may be `-1` (inferred).
    ///
    /// # Errors
    ///
    /// [`GraphError::ShapeMismatch`] if the element counts are not provably
    /// equal, [`GraphError::Invalid`] if `-1` cannot be inferred.
    pub fn reshape(&mut self, x: NodeId, shape: &[Dim]) -> Result<NodeId, GraphError> {
        self.add_node(None, Op::Reshape, &[x], None, Some(shape))
    }

    /// Permutes the axes: output axis `i` is input axis `perm[i]`.
    ///
    /// # Errors
    ///
    /// [`GraphError::Invalid`] unless `perm` is a permutation of the axes.
    pub fn transpose(&mut self, x: NodeId, perm: &[i64]) -> Result<NodeId, GraphError> {
        let perm = self.norm_axes("transpose", perm, self.rank(x)?)?;
        self.add_node(None, Op::Transpose { perm }, &[x], None, None)
    }

    /// Slices `(axis, start, end, step)` ranges with Python's rules (negative
    /// start/end count from the end, then clamp; `i64::MAX` is "to the end").
    ///
    /// # Errors
    ///
    /// [`GraphError::Invalid`] for a bad or repeated axis or a step < 1.
    pub fn slice(
        &mut self,
        x: NodeId,
        ranges: &[(i64, i64, i64, i64)],
    ) -> Result<NodeId, GraphError> {
        let axes: Vec<i64> = ranges.iter().map(|r| r.0).collect();
        let axes = self.norm_axes("slice", &axes, self.rank(x)?)?;
        let ranges = ranges
            .iter()
            .zip(axes)
            .map(|(&(_, s, e, st), a)| (a, s, e, st))
            .collect();
        self.add_node(None, Op::Slice { ranges }, &[x], None, None)
    }

    /// Concatenation along `axis`.
    ///
    /// # Errors
    ///
    /// [`GraphError::ShapeMismatch`] if the other axes are not provably
    /// equal, [`GraphError::Invalid`] for ranks or the axis,
    /// [`GraphError::DTypeMismatch`], [`GraphError::Arity`] for no operands.
    pub fn concat(&mut self, xs: &[NodeId], axis: i64) -> Result<NodeId, GraphError> {
        let rank = match xs.first() {
            Some(&x) => self.rank(x)?,
            None => 0,
        };
        let axis = if xs.is_empty() {
            0
        } else {
            self.norm_axes("concat", &[axis], rank)?[0]
        };
        self.add_node(None, Op::Concat { axis }, xs, None, None)
    }

    /// Indices along `axis` (negative counts from the end) of a tensor of
    /// `shape` (symbolic extents allowed): element `[i0, …, ik, …]` is `ik`.
    /// `iota(i32, [S], 0)` is ONNX `Range(0, S, 1)`; `start + i·step` is an
    /// `iota` followed by `muls` and `adds`.
    ///
    /// # Errors
    ///
    /// [`GraphError::Invalid`] for an axis out of range or a dtype that
    /// is not numeric (bool).
    pub fn iota(&mut self, dtype: DType, shape: &[Dim], axis: i64) -> Result<NodeId, GraphError> {
        let axis = self.norm_axes("iota", &[axis], shape.len())?[0];
        self.add_node(None, Op::Iota { axis }, &[], Some(dtype), Some(shape))
    }

    /// The upper (`upper`) or lower triangle of the last two axes of `x`,
    /// as ONNX `Trilu`: element `[…, i, j]` is kept when `j − i ≥ k`
    /// (upper) or `j − i ≤ k` (lower), otherwise 0. A causal mask is
    /// `trilu(ones, false, 0)`.
    ///
    /// # Errors
    ///
    /// [`GraphError::Invalid`] if `x` has rank below 2.
    pub fn trilu(&mut self, x: NodeId, upper: bool, k: i64) -> Result<NodeId, GraphError> {
        self.add_node(None, Op::Trilu { upper, k }, &[x], None, None)
    }

    /// 2-D convolution of `x` `[N, C, H, W]` with `weight`
    /// `[O, C/groups, KH, KW]` plus an optional `bias` `[O]`, as PyTorch's
    /// `conv2d` and ONNX `Conv` (cross-correlation, zero padding):
    /// `y[n, o, i, j] = bias[o] + Σ x[n, c, i·sh − pt + a·dh, j·sw − pl + b·dw] ·
    /// weight[o, c′, a, b]` over the channels `c` of `o`'s group. The result
    /// is `[N, O, OH, OW]` with
    /// `OH = ⌊(H + pad_top + pad_bottom − dh·(KH−1) − 1) / sh⌋ + 1` (and so
    /// for W). The batch `N` may be symbolic; C, H, W and the weight's
    /// extents must be constants. It decomposes into im2col and a matmul
    /// (see [`decompose`](crate::decompose)).
    ///
    /// # Errors
    ///
    /// [`GraphError::Invalid`] for operands that are not rank 4 (bias rank
    /// 1 of extent O), symbolic C, H, W or weight extents, channels that do
    /// not split into `groups`, a stride, dilation or group count of 0, a
    /// kernel larger than the padded input or of more than 1024 taps;
    /// [`GraphError::DType`] for a dtype that is not a float, and
    /// [`GraphError::DTypeMismatch`] for operands of different dtypes.
    pub fn conv2d(
        &mut self,
        x: NodeId,
        weight: NodeId,
        bias: Option<NodeId>,
        attrs: &crate::Conv2d,
    ) -> Result<NodeId, GraphError> {
        let op = Op::Conv2d(Box::new(attrs.clone()));
        match bias {
            Some(b) => self.add_node(None, op, &[x, weight, b], None, None),
            None => self.add_node(None, op, &[x, weight], None, None),
        }
    }

    /// 2-D max pooling of `x` `[N, C, H, W]` over `pool`'s window, padded
    /// positions never chosen (ONNX `MaxPool`, PyTorch `max_pool2d`
    /// without `ceil_mode`): the result is `[N, C, OH, OW]` with OH, OW as
    /// for [`conv2d`](Graph::conv2d). H and W must be constants.
    ///
    /// # Errors
    ///
    /// [`GraphError::Invalid`] for a rank other than 4, symbolic H or W, a
    /// kernel, stride or dilation of 0, a kernel larger than the padded
    /// input or of more than 1024 taps, or padding so wide that a window
    /// holds no element of the input; [`GraphError::DType`] for a dtype that
    /// is not a float.
    pub fn max_pool2d(&mut self, x: NodeId, pool: &crate::Pool2d) -> Result<NodeId, GraphError> {
        let op = Op::MaxPool2d(Box::new(pool.clone()));
        self.add_node(None, op, &[x], None, None)
    }

    /// 2-D average pooling of `x` `[N, C, H, W]` over `pool`'s window (ONNX
    /// `AveragePool`, PyTorch `avg_pool2d` without `ceil_mode`): each
    /// window's sum divided by the kernel's size when
    /// `count_include_pad`, else by the number of its taps inside the
    /// input. The result's shape is as for
    /// [`max_pool2d`](Graph::max_pool2d). Global average pooling is
    /// [`mean`](Graph::mean) over axes 2 and 3.
    ///
    /// # Errors
    ///
    /// As [`max_pool2d`](Graph::max_pool2d).
    pub fn avg_pool2d(
        &mut self,
        x: NodeId,
        pool: &crate::Pool2d,
        count_include_pad: bool,
    ) -> Result<NodeId, GraphError> {
        let op = Op::AvgPool2d {
            pool: Box::new(pool.clone()),
            count_include_pad,
        };
        self.add_node(None, op, &[x], None, None)
    }

    /// The slices of `x` along `axis` (negative counts from the end) that
    /// `indices` selects, as ONNX `Gather`: an embedding lookup is
    /// `gather(table, tokens, 0)`. The result has shape
    /// `x.shape[..axis] ++ indices.shape ++ x.shape[axis+1..]` and `x`'s
    /// dtype. A negative index counts from the end of the axis; the
    /// reference evaluator refuses one outside `-n..n`, the compiled
    /// devices clamp it into the axis.
    ///
    /// # Errors
    ///
    /// [`GraphError::Invalid`] for an axis out of range, a rank-0 `x` or
    /// indices that are not `i32` or `i64`.
    pub fn gather(&mut self, x: NodeId, indices: NodeId, axis: i64) -> Result<NodeId, GraphError> {
        let axis = self.norm_axes("gather", &[axis], self.rank(x)?)?[0];
        self.add_node(None, Op::Gather { axis }, &[x, indices], None, None)
    }

    /// Broadcasts to `shape` (NumPy rules; `-1` keeps the operand's extent).
    ///
    /// # Errors
    ///
    /// [`GraphError::ShapeMismatch`] where an operand dim is neither 1 nor
    /// provably equal to the target.
    pub fn expand(&mut self, x: NodeId, shape: &[Dim]) -> Result<NodeId, GraphError> {
        self.add_node(None, Op::Expand, &[x], None, Some(shape))
    }

    /// Removes the listed extent-1 axes; with no axes, every axis whose
    /// extent is provably 1.
    ///
    /// # Errors
    ///
    /// [`GraphError::Invalid`] for an axis whose extent is not provably 1.
    pub fn squeeze(&mut self, x: NodeId, axes: &[i64]) -> Result<NodeId, GraphError> {
        let node = self.check(x)?;
        let axes = if axes.is_empty() {
            node.shape
                .iter()
                .enumerate()
                .filter(|(_, d)| self.scope().canonical(d).as_const() == Some(1))
                .map(|(i, _)| i)
                .collect()
        } else {
            self.norm_axes("squeeze", axes, node.shape.len())?
        };
        self.add_node(None, Op::Squeeze { axes }, &[x], None, None)
    }

    /// Inserts extent-1 axes at the listed positions of the output.
    ///
    /// # Errors
    ///
    /// [`GraphError::Invalid`] for an out-of-range or repeated axis.
    pub fn unsqueeze(&mut self, x: NodeId, axes: &[i64]) -> Result<NodeId, GraphError> {
        let out_rank = self.rank(x)? + axes.len();
        let axes = self.norm_axes("unsqueeze", axes, out_rank)?;
        self.add_node(None, Op::Unsqueeze { axes }, &[x], None, None)
    }
}
