//! The op table: one mapping function per ONNX op type, grouped by family
//! in the submodules. Adding an operator is one row of [`TABLE`].

mod constant;
mod conv;
mod elementwise;
mod linalg;
mod reduce;
mod tensor;

use crate::error::{OnnxError, UnsupportedNode};
use crate::import::Importer;
use crate::proto::{AttributeProto, GraphProto, NodeProto, TensorProto};
use crate::value::Value;

/// The node being converted: its proto, its index in the graph and the
/// model's opset.
pub(crate) struct NodeCx<'n> {
    pub node: &'n NodeProto,
    pub index: usize,
    pub opset: i64,
}

/// Converts one node: its output values in order.
pub(crate) type MapFn = fn(&mut Importer<'_>, &NodeCx<'_>) -> Result<Vec<Value>, OnnxError>;

/// Every supported ONNX op type (default domain) and its mapping.
pub(crate) const TABLE: &[(&str, MapFn)] = &[
    // Element-wise unary.
    ("Abs", elementwise::abs),
    ("Neg", elementwise::neg),
    ("Exp", elementwise::exp),
    ("Log", elementwise::log),
    ("Sqrt", elementwise::sqrt),
    ("Reciprocal", elementwise::reciprocal),
    ("Tanh", elementwise::tanh),
    ("Erf", elementwise::erf),
    ("Sin", elementwise::sin),
    ("Cos", elementwise::cos),
    ("Sigmoid", elementwise::sigmoid),
    ("Relu", elementwise::relu),
    ("Not", elementwise::not),
    ("Floor", elementwise::floor),
    ("Ceil", elementwise::ceil),
    ("Round", elementwise::round),
    ("Gelu", elementwise::gelu),
    ("Clip", elementwise::clip),
    // Element-wise binary and variadic.
    ("Add", elementwise::add),
    ("Sub", elementwise::sub),
    ("Mul", elementwise::mul),
    ("Div", elementwise::div),
    ("Pow", elementwise::pow),
    ("Max", elementwise::max),
    ("Min", elementwise::min),
    ("Equal", elementwise::equal),
    ("Less", elementwise::less),
    ("Greater", elementwise::greater),
    ("LessOrEqual", elementwise::less_or_equal),
    ("GreaterOrEqual", elementwise::greater_or_equal),
    ("And", elementwise::and),
    ("Or", elementwise::or),
    ("Where", elementwise::where_),
    ("Cast", elementwise::cast),
    ("CastLike", elementwise::cast_like),
    // Matrix products.
    ("MatMul", linalg::matmul),
    ("Gemm", linalg::gemm),
    // Reductions and normalisations.
    ("ReduceSum", reduce::sum),
    ("ReduceMean", reduce::mean),
    ("ReduceMax", reduce::max),
    ("ReduceMin", reduce::min),
    ("Softmax", reduce::softmax),
    ("LogSoftmax", reduce::log_softmax),
    ("LayerNormalization", reduce::layer_norm),
    ("RMSNormalization", reduce::rms_norm),
    // Convolution and pooling (2-D).
    ("Conv", conv::conv),
    ("MaxPool", conv::max_pool),
    ("AveragePool", conv::average_pool),
    ("GlobalAveragePool", conv::global_average_pool),
    // Shapes and data movement.
    ("Shape", tensor::shape),
    ("Size", tensor::size),
    ("Reshape", tensor::reshape),
    ("Flatten", tensor::flatten),
    ("Transpose", tensor::transpose),
    ("Squeeze", tensor::squeeze),
    ("Unsqueeze", tensor::unsqueeze),
    ("Slice", tensor::slice),
    ("Concat", tensor::concat),
    ("Split", tensor::split),
    ("Expand", tensor::expand),
    ("Gather", tensor::gather),
    ("Trilu", tensor::trilu),
    // Constants and pass-throughs.
    ("Constant", constant::constant),
    ("ConstantOfShape", constant::constant_of_shape),
    ("Range", constant::range),
    ("Identity", constant::identity),
    ("Dropout", constant::dropout),
];

/// Op types that need engine operators dvm does not have yet, and which.
const PENDING: &[(&str, &str)] = &[("GatherElements", "needs the engine's gather")];

/// The mapping of `op_type`.
pub(crate) fn lookup(op_type: &str) -> Option<MapFn> {
    TABLE.iter().find(|(n, _)| *n == op_type).map(|&(_, f)| f)
}

/// Every node whose op type (or domain) has no mapping.
pub(crate) fn unsupported_by_type(g: &GraphProto) -> Vec<UnsupportedNode> {
    let mut out = Vec::new();
    for (index, node) in g.node.iter().enumerate() {
        let domain = node.domain();
        let default = domain.is_empty() || domain == "ai.onnx";
        if default && lookup(node.op_type()).is_some() {
            continue;
        }
        let reason = if !default {
            format!("operators of domain `{domain}` are not supported")
        } else {
            PENDING
                .iter()
                .find(|(n, _)| *n == node.op_type())
                .map_or("no mapping", |(_, r)| r)
                .to_owned()
        };
        out.push(UnsupportedNode {
            index,
            name: node.name().to_owned(),
            op_type: if default {
                node.op_type().to_owned()
            } else {
                format!("{domain}::{}", node.op_type())
            },
            reason,
        });
    }
    out
}

impl NodeCx<'_> {
    fn attr(&self, name: &str) -> Option<&AttributeProto> {
        self.node.attribute.iter().find(|a| a.name() == name)
    }

    /// Integer attribute `name`, or `default`.
    pub fn attr_i(&self, name: &str, default: i64) -> i64 {
        self.attr(name).and_then(|a| a.i).unwrap_or(default)
    }

    /// Float attribute `name`, or `default`.
    pub fn attr_f(&self, name: &str, default: f64) -> f64 {
        self.attr(name).and_then(|a| a.f).map_or(default, f64::from)
    }

    /// Integer-list attribute `name`.
    pub fn attr_ints(&self, name: &str) -> Option<Vec<i64>> {
        self.attr(name).map(|a| a.ints.clone())
    }

    /// Float-list attribute `name`.
    pub fn attr_floats(&self, name: &str) -> Option<Vec<f32>> {
        self.attr(name).map(|a| a.floats.clone())
    }

    /// String attribute `name`.
    pub fn attr_s(&self, name: &str) -> Option<String> {
        self.attr(name)
            .and_then(|a| a.s.as_ref())
            .map(|s| String::from_utf8_lossy(s).into_owned())
    }

    /// Tensor attribute `name`.
    pub fn attr_t(&self, name: &str) -> Option<&TensorProto> {
        self.attr(name).and_then(|a| a.t.as_ref())
    }

    /// True if the node has attribute `name`.
    pub fn has_attr(&self, name: &str) -> bool {
        self.attr(name).is_some()
    }
}

/// Normalises a possibly negative `axis` of a rank-`rank` tensor.
pub(crate) fn norm_axis(cx: &NodeCx<'_>, axis: i64, rank: usize) -> Result<usize, OnnxError> {
    let r = rank as i64;
    let a = if axis < 0 {
        axis.saturating_add(r)
    } else {
        axis
    };
    if (0..r).contains(&a) {
        Ok(a as usize)
    } else {
        Err(cx.err(format!("axis {axis} is out of range for rank {rank}")))
    }
}
