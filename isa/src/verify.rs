//! The verifier: everything checkable before launch, so that the executor's
//! hot loop checks nothing.
//!
//! Static rules, per instruction: it decodes (known opcode, exact length,
//! its own pipe, no reserved bits, valid field values); its dtype fields are
//! allowed for the opcode; every UB range it touches is aligned to its
//! element size and lies inside the kernel's declared UB, which lies inside
//! the device's; ranges an element-wise instruction reads and writes are
//! identical or disjoint (other instructions need them disjoint); wait flags
//! name only other data pipes; its features are declared in the header;
//! 2-D tile operations, matmuls and gathers have non-zero extents.
//! Loads and stores name an existing parameter of the same dtype with the
//! right access, describe tails consistent with the grid, and their furthest
//! element over the whole grid is computed here in checked `u64` arithmetic,
//! so the launch check is one comparison per parameter. Per body: the grid is
//! non-empty, the code ends with the only `end`. Per kernel: the kind agrees
//! with the bodies and pipes used, and several bodies need the `multi_body`
//! feature.
//!
//! Not checked: that different tiles of a plain (non-atomic) store write
//! disjoint global memory, or that no tile loads what another tile stores.
//! A verified kernel may do either (a zero step, overlapping boxes, an
//! `inout` buffer); every access stays in bounds, but an executor that runs
//! blocks on several threads must not rely on tiles being disjoint (plain
//! non-atomic copies from two threads to one element are a data race).
//!
//! Only this module constructs a [`VerifiedKernel`]; the executor takes
//! nothing else.

use zerocopy::little_endian::U64;

use crate::access::{AccessKind, GmAccess, GmKind, GmPattern};
use crate::dtype::{DType, DTypeSet};
use crate::error::DecodeError;
use crate::instr::{Instr, Opcode};
use crate::module::{
    dtype_features, features, opcode_features, KernelKind, KernelRef, Module, Param, ParamAccess,
};
use crate::operand::GridDim;
use crate::tiles::{TileConflict, Tracker};
use crate::word::{Head, Pipe};

/// Most parameters one kernel may have.
pub const MAX_PARAMS: usize = 32;
/// Required alignment of the UB base address in bytes.
pub const UB_ALIGN: usize = 64;

/// What the device offers; the verifier checks kernels against it, and the
/// launch check a launch's block count.
///
/// The three work limits bound what one launch of a verified kernel can
/// make the device do: at most [`DeviceLimits::max_launch_instrs`]
/// instructions (each over at most the kernel's UB), spread over at most
/// [`DeviceLimits::max_blocks`] blocks, so a launch ends in bounded time
/// whatever bytecode it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    /// UB bytes per core.
    pub ub_bytes: u32,
    /// Most blocks one launch may have (the launch check).
    pub max_blocks: u32,
    /// Most instructions one kernel may have, over all its bodies.
    pub max_kernel_instrs: u32,
    /// Most tiles one launch may run, over all the kernel's bodies.
    pub max_tiles: u64,
    /// The instruction budget: most instructions one launch may execute,
    /// the sum over bodies of tiles × instructions per tile.
    pub max_launch_instrs: u64,
}

impl DeviceLimits {
    /// An Ascend 910B-sized UB (192 KiB); 65 535 blocks per launch (the
    /// NPU's largest block dimension); 65 536 instructions per kernel;
    /// 2^32 tiles and 2^32 executed instructions per launch (above what
    /// the compiler emits: its broadcast kernels over odd layouts reach
    /// tens of millions of tiles of a few instructions).
    pub const DEFAULT: DeviceLimits = DeviceLimits {
        ub_bytes: 192 * 1024,
        max_blocks: 65_535,
        max_kernel_instrs: 1 << 16,
        max_tiles: 1 << 32,
        max_launch_instrs: 1 << 32,
    };

    /// The default limits with a UB of `ub_bytes` per core.
    pub const fn with_ub_bytes(ub_bytes: u32) -> DeviceLimits {
        DeviceLimits {
            ub_bytes,
            ..DeviceLimits::DEFAULT
        }
    }
}

impl Default for DeviceLimits {
    fn default() -> Self {
        DeviceLimits::DEFAULT
    }
}

/// The rule a kernel breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rule {
    /// The instruction does not decode.
    #[error("{0}")]
    Decode(DecodeError),
    /// A dtype field holds a type the opcode does not accept.
    #[error("`{opcode}` does not accept {field}={dtype} (allowed: {allowed})", opcode = opcode.mnemonic())]
    DType {
        /// Opcode.
        opcode: Opcode,
        /// Field.
        field: &'static str,
        /// Type found.
        dtype: DType,
        /// Allowed types.
        allowed: DTypeSet,
    },
    /// An illegal dtype combination (cast, matmul).
    #[error("`{}` does not support {from} -> {to}", opcode.mnemonic())]
    DTypePair {
        /// Opcode.
        opcode: Opcode,
        /// Input type.
        from: DType,
        /// Output type.
        to: DType,
    },
    /// A UB range leaves the kernel's declared UB.
    #[error("operand `{field}` covers UB bytes {start}..{end}, outside the kernel's {ub_bytes} UB bytes")]
    UbOutOfRange {
        /// Field.
        field: &'static str,
        /// First byte.
        start: u64,
        /// One past the last byte (saturated).
        end: u64,
        /// Declared UB.
        ub_bytes: u32,
    },
    /// A UB address is not aligned to its element size.
    #[error("operand `{field}` at UB byte {addr} is not aligned to {align} bytes")]
    Misaligned {
        /// Field.
        field: &'static str,
        /// Address.
        addr: u32,
        /// Required alignment.
        align: u32,
    },
    /// Two operand ranges overlap without being identical (or overlap at all
    /// where the opcode needs them disjoint).
    #[error("operands `{a}` and `{b}` overlap in UB")]
    Overlap {
        /// First field.
        a: &'static str,
        /// Second field.
        b: &'static str,
    },
    /// The kernel declares more UB than the device has.
    #[error("kernel needs {need} UB bytes, the device has {have}")]
    KernelUb {
        /// Declared.
        need: u32,
        /// Device.
        have: u32,
    },
    /// A wait flag names the instruction's own pipe, or a control instruction
    /// carries wait flags.
    #[error("wait flags {mask:#06b} are not valid on the {pipe} pipe")]
    BadWait {
        /// The pipe of the instruction.
        pipe: Pipe,
        /// The mask.
        mask: u8,
    },
    /// A body does not end with `end`.
    #[error("body does not end with `end`")]
    MissingEnd,
    /// `end` appears before the last instruction.
    #[error("`end` before the end of the body")]
    EarlyEnd,
    /// An empty grid dimension or a grid with more than 2^32 − 1 tiles.
    #[error("grid {0:?} is empty or has more than 2^32-1 tiles")]
    BadGrid([u32; 3]),
    /// A load or store names a parameter that does not exist.
    #[error("buffer {buf} does not exist (the kernel has {count} parameters)")]
    NoSuchParam {
        /// Index.
        buf: u8,
        /// Parameter count.
        count: u32,
    },
    /// A load or store dtype differs from its parameter's.
    #[error("buffer {buf} holds {param}, the instruction moves {instr}")]
    ParamDType {
        /// Index.
        buf: u8,
        /// Parameter dtype.
        param: DType,
        /// Instruction dtype.
        instr: DType,
    },
    /// A load reads a write-only parameter or a store writes a read-only one.
    #[error("buffer {buf} is declared `{}`; a {kind:?} needs the other access", access.name())]
    ParamAccess {
        /// Index.
        buf: u8,
        /// Declared access.
        access: ParamAccess,
        /// Load or store.
        kind: GmKind,
    },
    /// Inconsistent GM box: zero extents, pitch below cols, a tail dimension
    /// outside the grid, rows and cols driven by the same dimension, or a
    /// total that leaves a tile empty or exceeds the grid.
    #[error("bad global-memory pattern: {0}")]
    BadPattern(&'static str),
    /// The furthest element of a pattern overflows u64.
    #[error("global-memory address arithmetic overflows")]
    GmOverflow,
    /// The instruction needs a feature the module header does not declare.
    #[error("instruction needs feature bits {0:#x} that the module does not declare")]
    UndeclaredFeature(u64),
    /// The kernel kind does not match its bodies or the pipes it uses.
    #[error("{0}")]
    Kind(&'static str),
    /// More instructions than [`DeviceLimits::max_kernel_instrs`].
    #[error("kernel has {count} instructions, the device runs at most {max} per kernel")]
    TooManyInstrs {
        /// Instructions over all bodies.
        count: u64,
        /// The device's limit.
        max: u32,
    },
    /// More tiles than [`DeviceLimits::max_tiles`].
    #[error("kernel has {tiles} tiles over its bodies, the device runs at most {max} per launch")]
    TooManyTiles {
        /// Tiles over all bodies.
        tiles: u64,
        /// The device's limit.
        max: u64,
    },
    /// A launch would execute more instructions than
    /// [`DeviceLimits::max_launch_instrs`].
    #[error("a launch would execute {executed} instructions (tiles x instructions per body), over the device's budget of {max}")]
    InstrBudget {
        /// Instructions one launch executes.
        executed: u64,
        /// The device's budget.
        max: u64,
    },
    /// More parameters than [`MAX_PARAMS`].
    #[error("kernel has {0} parameters, at most 32 are supported")]
    TooManyParams(u32),
    /// A 2-D tile operation (reduce, broadcast, transpose) with zero rows or
    /// columns, a matmul with a zero `m`, `n` or `k`, or a gather with zero
    /// rows, columns or table rows (`extent`: no row to clamp an index
    /// into): their shapes must be non-empty (a reduction of nothing has no
    /// value, and handlers may split tiles into rows of `cols` elements).
    #[error("operand `{0}` is zero: the tile shape must be non-empty")]
    ZeroExtent(&'static str),
}

/// What part of a kernel a [`VerifyError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    /// The kernel's entry in the kernel table (kind, UB bytes, body
    /// count) or the kernel as a whole (features, kind against pipes).
    Entry,
    /// The kernel's parameter table.
    Params,
    /// A body's entry in the body table (its grid).
    Body,
    /// The instruction at a word of a body (or, for a missing `end`, the
    /// end of the body).
    Word,
}

/// A verification failure: where and which rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("kernel {kernel}, {}: {rule}", Where(self))]
pub struct VerifyError {
    /// Kernel index.
    pub kernel: u32,
    /// Body index (0 for kernel-level rules).
    pub body: u32,
    /// Word offset within the body (0 for body- and kernel-level rules).
    pub word: u32,
    /// What the location is: [`VerifyError::body`] and
    /// [`VerifyError::word`] mean something only for the sites that have
    /// them.
    pub site: Site,
    /// The rule broken.
    pub rule: Rule,
}

/// The location part of a [`VerifyError`]'s message.
struct Where<'e>(&'e VerifyError);

impl core::fmt::Display for Where<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let e = self.0;
        match e.site {
            Site::Entry => f.write_str("kernel entry"),
            Site::Params => f.write_str("parameter table"),
            Site::Body => write!(f, "body {} entry", e.body),
            Site::Word => write!(f, "body {}, word {}", e.body, e.word),
        }
    }
}

/// Why a launch was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    /// The number of buffers differs from the kernel's parameter count.
    #[error("kernel takes {expected} buffers, {got} were bound")]
    BufferCount {
        /// Parameters.
        expected: usize,
        /// Buffers.
        got: usize,
    },
    /// A buffer is smaller than the kernel's furthest access into it.
    #[error("buffer {param} has {have} bytes, the kernel accesses {need}")]
    BufferTooSmall {
        /// Parameter.
        param: usize,
        /// Bytes needed.
        need: u64,
        /// Bytes bound.
        have: u64,
    },
    /// A buffer the kernel writes was bound read-only.
    #[error("buffer {param} is written by the kernel but was bound read-only")]
    ReadOnly {
        /// Parameter.
        param: usize,
    },
    /// The UB slice is too small or misaligned.
    #[error("UB of {have} bytes at alignment {align} cannot hold the kernel's {need} bytes (needs 64-byte alignment)")]
    Ub {
        /// Bytes needed.
        need: u32,
        /// Bytes given.
        have: usize,
        /// Alignment of the given base.
        align: usize,
    },
    /// A block index outside the block count, or a zero block count.
    #[error("block {idx} of {dim} does not exist")]
    Block {
        /// Index.
        idx: u32,
        /// Count.
        dim: u32,
    },
    /// More blocks than the device's [`DeviceLimits::max_blocks`].
    #[error("a launch of {dim} blocks exceeds the device's {max}")]
    TooManyBlocks {
        /// Blocks asked for.
        dim: u32,
        /// The device's limit.
        max: u32,
    },
    /// A range of tiles of a sequence kernel, whose stages need the
    /// barriers between them: it runs by blocks.
    #[error("a sequence kernel runs by blocks (its stages need barriers), not by ranges of tiles")]
    Staged,
}

/// A kernel that passed every static rule. Only [`verify_kernel`] builds one.
#[derive(Clone, Copy, Debug)]
pub struct VerifiedKernel<'m> {
    kernel: KernelRef<'m>,
    /// Bytes each parameter must have (furthest access + 1 element).
    need: [u64; MAX_PARAMS],
    /// Whether the tiles may run concurrently ([`crate::tiles`]).
    tiles: Result<(), TileConflict>,
    /// The limits it was verified against.
    limits: DeviceLimits,
}

impl<'m> VerifiedKernel<'m> {
    /// The kernel.
    pub fn kernel(&self) -> &KernelRef<'m> {
        &self.kernel
    }

    /// Kind.
    pub fn kind(&self) -> KernelKind {
        self.kernel.kind
    }

    /// Declared UB bytes.
    pub fn ub_bytes(&self) -> u32 {
        self.kernel.ub_bytes
    }

    /// Number of bodies.
    pub fn body_count(&self) -> usize {
        self.kernel.bodies.len()
    }

    /// Grid of body `b` (zeros when it does not exist).
    pub fn grid(&self, b: usize) -> [u32; 3] {
        self.kernel.bodies.get(b).map_or([0; 3], |e| e.grid())
    }

    /// Tiles of body `b` (the verifier proved the product fits in u32).
    pub fn tiles(&self, b: usize) -> u32 {
        let g = self.grid(b);
        g[0].saturating_mul(g[1]).saturating_mul(g[2])
    }

    /// Number of parameters.
    pub fn param_count(&self) -> usize {
        self.kernel.param_count()
    }

    /// The device limits the kernel was verified against.
    pub fn limits(&self) -> &DeviceLimits {
        &self.limits
    }

    /// Checks a launch's block count against the device's limit.
    ///
    /// # Errors
    /// [`LaunchError::Block`] for zero blocks,
    /// [`LaunchError::TooManyBlocks`] above [`DeviceLimits::max_blocks`].
    pub fn check_blocks(&self, blocks: u32) -> Result<(), LaunchError> {
        check_blocks(blocks, self.limits.max_blocks)
    }

    /// Parameter `i`.
    pub fn param(&self, i: usize) -> Option<Param> {
        self.kernel.param(i)
    }

    /// Bytes parameter `i` must have for every access to stay inside it.
    pub fn required_bytes(&self, i: usize) -> u64 {
        self.need.get(i).copied().unwrap_or(0)
    }

    /// Whether the kernel's tiles may run concurrently, in any split over
    /// any number of cores: no tile writes an element another tile running
    /// beside it reads or writes (proved during verification; see
    /// [`crate::tiles`]).
    ///
    /// # Errors
    /// The first [`TileConflict`] found, naming the body and parameter.
    pub fn tiles_independent(&self) -> Result<(), TileConflict> {
        self.tiles
    }

    /// The decoded instructions of body `b`, with their word offsets.
    /// Verification guarantees every one decodes; iteration stops early
    /// (never panics) if that were ever not so.
    pub fn instrs(&self, b: usize) -> Instrs<'m> {
        Instrs {
            code: self.kernel.body_code(b).unwrap_or(&[]),
            at: 0,
        }
    }

    /// The launch check: every buffer is bound with the right access and is
    /// large enough for the kernel's furthest access into it. `lens[i]` is
    /// the byte length of buffer `i`, `writable[i]` whether it may be written.
    ///
    /// # Errors
    /// A [`LaunchError`] naming the first parameter at fault.
    pub fn check_launch(&self, lens: &[u64], writable: &[bool]) -> Result<(), LaunchError> {
        let n = self.param_count();
        if lens.len() != n || writable.len() != n {
            return Err(LaunchError::BufferCount {
                expected: n,
                got: if lens.len() != n {
                    lens.len()
                } else {
                    writable.len()
                },
            });
        }
        for (i, (&have, &w)) in lens.iter().zip(writable).enumerate() {
            let need = self.need[i];
            if have < need {
                return Err(LaunchError::BufferTooSmall {
                    param: i,
                    need,
                    have,
                });
            }
            if self.param(i).is_some_and(|p| p.access.writable()) && !w {
                return Err(LaunchError::ReadOnly { param: i });
            }
        }
        Ok(())
    }
}

/// Checks a launch of `blocks` blocks against a limit of `max`.
///
/// # Errors
/// [`LaunchError::Block`] for zero blocks, [`LaunchError::TooManyBlocks`]
/// above `max`.
pub fn check_blocks(blocks: u32, max: u32) -> Result<(), LaunchError> {
    if blocks == 0 {
        return Err(LaunchError::Block { idx: 0, dim: 0 });
    }
    if blocks > max {
        return Err(LaunchError::TooManyBlocks { dim: blocks, max });
    }
    Ok(())
}

/// Iterator over a verified body's instructions: `(word offset, head, instr)`.
#[derive(Clone, Debug)]
pub struct Instrs<'m> {
    code: &'m [U64],
    at: usize,
}

impl Iterator for Instrs<'_> {
    type Item = (u32, Head, Instr);
    fn next(&mut self) -> Option<Self::Item> {
        let (head, instr) = Instr::decode(self.code.get(self.at..)?).ok()?;
        let at = self.at as u32;
        self.at += head.len as usize;
        Some((at, head, instr))
    }
}

/// Verifies every kernel of `module`.
///
/// # Errors
/// The first [`VerifyError`].
pub fn verify_module(module: &Module<'_>, limits: &DeviceLimits) -> Result<(), VerifyError> {
    for i in 0..module.kernel_count() {
        verify_kernel(module, i, limits)?;
    }
    Ok(())
}

/// Verifies kernel `index` of `module` against `limits`.
///
/// # Errors
/// A [`VerifyError`] naming the kernel, body, word offset and rule broken.
/// A kernel index outside the table is reported as kernel-level
/// [`Rule::Kind`].
pub fn verify_kernel<'m>(
    module: &Module<'m>,
    index: usize,
    limits: &DeviceLimits,
) -> Result<VerifiedKernel<'m>, VerifyError> {
    verify_kernel_visit(module, index, limits, |_, _, _, _| {})
}

/// [`verify_kernel`], calling `visit(body, word, head, instr)` for every
/// instruction, in order, once it has passed its own checks: a consumer of
/// the decoded instructions (the predecoder) gets them without decoding the
/// code a second time. The kernel is verified only when this returns `Ok`:
/// on an error the caller must discard whatever it built from the visits.
///
/// # Errors
/// As [`verify_kernel`].
pub fn verify_kernel_visit<'m>(
    module: &Module<'m>,
    index: usize,
    limits: &DeviceLimits,
    mut visit: impl FnMut(usize, u32, &Head, &Instr),
) -> Result<VerifiedKernel<'m>, VerifyError> {
    let at = |site: Site, body: usize, word: u32, rule: Rule| VerifyError {
        kernel: index as u32,
        body: body as u32,
        word,
        site,
        rule,
    };
    let err = |body: usize, word: u32, rule: Rule| at(Site::Word, body, word, rule);
    let entry = |rule: Rule| at(Site::Entry, 0, 0, rule);
    let body_err = |body: usize, rule: Rule| at(Site::Body, body, 0, rule);
    let kernel = module
        .kernel(index)
        .ok_or(entry(Rule::Kind("no such kernel")))?;
    if kernel.ub_bytes > limits.ub_bytes {
        return Err(entry(Rule::KernelUb {
            need: kernel.ub_bytes,
            have: limits.ub_bytes,
        }));
    }
    let nparams = kernel.param_count();
    if nparams > MAX_PARAMS {
        return Err(at(Site::Params, 0, 0, Rule::TooManyParams(nparams as u32)));
    }
    let nbodies = kernel.bodies.len();
    if nbodies == 0 || (kernel.kind.single_body() && nbodies != 1) {
        return Err(entry(Rule::Kind(
            "vector, cube and mix kernels have one body; parallel and sequence at least one",
        )));
    }
    if nbodies > 1 && module.features() & features::MULTI_BODY == 0 {
        return Err(entry(Rule::UndeclaredFeature(features::MULTI_BODY)));
    }
    let mut v = VerifiedKernel {
        kernel,
        need: [0; MAX_PARAMS],
        tiles: Ok(()),
        limits: *limits,
    };
    let (mut instrs, mut tiles_total, mut executed) = (0u64, 0u64, 0u64);
    let mut tiles = Tracker::new();
    let staged = kernel.kind == KernelKind::Sequence;
    let (mut vector, mut cube) = (false, false);
    for b in 0..nbodies {
        let grid = kernel.bodies[b].grid();
        let body_tiles = grid
            .iter()
            .try_fold(
                1u32,
                |acc, g| if *g == 0 { None } else { acc.checked_mul(*g) },
            )
            .ok_or(body_err(b, Rule::BadGrid(grid)))?;
        tiles_total += u64::from(body_tiles);
        if tiles_total > limits.max_tiles {
            return Err(body_err(
                b,
                Rule::TooManyTiles {
                    tiles: tiles_total,
                    max: limits.max_tiles,
                },
            ));
        }
        let mut body_instrs = 0u64;
        let code = kernel.body_code(b).unwrap_or(&[]);
        let mut at = 0usize;
        let mut ended = false;
        while at < code.len() {
            let word = at as u32;
            if ended {
                return Err(err(b, word, Rule::EarlyEnd));
            }
            let (head, instr) =
                Instr::decode(&code[at..]).map_err(|e| err(b, word, Rule::Decode(e)))?;
            body_instrs += 1;
            instrs += 1;
            if instrs > u64::from(limits.max_kernel_instrs) {
                return Err(err(
                    b,
                    word,
                    Rule::TooManyInstrs {
                        count: instrs,
                        max: limits.max_kernel_instrs,
                    },
                ));
            }
            let gm = check_instr(&head, &instr, &kernel, module.features(), grid, &mut v.need)
                .map_err(|r| err(b, word, r))?;
            if let Some((gm, last)) = gm {
                tiles.add(b as u32, grid, gm.kind, &gm.pattern, last);
            }
            visit(b, word, &head, &instr);
            match instr.opcode().pipe() {
                Pipe::Vector => vector = true,
                Pipe::Cube => cube = true,
                _ => {}
            }
            ended = instr.opcode() == Opcode::End;
            at += head.len as usize;
        }
        if !ended {
            return Err(err(b, code.len() as u32, Rule::MissingEnd));
        }
        // At most 2^32 tiles times 2^32 instructions: no overflow in u64
        // per body, saturating over bodies.
        executed = executed.saturating_add(u64::from(body_tiles) * body_instrs);
        if executed > limits.max_launch_instrs {
            return Err(body_err(
                b,
                Rule::InstrBudget {
                    executed,
                    max: limits.max_launch_instrs,
                },
            ));
        }
        if staged {
            tiles.close_stage();
        }
    }
    tiles.close_stage();
    v.tiles = tiles.result();
    let kind_ok = match kernel.kind {
        KernelKind::Vector => !cube,
        KernelKind::Cube => cube && !vector,
        KernelKind::Mix => cube,
        KernelKind::Parallel | KernelKind::Sequence => true,
    };
    if !kind_ok {
        return Err(entry(Rule::Kind(
            "kind disagrees with the pipes used (vector: no matmul; cube: matmul, no vector ops; mix: matmul)",
        )));
    }
    Ok(v)
}

fn check_instr(
    head: &Head,
    instr: &Instr,
    kernel: &KernelRef<'_>,
    declared: u64,
    grid: [u32; 3],
    need: &mut [u64; MAX_PARAMS],
) -> Result<Option<(GmAccess, u64)>, Rule> {
    let op = instr.opcode();
    // Wait flags.
    let pipe = op.pipe();
    if (pipe == Pipe::Control && !head.wait.is_empty()) || head.wait.waits_for(pipe) {
        return Err(Rule::BadWait {
            pipe,
            mask: head.wait.bits(),
        });
    }
    // Features (those of `instr_features`, gathered in the same pass over
    // the dtype fields as their rules), then dtypes.
    let mut needed = opcode_features(op);
    let mut bad = None;
    instr.dtype_rules(|field, dtype, allowed| {
        needed |= dtype_features(dtype);
        if bad.is_none() && !allowed.contains(dtype) {
            bad = Some(Rule::DType {
                opcode: op,
                field,
                dtype,
                allowed,
            });
        }
    });
    let missing = needed & !declared;
    if missing != 0 {
        return Err(Rule::UndeclaredFeature(missing));
    }
    if let Some(rule) = bad {
        return Err(rule);
    }
    if let Instr::Matmul { dt, out, .. } = *instr {
        let ok = match dt {
            DType::I8 => out == DType::I32,
            _ => out.is_float(),
        };
        if !ok {
            return Err(Rule::DTypePair {
                opcode: op,
                from: dt,
                to: out,
            });
        }
    }
    // Shapes of 2-D operations.
    if let Some(field) = zero_extent(instr) {
        return Err(Rule::ZeroExtent(field));
    }
    // UB ranges: aligned and inside the kernel's UB.
    let accesses = instr.ub_accesses();
    let accesses = accesses.as_slice();
    for a in accesses {
        let align = a.dtype.size();
        if a.addr % align != 0 {
            return Err(Rule::Misaligned {
                field: a.field,
                addr: a.addr,
                align,
            });
        }
        let end = a.end().unwrap_or(u64::MAX);
        if end > kernel.ub_bytes as u64 {
            return Err(Rule::UbOutOfRange {
                field: a.field,
                start: a.addr as u64,
                end,
                ub_bytes: kernel.ub_bytes,
            });
        }
    }
    // Every pair of ranges where one is written: disjoint, or identical for
    // element-wise instructions (a read and a write of the same elements).
    // The list holds every access of the table's row (its capacity is the
    // longest row), so every pair is checked.
    let elementwise = is_elementwise(op);
    for (i, x) in accesses.iter().enumerate() {
        for y in &accesses[i + 1..] {
            if x.kind == AccessKind::Read && y.kind == AccessKind::Read {
                continue;
            }
            let (xs, xe) = (x.addr as u64, x.end().unwrap_or(u64::MAX));
            let (ys, ye) = (y.addr as u64, y.end().unwrap_or(u64::MAX));
            let disjoint = xe <= ys || ye <= xs;
            let identical = xs == ys && xe == ye && x.dtype.size() == y.dtype.size();
            let both_write = x.kind == AccessKind::Write && y.kind == AccessKind::Write;
            if !(disjoint || (identical && elementwise && !both_write)) {
                return Err(Rule::Overlap {
                    a: x.field,
                    b: y.field,
                });
            }
        }
    }
    // Global memory.
    match instr.gm() {
        Some(gm) => Ok(check_gm(&gm, kernel, grid, need)?.map(|last| (gm, last))),
        None => Ok(None),
    }
}

/// The first zero extent of a 2-D tile operation or matmul, if any.
fn zero_extent(instr: &Instr) -> Option<&'static str> {
    let first_zero = |fields: &[(&'static str, u32)]| fields.iter().find(|f| f.1 == 0).map(|f| f.0);
    match *instr {
        Instr::ReduceSum { rows, cols, .. }
        | Instr::ReduceMax { rows, cols, .. }
        | Instr::ReduceMin { rows, cols, .. }
        | Instr::BroadcastRow { rows, cols, .. }
        | Instr::BroadcastCol { rows, cols, .. }
        | Instr::Transpose { rows, cols, .. } => first_zero(&[("rows", rows), ("cols", cols)]),
        Instr::Matmul { m, n, k, .. } => first_zero(&[("m", m), ("n", n), ("k", k)]),
        Instr::Gather {
            rows, cols, extent, ..
        } => first_zero(&[("rows", rows), ("cols", cols), ("extent", extent)]),
        _ => None,
    }
}

/// Element-wise instructions may run in place (identical ranges); the
/// others need disjoint operands.
fn is_elementwise(op: Opcode) -> bool {
    use Opcode::*;
    !matches!(
        op,
        ReduceSum
            | ReduceMax
            | ReduceMin
            | BroadcastRow
            | BroadcastCol
            | Transpose
            | Matmul
            | Gather
    )
}

/// Checks a load's or store's global-memory side and raises its
/// parameter's required bytes; returns the furthest element it touches
/// when its parameter is writable (what [`Tracker`] needs).
fn check_gm(
    gm: &GmAccess,
    kernel: &KernelRef<'_>,
    grid: [u32; 3],
    need: &mut [u64; MAX_PARAMS],
) -> Result<Option<u64>, Rule> {
    let p = &gm.pattern;
    let count = kernel.param_count() as u32;
    let param = kernel
        .param(p.buf as usize)
        .ok_or(Rule::NoSuchParam { buf: p.buf, count })?;
    if param.dtype != p.dtype {
        return Err(Rule::ParamDType {
            buf: p.buf,
            param: param.dtype,
            instr: p.dtype,
        });
    }
    let access_ok = match gm.kind {
        GmKind::Load | GmKind::Gather => param.access.readable(),
        GmKind::Store | GmKind::StoreAdd => param.access.writable(),
    };
    if !access_ok {
        return Err(Rule::ParamAccess {
            buf: p.buf,
            access: param.access,
            kind: gm.kind,
        });
    }
    let last = furthest_element(p, grid)?;
    let bytes = last
        .checked_add(1)
        .and_then(|e| e.checked_mul(p.dtype.size() as u64))
        .ok_or(Rule::GmOverflow)?;
    let slot = &mut need[p.buf as usize];
    *slot = (*slot).max(bytes);
    Ok(param.access.writable().then_some(last))
}

/// The largest element offset any tile of `grid` touches through `p`,
/// in O(1): the origin is affine and non-decreasing in each coordinate, and
/// only the last tile along a tail dimension is shorter, so each coordinate's
/// maximum is reached at its last or second-to-last value.
///
/// # Errors
/// [`Rule::BadGrid`] for a grid with an empty dimension,
/// [`Rule::BadPattern`] for an inconsistent box (zero extents, pitch below
/// cols, a tail driven by a dimension outside the grid or by the same
/// dimension on both sides, totals that leave a tile empty or exceed the
/// grid), [`Rule::GmOverflow`] when the furthest offset overflows `u64`.
pub fn furthest_element(p: &GmPattern, grid: [u32; 3]) -> Result<u64, Rule> {
    if grid.contains(&0) {
        return Err(Rule::BadGrid(grid));
    }
    if p.row_dim.index().is_some_and(|d| d > 2) || p.col_dim.index().is_some_and(|d| d > 2) {
        return Err(Rule::BadPattern("tail driven by a grid dimension above 2"));
    }
    if p.rows == 0 || p.cols == 0 {
        return Err(Rule::BadPattern("rows and cols must be at least 1"));
    }
    if p.pitch < p.cols {
        return Err(Rule::BadPattern("pitch is smaller than cols"));
    }
    if p.row_dim != GridDim::None && p.row_dim == p.col_dim {
        return Err(Rule::BadPattern(
            "rows and cols are driven by the same grid dimension",
        ));
    }
    let mut total: u64 = p.base;
    let add = |a: u64, b: u64| a.checked_add(b).ok_or(Rule::GmOverflow);
    let mul = |a: u64, b: u64| a.checked_mul(b).ok_or(Rule::GmOverflow);
    // Contribution of one side (rows or cols): the furthest
    // `step[d]·c + (extent(c) − 1)·stride` over the coordinates of its grid dim.
    let side = |dim: GridDim,
                full: u32,
                tot: u32,
                stride: u64|
     -> Result<(Option<usize>, u64), Rule> {
        match dim.index() {
            None => Ok((None, mul((full - 1) as u64, stride)?)),
            Some(d) => {
                let g = grid[d] as u64;
                let full64 = full as u64;
                let tot64 = tot as u64;
                // Every tile non-empty, the last no longer than a full tile.
                if tot64 <= (g - 1) * full64 || tot64 > g * full64 {
                    return Err(Rule::BadPattern(
                        "row/col total does not match the grid: a tile would be empty or the total exceeds the grid",
                    ));
                }
                let step = p.step[d];
                let tail = tot64 - (g - 1) * full64;
                let last = add(mul(step, g - 1)?, mul(tail - 1, stride)?)?;
                let before = if g >= 2 {
                    add(mul(step, g - 2)?, mul(full64 - 1, stride)?)?
                } else {
                    0
                };
                Ok((Some(d), last.max(before)))
            }
        }
    };
    let (rd, rmax) = side(p.row_dim, p.rows, p.row_total, p.row_stride)?;
    let (cd, cmax) = side(p.col_dim, p.cols, p.col_total, p.col_stride)?;
    total = add(total, rmax)?;
    total = add(total, cmax)?;
    for (d, (&step, &g)) in p.step.iter().zip(&grid).enumerate() {
        if Some(d) == rd || Some(d) == cd {
            continue;
        }
        total = add(total, mul(step, g as u64 - 1)?)?;
    }
    Ok(total)
}
