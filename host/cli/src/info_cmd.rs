//! `dvm info`: what an ONNX model holds and what of it dvm can run.

use std::path::Path;

use crate::Failure;

/// Prints the model's inputs and outputs (symbolic shapes), its op counts
/// and its unsupported nodes. Exit code 2 for a file that is not an ONNX
/// model; a model with unsupported nodes is described, not refused.
pub fn cmd_info(path: &Path) -> Result<(), Failure> {
    let model = dvm_onnx::OnnxModel::read(path).map_err(|e| Failure(e.to_string(), 2))?;
    let info = model.info();
    println!("model: {}", path.display());
    println!("opset: {}", info.opset);
    if !info.producer.is_empty() {
        println!("producer: {}", info.producer);
    }
    println!("inputs:");
    for v in &info.inputs {
        println!("  {}: {} {}", v.name, v.elem, v.shape);
    }
    if !info.symbols.is_empty() {
        println!("symbols: {}", info.symbols.join(", "));
    }
    println!("outputs:");
    for v in &info.outputs {
        println!("  {}: {} {}", v.name, v.elem, v.shape);
    }
    let total: usize = info.op_counts.iter().map(|(_, n)| n).sum();
    println!("ops ({total} nodes):");
    for (op, n) in &info.op_counts {
        println!("  {op}: {n}");
    }
    if info.unsupported.is_empty() && info.error.is_none() {
        println!("supported: every node");
    }
    if !info.unsupported.is_empty() {
        println!("unsupported ({} nodes):", info.unsupported.len());
        for u in &info.unsupported {
            println!("  {u}");
        }
    }
    if let Some(e) = &info.error {
        println!("does not import: {e}");
    }
    Ok(())
}
