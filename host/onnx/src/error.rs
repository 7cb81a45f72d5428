//! Import errors: each names the culprit (file, node, tensor, symbol).

use std::fmt;
use std::path::PathBuf;

/// One node the importer cannot map, as [`OnnxError::Unsupported`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsupportedNode {
    /// Index of the node in the graph's node list.
    pub index: usize,
    /// The node's name (may be empty in the file; then `#index` is shown).
    pub name: String,
    /// The ONNX op type (`Conv`, `Sin`, …), with its domain when not the
    /// default one.
    pub op_type: String,
    /// Why: "no mapping" or what about this use is not supported.
    pub reason: String,
}

impl fmt::Display for UnsupportedNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node {} `{}` ({}): {}",
            self.index,
            display_name(&self.name, self.index),
            self.op_type,
            self.reason
        )
    }
}

fn display_name(name: &str, index: usize) -> String {
    if name.is_empty() {
        format!("#{index}")
    } else {
        name.to_owned()
    }
}

/// Why a model could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The bytes are not an ONNX model (truncated, or another format).
    #[error("{what} is not an ONNX model: {reason}")]
    Decode {
        /// The file, or "the input".
        what: String,
        /// The protobuf decoder's complaint, or what is missing.
        reason: String,
    },
    /// The model imports an opset outside the supported range, or an
    /// operator domain the importer does not know.
    #[error("opset {version} of domain `{domain}` is not supported ({supported})")]
    Opset {
        /// The domain (`ai.onnx` for the default one).
        domain: String,
        /// The version the model imports.
        version: i64,
        /// The supported range.
        supported: String,
    },
    /// Nodes whose operator (or whose use of it) the importer does not
    /// support, all of them listed; nothing was run.
    #[error("unsupported at opset {opset}: {}", list(.nodes))]
    Unsupported {
        /// The model's default-domain opset.
        opset: i64,
        /// Every unsupported node found.
        nodes: Vec<UnsupportedNode>,
    },
    /// A node references a value that no input, initializer or earlier
    /// node provides.
    #[error("node {index} `{}` ({op_type}): input `{value}` is not defined by any graph input, initializer or earlier node", display_name(.node, *.index))]
    MissingValue {
        /// Node index.
        index: usize,
        /// Node name.
        node: String,
        /// Op type.
        op_type: String,
        /// The missing value's name.
        value: String,
    },
    /// A graph output is not produced by anything.
    #[error("graph output `{0}` is not produced by any node, input or initializer")]
    MissingOutput(String),
    /// An initializer's data is malformed or its external data file is
    /// missing, unreadable, too short or outside the model's folder.
    #[error("tensor `{tensor}`: {reason}")]
    TensorData {
        /// The tensor (initializer or constant) name.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// A graph input or output declaration the importer cannot express.
    #[error("{kind} `{name}`: {reason}")]
    Declaration {
        /// "input" or "output".
        kind: &'static str,
        /// Its name.
        name: String,
        /// What is wrong (dtype, a malformed dimension, a contradiction).
        reason: String,
    },
    /// A supported node whose attributes or operands are invalid, or whose
    /// graph node the builder rejected.
    #[error("node {index} `{}` ({op_type}) at opset {opset}: {reason}", display_name(.node, *.index))]
    Node {
        /// Node index.
        index: usize,
        /// Node name.
        node: String,
        /// Op type.
        op_type: String,
        /// The model's opset.
        opset: i64,
        /// What is wrong.
        reason: String,
    },
}

fn list(nodes: &[UnsupportedNode]) -> String {
    nodes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
