//! `dvm demo`: the runtime operator compiler on a sweep of sequence lengths.
//!
//! Part 1 builds a transformer encoder block with a symbolic sequence length
//! S, and for each S lowers it, compiles every kernel for exactly that shape
//! (the cache miss), runs it on the CPU device (cache hits) and compares the
//! result with the f64 reference device.
//!
//! Part 2 times single operators of a layer at hidden size 768 (bias add,
//! softmax, layernorm, matmul + bias + GELU): compile (encode, verify,
//! predecode) per shape and run, each checked against an f64 reference.

use std::fmt::Write as _;
use std::time::Instant;

use crate::pool::{CpuPool, RawBuf};
use crate::{Outputs, Prepared, Runtime};
use dvm_compile::codegen::Target;
use dvm_compile::kernel::build;
pub use dvm_compile::samples::{groups, HIDDEN};
use dvm_fuse::FuseOptions;
use dvm_graph::models::{encoder_block, EncoderConfig};
use dvm_graph::reference;
use dvm_sym::Bindings;
use dvm_tensor::{sample_data as data, Tensor};

/// One row of the encoder sweep.
#[derive(Clone, Debug)]
pub struct EncoderRow {
    /// Sequence length.
    pub len: u64,
    /// Kernels (fused groups or single operators) per call.
    pub kernels: usize,
    /// Launches per call (stacked kernels share one).
    pub launches: usize,
    /// Lowering + compiling every kernel of the call (all cache misses), µs.
    pub compile_us: f64,
    /// Mean compile time per kernel, µs.
    pub per_kernel_us: f64,
    /// Best time of a whole call with every kernel cached, ms.
    pub run_ms: f64,
    /// Max |cpu − reference| over the output.
    pub max_err: f64,
}

/// Tolerance of the encoder sweep (outputs are layer-normalised, O(1)).
pub const ENCODER_TOL: f64 = 1e-3;

/// The encoder block's inputs at length `s`, weights scaled to keep
/// activations O(1).
///
/// # Errors
/// Only if a tensor cannot be built (sizes beyond memory), as text.
pub fn encoder_inputs(cfg: &EncoderConfig, s: u64) -> Result<Vec<(&'static str, Tensor)>, String> {
    let (h, f) = (cfg.hidden, cfg.ffn);
    let t = |shape: &[u64], seed: u32, k: f32| {
        let n: u64 = shape.iter().product();
        let v: Vec<f32> = data(n as usize, seed).iter().map(|x| x * k).collect();
        Tensor::from_f32(shape, &v).map_err(|e| e.to_string())
    };
    let w = 1.0 / (h as f32).sqrt();
    let w2 = 1.0 / (f as f32).sqrt();
    Ok(vec![
        ("x", t(&[s, h], 1, 1.0)?),
        ("wq", t(&[h, h], 2, w)?),
        ("wk", t(&[h, h], 3, w)?),
        ("wv", t(&[h, h], 4, w)?),
        ("wo", t(&[h, h], 5, w)?),
        ("w1", t(&[h, f], 6, w)?),
        ("b1", t(&[f], 7, 0.1)?),
        ("w2", t(&[f, h], 8, w2)?),
        ("b2", t(&[h], 9, 0.1)?),
        ("g1", t(&[h], 10, 1.0)?),
        ("be1", t(&[h], 11, 0.1)?),
        ("g2", t(&[h], 12, 1.0)?),
        ("be2", t(&[h], 13, 0.1)?),
    ])
}

/// Runs the encoder block for every length in `lens` on `rt`, fused.
///
/// # Errors
/// The first failure, as text.
pub fn run_encoder(
    cfg: &EncoderConfig,
    lens: &[u64],
    rt: &Runtime,
) -> Result<Vec<EncoderRow>, String> {
    run_encoder_with(cfg, lens, rt, &FuseOptions::default())
}

/// Runs the encoder block for every length in `lens` on `rt` with the
/// fusion options `opts`.
///
/// # Errors
/// A length outside `1..=cfg.max_len` (before anything is allocated or
/// run), then the first failure, as text.
pub fn run_encoder_with(
    cfg: &EncoderConfig,
    lens: &[u64],
    rt: &Runtime,
    opts: &FuseOptions,
) -> Result<Vec<EncoderRow>, String> {
    // Checked before any input is made: an S beyond the symbol's range
    // was found only after its inputs were allocated (S = 10^8 asked for
    // 100 GB and aborted).
    if let Some(s) = lens
        .iter()
        .find(|&&s| s == 0 || i64::try_from(s).map_or(true, |s| s > cfg.max_len))
    {
        return Err(format!(
            "sequence length {s} is outside the encoder's range 1..={}",
            cfg.max_len
        ));
    }
    let graph = encoder_block(cfg).map_err(|e| e.to_string())?;
    let prepared = Prepared::with_options(&graph, opts).map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for &s in lens {
        let inputs = encoder_inputs(cfg, s)?;
        let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
        let bindings = prepared
            .graph()
            .bind_tensors(&named, &Bindings::new())
            .map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        let (plan, _) = rt.plan(&prepared, &bindings).map_err(|e| e.to_string())?;
        let compile_us = t0.elapsed().as_secs_f64() * 1e6;
        let mut best = f64::MAX;
        let mut out = Outputs::default();
        for _ in 0..3 {
            let t = Instant::now();
            out = rt.run(&prepared, &named).map_err(|e| e.to_string())?;
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
        }
        let want = reference::run(&graph, &named, &Bindings::new()).map_err(|e| e.to_string())?;
        let mut max_err = 0f64;
        for ((_, w), (_, g)) in want.iter().zip(&out) {
            max_err = max_err.max(w.max_abs_diff(g).map_err(|e| e.to_string())?);
        }
        rows.push(EncoderRow {
            len: s,
            kernels: plan.steps.len(),
            launches: plan.launches.len(),
            compile_us,
            per_kernel_us: compile_us / plan.steps.len().max(1) as f64,
            run_ms: best,
            max_err,
        });
    }
    Ok(rows)
}

/// Formats the encoder table.
pub fn encoder_table(rows: &[EncoderRow]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:>6} {:>8} {:>9} {:>13} {:>14} {:>10} {:>10}  ok",
        "len", "kernels", "launches", "compile µs", "µs/kernel", "run ms", "max err"
    );
    for r in rows {
        let _ = writeln!(
            t,
            "{:>6} {:>8} {:>9} {:>13.1} {:>14.1} {:>10.3} {:>10.2e}  {}",
            r.len,
            r.kernels,
            r.launches,
            r.compile_us,
            r.per_kernel_us,
            r.run_ms,
            r.max_err,
            if r.max_err <= ENCODER_TOL {
                "yes"
            } else {
                "NO"
            }
        );
    }
    t
}

/// The longest sequence [`run`] takes (its buffers are `S × HIDDEN` f32:
/// 48 MiB each at this length).
pub const MAX_OP_LEN: u64 = 16_384;

/// One row of the demo table.
#[derive(Clone, Debug)]
pub struct DemoRow {
    /// Sequence length.
    pub len: u64,
    /// Operator name.
    pub op: &'static str,
    /// Compile time of the cache miss, µs.
    pub compile_us: f64,
    /// Best run time over a few launches, ms.
    pub run_ms: f64,
    /// Max |device − reference|.
    pub max_err: f64,
    /// Tolerance the error is checked against.
    pub tol: f64,
}

/// f64 reference of the demo operators; `rows` selects the rows checked.
fn reference(op: &str, s: u64, inputs: &[Vec<f32>], rows: &[u64]) -> Vec<(u64, Vec<f64>)> {
    let h = HIDDEN as usize;
    let x = &inputs[0];
    rows.iter()
        .map(|&r| {
            let xr: Vec<f64> = x[r as usize * h..(r as usize + 1) * h]
                .iter()
                .map(|v| *v as f64)
                .collect();
            let out = match op {
                "bias_add" => xr
                    .iter()
                    .zip(&inputs[1])
                    .map(|(a, b)| a + *b as f64)
                    .collect(),
                "softmax" => {
                    let m = xr.iter().cloned().fold(f64::MIN, f64::max);
                    let e: Vec<f64> = xr.iter().map(|v| (v - m).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    e.iter().map(|v| v / sum).collect()
                }
                "layernorm" => {
                    let mean = xr.iter().sum::<f64>() / h as f64;
                    let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / h as f64;
                    let rstd = 1.0 / (var + 1e-5).sqrt();
                    (0..h)
                        .map(|j| (xr[j] - mean) * rstd * inputs[1][j] as f64 + inputs[2][j] as f64)
                        .collect()
                }
                _ => {
                    let w = &inputs[1];
                    (0..h)
                        .map(|j| {
                            let mut acc = inputs[2][j] as f64;
                            for (p, xv) in xr.iter().enumerate() {
                                acc += xv * w[p * h + j] as f64;
                            }
                            let c = (2.0 / std::f64::consts::PI).sqrt();
                            0.5 * acc * (1.0 + (c * (acc + 0.044715 * acc * acc * acc)).tanh())
                        })
                        .collect()
                }
            };
            let _ = s;
            (r, out)
        })
        .collect()
}

/// Runs the demo over `lens`; returns the rows (errors are strings: the demo
/// is a command, not a library entry).
///
/// # Errors
/// A length outside `1..=`[`MAX_OP_LEN`] (before anything is allocated or
/// run), then the first compile or launch failure, as text.
pub fn run(lens: &[u64], pool: &CpuPool) -> Result<Vec<DemoRow>, String> {
    // Checked before anything is allocated: S × HIDDEN buffers for S =
    // 10^8 aborted the process, and S = 0 read as a tile not fitting UB.
    if let Some(s) = lens.iter().find(|&&s| !(1..=MAX_OP_LEN).contains(&s)) {
        return Err(format!(
            "sequence length {s} is outside the single-operator table's range 1..={MAX_OP_LEN}"
        ));
    }
    let target = Target {
        cores: pool.cores() as u32,
        ..Target::default()
    };
    let mut rows_out = Vec::new();
    for &s in lens {
        for (i, (name, group)) in groups(s).into_iter().enumerate() {
            let t0 = Instant::now();
            let kernel =
                build(&group, name, &target).map_err(|e| format!("{name} at S={s}: {e}"))?;
            let compile_us = t0.elapsed().as_secs_f64() * 1e6;
            let inputs: Vec<Vec<f32>> = group
                .inputs
                .iter()
                .enumerate()
                .map(|(k, v)| {
                    let n = if v.strides.contains(&0) {
                        HIDDEN
                    } else {
                        v.numel()
                    };
                    data(n as usize, (s as u32) * 31 + i as u32 * 7 + k as u32)
                })
                .collect();
            let mut out = vec![0f32; (s * HIDDEN) as usize];
            let mut bufs: Vec<RawBuf> =
                inputs.iter().map(|v| RawBuf::input(v.as_slice())).collect();
            bufs.push(RawBuf::output(out.as_mut_slice()));
            let mut best = f64::MAX;
            for _ in 0..3 {
                let t = Instant::now();
                // SAFETY: the buffers are live vectors owned here, not
                // touched during the launch; only `out` is written.
                unsafe { pool.launch(&kernel.program, &bufs) }
                    .map_err(|e| format!("{name} at S={s}: {e}"))?;
                best = best.min(t.elapsed().as_secs_f64() * 1e3);
            }
            let check: Vec<u64> = if s <= 256 {
                (0..s).collect()
            } else {
                (0..64).map(|k| k * (s - 1) / 63).collect()
            };
            let mut max_err = 0f64;
            for (r, want) in reference(name, s, &inputs, &check) {
                for (j, w) in want.iter().enumerate() {
                    let got = out[(r * HIDDEN) as usize + j] as f64;
                    max_err = max_err.max((got - w).abs());
                }
            }
            let tol = if name == "matmul+bias+gelu" {
                1e-3
            } else {
                1e-5
            };
            rows_out.push(DemoRow {
                len: s,
                op: name,
                compile_us,
                run_ms: best,
                max_err,
                tol,
            });
        }
    }
    Ok(rows_out)
}

/// Formats the demo table.
pub fn table(rows: &[DemoRow]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:>6}  {:<18} {:>12} {:>10} {:>10}  ok",
        "len", "op", "compile µs", "run ms", "max err"
    );
    for r in rows {
        let _ = writeln!(
            t,
            "{:>6}  {:<18} {:>12.1} {:>10.3} {:>10.2e}  {}",
            r.len,
            r.op,
            r.compile_us,
            r.run_ms,
            r.max_err,
            if r.max_err <= r.tol { "yes" } else { "NO" }
        );
    }
    t
}
