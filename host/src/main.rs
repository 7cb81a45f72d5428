//! The `dvm` command line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use dvm_host::demo;
use dvm_host::runtime::pool::CpuPool;
use dvm_isa::{verify_module, DeviceLimits, Module};

/// dvm: a bytecode virtual machine for dynamic-shape tensor programs.
#[derive(Parser)]
#[command(name = "dvm", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile and run a transformer layer's operators for a sweep of
    /// sequence lengths on the CPU device, checked against an f64 reference.
    Demo {
        /// Sequence lengths (default: 17 64 128 384 1000 2048 4096).
        #[arg(long, value_delimiter = ',')]
        lens: Vec<u64>,
        /// Worker cores (default: all).
        #[arg(long)]
        cores: Option<usize>,
    },
    /// Print a module as text assembly.
    Disasm {
        /// Module file (`.dvmb`).
        module: PathBuf,
    },
    /// Parse and verify a module against the default device.
    Verify {
        /// Module file (`.dvmb`).
        module: PathBuf,
    },
    /// Assemble text into a module.
    Asm {
        /// Assembly file.
        input: PathBuf,
        /// Output module.
        #[arg(short, long)]
        output: PathBuf,
    },
}

/// A user-facing failure: message and exit code (2: bad input, 1: failure).
struct Failure(String, u8);

fn read(path: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| Failure(format!("cannot read {}: {e}", path.display()), 2))
}

/// Writes `bytes` to `path` atomically: a temporary file in the same
/// directory, renamed into place, so a failure leaves nothing behind.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let fail = |e: std::io::Error| Failure(format!("cannot write {}: {e}", path.display()), 1);
    std::fs::write(&tmp, bytes).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(e)
    })?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(e)
    })
}

fn parse<'a>(path: &Path, bytes: &'a [u8]) -> Result<Module<'a>, Failure> {
    Module::parse(bytes).map_err(|e| Failure(format!("{}: {e}", path.display()), 2))
}

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Demo { lens, cores } => {
            let lens = if lens.is_empty() {
                vec![17, 64, 128, 384, 1000, 2048, 4096]
            } else {
                lens
            };
            let cores = cores
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            let pool = CpuPool::new(cores);
            println!(
                "dvm demo: per-shape kernels for a transformer layer's operators, hidden {}, {} core(s)",
                demo::HIDDEN,
                pool.cores()
            );
            let rows = demo::run(&lens, &pool).map_err(|e| Failure(e, 1))?;
            print!("{}", demo::table(&rows));
            if rows.iter().any(|r| r.max_err > r.tol) {
                return Err(Failure("some results exceed the tolerance".into(), 1));
            }
            Ok(())
        }
        Command::Disasm { module } => {
            let bytes = read(&module)?;
            let m = parse(&module, &bytes)?;
            print!("{}", dvm_isa::asm::disassemble_lossy(&m));
            Ok(())
        }
        Command::Verify { module } => {
            let bytes = read(&module)?;
            let m = parse(&module, &bytes)?;
            verify_module(&m, &DeviceLimits::DEFAULT)
                .map_err(|e| Failure(format!("{}: {e}", module.display()), 2))?;
            println!(
                "{}: {} kernel(s) verified",
                module.display(),
                m.kernel_count()
            );
            Ok(())
        }
        Command::Asm { input, output } => {
            let text = String::from_utf8(read(&input)?)
                .map_err(|_| Failure(format!("{}: not UTF-8 text", input.display()), 2))?;
            let bytes = dvm_isa::asm::assemble(&text)
                .map_err(|e| Failure(format!("{}: {e}", input.display()), 2))?;
            write_atomic(&output, &bytes)
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg, code)) => {
            eprintln!("dvm: error: {msg}");
            ExitCode::from(code)
        }
    }
}
