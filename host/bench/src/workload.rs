//! Workload specifications as the orchestrator sends them, and the dvm
//! graph each one names.

use dvm::{DType, Graph, Tensor};
use dvm_graph::models::{self, EncoderConfig};
use serde::Deserialize;
use serde_json::Value;

use crate::inputs;

/// Largest `S` every workload graph accepts.
pub const MAX_LEN: i64 = 1 << 16;

/// One dimension of an input shape: a number or the symbol `"S"`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum DimSpec {
    /// A fixed size.
    Fixed(u64),
    /// A symbol name; only `S` is bound.
    Symbol(String),
}

/// The element type of a workload input and how its values are drawn.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum InputType {
    /// `float32`, uniform in `[-scale, scale)` ([`inputs::values`]).
    #[default]
    Float32,
    /// `int64`, uniform in `[0, high)` ([`inputs::ints`]): token ids.
    Int64,
    /// `bool`, the lower triangle (diagonal included) of the last two axes
    /// true: a causal attention mask. Not seeded.
    Bool,
}

/// Largest `high` of an integer input: the hash's 32 bits times `high`
/// fit in 64.
pub const MAX_HIGH: u64 = 1 << 32;

/// One input of a workload.
#[derive(Clone, Debug, Deserialize)]
pub struct InputSpec {
    /// The input's name in every system's model.
    pub name: String,
    /// Its shape, `S` standing for the sequence length.
    pub shape: Vec<DimSpec>,
    /// Its element type (default `float32`).
    #[serde(default)]
    pub dtype: InputType,
    /// `float32` values are uniform in `[-scale, scale)` (default 1).
    #[serde(default = "one")]
    pub scale: f64,
    /// `int64` values are uniform in `[0, high)`.
    #[serde(default)]
    pub high: Option<u64>,
}

fn one() -> f64 {
    1.0
}

/// A workload: either a graph builder of `dvm_graph::models` with its
/// parameters, or an `.onnx` file.
#[derive(Clone, Debug, Deserialize)]
pub struct WorkloadSpec {
    /// The name the reports use.
    pub name: String,
    /// The builder (`gelu_linear`, `softmax_rows`, …, `encoder_block`).
    #[serde(default)]
    pub builder: Option<String>,
    /// An `.onnx` model file, for workloads defined by one.
    #[serde(default)]
    pub onnx: Option<String>,
    /// The builder's parameters (`hidden`, `heads`, `head_dim`, `ffn`).
    #[serde(default)]
    pub params: serde_json::Map<String, Value>,
    /// The inputs, in the order their seeds count.
    pub inputs: Vec<InputSpec>,
}

impl WorkloadSpec {
    fn param(&self, key: &str) -> Result<i64, String> {
        self.params
            .get(key)
            .and_then(Value::as_i64)
            .filter(|&v| v > 0)
            .ok_or_else(|| {
                format!(
                    "workload `{}`: parameter `{key}` missing or not a positive integer",
                    self.name
                )
            })
    }

    /// The dvm graph of this workload.
    ///
    /// # Errors
    /// An unknown builder, a missing parameter, an `.onnx` file that does
    /// not import (its error), or a graph the builder refuses.
    pub fn graph(&self) -> Result<Graph, String> {
        if let Some(path) = &self.onnx {
            return dvm::onnx::import(std::path::Path::new(path))
                .map_err(|e| format!("workload `{}`: {e}", self.name));
        }
        let Some(builder) = &self.builder else {
            return Err(format!(
                "workload `{}` names neither a builder nor an onnx file",
                self.name
            ));
        };
        let built = match builder.as_str() {
            "gelu_linear" => models::gelu_linear(self.param("hidden")?, MAX_LEN),
            "matmul_bias_relu" => models::matmul_bias_relu(self.param("hidden")?, MAX_LEN),
            "softmax_rows" => models::softmax_rows(self.param("hidden")?, MAX_LEN),
            "layer_norm_rows" => models::layer_norm_rows(self.param("hidden")?, MAX_LEN),
            "add_layer_norm" => models::add_layer_norm(self.param("hidden")?, MAX_LEN),
            "row_sum" => models::row_sum(self.param("hidden")?, MAX_LEN),
            "attention" => {
                models::attention(self.param("heads")?, self.param("head_dim")?, MAX_LEN)
            }
            "encoder_block" => models::encoder_block(&EncoderConfig {
                hidden: self.param("hidden")? as u64,
                heads: self.param("heads")? as u64,
                ffn: self.param("ffn")? as u64,
                max_len: MAX_LEN,
            }),
            other => {
                return Err(format!(
                    "workload `{}`: unknown builder `{other}`",
                    self.name
                ))
            }
        };
        built.map_err(|e| format!("workload `{}`: {e}", self.name))
    }

    /// The inputs at sequence length `s` for call seed `seed`, each of the
    /// dtype `graph` declares for it (an `int64` input that the graph
    /// computes as `i32` is made `i32`).
    ///
    /// # Errors
    /// A symbol other than `S`, a shape too large for memory, an input the
    /// graph lacks or declares with a dtype the values cannot take, an
    /// `int64` input without a `high` in `1..=2^32`, a `bool` input of
    /// rank below 2.
    pub fn inputs(
        &self,
        graph: &Graph,
        s: u64,
        seed: u64,
    ) -> Result<Vec<(String, Tensor)>, String> {
        let mut out = Vec::with_capacity(self.inputs.len());
        for (k, input) in self.inputs.iter().enumerate() {
            let named =
                |what: String| format!("workload `{}`, input `{}`: {what}", self.name, input.name);
            let shape = input
                .shape
                .iter()
                .map(|d| match d {
                    DimSpec::Fixed(v) => Ok(*v),
                    DimSpec::Symbol(n) if n == "S" => Ok(s),
                    DimSpec::Symbol(n) => Err(named(format!("unknown symbol `{n}` (only `S`)"))),
                })
                .collect::<Result<Vec<u64>, String>>()?;
            let n = shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(usize::try_from(d).ok()?))
                .ok_or_else(|| named(format!("shape {shape:?} too large")))?;
            let want = graph
                .find(&input.name)
                .map(|id| graph.nodes()[id.index()].dtype)
                .ok_or_else(|| named("not an input of the model".into()))?;
            let t = match (input.dtype, want) {
                (InputType::Float32, DType::F32) => {
                    Tensor::from_f32(&shape, &inputs::values(n, seed, k as u64, input.scale))
                }
                (InputType::Int64, DType::I32 | DType::I64) => {
                    let high = input
                        .high
                        .filter(|h| (1..=MAX_HIGH).contains(h))
                        .ok_or_else(|| named("`high` missing or not in 1..=2^32".into()))?;
                    let v = inputs::ints(n, seed, k as u64, high);
                    if want == DType::I64 {
                        let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                        Tensor::new(DType::I64, shape.clone(), bytes)
                    } else {
                        let v: Vec<i32> = v
                            .iter()
                            .map(|&x| i32::try_from(x))
                            .collect::<Result<_, _>>()
                            .map_err(|_| named("`high` beyond the model's i32".into()))?;
                        Tensor::from_i32(&shape, &v)
                    }
                }
                (InputType::Bool, DType::Bool) => {
                    let [.., rows, cols] = shape[..] else {
                        return Err(named("a bool mask needs two axes or more".into()));
                    };
                    let (rows, cols) = (rows as usize, cols as usize);
                    let v: Vec<bool> = (0..n)
                        .map(|i| (i % cols) <= (i / cols) % rows.max(1))
                        .collect();
                    Tensor::from_bool(&shape, &v)
                }
                (have, want) => {
                    return Err(named(format!(
                        "values of type {have:?} for a {want} input of the model"
                    )))
                }
            };
            out.push((input.name.clone(), t.map_err(|e| named(e.to_string()))?));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::WorkloadSpec;
    use dvm::{DType, Tensor};

    fn spec(json: &str) -> WorkloadSpec {
        serde_json::from_str(json).expect("valid spec")
    }

    #[test]
    fn builds_and_binds_a_builtin() {
        let w = spec(
            r#"{"name":"softmax","builder":"softmax_rows","params":{"hidden":8},
                "inputs":[{"name":"x","shape":["S",8],"scale":3.0}]}"#,
        );
        let g = w.graph().expect("graph");
        let rt = dvm::Runtime::with_cores(1);
        let p = dvm::Prepared::new(&g).expect("prepared");
        let inputs = w.inputs(&g, 5, 1).expect("inputs");
        let refs: Vec<(&str, &dvm::Tensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let out = rt.run(&p, &refs).expect("runs");
        let y = out["y"].as_slice::<f32>().expect("f32");
        assert_eq!(out["y"].shape(), &[5, 8]);
        for row in y.chunks(8) {
            let s: f32 = row.iter().sum();
            assert!((s - 1.0).abs() < 1e-5, "row sums to {s}");
        }
    }

    #[test]
    fn bad_specs_are_named() {
        let unknown = spec(r#"{"name":"w","builder":"nope","inputs":[]}"#);
        assert!(unknown
            .graph()
            .unwrap_err()
            .contains("unknown builder `nope`"));
        let missing = spec(r#"{"name":"w","builder":"row_sum","inputs":[]}"#);
        assert!(missing.graph().unwrap_err().contains("`hidden`"));
        let onnx = spec(r#"{"name":"m","onnx":"m.onnx","inputs":[]}"#);
        let e = onnx.graph().unwrap_err();
        assert!(e.contains("`m`") && e.contains("m.onnx"), "{e}");
        let sym = spec(
            r#"{"name":"w","builder":"row_sum","params":{"hidden":4},
            "inputs":[{"name":"x","shape":["B",4],"scale":1.0}]}"#,
        );
        let g = sym.graph().expect("graph");
        assert!(sym
            .inputs(&g, 3, 0)
            .unwrap_err()
            .contains("unknown symbol `B`"));
        let typed = spec(
            r#"{"name":"w","builder":"row_sum","params":{"hidden":4},
            "inputs":[{"name":"x","shape":["S",4],"dtype":"int64","high":9}]}"#,
        );
        let e = typed.inputs(&g, 3, 0).unwrap_err();
        assert!(e.contains("input `x`") && e.contains("Int64"), "{e}");
        let absent = spec(
            r#"{"name":"w","builder":"row_sum","params":{"hidden":4},
            "inputs":[{"name":"q","shape":["S",4]}]}"#,
        );
        let e = absent.inputs(&g, 3, 0).unwrap_err();
        assert!(e.contains("input `q`: not an input"), "{e}");
    }

    fn zoo(file: &str) -> String {
        format!("{}/../../tests/models/{file}", env!("CARGO_MANIFEST_DIR"))
    }

    /// The GPT model's token ids (an `int64` input computed as `i32`) and
    /// the masked decoder's causal mask (`bool`).
    #[test]
    fn integer_and_mask_inputs_feed_the_zoo_models() {
        let gpt = spec(&format!(
            r#"{{"name":"gpt","onnx":"{}",
                "inputs":[{{"name":"tokens","shape":[1,"S"],"dtype":"int64","high":96}}]}}"#,
            zoo("gpt.dynamo18.onnx")
        ));
        let g = gpt.graph().expect("gpt imports");
        let inputs = gpt.inputs(&g, 9, 4).expect("inputs");
        let t = &inputs[0].1;
        assert_eq!((t.dtype(), t.shape()), (DType::I32, &[1u64, 9][..]));
        let ids = t.as_slice::<i32>().expect("i32");
        assert!(ids.iter().all(|x| (0..96).contains(x)), "{ids:?}");
        let want: Vec<i32> = crate::inputs::ints(9, 4, 0, 96)
            .iter()
            .map(|&x| x as i32)
            .collect();
        assert_eq!(ids, want);
        let p = dvm::Prepared::new(&g).expect("prepared");
        let rt = dvm::Runtime::with_cores(1);
        let refs: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let out = rt.run(&p, &refs).expect("runs");
        assert_eq!(out["y"].shape(), &[1, 9, 96]);

        let dec = spec(&format!(
            r#"{{"name":"dec","onnx":"{}",
                "inputs":[{{"name":"x","shape":[1,"S",64],"scale":1.0}},
                          {{"name":"mask","shape":["S","S"],"dtype":"bool"}}]}}"#,
            zoo("decoder_masked.dynamo18.onnx")
        ));
        let g = dec.graph().expect("decoder imports");
        let inputs = dec.inputs(&g, 3, 1).expect("inputs");
        assert_eq!(inputs[1].1.bytes(), &[1, 0, 0, 1, 1, 0, 1, 1, 1]);
        let p = dvm::Prepared::new(&g).expect("prepared");
        let refs: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let out = rt.run(&p, &refs).expect("runs");
        assert_eq!(out["y"].shape(), &[1, 3, 64]);
        let bad = spec(
            r#"{"name":"b","builder":"row_sum","params":{"hidden":4},
            "inputs":[{"name":"x","shape":["S",4],"dtype":"int64"}]}"#,
        );
        let gb = bad.graph().expect("graph");
        assert!(bad.inputs(&gb, 2, 0).unwrap_err().contains("input `x`"));
    }
}
