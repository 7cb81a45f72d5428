//! The simulator on the command line: `--spec`, `--trace` and
//! `--timeline` of `dvm run --device sim` and `dvm explain --sim`, and
//! `dvm calibrate`.

use std::path::{Path, PathBuf};

use dvm_runtime::device::sim::{self, calibrate, SimDevice, SimSpec};
use dvm_runtime::Runtime;

use crate::out_files::write_atomic;
use crate::say::{errln, outln};
use crate::{all_cores, Failure};

/// The simulator's flags.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct SimArgs {
    /// The simulated device: a preset (`910b`, the default; `cpu`) or a
    /// spec file (`dvm calibrate` writes one).
    #[arg(long, value_name = "PRESET|FILE")]
    pub spec: Option<String>,
    /// Write every simulated instruction as a Chrome trace (JSON; open in
    /// Perfetto or chrome://tracing).
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<PathBuf>,
    /// Write the pipes' timeline as a self-contained SVG picture.
    #[arg(long, value_name = "FILE.svg")]
    pub timeline: Option<PathBuf>,
}

impl SimArgs {
    /// Whether any simulator flag was given.
    pub fn any(&self) -> bool {
        self.spec.is_some() || self.trace.is_some() || self.timeline.is_some()
    }

    /// The simulator these flags ask for, its kernels tiled for `cores`
    /// when given (else the spec's), recording a timeline when a trace or
    /// a picture is to be written.
    ///
    /// # Errors
    /// Exit code 2 for an unknown preset, a bad spec file or more cores
    /// than the simulator models.
    pub fn open(&self, cores: Option<usize>) -> Result<SimDevice, Failure> {
        let mut spec = match &self.spec {
            Some(s) => SimSpec::resolve(s).map_err(|e| Failure(format!("--spec: {e}"), 2))?,
            None => SimSpec::default_preset(),
        };
        if let Some(c) = cores {
            let max = dvm_device::sim::MAX_SIM_CORES;
            spec.spec.cores = u32::try_from(c).ok().filter(|&c| c <= max).ok_or_else(|| {
                Failure(
                    format!("--cores {c}: the simulator models at most {max} cores"),
                    2,
                )
            })?;
        }
        let dev = SimDevice::new(spec, all_cores(), 1024)
            .map_err(|e| Failure(format!("--spec: {e}"), 2))?;
        dev.record_timeline(self.trace.is_some() || self.timeline.is_some());
        Ok(dev)
    }

    /// The files `--trace` and `--timeline` ask for, with their bytes.
    pub fn files(&self, dev: &SimDevice) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        if let Some(tl) = dev.take_timeline() {
            if let Some(p) = &self.trace {
                out.push((p.clone(), sim::timeline::chrome_trace(&tl).into_bytes()));
            }
            if let Some(p) = &self.timeline {
                out.push((p.clone(), sim::timeline::svg(&tl).into_bytes()));
            }
        }
        out
    }
}

/// Runs `dvm calibrate`: micro-kernels timed on the CPU device with
/// `cores` workers, the fitted spec written to `output`.
pub fn cmd_calibrate(output: &Path, cores: Option<usize>, repeats: usize) -> Result<(), Failure> {
    let rt = Runtime::new(cores.unwrap_or_else(all_cores), 1024);
    let cal = calibrate::calibrate(&rt, repeats)
        .map_err(|e| Failure(format!("calibration failed: {e}"), 1))?;
    outln!(
        "{:<24} {:>12} {:>12} {:>7}",
        "micro-kernel",
        "measured",
        "simulated",
        "ratio"
    )?;
    for p in &cal.points {
        outln!(
            "{:<24} {:>9.1} µs {:>9.1} µs {:>7.2}",
            p.name,
            p.measured * 1e6,
            p.simulated * 1e6,
            p.simulated / p.measured
        )?;
    }
    let m: Vec<f64> = cal.points.iter().map(|p| p.measured).collect();
    let s: Vec<f64> = cal.points.iter().map(|p| p.simulated).collect();
    if let (Some(rho), Some(ratio)) = (
        calibrate::spearman(&m, &s),
        calibrate::median_ratio(&cal.points),
    ) {
        outln!("rank correlation {rho:.3}, median simulated/measured {ratio:.2}")?;
    }
    write_atomic(output, cal.spec.to_json().as_bytes(), &[], || {
        outln!("{}: {}", output.display(), cal.spec.summary())
    })
}

/// Prints the report of the launches `dev` simulated to standard error
/// (`dvm run`) or standard output (`dvm explain`).
pub fn print_report(dev: &SimDevice, to_stdout: bool) -> Result<(), Failure> {
    let text = sim::report::text(dev.spec(), &dev.take_reports());
    if to_stdout {
        crate::say::out!("{text}")
    } else {
        errln!("{}", text.trim_end())
    }
}
