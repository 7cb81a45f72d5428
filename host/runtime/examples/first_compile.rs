//! The first compile in a fresh process, as a user sees it: optionally
//! after creating a [`Runtime`], time one `build` of an operator instance
//! and count the minor page faults taken meanwhile (Linux `/proc/self/stat`:
//! the whole process, so a runtime's workers starting up count too).
//!
//! ```text
//! cargo build --release -p dvm-runtime --example first_compile
//! for i in 1 2 3; do target/release/examples/first_compile layernorm 512 runtime; done
//! ```
//!
//! Arguments: op (`bias_add`, `softmax`, `layernorm`, `matmul+bias+gelu`),
//! S (hidden is 768), and `runtime` to create a `Runtime` first, `warm` to
//! call only [`dvm_compile::warm::warm_up`] (timed), `bare` to build straight
//! away; a fourth argument `evict` then also times compiles that follow a
//! sweep of a buffer larger than the last-level cache.

use std::time::Instant;

use dvm_compile::codegen::Target;
use dvm_compile::kernel::build;
use dvm_compile::samples::groups;
use dvm_runtime::Runtime;

/// Minor page faults of this process (every thread) so far (0 where
/// `/proc` is missing).
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; minflt is field 10.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(7))
        .and_then(|f| f.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let op = args.get(1).map_or("layernorm", String::as_str);
    let s: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(512);
    let with_runtime = args.get(3).is_some_and(|a| a == "runtime");
    let Some((name, g)) = groups(s).into_iter().find(|(n, _)| *n == op) else {
        eprintln!("unknown op `{op}`");
        std::process::exit(2);
    };
    let (runtime, target) = if with_runtime {
        let t = Instant::now();
        let rt = Runtime::new(2, 64);
        let us = t.elapsed().as_secs_f64() * 1e6;
        let target = *rt.target();
        (Some((rt, us)), target)
    } else {
        let target = Target {
            cores: 2,
            ..Target::default()
        };
        if args.get(3).is_some_and(|a| a == "warm") {
            let t = Instant::now();
            dvm_compile::warm::warm_up(&target);
            println!("warm_up: {:.0} µs", t.elapsed().as_secs_f64() * 1e6);
        }
        (None, target)
    };
    let mut times = [0f64; 3];
    let mut faults = [0u64; 3];
    for (t, f) in times.iter_mut().zip(&mut faults) {
        let f0 = minor_faults();
        let start = Instant::now();
        std::hint::black_box(build(&g, name, &target).expect("builds"));
        *t = start.elapsed().as_secs_f64() * 1e6;
        *f = minor_faults() - f0;
    }
    let created = runtime.as_ref().map_or(String::new(), |(_, us)| {
        format!(" (Runtime::new {us:.0} µs)")
    });
    println!(
        "{op} S={s}{created}: first {:.1} µs ({} faults), then {:.1}, {:.1} µs",
        times[0], faults[0], times[1], times[2]
    );
    if args.get(4).is_some_and(|a| a == "evict") {
        // Compiles right after something else swept the caches (as after a
        // large kernel's run): write a buffer larger than the L3 first.
        let mut sweep = vec![0u8; 96 << 20];
        let mut cold = Vec::new();
        for round in 0..15u8 {
            for i in (0..sweep.len()).step_by(64) {
                sweep[i] = sweep[i].wrapping_add(round);
            }
            std::hint::black_box(&sweep);
            let start = Instant::now();
            std::hint::black_box(build(&g, name, &target).expect("builds"));
            cold.push(start.elapsed().as_secs_f64() * 1e6);
        }
        cold.sort_by(f64::total_cmp);
        println!(
            "  after a 96 MiB cache sweep, 15 compiles: min {:.1}, median {:.1}, max {:.1} µs",
            cold[0],
            cold[cold.len() / 2],
            cold[cold.len() - 1]
        );
    }
}
