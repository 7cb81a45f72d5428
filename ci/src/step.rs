//! Steps and the runner: banners, timing, fail-fast and the final summary.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use xshell::Shell;

use crate::Result;

/// What every step gets: a shell rooted at the workspace, and the task's extra arguments.
pub struct Ctx {
    pub sh: Shell,
    pub root: PathBuf,
    /// Arguments after the task name, passed on by tasks that take them (`bench`, `micro-bench`).
    pub args: Vec<String>,
}

impl Ctx {
    pub fn new(root: PathBuf, args: Vec<String>) -> Result<Ctx> {
        let sh = Shell::new()?;
        sh.change_dir(&root);
        Ok(Ctx { sh, root, args })
    }
}

/// One step of a task: a name for banners and errors, and the function doing it.
#[derive(Clone, Copy)]
pub struct Step {
    pub name: &'static str,
    pub run: fn(&Ctx) -> Result,
}

/// Runs `steps` in order, stopping at the first failure. Prints a banner and the
/// elapsed time for each step and a summary at the end.
pub fn run(ctx: &Ctx, steps: &[Step]) -> ExitCode {
    let start = Instant::now();
    let mut done: Vec<(&str, Duration)> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        eprintln!("\n==> [{}/{}] {}", i + 1, steps.len(), step.name);
        let t = Instant::now();
        let result = (step.run)(ctx);
        let elapsed = t.elapsed();
        match result {
            Ok(()) => {
                eprintln!("<== {} ok ({})", step.name, secs(elapsed));
                done.push((step.name, elapsed));
            }
            Err(e) => {
                eprintln!("<== {} FAILED ({})", step.name, secs(elapsed));
                summary(&done, Some((step.name, elapsed)), &steps[i + 1..], start);
                eprintln!("error: step `{}` failed: {e}", step.name);
                return ExitCode::FAILURE;
            }
        }
    }
    summary(&done, None, &[], start);
    ExitCode::SUCCESS
}

fn summary(
    done: &[(&str, Duration)],
    failed: Option<(&str, Duration)>,
    rest: &[Step],
    start: Instant,
) {
    eprintln!("\nsummary:");
    for (name, d) in done {
        eprintln!("  {name:<14} ok      {:>8}", secs(*d));
    }
    if let Some((name, d)) = failed {
        eprintln!("  {name:<14} FAILED  {:>8}", secs(d));
    }
    for s in rest {
        eprintln!("  {:<14} skipped", s.name);
    }
    let verdict = if failed.is_some() { "FAILED" } else { "ok" };
    eprintln!(
        "  {:<14} {verdict:<7} {:>8}",
        "total",
        secs(start.elapsed())
    );
}

fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}
