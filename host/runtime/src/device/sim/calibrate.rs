//! Fitting a CPU spec to this machine (`dvm calibrate`): micro-kernels
//! are timed on the CPU device, the simulator gives each spec parameter's
//! share of every micro-kernel's cycles, and a non-negative least-squares
//! fit of the relative error sets the parameters.
//!
//! The fitted spec is [`DeviceSpec::GENERIC_CPU`]'s shape: one nanosecond
//! per cycle, one instruction at a time per core (`serial`), as many cores
//! as the CPU device's workers. The parameters fitted are the launch
//! cost, a fixed cost per vector or cube instruction and per transfer, a
//! cost per row and per byte of a transfer, the cost per element of each
//! vector class (4-byte elements; the other widths keep the preset's
//! ratios) and per f32 multiply-accumulate (f16 and i8 keep the preset's
//! ratios).

use std::time::Duration;

use dvm_device::sim::{DeviceSpec, NoSink, SimProgram, Simulator};
use dvm_graph::Graph;
use dvm_isa::DType;
use dvm_sym::Bindings;
use dvm_tensor::Tensor;

use super::{lower, SimDevice, SimSpec, SIM_INSTRS_CAP};
use crate::{Prepared, RunError, Runtime};

/// Any failure of a calibration step, as its message.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// A workload: a name, its graph and its inputs.
pub struct Workload {
    /// Name in reports.
    pub name: String,
    /// The graph.
    pub graph: Graph,
    /// Named inputs.
    pub inputs: Vec<(String, Tensor)>,
}

impl Workload {
    /// Builds a workload.
    pub fn new(name: impl Into<String>, graph: Graph, inputs: Vec<(String, Tensor)>) -> Workload {
        Workload {
            name: name.into(),
            graph,
            inputs,
        }
    }
}

/// Deterministic inputs in `[-1, 1)` of `shape`.
///
/// # Errors
/// A shape too large for memory.
pub fn input(name: &str, shape: &[u64], seed: u32) -> Result<(String, Tensor), Error> {
    let n: u64 = shape.iter().product();
    let data = dvm_tensor::sample_data(usize::try_from(n)?, seed);
    let t = Tensor::from_f32(shape, &data)?;
    Ok((name.to_string(), t))
}

/// The micro-kernels `dvm calibrate` times: an element-wise add, an
/// exponential, row sums, a transpose and matmuls, each at several sizes.
///
/// # Errors
/// A graph the builder refuses (a bug, reported).
pub fn micro_kernels() -> Result<Vec<Workload>, Error> {
    let mut out = Vec::new();
    for (rows, cols) in [(64u64, 256u64), (256, 1024), (1024, 1024), (4096, 1024)] {
        let shape = [rows, cols];
        let mut g = Graph::new();
        let a = g.input(
            "a",
            DType::F32,
            &[(rows as i64).into(), (cols as i64).into()],
        )?;
        let b = g.input(
            "b",
            DType::F32,
            &[(rows as i64).into(), (cols as i64).into()],
        )?;
        let y = g.add(a, b)?;
        g.output("y", y)?;
        out.push(Workload::new(
            format!("add {rows}x{cols}"),
            g,
            vec![input("a", &shape, 1)?, input("b", &shape, 2)?],
        ));
        let mut g = Graph::new();
        let a = g.input(
            "a",
            DType::F32,
            &[(rows as i64).into(), (cols as i64).into()],
        )?;
        let y = g.exp(a)?;
        g.output("y", y)?;
        out.push(Workload::new(
            format!("exp {rows}x{cols}"),
            g,
            vec![input("a", &shape, 3)?],
        ));
        let mut g = Graph::new();
        let a = g.input(
            "a",
            DType::F32,
            &[(rows as i64).into(), (cols as i64).into()],
        )?;
        let y = g.sum(a, &[-1], false)?;
        g.output("y", y)?;
        out.push(Workload::new(
            format!("rowsum {rows}x{cols}"),
            g,
            vec![input("a", &shape, 4)?],
        ));
        let mut g = Graph::new();
        let a = g.input(
            "a",
            DType::F32,
            &[(rows as i64).into(), (cols as i64).into()],
        )?;
        let t = g.transpose(a, &[1, 0])?;
        let y = g.relu(t)?;
        g.output("y", y)?;
        out.push(Workload::new(
            format!("transpose {rows}x{cols}"),
            g,
            vec![input("a", &shape, 5)?],
        ));
    }
    for (m, k, n) in [
        (64u64, 256u64, 256u64),
        (256, 512, 512),
        (512, 768, 768),
        (1024, 256, 1024),
    ] {
        let mut g = Graph::new();
        let a = g.input("a", DType::F32, &[(m as i64).into(), (k as i64).into()])?;
        let b = g.input("b", DType::F32, &[(k as i64).into(), (n as i64).into()])?;
        let y = g.matmul(a, b, false, false)?;
        g.output("y", y)?;
        out.push(Workload::new(
            format!("matmul {m}x{k}x{n}"),
            g,
            vec![input("a", &[m, k], 6)?, input("b", &[k, n], 7)?],
        ));
    }
    Ok(out)
}

/// The measured and simulated time of one workload.
#[derive(Clone, Debug)]
pub struct Point {
    /// Workload name.
    pub name: String,
    /// Median kernel time on the CPU device, in seconds.
    pub measured: f64,
    /// Simulated time, in seconds.
    pub simulated: f64,
}

/// A fitted spec and how well it fits the micro-kernels.
#[derive(Clone, Debug)]
pub struct Calibration {
    /// The fitted spec.
    pub spec: SimSpec,
    /// Each micro-kernel, measured and simulated with the fitted spec.
    pub points: Vec<Point>,
}

/// Median kernel time (the launches only, as [`Runtime::run_profiled`]
/// records them) of `repeats` calls after a warm-up call.
///
/// # Errors
/// The run's failure.
pub fn measure(rt: &Runtime, w: &Workload, repeats: usize) -> Result<f64, RunError> {
    let prepared = Prepared::new(&w.graph)?;
    let named: Vec<(&str, &Tensor)> = w.inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut times = Vec::with_capacity(repeats);
    for i in 0..=repeats {
        let mut profile = Vec::new();
        rt.run_profiled(&prepared, &named, &Bindings::new(), Some(&mut profile))?;
        if i > 0 {
            times.push(profile.iter().map(|p| p.1).sum::<Duration>().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Simulated seconds of `w` on `spec` (timing only).
///
/// # Errors
/// Lowering, compile or simulation failures.
pub fn simulate(spec: &SimSpec, w: &Workload) -> Result<f64, RunError> {
    let dev = SimDevice::new(spec.clone(), 1, 64).map_err(|e| RunError::Sim {
        step: w.name.clone(),
        error: e.to_string(),
    })?;
    simulate_on(&dev, w)
}

/// Simulated seconds of `w` on `dev` (timing only).
///
/// # Errors
/// As [`simulate`].
pub fn simulate_on(dev: &SimDevice, w: &Workload) -> Result<f64, RunError> {
    let prepared = Prepared::new(&w.graph)?;
    let named: Vec<(&str, &Tensor)> = w.inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let bindings = prepared.graph().bind_tensors(&named, &Bindings::new())?;
    let reports = dev.simulate(&prepared, &bindings)?;
    let cycles: u64 = reports.iter().map(|r| r.stats.cycles).sum();
    Ok(dev.spec().spec.seconds(cycles))
}

/// Parameters fitted, in the order of [`apply`]'s `theta`.
const PARAMS: usize = 10;

/// The spec whose fitted parameters are `theta` (cycles per unit), on
/// `cores` cores; a zero cost becomes a very fast rate.
fn apply(cores: u32, theta: &[f64; PARAMS]) -> DeviceSpec {
    let base = DeviceSpec::GENERIC_CPU;
    let rate = |t: f64| if t > 1e-9 { 1.0 / t } else { 1e9 };
    let mut s = DeviceSpec {
        cores,
        gm_latency: 0,
        dispatch: 0,
        queue_depth: 1,
        serial: true,
        launch: theta[0].round() as u32,
        vector_issue: theta[1].round() as u32,
        cube_issue: theta[1].round() as u32,
        transfer_setup: theta[2].round() as u32,
        transfer_row_cycles: theta[3],
        core_gm_bytes_per_cycle: rate(theta[4]),
        ..base
    };
    s.gm_bytes_per_cycle = s.core_gm_bytes_per_cycle * cores as f64;
    for c in 0..4 {
        let r = rate(theta[5 + c]);
        for w in 0..3 {
            s.vector_lanes[c][w] = r * base.vector_lanes[c][w] / base.vector_lanes[c][2];
        }
    }
    let f32_rate = rate(theta[9]);
    for t in 0..3 {
        s.cube_macs[t] = f32_rate * base.cube_macs[t] / base.cube_macs[1];
    }
    s
}

/// Fits a spec to `rt`'s CPU device from [`micro_kernels`], timing each
/// `repeats` times.
///
/// # Errors
/// A micro-kernel that fails to run or simulate.
pub fn calibrate(rt: &Runtime, repeats: usize) -> Result<Calibration, Error> {
    let cores = rt.pool().cores() as u32;
    let work = micro_kernels()?;
    let mut measured = Vec::with_capacity(work.len());
    let mut programs = Vec::with_capacity(work.len());
    for w in &work {
        measured.push(measure(rt, w, repeats.max(1))? * 1e9);
        programs.push(kernels(rt, w)?);
    }
    // Each parameter's cycles per unit, by simulating with it alone.
    let mut sim = Box::new(Simulator::new());
    let unit = 1000.0;
    let zero = [0.0; PARAMS];
    let mut base = Vec::with_capacity(work.len());
    let mut features = vec![[0.0; PARAMS]; work.len()];
    for p in &programs {
        base.push(cycles(&mut sim, &apply(cores, &zero), p)? as f64);
    }
    for j in 0..PARAMS {
        let mut theta = zero;
        theta[j] = unit;
        let spec = apply(cores, &theta);
        for (i, p) in programs.iter().enumerate() {
            features[i][j] = ((cycles(&mut sim, &spec, p)? as f64 - base[i]) / unit).max(0.0);
        }
    }
    let theta = nnls_relative(&features, &base, &measured);
    let spec = SimSpec {
        name: format!("cpu-calibrated ({cores} core(s))"),
        spec: apply(cores, &theta),
    };
    let mut points = Vec::with_capacity(work.len());
    for ((w, m), p) in work.iter().zip(&measured).zip(&programs) {
        points.push(Point {
            name: w.name.clone(),
            measured: m / 1e9,
            simulated: spec.spec.seconds(cycles(&mut sim, &spec.spec, p)?),
        });
    }
    Ok(Calibration { spec, points })
}

/// The kernels `rt` compiles for `w`, lowered for the simulator.
fn kernels(rt: &Runtime, w: &Workload) -> Result<Vec<Box<SimProgram<SIM_INSTRS_CAP>>>, Error> {
    let prepared = Prepared::new(&w.graph)?;
    let named: Vec<(&str, &Tensor)> = w.inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let bindings = prepared.graph().bind_tensors(&named, &Bindings::new())?;
    let (_, ready) = rt.plan(&prepared, &bindings)?;
    let ub = rt.target().ub_bytes;
    Ok(ready
        .iter()
        .map(|k| lower(k, ub))
        .collect::<Result<Vec<_>, String>>()?)
}

/// Cycles of `programs` launched one after the other on `spec`.
fn cycles(
    sim: &mut Simulator,
    spec: &DeviceSpec,
    programs: &[Box<SimProgram<SIM_INSTRS_CAP>>],
) -> Result<u64, Error> {
    let mut total = 0;
    for p in programs {
        total += sim.launch(spec, p, &mut NoSink)?.cycles;
    }
    Ok(total)
}

/// Non-negative `theta` minimising `Σ ((base_i + f_i·theta − y_i) / y_i)²`,
/// by cyclic coordinate descent.
fn nnls_relative(f: &[[f64; PARAMS]], base: &[f64], y: &[f64]) -> [f64; PARAMS] {
    let rows: Vec<([f64; PARAMS], f64)> = f
        .iter()
        .zip(base.iter().zip(y))
        .map(|(fi, (&b, &yi))| {
            let w = 1.0 / yi.max(1.0);
            let mut a = *fi;
            for v in &mut a {
                *v *= w;
            }
            (a, (yi - b) * w)
        })
        .collect();
    let mut theta = [0.0; PARAMS];
    let mut resid: Vec<f64> = rows.iter().map(|r| r.1).collect();
    for _ in 0..20_000 {
        for (j, t) in theta.iter_mut().enumerate() {
            let norm: f64 = rows.iter().map(|r| r.0[j] * r.0[j]).sum();
            if norm <= 0.0 {
                continue;
            }
            let grad: f64 = rows.iter().zip(&resid).map(|(r, e)| r.0[j] * e).sum();
            let new = (*t + grad / norm).max(0.0);
            let d = new - *t;
            if d != 0.0 {
                for (e, r) in resid.iter_mut().zip(&rows) {
                    *e -= r.0[j] * d;
                }
                *t = new;
            }
        }
    }
    theta
}

/// Spearman's rank correlation of `a` and `b` (ties get their mean rank);
/// `None` for fewer than two points or a constant series.
pub fn spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() != b.len() || a.len() < 2 {
        return None;
    }
    let ranks = |v: &[f64]| {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&i, &j| v[i].total_cmp(&v[j]));
        let mut r = vec![0.0; v.len()];
        let mut i = 0;
        while i < idx.len() {
            let mut j = i;
            while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
                j += 1;
            }
            let mean = (i + j) as f64 / 2.0;
            for &k in &idx[i..=j] {
                r[k] = mean;
            }
            i = j + 1;
        }
        r
    };
    let (ra, rb) = (ranks(a), ranks(b));
    let n = a.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = ra.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = rb.iter().map(|y| (y - mb).powi(2)).sum();
    (va > 0.0 && vb > 0.0).then(|| cov / (va * vb).sqrt())
}

/// The median of `simulated / measured` over `points`.
pub fn median_ratio(points: &[Point]) -> Option<f64> {
    let mut r: Vec<f64> = points
        .iter()
        .filter(|p| p.measured > 0.0)
        .map(|p| p.simulated / p.measured)
        .collect();
    r.sort_by(f64::total_cmp);
    r.get(r.len() / 2).copied()
}
