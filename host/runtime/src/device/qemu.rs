//! The QEMU device: the same kernels, run by the aarch64 firmware under
//! `qemu-system-aarch64 -M virt`, to prove the device code gives the same
//! bits on the AI-CPU target as on the host.
//!
//! A run packs a [`dvm_isa::job`] (every step's module, every buffer with its
//! initial bytes, one launch per step), has QEMU's loader device place it
//! at the firmware's `_dvm_job_base`, boots the firmware on as many QEMU
//! CPUs (`-smp`) as the firmware has cores (its `_dvm_cores` symbol), and
//! reads back the report the firmware writes through semihosting. Slow (a
//! boot per run), and that is fine: it exists to prove equivalence.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dvm_isa::job::{parse_report, JobBuilder, Report, ReportError, Status};
use object::{Object as _, ObjectSymbol as _};
use tempfile::{Builder, TempDir};

use dvm_sym::Bindings;
use dvm_tensor::Tensor;

use super::cpu::initial_bytes;
use super::{Capabilities, Device, DeviceConfig, DeviceEntry, DeviceError};
use crate::{Compiler, Outputs, Prepared, RunError};

/// Where RAM starts on QEMU's `virt` board.
const VIRT_RAM_BASE: u64 = 0x4000_0000;
/// The firmware maps RAM up to here (`mmu.rs`): at most 1 GiB of guest RAM.
const VIRT_RAM_LIMIT: u64 = 0x8000_0000;
/// Most cores a firmware may have (`dvm_linker::MAX_CORES`).
const MAX_CORES: u32 = dvm_linker::MAX_CORES;
/// The report's file name in QEMU's working directory (the firmware's
/// `REPORT_FILE`).
const REPORT_FILE: &str = "dvm-report.bin";

/// Why the QEMU device failed.
#[derive(Debug, thiserror::Error)]
pub enum QemuError {
    /// The firmware ELF is missing or unreadable.
    #[error("firmware `{path}`: {error} (build it with `cargo ci firmware`)")]
    Firmware {
        /// The path given.
        path: PathBuf,
        /// What went wrong.
        error: String,
    },
    /// QEMU could not be started.
    #[error(
        "cannot start `{program}`: {error} (install qemu-system-arm, or run `cargo ci setup`)"
    )]
    Spawn {
        /// The program.
        program: String,
        /// The failure.
        error: std::io::Error,
    },
    /// A temporary file could not be written or read.
    #[error("QEMU device I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The job does not fit the guest's mapped RAM.
    #[error("job of {0} bytes does not fit the guest RAM the firmware maps")]
    TooLarge(u64),
    /// The firmware did not finish in time.
    #[error("firmware timed out after {0:?} (killed)")]
    Timeout(Duration),
    /// The firmware stopped without a report.
    #[error(
        "QEMU exited with code {} and the firmware wrote no report (as a firmware \
         status the code means: {what}); QEMU said: {stderr}",
        code.map_or_else(|| "none (killed)".to_string(), |c| c.to_string())
    )]
    NoReport {
        /// QEMU's exit code.
        code: Option<i32>,
        /// The status that code means, if it is one.
        what: String,
        /// QEMU's standard error.
        stderr: String,
    },
    /// The report is malformed.
    #[error("firmware report: {0}")]
    Report(#[from] ReportError),
    /// An output the firmware sent back does not fit its tensor.
    #[error("firmware output `{name}`: {what}")]
    Output {
        /// The graph output.
        name: String,
        /// What is wrong.
        what: String,
    },
    /// The firmware reported a failure.
    #[error("firmware: {status}{}, detail {detail}", launch.map(|l| format!(" in launch {l}")).unwrap_or_default())]
    Failed {
        /// What happened.
        status: Status,
        /// The launch that failed.
        launch: Option<u32>,
        /// Status-specific detail.
        detail: u64,
    },
}

/// The firmware, the QEMU binary and a timeout.
#[derive(Clone, Debug)]
pub struct QemuDevice {
    firmware: PathBuf,
    job_base: u64,
    cores: u32,
    cpus: u32,
    qemu: String,
    timeout: Duration,
    log: Option<PathBuf>,
}

/// A job's outcome with the wall time it took.
#[derive(Clone, Debug)]
pub struct QemuRun {
    /// The firmware's report.
    pub report: Report,
    /// Wall time from spawning QEMU to its exit.
    pub wall: Duration,
}

impl QemuDevice {
    /// Reads `firmware`'s `_dvm_job_base` symbol and its core count
    /// (`_dvm_cores`, 1 when absent); QEMU is `qemu-system-aarch64` from
    /// `PATH`, the timeout 120 s.
    ///
    /// # Errors
    /// [`QemuError::Firmware`] when the file is unreadable, not an ELF, or
    /// lacks the symbol.
    pub fn new(firmware: impl Into<PathBuf>) -> Result<QemuDevice, QemuError> {
        let given: PathBuf = firmware.into();
        // QEMU runs in a temporary directory: make the path absolute.
        let firmware = std::path::absolute(&given).unwrap_or(given);
        let bad = |error: String| QemuError::Firmware {
            path: firmware.clone(),
            error,
        };
        let bytes = dvm_tensor::input::read_limited(&firmware, dvm_tensor::input::MAX_INPUT_BYTES)
            .map_err(|e| bad(e.to_string()))?;
        let elf = object::File::parse(&*bytes).map_err(|e| bad(format!("not an ELF: {e}")))?;
        let job_base = elf
            .symbols()
            .find(|s| s.name() == Ok("_dvm_job_base"))
            .map(|s| s.address())
            .ok_or_else(|| bad("no `_dvm_job_base` symbol: not a dvm firmware".into()))?;
        let cores = elf
            .symbols()
            .find(|s| s.name() == Ok("_dvm_cores"))
            .map_or(Ok(1), |s| {
                u32::try_from(s.address())
                    .ok()
                    .filter(|n| (1..=MAX_CORES).contains(n))
                    .ok_or_else(|| bad(format!("`_dvm_cores` is {}", s.address())))
            })?;
        Ok(QemuDevice {
            firmware,
            job_base,
            cores,
            cpus: cores,
            qemu: "qemu-system-aarch64".into(),
            timeout: Duration::from_secs(120),
            log: None,
        })
    }

    /// Sets the time after which QEMU is killed.
    pub fn with_timeout(mut self, timeout: Duration) -> QemuDevice {
        self.timeout = timeout;
        self
    }

    /// Saves the firmware's log (binary `defmt` frames, QEMU's standard
    /// output) to `path`; `defmt-print -e FIRMWARE < path` decodes it.
    pub fn with_log(mut self, path: impl Into<PathBuf>) -> QemuDevice {
        self.log = Some(path.into());
        self
    }

    /// The firmware path.
    pub fn firmware(&self) -> &Path {
        &self.firmware
    }

    /// Cores the firmware runs on (QEMU gets as many CPUs).
    pub fn cores(&self) -> u32 {
        self.cores
    }

    /// Boots QEMU with `cpus` CPUs (at least 1) instead of the firmware's
    /// core count: with fewer, the firmware runs on the cores that start
    /// (its report says how many), to test that it does.
    pub fn with_cpus(mut self, cpus: u32) -> QemuDevice {
        self.cpus = cpus.max(1);
        self
    }

    /// Boots the firmware on `job` and returns its report, whatever its
    /// status.
    ///
    /// # Errors
    /// [`QemuError`] when QEMU cannot run, times out, or the firmware
    /// stops without a readable report.
    pub fn run_job(&self, job: &[u8]) -> Result<QemuRun, QemuError> {
        let end = self.job_base + job.len() as u64;
        if end > VIRT_RAM_LIMIT {
            return Err(QemuError::TooLarge(job.len() as u64));
        }
        let dir = Builder::new().prefix("dvm-qemu-").tempdir()?;
        let (status, wall, stderr) = self.boot(&dir, end, Some(job), None)?;
        let report = match std::fs::read(dir.path().join(REPORT_FILE)) {
            Ok(bytes) => parse_report(&bytes)?,
            Err(_) => {
                let code = status.code();
                let what = code
                    .and_then(|c| u32::try_from(c).ok())
                    .and_then(Status::from_u32)
                    .map_or_else(|| "not a dvm status".to_string(), |s| s.to_string());
                return Err(QemuError::NoReport {
                    code,
                    what,
                    stderr: stderr.trim().to_string(),
                });
            }
        };
        Ok(QemuRun { report, wall })
    }

    /// Boots the firmware with the semihosting command line
    /// `selftest=<name>` and no job; returns the firmware's exit status.
    /// `stack-overflow` (core 0), `stack-overflow-secondary` (core 1) and
    /// `fault-while-logging` (a guard-page read in the middle of a log
    /// frame) must give [`Status::StackOverflow`].
    ///
    /// # Errors
    /// [`QemuError`] when QEMU cannot run or times out.
    pub fn selftest(&self, name: &str) -> Result<Option<Status>, QemuError> {
        let dir = Builder::new().prefix("dvm-qemu-").tempdir()?;
        let (status, _, _) =
            self.boot(&dir, self.job_base, None, Some(&format!("selftest={name}")))?;
        Ok(status
            .code()
            .and_then(|c| u32::try_from(c).ok())
            .and_then(Status::from_u32))
    }

    /// Runs QEMU in `dir` until it exits or times out; returns its exit
    /// status, the wall time and its standard error.
    fn boot(
        &self,
        dir: &TempDir,
        ram_end: u64,
        job: Option<&[u8]>,
        append: Option<&str>,
    ) -> Result<(std::process::ExitStatus, Duration, String), QemuError> {
        let mib = (ram_end - VIRT_RAM_BASE).div_ceil(1 << 20) + 16;
        let ram_mib = mib.clamp(128, (VIRT_RAM_LIMIT - VIRT_RAM_BASE) >> 20);
        let mut cmd = Command::new(&self.qemu);
        cmd.current_dir(dir.path())
            .args(["-M", "virt", "-cpu", "cortex-a57", "-nographic"])
            .arg("-smp")
            .arg(self.cpus.to_string())
            .args(["-nic", "none", "-monitor", "none", "-serial", "none"])
            .args(["-semihosting-config", "enable=on,target=native"])
            .arg("-m")
            .arg(format!("{ram_mib}M"))
            .arg("-kernel")
            .arg(&self.firmware);
        if let Some(job) = job {
            let job_path = dir.path().join("job.bin");
            std::fs::write(&job_path, job)?;
            cmd.arg("-device").arg(format!(
                "loader,file={},addr={:#x},force-raw=on",
                job_path.display(),
                self.job_base
            ));
        }
        if let Some(append) = append {
            cmd.arg("-append").arg(append);
        }
        let start = Instant::now();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(match &self.log {
                Some(p) => Stdio::from(std::fs::File::create(p)?),
                None => Stdio::null(),
            })
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| QemuError::Spawn {
                program: self.qemu.clone(),
                error,
            })?;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if start.elapsed() > self.timeout {
                // Kill failure means it exited meanwhile; wait reaps it.
                let _ = child.kill();
                let _ = child.wait();
                return Err(QemuError::Timeout(self.timeout));
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let wall = start.elapsed();
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            // Best effort: stderr only decorates the error message.
            let _ = e.read_to_string(&mut stderr);
        }
        Ok((status, wall, stderr))
    }
}

impl QemuDevice {
    /// Runs `prepared` as [`Runtime::run`](crate::Runtime::run) does, but
    /// on the firmware: the plan and kernels of `compiler` (a runtime's,
    /// [`Runtime::compiler`](crate::Runtime::compiler), to run what the CPU
    /// device runs), each step launched with as many blocks as the firmware
    /// has cores (one block per core; the split does not change the bits).
    ///
    /// # Errors
    /// [`RunError`] as for the CPU device; [`RunError::Qemu`] for the
    /// device's own failures.
    pub fn run(
        &self,
        compiler: &Compiler,
        prepared: &Prepared,
        inputs: &[(&str, &Tensor)],
        explicit: &Bindings,
    ) -> Result<Outputs, RunError> {
        let graph = prepared.graph();
        let bindings = graph.bind_tensors(inputs, explicit)?;
        let (plan, kernels) = compiler.plan(prepared, &bindings)?;
        let mut job = JobBuilder::new();
        for (b, info) in plan.buffers.iter().enumerate() {
            let mut init = vec![0u8; info.bytes as usize];
            if let Some(src) = initial_bytes(graph, info, inputs) {
                let n = init.len().min(src.len());
                init[..n].copy_from_slice(&src[..n]);
            }
            let output = plan.outputs.iter().any(|(_, o, _, _)| *o == b);
            job.buffer(init, output);
        }
        let blocks = self.cores();
        let mut modules = std::collections::HashMap::new();
        for (launch, kernel) in plan.launches.iter().zip(&kernels) {
            let key = std::sync::Arc::as_ptr(kernel);
            let m = *modules
                .entry(key)
                .or_insert_with(|| job.module(&kernel.module));
            let (args, _) = plan.launch_args(launch);
            let args: Vec<u32> = args.iter().map(|&a| a as u32).collect();
            job.launch(m, 0, &args, blocks);
        }
        let run = self
            .run_job(&job.finish())
            .map_err(|e| RunError::Qemu(Box::new(e)))?;
        let report = run.report;
        if report.status != Status::Ok {
            return Err(RunError::Qemu(Box::new(QemuError::Failed {
                status: report.status,
                launch: report.failed_launch,
                detail: report.detail,
            })));
        }
        plan.outputs
            .iter()
            .map(|(name, b, dt, shape)| {
                let bytes = report
                    .outputs
                    .iter()
                    .find(|(i, _)| *i as usize == *b)
                    .map(|(_, bytes)| bytes.clone())
                    .unwrap_or_default();
                Tensor::new(*dt, shape.clone(), bytes)
                    .map(|t| (name.clone(), t))
                    .map_err(|e| {
                        RunError::Qemu(Box::new(QemuError::Output {
                            name: name.clone(),
                            what: e.to_string(),
                        }))
                    })
            })
            .collect()
    }
}

pub(super) const ENTRY: DeviceEntry = DeviceEntry {
    name: "qemu",
    about: "the aarch64 firmware under qemu-system-aarch64 (needs --firmware)",
    open,
};

/// A [`QemuDevice`] with the compiler whose kernels it runs.
struct Qemu {
    device: QemuDevice,
    compiler: Compiler,
}

fn open(config: &DeviceConfig) -> Result<Box<dyn Device>, DeviceError> {
    let firmware = config.firmware.as_ref().ok_or_else(|| {
        DeviceError::Open(
            "--device qemu needs --firmware FW (or DVM_FIRMWARE): build it with \
             `cargo ci firmware`"
                .into(),
        )
    })?;
    let device = QemuDevice::new(firmware).map_err(|e| DeviceError::Open(e.to_string()))?;
    let device = match &config.firmware_log {
        Some(log) => device.with_log(log),
        None => device,
    };
    let compiler = Compiler::for_cores(config.cores_or_all(), config.cache_capacity);
    Ok(Box::new(Qemu { device, compiler }))
}

impl Device for Qemu {
    fn name(&self) -> &'static str {
        ENTRY.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            runs_kernels: true,
            bit_exact_with_cpu: true,
            cores: self.device.cores() as usize,
        }
    }

    fn run_with_bindings(
        &self,
        prepared: &Prepared,
        inputs: &[(&str, &Tensor)],
        explicit: &Bindings,
    ) -> Result<Outputs, RunError> {
        self.device.run(&self.compiler, prepared, inputs, explicit)
    }
}
