//! The fuzz targets (`fuzz/`, libFuzzer): built with coverage
//! instrumentation and AddressSanitizer by the stable toolchain (the `-Z`
//! flags through `RUSTC_BOOTSTRAP=1`, the flags `cargo fuzz` passes), seeded
//! from the compiler's own modules and the repository's graphs and `.npy`
//! files, then run for a fixed time each. Files under
//! `fuzz/regressions/<target>/` (crashes found before) are replayed first.
//!
//! Arguments: `--seconds N` (per target; default 8) and target names (all
//! when none).

use std::path::{Path, PathBuf};

use xshell::cmd;

use crate::step::{Ctx, Step};
use crate::Result;

/// Every target, in the order they run.
pub const TARGETS: &[&str] = &[
    "parse", "verify", "asm", "execute", "mutate", "job", "graph", "npy",
];

/// Seconds per target when no `--seconds` is given (the test command's
/// short pass).
const DEFAULT_SECONDS: u32 = 8;

/// The instrumentation `cargo fuzz build` uses (sanitizer coverage with
/// inline 8-bit counters, the PC table and comparison tracing; `fuzzing`
/// cfg; AddressSanitizer).
const RUSTFLAGS: &str = "-Cpasses=sancov-module \
    -Cllvm-args=-sanitizer-coverage-level=4 \
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
    -Cllvm-args=-sanitizer-coverage-pc-table \
    -Cllvm-args=-sanitizer-coverage-trace-compares \
    --cfg fuzzing -Zsanitizer=address -Cdebug-assertions -Coverflow-checks";

const TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// Builds the targets.
pub const BUILD: Step = Step {
    name: "fuzz-build",
    run: build,
};
/// Writes the seed corpora.
pub const SEEDS: Step = Step {
    name: "fuzz-seeds",
    run: seeds,
};
/// Replays the regressions, then runs each target.
pub const RUN: Step = Step {
    name: "fuzz-run",
    run: run_targets,
};

fn target_dir(ctx: &Ctx) -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| ctx.root.join("target"));
    base.join("fuzz")
}

fn bin(ctx: &Ctx, name: &str) -> PathBuf {
    target_dir(ctx).join(TRIPLE).join("release").join(name)
}

fn build(ctx: &Ctx) -> Result {
    let dir = target_dir(ctx);
    let manifest = ctx.root.join("fuzz/Cargo.toml");
    cmd!(
        ctx.sh,
        "cargo build --release --manifest-path {manifest} --target {TRIPLE} --target-dir {dir} --bins"
    )
    .env("RUSTC_BOOTSTRAP", "1")
    .env("RUSTFLAGS", RUSTFLAGS)
    .run()?;
    Ok(())
}

fn corpus(ctx: &Ctx) -> PathBuf {
    target_dir(ctx).join("corpus")
}

fn seeds(ctx: &Ctx) -> Result {
    let seeds = bin(ctx, "seeds");
    let (corpus, root) = (corpus(ctx), &ctx.root);
    cmd!(ctx.sh, "{seeds} {corpus} {root}").run()?;
    Ok(())
}

/// `--seconds N` and the target names among `args`.
fn parse_args(args: &[String]) -> Result<(u32, Vec<&'static str>)> {
    let mut seconds = DEFAULT_SECONDS;
    let mut targets = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--seconds" {
            let v = it.next().ok_or("--seconds needs a value")?;
            seconds = v
                .parse()
                .map_err(|_| format!("--seconds takes a whole number, not `{v}`"))?;
        } else if let Some(&t) = TARGETS.iter().find(|&&t| t == a) {
            targets.push(t);
        } else {
            return Err(format!(
                "unknown fuzz argument `{a}` (targets: {})",
                TARGETS.join(", ")
            )
            .into());
        }
    }
    if targets.is_empty() {
        targets = TARGETS.to_vec();
    }
    Ok((seconds, targets))
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn run_targets(ctx: &Ctx) -> Result {
    let (seconds, targets) = parse_args(&ctx.args)?;
    for t in targets {
        let exe = bin(ctx, t);
        let regressions = files_in(&ctx.root.join("fuzz/regressions").join(t));
        if !regressions.is_empty() {
            cmd!(ctx.sh, "{exe} {regressions...}").run()?;
        }
        let corpus = corpus(ctx).join(t);
        std::fs::create_dir_all(&corpus)?;
        let artifacts = target_dir(ctx).join("artifacts").join(t);
        std::fs::create_dir_all(&artifacts)?;
        let prefix = format!("-artifact_prefix={}/", artifacts.display());
        let time = format!("-max_total_time={seconds}");
        cmd!(
            ctx.sh,
            "{exe} {corpus} {time} -timeout=10 -rss_limit_mb=4096 -print_funcs=0 -print_final_stats=1 {prefix}"
        )
        .run()
        .map_err(|e| {
            format!(
                "fuzz target `{t}` failed ({e}); the input is in {}; replay it with `{} FILE` \
                 and keep it under fuzz/regressions/{t}/",
                artifacts.display(),
                exe.display()
            )
        })?;
    }
    Ok(())
}
