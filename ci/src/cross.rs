//! aarch64 steps, built with Debian's cargo and rustc (called by absolute path) and
//! `-Zbuild-std`, because the rustup toolchain here has no aarch64 targets.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use xshell::{cmd, Cmd};

use crate::step::{Ctx, Step};
use crate::Result;

/// Build `dvm-isa` (no default features) and `dvm-device` for `aarch64-unknown-none`.
pub const AARCH64: Step = Step {
    name: "aarch64",
    run: aarch64,
};
/// Run the `dvm-isa` and `dvm-device` unit tests on aarch64 Linux under qemu-user.
pub const UNIT_AARCH64: Step = Step {
    name: "unit-aarch64",
    run: unit_aarch64,
};

const CARGO: &str = "/usr/bin/cargo";
const RUSTC: &str = "/usr/bin/rustc";
const RUSTDOC: &str = "/usr/bin/rustdoc";

fn aarch64(ctx: &Ctx) -> Result {
    #[rustfmt::skip]
    debian_cargo(ctx, &[
        "build", "--release", "--target", "aarch64-unknown-none", "-Zbuild-std=core,alloc",
        "-p", "dvm-isa", "--no-default-features",
    ])?.run()?;
    #[rustfmt::skip]
    debian_cargo(ctx, &[
        "build", "--release", "--target", "aarch64-unknown-none", "-Zbuild-std=core,alloc",
        "-p", "dvm-device",
    ])?.run()?;
    Ok(())
}

/// Unit tests only (`--lib`): doctests and the firmware binary stay on their own steps.
/// The runner (`qemu-aarch64 …`) is set in `.cargo/config.toml`.
///
/// `--release` on purpose: it reuses the host build scripts and proc macros of the
/// `aarch64` step (the `test` profile builds them, and `syn`, at opt-level 2) and runs
/// faster under emulation than a `test` profile build. Debug assertions and overflow
/// checks stay covered by the host tests.
fn unit_aarch64(ctx: &Ctx) -> Result {
    #[rustfmt::skip]
    debian_cargo(ctx, &[
        "test", "--release", "--target", "aarch64-unknown-linux-gnu", "-Zbuild-std",
        "--lib", "-p", "dvm-isa", "-p", "dvm-device",
    ])?.run()?;
    Ok(())
}

/// `/usr/bin/cargo <args>` with a clean environment: what `cargo run`
/// and rustup put there for this harness is removed, and Debian's rustc, nightly
/// features (`RUSTC_BOOTSTRAP`) and a target dir of its own are set on this command only.
pub fn debian_cargo<'a>(ctx: &'a Ctx, args: &[&str]) -> Result<Cmd<'a>> {
    if !Path::new(CARGO).exists() || !Path::new(RUSTC).exists() {
        return Err(format!("{CARGO} or {RUSTC} is missing: run `cargo ci setup`").into());
    }
    let target_dir = target_dir(ctx);
    let mut cleared = Vec::new();
    let mut cmd = cmd!(ctx.sh, "{CARGO} {args...}");
    for (key, _) in std::env::vars_os() {
        if let Some(shown) = leaks(&key) {
            cleared.push(shown);
            cmd = cmd.env_remove(key);
        }
    }
    cleared.sort();
    cleared.dedup();
    eprintln!(
        "(env: unset {}; set RUSTC={RUSTC} RUSTDOC={RUSTDOC} RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR={})",
        cleared.join(" "),
        target_dir.display()
    );
    Ok(cmd
        .env("RUSTC", RUSTC)
        .env("RUSTDOC", RUSTDOC)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("CARGO_TARGET_DIR", target_dir))
}

/// `<target dir>/aarch64`, apart from the host build so neither invalidates the other.
pub fn target_dir(ctx: &Ctx) -> PathBuf {
    let base =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| ctx.root.join("target"), PathBuf::from);
    ctx.root.join(base).join("aarch64")
}

/// Variables that would make Debian's cargo use rustup's toolchain, flags or paths.
///
/// `cargo run` sets `CARGO` (which cargo trusts as its own path and hands to build
/// scripts), `CARGO_PKG_*`, `CARGO_MANIFEST_*` and an `LD_LIBRARY_PATH` with rustup's
/// toolchain libraries; the rustup proxy sets `RUSTUP_TOOLCHAIN*` and `RUST_RECURSION_COUNT`.
///
/// `RUSTC`, `RUSTDOC` and `CARGO_TARGET_DIR` are not listed: they are always set.
///
/// Returns how to show the variable in the log (a prefix for families), or `None`
/// when it may stay.
fn leaks(key: &OsStr) -> Option<String> {
    const EXACT: &[&str] = &[
        "CARGO",
        "CARGO_BIN_NAME",
        "CARGO_BUILD_RUSTC",
        "CARGO_BUILD_RUSTC_WRAPPER",
        "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_RUSTDOC",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_BUILD_RUSTDOCFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_CRATE_NAME",
        "CARGO_ENCODED_RUSTDOCFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_PRIMARY_PACKAGE",
        "LD_LIBRARY_PATH",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "RUSTDOCFLAGS",
        "RUSTFLAGS",
        "RUST_RECURSION_COUNT",
    ];
    const PREFIXES: &[&str] = &["CARGO_PKG_", "CARGO_MANIFEST_", "RUSTUP_TOOLCHAIN"];
    let key = key.to_str()?;
    if EXACT.contains(&key) {
        return Some(key.to_owned());
    }
    let prefix = PREFIXES.iter().find(|p| key.starts_with(*p))?;
    Some(format!("{prefix}*"))
}

#[cfg(test)]
mod tests {
    use super::leaks;

    #[test]
    fn rustup_and_cargo_run_variables_are_cleared() {
        let shown = |k: &str| leaks(k.as_ref());
        assert_eq!(shown("CARGO").as_deref(), Some("CARGO"));
        assert_eq!(shown("CARGO_PKG_NAME").as_deref(), Some("CARGO_PKG_*"));
        assert_eq!(
            shown("RUSTUP_TOOLCHAIN").as_deref(),
            Some("RUSTUP_TOOLCHAIN*")
        );
        assert_eq!(shown("RUSTFLAGS").as_deref(), Some("RUSTFLAGS"));
        assert_eq!(shown("CARGO_HOME"), None);
        assert_eq!(shown("PATH"), None);
    }
}
