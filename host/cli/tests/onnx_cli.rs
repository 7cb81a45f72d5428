//! `dvm run` and `dvm info` on ONNX models of the zoo (`tests/models`), and
//! bad ONNX input: exit code 2, a message naming the culprit, nothing
//! written.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn dvm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dvm"))
}

fn zoo(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/models")
        .join(file)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run(model: &Path, input: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut input_arg = std::ffi::OsString::from("x=");
    input_arg.push(input);
    dvm()
        .arg("run")
        .arg(model)
        .arg("--input")
        .arg(input_arg)
        .arg("--output-dir")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

fn assert_user_error(out: &Output, needle: &str, out_dir: &Path) {
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains(needle),
        "stderr `{err}` does not name `{needle}`"
    );
    assert!(!out_dir.exists(), "an output directory was left behind");
}

#[test]
fn run_an_onnx_model_with_timings() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let input = zoo("data/mlp/3x32/in_x.npy");
    let o = run(&zoo("mlp.dynamo18.onnx"), &input, &out, &["--timings"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let got = dvm_tensor::npy::read(&out.join("y.npy")).unwrap();
    let want = dvm_tensor::npy::read(&zoo("data/mlp/3x32/out_y.npy")).unwrap();
    assert!(got.allclose(&want, 2e-4, 2e-5).unwrap());
    let err = text(&o.stderr);
    for line in [
        "timings: load",
        "timings: call 1 (compile and run)",
        "timings: compile",
    ] {
        assert!(err.contains(line), "no `{line}` in {err}");
    }
}

#[test]
fn info_lists_symbolic_shapes_op_counts_and_unsupported_nodes() {
    let o = dvm()
        .arg("info")
        .arg(zoo("encoder.ts17.onnx"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = text(&o.stdout);
    for want in [
        "opset: 17",
        "x: float [batch, seq, 64]",
        "symbols: batch, seq",
        "y: float [batch, seq, 64]",
        "MatMul: 16",
        "supported: every node",
    ] {
        assert!(s.contains(want), "no `{want}` in\n{s}");
    }
    let o = dvm()
        .arg("info")
        .arg(zoo("cnn.ts17.onnx"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = text(&o.stdout);
    assert!(
        s.contains("Conv: 2") && s.contains("supported: every node"),
        "{s}"
    );
    // A model with nodes dvm cannot run is described, with each of them.
    let dir = tempfile::tempdir().unwrap();
    let selu = selu_cnn(dir.path(), "cnn.ts17.onnx");
    let o = dvm().arg("info").arg(&selu).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = text(&o.stdout);
    assert!(s.contains("unsupported (2 nodes)"), "{s}");
    assert!(s.contains("node 1 `/Selu` (Selu)"), "{s}");
}

/// The zoo's `cnn` model written to `dir` with its `Relu` nodes turned
/// into `Selu`, which dvm has no mapping for (the op type and the names
/// containing it change together, the strings keeping their length).
fn selu_cnn(dir: &Path, file: &str) -> PathBuf {
    let mut bytes = std::fs::read(zoo(file)).unwrap();
    let n = bytes.len();
    for i in 0..n.saturating_sub(3) {
        if &bytes[i..i + 4] == b"Relu" {
            bytes[i] = b'S';
            bytes[i + 1] = b'e';
        }
    }
    let out = dir.join(file);
    std::fs::write(&out, bytes).unwrap();
    out
}

#[test]
fn bad_onnx_input_is_a_user_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let input = zoo("data/mlp/3x32/in_x.npy");
    // Truncated.
    let bytes = std::fs::read(zoo("mlp.ts17.onnx")).unwrap();
    let cut = dir.path().join("cut.onnx");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    assert_user_error(&run(&cut, &input, &out, &[]), "is not an ONNX model", &out);
    // Not ONNX at all, with the extension.
    let json = dir.path().join("graph.onnx");
    std::fs::write(&json, "{\"inputs\": []}").unwrap();
    assert_user_error(&run(&json, &input, &out, &[]), "is not an ONNX model", &out);
    let o = dvm().arg("info").arg(&json).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    // Unsupported operators: named with index and opset.
    let cnn_in = zoo("data/cnn/1x3x16x16/in_x.npy");
    let o = run(
        &selu_cnn(dir.path(), "cnn.dynamo18.onnx"),
        &cnn_in,
        &out,
        &[],
    );
    assert_user_error(
        &o,
        "unsupported at opset 18: node 1 `node_relu` (Selu)",
        &out,
    );
    // An input whose shape contradicts the model's symbols.
    let o = run(
        &zoo("mlp.ts17.onnx"),
        &zoo("data/encoder/1x7x64/in_x.npy"),
        &out,
        &[],
    );
    assert_user_error(&o, "x", &out);
}
