//! Compiles one operator instance in a loop, for instruction counts under
//! callgrind (timing on a shared machine is noisy; instruction counts are
//! not):
//!
//! ```text
//! cargo build --release -p dvm-runtime --example compile_loop
//! valgrind --tool=callgrind --toggle-collect='*compile_loop::measured*' \
//!     target/release/examples/compile_loop bias_add 512 1000
//! ```
//!
//! Arguments: op (`bias_add`, `softmax`, `layernorm`, `matmul+bias+gelu`),
//! S (hidden is 768), repetitions. One warm-up compile runs outside
//! `measured`; the collected instructions divided by the repetitions are
//! the cost of one warm compile.

use dvm_compile::codegen::{Group, Target};
use dvm_compile::kernel::build;
use dvm_compile::samples::groups;

#[inline(never)]
fn measured(g: &Group, name: &str, target: &Target, reps: u64) {
    for _ in 0..reps {
        std::hint::black_box(build(g, name, target).expect("builds"));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let op = args.get(1).map_or("bias_add", String::as_str);
    let s: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(512);
    let reps: u64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let target = Target {
        cores: 2,
        ..Target::default()
    };
    let Some((name, g)) = groups(s).into_iter().find(|(n, _)| *n == op) else {
        eprintln!("unknown op `{op}`");
        std::process::exit(2);
    };
    std::hint::black_box(build(&g, name, &target).expect("builds"));
    measured(&g, name, &target, reps);
}
