//! The graph text format: JSON (documented in `docs/graph-format.md`).
//!
//! ```json
//! {
//!   "symbols": {"S": {"min": 1, "max": 8192, "multiple_of": 1}},
//!   "equal": [["T", "S"]],
//!   "inputs": [{"name": "x", "dtype": "f32", "shape": ["S", 768]}],
//!   "nodes": [
//!     {"name": "h", "op": "matmul", "inputs": ["x", "w"], "trans_b": false},
//!     {"name": "y", "op": "gelu_tanh", "inputs": ["h"]}
//!   ],
//!   "outputs": ["y", {"name": "hidden", "node": "h"}]
//! }
//! ```
//!
//! Every error names where it happened (``node `h` ``, ``input `x` ``,
//! ``symbol `S` ``, `outputs[1]`, or a line and column for malformed JSON)
//! and the field at fault.

use std::collections::BTreeMap;
use std::path::Path;

use dvm_isa::{DType, Opcode};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::error::GraphError;
use super::op::{opcode_kind, OpcodeKind};
use super::shape::{norm_axis, Ctx};
use super::{Graph, NodeId, Op, ReduceOp};
use dvm_sym::{Dim, DEFAULT_RANGE};

/// Default ε of `layer_norm` (PyTorch's).
pub const LAYER_NORM_EPS: f64 = 1e-5;
/// Default ε of `rms_norm`.
pub const RMS_NORM_EPS: f64 = 1e-6;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    #[serde(default)]
    symbols: BTreeMap<String, Value>,
    #[serde(default)]
    equal: Vec<Value>,
    #[serde(default)]
    inputs: Vec<Value>,
    #[serde(default)]
    nodes: Vec<Value>,
    #[serde(default)]
    outputs: Vec<Value>,
}

mod unique {
    //! A pass over a JSON document that fails on an object with a
    //! repeated key.

    use std::collections::BTreeSet;
    use std::fmt;

    use serde::de::{Deserialize, Deserializer, Error, MapAccess, SeqAccess, Visitor};

    /// Any JSON value whose objects each name a key once.
    pub(super) struct UniqueKeys;

    impl<'de> Deserialize<'de> for UniqueKeys {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(UniqueKeys)
        }
    }

    impl<'de> Visitor<'de> for UniqueKeys {
        type Value = UniqueKeys;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value")
        }

        fn visit_bool<E: Error>(self, _: bool) -> Result<Self, E> {
            Ok(UniqueKeys)
        }

        fn visit_i64<E: Error>(self, _: i64) -> Result<Self, E> {
            Ok(UniqueKeys)
        }

        fn visit_u64<E: Error>(self, _: u64) -> Result<Self, E> {
            Ok(UniqueKeys)
        }

        fn visit_f64<E: Error>(self, _: f64) -> Result<Self, E> {
            Ok(UniqueKeys)
        }

        fn visit_str<E: Error>(self, _: &str) -> Result<Self, E> {
            Ok(UniqueKeys)
        }

        fn visit_unit<E: Error>(self) -> Result<Self, E> {
            Ok(UniqueKeys)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
            while seq.next_element::<UniqueKeys>()?.is_some() {}
            Ok(UniqueKeys)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
            let mut keys = BTreeSet::new();
            while let Some(key) = map.next_key::<String>()? {
                if keys.contains(&key) {
                    return Err(A::Error::custom(format_args!(
                        "the key `{key}` appears twice"
                    )));
                }
                map.next_value::<UniqueKeys>()?;
                keys.insert(key);
            }
            Ok(UniqueKeys)
        }
    }
}

fn err(at: &str, field: Option<&str>, msg: impl Into<String>) -> GraphError {
    GraphError::Json {
        at: at.to_owned(),
        field: field.map(str::to_owned),
        msg: msg.into(),
    }
}

/// A JSON object whose fields are taken one by one; leftovers are unknown.
struct Obj {
    map: Map<String, Value>,
    at: String,
}

impl Obj {
    fn new(v: Value, at: String) -> Result<Obj, GraphError> {
        match v {
            Value::Object(map) => Ok(Obj { map, at }),
            other => Err(err(
                &at,
                None,
                format!("expected an object, got {}", kind(&other)),
            )),
        }
    }

    fn opt<T: DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>, GraphError> {
        match self.map.remove(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => serde_json::from_value(v)
                .map(Some)
                .map_err(|e| err(&self.at, Some(key), e.to_string())),
        }
    }

    fn req<T: DeserializeOwned>(&mut self, key: &str) -> Result<T, GraphError> {
        self.opt(key)?
            .ok_or_else(|| err(&self.at, Some(key), "missing required field"))
    }

    fn raw(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key).filter(|v| !v.is_null())
    }

    /// Fails on any field not taken, listing the allowed ones.
    fn finish(self, allowed: &[&str]) -> Result<(), GraphError> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(k) => Err(err(
                &self.at,
                Some(k),
                format!("unknown attribute (allowed: {})", allowed.join(", ")),
            )),
        }
    }
}

/// One node's JSON object while it is read: the attributes read so far and
/// what they give [`Graph::add_node`].
struct NodeText {
    obj: Obj,
    name: String,
    at: String,
    operands: Vec<NodeId>,
    allowed: Vec<&'static str>,
    dtype: Option<DType>,
    shape: Option<Vec<Dim>>,
}

impl NodeText {
    /// The rank of operand `i` (0 when it is missing: arity is checked later).
    fn rank(&self, g: &Graph, i: usize) -> usize {
        self.operands.get(i).map_or(0, |&id| g[id].shape.len())
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn parse_dtype(at: &str, field: &str, s: &str) -> Result<DType, GraphError> {
    DType::from_name(s).ok_or_else(|| {
        err(
            at,
            Some(field),
            format!("unknown dtype `{s}` (expected f32, f16, bf16, i32, i8 or bool)"),
        )
    })
}

/// A float that may be written as `"nan"`, `"inf"` or `"-inf"`.
fn parse_float(at: &str, field: &str, v: &Value) -> Result<f64, GraphError> {
    match v {
        Value::Number(n) => n
            .as_f64()
            .ok_or_else(|| err(at, Some(field), format!("number {n} is out of range"))),
        Value::String(s) => match s.as_str() {
            "nan" => Ok(f64::NAN),
            "inf" => Ok(f64::INFINITY),
            "-inf" => Ok(f64::NEG_INFINITY),
            _ => Err(err(
                at,
                Some(field),
                format!("expected a number, \"nan\", \"inf\" or \"-inf\", got \"{s}\""),
            )),
        },
        other => Err(err(
            at,
            Some(field),
            format!("expected a number, got {}", kind(other)),
        )),
    }
}

fn float_value(v: f64) -> Value {
    if v.is_nan() {
        json!("nan")
    } else if v.is_infinite() {
        json!(if v > 0.0 { "inf" } else { "-inf" })
    } else if v == v.trunc() && v.abs() < 9.0e15 {
        // Integral values print as integers (`2`, not `2.0`); both read back.
        json!(v as i64)
    } else {
        json!(v)
    }
}

fn dim_value(d: &Dim) -> Value {
    match d.as_const() {
        Some(c) => json!(c),
        None => json!(d.to_string()),
    }
}

impl Graph {
    fn parse_dim_value(&mut self, at: &str, field: &str, v: &Value) -> Result<Dim, GraphError> {
        match v {
            Value::Number(n) => n.as_i64().map(Dim::val).ok_or_else(|| {
                let what = if n.is_f64() {
                    "is not an integer"
                } else {
                    "is beyond the largest extent (2^63 - 1)"
                };
                err(at, Some(field), format!("dimension {n} {what}"))
            }),
            Value::String(s) => {
                Dim::parse(s, &mut self.scope).map_err(|e| err(at, Some(field), e.to_string()))
            }
            other => Err(err(
                at,
                Some(field),
                format!(
                    "a dimension is an integer or an expression string, got {}",
                    kind(other)
                ),
            )),
        }
    }

    fn parse_shape(&mut self, at: &str, field: &str, v: Value) -> Result<Vec<Dim>, GraphError> {
        let Value::Array(items) = v else {
            return Err(err(
                at,
                Some(field),
                format!("expected an array of dimensions, got {}", kind(&v)),
            ));
        };
        items
            .iter()
            .map(|d| self.parse_dim_value(at, field, d))
            .collect()
    }

    /// Reads a graph from its JSON text (format in `docs/graph-format.md`).
    /// Constant `file`s are resolved against `base_dir`.
    ///
    /// # Errors
    ///
    /// [`GraphError::Json`] naming the place (line/column, node, input,
    /// symbol or output) and field for malformed documents, unknown ops or
    /// attributes, missing or misnamed references, bad dtypes and bad
    /// dimension expressions; the shape and dtype errors of
    /// [`Graph::add_node`], naming the node; [`GraphError::Npy`] for a
    /// constant file that cannot be read.
    pub fn from_json(text: &str, base_dir: &Path) -> Result<Graph, GraphError> {
        // A byte-order mark (some editors write one) is not JSON.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let located = |e: serde_json::Error| {
            let at = format!("line {} column {}", e.line(), e.column());
            let msg = e.to_string();
            let msg = msg
                .rsplit_once(" at line ")
                .map_or(msg.as_str(), |(m, _)| m)
                .to_owned();
            err(&at, None, msg)
        };
        // serde_json keeps the last of repeated keys: a repeated key is
        // refused first, where it is.
        serde_json::from_str::<unique::UniqueKeys>(text).map_err(located)?;
        let value: Value = serde_json::from_str(text).map_err(located)?;
        if !value.is_object() {
            return Err(err(
                "document",
                None,
                format!("expected an object, got {}", kind(&value)),
            ));
        }
        let doc: Doc =
            serde_json::from_value(value).map_err(|e| err("document", None, e.to_string()))?;
        let mut g = Graph::new();

        // Symbols: those solved by an equality are added last, so that the
        // same symbol is eliminated as when the document was written.
        let mut eqs = Vec::with_capacity(doc.equal.len());
        for (i, e) in doc.equal.iter().enumerate() {
            let at = format!("equal[{i}]");
            match e.as_array().map(Vec::as_slice) {
                Some([a, b]) => eqs.push((at, a.clone(), b.clone())),
                _ => return Err(err(&at, None, "expected a pair [lhs, rhs] of dimensions")),
            }
        }
        let solved: Vec<&str> = eqs.iter().filter_map(|(_, a, _)| a.as_str()).collect();
        let mut names: Vec<&String> = doc.symbols.keys().collect();
        names.sort_by_key(|n| solved.contains(&n.as_str()));
        for name in names {
            let at = format!("symbol `{name}`");
            let mut obj = Obj::new(doc.symbols[name].clone(), at.clone())?;
            let min: i64 = obj.opt("min")?.unwrap_or(DEFAULT_RANGE.0);
            let max: i64 = obj.opt("max")?.unwrap_or(DEFAULT_RANGE.1);
            let multiple_of: i64 = obj.opt("multiple_of")?.unwrap_or(1);
            obj.finish(&["min", "max", "multiple_of"])?;
            if min < 0 {
                return Err(err(
                    &at,
                    Some("min"),
                    format!("{min}: a symbol stands for an extent, which is never negative"),
                ));
            }
            let sym = g
                .symbol(name, min, max)
                .map_err(|e| err(&at, None, e.to_string()))?;
            if multiple_of != 1 {
                g.declare_multiple_of(sym, multiple_of)
                    .map_err(|e| err(&at, Some("multiple_of"), e.to_string()))?;
            }
        }
        for (at, a, b) in &eqs {
            let a = g.parse_dim_value(at, "equal", a)?;
            let b = g.parse_dim_value(at, "equal", b)?;
            g.declare_equal(&a, &b)
                .map_err(|e| err(at, None, e.to_string()))?;
        }

        for (i, v) in doc.inputs.into_iter().enumerate() {
            let name = v.get("name").and_then(Value::as_str).map(str::to_owned);
            let at = match &name {
                Some(n) => format!("input `{n}`"),
                None => format!("inputs[{i}]"),
            };
            let mut obj = Obj::new(v, at.clone())?;
            let name: String = obj.req("name")?;
            let dtype: String = obj.req("dtype")?;
            let dtype = parse_dtype(&at, "dtype", &dtype)?;
            let shape = obj
                .raw("shape")
                .ok_or_else(|| err(&at, Some("shape"), "missing required field"))?;
            let shape = g.parse_shape(&at, "shape", shape)?;
            obj.finish(&["name", "dtype", "shape"])?;
            g.input(&name, dtype, &shape)?;
        }

        for (i, v) in doc.nodes.into_iter().enumerate() {
            g.parse_node(i, v, base_dir)?;
        }

        for (i, v) in doc.outputs.into_iter().enumerate() {
            let at = format!("outputs[{i}]");
            let (name, node) = match v {
                Value::String(s) => (s.clone(), s),
                other => {
                    let mut obj = Obj::new(other, at.clone())?;
                    let name: String = obj.req("name")?;
                    let node: String = obj.req("node")?;
                    obj.finish(&["name", "node"])?;
                    (name, node)
                }
            };
            let id = g.find(&node).ok_or_else(|| GraphError::UnknownName {
                context: format!("graph json: {at}"),
                name: node.clone(),
            })?;
            g.output(&name, id)?;
        }
        Ok(g)
    }

    /// Reads a graph from a JSON file; constant files are resolved against
    /// the file's directory.
    ///
    /// # Errors
    ///
    /// [`GraphError::Io`] naming the file (also when it is longer than
    /// [`dvm_tensor::input::MAX_INPUT_BYTES`] or not UTF-8), and the errors of
    /// [`Graph::from_json`].
    pub fn from_json_file(path: &Path) -> Result<Graph, GraphError> {
        let text = dvm_tensor::input::read_text(path).map_err(|source| GraphError::Io {
            path: path.to_owned(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Graph::from_json(&text, base)
    }

    fn parse_node(
        &mut self,
        index: usize,
        v: Value,
        base_dir: &Path,
    ) -> Result<NodeId, GraphError> {
        let at0 = format!("nodes[{index}]");
        let mut obj = Obj::new(v, at0)?;
        let name: String = obj.req("name")?;
        obj.at = format!("node `{name}`");
        let at = obj.at.clone();
        let op_name: String = obj.req("op")?;
        let inputs: Vec<String> = obj.opt("inputs")?.unwrap_or_default();
        let mut operands = Vec::with_capacity(inputs.len());
        for input in &inputs {
            let id = self.find(input).ok_or_else(|| {
                err(
                    &at,
                    Some("inputs"),
                    format!("no earlier node or input is named `{input}`"),
                )
            })?;
            operands.push(id);
        }
        let mut n = NodeText {
            obj,
            name,
            at,
            operands,
            allowed: vec!["name", "op", "inputs"],
            dtype: None,
            shape: None,
        };
        let op = match op_name.as_str() {
            "input" => {
                return Err(err(
                    &n.at,
                    Some("op"),
                    "graph inputs are declared in the top-level `inputs` list",
                ))
            }
            "constant" => self.parse_constant(&mut n, base_dir)?,
            "where" => Op::Where,
            "cast" => {
                n.allowed.push("dtype");
                let d: String = n.obj.req("dtype")?;
                n.dtype = Some(parse_dtype(&n.at, "dtype", &d)?);
                Op::Cast
            }
            "reduce_sum" | "reduce_mean" | "reduce_max" | "reduce_min" => {
                self.parse_reduce(&mut n, &op_name)?
            }
            "softmax" | "log_softmax" => self.parse_softmax(&mut n, &op_name)?,
            "layer_norm" => {
                n.allowed.push("eps");
                Op::LayerNorm {
                    eps: n.obj.opt("eps")?.unwrap_or(LAYER_NORM_EPS),
                }
            }
            "rms_norm" => {
                n.allowed.push("eps");
                Op::RmsNorm {
                    eps: n.obj.opt("eps")?.unwrap_or(RMS_NORM_EPS),
                }
            }
            "matmul" => {
                n.allowed.extend(["trans_a", "trans_b"]);
                Op::MatMul {
                    trans_a: n.obj.opt("trans_a")?.unwrap_or(false),
                    trans_b: n.obj.opt("trans_b")?.unwrap_or(false),
                }
            }
            "reshape" | "expand" => {
                n.allowed.push("shape");
                let s = n
                    .obj
                    .raw("shape")
                    .ok_or_else(|| err(&n.at, Some("shape"), "missing required field"))?;
                n.shape = Some(self.parse_shape(&n.at, "shape", s)?);
                if op_name == "reshape" {
                    Op::Reshape
                } else {
                    Op::Expand
                }
            }
            "transpose" | "slice" | "concat" => self.parse_layout(&mut n, &op_name)?,
            "squeeze" | "unsqueeze" => self.parse_squeeze(&mut n, op_name == "unsqueeze")?,
            "iota" => self.parse_iota(&mut n)?,
            "trilu" => {
                n.allowed.extend(["upper", "k"]);
                Op::Trilu {
                    upper: n.obj.opt("upper")?.unwrap_or(true),
                    k: n.obj.opt("k")?.unwrap_or(0),
                }
            }
            "gather" => {
                n.allowed.push("axis");
                let axis: i64 = n.obj.opt("axis")?.unwrap_or(0);
                let cx = Ctx {
                    node: &n.name,
                    op: "gather",
                };
                Op::Gather {
                    axis: norm_axis(&cx, axis, n.rank(self, 0))?,
                }
            }
            "conv2d" | "max_pool2d" | "avg_pool2d" => parse_window(&mut n, &op_name)?,
            other => self.parse_elementwise(&mut n, other)?,
        };
        let NodeText {
            obj,
            name,
            operands,
            allowed,
            dtype,
            shape,
            ..
        } = n;
        obj.finish(&allowed)?;
        self.add_node(Some(&name), op, &operands, dtype, shape.as_deref())
    }

    /// A `constant` node: inline `values` or a `.npy` `file`.
    fn parse_constant(&mut self, n: &mut NodeText, base_dir: &Path) -> Result<Op, GraphError> {
        let at = n.at.clone();
        n.allowed.extend(["dtype", "shape", "values", "file"]);
        let dt: Option<String> = n.obj.opt("dtype")?;
        let dt = dt.map(|d| parse_dtype(&at, "dtype", &d)).transpose()?;
        let declared = n
            .obj
            .raw("shape")
            .map(|s| self.parse_shape(&at, "shape", s))
            .transpose()?;
        let values = n.obj.raw("values");
        let file: Option<String> = n.obj.opt("file")?;
        let (dt, s, vals) = match (values, file) {
            (Some(_), Some(_)) => {
                return Err(err(
                    &at,
                    Some("file"),
                    "give either `values` or `file`, not both",
                ))
            }
            (None, None) => {
                return Err(err(
                    &at,
                    Some("values"),
                    "a constant needs `values` or `file`",
                ))
            }
            (Some(v), None) => {
                let dt = dt.ok_or_else(|| err(&at, Some("dtype"), "missing required field"))?;
                let s =
                    declared.ok_or_else(|| err(&at, Some("shape"), "missing required field"))?;
                let vals = match v {
                    Value::Array(items) => items
                        .iter()
                        .map(|x| parse_float(&at, "values", x))
                        .collect::<Result<Vec<_>, _>>()?,
                    other => vec![parse_float(&at, "values", &other)?],
                };
                (dt, s, vals)
            }
            (None, Some(f)) => {
                let path = base_dir.join(&f);
                // A weight is a file: a FIFO would block the read
                // until something writes to it, a device never end.
                if let Ok(m) = std::fs::metadata(&path) {
                    if !m.is_file() {
                        return Err(err(
                            &at,
                            Some("file"),
                            format!("`{f}` is not a regular file"),
                        ));
                    }
                }
                let t = match dt {
                    Some(d) => dvm_tensor::npy::read_as(&path, d),
                    None => dvm_tensor::npy::read(&path),
                }
                .map_err(|e| err(&at, Some("file"), e.to_string()))?;
                let s: Vec<Dim> = t.shape().iter().map(|&d| Dim::val(d as i64)).collect();
                if let Some(decl) = declared {
                    if decl != s {
                        return Err(err(
                            &at,
                            Some("shape"),
                            format!(
                                "declared {} but `{f}` has shape {:?}",
                                super::ShapeDisplay(&decl),
                                t.shape()
                            ),
                        ));
                    }
                }
                (t.dtype(), s, t.to_f64_vec())
            }
        };
        n.dtype = Some(dt);
        n.shape = Some(s);
        Ok(Op::Constant(vals))
    }

    /// `iota`: `dtype`, `shape` and `axis` (negative counts from the end).
    fn parse_iota(&mut self, n: &mut NodeText) -> Result<Op, GraphError> {
        n.allowed.extend(["dtype", "shape", "axis"]);
        let d: String = n.obj.req("dtype")?;
        n.dtype = Some(parse_dtype(&n.at, "dtype", &d)?);
        let s = n
            .obj
            .raw("shape")
            .ok_or_else(|| err(&n.at, Some("shape"), "missing required field"))?;
        let s = self.parse_shape(&n.at, "shape", s)?;
        let axis: i64 = n.obj.req("axis")?;
        let cx = Ctx {
            node: &n.name,
            op: "iota",
        };
        let axis = norm_axis(&cx, axis, s.len())?;
        n.shape = Some(s);
        Ok(Op::Iota { axis })
    }

    /// `reduce_*`: `axes` and `keepdims`.
    fn parse_reduce(&self, n: &mut NodeText, op_name: &str) -> Result<Op, GraphError> {
        n.allowed.extend(["axes", "keepdims"]);
        let rop = match op_name {
            "reduce_sum" => ReduceOp::Sum,
            "reduce_mean" => ReduceOp::Mean,
            "reduce_max" => ReduceOp::Max,
            _ => ReduceOp::Min,
        };
        let axes: Vec<i64> = n.obj.req("axes")?;
        let keepdims: bool = n.obj.opt("keepdims")?.unwrap_or(false);
        let probe = Op::Reduce {
            op: rop,
            axes: vec![],
            keepdims,
        };
        let cx = Ctx {
            node: &n.name,
            op: probe.name(),
        };
        let axes = axes
            .iter()
            .map(|&a| norm_axis(&cx, a, n.rank(self, 0)))
            .collect::<Result<_, _>>()?;
        Ok(Op::Reduce {
            op: rop,
            axes,
            keepdims,
        })
    }

    /// `softmax` / `log_softmax`: `axis` (default the last).
    fn parse_softmax(&self, n: &mut NodeText, op_name: &str) -> Result<Op, GraphError> {
        n.allowed.push("axis");
        let axis: i64 = n.obj.opt("axis")?.unwrap_or(-1);
        let is_log = op_name == "log_softmax";
        let cx = Ctx {
            node: &n.name,
            op: if is_log { "log_softmax" } else { "softmax" },
        };
        let axis = norm_axis(&cx, axis, n.rank(self, 0))?;
        Ok(if is_log {
            Op::LogSoftmax { axis }
        } else {
            Op::Softmax { axis }
        })
    }

    /// `transpose` (`perm`), `slice` (`ranges`) and `concat` (`axis`).
    fn parse_layout(&self, n: &mut NodeText, op_name: &str) -> Result<Op, GraphError> {
        let rank0 = n.rank(self, 0);
        match op_name {
            "transpose" => {
                n.allowed.push("perm");
                let perm: Vec<i64> = n.obj.req("perm")?;
                let cx = Ctx {
                    node: &n.name,
                    op: "transpose",
                };
                let perm = perm
                    .iter()
                    .map(|&a| norm_axis(&cx, a, rank0))
                    .collect::<Result<_, _>>()?;
                Ok(Op::Transpose { perm })
            }
            "slice" => {
                n.allowed.push("ranges");
                let items: Vec<Value> = n.obj.req("ranges")?;
                let cx = Ctx {
                    node: &n.name,
                    op: "slice",
                };
                let mut ranges = Vec::with_capacity(items.len());
                for (k, item) in items.into_iter().enumerate() {
                    let mut r = Obj::new(item, format!("{} ranges[{k}]", n.at))?;
                    let axis: i64 = r.req("axis")?;
                    let start: i64 = r.opt("start")?.unwrap_or(0);
                    let end: i64 = r.opt("end")?.unwrap_or(i64::MAX);
                    let step: i64 = r.opt("step")?.unwrap_or(1);
                    r.finish(&["axis", "start", "end", "step"])?;
                    ranges.push((norm_axis(&cx, axis, rank0)?, start, end, step));
                }
                Ok(Op::Slice { ranges })
            }
            _ => {
                n.allowed.push("axis");
                let axis: i64 = n.obj.req("axis")?;
                let cx = Ctx {
                    node: &n.name,
                    op: "concat",
                };
                if n.operands.is_empty() {
                    return Err(cx.arity("at least 1", 0));
                }
                Ok(Op::Concat {
                    axis: norm_axis(&cx, axis, rank0)?,
                })
            }
        }
    }

    /// `squeeze` / `unsqueeze`: `axes` (squeeze without axes drops every
    /// extent-1 axis).
    fn parse_squeeze(&self, n: &mut NodeText, is_un: bool) -> Result<Op, GraphError> {
        n.allowed.push("axes");
        let axes: Vec<i64> = n.obj.opt("axes")?.unwrap_or_default();
        let cx = Ctx {
            node: &n.name,
            op: if is_un { "unsqueeze" } else { "squeeze" },
        };
        let r = n.rank(self, 0);
        if is_un {
            let out_rank = r + axes.len();
            let axes = axes
                .iter()
                .map(|&a| norm_axis(&cx, a, out_rank))
                .collect::<Result<_, _>>()?;
            Ok(Op::Unsqueeze { axes })
        } else if axes.is_empty() {
            let s = n
                .operands
                .first()
                .map(|&id| self[id].shape.clone())
                .unwrap_or_default();
            let axes = s
                .iter()
                .enumerate()
                .filter(|(_, d)| self.scope.canonical(d).as_const() == Some(1))
                .map(|(i, _)| i)
                .collect();
            Ok(Op::Squeeze { axes })
        } else {
            let axes = axes
                .iter()
                .map(|&a| norm_axis(&cx, a, r))
                .collect::<Result<_, _>>()?;
            Ok(Op::Squeeze { axes })
        }
    }

    /// An opcode mnemonic: unary, binary, or scalar (`scalar` or
    /// `scalar_dim`).
    fn parse_elementwise(&mut self, n: &mut NodeText, other: &str) -> Result<Op, GraphError> {
        let at = n.at.clone();
        match Opcode::from_mnemonic(other).and_then(|c| opcode_kind(c).map(|k| (c, k))) {
            Some((c, OpcodeKind::Unary)) => Ok(Op::Unary(c)),
            Some((c, OpcodeKind::Binary)) => Ok(Op::Binary(c)),
            Some((c, OpcodeKind::Scalar)) => {
                n.allowed.extend(["scalar", "scalar_dim"]);
                match (n.obj.raw("scalar"), n.obj.raw("scalar_dim")) {
                    (Some(v), None) => Ok(Op::Scalar(c, parse_float(&at, "scalar", &v)?)),
                    (None, Some(d)) => Ok(Op::ScalarDim(
                        c,
                        self.parse_dim_value(&at, "scalar_dim", &d)?,
                    )),
                    (Some(_), Some(_)) => Err(err(
                        &at,
                        Some("scalar_dim"),
                        "give either `scalar` or `scalar_dim`, not both",
                    )),
                    (None, None) => Err(err(&at, Some("scalar"), "missing required field")),
                }
            }
            None => Err(err(
                &at,
                Some("op"),
                format!("unknown op `{other}` (see docs/graph-format.md for the list)"),
            )),
        }
    }

    /// The graph as JSON text (pretty-printed), readable by
    /// [`Graph::from_json`]. Constants are written inline (`values`).
    pub fn to_json(&self) -> String {
        let mut symbols = Map::new();
        for s in self.scope.symbols() {
            let (lo, hi) = self.scope.range(s);
            let m = self.scope.multiple_of(s);
            let mut spec = Map::new();
            if lo != DEFAULT_RANGE.0 {
                spec.insert("min".into(), json!(lo));
            }
            if hi != DEFAULT_RANGE.1 {
                spec.insert("max".into(), json!(hi));
            }
            if m != 1 {
                spec.insert("multiple_of".into(), json!(m));
            }
            symbols.insert(s.name().to_owned(), Value::Object(spec));
        }
        let equal: Vec<Value> = self
            .scope
            .equalities()
            .map(|(s, d)| json!([s.name(), dim_value(d)]))
            .collect();
        let shape = |s: &[Dim]| Value::Array(s.iter().map(dim_value).collect());
        let mut inputs = Vec::new();
        let mut nodes = Vec::new();
        for n in self.nodes() {
            if n.op == Op::Input {
                inputs.push(
                    json!({"name": n.name.as_str(), "dtype": n.dtype.name(), "shape": shape(&n.shape)}),
                );
                continue;
            }
            let mut o = Map::new();
            o.insert("name".into(), json!(n.name.as_str()));
            o.insert("op".into(), json!(n.op.name()));
            if !n.operands.is_empty() {
                let names: Vec<&str> = n.operands.iter().map(|&i| self[i].name.as_str()).collect();
                o.insert("inputs".into(), json!(names));
            }
            let mut put = |k: &str, v: Value| {
                o.insert(k.to_owned(), v);
            };
            match &n.op {
                Op::Input | Op::Unary(_) | Op::Binary(_) | Op::Where => {}
                Op::Constant(v) => {
                    put("dtype", json!(n.dtype.name()));
                    put("shape", shape(&n.shape));
                    put("values", Value::Array(v.iter().map(|&x| float_value(x)).collect()));
                }
                Op::Scalar(_, v) => put("scalar", float_value(*v)),
                Op::ScalarDim(_, d) => put("scalar_dim", dim_value(d)),
                Op::Cast => put("dtype", json!(n.dtype.name())),
                Op::Reduce { axes, keepdims, .. } => {
                    put("axes", json!(axes));
                    put("keepdims", json!(keepdims));
                }
                Op::Softmax { axis }
                | Op::LogSoftmax { axis }
                | Op::Concat { axis }
                | Op::Gather { axis } => put("axis", json!(axis)),
                Op::LayerNorm { eps } | Op::RmsNorm { eps } => put("eps", json!(eps)),
                Op::MatMul { trans_a, trans_b } => {
                    put("trans_a", json!(trans_a));
                    put("trans_b", json!(trans_b));
                }
                Op::Reshape | Op::Expand => put("shape", shape(&n.shape)),
                Op::Transpose { perm } => put("perm", json!(perm)),
                Op::Slice { ranges } => put(
                    "ranges",
                    Value::Array(
                        ranges
                            .iter()
                            .map(|&(axis, start, end, step)| json!({"axis": axis, "start": start, "end": end, "step": step}))
                            .collect(),
                    ),
                ),
                Op::Squeeze { axes } | Op::Unsqueeze { axes } => put("axes", json!(axes)),
                Op::Iota { axis } => {
                    put("dtype", json!(n.dtype.name()));
                    put("shape", shape(&n.shape));
                    put("axis", json!(axis));
                }
                Op::Trilu { upper, k } => {
                    put("upper", json!(upper));
                    put("k", json!(k));
                }
                Op::Conv2d(a) => {
                    put("strides", json!(a.strides));
                    put("pads", json!(a.pads));
                    put("dilations", json!(a.dilations));
                    put("groups", json!(a.groups));
                }
                Op::MaxPool2d(p) | Op::AvgPool2d { pool: p, .. } => {
                    put("kernel", json!(p.kernel));
                    put("strides", json!(p.strides));
                    put("pads", json!(p.pads));
                    put("dilations", json!(p.dilations));
                    if let Op::AvgPool2d {
                        count_include_pad, ..
                    } = &n.op
                    {
                        put("count_include_pad", json!(count_include_pad));
                    }
                }
            }
            nodes.push(Value::Object(o));
        }
        let outputs: Vec<Value> = self
            .outputs()
            .iter()
            .map(|(name, id)| {
                if *name == self[*id].name {
                    json!(name)
                } else {
                    json!({"name": name, "node": self[*id].name.as_str()})
                }
            })
            .collect();
        let doc = json!({
            "symbols": symbols,
            "equal": equal,
            "inputs": inputs,
            "nodes": nodes,
            "outputs": outputs,
        });
        serde_json::to_string_pretty(&doc).unwrap_or_default()
    }
}

/// Field `key` of `n`: `K` integers of at least `min`, or `default` when
/// absent.
fn window_ints<const K: usize>(
    n: &mut NodeText,
    key: &'static str,
    default: Option<[usize; K]>,
    min: i64,
) -> Result<[usize; K], GraphError> {
    let v: Option<Vec<i64>> = n.obj.opt(key)?;
    let Some(v) = v else {
        return default.ok_or_else(|| err(&n.at, Some(key), "missing required field"));
    };
    let bad = || {
        err(
            &n.at,
            Some(key),
            format!("expected {K} integers of at least {min}, got {v:?}"),
        )
    };
    if v.len() != K || v.iter().any(|&x| x < min) {
        return Err(bad());
    }
    let mut out = [0usize; K];
    for (o, &x) in out.iter_mut().zip(&v) {
        *o = usize::try_from(x).map_err(|_| bad())?;
    }
    Ok(out)
}

/// `conv2d` (`strides`, `pads`, `dilations`, `groups`), `max_pool2d` and
/// `avg_pool2d` (`kernel`, `strides`, `pads`, `dilations`, and
/// `count_include_pad` for the average).
fn parse_window(n: &mut NodeText, op_name: &str) -> Result<Op, GraphError> {
    n.allowed.extend(["strides", "pads", "dilations"]);
    let strides = window_ints(n, "strides", Some([1, 1]), 1)?;
    let pads = window_ints(n, "pads", Some([0; 4]), 0)?;
    let dilations = window_ints(n, "dilations", Some([1, 1]), 1)?;
    if op_name == "conv2d" {
        n.allowed.push("groups");
        let g: i64 = n.obj.opt("groups")?.unwrap_or(1);
        let groups = usize::try_from(g).ok().filter(|&g| g >= 1).ok_or_else(|| {
            err(
                &n.at,
                Some("groups"),
                format!("expected at least 1, got {g}"),
            )
        })?;
        return Ok(Op::Conv2d(Box::new(crate::Conv2d {
            strides,
            pads,
            dilations,
            groups,
        })));
    }
    n.allowed.push("kernel");
    let pool = Box::new(crate::Pool2d {
        kernel: window_ints(n, "kernel", None, 1)?,
        strides,
        pads,
        dilations,
    });
    if op_name == "max_pool2d" {
        return Ok(Op::MaxPool2d(pool));
    }
    n.allowed.push("count_include_pad");
    Ok(Op::AvgPool2d {
        pool,
        count_include_pad: n.obj.opt("count_include_pad")?.unwrap_or(false),
    })
}
