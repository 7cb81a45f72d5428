//! `cargo ci <task>`: the dvm CI harness.
//!
//! Every task is a list of [`Step`]s run in order by [`step::run`], which prints a
//! banner and the elapsed time per step, stops at the first failure and ends with a
//! summary. To add a step, write one small `fn(&Ctx) -> Result` next to its
//! neighbours, wrap it in a `Step` constant and put it in a task's list below.
#![forbid(unsafe_code)]

mod bench;
mod cross;
mod fuzz;
mod host;
mod qemu;
mod setup;
mod step;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use step::{Ctx, Step};

/// Result type of every step: errors carry the step's failing command.
pub type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// A named task of `cargo ci`, made of steps.
struct Task {
    name: &'static str,
    about: &'static str,
    steps: &'static [Step],
}

/// All tasks. `test` is the README's test command and what `.ci/run` executes.
const TASKS: &[Task] = &[
    Task {
        name: "test",
        about: "everything CI checks: setup, fmt, clippy, docs, host tests, aarch64 build, firmware, aarch64 unit tests, QEMU conformance and ONNX zoo, a short fuzz pass",
        steps: &[
            setup::SETUP,
            host::FMT,
            host::CLIPPY,
            host::DOC,
            host::TEST,
            cross::AARCH64,
            qemu::FIRMWARE,
            cross::UNIT_AARCH64,
            qemu::CONFORMANCE,
            fuzz::BUILD,
            fuzz::SEEDS,
            fuzz::RUN,
        ],
    },
    Task {
        name: "fuzz",
        about: "build the fuzz targets (libFuzzer, ASan) and run each (--seconds N, default 8; target names)",
        steps: &[fuzz::BUILD, fuzz::SEEDS, fuzz::RUN],
    },
    Task {
        name: "qemu",
        about: "setup, firmware, aarch64 unit tests under qemu-user, conformance suite and ONNX zoo on the QEMU device",
        steps: &[
            setup::SETUP,
            qemu::FIRMWARE,
            cross::UNIT_AARCH64,
            qemu::CONFORMANCE,
        ],
    },
    Task {
        name: "firmware",
        about: "build dvm-firmware for aarch64-unknown-none and print its sizes",
        steps: &[qemu::FIRMWARE],
    },
    Task {
        name: "setup",
        about: "install the missing Debian packages (QEMU, aarch64 gcc, Debian rustc/cargo/std sources)",
        steps: &[setup::SETUP],
    },
    Task {
        name: "aarch64",
        about: "build dvm-isa and dvm-device for aarch64-unknown-none with Debian's toolchain",
        steps: &[cross::AARCH64],
    },
    Task {
        name: "unit-aarch64",
        about: "run dvm-isa and dvm-device unit tests on aarch64-unknown-linux-gnu under qemu-user",
        steps: &[cross::UNIT_AARCH64],
    },
    Task {
        name: "bench",
        about: "side by side with ONNX Runtime, PyTorch eager and Inductor (--quick, --smoke, --zoo; bench/)",
        steps: &[bench::RUNNER, bench::VENV, bench::SELFTEST, bench::SUITE],
    },
    Task {
        name: "micro-bench",
        about: "cargo bench --workspace (extra arguments are passed on)",
        steps: &[host::BENCH],
    },
];

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(name) = args.next() else {
        usage();
        return ExitCode::FAILURE;
    };
    if matches!(name.as_str(), "help" | "-h" | "--help") {
        usage();
        return ExitCode::SUCCESS;
    }
    let Some(task) = TASKS.iter().find(|t| t.name == name) else {
        eprintln!("error: unknown task `{name}`\n");
        usage();
        return ExitCode::FAILURE;
    };
    let ctx = match Ctx::new(repo_root(), args.collect()) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    step::run(&ctx, task.steps)
}

/// The workspace root: the parent of this crate's directory.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("ci/ has a parent directory")
        .to_path_buf()
}

fn usage() {
    eprintln!("usage: cargo ci <task> [args]\n\ntasks:");
    for t in TASKS {
        eprintln!("  {:<14} {}", t.name, t.about);
    }
}
