//! Host steps with the rustup toolchain that runs this harness: fmt, clippy, tests, benches.

use xshell::cmd;

use crate::step::{Ctx, Step};
use crate::Result;

/// `cargo fmt --all -- --check`
pub const FMT: Step = Step {
    name: "fmt",
    run: fmt,
};
/// `cargo clippy --workspace --all-targets -- -D warnings`
pub const CLIPPY: Step = Step {
    name: "clippy",
    run: clippy,
};
/// `cargo test --workspace` (test profile: see the workspace `Cargo.toml`)
pub const TEST: Step = Step {
    name: "test",
    run: test,
};
/// `cargo bench --workspace [args]`
pub const BENCH: Step = Step {
    name: "bench",
    run: bench,
};

fn fmt(ctx: &Ctx) -> Result {
    cmd!(ctx.sh, "cargo fmt --all -- --check").run()?;
    Ok(())
}

fn clippy(ctx: &Ctx) -> Result {
    cmd!(
        ctx.sh,
        "cargo clippy --workspace --all-targets -- -D warnings"
    )
    .run()?;
    Ok(())
}

/// Uses the `test` profile (opt-level 1, dependencies at 2): on 2 cores it compiles
/// far faster than `--release` and still runs the proptests at a decent speed.
fn test(ctx: &Ctx) -> Result {
    cmd!(ctx.sh, "cargo test --workspace").run()?;
    Ok(())
}

/// Passes when there are no benches: each library's harness then runs zero benchmarks.
fn bench(ctx: &Ctx) -> Result {
    let args = &ctx.args;
    cmd!(ctx.sh, "cargo bench --workspace {args...}").run()?;
    Ok(())
}
