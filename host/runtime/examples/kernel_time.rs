//! Times the fused kernels of one memory-bound workload at one length, for
//! A/B runs of a device change without the whole fusion benchmark:
//!
//! ```text
//! cargo run --release -p dvm-runtime --example kernel_time -- softmax 32768 30
//! ```
//!
//! Arguments: workload (`softmax`, `softmax-causal`: its rows masked
//! with `-inf` as causal attention does, `layernorm`, `add+layernorm`
//! (the residual `r` is `x` itself), `row-sum`, `exp`
//! and `neg` (element-wise: in the caches, a compute rate and a copy),
//! `attention`: softmax(x·xᵀ/√H)·x, `qkt`: x·xᵀ alone, `xw`: x·w with w
//! of H × H), rows S,
//! calls, and the hidden size H (768 unless given). Prints the best and
//! the median kernel time
//! over the calls (launches only, as the fusion benchmark's "kernel ms")
//! and the rate in GB/s of the bytes the kernels move; for several
//! launches, each one's best time too. The element type of the inputs
//! is `f32`, or `f16` / `bf16` with a fifth argument (`kernel_time qkt
//! 2048 10 64 f16`).

use std::time::Duration;

use dvm_graph::{Graph, ReduceOp};
use dvm_isa::{DType, Opcode};
use dvm_runtime::{Prepared, Runtime};
use dvm_sym::{Bindings, Dim};
use dvm_tensor::Tensor;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let what = args.get(1).map_or("softmax", String::as_str);
    let s: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(32768);
    let calls: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(30);
    let h: u64 = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(768);
    let dt = match args.get(5).map_or("f32", String::as_str) {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        other => {
            eprintln!("unknown element type `{other}` (f32, f16, bf16)");
            std::process::exit(2);
        }
    };
    let mut g = Graph::new();
    let dims = [Dim::from(s as i64), Dim::from(h as i64)];
    let x = g.input("x", dt, &dims).expect("x");
    let y = match what {
        "softmax" | "softmax-causal" => g.softmax(x, -1),
        "layernorm" | "add+layernorm" => {
            let gamma = g.input("g", dt, &dims[1..]).expect("g");
            let beta = g.input("b", dt, &dims[1..]).expect("b");
            let x = if what == "add+layernorm" {
                let r = g.input("r", dt, &dims).expect("r");
                g.binary(Opcode::Add, x, r).expect("x + r")
            } else {
                x
            };
            g.layer_norm(x, gamma, beta, 1e-5)
        }
        "row-sum" => g.reduce(x, ReduceOp::Sum, &[-1], false),
        // Element-wise maps: exp (compute-bound in cache) and negation (a copy).
        "exp" => g.unary(Opcode::Exp, x),
        "neg" => g.unary(Opcode::Neg, x),
        // softmax(q·kᵀ/√H)·v with q = k = v = x.
        "attention" => {
            let s = g.matmul(x, x, false, true).expect("scores");
            let s = g
                .scalar(Opcode::MulS, s, 1.0 / (h as f64).sqrt())
                .expect("scaled");
            let p = g.softmax(s, -1).expect("softmax");
            g.matmul(p, x, false, false)
        }
        // The attention's first matmul alone: x·xᵀ (S × S, depth H).
        "qkt" => g.matmul(x, x, false, true),
        // A projection: x·w with w of H × H.
        "xw" => {
            let w = g.input("w", dt, &[dims[1].clone(), dims[1].clone()]).expect("w");
            g.matmul(x, w, false, false)
        }
        other => {
            eprintln!(
                "unknown workload `{other}` (softmax, softmax-causal, layernorm, add+layernorm, row-sum, exp, neg, attention, qkt, xw)"
            );
            std::process::exit(2);
        }
    }
    .expect("records");
    g.output("y", y).expect("output");
    let n = (s * h) as usize;
    // `softmax-causal`: row `r` keeps its first `r mod 768 + 1` columns,
    // the rest are `-inf` (a causal attention mask).
    let causal = what == "softmax-causal";
    let data: Vec<f32> = (0..n)
        .map(|i| {
            let (r, c) = (i / h as usize, i % h as usize);
            if causal && c > r % h as usize {
                f32::NEG_INFINITY
            } else {
                ((i * 7919) % 1000) as f32 / 250.0 - 2.0
            }
        })
        .collect();
    let as_dt = |shape: &[u64], v: &[f32]| {
        let v: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
        Tensor::from_f64(dt, shape, &v).expect("tensor")
    };
    let xt = as_dt(&[s, h], &data);
    let ones = as_dt(&[h], &vec![1.0; h as usize]);
    let zeros = as_dt(&[h], &vec![0.0; h as usize]);
    let w: Vec<f32> = (0..h * h)
        .map(|i| ((i * 7727) % 1000) as f32 / 25_000.0 - 0.02)
        .collect();
    let wt = as_dt(&[h, h], &w);
    let inputs: Vec<(&str, &Tensor)> = match what {
        "layernorm" => vec![("x", &xt), ("g", &ones), ("b", &zeros)],
        "add+layernorm" => vec![("x", &xt), ("r", &xt), ("g", &ones), ("b", &zeros)],
        "xw" => vec![("x", &xt), ("w", &wt)],
        _ => vec![("x", &xt)],
    };
    let rt = Runtime::new(
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        64,
    );
    let p = Prepared::new(&g).expect("prepares");
    let bindings = p
        .graph()
        .bind_tensors(&inputs, &Bindings::new())
        .expect("binds");
    let (_, kernels) = rt.plan(&p, &bindings).expect("plans");
    let bytes: u64 = kernels.iter().map(|k| k.info.bytes_moved).sum();
    // Outputs kept across the calls, as a runtime keeps its buffers (and
    // the fusion benchmark measures): fresh tensors would time the caches
    // full of their zeroing as well.
    let mut out = rt.run(&p, &inputs).expect("warm-up");
    let mut times = Vec::with_capacity(calls);
    // Per launch, the best time over the calls.
    let mut per: Vec<(String, f64)> = Vec::new();
    for _ in 0..calls {
        let mut prof: Vec<(String, Duration)> = Vec::new();
        let mut outs: Vec<(&str, &mut Tensor)> = out.iter_mut().collect();
        rt.run_into_profiled(&p, &inputs, &Bindings::new(), &mut outs, Some(&mut prof))
            .expect("runs");
        times.push(prof.iter().map(|(_, d)| d.as_secs_f64()).sum::<f64>() * 1e3);
        per.resize(prof.len(), (String::new(), f64::INFINITY));
        for ((name, best), (n, d)) in per.iter_mut().zip(&prof) {
            name.clone_from(n);
            *best = best.min(d.as_secs_f64() * 1e3);
        }
    }
    std::hint::black_box(out);
    times.sort_by(f64::total_cmp);
    let (best, median) = (times[0], times[times.len() / 2]);
    println!(
        "{what} S={s} H={h}: kernels best {best:.3} ms, median {median:.3} ms, {:.1} GB/s at best ({:.1} MiB moved)",
        bytes as f64 / (best * 1e-3) / 1e9,
        bytes as f64 / (1u64 << 20) as f64
    );
    let flops = match what {
        "qkt" => 2 * s * s * h,
        "xw" => 2 * s * h * h,
        "attention" => 4 * s * s * h,
        _ => 0,
    };
    if flops > 0 {
        println!(
            "  {:.1} GFLOP/s at best (matmul flops only)",
            flops as f64 / (best * 1e-3) / 1e9
        );
    }
    if per.len() > 1 {
        for (name, best) in &per {
            println!("  {name:<24} best {best:.3} ms");
        }
    }
}
