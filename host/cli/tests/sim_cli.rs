//! `dvm run --device sim`, `--trace`, `--timeline`, `dvm explain --sim`,
//! `dvm calibrate` and bad `--spec` values.

mod common;

use common::{attention_inputs, dvm, example_file, scratch};
use std::path::{Path, PathBuf};

fn example(name: &str) -> PathBuf {
    example_file(name)
}

fn inputs(dir: &Path, s: u64) -> Vec<String> {
    attention_inputs(dir, s)
}

fn run(dir: &Path, device: &str, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut c = dvm();
    c.arg("run").arg(example("attention.json"));
    for i in inputs(dir, 37) {
        c.arg("--input").arg(i);
    }
    c.args(["--device", device, "--cores", "2", "--output-dir"])
        .arg(out);
    c.args(extra);
    c.output().unwrap()
}

#[test]
fn run_on_the_simulator_matches_the_cpu_and_reports_and_traces() {
    let tmp = scratch("run");
    let dir = tmp.path();
    let trace = dir.join("t.json");
    let svg = dir.join("t.svg");
    let sim = run(
        dir,
        "sim",
        &dir.join("sim"),
        &[
            "--trace",
            trace.to_str().unwrap(),
            "--timeline",
            svg.to_str().unwrap(),
        ],
    );
    assert!(
        sim.status.success(),
        "{}",
        String::from_utf8_lossy(&sim.stderr)
    );
    let report = String::from_utf8_lossy(&sim.stderr);
    for want in [
        "simulated on 910b",
        "launch 0",
        "critical pipe",
        "stalls",
        "total:",
    ] {
        assert!(report.contains(want), "no `{want}` in\n{report}");
    }
    let cpu = run(dir, "cpu", &dir.join("cpu"), &[]);
    assert!(cpu.status.success());
    let a = std::fs::read(dir.join("sim/o.npy")).unwrap();
    let b = std::fs::read(dir.join("cpu/o.npy")).unwrap();
    assert_eq!(a, b, "the simulator's values are the CPU device's");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    assert!(events.iter().any(|e| e["ph"] == "X" && e["cat"] == "load"));
    assert!(events
        .iter()
        .any(|e| e["name"] == "thread_name" && e["args"]["name"] == "vector"));
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
}

#[test]
fn bad_spec_values_exit_2_and_write_nothing() {
    let tmp = scratch("bad");
    let dir = tmp.path();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"name": "x", "cores": 0}"#).unwrap();
    for (spec, want) in [
        ("nosuch", "not a preset"),
        (bad.to_str().unwrap(), "missing field"),
    ] {
        let out = dir.join("out");
        let r = run(dir, "sim", &out, &["--spec", spec]);
        assert_eq!(r.status.code(), Some(2), "{spec}");
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(err.contains("--spec") && err.contains(want), "{err}");
        assert!(!out.exists());
    }
    // A valid file with a field out of range names the field.
    let text = dvm_runtime::device::sim::SimSpec::default_preset()
        .to_json()
        .replace("\"cores\": 24", "\"cores\": 0");
    std::fs::write(&bad, text).unwrap();
    let r = run(
        dir,
        "sim",
        &dir.join("out"),
        &["--spec", bad.to_str().unwrap()],
    );
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("`cores`"));
    // Simulator flags on another device.
    let r = run(dir, "cpu", &dir.join("out"), &["--trace", "x.json"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("--device sim"));
}

#[test]
fn explain_sim_reports_every_launch() {
    let r = dvm()
        .arg("explain")
        .arg(example("encoder.json"))
        .args(["--bind", "S=64", "--sim", "--spec", "910b"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(
        out.contains("simulated on 910b") && out.contains("critical pipe"),
        "{out}"
    );
}

#[test]
fn calibrate_writes_a_spec_that_run_loads() {
    let tmp = scratch("cal");
    let dir = tmp.path();
    let spec = dir.join("cpu.json");
    let r = dvm()
        .args(["calibrate", "--cores", "1", "--repeats", "1", "-o"])
        .arg(&spec)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(String::from_utf8_lossy(&r.stdout).contains("rank correlation"));
    let r = run(
        dir,
        "sim",
        &dir.join("out"),
        &["--spec", spec.to_str().unwrap()],
    );
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(String::from_utf8_lossy(&r.stderr).contains("cpu-calibrated"));
}
