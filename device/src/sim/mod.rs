//! The instruction-level simulator: a verified kernel's instruction stream
//! through a cycle model of the device's pipes.
//!
//! - [`spec`]: the modelled device ([`DeviceSpec`]) and its presets.
//! - [`lower`]: a verified kernel as the pipes see it ([`SimProgram`]):
//!   each instruction's pipe, wait mask and cost.
//! - [`channel`]: global-memory bandwidth shared by the cores.
//! - [`engine`]: per core, in-order pipe queues synchronised by the wait
//!   flags; tiles split over cores as the executor splits them; stage
//!   barriers ([`Simulator`]).
//!
//! The simulator models time only. A host device that wants values runs
//! the same kernel through the executor ([`crate::exec`]), whose handlers
//! give every device its bits.

pub mod channel;
pub mod engine;
pub mod lower;
pub mod spec;

pub use engine::{
    InstrEvent, NoSink, SimError, SimSink, SimStats, Simulator, Stalls, TileEvent, PIPES,
};
pub use lower::{SimBody, SimInstr, SimLowerError, SimOp, SimProgram};
pub use spec::{DeviceSpec, SpecError, VectorClass, MAX_SIM_CORES};

#[cfg(test)]
mod tests;
