//! `dvm info`: what an ONNX model holds and what of it dvm can run.

use std::path::Path;

use crate::say::outln;
use crate::Failure;

/// Prints the model's inputs and outputs (symbolic shapes), its op counts
/// and its unsupported nodes. Exit code 2 for a file that is not an ONNX
/// model; a model with unsupported nodes is described, not refused.
pub fn cmd_info(path: &Path) -> Result<(), Failure> {
    let model = dvm_onnx::OnnxModel::read(path).map_err(|e| Failure(e.to_string(), 2))?;
    let info = model.info();
    outln!("model: {}", path.display())?;
    outln!("opset: {}", info.opset)?;
    if !info.producer.is_empty() {
        outln!("producer: {}", info.producer)?;
    }
    outln!("inputs:")?;
    for v in &info.inputs {
        outln!("  {}: {} {}", v.name, v.elem, v.shape)?;
    }
    if !info.symbols.is_empty() {
        outln!("symbols: {}", info.symbols.join(", "))?;
    }
    outln!("outputs:")?;
    for v in &info.outputs {
        outln!("  {}: {} {}", v.name, v.elem, v.shape)?;
    }
    let total: usize = info.op_counts.iter().map(|(_, n)| n).sum();
    outln!("ops ({total} nodes):")?;
    for (op, n) in &info.op_counts {
        outln!("  {op}: {n}")?;
    }
    if info.unsupported.is_empty() && info.error.is_none() {
        outln!("supported: every node")?;
    }
    if !info.unsupported.is_empty() {
        outln!("unsupported ({} nodes):", info.unsupported.len())?;
        for u in &info.unsupported {
            outln!("  {u}")?;
        }
    }
    if let Some(e) = &info.error {
        outln!("does not import: {e}")?;
    }
    Ok(())
}
