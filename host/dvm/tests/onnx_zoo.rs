//! Every model of the ONNX zoo (`tests/models/`, listed in its
//! `manifest.json`) at every saved shape, imported and run on the CPU
//! device fused and unfused, against PyTorch's outputs; and on the QEMU
//! device (the aarch64 firmware, fused) at every saved shape, against
//! PyTorch's outputs and bit for bit against the CPU device. The QEMU test
//! needs the firmware named by `DVM_FIRMWARE` (`cargo ci qemu` builds it and
//! runs the test); without it, it is ignored.
//!
//! Tolerance (docs/onnx.md): `|dvm − torch| ≤ ATOL + RTOL · |torch|` per
//! element, the float32 engine's transcendental approximations and a
//! different summation order against PyTorch's.
//!
//! Models that need engine operators dvm does not have yet are listed in
//! [`EXPECTED_UNSUPPORTED`] with the op they need: the test asserts the
//! import fails with [`OnnxError::Unsupported`] naming that op, and fails
//! once such a model imports, so that the list only shrinks.

use std::path::{Path, PathBuf};

use dvm::onnx::{self, OnnxError};
use dvm::prelude::*;
use dvm::{FuseOptions, Opcode};

const ATOL: f32 = 2e-5;
const RTOL: f32 = 2e-4;

/// Model name and an op type the import must report unsupported.
const EXPECTED_UNSUPPORTED: &[(&str, &str)] = &[];

/// The dvm composites each runnable model's graph must hold, whichever
/// exporter wrote it (single ONNX ops or primitives recognised).
const COMPOSITES: &[(&str, &[&str])] = &[
    ("encoder", &["layer_norm", "softmax", "gelu_erf"]),
    ("mlp", &["gelu_erf", "log_softmax"]),
    ("llama_mlp", &["rms_norm", "silu"]),
    (
        "llama",
        &["rms_norm", "silu", "softmax", "sin", "cos", "trilu"],
    ),
    ("decoder_masked", &["layer_norm", "softmax", "gelu_tanh"]),
    (
        "gpt",
        &["gather", "layer_norm", "softmax", "gelu_tanh", "trilu"],
    ),
    ("cnn", &["conv2d", "max_pool2d", "reduce_mean"]),
];

fn zoo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/models")
}

fn manifest() -> serde_json::Value {
    let text =
        std::fs::read_to_string(zoo().join("manifest.json")).expect("tests/models/manifest.json");
    serde_json::from_str(&text).expect("manifest is JSON")
}

fn str_of<'a>(v: &'a serde_json::Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("manifest: `{key}` is not a string"))
}

#[test]
fn zoo_models_match_pytorch() {
    let m = manifest();
    let rt = Runtime::with_cores(2);
    let mut ran = 0;
    for model in m["models"].as_array().expect("models") {
        let name = str_of(model, "name");
        for file in model["files"].as_array().expect("files") {
            let path = zoo().join(file.as_str().expect("file name"));
            let result = onnx::import(&path);
            if let Some((_, op)) = EXPECTED_UNSUPPORTED.iter().find(|(n, _)| *n == name) {
                match result {
                    Err(OnnxError::Unsupported { nodes, .. }) => assert!(
                        nodes.iter().any(|n| n.op_type == *op),
                        "{}: unsupported nodes {nodes:?} do not name {op}",
                        path.display()
                    ),
                    Err(e) => panic!("{}: expected unsupported {op}, got {e}", path.display()),
                    Ok(_) => panic!(
                        "{} imports now: remove `{name}` from EXPECTED_UNSUPPORTED",
                        path.display()
                    ),
                }
                continue;
            }
            let g = result.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            // The composites written as primitives were recognised.
            let names: Vec<&str> = g.nodes().iter().map(|n| n.op.name()).collect();
            let wanted = COMPOSITES.iter().filter(|(n, _)| *n == name);
            for want in wanted.flat_map(|(_, c)| c.iter()) {
                assert!(
                    names.contains(want),
                    "{}: no `{want}` in the imported graph: {names:?}",
                    path.display()
                );
            }
            assert!(
                !names.contains(&Opcode::Erf.mnemonic()),
                "{}: an erf is left",
                path.display()
            );
            for fuse in [FuseOptions::default(), FuseOptions::off()] {
                let prepared = Prepared::with_options(&g, &fuse)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let how = if fuse == FuseOptions::off() {
                    "unfused"
                } else {
                    "fused"
                };
                for case in model["cases"].as_array().expect("cases") {
                    let dir = zoo().join(str_of(case, "dir"));
                    let inputs = case_inputs(&g, case);
                    let out = rt
                        .run(&prepared, &named(&inputs))
                        .unwrap_or_else(|e| panic!("{} at {}: {e}", path.display(), dir.display()));
                    ran += check_outputs(case, &out, &format!("{} ({how})", path.display()));
                }
            }
        }
    }
    assert!(ran >= 12, "only {ran} outputs compared");
}

/// The tensors of a manifest case's inputs, each read as the graph input's
/// dtype (an `int64` `.npy` as `i32`).
fn case_inputs(g: &Graph, case: &serde_json::Value) -> Vec<(String, Tensor)> {
    let dir = zoo().join(str_of(case, "dir"));
    let mut inputs = Vec::new();
    for (input, file) in case["inputs"].as_object().expect("inputs") {
        let id = g.find(input).expect("graph input");
        let dtype = g.nodes()[id.index()].dtype;
        let t = dvm::npy::read_as(&dir.join(file.as_str().expect("npy")), dtype)
            .expect("reference input");
        inputs.push((input.clone(), t));
    }
    inputs
}

fn named(inputs: &[(String, Tensor)]) -> Vec<(&str, &Tensor)> {
    inputs.iter().map(|(n, t)| (n.as_str(), t)).collect()
}

/// Checks every output of `case` in `out` against PyTorch's within the
/// tolerance; returns how many outputs it compared. `what` names the run
/// in a failure.
fn check_outputs(case: &serde_json::Value, out: &dvm::Outputs, what: &str) -> usize {
    let dir = zoo().join(str_of(case, "dir"));
    let mut compared = 0;
    for (output, file) in case["outputs"].as_object().expect("outputs") {
        let want =
            dvm::npy::read(&dir.join(file.as_str().expect("npy"))).expect("reference output");
        let got = out.get(output).expect("output");
        assert_eq!(got.shape(), want.shape(), "{} {output}", dir.display());
        let (g32, w32) = (
            got.as_slice::<f32>().expect("f32 output"),
            want.as_slice::<f32>().expect("f32 reference"),
        );
        let worst = g32
            .iter()
            .zip(w32)
            .map(|(a, b)| (a - b).abs() - RTOL * b.abs())
            .fold(f32::MIN, f32::max);
        assert!(
            worst <= ATOL,
            "{what} at {}: output `{output}` off by {worst} beyond the tolerance",
            dir.display(),
        );
        compared += 1;
    }
    compared
}

#[test]
#[ignore = "needs the firmware and QEMU: run `cargo ci qemu`"]
fn qemu_zoo_models_match_pytorch() {
    let firmware = std::env::var_os("DVM_FIRMWARE")
        .expect("DVM_FIRMWARE must name the firmware ELF (cargo ci qemu sets it)");
    // Two cores, as the conformance suite: the CPU device and the firmware
    // run the same kernels, so their outputs agree bit for bit.
    let config = DeviceConfig {
        cores: Some(2),
        firmware: Some(firmware.into()),
        ..DeviceConfig::default()
    };
    let qemu = dvm::device::open("qemu", &config).expect("the QEMU device opens");
    let cpu = dvm::device::open("cpu", &config).expect("the CPU device opens");
    let m = manifest();
    let mut ran = 0;
    for model in m["models"].as_array().expect("models") {
        let name = str_of(model, "name");
        if EXPECTED_UNSUPPORTED.iter().any(|(n, _)| *n == name) {
            continue;
        }
        let cases = model["cases"].as_array().expect("cases");
        for file in model["files"].as_array().expect("files") {
            let path = zoo().join(file.as_str().expect("file name"));
            let what = format!("{} on qemu", path.display());
            let g = onnx::import(&path).unwrap_or_else(|e| panic!("{what}: {e}"));
            let prepared = Prepared::new(&g).unwrap_or_else(|e| panic!("{what}: {e}"));
            for case in cases {
                let inputs = case_inputs(&g, case);
                let out = qemu
                    .run(&prepared, &named(&inputs))
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                ran += check_outputs(case, &out, &what);
                let on_cpu = cpu
                    .run(&prepared, &named(&inputs))
                    .unwrap_or_else(|e| panic!("{} on cpu: {e}", path.display()));
                for (output, t) in on_cpu.iter() {
                    let got = out.get(output).expect("qemu output");
                    assert!(
                        got.bytes() == t.bytes(),
                        "{what}: output `{output}` differs from the CPU device's bits"
                    );
                }
            }
        }
    }
    assert!(ran >= 7, "only {ran} outputs compared on qemu");
}
