//! The runtime operator compiler: one group at concrete shapes → one kernel
//! of bytecode, in microseconds.
//!
//! - [`view`]: strided views and dimension coalescing.
//! - [`group`]: the group IR (what a kernel computes).
//! - [`space`]: mapping an N-D iteration space onto UB boxes, a tile grid
//!   and (for spaces of more than five dimensions) several bodies.
//! - [`ewise`]: code generation for element-wise and reduce groups.
//! - [`matmul`]: code generation for matmul groups (cube + epilogue).
//! - [`gather`]: code generation for gather groups (rows picked by index).
//! - [`ub_alloc`]: UB buffer allocation inside a tile body.

pub mod ewise;
pub mod gather;
pub mod group;
pub mod matmul;
pub mod space;
pub mod ub_alloc;
pub mod view;

use std::cell::RefCell;

use dvm_isa::builder::{BodyDef, CodeWriter, KernelDef};
use dvm_isa::{DType, Instr, KernelKind, Opcode, Scalar};

use ewise::{Class, Spread};
use space::Tiled;
use ub_alloc::UbAlloc;

pub use group::{Group, GroupKind, TileOp, TileOpId};
pub use view::View;

/// What the compiler targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// UB bytes per core.
    pub ub_bytes: u32,
    /// Cores (blocks) a launch spreads over.
    pub cores: u32,
}

impl Default for Target {
    fn default() -> Self {
        Target {
            ub_bytes: dvm_isa::DeviceLimits::DEFAULT.ub_bytes,
            cores: 1,
        }
    }
}

/// Why a group could not be compiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// The tiles the group needs do not fit in UB.
    #[error("{0} does not fit in the {1}-byte UB")]
    DoesNotFit(String, u32),
    /// The group is malformed (a bug in the caller, reported, not panicked on).
    #[error("malformed group: {0}")]
    Malformed(String),
    /// A shape or offset exceeds what the instruction set encodes.
    #[error("{0} exceeds the instruction set's limits")]
    TooLarge(String),
}

/// A compiled kernel plus what `dvm explain` reports about it.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The kernel (parameters: the group's inputs, then its outputs).
    pub kernel: KernelDef,
    /// Tile box rows × cols.
    pub tile: (u64, u64),
    /// Tiles over all bodies.
    pub tiles: u64,
    /// Bytes the kernel reads from and writes to global memory per launch:
    /// each operand's distinct elements once (a broadcast operand at its
    /// own size), and for a matmul its operands once per tile that reads
    /// them.
    pub bytes_moved: u64,
}

/// Compiles `group` for `target`.
///
/// # Errors
/// [`CompileError`] when the group is malformed or its tiles cannot fit.
pub fn compile(group: &Group, name: &str, target: &Target) -> Result<Compiled, CompileError> {
    with_scratch(|sc| {
        let s = compile_into(group, target, sc)?;
        Ok(Compiled {
            kernel: KernelDef {
                name: name.to_string(),
                kind: s.kind,
                ub_bytes: s.ub_bytes,
                params: ewise::params(group),
                bodies: sc.bodies[..s.bodies]
                    .iter()
                    .map(|code| BodyDef {
                        grid: s.grid,
                        code: code.clone(),
                    })
                    .collect(),
            },
            tile: s.tile,
            tiles: s.tiles,
            bytes_moved: s.bytes_moved,
        })
    })
}

/// What [`compile_into`] produced besides the code: the kernel's header
/// fields and what `dvm explain` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Kernel kind.
    pub kind: KernelKind,
    /// UB bytes needed.
    pub ub_bytes: u32,
    /// Number of bodies: the code is `Scratch::bodies()[..bodies]`.
    pub bodies: usize,
    /// The tile grid of every body.
    pub grid: [u32; 3],
    /// Tile box rows × cols.
    pub tile: (u64, u64),
    /// Tiles over all bodies.
    pub tiles: u64,
    /// Bytes the kernel reads from and writes to global memory per launch:
    /// each operand's distinct elements once (a broadcast operand at its
    /// own size), and for a matmul its operands once per tile that reads
    /// them.
    pub bytes_moved: u64,
}

/// Buffers one compilation needs, kept from one compile to the next so a
/// warm compile allocates nothing: operand strides, the tiling, node
/// classes and UB addresses, the UB allocator and the bodies' code.
#[derive(Debug, Default)]
pub struct Scratch {
    pub(crate) classes: Vec<Class>,
    /// Per node: an input loaded as one row or column ([`ewise::spreads`]).
    pub(crate) spread: Vec<Option<Spread>>,
    pub(crate) last: Vec<usize>,
    pub(crate) addr: Vec<u32>,
    /// Operand strides over the (uncoalesced) space.
    pub(crate) strides: Vec<[u64; view::MAX_RANK]>,
    /// The matmul output space.
    pub(crate) space: Vec<u64>,
    pub(crate) tiled: Tiled,
    pub(crate) ub: UbAlloc,
    /// Code of each body; the first [`Summary::bodies`] are the kernel's.
    pub(crate) bodies: Vec<CodeWriter>,
}

impl Scratch {
    /// An empty scratch with room for typical groups (up to 64 nodes and
    /// 16 operands); it grows, once, for larger ones.
    pub fn new() -> Scratch {
        let mut s = Scratch {
            classes: Vec::with_capacity(64),
            spread: Vec::with_capacity(64),
            last: Vec::with_capacity(64),
            addr: Vec::with_capacity(64),
            strides: Vec::with_capacity(16),
            space: Vec::with_capacity(view::MAX_RANK),
            ..Scratch::default()
        };
        s.tiled.dims.reserve(view::MAX_RANK);
        s.tiled.strides.reserve(16);
        s.tiled.offsets.reserve(16);
        s.tiled.grid.reserve(view::MAX_RANK + 2);
        s.tiled.body_dims.reserve(view::MAX_RANK);
        s
    }

    /// Faults in the first body's code buffer (creating it), so the first
    /// long kernel compiled with this scratch does not page-fault as its
    /// code is written (see [`crate::warm`]).
    pub fn touch(&mut self) {
        self.clear_bodies(1);
        self.bodies[0].clear_touched();
    }

    /// The bodies' code written by the last [`compile_into`] (use the first
    /// [`Summary::bodies`]).
    pub fn bodies(&self) -> &[CodeWriter] {
        &self.bodies
    }

    /// `n` cleared code writers. The first has room for the longest body
    /// the executor runs ([`BODY_WORDS`]), so a kernel's code does not
    /// grow the scratch whatever its shape; others start at 256 words.
    pub(crate) fn clear_bodies(&mut self, n: usize) {
        while self.bodies.len() < n {
            let words = if self.bodies.is_empty() {
                BODY_WORDS
            } else {
                256
            };
            self.bodies.push(CodeWriter::with_capacity(words));
        }
        for b in &mut self.bodies[..n] {
            b.clear();
        }
    }
}

/// Words of the longest code a program holds: the executor's instruction
/// capacity times the longest instruction.
pub const BODY_WORDS: usize = dvm_device::predecode::DEFAULT_INSTRS * dvm_isa::MAX_INSTR_WORDS;

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::new());
}

/// Runs `f` with this thread's compiler scratch (a fresh one if it is
/// already in use further up the stack).
pub fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut sc) => f(&mut sc),
        Err(_) => f(&mut Scratch::new()),
    })
}

/// Compiles `group` for `target` into `scratch`: the code of each body ends
/// up in [`Scratch::bodies`]; nothing is allocated once the scratch has
/// grown to the group's size. The kernel's parameters are the group's
/// inputs, then its outputs (see [`compile`]).
///
/// # Errors
/// [`CompileError`] when the group is malformed or its tiles cannot fit.
pub fn compile_into(
    group: &Group,
    target: &Target,
    scratch: &mut Scratch,
) -> Result<Summary, CompileError> {
    match group.kind {
        GroupKind::Elementwise { .. } | GroupKind::Reduce { .. } => {
            ewise::compile_into(group, target, scratch)
        }
        GroupKind::Matmul { .. } => matmul::compile_into(group, target, scratch),
        GroupKind::Gather { .. } => gather::compile_into(group, target, scratch),
    }
}

/// The scalar immediate for `v` in dtype `dt`'s compute type.
pub fn scalar(dt: DType, v: f64) -> Scalar {
    if dt.is_float() {
        Scalar::f32(v as f32)
    } else if v.is_nan() {
        Scalar::i32(0)
    } else {
        Scalar::i32(v.clamp(i32::MIN as f64, i32::MAX as f64) as i32)
    }
}

/// Builds an instruction from an opcode and raw field values.
///
/// # Errors
/// [`CompileError::Malformed`] when the fields do not fit the opcode.
pub fn instr(op: Opcode, raw: &[u64]) -> Result<Instr, CompileError> {
    Instr::from_raw(op, raw)
        .ok_or_else(|| CompileError::Malformed(format!("bad operands for `{}`", op.mnemonic())))
}

#[cfg(test)]
mod tests;
