//! The dvm virtual machine: `no_std`, no heap.
//!
//! A [`dvm_isa::VerifiedKernel`] is predecoded once into virtual instructions
//! (each UB instruction resolved to a monomorphised handler), then every tile
//! of a block's range runs those handlers over the unified buffer (UB).
//!
//! # Crate map
//! Layered from the bottom up; a module imports only modules above it in
//! this list.
//! - [`math`]: branch-free polynomial transcendentals with stated error bounds.
//! - `mem`: prefetch hints and non-temporal stores.
//! - [`ops`]: UB-only handlers (vector, 2-D tile, cube) and the device's one
//!   dispatch table ([`ops::resolve_with`], exhaustive over the opcodes).
//! - [`gm`]: global-memory buffers, the launch binding, load / store / store_add.
//! - [`vinstr`]: virtual instructions and the UB liveness scans over them.
//! - [`peephole`]: instruction runs fused into superinstructions at predecode.
//! - [`forward`]: lone element-wise bodies run straight over global memory.
//! - [`loadfold`]: a load and the fold along columns after it in one pass
//!   (and, for a softmax tile, what follows reading the tile in global
//!   memory); two loads read in global memory by the op after them.
//! - [`plan`]: the per-body plan ([`BodyPlan`]) built from those decisions,
//!   and the fused forms a body runs in by name ([`FusedForm`],
//!   [`Program::fused_forms`]).
//! - [`predecode`]: verified kernel → [`Program`] of virtual instructions.
//! - [`exec`]: the tile loop ([`run_block`]), block partition, UB storage.
//! - [`sim`]: the instruction-level simulator: a verified kernel's
//!   instructions through a cycle model of the pipes ([`sim::DeviceSpec`]).
#![no_std]
#![warn(missing_docs)]

// `core` has no stable `f32::mul_add`; on x86-64 with an OS the fused
// multiply-add of `math` comes from `std` (nothing else does).
#[cfg(all(target_arch = "x86_64", not(target_os = "none")))]
extern crate std;

pub mod exec;
pub mod forward;
pub mod gm;
pub mod loadfold;
pub mod math;
mod mem;
pub mod ops;
pub mod peephole;
pub mod plan;
pub mod predecode;
pub mod sim;
pub mod vinstr;

pub use exec::{
    block_range, run_all_blocks_sequentially, run_block, run_blocks_strided, run_tile_range,
    run_tile_ranges, Barrier, ExecError, NoBarrier, RunStats, UbStorage, UB_DEFAULT_BYTES,
};
pub use gm::{
    AffineStore, BindError, GmBuf, GmFault, KernelArgs, ParamSig, Prefetch, PrefetchRun, StoreMap,
};
pub use plan::{BodyPlan, FusedForm, FusedForms};
pub use predecode::{BodyInfo, LoadError, PredecodeError, Program};
pub use vinstr::VInstr;
