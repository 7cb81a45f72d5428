//! Devices: what runs a prepared graph, behind one trait, chosen by name.
//!
//! A [`Device`] takes a [`Prepared`] graph and named input tensors and
//! returns the named outputs. Devices that execute kernels (the CPU device,
//! QEMU) lower and compile through a [`Compiler`](crate::Compiler) and then
//! bind buffers and launch each kernel of the plan their own way; the
//! reference device evaluates the graph directly in `f64`.
//!
//! [`DEVICES`] is the registry that `dvm run --device NAME` and the
//! conformance suite resolve names through: adding a device is one module
//! implementing [`Device`] and one [`DeviceEntry`] in that list.
//!
//! ```
//! use dvm_runtime::device::{self, DeviceConfig};
//! use dvm_runtime::Prepared;
//! use dvm_graph::Graph;
//! use dvm_isa::DType;
//! use dvm_tensor::Tensor;
//!
//! let config = DeviceConfig { cores: Some(2), ..DeviceConfig::default() };
//! let cpu = device::open("cpu", &config)?;
//! assert_eq!(cpu.name(), "cpu");
//! assert!(cpu.capabilities().runs_kernels);
//! assert!(device::open("tpu", &config).is_err());
//!
//! // y = exp(x), on the CPU device and on the f64 reference device.
//! let mut g = Graph::new();
//! let x = g.input("x", DType::F32, &[4.into()])?;
//! let y = g.exp(x)?;
//! g.output("y", y)?;
//! let prepared = Prepared::new(&g)?;
//! let x = Tensor::from_f32(&[4], &[0.0, 1.0, 2.0, 3.0])?;
//! let reference = device::open("reference", &config)?;
//! let want = reference.run(&prepared, &[("x", &x)])?;
//! let got = cpu.run(&prepared, &[("x", &x)])?;
//! let (want, got) = (&want["y"], &got["y"]);
//! assert!(got.allclose(want, 1e-6, 0.0)?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cpu;
pub mod qemu;
mod reference;
pub mod sim;

use std::path::PathBuf;

use dvm_sym::Bindings;
use dvm_tensor::Tensor;

pub use cpu::Runtime;
pub use reference::ReferenceDevice;

use crate::{Outputs, Prepared, RunError};

/// What a device can do, for callers that pick one or compare two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Runs compiled kernels (bytecode through the VM). `false` for the
    /// reference device, which evaluates the graph itself.
    pub runs_kernels: bool,
    /// Its results are bit for bit those of the CPU device (same kernels,
    /// same handlers). The reference device is within the documented
    /// tolerance instead.
    pub bit_exact_with_cpu: bool,
    /// Cores a launch is split over (1 for the reference device).
    pub cores: usize,
}

/// A device that runs prepared graphs.
///
/// Implementations are `Send + Sync`: one device serves calls from several
/// threads.
pub trait Device: Send + Sync {
    /// The name the registry knows it by (`cpu`, `reference`, `qemu`, `sim`).
    fn name(&self) -> &'static str;

    /// What the device can do.
    fn capabilities(&self) -> Capabilities;

    /// Runs `prepared` on named `inputs`, every symbol deduced from the
    /// input shapes. Returns the outputs by name, in the graph's order.
    ///
    /// # Errors
    /// [`RunError`]: bad inputs (named; a symbol no input's shape fixes
    /// among them), lowering, compile or launch failures, or the device's
    /// own failure.
    fn run(&self, prepared: &Prepared, inputs: &[(&str, &Tensor)]) -> Result<Outputs, RunError> {
        self.run_with_bindings(prepared, inputs, &Bindings::new())
    }

    /// [`Device::run`] with `explicit` bindings for the symbols the inputs'
    /// shapes do not fix (those they do must agree with them).
    ///
    /// # Errors
    /// As [`Device::run`].
    fn run_with_bindings(
        &self,
        prepared: &Prepared,
        inputs: &[(&str, &Tensor)],
        explicit: &Bindings,
    ) -> Result<Outputs, RunError>;
}

/// What opening a device may use: each device reads the fields it needs.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// Worker cores for the CPU device, and the cores kernels are compiled
    /// for (default: every core of the machine).
    pub cores: Option<usize>,
    /// Kernels a device's cache keeps (default
    /// [`DEFAULT_CACHE_CAPACITY`](crate::DEFAULT_CACHE_CAPACITY)).
    pub cache_capacity: usize,
    /// The aarch64 firmware image (QEMU).
    pub firmware: Option<PathBuf>,
    /// Where QEMU writes the firmware's log.
    pub firmware_log: Option<PathBuf>,
    /// The simulator's device: a preset name or a spec file
    /// ([`sim::SimSpec::resolve`]; default: the 910B-class preset).
    pub sim_spec: Option<String>,
}

impl Default for DeviceConfig {
    fn default() -> DeviceConfig {
        DeviceConfig {
            cores: None,
            cache_capacity: crate::DEFAULT_CACHE_CAPACITY,
            firmware: None,
            firmware_log: None,
            sim_spec: None,
        }
    }
}

impl DeviceConfig {
    /// [`DeviceConfig::cores`], or the machine's cores when unset.
    pub fn cores_or_all(&self) -> usize {
        self.cores.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
    }
}

/// Why a device could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// No device of this name in [`DEVICES`].
    #[error("unknown device `{name}` (known: {known})")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The registry's names, comma-separated.
        known: String,
    },
    /// The device exists but could not be opened with this configuration.
    #[error("{0}")]
    Open(String),
}

/// One device in the registry.
#[derive(Clone, Copy, Debug)]
pub struct DeviceEntry {
    /// The name `--device` takes.
    pub name: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    /// Opens the device.
    pub open: fn(&DeviceConfig) -> Result<Box<dyn Device>, DeviceError>,
}

/// Every device, in the order `--help` lists them.
pub const DEVICES: &[DeviceEntry] = &[cpu::ENTRY, reference::ENTRY, qemu::ENTRY, sim::ENTRY];

/// The registry entry of `name`.
///
/// # Errors
/// [`DeviceError::Unknown`] listing the known names.
pub fn entry(name: &str) -> Result<&'static DeviceEntry, DeviceError> {
    DEVICES
        .iter()
        .find(|e| e.name == name)
        .ok_or_else(|| DeviceError::Unknown {
            name: name.to_string(),
            known: DEVICES
                .iter()
                .map(|e| e.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Opens the device called `name` with `config`.
///
/// # Errors
/// [`DeviceError::Unknown`] for a name not in [`DEVICES`];
/// [`DeviceError::Open`] when the device cannot start with `config` (QEMU
/// without a firmware, say).
pub fn open(name: &str, config: &DeviceConfig) -> Result<Box<dyn Device>, DeviceError> {
    (entry(name)?.open)(config)
}
