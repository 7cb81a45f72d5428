//! The VM against plain Rust, as ratios measured in one run.
//!
//! 1. Interpretation overhead: `load a, load b, add, store` over 64 Ki-element
//!    f32 tiles through `run_block`, against a plain loop doing the same
//!    copies into the same UB scratch, the same adds and the same stores
//!    (target: at most 1.03× the loop's time).
//! 2. Handlers in cache (tiles resident in UB): add, mul, exp, tanh over
//!    4096 elements and sum-reduce along rows and along columns of a 21 × 768
//!    tile (the compiler's softmax tile at hidden 768), against the best
//!    plain loop compiled for the same vector extensions
//!    (target: at least 0.9× its throughput); exp and tanh also against libm
//!    for information.
//! 3. From DRAM: a copy kernel and an add kernel over 256 MiB buffers
//!    against the single-core `memcpy` bandwidth measured here (target: at
//!    least 80%). The add kernel's body is load-forwarded
//!    (`dvm_device::forward`); the same kernel staged through UB is shown
//!    for information.
//!
//! Timing is custom (`Instant`, `harness = false`): every sample of the VM
//! is interleaved with a sample of its baseline so that frequency and noise
//! drift hit both, and each ratio is reported as the ratio of minimum times
//! and as the median of per-pair ratios. After the summary, divan runs the
//! micro-benchmarks (dispatch cost per tile, predecode, small loads) unless
//! `DVM_BENCH_SUMMARY_ONLY` is set; `DVM_BENCH_ONLY=overhead|handlers|dram`
//! runs one group of the summary. Set `DVM_BENCH_QUICK=1` for a fast run
//! with smaller DRAM buffers, `DVM_BENCH_DRAM_TILE=<f32 elements>` to
//! change the DRAM kernels' tile size.

use std::hint::black_box;
use std::time::{Duration, Instant};

use dvm_device::ops::{self, UbOp};
use dvm_device::{math, run_block, GmBuf, KernelArgs, NoBarrier, Program, UbStorage};
use dvm_isa::builder::{BodyDef, CodeWriter, KernelDef, ModuleBuilder, ParamDef};
use dvm_isa::{
    verify_kernel, Axis, DType, DeviceLimits, GridDim, Instr, KernelKind, Module, PadMode,
    ParamAccess, Scalar, WaitMask,
};
use zerocopy::IntoBytes;

const F: DType = DType::F32;

fn main() {
    let quick = std::env::var_os("DVM_BENCH_QUICK").is_some();
    let mut rows: Vec<Row> = Vec::new();
    warm_up();
    // `DVM_BENCH_ONLY=overhead|handlers|dram` runs one group.
    let only = std::env::var("DVM_BENCH_ONLY").unwrap_or_default();
    let run = |g: &str| only.is_empty() || only == g;
    if run("overhead") {
        overhead(&mut rows, quick);
    }
    if run("handlers") {
        handlers(&mut rows, quick);
    }
    if run("dram") {
        dram(&mut rows, quick);
    }
    print_summary(&rows);
    if std::env::var_os("DVM_BENCH_SUMMARY_ONLY").is_none() {
        divan::main();
    }
}

// ---------------------------------------------------------------------------
// Timing.

/// One line of the summary.
struct Row {
    group: &'static str,
    name: String,
    /// VM time and baseline time per sample (minimum over samples).
    vm: Duration,
    base: Duration,
    /// Median over samples of the per-pair ratio `vm / base`.
    median_ratio: f64,
    /// How the ratio is read: time ratio (lower is better) or throughput /
    /// bandwidth ratio (higher is better), the target, and an optional
    /// bandwidth figure.
    kind: Kind,
    note: String,
}

#[derive(Clone, Copy)]
enum Kind {
    /// `vm / base` time, at most `target`.
    TimeAtMost(f64),
    /// `vm / base` time, for information.
    TimeInfo,
    /// `base / vm` (throughput), at least `target` — or informational.
    ThroughputAtLeast(Option<f64>),
    /// Bandwidth relative to memcpy; `bytes_vm` and `bytes_base` per sample.
    Bandwidth {
        target: f64,
        bytes_vm: f64,
        bytes_base: f64,
    },
    /// As `Bandwidth`, for information.
    BandwidthInfo { bytes_vm: f64, bytes_base: f64 },
}

/// Runs `vm` and `base` alternately, `samples` times each (after one warm-up
/// of each), and returns (min vm, min base, median of vm/base).
/// Both closures get `state` (the buffers they share).
fn paired<S: ?Sized>(
    samples: usize,
    state: &mut S,
    mut vm: impl FnMut(&mut S),
    mut base: impl FnMut(&mut S),
) -> (Duration, Duration, f64) {
    vm(state);
    base(state);
    let mut tv = Vec::with_capacity(samples);
    let mut tb = Vec::with_capacity(samples);
    for i in 0..samples {
        // Alternate which goes first, so neither always follows the other.
        let (a, b) = if i % 2 == 0 {
            let a = time(|| vm(state));
            (a, time(|| base(state)))
        } else {
            let b = time(|| base(state));
            (time(|| vm(state)), b)
        };
        tv.push(a);
        tb.push(b);
    }
    let mut ratios: Vec<f64> = tv
        .iter()
        .zip(&tb)
        .map(|(a, b)| a.as_secs_f64() / b.as_secs_f64())
        .collect();
    ratios.sort_by(|a, b| a.total_cmp(b));
    let min = |v: &[Duration]| v.iter().copied().min().unwrap_or_default();
    (min(&tv), min(&tb), ratios[ratios.len() / 2])
}

/// Spins for a while so the core is at its steady clock before the first
/// measurement.
fn warm_up() {
    let (a, b) = (data(4096, 1), data(4096, 2));
    let mut c = vec![0f32; 4096];
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(300) {
        plain_add(black_box(&mut c), black_box(&a), black_box(&b));
    }
}

fn time(f: impl FnOnce()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

fn print_summary(rows: &[Row]) {
    eprintln!();
    eprintln!("dvm-device VM vs plain Rust (min of interleaved samples; median of per-pair ratios in brackets)");
    eprintln!(
        "{:<10} {:<34} {:>11} {:>11} {:>17} {:>8} {:>5}  note",
        "group", "case", "vm", "baseline", "ratio [median]", "target", "ok"
    );
    for r in rows {
        let (vm, base) = (r.vm.as_secs_f64(), r.base.as_secs_f64());
        let (ratio, med, target, ok) = match r.kind {
            Kind::TimeAtMost(t) => {
                let x = vm / base;
                (
                    x,
                    r.median_ratio,
                    format!("<={t:.2}x"),
                    if x <= t { "yes" } else { "NO" },
                )
            }
            Kind::TimeInfo => (vm / base, r.median_ratio, "info".to_string(), "-"),
            Kind::ThroughputAtLeast(t) => {
                let x = base / vm;
                let med = 1.0 / r.median_ratio;
                match t {
                    Some(t) => (
                        x,
                        med,
                        format!(">={t:.2}x"),
                        if x >= t { "yes" } else { "NO" },
                    ),
                    None => (x, med, "info".to_string(), "-"),
                }
            }
            Kind::Bandwidth {
                target,
                bytes_vm,
                bytes_base,
            } => {
                let x = (bytes_vm / vm) / (bytes_base / base);
                let med = (bytes_vm / bytes_base) / r.median_ratio;
                (
                    x,
                    med,
                    format!(">={:.0}%", target * 100.0),
                    if x >= target { "yes" } else { "NO" },
                )
            }
            Kind::BandwidthInfo {
                bytes_vm,
                bytes_base,
            } => {
                let x = (bytes_vm / vm) / (bytes_base / base);
                let med = (bytes_vm / bytes_base) / r.median_ratio;
                (x, med, "info".to_string(), "-")
            }
        };
        eprintln!(
            "{:<10} {:<34} {:>11} {:>11} {:>8.3}x [{:.3}] {:>8} {:>5}  {}",
            r.group,
            r.name,
            fmt_dur(r.vm),
            fmt_dur(r.base),
            ratio,
            med,
            target,
            ok,
            r.note
        );
    }
    eprintln!();
}

fn fmt_dur(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.2} us", s * 1e6)
    }
}

// ---------------------------------------------------------------------------
// Building kernels.

fn gm_box(buf: u8, ub: u32, cols: u32) -> (Instr, Instr) {
    let load = Instr::Load {
        dt: F,
        pad: PadMode::Keep,
        buf,
        row_dim: GridDim::None,
        col_dim: GridDim::None,
        ub,
        pitch: cols,
        rows: 1,
        cols,
        row_total: 0,
        col_total: 0,
        padv: Scalar(0),
        base: 0,
        step0: cols as u64,
        step1: 0,
        step2: 0,
        row_stride: cols as u64,
        col_stride: 1,
    };
    let store = Instr::Store {
        dt: F,
        buf,
        row_dim: GridDim::None,
        col_dim: GridDim::None,
        ub,
        pitch: cols,
        rows: 1,
        cols,
        row_total: 0,
        col_total: 0,
        base: 0,
        step0: cols as u64,
        step1: 0,
        step2: 0,
        row_stride: cols as u64,
        col_stride: 1,
    };
    (load, store)
}

/// A one-kernel module: `tiles` tiles of `code` (plus `end`).
fn module(ub_bytes: u32, params: &[ParamAccess], tiles: u32, code: &[Instr]) -> Vec<u8> {
    let mut w = CodeWriter::new();
    for i in code {
        w.push(i, WaitMask::NONE);
    }
    w.push(&Instr::End {}, WaitMask::NONE);
    let mut mb = ModuleBuilder::new();
    mb.add_kernel(KernelDef {
        name: "bench".into(),
        kind: KernelKind::Vector,
        ub_bytes,
        params: params
            .iter()
            .enumerate()
            .map(|(i, a)| ParamDef {
                name: format!("p{i}"),
                dtype: F,
                access: *a,
                dims: vec![],
            })
            .collect(),
        bodies: vec![BodyDef {
            grid: [tiles, 1, 1],
            code: w,
        }],
    })
    .expect("unique kernel name");
    mb.finish()
}

/// `c = a + b` over `tiles` tiles of `n` elements: UB a at 0, b at 4n, c at 8n.
fn add_module(n: u32, tiles: u32) -> Vec<u8> {
    let (la, _) = gm_box(0, 0, n);
    let (lb, _) = gm_box(1, 4 * n, n);
    let (_, sc) = gm_box(2, 8 * n, n);
    let add = Instr::Add {
        dt: F,
        dst: 8 * n,
        a: 0,
        b: 4 * n,
        n,
    };
    module(
        12 * n,
        &[ParamAccess::Read, ParamAccess::Read, ParamAccess::Write],
        tiles,
        &[la, lb, add, sc],
    )
}

/// `b = a` over `tiles` tiles of `n` elements.
fn copy_module(n: u32, tiles: u32) -> Vec<u8> {
    let (la, _) = gm_box(0, 0, n);
    let (_, sb) = gm_box(1, 0, n);
    module(
        4 * n,
        &[ParamAccess::Read, ParamAccess::Write],
        tiles,
        &[la, sb],
    )
}

fn limits(ub: usize) -> DeviceLimits {
    DeviceLimits::with_ub_bytes(ub as u32)
}

/// A zeroed, 64-byte aligned UB of `N` bytes on the heap.
fn ub_box<const N: usize>() -> Box<UbStorage<N>> {
    // SAFETY: all-zero bytes are a valid `[u8; N]`.
    unsafe { Box::<UbStorage<N>>::new_zeroed().assume_init() }
}

/// `len` f32 values, touched so that pages are mapped.
fn data(len: usize, seed: u32) -> Vec<f32> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2654435761) ^ seed) as f32 * 1e-9)
        .collect()
}

/// The UB as f32 slices `[a | b | c]` of `n` elements each, from byte 0.
fn ub_f32(ub: &mut [u8], n: usize) -> (&mut [f32], &mut [f32], &mut [f32]) {
    let f: &mut [f32] = zerocopy::FromBytes::mut_from_bytes(&mut ub[..12 * n]).expect("aligned UB");
    let (a, rest) = f.split_at_mut(n);
    let (b, c) = rest.split_at_mut(n);
    (a, b, c)
}

// ---------------------------------------------------------------------------
// 1. Interpretation overhead.

fn overhead(rows: &mut Vec<Row>, quick: bool) {
    const N: usize = 64 * 1024;
    const UB: usize = 1 << 20;
    let tiles = if quick { 8 } else { 16 };
    let len = N * tiles;
    let bytes = add_module(N as u32, tiles as u32);
    let m = Module::parse(&bytes).unwrap();
    let vk = verify_kernel(&m, 0, &limits(UB)).unwrap();
    let mut prog: Program = match Program::new(&vk) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("overhead: skipped ({e})");
            return;
        }
    };
    // Interpretation overhead: the VM does the plain loop's work, staging
    // through UB (a forwarded add skips the staging: see the DRAM group).
    prog.disable_forwarding();
    let a = data(len, 1);
    let b = data(len, 2);
    let mut c = vec![0f32; len];
    let mut c2 = vec![0f32; len];
    let mut ub = ub_box::<UB>();
    let samples = if quick { 9 } else { 61 };
    // Both write the same output buffer; the loop's result is kept for the
    // check after the run.
    let mut st = (&mut c, &mut c2, &mut ub.0[..]);
    let (vm, base, med) = paired(
        samples,
        &mut st,
        |(c, _, ub)| {
            let launch = KernelArgs::new(
                &vk,
                [
                    GmBuf::from_slice(a.as_bytes()),
                    GmBuf::from_slice(b.as_bytes()),
                    GmBuf::from_mut_slice(c.as_mut_bytes()),
                ],
            )
            .unwrap();
            black_box(run_block(&prog, &launch, 0, 1, ub, &NoBarrier).unwrap());
        },
        |(c, _, ub)| {
            let (ua, ub_, uc) = ub_f32(ub, N);
            plain_add_tiles(&a, &b, c, ua, ub_, uc);
        },
    );
    check_same(&a, &b, &mut c2, N, &mut ub.0, || c.clone());
    rows.push(Row {
        group: "overhead",
        name: format!("add, {tiles} tiles x 64Ki f32 (L3)"),
        vm,
        base,
        median_ratio: med,
        kind: Kind::TimeAtMost(1.03),
        note: "run_block (incl. bind, staged through UB) vs plain copy/add/copy loop".into(),
    });

    // The executor's fixed cost per tile, measured where it dominates: the
    // same kernel over 4096 tiles of 16 elements. Scaled to the 64 Ki
    // tiles above it bounds the overhead without their noise.
    let (sn, stiles) = (16usize, 4096usize);
    let bytes = add_module(sn as u32, stiles as u32);
    let m = Module::parse(&bytes).unwrap();
    let vk = verify_kernel(&m, 0, &limits(UB)).unwrap();
    let Ok(mut sprog) = Program::<256, 16>::new(&vk) else {
        return;
    };
    sprog.disable_forwarding();
    let (sa, sb) = (data(sn * stiles, 3), data(sn * stiles, 4));
    let mut sc = vec![0f32; sn * stiles];
    let mut sc2 = vec![0f32; sn * stiles];
    // Both write the same output buffer; the loop's result is kept for the
    // check after the run.
    let mut st = (&mut sc, &mut sc2, &mut ub.0[..]);
    let (svm, sbase, smed) = paired(
        samples,
        &mut st,
        |(c, _, ub)| {
            let launch = KernelArgs::new(
                &vk,
                [
                    GmBuf::from_slice(sa.as_bytes()),
                    GmBuf::from_slice(sb.as_bytes()),
                    GmBuf::from_mut_slice(c.as_mut_bytes()),
                ],
            )
            .unwrap();
            black_box(run_block(&sprog, &launch, 0, 1, ub, &NoBarrier).unwrap());
        },
        |(c, _, ub)| {
            let (ua, ub_, uc) = ub_f32(ub, sn);
            plain_add_tiles(&sa, &sb, c, ua, ub_, uc);
        },
    );
    check_same(&sa, &sb, &mut sc2, sn, &mut ub.0, || sc.clone());
    let per_tile = (svm.as_secs_f64() - sbase.as_secs_f64()).max(0.0) / stiles as f64;
    let big_tile = base.as_secs_f64() / tiles as f64;
    rows.push(Row {
        group: "overhead",
        name: format!("add, {stiles} tiles x 16 f32 (dispatch)"),
        vm: svm,
        base: sbase,
        median_ratio: smed,
        kind: Kind::TimeInfo,
        note: format!(
            "info: {:.0} ns/tile fixed cost -> {:.4}x bound at 64Ki tiles",
            per_tile * 1e9,
            1.0 + per_tile / big_tile
        ),
    });
}

/// Checks that the VM's last output (`vm_out`) equals the plain loop's.
fn check_same(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    n: usize,
    ub: &mut [u8],
    vm_out: impl FnOnce() -> Vec<f32>,
) {
    let (ua, ub_, uc) = ub_f32(ub, n);
    plain_add_tiles(a, b, out, ua, ub_, uc);
    assert_eq!(vm_out(), out, "VM and loop agree");
}

/// The plain loop: per tile, copy a and b into the scratch, add, copy out.
#[inline(never)]
fn plain_add_tiles(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    ua: &mut [f32],
    ub: &mut [f32],
    uc: &mut [f32],
) {
    let n = ua.len();
    for ((ta, tb), tc) in a
        .chunks_exact(n)
        .zip(b.chunks_exact(n))
        .zip(c.chunks_exact_mut(n))
    {
        ua.copy_from_slice(ta);
        ub.copy_from_slice(tb);
        plain_add(uc, ua, ub);
        tc.copy_from_slice(uc);
    }
}

#[inline(always)]
fn plain_add(c: &mut [f32], a: &[f32], b: &[f32]) {
    for ((z, x), y) in c.iter_mut().zip(a).zip(b) {
        *z = x + y;
    }
}

#[inline(always)]
fn plain_mul(c: &mut [f32], a: &[f32], b: &[f32]) {
    for ((z, x), y) in c.iter_mut().zip(a).zip(b) {
        *z = x * y;
    }
}

#[inline(always)]
fn plain_map(c: &mut [f32], a: &[f32], f: impl Fn(f32) -> f32) {
    for (z, x) in c.iter_mut().zip(a) {
        *z = f(*x);
    }
}

/// Column sums of a `rows × cols` tile (fold the rows): 32 columns at a
/// time accumulated in registers down all the rows.
#[inline(always)]
fn plain_sum_rows(out: &mut [f32], x: &[f32], cols: usize) {
    const W: usize = 32;
    let rows = x.len() / cols;
    let mut c = 0;
    while c + W <= cols {
        let mut acc = [0f32; W];
        for r in 0..rows {
            let row: &[f32; W] = x[r * cols + c..r * cols + c + W].try_into().unwrap();
            for (a, v) in acc.iter_mut().zip(row) {
                *a += v;
            }
        }
        out[c..c + W].copy_from_slice(&acc);
        c += W;
    }
    for (k, o) in out.iter_mut().enumerate().skip(c) {
        *o = (0..rows).map(|r| x[r * cols + k]).sum();
    }
}

/// Row sums of a `rows × cols` tile (fold the columns): 16 independent
/// accumulators per row so the loop vectorises.
#[inline(always)]
fn plain_sum_cols(out: &mut [f32], x: &[f32], cols: usize) {
    for (o, row) in out.iter_mut().zip(x.chunks_exact(cols)) {
        let mut acc = [0f32; 16];
        let mut chunks = row.chunks_exact(16);
        for ch in &mut chunks {
            for (a, v) in acc.iter_mut().zip(ch) {
                *a += v;
            }
        }
        let mut s = 0.0;
        for a in acc {
            s += a;
        }
        for v in chunks.remainder() {
            s += v;
        }
        *o = s;
    }
}

// ---------------------------------------------------------------------------
// 2. Handlers in cache.

fn handlers(rows: &mut Vec<Row>, quick: bool) {
    // Element-wise: 16 KiB per operand, 48 KiB in all (L1/L2-resident).
    // Reductions: the compiler's softmax tile at hidden 768 (21 × 768, 63
    // KiB) in the first of three 64 KiB regions, the result in the third.
    const N: usize = 4096;
    const NR: usize = 16 * 1024;
    const UB: usize = 3 * 4 * NR;
    let mut ubs = ub_box::<UB>();
    let ub = &mut ubs.0;
    {
        let (a, b, c) = ub_f32(ub, NR);
        a.copy_from_slice(
            &data(NR, 3)
                .iter()
                .map(|x| x * 1e9 % 8.0 - 4.0)
                .collect::<Vec<_>>(),
        );
        b.copy_from_slice(
            &data(NR, 4)
                .iter()
                .map(|x| x * 1e9 % 8.0 - 4.0)
                .collect::<Vec<_>>(),
        );
        c.fill(0.0);
    }
    let n = N as u32;
    let reps = if quick { 200 } else { 1000 };
    let samples = if quick { 7 } else { 21 };
    let (rr, rc, nr) = (21u32, 768u32, NR as u32);
    type Base = fn(&mut [u8]);
    // The plain loops get the same vector extensions as the VM's handlers
    // (`ops::resolve` picks AVX2 or AVX-512 copies when the CPU has them):
    // compiled for the baseline target, with AVX2 and with AVX-512, chosen
    // the same way.
    macro_rules! base {
        (|$u:ident| $body:block) => {{
            fn plain($u: &mut [u8]) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn wide($u: &mut [u8]) $body
                fn shim(u: &mut [u8]) {
                    // SAFETY: chosen only when `Simd::detect` found AVX2.
                    unsafe { wide(u) }
                }
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,fma")]
                unsafe fn wide512($u: &mut [u8]) $body
                fn shim512(u: &mut [u8]) {
                    // SAFETY: chosen only when `Simd::detect` found AVX-512.
                    unsafe { wide512(u) }
                }
                let simd = ops::Simd::detect();
                if simd.avx512() {
                    shim512 as Base
                } else if simd.avx2() {
                    shim as Base
                } else {
                    plain as Base
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            {
                plain as Base
            }
        }};
    }
    let cases: Vec<(&str, Instr, Base, Option<f64>)> = vec![
        (
            "add",
            Instr::Add {
                dt: F,
                dst: 8 * n,
                a: 0,
                b: 4 * n,
                n,
            },
            base!(|u| {
                let (a, b, c) = ub_f32(u, N);
                plain_add(c, a, b)
            }),
            Some(0.9),
        ),
        (
            "mul",
            Instr::Mul {
                dt: F,
                dst: 8 * n,
                a: 0,
                b: 4 * n,
                n,
            },
            base!(|u| {
                let (a, b, c) = ub_f32(u, N);
                plain_mul(c, a, b)
            }),
            Some(0.9),
        ),
        (
            "exp (vs math::exp loop)",
            Instr::Exp {
                dt: F,
                dst: 8 * n,
                src: 0,
                n,
            },
            base!(|u| {
                let (a, _, c) = ub_f32(u, N);
                plain_map(c, a, math::exp)
            }),
            Some(0.9),
        ),
        (
            "exp (vs libm::expf, info)",
            Instr::Exp {
                dt: F,
                dst: 8 * n,
                src: 0,
                n,
            },
            base!(|u| {
                let (a, _, c) = ub_f32(u, N);
                plain_map(c, a, libm::expf)
            }),
            None,
        ),
        (
            "tanh (vs math::tanh loop)",
            Instr::Tanh {
                dt: F,
                dst: 8 * n,
                src: 0,
                n,
            },
            base!(|u| {
                let (a, _, c) = ub_f32(u, N);
                plain_map(c, a, math::tanh)
            }),
            Some(0.9),
        ),
        (
            "tanh (vs libm::tanhf, info)",
            Instr::Tanh {
                dt: F,
                dst: 8 * n,
                src: 0,
                n,
            },
            base!(|u| {
                let (a, _, c) = ub_f32(u, N);
                plain_map(c, a, libm::tanhf)
            }),
            None,
        ),
        (
            "rsum rows (21x768 -> 1x768)",
            Instr::ReduceSum {
                dt: F,
                axis: Axis::Rows,
                dst: 8 * nr,
                src: 0,
                rows: rr,
                cols: rc,
            },
            base!(|u| {
                let (a, _, c) = ub_f32(u, NR);
                plain_sum_rows(&mut c[..768], &a[..21 * 768], 768)
            }),
            Some(0.9),
        ),
        (
            "rsum cols (21x768 -> 21x1)",
            Instr::ReduceSum {
                dt: F,
                axis: Axis::Cols,
                dst: 8 * nr,
                src: 0,
                rows: rr,
                cols: rc,
            },
            base!(|u| {
                let (a, _, c) = ub_f32(u, NR);
                plain_sum_cols(&mut c[..21], &a[..21 * 768], 768)
            }),
            Some(0.9),
        ),
    ];
    for (name, instr, base, target) in cases {
        let Some(op) = ops::resolve(&instr) else {
            eprintln!("handlers: `{name}` skipped (no handler yet)");
            continue;
        };
        let (vm, bt, med) = paired(
            samples,
            &mut ub[..],
            |ub| run_op(&op, ub, reps),
            |ub| {
                for _ in 0..reps {
                    base(black_box(&mut *ub));
                }
            },
        );
        let per = |d: Duration| d / reps;
        let elems = match instr {
            Instr::ReduceSum { rows, cols, .. } => rows * cols,
            _ => n,
        } as f64;
        rows.push(Row {
            group: "in-cache",
            name: name.to_string(),
            vm: per(vm),
            base: per(bt),
            median_ratio: med,
            kind: Kind::ThroughputAtLeast(target),
            note: format!(
                "{:.2} Gelem/s (both {})",
                elems / per(vm).as_secs_f64() / 1e9,
                ops::Simd::detect().name()
            ),
        });
    }
}

#[inline(never)]
fn run_op(op: &UbOp, ub: &mut [u8], reps: u32) {
    for _ in 0..reps {
        op.run(black_box(&mut *ub));
    }
}

// ---------------------------------------------------------------------------
// 3. From DRAM.

fn dram(rows: &mut Vec<Row>, quick: bool) {
    // Elements per tile (64 KiB of f32 by default); `DVM_BENCH_DRAM_TILE`
    // overrides it.
    let tile: usize = std::env::var("DVM_BENCH_DRAM_TILE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16 * 1024)
        .clamp(64, 24 * 1024);
    const UB: usize = 192 * 1024;
    let mib = if quick { 64 } else { 256 };
    let len = mib * (1 << 20) / 4;
    let tiles = (len / tile) as u32;
    let samples = if quick { 5 } else { 9 };
    let a = data(len, 5);
    let b = data(len, 6);
    let mut c = vec![0f32; len];
    let mut ub = ub_box::<UB>();

    // Copy kernel.
    let bytes = copy_module(tile as u32, tiles);
    let m = Module::parse(&bytes).unwrap();
    let vk = verify_kernel(&m, 0, &limits(UB)).unwrap();
    let prog: Program = Program::new(&vk).unwrap();
    let mut st = (&mut c[..], &mut ub.0[..]);
    let (vm, base, med) = paired(
        samples,
        &mut st,
        |(c, ub)| {
            let launch = KernelArgs::new(
                &vk,
                [
                    GmBuf::from_slice(a.as_bytes()),
                    GmBuf::from_mut_slice(c.as_mut_bytes()),
                ],
            )
            .unwrap();
            black_box(run_block(&prog, &launch, 0, 1, ub, &NoBarrier).unwrap());
        },
        |(c, _)| memcpy(c, &a),
    );
    let bytes_moved = 2.0 * (len * 4) as f64;
    rows.push(Row {
        group: "dram",
        name: format!("copy kernel, {mib} MiB"),
        vm,
        base,
        median_ratio: med,
        kind: Kind::Bandwidth {
            target: 0.8,
            bytes_vm: bytes_moved,
            bytes_base: bytes_moved,
        },
        note: format!(
            "vm {:.1} GB/s, memcpy {:.1} GB/s (read+write)",
            bytes_moved / vm.as_secs_f64() / 1e9,
            bytes_moved / base.as_secs_f64() / 1e9
        ),
    });

    // For information: the same staging written as plain Rust (copy into a
    // scratch tile, copy out), i.e. what the VM does, without the VM.
    let (vm_t, base_t, med_t) = paired(
        samples,
        &mut st,
        |(c, ub)| {
            let (u, _, _) = ub_f32(ub, tile);
            for (d, s) in c.chunks_exact_mut(tile).zip(a.chunks_exact(tile)) {
                u.copy_from_slice(s);
                d.copy_from_slice(black_box(&*u));
            }
        },
        |(c, _)| memcpy(c, &a),
    );
    rows.push(Row {
        group: "dram",
        name: format!("plain staged copy loop, {mib} MiB"),
        vm: vm_t,
        base: base_t,
        median_ratio: med_t,
        kind: Kind::BandwidthInfo {
            bytes_vm: bytes_moved,
            bytes_base: bytes_moved,
        },
        note: "info: plain Rust, same tiles through a scratch, no VM".into(),
    });

    // Add kernel: reads two buffers, writes one.
    let bytes = add_module(tile as u32 / 2, tiles * 2);
    let m = Module::parse(&bytes).unwrap();
    let vk = verify_kernel(&m, 0, &limits(UB)).unwrap();
    let Ok(prog) = Program::<256, 16>::new(&vk) else {
        eprintln!("dram: add kernel skipped (no add handler yet)");
        return;
    };
    let run_add = |prog: &Program<256, 16>, c: &mut [f32], ub: &mut [u8]| {
        let launch = KernelArgs::new(
            &vk,
            [
                GmBuf::from_slice(a.as_bytes()),
                GmBuf::from_slice(b.as_bytes()),
                GmBuf::from_mut_slice(c.as_mut_bytes()),
            ],
        )
        .unwrap();
        black_box(run_block(prog, &launch, 0, 1, ub, &NoBarrier).unwrap());
    };
    let (vm, base, med) = paired(
        samples,
        &mut st,
        |(c, ub)| run_add(&prog, c, ub),
        |(c, _)| memcpy(c, &a),
    );
    let moved = 3.0 * (len * 4) as f64;
    rows.push(Row {
        group: "dram",
        name: format!("add kernel, 3 x {mib} MiB"),
        vm,
        base,
        median_ratio: med,
        kind: Kind::Bandwidth {
            target: 0.8,
            bytes_vm: moved,
            bytes_base: bytes_moved,
        },
        note: format!(
            "vm {:.1} GB/s (2 reads + 1 write), memcpy {:.1} GB/s",
            moved / vm.as_secs_f64() / 1e9,
            bytes_moved / base.as_secs_f64() / 1e9
        ),
    });

    // For information: the same add kernel staged through UB.
    let mut staged = prog.clone();
    staged.disable_forwarding();
    let (vm_s, base_s, med_s) = paired(
        samples,
        &mut st,
        |(c, ub)| run_add(&staged, c, ub),
        |(c, _)| memcpy(c, &a),
    );
    rows.push(Row {
        group: "dram",
        name: format!("add kernel staged, 3 x {mib} MiB"),
        vm: vm_s,
        base: base_s,
        median_ratio: med_s,
        kind: Kind::BandwidthInfo {
            bytes_vm: moved,
            bytes_base: bytes_moved,
        },
        note: "info: the same kernel, forwarding off (loads and store through UB)".into(),
    });

    // For information: the same staged add as plain Rust.
    let half = tile / 2;
    let (vm_t, base_t, med_t) = paired(
        samples,
        &mut st,
        |(c, ub)| {
            let (ua, ub_, uc) = ub_f32(ub, half);
            plain_add_tiles(&a, &b, c, ua, ub_, uc);
        },
        |(c, _)| memcpy(c, &a),
    );
    rows.push(Row {
        group: "dram",
        name: format!("plain staged add loop, 3 x {mib} MiB"),
        vm: vm_t,
        base: base_t,
        median_ratio: med_t,
        kind: Kind::BandwidthInfo {
            bytes_vm: moved,
            bytes_base: bytes_moved,
        },
        note: "info: plain Rust, same tiles through a scratch, no VM".into(),
    });
}

#[inline(never)]
fn memcpy(dst: &mut [f32], src: &[f32]) {
    dst.copy_from_slice(black_box(src));
}

// ---------------------------------------------------------------------------
// Divan micro-benchmarks.

/// Per-tile dispatch: 4096 tiles of a 16-element `load, add, store`, so the
/// executor's fixed costs dominate.
#[divan::bench(sample_count = 50)]
fn dispatch_small_tiles(bencher: divan::Bencher) {
    let n = 16u32;
    let tiles = 4096u32;
    let bytes = add_module(n, tiles);
    let m = Module::parse(&bytes).unwrap();
    let vk = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
    let Ok(prog) = Program::<256, 16>::new(&vk) else {
        return;
    };
    let len = (n * tiles) as usize;
    let (a, b) = (data(len, 7), data(len, 8));
    let mut c = vec![0f32; len];
    let mut ub = ub_box::<{ 192 * 1024 }>();
    bencher
        .counter(divan::counter::ItemsCount::new(tiles))
        .bench_local(|| {
            let launch = KernelArgs::new(
                &vk,
                [
                    GmBuf::from_slice(a.as_bytes()),
                    GmBuf::from_slice(b.as_bytes()),
                    GmBuf::from_mut_slice(c.as_mut_bytes()),
                ],
            )
            .unwrap();
            run_block(&prog, &launch, 0, 1, &mut ub.0, &NoBarrier).unwrap()
        });
}

/// Parse + verify + predecode of a 4-instruction kernel.
#[divan::bench(sample_count = 50)]
fn parse_verify_predecode(bencher: divan::Bencher) {
    let bytes = add_module(1024, 64);
    bencher.bench(|| {
        let m = Module::parse(black_box(&bytes)).unwrap();
        let vk = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
        Program::<256, 16>::new(&vk)
            .map(|p| p.instr_count())
            .unwrap_or(0)
    });
}

/// One 64 × 64 f32 tile transposed on load (gather with column stride).
#[divan::bench(sample_count = 50)]
fn transposed_load_64x64(bencher: divan::Bencher) {
    let instr = Instr::Load {
        dt: F,
        pad: PadMode::Keep,
        buf: 0,
        row_dim: GridDim::None,
        col_dim: GridDim::None,
        ub: 0,
        pitch: 64,
        rows: 64,
        cols: 64,
        row_total: 0,
        col_total: 0,
        padv: Scalar(0),
        base: 0,
        step0: 0,
        step1: 0,
        step2: 0,
        row_stride: 1,
        col_stride: 64,
    };
    let pattern = instr.gm().unwrap().pattern;
    let a = data(64 * 64, 9);
    let mut ub = ub_box::<{ 64 * 1024 }>();
    bencher
        .counter(divan::counter::BytesCount::new(64 * 64 * 4usize))
        .bench_local(|| {
            dvm_device::gm::load_tile(
                &pattern,
                None,
                [0; 3],
                &GmBuf::from_slice(a.as_bytes()),
                &mut ub.0,
            )
        });
}
