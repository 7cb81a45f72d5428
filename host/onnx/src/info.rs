//! What `dvm info` prints about a model.

use std::collections::BTreeMap;

use crate::error::{OnnxError, UnsupportedNode};
use crate::import::graph_proto;
use crate::symbols::tensor_type;
use crate::value::elem;
use crate::OnnxModel;

/// A graph input or output: name, element type and shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueInfo {
    /// The ONNX name.
    pub name: String,
    /// The ONNX element type (`float`, `int64`, …).
    pub elem: String,
    /// The shape: as the import computes it (`[batch, seq, 64]`) when the
    /// model converts, as the file declares it otherwise.
    pub shape: String,
}

/// A summary of a model.
#[derive(Clone, Debug, Default)]
pub struct ModelInfo {
    /// The default-domain opset.
    pub opset: i64,
    /// The producer (`pytorch 2.9`), if the file names it.
    pub producer: String,
    /// Graph inputs that are not initializers.
    pub inputs: Vec<ValueInfo>,
    /// Graph outputs.
    pub outputs: Vec<ValueInfo>,
    /// The dvm symbols of the input shapes (when the model converts).
    pub symbols: Vec<String>,
    /// Nodes per op type, sorted by op type.
    pub op_counts: Vec<(String, usize)>,
    /// Nodes the importer cannot map (empty when it converts).
    pub unsupported: Vec<UnsupportedNode>,
    /// Another reason the model does not convert, if any.
    pub error: Option<String>,
}

pub(crate) fn describe(model: &OnnxModel) -> ModelInfo {
    let mut info = ModelInfo {
        opset: model.opset,
        producer: format!(
            "{} {}",
            model.proto.producer_name(),
            model.proto.producer_version()
        )
        .trim()
        .to_owned(),
        ..ModelInfo::default()
    };
    let Ok(gp) = graph_proto(model) else {
        return info;
    };
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for n in &gp.node {
        *counts.entry(n.op_type().to_owned()).or_default() += 1;
    }
    info.op_counts = counts.into_iter().collect();
    let inits: std::collections::HashSet<&str> = gp.initializer.iter().map(|t| t.name()).collect();
    let declared = |vi: &crate::proto::ValueInfoProto| {
        let (et, dims) = tensor_type(vi).unwrap_or((0, None));
        ValueInfo {
            name: vi.name().to_owned(),
            elem: elem::name(et),
            shape: match dims {
                Some(d) => format!(
                    "[{}]",
                    d.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => "(rank unknown)".to_owned(),
            },
        }
    };
    info.inputs = gp
        .input
        .iter()
        .filter(|vi| !inits.contains(vi.name()))
        .map(declared)
        .collect();
    info.outputs = gp.output.iter().map(declared).collect();
    match model.to_graph() {
        Ok(g) => {
            info.symbols = g.scope().symbols().map(|s| s.name().to_owned()).collect();
            for (v, (_, id)) in info.outputs.iter_mut().zip(g.outputs()) {
                v.shape = g.shape_string(*id);
            }
            for (v, id) in info.inputs.iter_mut().zip(g.inputs()) {
                v.shape = g.shape_string(*id);
            }
        }
        Err(OnnxError::Unsupported { nodes, .. }) => info.unsupported = nodes,
        Err(e) => info.error = Some(e.to_string()),
    }
    info
}
