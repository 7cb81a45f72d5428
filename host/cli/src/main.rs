//! The `dvm` command line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use dvm_compile::codegen::CompileError;
use dvm_compile::kernel::BuildError;
use dvm_compile::lower::LowerError;
use dvm_device::predecode::PredecodeError;
use dvm_fuse::FuseOptions;
use dvm_graph::Graph;
use dvm_isa::Module;
use dvm_runtime::device;
use dvm_runtime::pool::MAX_CORES;
use dvm_runtime::{QemuError, RunError};
use dvm_sym::Bindings;

mod demo_cmd;
mod graph_cmd;
mod info_cmd;
mod link_cmd;
mod module_cmd;
mod out_files;
mod run_cmd;
mod say;
mod sim_cmd;

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
        /// Sequence lengths of the encoder sweep (default: 1,17,64,128,257,512).
        #[arg(long, value_delimiter = ',')]
        lens: Vec<u64>,
        /// Sequence lengths of the single-operator table (default:
        /// 17,64,128,384,1000,2048,4096).
        #[arg(long, value_delimiter = ',')]
        op_lens: Vec<u64>,
        /// Worker cores, 1 to 1024 (default: all).
        #[arg(long, value_parser = cores_parser())]
        cores: Option<usize>,
        /// One kernel per operator (no fusion), for comparison.
        #[arg(long)]
        no_fuse: bool,
    },
    /// Run a graph (JSON or ONNX) on input `.npy` files; write each output
    /// as `DIR/NAME.npy`.
    Run(run_cmd::RunArgs),
    /// Describe an ONNX model: inputs and outputs with symbolic shapes, op
    /// counts by type, and the nodes dvm cannot run yet.
    Info {
        /// Model file (`.onnx`).
        model: PathBuf,
    },
    /// Print the fusion groups of a graph, why neighbours were not fused,
    /// and its kernels at the given bindings (kind, tiling, bytes moved).
    Explain {
        /// Graph file (JSON or ONNX).
        graph: PathBuf,
        /// A symbol value: `S=128` (every symbol must be bound).
        #[arg(long = "bind", value_name = "SYM=VALUE")]
        binds: Vec<String>,
        /// Explain the unfused plan instead.
        #[arg(long)]
        no_fuse: bool,
        /// Cores the kernels are tiled for, 1 to 1024 (default: all; with
        /// `--sim`, the spec's cores).
        #[arg(long, value_parser = cores_parser())]
        cores: Option<usize>,
        /// Also time the kernels on the instruction-level simulator (no
        /// values) and print its report per launch.
        #[arg(long)]
        sim: bool,
        /// The simulator's flags (with `--sim`).
        #[command(flatten)]
        sim_args: sim_cmd::SimArgs,
    },
    /// Fit a simulator spec to this machine: time micro-kernels on the CPU
    /// device and write the spec that `--spec FILE` loads.
    Calibrate {
        /// The spec file to write (JSON).
        #[arg(short, long)]
        output: PathBuf,
        /// Worker cores of the CPU device measured, 1 to 1024 (default: all).
        #[arg(long, value_parser = cores_parser())]
        cores: Option<usize>,
        /// Timed calls per micro-kernel (the median counts).
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
        repeats: u64,
    },
    /// Compile a graph at the given bindings into a module of its kernels.
    Compile {
        /// Graph file (JSON or ONNX).
        graph: PathBuf,
        /// A symbol value: `S=128` (every symbol must be bound).
        #[arg(long = "bind", value_name = "SYM=VALUE")]
        binds: Vec<String>,
        /// Output module (`.dvmb`).
        #[arg(short, long)]
        output: PathBuf,
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
    #[command(flatten)]
    Link(link_cmd::LinkCommand),
}

/// `--device`: one of the registry's names, each with its one-line help.
fn device_parser() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        device::DEVICES
            .iter()
            .map(|e| clap::builder::PossibleValue::new(e.name).help(e.about)),
    )
}

/// The parser of `--cores`: 1 to [`MAX_CORES`] (each core is a worker
/// thread; the runtime would clamp a larger count anyway, so it is refused
/// here, as is 0).
fn cores_parser() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_CORES as u64)
}

/// A user-facing failure: message and exit code (2: bad input, 1: failure).
struct Failure(String, u8);

/// Reads an input file (a module, an object, assembly text), refusing one
/// larger than [`dvm_tensor::input::MAX_INPUT_BYTES`].
fn read(path: &Path) -> Result<Vec<u8>, Failure> {
    dvm_tensor::input::read_limited(path, dvm_tensor::input::MAX_INPUT_BYTES)
        .map_err(|e| Failure(format!("cannot read {}: {e}", path.display()), 2))
}

fn parse<'a>(path: &Path, bytes: &'a [u8]) -> Result<Module<'a>, Failure> {
    Module::parse(bytes).map_err(|e| Failure(format!("{}: {e}", path.display()), 2))
}

fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Loads a graph file: an ONNX model (`.onnx`, or a file starting with
/// ONNX's protobuf tag) is imported, anything else is read as dvm's JSON.
/// The one place the CLI decides a file's format.
fn load_graph(path: &Path) -> Result<Graph, Failure> {
    if is_onnx_file(path) {
        return dvm_onnx::import(path).map_err(|e| Failure(e.to_string(), 2));
    }
    Graph::from_json_file(path).map_err(|e| Failure(e.to_string(), 2))
}

/// True if `path` is to be read as an ONNX model ([`dvm_onnx::is_onnx`]).
fn is_onnx_file(path: &Path) -> bool {
    use std::io::Read;
    let mut first = [0u8; 1];
    let byte = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut first))
        .ok()
        .filter(|&n| n == 1)
        .map(|_| first[0]);
    dvm_onnx::is_onnx(path, byte)
}

/// Parses `SYM=VALUE` bindings, checking each against the graph's scope.
fn parse_binds(g: &Graph, binds: &[String]) -> Result<Bindings, Failure> {
    let mut b = Bindings::new();
    for spec in binds {
        let (name, value) = spec
            .split_once('=')
            .ok_or_else(|| Failure(format!("--bind `{spec}`: expected SYM=VALUE"), 2))?;
        let sym = g.scope().lookup(name).ok_or_else(|| {
            Failure(
                format!("--bind `{spec}`: the graph has no symbol `{name}`"),
                2,
            )
        })?;
        let v: i64 = value.parse().map_err(|e: std::num::ParseIntError| {
            let what = match e.kind() {
                std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                    "is beyond a 64-bit integer"
                }
                _ => "is not an integer",
            };
            Failure(format!("--bind `{spec}`: `{value}` {what}"), 2)
        })?;
        if let Some(first) = b.get(sym) {
            return Err(Failure(
                format!("--bind `{spec}`: symbol `{name}` is bound twice (first to {first})"),
                2,
            ));
        }
        g.scope()
            .bind(&mut b, sym, v)
            .map_err(|e| Failure(format!("--bind `{spec}`: {e}"), 2))?;
    }
    Ok(b)
}

/// A failed run, plan or explanation as a [`Failure`]: exit code 2 when the
/// graph, its inputs or bindings are at fault (a bad shape, an extent or a
/// tile that the instruction set cannot encode or the UB cannot hold, a
/// kernel with more instructions or bodies than the executor's program
/// holds, a job too large for the QEMU guest), 1 otherwise (a kernel that does not
/// verify, a failed launch, QEMU failing).
fn run_failure(e: RunError) -> Failure {
    fn build_code(e: &BuildError) -> u8 {
        match e {
            BuildError::Compile(CompileError::DoesNotFit(..) | CompileError::TooLarge(_))
            | BuildError::Limits(_)
            | BuildError::Predecode(
                PredecodeError::TooManyInstrs { .. } | PredecodeError::TooManyBodies { .. },
            ) => 2,
            _ => 1,
        }
    }
    let code = match &e {
        RunError::Graph(_) => 2,
        RunError::Lower(l) => match &**l {
            LowerError::Build { error, .. } => build_code(error),
            _ => 2,
        },
        RunError::Build { error, .. } => build_code(error),
        RunError::Sim { .. } => 2,
        RunError::Qemu(q) => match **q {
            QemuError::TooLarge(_) => 2,
            _ => 1,
        },
        _ => 1,
    };
    Failure(e.to_string(), code)
}

fn fuse_options(no_fuse: bool) -> FuseOptions {
    if no_fuse {
        FuseOptions::off()
    } else {
        FuseOptions::default()
    }
}

/// `--bind` values plus every binding they imply; an error names the first
/// symbol left unbound.
fn complete_binds(g: &Graph, binds: &[String]) -> Result<Bindings, Failure> {
    let mut complete = parse_binds(g, binds)?;
    g.scope()
        .complete_bindings(&mut complete)
        .map_err(|e| Failure(e.to_string(), 2))?;
    if let Some(sym) = g.scope().symbols().find(|&s| complete.get(s).is_none()) {
        return Err(Failure(
            format!(
                "symbol `{}` is not bound: pass --bind {}=VALUE",
                sym.name(),
                sym.name()
            ),
            2,
        ));
    }
    Ok(complete)
}

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Demo {
            lens,
            op_lens,
            cores,
            no_fuse,
        } => demo_cmd::cmd_demo(lens, op_lens, cores, no_fuse),
        Command::Run(args) => run_cmd::cmd_run(args),
        Command::Info { model } => info_cmd::cmd_info(&model),
        Command::Compile {
            graph,
            binds,
            output,
        } => graph_cmd::cmd_compile(&graph, &binds, &output),
        Command::Explain {
            graph,
            binds,
            no_fuse,
            cores,
            sim,
            sim_args,
        } => {
            if !sim && sim_args.any() {
                return Err(Failure(
                    "--spec, --trace and --timeline need --sim".into(),
                    2,
                ));
            }
            graph_cmd::cmd_explain(&graph, &binds, no_fuse, cores, sim.then_some(&sim_args))
        }
        Command::Calibrate {
            output,
            cores,
            repeats,
        } => sim_cmd::cmd_calibrate(&output, cores, repeats as usize),
        Command::Disasm { module } => module_cmd::cmd_disasm(&module),
        Command::Verify { module } => module_cmd::cmd_verify(&module),
        Command::Asm { input, output } => module_cmd::cmd_asm(&input, &output),
        Command::Link(cmd) => cmd.run(),
    }
}

fn main() -> ExitCode {
    // Output into a pipe that was closed (`dvm demo | head -1`) ends the
    // process quietly, as it ends other Unix tools, rather than as a
    // panic in `println!` (Rust's runtime ignores SIGPIPE by default).
    #[cfg(target_os = "linux")]
    // SAFETY: sets a signal's disposition to the system default, first
    // thing in `main`, before any other thread exists or any handler was
    // installed; no Rust state depends on SIGPIPE being ignored.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg, code)) => {
            say::report(&msg);
            ExitCode::from(code)
        }
    }
}
