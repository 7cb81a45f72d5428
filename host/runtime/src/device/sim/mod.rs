//! The simulator device (`--device sim`): every launch timed by the
//! instruction-level simulator ([`dvm_device::sim`]) on a modelled device
//! ([`SimSpec`]), the values computed by the CPU device's executor on the
//! same kernels (so they are the CPU device's bits).
//!
//! Kernels are tiled for the modelled device: its cores and its UB. Each
//! launch's timing is kept as a [`LaunchReport`] ([`report::text`] prints
//! them) and, when asked for, every instruction as a slice of a
//! [`Timeline`] ([`timeline::chrome_trace`], [`timeline::svg`]).
//! [`SimDevice::simulate`] times a graph at given bindings without values.

pub mod calibrate;
pub mod report;
mod spec_file;
pub mod timeline;

use std::sync::{Mutex, MutexGuard};

use dvm_compile::codegen::Target;
use dvm_compile::kernel::ReadyKernel;
use dvm_device::sim::{DeviceSpec, SimProgram, SimStats, Simulator};
use dvm_isa::{DeviceLimits, KernelKind, Module};
use dvm_sym::Bindings;
use dvm_tensor::Tensor;

pub use spec_file::{SimSpec, SpecFileError, PRESETS};
pub use timeline::{Slice, Timeline};

use super::{Capabilities, Device, DeviceConfig, DeviceEntry, DeviceError, Runtime};
use crate::{Outputs, Prepared, RunError};

/// Instruction capacity of a simulated kernel (the executor's program
/// holds as many).
const SIM_INSTRS: usize = dvm_device::predecode::DEFAULT_INSTRS;

/// Most slices a timeline keeps; later instructions are counted, not kept.
pub const TIMELINE_CAP: usize = 400_000;

/// One launch's simulated timing.
#[derive(Clone, Debug)]
pub struct LaunchReport {
    /// The kernel's name.
    pub kernel: String,
    /// Its kind.
    pub kind: KernelKind,
    /// Tile box rows × cols.
    pub tile: (u64, u64),
    /// The totals.
    pub stats: SimStats,
}

/// What the device accumulates between takes.
#[derive(Default)]
struct State {
    reports: Vec<LaunchReport>,
    timeline: Option<Timeline>,
}

/// The simulator device.
pub struct SimDevice {
    rt: Runtime,
    spec: SimSpec,
    sim: Mutex<Box<Simulator>>,
    state: Mutex<State>,
}

/// Locks `m`, recovering from a poisoned lock (the state stays usable).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SimDevice {
    /// A simulator of `spec`, computing values on `value_cores` worker
    /// threads (clamped to the spec's cores) with a cache of
    /// `cache_capacity` kernels.
    ///
    /// # Errors
    /// The spec's first field out of range.
    pub fn new(
        spec: SimSpec,
        value_cores: usize,
        cache_capacity: usize,
    ) -> Result<SimDevice, SpecFileError> {
        spec.spec.check().map_err(|e| SpecFileError {
            source_name: spec.name.clone(),
            what: e.to_string(),
        })?;
        let target = target(&spec.spec);
        let cores = value_cores.clamp(1, spec.spec.cores as usize);
        Ok(SimDevice {
            rt: Runtime::with_target(cores, cache_capacity, Some(target)),
            spec,
            sim: Mutex::new(Box::new(Simulator::new())),
            state: Mutex::new(State::default()),
        })
    }

    /// The modelled device.
    pub fn spec(&self) -> &SimSpec {
        &self.spec
    }

    /// Starts (or stops) keeping every simulated instruction in a
    /// [`Timeline`] ([`SimDevice::take_timeline`]).
    pub fn record_timeline(&self, on: bool) {
        let mut st = lock(&self.state);
        st.timeline = on.then(|| Timeline::new(self.spec.clone()));
    }

    /// The launch reports since the last take, in launch order.
    pub fn take_reports(&self) -> Vec<LaunchReport> {
        std::mem::take(&mut lock(&self.state).reports)
    }

    /// The timeline since recording started or was last taken (recording
    /// goes on into a fresh one); `None` when not recording.
    pub fn take_timeline(&self) -> Option<Timeline> {
        let mut st = lock(&self.state);
        let fresh = st
            .timeline
            .as_ref()
            .map(|_| Timeline::new(self.spec.clone()));
        std::mem::replace(&mut st.timeline, fresh)
    }

    /// Times `prepared` at `bindings` without computing values: one
    /// report per launch, also kept for [`SimDevice::take_reports`].
    ///
    /// # Errors
    /// [`RunError`]: lowering or compile failures at these bindings, or
    /// [`RunError::Sim`] when a kernel does not fit the spec.
    pub fn simulate(
        &self,
        prepared: &Prepared,
        bindings: &Bindings,
    ) -> Result<Vec<LaunchReport>, RunError> {
        let (plan, kernels) = self.rt.plan(prepared, bindings)?;
        let mut out = Vec::with_capacity(kernels.len());
        for (launch, k) in plan.launches.iter().zip(&kernels) {
            let name = launch
                .steps
                .iter()
                .map(|&s| plan.steps[s].name.as_str())
                .collect::<Vec<_>>()
                .join("+");
            out.push(self.simulate_kernel(k, &name)?);
        }
        lock(&self.state).reports.extend(out.iter().cloned());
        Ok(out)
    }

    /// Times one launch of `kernel`, named `name` in reports.
    ///
    /// # Errors
    /// [`RunError::Sim`] when the kernel does not verify against the
    /// spec's UB or exceeds the simulator's capacity.
    pub fn simulate_kernel(
        &self,
        kernel: &ReadyKernel,
        name: &str,
    ) -> Result<LaunchReport, RunError> {
        let fail = |error: String| RunError::Sim {
            step: name.to_string(),
            error,
        };
        let module = Module::parse(&kernel.module).map_err(|e| fail(e.to_string()))?;
        let limits = DeviceLimits::with_ub_bytes(self.spec.spec.ub_bytes);
        let verified =
            dvm_isa::verify_kernel(&module, 0, &limits).map_err(|e| fail(e.to_string()))?;
        let program: Box<SimProgram<SIM_INSTRS>> =
            Box::new(SimProgram::new(&verified).map_err(|e| fail(e.to_string()))?);
        let mut sim = lock(&self.sim);
        let mut st = lock(&self.state);
        let stats = match st.timeline.as_mut() {
            Some(tl) => {
                let mut rec = tl.begin_launch(name, &verified);
                let r = sim.launch(&self.spec.spec, &program, &mut rec);
                let cycles = r.as_ref().map_or(0, |s| s.cycles);
                tl.end_launch(rec, cycles);
                r
            }
            None => sim.launch(&self.spec.spec, &program, &mut dvm_device::sim::NoSink),
        }
        .map_err(|e| fail(e.to_string()))?;
        Ok(LaunchReport {
            kernel: name.to_string(),
            kind: kernel.info.kind,
            tile: kernel.info.tile,
            stats,
        })
    }

    /// The runtime computing the values (its compiler tiles for the spec).
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }
}

pub(super) const ENTRY: DeviceEntry = DeviceEntry {
    name: "sim",
    about:
        "the instruction-level simulator of the NPU's pipes (--spec), values from the CPU executor",
    open,
};

fn open(config: &DeviceConfig) -> Result<Box<dyn Device>, DeviceError> {
    let mut spec = match &config.sim_spec {
        Some(s) => SimSpec::resolve(s).map_err(|e| DeviceError::Open(e.to_string()))?,
        None => SimSpec::default_preset(),
    };
    if let Some(c) = config.cores {
        spec.spec.cores = u32::try_from(c).unwrap_or(u32::MAX);
    }
    let dev = SimDevice::new(spec, config.cores_or_all(), config.cache_capacity)
        .map_err(|e| DeviceError::Open(e.to_string()))?;
    Ok(Box::new(dev))
}

impl Device for SimDevice {
    fn name(&self) -> &'static str {
        ENTRY.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            runs_kernels: true,
            bit_exact_with_cpu: true,
            cores: self.spec.spec.cores as usize,
        }
    }

    fn run_with_bindings(
        &self,
        prepared: &Prepared,
        inputs: &[(&str, &Tensor)],
        explicit: &Bindings,
    ) -> Result<Outputs, RunError> {
        let bindings = prepared.graph().bind_tensors(inputs, explicit)?;
        self.simulate(prepared, &bindings)?;
        self.rt.run_bound(prepared, inputs, &bindings)
    }
}

/// `kernel` verified against a UB of `ub_bytes` and lowered for the
/// simulator.
///
/// # Errors
/// The verifier's or the lowering's message.
pub fn lower(kernel: &ReadyKernel, ub_bytes: u32) -> Result<Box<SimProgram<SIM_INSTRS>>, String> {
    let module = Module::parse(&kernel.module).map_err(|e| e.to_string())?;
    let verified = dvm_isa::verify_kernel(&module, 0, &DeviceLimits::with_ub_bytes(ub_bytes))
        .map_err(|e| e.to_string())?;
    Ok(Box::new(
        SimProgram::new(&verified).map_err(|e| e.to_string())?,
    ))
}

/// Instruction capacity of a kernel lowered by [`lower`].
pub const SIM_INSTRS_CAP: usize = SIM_INSTRS;

/// A spec's cores and UB as the compile target.
pub fn target(spec: &DeviceSpec) -> Target {
    Target {
        ub_bytes: spec.ub_bytes,
        cores: spec.cores,
    }
}
