//! The group IR: what one kernel computes, at concrete shapes.
//!
//! A group is a small DAG of tile-level nodes over one iteration space. Its
//! inputs are strided views broadcast to that space; its outputs are views
//! the kernel stores to. An element-wise group has only element-wise nodes; a
//! reduce group additionally folds one axis of the space (nodes after the
//! fold see the reduced values, broadcast back where they meet full ones); a
//! matmul group computes `A·B` and applies element-wise epilogue nodes.
//!
//! Per-op compilation is a group of one node; the fuser builds larger ones.

use dvm_isa::{DType, Opcode};

use super::view::View;

/// Index of a node in [`Group::nodes`].
pub type TileOpId = usize;

/// One tile-level computation.
#[derive(Clone, Debug, PartialEq)]
pub enum TileOp {
    /// Input `i` of the group.
    Input(usize),
    /// A unary vector opcode (`exp`, `abs`, `isfinite`, …).
    Unary(Opcode, TileOpId),
    /// A binary vector opcode (`add`, `lt`, `and`, …).
    Binary(Opcode, TileOpId, TileOpId),
    /// A with-scalar vector opcode (`adds`, `muls`, `lts`, …) and its scalar.
    Scalar(Opcode, TileOpId, f64),
    /// `cond ? a : b`.
    Select(TileOpId, TileOpId, TileOpId),
    /// Conversion to the node's dtype.
    Cast(TileOpId),
    /// A constant tile.
    Fill(f64),
    /// A fold of the reduce axis (`rsum`, `rmax`, `rmin`); reduce groups only.
    Reduce(Opcode, TileOpId),
    /// The matmul of the group's two operand inputs; matmul groups only.
    Matmul,
}

impl TileOp {
    /// The nodes this one reads.
    pub fn operands(&self) -> impl Iterator<Item = TileOpId> {
        let (a, b, c) = match *self {
            TileOp::Input(_) | TileOp::Fill(_) | TileOp::Matmul => (None, None, None),
            TileOp::Unary(_, x)
            | TileOp::Scalar(_, x, _)
            | TileOp::Cast(x)
            | TileOp::Reduce(_, x) => (Some(x), None, None),
            TileOp::Binary(_, x, y) => (Some(x), Some(y), None),
            TileOp::Select(c, x, y) => (Some(c), Some(x), Some(y)),
        };
        a.into_iter().chain(b).chain(c)
    }
}

/// How the iteration space is computed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GroupKind {
    /// Element-wise over `shape`.
    Elementwise {
        /// Iteration space.
        shape: Vec<u64>,
    },
    /// Element-wise over `shape`, with one fold of dimension `axis`.
    Reduce {
        /// Iteration space (before the fold).
        shape: Vec<u64>,
        /// The folded dimension.
        axis: usize,
    },
    /// `[batch…, m, k] · [batch…, k, n]` with an element-wise epilogue over
    /// `[batch…, m, n]`. Inputs 0 and 1 are the operands (views of shape
    /// `[batch…, m, k]` and `[batch…, k, n]`, batch broadcast already
    /// applied); other inputs are epilogue operands over the output space.
    Matmul {
        /// Batch dimensions.
        batch: Vec<u64>,
        /// Rows of the output.
        m: u64,
        /// Columns of the output.
        n: u64,
        /// Contraction length.
        k: u64,
        /// Dtype of the products' accumulator output (the `Matmul` node's dtype).
        acc: DType,
    },
    /// `out[o, j, i] = table[o, idx[j], i]` over `[outer, n, inner]`, the
    /// index clamped into the table as the `gather` instruction does.
    /// Input 0 is the table (shape `[outer, extent, inner]`), input 1 the
    /// `i32` indices (shape `[n]`); the one node is `Input(0)`, stored
    /// through the one output of shape `[outer, n, inner]`.
    Gather {
        /// Tables (the axes before the gathered one).
        outer: u64,
        /// Rows of each table (the gathered axis).
        extent: u64,
        /// Indices.
        n: u64,
        /// Elements of a row (the axes after the gathered one).
        inner: u64,
    },
}

/// One kernel's worth of computation at concrete shapes.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// Iteration space and structure.
    pub kind: GroupKind,
    /// Input views, each broadcast to the iteration space (for reduce groups
    /// the unreduced space; for matmul groups inputs 0 and 1 are the operands).
    pub inputs: Vec<View>,
    /// Nodes in topological order, with their result dtype.
    pub nodes: Vec<(TileOp, DType)>,
    /// Stored results: node and destination view. A destination of a reduced
    /// value has extent 1 (any stride) along the reduce axis.
    pub outputs: Vec<(TileOpId, View)>,
}
