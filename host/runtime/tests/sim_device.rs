//! The simulator device: spec files, reports, traces and the simulator's
//! contracts on compiled graphs.

use dvm_graph::Graph;
use dvm_isa::DType;
use dvm_runtime::device::sim::{self, calibrate, SimDevice, SimSpec};
use dvm_runtime::device::{self as devices, DeviceConfig};
use dvm_runtime::Prepared;
use dvm_sym::Bindings;

fn matmul(m: i64, k: i64, n: i64) -> Graph {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[m.into(), k.into()]).unwrap();
    let b = g.input("b", DType::F32, &[k.into(), n.into()]).unwrap();
    let y = g.matmul(a, b, false, false).unwrap();
    g.output("y", y).unwrap();
    g
}

fn cycles(dev: &SimDevice, g: &Graph) -> u64 {
    let p = Prepared::new(g).unwrap();
    let r = dev.simulate(&p, &Bindings::new()).unwrap();
    r.iter().map(|l| l.stats.cycles).sum()
}

fn device(cores: u32) -> SimDevice {
    let mut spec = SimSpec::default_preset();
    spec.spec.cores = cores;
    SimDevice::new(spec, 1, 64).unwrap()
}

#[test]
fn spec_files_round_trip_and_bad_ones_name_the_field() {
    for (name, _, spec) in sim::PRESETS {
        let s = SimSpec {
            name: name.to_string(),
            spec: *spec,
        };
        assert_eq!(SimSpec::from_json(&s.to_json()).unwrap(), s);
    }
    let good = SimSpec::default_preset().to_json();
    let cases = [
        (good.replace("\"cores\": 24,", ""), "missing field `cores`"),
        (good.replace("\"cores\": 24", "\"cores\": 0"), "`cores`"),
        (good.replace("\"cores\": 24", "\"cores\": \"x\""), "`cores`"),
        (
            good.replace("\"serial\": false", "\"serial\": 1"),
            "`serial`",
        ),
        (good.replace("\"simple\"", "\"simpel\""), "vector_lanes"),
        (good.replace("\"name\"", "\"nmae\""), "unknown field `nmae`"),
        ("[1, 2]".to_string(), "not a JSON object"),
        ("{".to_string(), "not JSON"),
    ];
    for (text, want) in cases {
        let e = SimSpec::from_json(&text).unwrap_err();
        assert!(e.contains(want), "`{e}` lacks `{want}`");
    }
    let e = SimSpec::resolve("/no/such/spec.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a preset"), "{e}");
    let config = DeviceConfig {
        sim_spec: Some("nosuch".into()),
        ..DeviceConfig::default()
    };
    assert!(devices::open("sim", &config).is_err());
}

#[test]
fn simulated_cycles_are_deterministic_and_grow_with_flops_and_bytes() {
    let dev = device(4);
    let g = matmul(256, 256, 256);
    assert_eq!(cycles(&dev, &g), cycles(&dev, &g));
    let mut last = 0;
    for k in [64, 256, 1024, 4096] {
        let c = cycles(&dev, &matmul(256, k, 256));
        assert!(c > last, "k = {k}: {c} cycles after {last}");
        last = c;
    }
    let mut last = 0;
    for n in [1 << 10, 1 << 14, 1 << 18, 1 << 22] {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, &[n.into()]).unwrap();
        let y = g.exp(x).unwrap();
        g.output("y", y).unwrap();
        let c = cycles(&dev, &g);
        assert!(c > last, "{n} elements: {c} cycles after {last}");
        last = c;
    }
}

#[test]
fn the_trace_is_json_with_a_track_per_core_and_pipe() {
    let dev = device(2);
    dev.record_timeline(true);
    let p = Prepared::new(&matmul(64, 128, 256)).unwrap();
    let reports = dev.simulate(&p, &Bindings::new()).unwrap();
    let tl = dev.take_timeline().unwrap();
    assert_eq!(tl.launches.len(), reports.len());
    let v: serde_json::Value = serde_json::from_str(&sim::timeline::chrome_trace(&tl)).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    for core in 0..2 {
        let name = format!("core {core}");
        assert!(events
            .iter()
            .any(|e| e["name"] == "process_name" && e["args"]["name"] == name.as_str()));
    }
    assert!(events.iter().any(|e| e["ph"] == "X" && e["cat"] == "tile"));
    for pipe in ["load", "vector", "cube", "store", "control", "tiles"] {
        assert!(events
            .iter()
            .any(|e| e["name"] == "thread_name" && e["args"]["name"] == pipe));
    }
    let cube: Vec<_> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "cube")
        .collect();
    assert!(!cube.is_empty());
    assert!(cube[0]["args"]["instr"]
        .as_str()
        .unwrap()
        .starts_with("matmul"));
    let text = sim::report::text(dev.spec(), &reports);
    assert!(text.contains("critical pipe: "), "{text}");
    let svg = sim::timeline::svg(&tl);
    assert!(svg.contains("core 1 cube"));
}

#[test]
fn a_kernel_larger_than_the_spec_ub_is_refused() {
    // Compiled for the default UB, simulated on a spec with less.
    let big = SimDevice::new(SimSpec::default_preset(), 1, 64).unwrap();
    let mut small = SimSpec::default_preset();
    small.spec.ub_bytes = 4096;
    let small = SimDevice::new(small, 1, 64).unwrap();
    let p = Prepared::new(&matmul(256, 256, 256)).unwrap();
    let (_, kernels) = big.runtime().plan(&p, &Bindings::new()).unwrap();
    let e = small.simulate_kernel(&kernels[0], "mm").unwrap_err();
    assert!(e.to_string().contains("UB"), "{e}");
}

#[test]
fn spearman_ranks() {
    assert_eq!(
        calibrate::spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]),
        Some(1.0)
    );
    assert_eq!(
        calibrate::spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]),
        Some(-1.0)
    );
    assert_eq!(calibrate::spearman(&[1.0], &[1.0]), None);
}
