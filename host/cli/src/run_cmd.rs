//! `dvm run`: a graph on input `.npy` files, each output written as
//! `DIR/NAME.npy`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dvm_graph::Graph;
use dvm_runtime::device::{self, DeviceConfig};
use dvm_runtime::Prepared;
use dvm_tensor::npy;
use dvm_tensor::Tensor;

use crate::out_files::{check_dir, write_all_atomic, MadeDir};
use crate::say::{errln, outln};
use crate::sim_cmd::{print_report, SimArgs};
use crate::{
    cores_parser, device_parser, fuse_options, load_graph, parse_binds, run_failure, Failure,
};

// The arguments of `dvm run` (its help is the `Run` variant's).
#[derive(clap::Args)]
pub struct RunArgs {
    /// Graph file: JSON (docs/graph-format.md) or an ONNX model
    /// (docs/onnx.md).
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
    /// Print to stderr the time to load and prepare the graph, and of two
    /// calls at the inputs' shapes: the first compiles its kernels and
    /// runs, the second runs with them cached; their difference is the
    /// compile time.
    #[arg(long)]
    timings: bool,
    /// The simulator's flags (`--device sim` only).
    #[command(flatten)]
    sim: SimArgs,
}

/// Runs `dvm run`: every argument and input checked before anything runs,
/// the outputs written only when all of them were computed.
pub fn cmd_run(args: RunArgs) -> Result<(), Failure> {
    let RunArgs {
        graph,
        inputs,
        binds,
        device,
        output_dir,
        cores,
        firmware,
        firmware_log,
        no_fuse,
        timings,
        sim,
    } = args;
    let t_load = Instant::now();
    let g = load_graph(&graph)?;
    let load = t_load.elapsed();
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
    if device != "sim" && sim.any() {
        return Err(Failure(
            "--spec, --trace and --timeline need --device sim".into(),
            2,
        ));
    }
    let simulator = if device == "sim" {
        Some(sim.open(cores)?)
    } else {
        None
    };
    let opened = match simulator {
        Some(_) => None,
        None => Some(device::open(&device, &config).map_err(|e| Failure(e.to_string(), 2))?),
    };
    let dev: &dyn device::Device = match (&simulator, &opened) {
        (Some(s), _) => s,
        (None, Some(d)) => d.as_ref(),
        (None, None) => return Err(Failure("internal error: no device".into(), 1)),
    };
    let bindings = parse_binds(&g, &binds)?;
    let tensors = read_inputs(&g, &inputs)?;
    let named: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    // Input errors (missing, extra, wrong shape, out-of-range
    // bindings) are user errors caught before anything runs.
    g.bind_tensors(&named, &bindings)
        .map_err(|e| Failure(e.to_string(), 2))?;
    let t_prepare = Instant::now();
    let prepared = Prepared::with_options(&g, &fuse_options(no_fuse))
        .map_err(|e| Failure(e.to_string(), 2))?;
    let prepare = t_prepare.elapsed();
    let t_first = Instant::now();
    let outputs = dev
        .run_with_bindings(&prepared, &named, &bindings)
        .map_err(run_failure)?;
    let first = t_first.elapsed();
    if timings {
        let t_second = Instant::now();
        dev.run_with_bindings(&prepared, &named, &bindings)
            .map_err(run_failure)?;
        let second = t_second.elapsed();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        errln!("timings: load {:.3} ms", ms(load))?;
        errln!("timings: prepare (decompose, fuse) {:.3} ms", ms(prepare))?;
        errln!("timings: call 1 (compile and run) {:.3} ms", ms(first))?;
        errln!("timings: call 2 (run, kernels cached) {:.3} ms", ms(second))?;
        errln!(
            "timings: compile {:.3} ms, run {:.3} ms",
            ms(first.saturating_sub(second)),
            ms(second)
        )?;
    }
    let mut extra = Vec::new();
    if let Some(s) = &simulator {
        print_report(s, false)?;
        extra = sim.files(s);
    }
    write_outputs(&output_dir, outputs.as_slice(), &extra)
}

/// The `--input NAME=FILE.npy` tensors, each read as its graph input's
/// dtype.
fn read_inputs(g: &Graph, inputs: &[String]) -> Result<Vec<(String, Tensor)>, Failure> {
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    for spec in inputs {
        let (name, file) = spec
            .split_once('=')
            .filter(|(_, file)| !file.is_empty())
            .ok_or_else(|| Failure(format!("--input `{spec}`: expected NAME=FILE.npy"), 2))?;
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
    Ok(tensors)
}

/// Writes each output as `output_dir/NAME.npy`, and the `extra` files
/// (the simulator's trace and timeline), all or none (the
/// directories made for them removed again on failure), and prints the
/// paths.
fn write_outputs(
    output_dir: &Path,
    outputs: &[(String, Tensor)],
    extra: &[(PathBuf, Vec<u8>)],
) -> Result<(), Failure> {
    let paths: Vec<PathBuf> = outputs
        .iter()
        .map(|(n, _)| output_dir.join(format!("{n}.npy")))
        .collect();
    let bytes = paths
        .iter()
        .zip(outputs)
        .map(|(p, (_, t))| npy::to_bytes(t, p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Failure(e.to_string(), 1))?;
    let files: Vec<(&Path, &[u8])> = paths
        .iter()
        .zip(&bytes)
        .map(|(p, b)| (p.as_path(), b.as_slice()))
        .chain(extra.iter().map(|(p, b)| (p.as_path(), b.as_slice())))
        .collect();
    let made = MadeDir::create(output_dir)?;
    // An output may replace an input `.npy` (read whole before):
    // feeding a run's result back is a workflow, not a slip.
    write_all_atomic(&files, &[], || {
        paths
            .iter()
            .chain(extra.iter().map(|e| &e.0))
            .try_for_each(|p| outln!("{}", p.display()))
    })
    .inspect_err(|_| made.undo())
}
