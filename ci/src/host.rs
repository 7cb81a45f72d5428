//! Host steps with the rustup toolchain that runs this harness: fmt, clippy, docs, tests, benches.

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
/// `cargo doc --workspace --no-deps` with warnings as errors (broken
/// intra-doc links)
pub const DOC: Step = Step {
    name: "doc",
    run: doc,
};
/// `cargo test --workspace --profile ci`
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

fn doc(ctx: &Ctx) -> Result {
    cmd!(ctx.sh, "cargo doc --workspace --no-deps")
        .env("RUSTDOCFLAGS", "-D warnings")
        .run()?;
    Ok(())
}

/// Uses the `ci` profile (`.cargo/config.toml`: release with debug assertions and
/// overflow checks): from a clean clone it builds faster than the `test` profile
/// (lighter debuginfo) and runs the tests (proptests, float sweeps) at least as fast.
fn test(ctx: &Ctx) -> Result {
    cmd!(ctx.sh, "cargo test --workspace --profile ci").run()?;
    Ok(())
}

/// Passes when there are no benches: each library's harness then runs zero benchmarks.
fn bench(ctx: &Ctx) -> Result {
    let args = &ctx.args;
    cmd!(ctx.sh, "cargo bench --workspace {args...}").run()?;
    Ok(())
}
