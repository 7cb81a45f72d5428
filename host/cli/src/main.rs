//! The `dvm` command line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use dvm_compile::codegen::CompileError;
use dvm_compile::kernel::BuildError;
use dvm_compile::lower::LowerError;
use dvm_device::predecode::PredecodeError;
use dvm_fuse::FuseOptions;
use dvm_graph::models::EncoderConfig;
use dvm_graph::Graph;
use dvm_isa::builder::ModuleBuilder;
use dvm_isa::{DeviceLimits, Module};
use dvm_runtime::demo;
use dvm_runtime::device::{self, DeviceConfig};
use dvm_runtime::pool::MAX_CORES;
use dvm_runtime::{Prepared, QemuError, RunError, Runtime};
use dvm_sym::Bindings;
use dvm_tensor::npy;
use dvm_tensor::Tensor;

mod link_cmd;
mod out_files;

use out_files::{check_dir, write_all_atomic, write_atomic, MadeDir};

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
    /// Run a graph on input `.npy` files; write each output as `DIR/NAME.npy`.
    Run {
        /// Graph file (JSON, see docs/graph-format.md).
        graph: PathBuf,
        /// An input: `NAME=FILE.npy` (repeat for each input).
        #[arg(long = "input", value_name = "NAME=FILE")]
        inputs: Vec<String>,
        /// A symbol value: `S=128` (repeat; usually deduced from the inputs).
        #[arg(long = "bind", value_name = "SYM=VALUE")]
        binds: Vec<String>,
        /// Device to run on (the registry's names).
        #[arg(long, default_value = "cpu", value_parser = device_parser())]
        device: String,
        /// Directory for the outputs (created if missing).
        #[arg(long)]
        output_dir: PathBuf,
        /// Worker cores for the cpu device, 1 to 1024 (default: all); for the
        /// qemu device, the blocks each launch is split into.
        #[arg(long, value_parser = cores_parser())]
        cores: Option<usize>,
        /// The firmware ELF for `--device qemu` (`cargo ci firmware` builds
        /// it as target/aarch64/aarch64-unknown-none/firmware/dvm-firmware).
        #[arg(long, env = "DVM_FIRMWARE")]
        firmware: Option<PathBuf>,
        /// For `--device qemu`: save the firmware's defmt log here (decode
        /// with `defmt-print -e FIRMWARE`).
        #[arg(long)]
        firmware_log: Option<PathBuf>,
        /// One kernel per operator (no fusion), for comparison.
        #[arg(long)]
        no_fuse: bool,
    },
    /// Print the fusion groups of a graph, why neighbours were not fused,
    /// and its kernels at the given bindings (kind, tiling, bytes moved).
    Explain {
        /// Graph file (JSON).
        graph: PathBuf,
        /// A symbol value: `S=128` (every symbol must be bound).
        #[arg(long = "bind", value_name = "SYM=VALUE")]
        binds: Vec<String>,
        /// Explain the unfused plan instead.
        #[arg(long)]
        no_fuse: bool,
        /// Cores the kernels are tiled for, 1 to 1024 (default: all).
        #[arg(long, value_parser = cores_parser())]
        cores: Option<usize>,
    },
    /// Compile a graph at the given bindings into a module of its kernels.
    Compile {
        /// Graph file (JSON).
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

/// The parser of `--cores`: 1 to [`MAX_CORES`] (each core is a worker
/// thread; the runtime would clamp a larger count anyway, so it is refused
/// here, as is 0).
/// `--device`: one of the registry's names, each with its one-line help.
fn device_parser() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        device::DEVICES
            .iter()
            .map(|e| clap::builder::PossibleValue::new(e.name).help(e.about)),
    )
}

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

fn load_graph(path: &Path) -> Result<Graph, Failure> {
    Graph::from_json_file(path).map_err(|e| Failure(e.to_string(), 2))
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
        } => {
            let lens = if lens.is_empty() {
                vec![1, 17, 64, 128, 257, 512]
            } else {
                lens
            };
            let op_lens = if op_lens.is_empty() {
                vec![17, 64, 128, 384, 1000, 2048, 4096]
            } else {
                op_lens
            };
            let rt = Runtime::new(cores.unwrap_or_else(all_cores), 1024);
            let cfg = EncoderConfig::default();
            println!(
                "dvm demo 1/2: transformer encoder block (hidden {}, {} heads, ffn {}), symbolic length S, {} core(s), fusion {}",
                cfg.hidden,
                cfg.heads,
                cfg.ffn,
                rt.pool().cores(),
                if no_fuse { "off" } else { "on" }
            );
            let enc = demo::run_encoder_with(&cfg, &lens, &rt, &fuse_options(no_fuse))
                .map_err(|e| Failure(e, 1))?;
            print!("{}", demo::encoder_table(&enc));
            println!(
                "\ndvm demo 2/2: single operators at hidden {}, one kernel per shape",
                demo::HIDDEN
            );
            let rows = demo::run(&op_lens, rt.pool()).map_err(|e| Failure(e, 1))?;
            print!("{}", demo::table(&rows));
            if rows.iter().any(|r| r.max_err > r.tol)
                || enc.iter().any(|r| r.max_err > demo::ENCODER_TOL)
            {
                return Err(Failure("some results exceed the tolerance".into(), 1));
            }
            Ok(())
        }
        Command::Run {
            graph,
            inputs,
            binds,
            device,
            output_dir,
            cores,
            firmware,
            firmware_log,
            no_fuse,
        } => {
            let g = load_graph(&graph)?;
            if g.outputs().is_empty() {
                return Err(Failure(
                    format!(
                        "{}: the graph has no outputs, so there is nothing to run (list them \
                         under `outputs`)",
                        graph.display()
                    ),
                    2,
                ));
            }
            check_dir(&output_dir)
                .map_err(|Failure(msg, code)| Failure(format!("--output-dir: {msg}"), code))?;
            let config = DeviceConfig {
                cores,
                firmware,
                firmware_log,
                ..DeviceConfig::default()
            };
            let dev = device::open(&device, &config).map_err(|e| Failure(e.to_string(), 2))?;
            let bindings = parse_binds(&g, &binds)?;
            let mut tensors: Vec<(String, Tensor)> = Vec::new();
            for spec in &inputs {
                let (name, file) = spec
                    .split_once('=')
                    .filter(|(_, file)| !file.is_empty())
                    .ok_or_else(|| {
                        Failure(format!("--input `{spec}`: expected NAME=FILE.npy"), 2)
                    })?;
                let id = g
                    .find(name)
                    .filter(|id| g.inputs().contains(id))
                    .ok_or_else(|| {
                        Failure(
                            format!("--input `{name}`: the graph has no input of that name"),
                            2,
                        )
                    })?;
                let dtype = g.nodes()[id.0].dtype;
                let t = npy::read_as(Path::new(file), dtype)
                    .map_err(|e| Failure(format!("--input `{name}`: {e}"), 2))?;
                tensors.push((name.to_string(), t));
            }
            let named: Vec<(&str, &Tensor)> =
                tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
            // Input errors (missing, extra, wrong shape, out-of-range
            // bindings) are user errors caught before anything runs.
            g.bind_tensors(&named, &bindings)
                .map_err(|e| Failure(e.to_string(), 2))?;
            let prepared = Prepared::with_options(&g, &fuse_options(no_fuse))
                .map_err(|e| Failure(e.to_string(), 2))?;
            let outputs = dev
                .run_with_bindings(&prepared, &named, &bindings)
                .map_err(run_failure)?;
            let paths: Vec<PathBuf> = outputs
                .iter()
                .map(|(n, _)| output_dir.join(format!("{n}.npy")))
                .collect();
            let bytes = paths
                .iter()
                .zip(&outputs)
                .map(|(p, (_, t))| npy::to_bytes(t, p))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| Failure(e.to_string(), 1))?;
            let files: Vec<(&Path, &[u8])> = paths
                .iter()
                .zip(&bytes)
                .map(|(p, b)| (p.as_path(), b.as_slice()))
                .collect();
            let made = MadeDir::create(&output_dir)?;
            // An output may replace an input `.npy` (read whole before):
            // feeding a run's result back is a workflow, not a slip.
            write_all_atomic(&files, &[]).inspect_err(|_| made.undo())?;
            for p in &paths {
                println!("{}", p.display());
            }
            Ok(())
        }
        Command::Compile {
            graph,
            binds,
            output,
        } => {
            let g = load_graph(&graph)?;
            let complete = complete_binds(&g, &binds)?;
            let rt = Runtime::new(1, 1024);
            let prepared = Prepared::new(&g).map_err(|e| Failure(e.to_string(), 2))?;
            let (plan, kernels) = rt.plan(&prepared, &complete).map_err(run_failure)?;
            let mut builder = ModuleBuilder::new();
            for (launch, k) in plan.launches.iter().zip(&kernels) {
                // The kernel was verified when built: not parsing is a bug.
                let mut def = k
                    .kernel_def()
                    .map_err(|e| Failure(format!("internal error: {e}"), 1))?;
                def.name = launch
                    .steps
                    .iter()
                    .map(|&s| plan.steps[s].name.as_str())
                    .collect::<Vec<_>>()
                    .join("+");
                builder
                    .add_kernel(def)
                    .map_err(|e| Failure(e.to_string(), 2))?;
            }
            write_atomic(&output, &builder.finish(), &[&graph])?;
            println!("{}: {} kernel(s)", output.display(), kernels.len());
            Ok(())
        }
        Command::Explain {
            graph,
            binds,
            no_fuse,
            cores,
        } => {
            let g = load_graph(&graph)?;
            let complete = complete_binds(&g, &binds)?;
            let rt = Runtime::new(cores.unwrap_or_else(all_cores), 1024);
            let text = dvm_runtime::explain::explain(&g, &complete, &fuse_options(no_fuse), &rt)
                .map_err(run_failure)?;
            print!("{text}");
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
            // Each kernel verified once; those a multi-core runtime keeps
            // on one core are listed after, with the reason.
            let mut one_core = Vec::new();
            for i in 0..m.kernel_count() {
                let k = dvm_isa::verify_kernel(&m, i, &DeviceLimits::DEFAULT)
                    .map_err(|e| Failure(format!("{}: {e}", module.display()), 2))?;
                if let Err(why) = k.tiles_independent() {
                    one_core.push((i, why));
                }
            }
            println!(
                "{}: {} kernel(s) verified",
                module.display(),
                m.kernel_count()
            );
            let names = m.meta().ok().map(|meta| meta.kernels);
            for (i, why) in one_core {
                let name = names
                    .as_ref()
                    .and_then(|n| n.get(i))
                    .map_or(String::new(), |k| format!(" {:?}", k.name));
                println!("  kernel {i}{name}: runs on one core ({why})");
            }
            Ok(())
        }
        Command::Asm { input, output } => {
            let text = String::from_utf8(read(&input)?)
                .map_err(|_| Failure(format!("{}: not UTF-8 text", input.display()), 2))?;
            let bytes = dvm_isa::asm::assemble(&text)
                .map_err(|e| Failure(format!("{}: {e}", input.display()), 2))?;
            write_atomic(&output, &bytes, &[&input])
        }
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
            eprintln!("dvm: error: {msg}");
            ExitCode::from(code)
        }
    }
}
