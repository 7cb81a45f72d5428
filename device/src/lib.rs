//! The dvm virtual machine: `no_std`, no heap.
//!
//! A [`dvm_isa::VerifiedKernel`] is predecoded once into virtual instructions
//! (each UB instruction resolved to a monomorphised handler), then every tile
//! of a block's range runs those handlers over the unified buffer (UB).
//!
//! # Crate map
//! - [`math`]: branch-free polynomial transcendentals with stated error bounds.
//! - [`ops`]: UB-only handlers (vector, 2-D tile, cube), resolved per instruction.
//! - [`gm`]: global-memory buffers, the launch binding, load / store / store_add.
//! - [`predecode`]: verified kernel → [`Program`] of virtual instructions.
//! - [`peephole`]: instruction pairs fused into superinstructions at predecode.
//! - [`exec`]: the tile loop ([`run_block`]), block partition, UB storage.
//! - [`forward`]: lone element-wise bodies run straight over global memory.
//! - [`loadfold`]: a load and the fold along columns after it in one pass
//!   (and, for a softmax tile, the superinstruction after them reading the
//!   tile in global memory instead of a copy in UB).
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
pub mod vinstr;

pub use exec::{
    block_range, run_all_blocks_sequentially, run_block, run_blocks_strided, run_tile_range,
    run_tile_ranges, Barrier, ExecError, NoBarrier, RunStats, UbStorage, UB_DEFAULT_BYTES,
};
pub use gm::{
    AffineStore, BindError, GmBuf, GmFault, Launch, ParamSig, Prefetch, PrefetchRun, StoreMap,
};
pub use plan::{BodyPlan, FusedForm, FusedForms};
pub use predecode::{BodyInfo, LoadError, PredecodeError, Program};
pub use vinstr::VInstr;
