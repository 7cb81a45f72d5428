//! The conversion: initializers, inputs, nodes in order, outputs.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use dvm_graph::{Graph, NodeId};
use dvm_isa::Opcode;
use dvm_sym::Dim;

use crate::error::{OnnxError, UnsupportedNode};
use crate::ops::{self, NodeCx};
use crate::patterns;
use crate::proto::GraphProto;
use crate::symbols::{self, tensor_type};
use crate::tensor_data;
use crate::value::{dtype_of, elem, Const, Value};
use crate::OnnxModel;

/// The conversion state: the graph built so far and what is known about
/// every ONNX value.
pub(crate) struct Importer<'m> {
    pub g: Graph,
    values: HashMap<String, Value>,
    /// Graph nodes made for constant values, by value name, so a weight
    /// used twice is one constant node.
    materialized: HashMap<String, NodeId>,
    /// Runtime nodes that hold one symbolic dimension converted to a
    /// float type (`Cast` of a shape scalar), so an operator that takes a
    /// length (`Range`) can still read it as a dimension.
    pub float_dims: HashMap<NodeId, Dim>,
    pub opset: i64,
    base_dir: Option<&'m Path>,
}

pub(crate) fn graph_proto(model: &OnnxModel) -> Result<&GraphProto, OnnxError> {
    model.proto.graph.as_ref().ok_or_else(|| OnnxError::Decode {
        what: "the model".to_owned(),
        reason: "no graph".to_owned(),
    })
}

pub(crate) fn convert(model: &OnnxModel) -> Result<Graph, OnnxError> {
    let gp = graph_proto(model)?;
    // Every unsupported node is listed: those without a mapping, then
    // those whose use of a mapped op is not supported. The values they
    // would produce are poisoned, and nodes reading them are skipped.
    let mut unsupported = ops::unsupported_by_type(gp);
    let no_mapping: HashSet<usize> = unsupported.iter().map(|u| u.index).collect();
    let mut poisoned: HashSet<&str> = HashSet::new();
    let mut imp = Importer {
        g: Graph::new(),
        values: HashMap::new(),
        materialized: HashMap::new(),
        float_dims: HashMap::new(),
        opset: model.opset,
        base_dir: model.base_dir.as_deref(),
    };
    for t in &gp.initializer {
        let c = tensor_data::decode(t, imp.base_dir)?;
        imp.values.insert(t.name().to_owned(), Value::Const(c));
    }
    for vi in &gp.input {
        if imp.values.contains_key(vi.name()) {
            // An initializer with a default value for an optional input.
            continue;
        }
        imp.declare_input(vi)?;
    }
    let plan = patterns::find(gp, &imp.values);
    for (index, node) in gp.node.iter().enumerate() {
        if plan.covered(index) {
            continue;
        }
        let blocked = node.input.iter().any(|i| poisoned.contains(i.as_str()))
            || plan
                .root(index)
                .is_some_and(|m| poisoned.contains(m.input.as_str()));
        if blocked || no_mapping.contains(&index) {
            poisoned.extend(node.output.iter().map(String::as_str));
            continue;
        }
        let cx = NodeCx {
            node,
            index,
            opset: imp.opset,
        };
        if let Some(m) = plan.root(index) {
            let y = imp.composite(&cx, m)?;
            let _ = imp.g.rename(y, &symbols::node_name(&m.output));
            imp.set(
                &m.output,
                Value::Runtime {
                    id: y,
                    elem: imp.elem_of(&m.input),
                },
            );
            continue;
        }
        let first_new = imp.g.nodes().len();
        let map = ops::lookup(node.op_type()).ok_or_else(|| cx.unsupported("no mapping"))?;
        let outs = match map(&mut imp, &cx) {
            Ok(outs) => outs,
            Err(OnnxError::Unsupported { nodes, .. }) => {
                unsupported.extend(nodes);
                poisoned.extend(node.output.iter().map(String::as_str));
                continue;
            }
            // A failure downstream of an unsupported node may be its
            // consequence: the unsupported nodes are the error then.
            Err(_) if !unsupported.is_empty() => break,
            Err(e) => return Err(e),
        };
        for (name, v) in node.output.iter().zip(outs) {
            if name.is_empty() {
                continue;
            }
            // The graph node computing an output value this ONNX node
            // made takes the value's name (`dvm explain` and errors then
            // speak the model's names); a name already taken is left.
            if let Value::Runtime { id, .. } = v {
                if id.0 >= first_new {
                    let _ = imp.g.rename(id, &symbols::node_name(name));
                }
            }
            imp.set(name, v.normalized());
        }
    }
    if !unsupported.is_empty() {
        unsupported.sort_by_key(|u| u.index);
        return Err(OnnxError::Unsupported {
            opset: model.opset,
            nodes: unsupported,
        });
    }
    for vi in &gp.output {
        imp.declare_output(vi)?;
    }
    Ok(imp.g)
}

impl Importer<'_> {
    /// The graph node of a recognised composite.
    fn composite(&mut self, cx: &NodeCx<'_>, m: &patterns::Match) -> Result<NodeId, OnnxError> {
        let x = self.tensor_named(cx, &m.input)?;
        let ge = |e| cx.graph_err(e);
        match &m.kind {
            patterns::Kind::Unary(code) => self.g.unary(*code, x).map_err(ge),
            patterns::Kind::Softmax { axis } => self.g.softmax(x, *axis).map_err(ge),
            patterns::Kind::RmsNorm { eps, weight } => {
                let w = match weight {
                    Some(w) => self.tensor_named(cx, w)?,
                    None => {
                        let node = &self.g.nodes()[x.0];
                        let (dt, d) = (
                            node.dtype,
                            node.shape.last().cloned().unwrap_or(Dim::from(1)),
                        );
                        self.g.full(dt, &[d], 1.0).map_err(ge)?
                    }
                };
                self.g.rms_norm(x, w, *eps).map_err(ge)
            }
            patterns::Kind::LayerNorm { eps, weight, bias } => {
                let w = self.tensor_named(cx, weight)?;
                let b = self.tensor_named(cx, bias)?;
                self.g.layer_norm(x, w, b, *eps).map_err(ge)
            }
        }
    }

    fn set(&mut self, name: &str, v: Value) {
        self.materialized.remove(name);
        self.values.insert(name.to_owned(), v);
    }

    fn elem_of(&self, name: &str) -> i32 {
        self.values.get(name).map_or(elem::FLOAT, Value::elem)
    }

    fn declare_input(&mut self, vi: &crate::proto::ValueInfoProto) -> Result<(), OnnxError> {
        let name = vi.name().to_owned();
        let fail = |reason: String| OnnxError::Declaration {
            kind: "input",
            name: name.clone(),
            reason,
        };
        let (et, dims) = tensor_type(vi).ok_or_else(|| fail("not a tensor".to_owned()))?;
        let dtype = dtype_of(et).map_err(&fail)?;
        let dims = dims.ok_or_else(|| fail("no shape (rank unknown)".to_owned()))?;
        let mut shape = Vec::with_capacity(dims.len());
        for (axis, d) in dims.iter().enumerate() {
            shape.push(symbols::to_dim(&mut self.g, d, &name, axis).map_err(&fail)?);
        }
        let id = self
            .g
            .input(&symbols::node_name(&name), dtype, &shape)
            .map_err(|e| fail(e.to_string()))?;
        self.values.insert(name, Value::Runtime { id, elem: et });
        Ok(())
    }

    fn declare_output(&mut self, vi: &crate::proto::ValueInfoProto) -> Result<(), OnnxError> {
        let name = vi.name().to_owned();
        let v = self
            .values
            .get(&name)
            .cloned()
            .ok_or_else(|| OnnxError::MissingOutput(name.clone()))?;
        let fail = |reason: String| OnnxError::Declaration {
            kind: "output",
            name: name.clone(),
            reason,
        };
        let id = match v {
            Value::Runtime { id, .. } => id,
            other => self.materialize(&other).map_err(&fail)?,
        };
        // A declared shape the import provably contradicts is an error; a
        // dimension naming symbols no input has is not checked.
        if let Some((_, Some(dims))) = tensor_type(vi) {
            let got = self.g.nodes()[id.0].shape.to_vec();
            if dims.len() != got.len() {
                return Err(fail(format!(
                    "declared with rank {}, computed as {}",
                    dims.len(),
                    self.g.shape_string(id)
                )));
            }
            for (axis, (d, have)) in dims.iter().zip(&got).enumerate() {
                let want = match d {
                    symbols::DimText::Value(v) => Dim::from(*v),
                    symbols::DimText::Param(p) => {
                        let mut probe = self.g.scope().clone();
                        match Dim::parse(p, &mut probe) {
                            Ok(w)
                                if w.symbols()
                                    .iter()
                                    .all(|s| self.g.scope().lookup(s.name()).is_some()) =>
                            {
                                w
                            }
                            _ => continue,
                        }
                    }
                    symbols::DimText::Unknown => continue,
                };
                if self.g.scope().prove_ne(&want, have) {
                    return Err(fail(format!(
                        "axis {axis} is declared `{d}` but computed as `{have}`"
                    )));
                }
            }
        }
        self.g
            .output(&symbols::node_name(&name), id)
            .map_err(|e| fail(e.to_string()))
    }

    /// Input `i` of the node (`None` when absent or named `""`).
    pub fn value(&self, cx: &NodeCx<'_>, i: usize) -> Result<Option<Value>, OnnxError> {
        match cx.node.input.get(i).map(String::as_str) {
            None | Some("") => Ok(None),
            Some(name) => self
                .values
                .get(name)
                .cloned()
                .map(Some)
                .ok_or_else(|| cx.missing(name)),
        }
    }

    /// Input `i`, which must be present.
    pub fn req(&self, cx: &NodeCx<'_>, i: usize) -> Result<Value, OnnxError> {
        self.value(cx, i)?
            .ok_or_else(|| cx.err(format!("input {i} is required")))
    }

    /// Input `i` as a graph node (constants become constant nodes, once
    /// per value).
    pub fn tensor(&mut self, cx: &NodeCx<'_>, i: usize) -> Result<NodeId, OnnxError> {
        let name = cx
            .node
            .input
            .get(i)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| cx.err(format!("input {i} is required")))?
            .clone();
        self.tensor_named(cx, &name)
    }

    /// The value `name` as a graph node.
    pub fn tensor_named(&mut self, cx: &NodeCx<'_>, name: &str) -> Result<NodeId, OnnxError> {
        if let Some(&id) = self.materialized.get(name) {
            return Ok(id);
        }
        let v = self
            .values
            .get(name)
            .cloned()
            .ok_or_else(|| cx.missing(name))?;
        match v {
            Value::Runtime { id, .. } => Ok(id),
            other => {
                let first_new = self.g.nodes().len();
                let id = self.materialize(&other).map_err(|r| cx.err(r))?;
                if id.0 >= first_new {
                    let _ = self.g.rename(id, &symbols::node_name(name));
                }
                self.materialized.insert(name.to_owned(), id);
                Ok(id)
            }
        }
    }

    /// A graph node computing `v`.
    pub fn materialize(&mut self, v: &Value) -> Result<NodeId, String> {
        match v {
            Value::Runtime { id, .. } => Ok(*id),
            Value::Const(c) => self.constant(c),
            Value::Ints { scalar, dims } => {
                if let Some(c) = v.as_const() {
                    return self.constant(&c);
                }
                // Each element a one-element tensor holding the dimension's
                // value at run time, concatenated.
                let mut parts = Vec::with_capacity(dims.len());
                for d in dims {
                    let zero = self
                        .g
                        .full(dvm_isa::DType::I32, &[Dim::from(1)], 0.0)
                        .map_err(|e| e.to_string())?;
                    let e = self
                        .g
                        .scalar_dim(Opcode::AddS, zero, d)
                        .map_err(|e| e.to_string())?;
                    parts.push(e);
                }
                let vec = self.g.concat(&parts, 0).map_err(|e| e.to_string())?;
                if *scalar {
                    self.g.reshape(vec, &[]).map_err(|e| e.to_string())
                } else {
                    Ok(vec)
                }
            }
        }
    }

    /// A constant node for `c`.
    pub fn constant(&mut self, c: &Const) -> Result<NodeId, String> {
        let dtype = dtype_of(c.elem)?;
        let shape: Vec<Dim> = c.shape.iter().map(|&d| Dim::from(d as i64)).collect();
        self.g
            .constant(dtype, &shape, &c.data)
            .map_err(|e| e.to_string())
    }

    /// The symbolic shape of a value.
    pub fn shape_of(&self, v: &Value) -> Vec<Dim> {
        match v {
            Value::Runtime { id, .. } => self.g.nodes()[id.0].shape.to_vec(),
            Value::Const(c) => c.shape.iter().map(|&d| Dim::from(d as i64)).collect(),
            Value::Ints { scalar, dims } => {
                if *scalar {
                    vec![]
                } else {
                    vec![Dim::from(dims.len() as i64)]
                }
            }
        }
    }
}

impl NodeCx<'_> {
    pub fn err(&self, reason: impl Into<String>) -> OnnxError {
        OnnxError::Node {
            index: self.index,
            node: self.node.name().to_owned(),
            op_type: self.node.op_type().to_owned(),
            opset: self.opset,
            reason: reason.into(),
        }
    }

    pub fn graph_err(&self, e: dvm_graph::GraphError) -> OnnxError {
        self.err(e.to_string())
    }

    pub fn unsupported(&self, reason: impl Into<String>) -> OnnxError {
        OnnxError::Unsupported {
            opset: self.opset,
            nodes: vec![UnsupportedNode {
                index: self.index,
                name: self.node.name().to_owned(),
                op_type: self.node.op_type().to_owned(),
                reason: reason.into(),
            }],
        }
    }

    fn missing(&self, value: &str) -> OnnxError {
        OnnxError::MissingValue {
            index: self.index,
            node: self.node.name().to_owned(),
            op_type: self.node.op_type().to_owned(),
            value: value.to_owned(),
        }
    }
}
