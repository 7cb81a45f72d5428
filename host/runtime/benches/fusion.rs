//! Fusion benchmark: fused against unfused run time and bytes moved per
//! call for gelu(x·w+b), softmax, layernorm, add+layernorm, row-sum,
//! matmul+bias+relu and attention softmax(q·kᵀ/√d)·v at sequence lengths
//! 17…4096 (hidden 768), plus longer sequences for the memory-bound
//! workloads (inputs larger than the last-level cache); the machine's copy
//! bandwidth, at the start and, for each workload beyond the last-level
//! cache, beside it in the same rounds over as many bytes as it moves
//! (what its "%copy" divides by); the encoder block with and without stacking; and the cost of
//! the fusion decision for a window of 30 recorded operations.
//!
//! `cargo bench -p dvm-runtime --bench fusion [-- quick]` (`-- mix`: only
//! gelu(x·w+b) fused against unfused, many repetitions; `-- decision`: only
//! the fusion decision table; `-- decision loop`: only the fusion pass, in a
//! loop, for profiling; `DVM_BENCH_WORKLOADS=softmax,row-sum`: only those
//! workloads, no encoder or decision tables). Each fusion plan is
//! made once per workload on the symbolic graph; every length then only
//! binds, hits the kernel cache and runs. Times are the best of a few calls:
//! "call" is the whole `Runtime::run` (binding, the plan kept from the
//! warm-up call, output allocation, launches), "into" the same into output
//! tensors kept from an earlier call (`Runtime::run_into`), "kernels" the
//! launches alone, in that call into kept outputs: the kernels write
//! memory an earlier call wrote, as the copy they are compared with does
//! (a fresh output tensor's zeroing leaves the caches full of its dirty
//! lines, which would slow the kernels beyond the last-level cache).

use std::time::{Duration, Instant};

use dvm_compile::codegen::{Group, GroupKind, Target, TileOp, View};
use dvm_compile::kernel::build;
use dvm_fuse::{FuseOptions, FusionPlan};
use dvm_graph::models::{self, encoder_block, EncoderConfig};
use dvm_graph::{decompose_with_spans, Graph};
use dvm_isa::DType;
use dvm_runtime::eager::LazyTensor;
use dvm_runtime::pool::RawBuf;
use dvm_runtime::{Prepared, Runtime};
use dvm_sym::Bindings;
use dvm_tensor::sample_data as data;
use dvm_tensor::Tensor;

#[path = "common/windows.rs"]
mod windows;
use windows::{window30, window30_primitive, window30_shift};

const H: i64 = 768;
/// Largest `S` of every workload graph.
const MAX_LEN: i64 = 1 << 16;

fn tensor(shape: &[u64], seed: u32, scale: f32) -> Tensor {
    let n: u64 = shape.iter().product();
    let v: Vec<f32> = data(n as usize, seed).iter().map(|x| x * scale).collect();
    Tensor::from_f32(shape, &v).expect("tensor")
}

/// Input name, shape and value scale.
type InputSpec = (&'static str, Vec<u64>, f32);

struct Workload {
    name: &'static str,
    graph: Graph,
    /// Input shapes at length `s`, with a weight scale.
    inputs: fn(u64) -> Vec<InputSpec>,
    lens: Vec<u64>,
}

fn workloads(quick: bool) -> Vec<Workload> {
    let lens: Vec<u64> = if quick {
        vec![17, 512]
    } else {
        vec![17, 128, 512, 1024, 4096]
    };
    let mut long = lens.clone();
    if !quick {
        long.push(32768);
    }
    let mut out = Vec::new();

    let g = models::gelu_linear(H, MAX_LEN).expect("workload graph");
    out.push(Workload {
        name: "gelu(x·w+b)",
        graph: g,
        inputs: |s| {
            vec![
                ("x", vec![s, 768], 1.0),
                ("w", vec![768, 768], 0.036),
                ("b", vec![768], 1.0),
            ]
        },
        lens: lens.clone(),
    });

    let g = models::softmax_rows(H, MAX_LEN).expect("workload graph");
    out.push(Workload {
        name: "softmax",
        graph: g,
        inputs: |s| vec![("x", vec![s, 768], 3.0)],
        lens: long.clone(),
    });

    let g = models::layer_norm_rows(H, MAX_LEN).expect("workload graph");
    out.push(Workload {
        name: "layernorm",
        graph: g,
        inputs: |s| {
            vec![
                ("x", vec![s, 768], 1.0),
                ("g", vec![768], 1.0),
                ("b", vec![768], 1.0),
            ]
        },
        lens: long.clone(),
    });

    let g = models::add_layer_norm(H, MAX_LEN).expect("workload graph");
    out.push(Workload {
        name: "add+layernorm",
        graph: g,
        inputs: |s| {
            vec![
                ("x", vec![s, 768], 1.0),
                ("r", vec![s, 768], 1.0),
                ("g", vec![768], 1.0),
                ("b", vec![768], 1.0),
            ]
        },
        lens: long.clone(),
    });

    let g = models::row_sum(H, MAX_LEN).expect("workload graph");
    out.push(Workload {
        name: "row-sum",
        graph: g,
        inputs: |s| vec![("x", vec![s, 768], 1.0)],
        lens: long,
    });

    let g = models::matmul_bias_relu(H, MAX_LEN).expect("workload graph");
    out.push(Workload {
        name: "matmul+bias+relu",
        graph: g,
        inputs: |s| {
            vec![
                ("x", vec![s, 768], 1.0),
                ("w", vec![768, 768], 0.036),
                ("b", vec![768], 1.0),
            ]
        },
        lens: lens.clone(),
    });

    // 12 heads of 64: q, k, v as [12, S, 64].
    let g = models::attention(12, 64, MAX_LEN).expect("workload graph");
    out.push(Workload {
        name: "attention",
        graph: g,
        inputs: |s| {
            vec![
                ("q", vec![12, s, 64], 1.0),
                ("k", vec![12, s, 64], 1.0),
                ("v", vec![12, s, 64], 1.0),
            ]
        },
        lens,
    });
    out
}

struct Measured {
    call_ms: f64,
    /// A call into output tensors kept from an earlier call
    /// (`Runtime::run_into`).
    into_ms: f64,
    kernel_ms: f64,
    bytes: u64,
    kernels: usize,
    launches: usize,
}

/// One prepared graph under measurement: its plan's counts, output tensors
/// kept for `run_into`, and the best times so far.
struct Sampler<'a> {
    p: &'a Prepared,
    kept: Vec<(String, Tensor)>,
    m: Measured,
}

impl<'a> Sampler<'a> {
    /// Plans `p` and runs it once (the warm-up).
    fn new(rt: &Runtime, p: &'a Prepared, inputs: &[(&str, &Tensor)]) -> Sampler<'a> {
        let bindings = p
            .graph()
            .bind_tensors(inputs, &Bindings::new())
            .expect("binds");
        let (plan, kernels) = rt.plan(p, &bindings).expect("plans");
        let kept = rt.run(p, inputs).expect("warm-up run").into_vec();
        Sampler {
            p,
            kept,
            m: Measured {
                call_ms: f64::MAX,
                into_ms: f64::MAX,
                kernel_ms: f64::MAX,
                bytes: kernels.iter().map(|k| k.info.bytes_moved).sum(),
                kernels: plan.steps.len(),
                launches: plan.launches.len(),
            },
        }
    }

    /// One timed `run` (the call) and one timed `run_into` (the call, and
    /// its kernels).
    fn sample(&mut self, rt: &Runtime, inputs: &[(&str, &Tensor)]) {
        let m = &mut self.m;
        let t = Instant::now();
        let out = rt.run(self.p, inputs).expect("runs");
        m.call_ms = m.call_ms.min(t.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(out);
        let mut outs: Vec<(&str, &mut Tensor)> =
            self.kept.iter_mut().map(|(n, t)| (n.as_str(), t)).collect();
        let mut prof: Vec<(String, Duration)> = Vec::new();
        let t = Instant::now();
        rt.run_into_profiled(self.p, inputs, &Bindings::new(), &mut outs, Some(&mut prof))
            .expect("runs into kept outputs");
        m.into_ms = m.into_ms.min(t.elapsed().as_secs_f64() * 1e3);
        let kern = prof.iter().map(|(_, d)| d.as_secs_f64()).sum::<f64>() * 1e3;
        m.kernel_ms = m.kernel_ms.min(kern);
    }
}

/// The fused and unfused preparations of a workload, both warmed up first,
/// then sampled in turn, each first in every other round (with a single
/// sample, the one run second measured up to 10% faster on the very same
/// kernel). With `copy`, every round also samples a copy of as many bytes
/// as the fused plan moves (returned), so that the workload and the
/// bandwidth it is compared with are measured in the same seconds (this
/// VM's bandwidth drifts by up to 2× within an hour).
fn measure_pair(
    rt: &Runtime,
    fused: &Prepared,
    unfused: &Prepared,
    inputs: &[(&str, &Tensor)],
    reps: usize,
    copy: bool,
) -> (Measured, Measured, Option<CopyRef>) {
    let mut f = Sampler::new(rt, fused, inputs);
    let mut u = Sampler::new(rt, unfused, inputs);
    let mut copy = copy.then(|| CopyRef::new(rt, (f.m.bytes / 2) as usize));
    for r in 0..reps {
        // Each goes first in every other round.
        let (a, b) = if r % 2 == 0 {
            (&mut f, &mut u)
        } else {
            (&mut u, &mut f)
        };
        a.sample(rt, inputs);
        if let Some(c) = copy.as_mut() {
            c.sample(rt);
        }
        b.sample(rt, inputs);
    }
    (f.m, u.m, copy)
}

/// A copy of `n` bytes (`2n` moved) three ways, best times so far: plain
/// `copy_from_slice` on one thread and on every core, and the VM's copy
/// kernel on the CPU device.
struct CopyRef {
    src: Vec<u8>,
    dst: Vec<u8>,
    kernel: std::sync::Arc<dvm_compile::kernel::ReadyKernel>,
    one_s: f64,
    all_s: f64,
    vm_s: f64,
}

impl CopyRef {
    /// Buffers of `n` bytes (rounded down to whole `f32`s) and the copy
    /// kernel for them, not yet sampled.
    fn new(rt: &Runtime, n: usize) -> CopyRef {
        let n = n & !3;
        let src: Vec<u8> = (0..n).map(|i| i as u8).collect();
        let dst = vec![0u8; n];
        let elems = (n / 4) as u64;
        let v = View::contiguous(DType::F32, &[elems]);
        let group = Group {
            kind: GroupKind::Elementwise { shape: vec![elems] },
            inputs: vec![v.clone()],
            nodes: vec![(TileOp::Input(0), DType::F32)],
            outputs: vec![(0, v)],
        };
        let target = Target {
            cores: rt.pool().cores() as u32,
            ..Target::default()
        };
        let kernel = build(&group, "copy", &target).expect("copy kernel");
        CopyRef {
            src,
            dst,
            kernel,
            one_s: f64::MAX,
            all_s: f64::MAX,
            vm_s: f64::MAX,
        }
    }

    /// One timed copy each way.
    fn sample(&mut self, rt: &Runtime) {
        let t = Instant::now();
        self.dst.copy_from_slice(&self.src);
        self.one_s = self.one_s.min(t.elapsed().as_secs_f64());
        std::hint::black_box(&self.dst);
        let chunk = self.src.len().div_ceil(rt.pool().cores()).max(1);
        let t = Instant::now();
        std::thread::scope(|sc| {
            for (d, s) in self.dst.chunks_mut(chunk).zip(self.src.chunks(chunk)) {
                sc.spawn(move || d.copy_from_slice(s));
            }
        });
        self.all_s = self.all_s.min(t.elapsed().as_secs_f64());
        let n = self.src.len();
        let bufs = [
            RawBuf::input(&self.src[..n]),
            RawBuf::output(&mut self.dst[..n]),
        ];
        let t = Instant::now();
        // SAFETY: both buffers are vectors owned by `self` and not touched
        // during the launch; only `dst` is written.
        unsafe { rt.pool().launch(&self.kernel.program, &bufs) }.expect("copy runs");
        self.vm_s = self.vm_s.min(t.elapsed().as_secs_f64());
    }

    /// GB/s (bytes read + written per second) of the best samples: one
    /// thread, every core, the VM's copy kernel.
    fn gbs(&self) -> (f64, f64, f64) {
        let moved = 2.0 * self.src.len() as f64 / 1e9;
        (moved / self.one_s, moved / self.all_s, moved / self.vm_s)
    }

    /// The reference a memory-bound kernel is held to: the faster of the
    /// copies on every core.
    fn best_gbs(&self) -> f64 {
        let (_, all, vm) = self.gbs();
        all.max(vm)
    }
}

/// Copy bandwidth in GB/s over `mib` MiB, best of three: see
/// [`CopyRef::gbs`].
fn copy_bandwidth(rt: &Runtime, mib: usize) -> (f64, f64, f64) {
    let mut c = CopyRef::new(rt, mib << 20);
    for _ in 0..3 {
        c.sample(rt);
    }
    c.gbs()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    if std::env::args().any(|a| a == "mix") {
        // gelu(x·w+b) fused against unfused, kernels only, many repetitions.
        let rt = Runtime::new(
            std::thread::available_parallelism().map_or(1, |n| n.get()),
            64,
        );
        let w = workloads(true).swap_remove(0);
        let f = Prepared::new(&w.graph).expect("prepares");
        let u = Prepared::with_options(&w.graph, &FuseOptions::off()).expect("prepares");
        for s in [17u64, 64, 128, 256, 512] {
            let ins: Vec<(&str, Tensor)> = (w.inputs)(s)
                .into_iter()
                .enumerate()
                .map(|(i, (n, sh, k))| (n, tensor(&sh, i as u32 + 1, k)))
                .collect();
            let named: Vec<(&str, &Tensor)> = ins.iter().map(|(n, t)| (*n, t)).collect();
            let (a, b, _) = measure_pair(&rt, &f, &u, &named, 30, false);
            println!(
                "S={s}: fused {:.3} ms, unfused {:.3} ms",
                a.kernel_ms, b.kernel_ms
            );
        }
        return;
    }
    if std::env::args().any(|a| a == "decision") {
        if std::env::args().any(|a| a == "loop") {
            decision_loop();
        } else {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            decision_table(quick, cores);
        }
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rt = Runtime::new(cores, 4096);
    println!(
        "dvm fusion benchmark, {cores} core(s){}",
        if quick { " (quick)" } else { "" }
    );

    let (one, all, vm) = copy_bandwidth(&rt, if quick { 64 } else { 256 });
    let copy_bw = all.max(vm);
    println!(
        "\ncopy bandwidth (read + write, {} MiB): memcpy 1 thread {one:.1} GB/s, memcpy {cores} threads {all:.1} GB/s, VM copy kernel {vm:.1} GB/s",
        if quick { 64 } else { 256 }
    );

    println!(
        "\n{:<18} {:>6} {:>9} {:>9} {:>17} {:>9} {:>17} {:>19} {:>8} {:>6}",
        "workload",
        "S",
        "kernels",
        "launches",
        "call ms f / u",
        "into ms f",
        "kernel ms f / u",
        "MiB moved f / u",
        "GB/s f",
        "%copy"
    );
    // `DVM_BENCH_WORKLOADS=softmax,row-sum` runs only those workloads.
    let only = std::env::var("DVM_BENCH_WORKLOADS").ok();
    for w in workloads(quick) {
        if only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|n| n == w.name))
        {
            continue;
        }
        let fused = Prepared::new(&w.graph).expect("prepares");
        let unfused = Prepared::with_options(&w.graph, &FuseOptions::off()).expect("prepares");
        // The fused rate at cache-resident lengths (S = 512, 1024): what
        // the kernel's arithmetic allows when memory does not hold it up.
        let mut in_cache_gbs = 0.0f64;
        for &s in &w.lens {
            let ins: Vec<(&str, Tensor)> = (w.inputs)(s)
                .into_iter()
                .enumerate()
                .map(|(i, (n, sh, k))| (n, tensor(&sh, i as u32 + 1, k)))
                .collect();
            let named: Vec<(&str, &Tensor)> = ins.iter().map(|(n, t)| (*n, t)).collect();
            let reps = if w.name == "attention" && s >= 2048 {
                1
            } else if s >= 32768 {
                // Best of 8 on both sides (the workload and the copy beside
                // it): this host's memory bandwidth swings between rounds
                // by up to 1.6x, and 4 rounds could all fall in a slow spell
                // for one side.
                8
            } else if s <= 1024 {
                5
            } else {
                3
            };
            // Beyond the last-level cache, the copy bandwidth is measured
            // beside the workload, over as many bytes as it moves.
            let (f, u, copy) = measure_pair(&rt, &fused, &unfused, &named, reps, s >= 32768);
            let gbs = f.bytes as f64 / (f.kernel_ms * 1e-3) / 1e9;
            if (512..=1024).contains(&s) {
                in_cache_gbs = in_cache_gbs.max(gbs);
            }
            let reference = copy.as_ref().map_or(copy_bw, CopyRef::best_gbs);
            let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
            println!(
                "{:<18} {:>6} {:>4} / {:<3} {:>3} / {:<3} {:>8.3} / {:<8.3} {:>9.3} {:>8.3} / {:<8.3} {:>9.2} / {:<9.2} {:>8.1} {:>5.0}%",
                w.name,
                s,
                f.kernels,
                u.kernels,
                f.launches,
                u.launches,
                f.call_ms,
                u.call_ms,
                f.into_ms,
                f.kernel_ms,
                u.kernel_ms,
                mib(f.bytes),
                mib(u.bytes),
                gbs,
                100.0 * gbs / reference
            );
            if let Some(c) = &copy {
                let (one, all, vm) = c.gbs();
                println!(
                    "{:<18} {:>6}   copy beside it ({:.0} MiB, in the same rounds): memcpy 1 thread {one:.1} GB/s, {cores} threads {all:.1} GB/s, VM copy kernel {vm:.1} GB/s",
                    "", "", c.src.len() as f64 / (1u64 << 20) as f64
                );
                // The roofline on this machine: a kernel whose in-cache
                // rate is below the copy bandwidth is compute-bound here,
                // and no memory schedule brings it to the copy's rate.
                let copy_gbs = c.best_gbs();
                if in_cache_gbs > 0.0 {
                    let bound = if in_cache_gbs >= copy_gbs {
                        "memory-bound here".to_string()
                    } else {
                        format!(
                            "compute-bound here ({:.0}% of the copy at best)",
                            100.0 * in_cache_gbs / copy_gbs
                        )
                    };
                    println!(
                        "{:<18} {:>6}   roofline: {in_cache_gbs:.1} GB/s in cache (S = 512, 1024): {bound}; beyond the cache it keeps {:.0}% of that rate",
                        "", "", 100.0 * gbs / in_cache_gbs
                    );
                }
            }
        }
    }

    if only.is_some() {
        return;
    }
    // The encoder block: fused with stacking (parallel q/k/v, sequence
    // launches of small kernels), fused without stacking, unfused.
    let cfg = EncoderConfig::default();
    let g = encoder_block(&cfg).expect("encoder");
    let variants = [
        ("fused+stacked", FuseOptions::default()),
        (
            "fused",
            FuseOptions {
                stack: false,
                sequence: false,
                ..FuseOptions::default()
            },
        ),
        ("unfused", FuseOptions::off()),
    ];
    println!(
        "\nencoder block (hidden {}, {} heads, ffn {}): call ms (kernels / launches)",
        cfg.hidden, cfg.heads, cfg.ffn
    );
    let enc_lens: &[u64] = if quick { &[17] } else { &[17, 128, 512] };
    for &s in enc_lens {
        let ins = dvm_runtime::demo::encoder_inputs(&cfg, s).expect("inputs");
        let named: Vec<(&str, &Tensor)> = ins.iter().map(|(n, t)| (*n, t)).collect();
        let prepared: Vec<Prepared> = variants
            .iter()
            .map(|(_, opts)| Prepared::with_options(&g, opts).expect("prepares"))
            .collect();
        // Sampled in turn, round by round, each variant first in every
        // third round: the variants meet the same moments of a noisy host.
        let mut samplers: Vec<Sampler<'_>> = prepared
            .iter()
            .map(|p| Sampler::new(&rt, p, &named))
            .collect();
        for r in 0..6 {
            for k in 0..samplers.len() {
                let i = (r + k) % samplers.len();
                samplers[i].sample(&rt, &named);
            }
        }
        let mut line = format!("  S={s:<5}");
        for ((name, _), smp) in variants.iter().zip(&samplers) {
            let m = &smp.m;
            line.push_str(&format!(
                "  {name}: {:.3} ms ({} / {})",
                m.call_ms, m.kernels, m.launches
            ));
        }
        println!("{line}");
    }

    decision_table(quick, cores);
}

/// The fusion decision for a window of 30 recorded operations, cold (no
/// cache), and the eager API's per-flush decision on a repeating window.
fn decision_table(quick: bool, cores: usize) {
    // The fusion decision for a window of 30 recorded operations, cold
    // (no cache): the fusion pass alone, as the eager API runs it (no
    // rejection reasons), and with reasons (as `dvm explain` runs it).
    let reps = if quick { 200 } else { 2000 };
    let eager_opts = FuseOptions {
        reasons: false,
        ..FuseOptions::default()
    };
    let sweep_opts = FuseOptions {
        sweep: true,
        ..eager_opts
    };
    println!("\nfusion decision for a window of 30 recorded ops (cold, median of {reps}):");
    for (name, w) in [
        ("30 primitive ops", window30_primitive()),
        ("30 ops with 9 norms/softmaxes", window30()),
    ] {
        // As the eager API runs it: each composite starts as one group.
        let (d, spans) = decompose_with_spans(&w).expect("decomposes");
        let mut fast = Vec::with_capacity(reps);
        let mut full = Vec::with_capacity(reps);
        let mut prep = Vec::with_capacity(reps);
        let mut swept = Vec::with_capacity(reps);
        let mut swept_prep = Vec::with_capacity(reps);
        let mut recorded = Vec::with_capacity(reps);
        let mut recorded_prep = Vec::with_capacity(reps);
        let mut rscratch = dvm_fuse::FuseScratch::default();
        // The sweep in the working memory of the last, as the eager API
        // runs it.
        let mut scratch = dvm_fuse::FuseScratch::default();
        let mut plan = FusionPlan::with_composites(&d, &eager_opts, &spans).expect("fuses");
        for _ in 0..reps {
            let t = Instant::now();
            plan = FusionPlan::with_composites(&d, &eager_opts, &spans).expect("fuses");
            fast.push(t.elapsed().as_secs_f64() * 1e6);
            let t = Instant::now();
            std::hint::black_box(
                FusionPlan::with_composites(&d, &FuseOptions::default(), &spans).expect("fuses"),
            );
            full.push(t.elapsed().as_secs_f64() * 1e6);
            let t = Instant::now();
            std::hint::black_box(Prepared::with_options(&w, &eager_opts).expect("prepares"));
            prep.push(t.elapsed().as_secs_f64() * 1e6);
            let t = Instant::now();
            std::hint::black_box(
                FusionPlan::with_scratch(&d, &sweep_opts, &spans, &mut scratch).expect("fuses"),
            );
            swept.push(t.elapsed().as_secs_f64() * 1e6);
            let t = Instant::now();
            std::hint::black_box(Prepared::with_options(&w, &sweep_opts).expect("prepares"));
            swept_prep.push(t.elapsed().as_secs_f64() * 1e6);
            // Over the recorded operators, as the eager API decides a new
            // window; then the decomposition and the plan mapped onto it
            // (of a copy made before, as the eager API moves its window).
            let wc = w.clone();
            let t = Instant::now();
            let decided = FusionPlan::decide_recorded(&w, &sweep_opts, &mut rscratch)
                .expect("decides over the operators")
                .expect("decides");
            recorded.push(t.elapsed().as_secs_f64() * 1e6);
            let (dd, _) = dvm_graph::decompose_owned(wc).expect("decomposes");
            std::hint::black_box(decided.expand(&dd).expect("expands"));
            recorded_prep.push(t.elapsed().as_secs_f64() * 1e6);
        }
        println!(
            "  {name:<30} {:>3} nodes → {:>2} groups: rules {:>6.1} µs (min {:.1}), with reasons {:>6.1} µs, decomposition + rules {:>6.1} µs; sweep {:>5.1} µs, decomposition + sweep {:>5.1} µs; over the recorded operators {:>5.1} µs, + decomposition and mapping {:>5.1} µs",
            d.nodes().len(),
            plan.groups.len(),
            median(fast.clone()),
            fast.iter().cloned().fold(f64::MAX, f64::min),
            median(full),
            median(prep),
            median(swept),
            median(swept_prep),
            median(recorded),
            median(recorded_prep)
        );
    }
    // The same work over ten structures in turn, still warm: what the
    // pass costs when the branch predictors cannot learn one graph.
    let rotations: Vec<Graph> = (0..10).map(window30_shift).collect();
    let mut turn = Vec::with_capacity(reps);
    for r in 0..reps {
        let t = Instant::now();
        std::hint::black_box(
            Prepared::with_options(&rotations[r % 10], &sweep_opts).expect("prepares"),
        );
        turn.push(t.elapsed().as_secs_f64() * 1e6);
    }
    println!(
        "  the latter's 10 rotations in turn (a new structure each time, warm): decomposition + sweep {:.1} µs",
        median(turn)
    );
    // The eager API end to end on the same window (kernels cached after the
    // first flush): record 30 ops, read back.
    let ex = dvm_runtime::eager::Eager::new(cores);
    let ins = eager_inputs(&ex);
    let mut flush = Vec::new();
    for _ in 0..if quick { 20 } else { 200 } {
        let t = Instant::now();
        eager_window(&ins);
        flush.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let st = ex.stats();
    let flushes = st.flushes as f64;
    println!(
        "eager, 30 ops with norms/softmaxes per window: record + flush + read back median {:.0} µs per window; {:.1} kernels / {:.1} launches per flush; decision {:.1} µs per flush on average ({} of {} flushes reused a cached decision)",
        median(flush),
        st.kernels as f64 / flushes,
        st.launches as f64 / flushes,
        st.fuse_us / flushes,
        st.decision_hits,
        st.flushes
    );
    // The same window in a fresh context each time: every flush decides
    // cold (signature, decomposition and the fusion pass).
    let n = if quick { 5 } else { 20 };
    let (cold, cold_prep): (Vec<f64>, Vec<f64>) = (0..n)
        .map(|_| {
            let ex = dvm_runtime::eager::Eager::new(cores);
            eager_window(&eager_inputs(&ex));
            let st = ex.stats();
            let flushes = st.flushes as f64;
            (st.fuse_us / flushes, st.prepare_us / flushes)
        })
        .unzip();
    println!(
        "eager, same window in a fresh context (no cached decision): decision median {:.1} µs per flush (min {:.1}, {n} contexts); then decomposition and mapping {:.1} µs",
        median(cold.clone()),
        cold.iter().cloned().fold(f64::MAX, f64::min),
        median(cold_prep)
    );
    // New windows in a context that has run others: the window's ten
    // rotations, each a new structure, after the first.
    let (fresh, fresh_prep) = rotated_decisions(cores, if quick { 1 } else { 5 }, true);
    let (ruled, _) = rotated_decisions(cores, if quick { 1 } else { 5 }, false);
    println!(
        "eager, a new window in a context that ran others (9 rotations of the window, {} contexts): decision median {:.1} µs (min {:.1}), then decomposition and mapping {:.1} µs; with the rules on the decomposition instead {:.1} µs (min {:.1}, decomposition included)",
        fresh.len() / 9,
        median(fresh.clone()),
        fresh.iter().cloned().fold(f64::MAX, f64::min),
        median(fresh_prep),
        median(ruled.clone()),
        ruled.iter().cloned().fold(f64::MAX, f64::min)
    );
    // The same window at a new row count every flush (a dynamic sequence
    // length): decided on the symbolic copy from the second length on.
    let ex = dvm_runtime::eager::Eager::new(cores);
    let lens = if quick { 10 } else { 60 };
    let mut per = Vec::with_capacity(lens);
    for i in 0..lens {
        let s = 33 + 7 * i as u64;
        let before = ex.stats().fuse_us;
        eager_window(&eager_inputs_at(&ex, s));
        per.push(ex.stats().fuse_us - before);
    }
    let st = ex.stats();
    println!(
        "eager, the same window at {lens} row counts (33, 40, …): decision median {:.1} µs per flush, first {:.1} µs, second {:.1} µs ({} of {} flushes reused a decision)",
        median(per.clone()),
        per[0],
        per[1],
        st.decision_hits,
        st.flushes
    );
}

/// The decisions, in µs, of the window's nine other rotations (each a new
/// structure) in each of `contexts` contexts on `cores` cores that ran the
/// window itself first, and the time after each (the decomposition and
/// the plan mapped onto it; none for the rules, which decide on the
/// decomposition).
fn rotated_decisions(cores: usize, contexts: usize, sweep: bool) -> (Vec<f64>, Vec<f64>) {
    let mut us = Vec::with_capacity(9 * contexts);
    let mut prep = Vec::with_capacity(9 * contexts);
    for _ in 0..contexts {
        let opts = FuseOptions {
            reasons: false,
            sweep,
            ..FuseOptions::default()
        };
        let ex = dvm_runtime::eager::Eager::with_options(cores, opts, 64);
        let ins = eager_inputs(&ex);
        eager_window_from(&ins, 0);
        for shift in 1..10 {
            let before = ex.stats();
            eager_window_from(&ins, shift);
            let after = ex.stats();
            us.push(after.fuse_us - before.fuse_us);
            prep.push(after.prepare_us - before.prepare_us);
        }
    }
    (us, prep)
}

/// [`eager_inputs`] with `rows` rows of x.
fn eager_inputs_at(ex: &dvm_runtime::eager::Eager, rows: u64) -> [LazyTensor; 4] {
    [
        ex.tensor(tensor(&[rows, 256], 1, 1.0)),
        ex.tensor(tensor(&[256, 256], 2, 0.06)),
        ex.tensor(tensor(&[256], 3, 1.0)),
        ex.tensor(tensor(&[256], 4, 1.0)),
    ]
}

/// The inputs of [`eager_window`]: x, w, b, g.
fn eager_inputs(ex: &dvm_runtime::eager::Eager) -> [LazyTensor; 4] {
    [
        ex.tensor(tensor(&[64, 256], 1, 1.0)),
        ex.tensor(tensor(&[256, 256], 2, 0.06)),
        ex.tensor(tensor(&[256], 3, 1.0)),
        ex.tensor(tensor(&[256], 4, 1.0)),
    ]
}

/// Records the 30-op window of [`window30`] and reads it back.
fn eager_window(ins: &[LazyTensor; 4]) {
    eager_window_from(ins, 0);
}

/// [`eager_window`] with its 10-op cycle started at op `shift`: shifts 0
/// to 9 are ten windows of the same ops in ten different structures.
fn eager_window_from([x, wt, bt, gt]: &[LazyTensor; 4], shift: usize) {
    let mut cur = x.clone();
    for i in 0..30 {
        cur = match (i + shift) % 10 {
            0 => cur.matmul(wt),
            1 => cur.add(bt),
            2 => cur.gelu_tanh(),
            3 => cur.add(x),
            4 => cur.layer_norm(gt, bt, 1e-5),
            5 => cur.scale(0.5),
            6 => cur.softmax(-1),
            7 => cur.mul(x),
            8 => cur.tanh(),
            _ => cur.layer_norm(gt, bt, 1e-6),
        }
        .expect("records");
    }
    std::hint::black_box(cur.to_tensor().expect("runs"));
}

/// Only the fusion pass, in a loop, for profiling (`-- decision loop`):
/// `DVM_PRIM` picks the primitive window, `DVM_FAST` only the pass without
/// reasons, `DVM_SWEEP` the sweep instead of the rules (without reasons), `DVM_PREP` decomposition + pass, `DVM_EAGER` the eager window
/// in a fresh context each time (its decision and run, the medians of the
/// decision and of the whole flush; `DVM_CORES` cores, default 1;
/// `DVM_PAUSE_US` a sleep between the context's creation and its window),
/// `DVM_ROTATE` new windows in used contexts (the window's nine other
/// rotations after the first, in `DVM_CONTEXTS` contexts, default 20;
/// `DVM_CORES` as above; `DVM_RULES` decides with the rules instead of
/// the sweep; `DVM_TREND` prints each context's median, in order),
/// `DVM_SECOND` the eager window at a second row count in a fresh context
/// each time (the decision on the symbolic copy), `DVM_RECORDED` the
/// decision over the window's recorded operators instead of a pass over
/// its decomposition, `DVM_TRASH_MIB` that many MiB written between
/// passes (caches cold), `DVM_REPS` the repetitions.
fn decision_loop() {
    if std::env::var_os("DVM_ROTATE").is_some() {
        let cores: usize = std::env::var("DVM_CORES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let contexts = std::env::var("DVM_CONTEXTS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20);
        let (us, prep) =
            rotated_decisions(cores, contexts, std::env::var_os("DVM_RULES").is_none());
        if std::env::var_os("DVM_TREND").is_some() {
            for c in us.chunks(9) {
                println!("context median {:.1}", median(c.to_vec()));
            }
        }
        println!(
            "eager new window in a used context decision median {:.1} µs, then decomposition and mapping {:.1} µs",
            median(us),
            median(prep)
        );
        return;
    }
    if std::env::var_os("DVM_SECOND").is_some() {
        let reps: usize = std::env::var("DVM_REPS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(200);
        let mut us = Vec::with_capacity(reps);
        for _ in 0..reps {
            let ex = dvm_runtime::eager::Eager::new(1);
            eager_window(&eager_inputs_at(&ex, 33));
            let before = ex.stats().fuse_us;
            eager_window(&eager_inputs_at(&ex, 40));
            us.push(ex.stats().fuse_us - before);
        }
        println!(
            "eager second row count (symbolic copy) decision median {:.1} µs",
            median(us)
        );
        return;
    }
    if std::env::var_os("DVM_EAGER").is_some() {
        let reps: usize = std::env::var("DVM_REPS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(200);
        let cores: usize = std::env::var("DVM_CORES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let mut us = Vec::with_capacity(reps);
        let mut flush = Vec::with_capacity(reps);
        let pause = std::env::var("DVM_PAUSE_US")
            .ok()
            .and_then(|s| s.parse().ok())
            .map(std::time::Duration::from_micros);
        for _ in 0..reps {
            let ex = dvm_runtime::eager::Eager::new(cores);
            if let Some(p) = pause {
                std::thread::sleep(p);
            }
            eager_window(&eager_inputs(&ex));
            let st = ex.stats();
            us.push(st.fuse_us);
            flush.push(st.flush_us);
        }
        println!(
            "eager fresh-context decision median {:.1} µs, whole flush median {:.1} µs",
            median(us),
            median(flush)
        );
        return;
    }
    let w = if std::env::var_os("DVM_PRIM").is_some() {
        window30_primitive()
    } else {
        window30()
    };
    let reps: usize = std::env::var("DVM_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let (d, spans) = decompose_with_spans(&w).expect("decomposes");
    let which: &[bool] = if std::env::var_os("DVM_FAST").is_some() {
        &[false]
    } else {
        &[true, false]
    };
    let prep = std::env::var_os("DVM_PREP").is_some();
    let mut scratch = dvm_fuse::FuseScratch::default();
    for &reasons in which {
        let opts = FuseOptions {
            reasons,
            sweep: std::env::var_os("DVM_SWEEP").is_some(),
            ..FuseOptions::default()
        };
        let mut times = Vec::with_capacity(reps);
        let trash = std::env::var("DVM_TRASH_MIB")
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
            .unwrap_or(0);
        let mut junk = vec![0u8; trash << 20];
        let recorded = std::env::var_os("DVM_RECORDED").is_some();
        for r in 0..reps {
            if trash > 0 {
                junk.iter_mut().for_each(|b| *b = b.wrapping_add(r as u8));
                std::hint::black_box(&junk);
            }
            let t = Instant::now();
            if recorded {
                std::hint::black_box(FusionPlan::decide_recorded(&w, &opts, &mut scratch));
            } else if prep {
                std::hint::black_box(Prepared::with_options(&w, &opts).expect("prepares"));
            } else {
                std::hint::black_box(
                    FusionPlan::with_scratch(&d, &opts, &spans, &mut scratch).expect("fuses"),
                );
            }
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        println!(
            "{} (reasons {reasons}) median {:.1} µs",
            if prep {
                "decomposition + pass"
            } else {
                "fusion pass"
            },
            median(times)
        );
    }
}
