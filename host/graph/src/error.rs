//! Errors of graph construction, binding, evaluation and the text format.

use std::fmt;
use std::path::PathBuf;

use dvm_isa::{DType, DTypeSet};

use dvm_sym::{Dim, SymError, UnifyError};
use dvm_tensor::npy::NpyError;
use dvm_tensor::TensorError;

/// Displays a symbolic shape as `[S, 768]`.
#[derive(Clone, Copy)]
pub struct ShapeDisplay<'a>(pub &'a [Dim]);

impl fmt::Display for ShapeDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// Displays a concrete shape as `[128, 768]`.
#[derive(Clone, Copy)]
pub struct DimsDisplay<'a>(pub &'a [u64]);

impl fmt::Display for DimsDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

fn shape_of(s: &[Dim]) -> ShapeDisplay<'_> {
    ShapeDisplay(s)
}

fn dims(s: &[u64]) -> DimsDisplay<'_> {
    DimsDisplay(s)
}

/// Everything that can go wrong building, binding, evaluating, reading or
/// writing a graph. Every variant names its culprit: the node (by name, with
/// its op), the input, the symbol, or the file and field.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// Two operands do not broadcast (NumPy rules, see
    /// [`Graph`](super::Graph)'s policy).
    #[error(
        "node `{node}` ({op}): cannot broadcast {} with {} at output axis {axis}: {source}{}",
        shape_of(.lhs), shape_of(.rhs), broadcast_hint(.source)
    )]
    Broadcast {
        /// Node name.
        node: String,
        /// Op name.
        op: &'static str,
        /// First shape.
        lhs: Vec<Dim>,
        /// Second shape.
        rhs: Vec<Dim>,
        /// Output axis (counted after right-aligning the shapes).
        axis: usize,
        /// The dimensions that could not be unified.
        source: Box<UnifyError>,
    },
    /// Two shapes disagree in a dimension that must be equal.
    #[error(
        "node `{node}` ({op}): shapes {} and {} disagree: {what} `{}` vs `{}` are not provably equal",
        shape_of(.lhs), shape_of(.rhs), .dims.0, .dims.1
    )]
    ShapeMismatch {
        /// Node name.
        node: String,
        /// Op name.
        op: &'static str,
        /// First shape.
        lhs: Vec<Dim>,
        /// Second shape.
        rhs: Vec<Dim>,
        /// Which dimension (e.g. "contraction dims").
        what: String,
        /// The dimension of the first shape and that of the second.
        dims: Box<(Dim, Dim)>,
    },
    /// An operand's dtype is not allowed by the op.
    #[error("node `{node}` ({op}): {operand} has dtype {dtype}, but {op} accepts only {allowed}")]
    DType {
        /// Node name.
        node: String,
        /// Op name.
        op: &'static str,
        /// Which operand (e.g. "operand 0 (`x`)").
        operand: String,
        /// Its dtype.
        dtype: DType,
        /// The allowed dtypes.
        allowed: DTypeSet,
    },
    /// Operands that must share a dtype do not.
    #[error("node `{node}` ({op}): operand dtypes differ: {lhs} vs {rhs} (insert a cast)")]
    DTypeMismatch {
        /// Node name.
        node: String,
        /// Op name.
        op: &'static str,
        /// One dtype.
        lhs: DType,
        /// The other.
        rhs: DType,
    },
    /// Wrong number of operands.
    #[error("node `{node}` ({op}): expected {expected} operands, got {got}")]
    Arity {
        /// Node name.
        node: String,
        /// Op name.
        op: &'static str,
        /// What is expected ("2", "at least 1").
        expected: &'static str,
        /// What was given.
        got: usize,
    },
    /// An attribute (axis, permutation, shape, value, …) is invalid for the
    /// operand shapes.
    #[error("node `{node}` ({op}): {msg}")]
    Invalid {
        /// Node name.
        node: String,
        /// Op name.
        op: &'static str,
        /// What is wrong.
        msg: String,
    },
    /// A node id that is not in the graph.
    #[error("node id {id} is not in this graph ({len} nodes)")]
    UnknownNode {
        /// The id.
        id: usize,
        /// Number of nodes.
        len: usize,
    },
    /// A name that refers to no node.
    #[error("{context}: no node or input named `{name}`")]
    UnknownName {
        /// Where it was used.
        context: String,
        /// The name.
        name: String,
    },
    /// A node, input or output name used twice.
    #[error("the {kind} name `{name}` is used twice")]
    DuplicateName {
        /// "node" or "output".
        kind: &'static str,
        /// The name.
        name: String,
    },
    /// A name with characters outside `[A-Za-z0-9_.-]`, empty, or too long.
    #[error("invalid {kind} name `{name}`: {reason}")]
    InvalidName {
        /// "node" or "output".
        kind: &'static str,
        /// The name (truncated).
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// A symbol fact or equality could not be declared, or a dimension
    /// expression is malformed.
    #[error("{context}: {source}")]
    Symbol {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: SymError,
    },
    /// A graph input was not given a value.
    #[error("input `{input}` is missing (the graph's inputs: {expected})")]
    MissingInput {
        /// The input.
        input: String,
        /// The graph's input names, comma-separated.
        expected: String,
    },
    /// A value was given for a name that is not a graph input.
    #[error("`{input}` is not an input of the graph (the graph's inputs: {expected})")]
    ExtraInput {
        /// The name given.
        input: String,
        /// The graph's input names, comma-separated.
        expected: String,
    },
    /// A value was given twice for one input.
    #[error("input `{input}` is given twice")]
    DuplicateInput {
        /// The input.
        input: String,
    },
    /// An input has the wrong rank.
    #[error("input `{input}` has shape {}, but the graph declares {} (rank {} vs {})",
        dims(.got), shape_of(.expected), .got.len(), .expected.len())]
    InputRank {
        /// The input.
        input: String,
        /// Declared shape.
        expected: Vec<Dim>,
        /// Given shape.
        got: Vec<u64>,
    },
    /// An input has the wrong dtype.
    #[error("input `{input}` has dtype {got}, but the graph declares {expected}")]
    InputDType {
        /// The input.
        input: String,
        /// Declared dtype.
        expected: DType,
        /// Given dtype.
        got: DType,
    },
    /// An input dimension disagrees with its declaration or the bindings.
    #[error("input `{input}` has shape {}: axis {axis} is {got}, but the graph declares `{dim}`{detail}",
        dims(.shape))]
    InputDim {
        /// The input.
        input: String,
        /// Given shape.
        shape: Vec<u64>,
        /// The axis.
        axis: usize,
        /// The declared dimension.
        dim: Dim,
        /// The given extent.
        got: u64,
        /// Why it does not match (e.g. " = 64 with S = 32").
        detail: String,
    },
    /// A symbol value violates the symbol's declared facts or an equality.
    #[error("{context}: {source}")]
    Binding {
        /// Where the value came from (an input and axis, or explicit).
        context: String,
        /// The violation (names the symbol, value and range).
        source: SymError,
    },
    /// An explicit binding names a symbol the graph does not use.
    #[error("symbol `{symbol}` is not a symbol of this graph (its symbols: {known})")]
    UnknownSymbol {
        /// The symbol.
        symbol: String,
        /// The graph's symbols, comma-separated.
        known: String,
    },
    /// A symbol needed for a node's shape has no value.
    #[error("symbol `{symbol}` (used by node `{node}`) could not be deduced from the input shapes; bind it explicitly")]
    Unbound {
        /// The symbol.
        symbol: String,
        /// A node whose shape uses it.
        node: String,
    },
    /// A node's shape does not evaluate to valid extents.
    #[error("node `{node}` ({op}): shape {} {msg}", shape_of(.shape))]
    NodeShape {
        /// Node name.
        node: String,
        /// Op name.
        op: &'static str,
        /// Its symbolic shape.
        shape: Vec<Dim>,
        /// What is wrong.
        msg: String,
    },
    /// Evaluation of a node failed.
    #[error("node `{node}` ({op}): {msg}")]
    Eval {
        /// Node name.
        node: String,
        /// Op name.
        op: &'static str,
        /// What went wrong.
        msg: String,
    },
    /// A graph text document is malformed.
    #[error("graph json: {at}{}: {msg}", field_suffix(.field.as_deref()))]
    Json {
        /// Where: ``line 3 column 7``, ``node `h` ``, ``input `x` ``, ``symbol `S` ``, ….
        at: String,
        /// The field at fault, if any.
        field: Option<String>,
        /// What is wrong.
        msg: String,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// An `.npy` file failed (names the file).
    #[error(transparent)]
    Npy(#[from] NpyError),
    /// A tensor failed to construct.
    #[error(transparent)]
    Tensor(#[from] TensorError),
}

fn broadcast_hint(e: &UnifyError) -> &'static str {
    if matches!(e, UnifyError::BroadcastUndecided { .. }) {
        " (if they are equal, declare it with Graph::declare_equal or a symbol range that excludes 1)"
    } else {
        ""
    }
}

fn field_suffix(field: Option<&str>) -> String {
    field.map(|f| format!(", field `{f}`")).unwrap_or_default()
}
