//! What this host's memory lets a softmax-shaped kernel reach beyond the
//! last-level cache, without dvm in the way: hand-written AVX-512 loops
//! over 32768 rows of 768 `f32`s, against a plain streaming copy of the
//! same bytes measured in the same rounds.
//!
//! ```text
//! cargo run --release -p dvm-host --example stream_probe -- [ROUNDS] [FMAS] [THREADS]
//! ```
//!
//! Kernels (each writes its output with non-temporal stores):
//! - `copy`: load, store;
//! - `map`: one pass, `FMAS` multiply-adds per vector (an `exp`'s work);
//! - `tiled`: dvm's softmax structure: per tile of 21 rows the rows'
//!   maxima first, then each row's `FMAS` multiply-adds into a scratch row
//!   with its sum, the previous row's scaled store woven in, and the next
//!   tile prefetched a share per row;
//! - `woven`: the same arithmetic with the next row's maximum folded into
//!   each row's loop and the row four ahead prefetched a line per vector.
//!
//! Prints each kernel's best rate over `ROUNDS` rounds (default 8) in GB/s
//! of bytes read and written, and as a percentage of the copy's. The
//! arithmetic stands in for the real `exp` (no NaN handling, no lane
//! order), so it bounds what the memory allows, not what dvm computes.

use std::time::Instant;

const COLS: usize = 768;
const ROWS: usize = 32768;
const TILE: usize = 21;
const AHEAD: usize = 4;

#[derive(Clone, Copy, PartialEq)]
enum Kernel {
    Copy,
    Map,
    Tiled,
    Woven,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (rounds, fmas) = (arg(1, 8), arg(2, 10));
    let threads = arg(
        3,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    )
    .max(1);
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        run(rounds, fmas, threads);
        return;
    }
    eprintln!("stream_probe needs an x86-64 host with AVX-512");
    std::process::exit(2);
}

#[cfg(target_arch = "x86_64")]
fn run(rounds: usize, fmas: usize, threads: usize) {
    // 64-byte aligned views, for the non-temporal stores.
    let aligned = |v: &[f32]| v.as_ptr().align_offset(64);
    let src_buf: Vec<f32> = (0..ROWS * COLS + 16)
        .map(|i| (i % 1000) as f32 / 250.0 - 2.0)
        .collect();
    let mut dst_buf = vec![0f32; ROWS * COLS + 16];
    let (so, d_o) = (aligned(&src_buf), aligned(&dst_buf));
    let src = &src_buf[so..so + ROWS * COLS];
    let dst = &mut dst_buf[d_o..d_o + ROWS * COLS];
    let kernels = [Kernel::Copy, Kernel::Map, Kernel::Tiled, Kernel::Woven];
    let mut best = [f64::MAX; 4];
    for _ in 0..rounds {
        for (k, b) in kernels.iter().zip(best.iter_mut()) {
            for _ in 0..2 {
                let t = Instant::now();
                std::thread::scope(|sc| {
                    let per = ROWS.div_ceil(threads) * COLS;
                    for (s, d) in src.chunks(per).zip(dst.chunks_mut(per)) {
                        // SAFETY: `run` only runs where AVX-512F was
                        // detected; `d` is 64-byte aligned (`per` is a
                        // multiple of 16 elements) and as long as `s`.
                        sc.spawn(move || unsafe { rows(*k, s, d, fmas) });
                    }
                });
                *b = b.min(t.elapsed().as_secs_f64());
            }
        }
    }
    let gbs = |s: f64| 8.0 * (ROWS * COLS) as f64 / s / 1e9;
    let copy = gbs(best[0]);
    println!(
        "{ROWS} x {COLS} f32, {threads} threads, {fmas} multiply-adds per vector, best of {rounds} rounds:"
    );
    for (k, b) in ["copy", "map", "tiled", "woven"].iter().zip(best) {
        println!(
            "  {k:<6} {:>6.1} GB/s  {:>4.0}% of the copy",
            gbs(b),
            100.0 * gbs(b) / copy
        );
    }
}

/// Runs `k` over the whole rows of `src` into `dst`.
///
/// # Safety
/// The CPU must support AVX-512F; `dst` must be 64-byte aligned and as
/// long as `src`, a whole number of rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn rows(k: Kernel, src: &[f32], dst: &mut [f32], fmas: usize) {
    use std::arch::x86_64::*;
    let n = src.len().min(dst.len()) / COLS;
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    let (c0, c1) = (_mm512_set1_ps(0.999), _mm512_set1_ps(0.001));
    // SAFETY (every load and store below): rows `< n`, columns `j + 16 <=
    // COLS`, inside `src`, `dst` and `scratch`; `dst` rows and `scratch`
    // are 64-byte aligned; a prefetch never faults.
    macro_rules! poly {
        ($v:expr) => {{
            let v = $v;
            let mut p = c1;
            for _ in 0..fmas {
                p = _mm512_fmadd_ps(p, v, c0);
            }
            p
        }};
    }
    macro_rules! at {
        ($r:expr, $j:expr) => {
            $r * COLS + $j
        };
    }
    let mut scratch = Scratch([0f32; 2 * COLS]);
    let sc = scratch.0.as_mut_ptr();
    if matches!(k, Kernel::Copy | Kernel::Map) {
        for r in 0..n {
            for j in (0..COLS).step_by(16) {
                let v = unsafe { _mm512_loadu_ps(s.add(at!(r, j))) };
                let v = if k == Kernel::Map { poly!(v) } else { v };
                unsafe { _mm512_stream_ps(d.add(at!(r, j)), v) };
            }
        }
        _mm_sfence();
        return;
    }
    let row_max = |r: usize| {
        let mut m = _mm512_set1_ps(f32::MIN);
        for j in (0..COLS).step_by(16) {
            m = _mm512_max_ps(m, unsafe { _mm512_loadu_ps(s.add(at!(r, j))) });
        }
        _mm512_reduce_max_ps(m)
    };
    let (mut prev, mut prev_f) = (usize::MAX, 0f32);
    let mut next_max = if n > 0 { row_max(0) } else { 0.0 };
    let mut maxima = [0f32; TILE];
    for r in 0..n {
        if k == Kernel::Tiled && r % TILE == 0 {
            for (i, m) in maxima.iter_mut().enumerate().take(n - r) {
                *m = row_max(r + i);
            }
        }
        let m = if k == Kernel::Tiled {
            maxima[r % TILE]
        } else {
            next_max
        };
        let (vm, vf) = (_mm512_set1_ps(m), _mm512_set1_ps(prev_f));
        let (mut sum, mut mn) = (_mm512_setzero_ps(), _mm512_set1_ps(f32::MIN));
        let next = (r + 1).min(n - 1);
        // The row prefetched a line per vector: the row `AHEAD` on, or
        // this row's share of the next tile (its row of the same index).
        let pf_row = match k {
            Kernel::Woven => r + AHEAD,
            _ => (r / TILE + 1) * TILE + r % TILE,
        };
        for j in (0..COLS).step_by(16) {
            if k == Kernel::Woven {
                mn = _mm512_max_ps(mn, unsafe { _mm512_loadu_ps(s.add(at!(next, j))) });
            }
            let p = poly!(_mm512_sub_ps(
                unsafe { _mm512_loadu_ps(s.add(at!(r, j))) },
                vm
            ));
            sum = _mm512_add_ps(sum, p);
            unsafe { _mm512_store_ps(sc.add((r % 2) * COLS + j), p) };
            if prev != usize::MAX {
                let x = unsafe { _mm512_load_ps(sc.add((prev % 2) * COLS + j)) };
                unsafe { _mm512_stream_ps(d.add(at!(prev, j)), _mm512_mul_ps(x, vf)) };
            }
            if pf_row < n {
                unsafe { _mm_prefetch::<_MM_HINT_T0>(s.add(at!(pf_row, j)).cast()) };
            }
        }
        if k == Kernel::Woven {
            next_max = _mm512_reduce_max_ps(mn);
        }
        prev = r;
        prev_f = 1.0 / _mm512_reduce_add_ps(sum);
    }
    if prev != usize::MAX {
        let vf = _mm512_set1_ps(prev_f);
        for j in (0..COLS).step_by(16) {
            let x = unsafe { _mm512_load_ps(sc.add((prev % 2) * COLS + j)) };
            unsafe { _mm512_stream_ps(d.add(at!(prev, j)), _mm512_mul_ps(x, vf)) };
        }
    }
    _mm_sfence();
}

/// Two scratch rows, 64-byte aligned.
#[repr(align(64))]
struct Scratch([f32; 2 * COLS]);
