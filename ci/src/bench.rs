//! The side-by-side benchmark suite (`cargo ci bench`): dvm's runner built in
//! release, a cached Python virtual environment with the peers' packages, and
//! `bench/orchestrate.py` driving them all in one run.

use std::path::{Path, PathBuf};

use xshell::cmd;

use crate::step::{Ctx, Step};
use crate::Result;

/// The packages the peers and the report import, from PyPI.
const PACKAGES: &[&str] = &["onnxruntime", "onnx", "torch", "numpy", "matplotlib"];

/// The file a complete environment holds: the package list it was made with.
const MARKER: &str = "dvm-packages";

/// `cargo build --release -p dvm-bench`
pub const RUNNER: Step = Step {
    name: "runner",
    run: runner,
};
/// The Python environment, created once and reused when complete.
pub const VENV: Step = Step {
    name: "venv",
    run: venv,
};
/// The suite's Python tests (`bench/test_*.py`).
pub const SELFTEST: Step = Step {
    name: "selftest",
    run: selftest,
};
/// `bench/orchestrate.py` with the task's arguments.
pub const SUITE: Step = Step {
    name: "suite",
    run: suite,
};

fn runner(ctx: &Ctx) -> Result {
    cmd!(ctx.sh, "cargo build --release -p dvm-bench").run()?;
    Ok(())
}

/// `DVM_PY_VENV`, else `${XDG_CACHE_HOME:-$HOME/.cache}/dvm/py-venv`.
fn venv_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("DVM_PY_VENV") {
        return Ok(PathBuf::from(dir));
    }
    let cache = match std::env::var_os("XDG_CACHE_HOME") {
        Some(c) if !c.is_empty() => PathBuf::from(c),
        _ => {
            PathBuf::from(std::env::var_os("HOME").ok_or("neither XDG_CACHE_HOME nor HOME is set")?)
                .join(".cache")
        }
    };
    Ok(cache.join("dvm").join("py-venv"))
}

fn python(dir: &Path) -> PathBuf {
    dir.join("bin").join("python")
}

fn venv(ctx: &Ctx) -> Result {
    let dir = venv_dir()?;
    let wanted = PACKAGES.join(" ");
    let marker = dir.join(MARKER);
    if python(&dir).exists() && std::fs::read_to_string(&marker).is_ok_and(|m| m.trim() == wanted) {
        eprintln!("reusing the Python environment {}", dir.display());
        return Ok(());
    }
    eprintln!("creating the Python environment {}", dir.display());
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    cmd!(ctx.sh, "python3 -m venv --clear {dir}")
        .run()
        .map_err(|e| {
            format!("{e}\n(python3 with its venv module is needed: apt-get install python3-venv)")
        })?;
    let py = python(&dir);
    cmd!(ctx.sh, "{py} -m pip install --upgrade pip").run()?;
    cmd!(ctx.sh, "{py} -m pip install {PACKAGES...}").run()?;
    std::fs::write(&marker, format!("{wanted}\n"))?;
    Ok(())
}

/// The release binary: `$CARGO_TARGET_DIR` (relative to the workspace) or `target/`.
fn runner_path(root: &Path) -> PathBuf {
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) if !t.is_empty() => root.join(t),
        _ => root.join("target"),
    };
    target.join("release").join("dvm-bench")
}

fn selftest(ctx: &Ctx) -> Result {
    let py = python(&venv_dir()?);
    let dir = ctx.root.join("bench");
    cmd!(ctx.sh, "{py} -m unittest discover -s {dir} -p test_*.py").run()?;
    Ok(())
}

fn suite(ctx: &Ctx) -> Result {
    let py = python(&venv_dir()?);
    let runner = runner_path(&ctx.root);
    let script = ctx.root.join("bench").join("orchestrate.py");
    let args = &ctx.args;
    cmd!(ctx.sh, "{py} {script} --dvm {runner} {args...}").run()?;
    Ok(())
}
