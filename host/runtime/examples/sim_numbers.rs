//! The simulator's numbers for `docs/simulator.md`: its speed, its
//! accuracy against the CPU device after calibration, and the encoder
//! block's kernels on the 910B-class preset.
//!
//! ```text
//! cargo run --release -p dvm-runtime --example sim_numbers -- [CORES] [REPEATS]
//! ```
//!
//! 1. Speed: the encoder block (hidden 768, 12 heads, FFN 3072) at
//!    S = 512 and 2048 on the 910B-class preset, timed without values
//!    ([`SimDevice::simulate`]) and with values (a full run): virtual
//!    instructions simulated per second.
//! 2. Accuracy: `dvm calibrate`'s fit on this machine's CPU device with
//!    CORES workers (default: all), then the benchmark suite's builtin
//!    workloads at S = 128, 512 and 2048, each measured on the CPU device
//!    (median of REPEATS calls, default 5, kernels only) and simulated on
//!    the fitted spec: Spearman's rank correlation and the median ratio
//!    simulated / measured.
//! 3. The encoder block at S = 512 on the 910B-class preset: each
//!    kernel's cycles, critical pipe and pipe utilisation.

use std::time::Instant;

use dvm_device::sim::PIPES;
use dvm_graph::models::{self, EncoderConfig};
use dvm_graph::Graph;
use dvm_runtime::device::sim::calibrate::{self, Point, Workload};
use dvm_runtime::device::sim::{SimDevice, SimSpec};
use dvm_runtime::{Device, Prepared, Runtime};
use dvm_sym::Bindings;
use dvm_tensor::Tensor;

type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const MAX_LEN: i64 = 1 << 16;

/// `g` at `S = s` with deterministic inputs.
fn workload(name: &str, g: Graph, s: i64) -> R<Workload> {
    let mut b = Bindings::new();
    let sym = g.scope().lookup("S").ok_or("no symbol S")?;
    g.scope().bind(&mut b, sym, s)?;
    g.scope().complete_bindings(&mut b)?;
    let mut inputs = Vec::new();
    for (i, id) in g.inputs().iter().enumerate() {
        let shape = g.concrete_shape(*id, &b)?;
        let n: u64 = shape.iter().product();
        let mut data = dvm_tensor::sample_data(n as usize, i as u32 + 1);
        // Weights small enough that activations stay finite.
        if shape.len() == 2 && shape[0] == shape[1] {
            data.iter_mut().for_each(|v| *v *= 0.04);
        }
        let t = Tensor::from_f32(&shape, &data)?;
        inputs.push((g.nodes()[id.0].name.to_string(), t));
    }
    Ok(Workload::new(format!("{name} S={s}"), g, inputs))
}

fn encoder() -> R<Graph> {
    Ok(models::encoder_block(&EncoderConfig {
        hidden: 768,
        heads: 12,
        ffn: 3072,
        max_len: MAX_LEN,
    })?)
}

/// The benchmark suite's builtin workloads (bench/workloads.json).
fn suite(s: i64) -> R<Vec<Workload>> {
    Ok(vec![
        workload("gelu(x·w+b)", models::gelu_linear(768, MAX_LEN)?, s)?,
        workload(
            "matmul+bias+relu",
            models::matmul_bias_relu(768, MAX_LEN)?,
            s,
        )?,
        workload("softmax", models::softmax_rows(768, MAX_LEN)?, s)?,
        workload("layernorm", models::layer_norm_rows(768, MAX_LEN)?, s)?,
        workload("add+layernorm", models::add_layer_norm(768, MAX_LEN)?, s)?,
        workload("row-sum", models::row_sum(768, MAX_LEN)?, s)?,
        workload("attention", models::attention(12, 64, MAX_LEN)?, s)?,
        workload("encoder", encoder()?, s)?,
    ])
}

fn speed() -> R<()> {
    println!("## speed (910b preset, encoder block)");
    let dev = SimDevice::new(SimSpec::default_preset(), 2, 64)?;
    for s in [512, 2048] {
        let w = workload("encoder", encoder()?, s)?;
        let p = Prepared::new(&w.graph)?;
        let named: Vec<(&str, &Tensor)> = w.inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let b = p.graph().bind_tensors(&named, &Bindings::new())?;
        dev.simulate(&p, &b)?; // compiles
        let calls = 20;
        let t = Instant::now();
        let mut instrs = 0;
        for _ in 0..calls {
            instrs += dev
                .simulate(&p, &b)?
                .iter()
                .map(|r| r.stats.instrs)
                .sum::<u64>();
        }
        let timing = instrs as f64 / t.elapsed().as_secs_f64();
        dev.take_reports();
        dev.run(&p, &named)?;
        dev.take_reports();
        let t = Instant::now();
        let mut instrs = 0;
        for _ in 0..3 {
            dev.run(&p, &named)?;
            instrs += dev
                .take_reports()
                .iter()
                .map(|r| r.stats.instrs)
                .sum::<u64>();
        }
        let values = instrs as f64 / t.elapsed().as_secs_f64();
        println!(
            "S={s}: {} instructions per call; timing only {:.2} M instr/s; with values {:.2} M instr/s",
            instrs / 3,
            timing / 1e6,
            values / 1e6
        );
    }
    Ok(())
}

fn accuracy(cores: usize, repeats: usize) -> R<()> {
    println!("## accuracy (CPU device, {cores} core(s))");
    let rt = Runtime::new(cores, 1024);
    let cal = calibrate::calibrate(&rt, repeats)?;
    println!("fitted: {}", cal.spec.summary());
    let m: Vec<f64> = cal.points.iter().map(|p| p.measured).collect();
    let s: Vec<f64> = cal.points.iter().map(|p| p.simulated).collect();
    println!(
        "micro-kernels: rank correlation {:.3}, median ratio {:.2}",
        calibrate::spearman(&m, &s).unwrap_or(f64::NAN),
        calibrate::median_ratio(&cal.points).unwrap_or(f64::NAN)
    );
    let dev = SimDevice::new(cal.spec.clone(), cores, 1024)?;
    let mut points = Vec::new();
    println!(
        "{:<28} {:>12} {:>12} {:>6}",
        "workload", "measured", "simulated", "ratio"
    );
    for len in [128, 512, 2048] {
        for w in suite(len)? {
            let measured = calibrate::measure(&rt, &w, repeats)?;
            let simulated = calibrate::simulate_on(&dev, &w)?;
            dev.take_reports();
            println!(
                "{:<28} {:>9.1} µs {:>9.1} µs {:>6.2}",
                w.name,
                measured * 1e6,
                simulated * 1e6,
                simulated / measured
            );
            points.push(Point {
                name: w.name,
                measured,
                simulated,
            });
        }
    }
    let m: Vec<f64> = points.iter().map(|p| p.measured).collect();
    let s: Vec<f64> = points.iter().map(|p| p.simulated).collect();
    println!(
        "suite ({} points): rank correlation {:.3}, median ratio {:.2}",
        points.len(),
        calibrate::spearman(&m, &s).unwrap_or(f64::NAN),
        calibrate::median_ratio(&points).unwrap_or(f64::NAN)
    );
    Ok(())
}

fn encoder_on_910b() -> R<()> {
    println!("## encoder block, S=512, 910b preset");
    let dev = SimDevice::new(SimSpec::default_preset(), 1, 64)?;
    let w = workload("encoder", encoder()?, 512)?;
    let p = Prepared::new(&w.graph)?;
    let named: Vec<(&str, &Tensor)> = w.inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let b = p.graph().bind_tensors(&named, &Bindings::new())?;
    let reports = dev.simulate(&p, &b)?;
    let mut total = 0;
    println!("| kernel | kind | cycles | µs | critical pipe | load | vector | cube | store |");
    println!("|---|---|---:|---:|---|---:|---:|---:|---:|");
    for r in &reports {
        let st = &r.stats;
        total += st.cycles;
        let util: Vec<String> = PIPES[..4]
            .iter()
            .map(|&p| format!("{:.0}%", st.utilisation(p) * 100.0))
            .collect();
        println!(
            "| `{}` | {:?} | {} | {:.2} | {} | {} |",
            r.kernel,
            r.kind,
            st.cycles,
            dev.spec().spec.seconds(st.cycles) * 1e6,
            st.critical_pipe().name(),
            util.join(" | ")
        );
    }
    println!(
        "total {total} cycles, {:.2} µs",
        dev.spec().spec.seconds(total) * 1e6
    );
    Ok(())
}

fn main() -> R<()> {
    let args: Vec<String> = std::env::args().collect();
    let cores = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let repeats = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5);
    speed()?;
    encoder_on_910b()?;
    accuracy(cores, repeats)?;
    Ok(())
}
