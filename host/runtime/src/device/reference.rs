//! The reference device: the graph evaluated in `f64` by
//! [`dvm_graph::reference`], the oracle the other devices are tested
//! against.

use dvm_sym::Bindings;
use dvm_tensor::Tensor;

use super::{Capabilities, Device, DeviceConfig, DeviceEntry, DeviceError};
use crate::{Outputs, Prepared, RunError};

/// The f64 reference evaluator as a device.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReferenceDevice;

pub(super) const ENTRY: DeviceEntry = DeviceEntry {
    name: "reference",
    about: "the f64 reference evaluator (no kernels)",
    open,
};

fn open(_: &DeviceConfig) -> Result<Box<dyn Device>, DeviceError> {
    Ok(Box::new(ReferenceDevice))
}

impl Device for ReferenceDevice {
    fn name(&self) -> &'static str {
        ENTRY.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            runs_kernels: false,
            bit_exact_with_cpu: false,
            cores: 1,
        }
    }

    /// Every error is the graph's or the inputs' ([`RunError::Graph`]).
    fn run_with_bindings(
        &self,
        prepared: &Prepared,
        inputs: &[(&str, &Tensor)],
        explicit: &Bindings,
    ) -> Result<Outputs, RunError> {
        Ok(dvm_graph::reference::run(prepared.graph(), inputs, explicit)?.into())
    }
}
