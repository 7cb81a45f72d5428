//! Host benchmark: compile time per operator instance (cache miss), cache
//! hit time, launch overhead, and steady-state run time of add, softmax,
//! layernorm and matmul at sequence lengths 17…4096 (hidden 768).
//!
//! `cargo bench -p dvm-runtime --bench runtime`. It starts as a user does, by
//! creating a `Runtime` (which warms the compile path), then times the
//! process's first compile. Timings are minimum and median over
//! repetitions, printed as a table; then divan measures compile time per
//! op instance at three lengths and the cache hit (`DVM_BENCH_SUMMARY_ONLY`
//! skips divan). `DVM_BENCH_CORES=n` sizes the pool (default: the
//! available parallelism), e.g. 2 under `taskset -c 0` to time a launcher
//! and a worker that share one CPU; then a table of small calls times
//! each call (median, p90) instead of the best of 5.

use std::time::Instant;

use dvm_compile::codegen::{Group, GroupKind, Target, TileOp, View};
use dvm_compile::kernel::build;
use dvm_compile::samples::groups;
use dvm_isa::{DType, Opcode};
use dvm_runtime::pool::{CpuPool, RawBuf};
use dvm_runtime::{KernelCache, Runtime};
use dvm_tensor::sample_data as data;

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

/// Involuntary context switches of this thread so far (Linux; 0 where
/// `/proc/thread-self/status` is missing, so every instance counts as
/// unpreempted there).
fn preemptions() -> u64 {
    std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("nonvoluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let cores = std::env::var("DVM_BENCH_CORES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    // What a user creates first: the runtime (its pool, its target; it
    // warms the compile path on this thread, see `dvm_host::warm`).
    let runtime = Runtime::new(cores, 64);
    let pool = runtime.pool();
    let target = *runtime.target();
    let lens = [17u64, 64, 128, 256, 512, 1024, 2048, 4096];

    // The first compile in the process, as a user sees it after creating
    // the runtime (the table below includes it among its samples): the
    // matmul, the slowest instance to compile cold.
    const FIRST: (usize, u64) = (3, 512);
    let (name, g) = groups(FIRST.1).swap_remove(FIRST.0);
    let t = Instant::now();
    let first = build(&g, name, &target).expect("builds");
    let first_us = t.elapsed().as_secs_f64() * 1e6;
    std::hint::black_box(first);
    println!(
        "first compile in the process (after Runtime::new): {name} at S={}: {first_us:.1} µs\n",
        FIRST.1
    );

    // Compile time per op instance: every (op, length) pair, cache miss.
    println!(
        "compile (group → module → verify → predecode), µs, 20 reps per instance \
         (matmul+bias+gelu also includes the first compile):"
    );
    println!(
        "{:<18} {:>8} {:>8} {:>8} {:>14}",
        "op", "min", "median", "max", "max unpreempted"
    );
    let mut all = Vec::new();
    let mut all_clean = 0f64;
    for op in 0..4 {
        let mut times = Vec::new();
        let mut name = "";
        // Max over the instances whose reps ran without this thread being
        // switched out involuntarily (on a shared machine a preemption
        // lands in some sample; it is the scheduler's time, not the
        // compiler's).
        let mut clean = (0f64, 0);
        for &s in &lens {
            let (n, g) = groups(s).swap_remove(op);
            name = n;
            let mut inst = Vec::with_capacity(21);
            if (op, s) == FIRST {
                inst.push(first_us);
            }
            let before = preemptions();
            for _ in 0..20 {
                let t = Instant::now();
                let k = build(&g, n, &target).expect("builds");
                inst.push(t.elapsed().as_secs_f64() * 1e6);
                std::hint::black_box(k);
            }
            if preemptions() == before {
                clean.0 = inst.iter().copied().fold(clean.0, f64::max);
                clean.1 += 1;
            }
            times.extend(inst);
        }
        all.extend(times.iter().copied());
        all_clean = all_clean.max(clean.0);
        let (mn, md, mx) = stats(times);
        println!(
            "{name:<18} {mn:>8.1} {md:>8.1} {mx:>8.1} {:>8.1} ({}/{})",
            clean.0,
            clean.1,
            lens.len()
        );
    }
    let (mn, md, mx) = stats(all);
    println!(
        "{:<18} {mn:>8.1} {md:>8.1} {mx:>8.1} {all_clean:>8.1}",
        "all"
    );

    // Cache hit.
    let cache = KernelCache::new(64);
    let (_, g) = groups(512).swap_remove(1);
    cache.get_or_build(&g, "softmax", &target).expect("builds");
    let reps = 100_000;
    let t = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(cache.get_or_build(&g, "softmax", &target).expect("hit"));
    }
    println!(
        "\ncache hit (softmax at S=512): {:.3} µs",
        t.elapsed().as_secs_f64() * 1e6 / reps as f64
    );

    // Launch overhead: a one-tile kernel (8 elements), all cores vs one.
    let v = View::contiguous(DType::F32, &[8]);
    let tiny = Group {
        kind: GroupKind::Elementwise { shape: vec![8] },
        inputs: vec![v.clone()],
        nodes: vec![
            (TileOp::Input(0), DType::F32),
            (TileOp::Unary(Opcode::Neg, 0), DType::F32),
        ],
        outputs: vec![(1, v)],
    };
    let k = build(&tiny, "tiny", &target).expect("builds");
    let x = [1f32; 8];
    let mut y = [0f32; 8];
    let bufs = [RawBuf::input(&x[..]), RawBuf::output(&mut y[..])];
    let mut times = Vec::new();
    for _ in 0..20_000 {
        let t = Instant::now();
        // SAFETY: both buffers are live and untouched during the launch.
        unsafe { pool.launch(&k.program, &bufs) }.expect("runs");
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (mn, md, _) = stats(times);
    println!("launch, 1-tile kernel: min {mn:.2} µs, median {md:.2} µs");
    // A kernel with a tile per core at least, to include the workers: the
    // smallest power-of-two length from 4096 · 4 per core that tiles so.
    let neg = |n: u64| {
        let v = View::contiguous(DType::F32, &[n]);
        let wide = Group {
            kind: GroupKind::Elementwise { shape: vec![n] },
            inputs: vec![v.clone()],
            nodes: vec![
                (TileOp::Input(0), DType::F32),
                (TileOp::Unary(Opcode::Neg, 0), DType::F32),
            ],
            outputs: vec![(1, v)],
        };
        build(&wide, "wide", &target).expect("builds")
    };
    let mut n = 4096 * pool.cores() as u64 * 4;
    let mut k = neg(n);
    while k.info.tiles < pool.cores() as u64 && n < 1 << 26 {
        n *= 2;
        k = neg(n);
    }
    let x = vec![1f32; n as usize];
    let mut y = vec![0f32; n as usize];
    let bufs = [RawBuf::input(&x[..]), RawBuf::output(&mut y[..])];
    let mut times = Vec::new();
    for _ in 0..5_000 {
        let t = Instant::now();
        // SAFETY: both buffers are live and untouched during the launch.
        unsafe { pool.launch(&k.program, &bufs) }.expect("runs");
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (mn, md, _) = stats(times);
    println!(
        "launch, {n}-element neg on {} cores ({} tiles): min {mn:.2} µs, median {md:.2} µs",
        pool.cores(),
        k.info.tiles
    );
    // The same launch on a one-core pool runs every tile on the caller: the
    // tiles' work without any waking. Overhead = parallel time − work / cores.
    let solo = CpuPool::new(1);
    let mut times = Vec::new();
    for _ in 0..5_000 {
        let t = Instant::now();
        // SAFETY: both buffers are live and untouched during the launch.
        unsafe { solo.launch(&k.program, &bufs) }.expect("runs");
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (smn, smd, _) = stats(times);
    let share = |t: f64| t / pool.cores() as f64;
    println!(
        "  same tiles on the caller alone: min {smn:.2} µs, median {smd:.2} µs; launch overhead \
         (parallel − work / {} cores): min {:.2} µs, median {:.2} µs",
        pool.cores(),
        mn - share(smn),
        md - share(smd)
    );

    // Steady state.
    println!("\nsteady-state run, ms (min of 5), hidden 768:");
    println!(
        "{:>6} {:>10} {:>10} {:>10} {:>12}",
        "S", "add", "softmax", "layernorm", "matmul+gelu"
    );
    for &s in &lens {
        let mut row = Vec::new();
        for (name, g) in groups(s) {
            let k = build(&g, name, &target).expect("builds");
            let ins: Vec<Vec<f32>> = g
                .inputs
                .iter()
                .map(|v| {
                    data(
                        if v.strides.contains(&0) {
                            768
                        } else {
                            v.numel() as usize
                        },
                        1,
                    )
                })
                .collect();
            let mut out = vec![0f32; (s * 768) as usize];
            let mut bufs: Vec<RawBuf> = ins.iter().map(|v| RawBuf::input(v.as_slice())).collect();
            bufs.push(RawBuf::output(out.as_mut_slice()));
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = Instant::now();
                // SAFETY: buffers are live and untouched during the launch.
                unsafe { pool.launch(&k.program, &bufs) }.expect("runs");
                best = best.min(t.elapsed().as_secs_f64() * 1e3);
            }
            row.push(best);
        }
        println!(
            "{s:>6} {:>10.3} {:>10.3} {:>10.3} {:>12.3}",
            row[0], row[1], row[2], row[3]
        );
    }
    // Small calls one after the other, each timed: what a run of small
    // kernels pays per launch (the best of 5 above hides a slow median).
    println!(
        "\nsmall calls, µs per launch over 2000 back to back (median / p90, tiles), hidden 768, {} cores:",
        pool.cores()
    );
    println!(
        "{:>6} {:>20} {:>20} {:>20}",
        "S", "add", "softmax", "layernorm"
    );
    for s in [17u64, 128] {
        let mut row = Vec::new();
        for (name, g) in groups(s).into_iter().take(3) {
            let k = build(&g, name, &target).expect("builds");
            let ins: Vec<Vec<f32>> = g
                .inputs
                .iter()
                .map(|v| {
                    data(
                        if v.strides.contains(&0) {
                            768
                        } else {
                            v.numel() as usize
                        },
                        1,
                    )
                })
                .collect();
            let mut out = vec![0f32; (s * 768) as usize];
            let mut bufs: Vec<RawBuf> = ins.iter().map(|v| RawBuf::input(v.as_slice())).collect();
            bufs.push(RawBuf::output(out.as_mut_slice()));
            let mut times = Vec::with_capacity(2000);
            for _ in 0..2000 {
                let t = Instant::now();
                // SAFETY: buffers are live and untouched during the launch.
                unsafe { pool.launch(&k.program, &bufs) }.expect("runs");
                times.push(t.elapsed().as_secs_f64() * 1e6);
            }
            times.sort_by(f64::total_cmp);
            row.push(format!(
                "{:.1} / {:.1} ({}t)",
                times[times.len() / 2],
                times[times.len() * 9 / 10],
                k.info.tiles
            ));
        }
        println!("{s:>6} {:>20} {:>20} {:>20}", row[0], row[1], row[2]);
    }
    if std::env::var_os("DVM_BENCH_SUMMARY_ONLY").is_none() {
        println!();
        divan::main();
    }
}

fn compile_target() -> Target {
    Target {
        cores: 2,
        ..Target::default()
    }
}

/// Compile (cache miss) of op `op` of `demo::groups(s)`: group → bytecode →
/// verify → predecode.
fn compile_op(bencher: divan::Bencher, op: usize, s: u64) {
    let (name, g) = groups(s).swap_remove(op);
    let target = compile_target();
    bencher.bench(|| build(&g, name, &target).expect("builds"));
}

/// Compile of the bias add at S × 768.
#[divan::bench(args = [17, 512, 4096], sample_count = 200)]
fn compile_bias_add(bencher: divan::Bencher, s: u64) {
    compile_op(bencher, 0, s);
}

/// Compile of the softmax at S × 768.
#[divan::bench(args = [17, 512, 4096], sample_count = 200)]
fn compile_softmax(bencher: divan::Bencher, s: u64) {
    compile_op(bencher, 1, s);
}

/// Compile of the layernorm at S × 768.
#[divan::bench(args = [17, 512, 4096], sample_count = 200)]
fn compile_layernorm(bencher: divan::Bencher, s: u64) {
    compile_op(bencher, 2, s);
}

/// Compile of matmul + bias + GELU at S × 768 · 768 × 768.
#[divan::bench(args = [17, 512, 4096], sample_count = 200)]
fn compile_matmul_bias_gelu(bencher: divan::Bencher, s: u64) {
    compile_op(bencher, 3, s);
}

/// A kernel-cache hit (softmax at S = 512).
#[divan::bench(sample_count = 200)]
fn cache_hit(bencher: divan::Bencher) {
    let cache = KernelCache::new(64);
    let (name, g) = groups(512).swap_remove(1);
    let target = compile_target();
    cache.get_or_build(&g, name, &target).expect("builds");
    bencher.bench(|| cache.get_or_build(&g, name, &target).expect("hit"));
}
