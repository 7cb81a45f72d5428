//! What the CLI tests share: the binary, the examples, scratch
//! directories and the attention example's inputs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use dvm_tensor::npy;
use dvm_tensor::sample_data as data;
use dvm_tensor::Tensor;

/// The `dvm` binary under test.
pub fn dvm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dvm"))
}

/// `examples/NAME`.
pub fn example_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../examples/{name}"))
}

/// A fresh directory for one test, removed when the test ends (also
/// when it fails).
pub fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("dvm-cli-{name}-"))
        .tempdir()
        .unwrap()
}

/// `q`, `k`, `v` of `[s, 64]` for `examples/attention.json`, written
/// under `dir`, as `--input` arguments.
pub fn attention_inputs(dir: &Path, s: u64) -> Vec<String> {
    ["q", "k", "v"]
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let t = Tensor::from_f32(&[s, 64], &data((s * 64) as usize, i as u32 + 1)).unwrap();
            let p = dir.join(format!("{n}.npy"));
            npy::write(&p, &t).unwrap();
            format!("{n}={}", p.display())
        })
        .collect()
}
