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

/// One input of a workload.
#[derive(Clone, Debug, Deserialize)]
pub struct InputSpec {
    /// The input's name in every system's model.
    pub name: String,
    /// Its shape, `S` standing for the sequence length.
    pub shape: Vec<DimSpec>,
    /// Values are uniform in `[-scale, scale)`.
    pub scale: f64,
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

    /// The inputs at sequence length `s` for call seed `seed`.
    ///
    /// # Errors
    /// A symbol other than `S`, or a shape too large for memory.
    pub fn inputs(&self, s: u64, seed: u64) -> Result<Vec<(String, Tensor)>, String> {
        let mut out = Vec::with_capacity(self.inputs.len());
        for (k, input) in self.inputs.iter().enumerate() {
            let shape = input
                .shape
                .iter()
                .map(|d| match d {
                    DimSpec::Fixed(v) => Ok(*v),
                    DimSpec::Symbol(n) if n == "S" => Ok(s),
                    DimSpec::Symbol(n) => Err(format!(
                        "workload `{}`, input `{}`: unknown symbol `{n}` (only `S`)",
                        self.name, input.name
                    )),
                })
                .collect::<Result<Vec<u64>, String>>()?;
            let n = shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(usize::try_from(d).ok()?))
                .ok_or_else(|| format!("input `{}`: shape {shape:?} too large", input.name))?;
            let v = inputs::values(n, seed, k as u64, input.scale);
            let t =
                Tensor::from_f32(&shape, &v).map_err(|e| format!("input `{}`: {e}", input.name))?;
            debug_assert_eq!(t.dtype(), DType::F32);
            out.push((input.name.clone(), t));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::WorkloadSpec;

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
        let inputs = w.inputs(5, 1).expect("inputs");
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
        assert!(sym.inputs(3, 0).unwrap_err().contains("unknown symbol `B`"));
    }
}
