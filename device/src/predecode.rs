//! Predecoding: a [`VerifiedKernel`] becomes a [`Program`] of virtual
//! instructions once, before any tile runs.
//!
//! UB instructions (vector and cube pipes) are resolved to their handler by
//! [`crate::ops::resolve`]; loads and stores keep their [`GmPattern`](dvm_isa::GmPattern) (and
//! the pad value converted to the element type); `barrier` stays as a no-op
//! marker for the simulator; `end` is dropped. The program owns everything
//! it needs (grids, the launch signature), so the module bytes may go away
//! after predecode.

use core::fmt;

use dvm_isa::{
    verify_kernel_visit, DeviceLimits, GmKind, Head, Instr, KernelKind, Module, Opcode, PadMode,
    Pipe, VerifiedKernel, VerifyError,
};

use crate::forward::Forward;
use crate::gm::{pad_bits, ParamSig, StoreMap, STREAM_MIN_BYTES};
use crate::ops;
use crate::peephole;
use crate::plan::{BodyPlan, FusedForms, FusedLoad};
pub use crate::vinstr::VInstr;

/// Default instruction capacity of a [`Program`] (all bodies together).
pub const DEFAULT_INSTRS: usize = 256;
/// Default body capacity of a [`Program`].
pub const DEFAULT_BODIES: usize = 16;

/// One body of a program: its grid, its plan and its range of
/// instructions.
#[derive(Clone, Copy, Debug)]
pub struct BodyInfo {
    /// Tile grid (row-major, dimension 2 fastest).
    pub grid: [u32; 3],
    /// Number of tiles (the verifier proved it fits in `u32`).
    pub tiles: u32,
    /// How its full tiles run, decided at predecode.
    pub plan: BodyPlan,
    start: u32,
    len: u32,
}

impl BodyInfo {
    /// Index of the streaming store that prefetches the next tile's loads
    /// (the body's last streaming store), if any ([`BodyPlan::prefetch_at`]).
    pub fn prefetch_at(&self) -> Option<u32> {
        self.plan.prefetch_at
    }

    /// The body's forwarding plan, if its full tiles run straight over
    /// global memory ([`crate::forward`]).
    pub fn forward(&self) -> Option<Forward> {
        self.plan.forward
    }

    /// The load whose full tiles run fused with the fold after it
    /// ([`crate::loadfold`]).
    pub fn load_fold(&self) -> Option<u8> {
        self.plan.load.map(|l| l.fold().at)
    }

    /// Whether the instruction after that fold then reads the loaded tile
    /// from global memory, so full tiles skip the copy into UB
    /// ([`FusedLoad::SoftmaxGm`] or more).
    pub fn load_map(&self) -> bool {
        matches!(
            self.plan.load,
            Some(FusedLoad::SoftmaxGm(..) | FusedLoad::SoftmaxRows(..))
        )
    }

    /// Whether, after that instruction, an element-wise op on its row folds
    /// and a scaled store of its box run with it a row at a time
    /// ([`FusedLoad::SoftmaxRows`]).
    pub fn load_rows(&self) -> bool {
        matches!(self.plan.load, Some(FusedLoad::SoftmaxRows(..)))
    }

    /// The first of two loads whose full tiles run fused with the binary op
    /// and row sums after them ([`crate::plan::LoadPair`]).
    pub fn load_pair(&self) -> Option<u8> {
        self.plan.pair.map(|p| p.at)
    }
}

/// Why a kernel could not be predecoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PredecodeError {
    /// The kernel's instructions do not fit the program's capacity.
    TooManyInstrs {
        /// Body being decoded when capacity ran out.
        body: u32,
        /// Instruction capacity.
        cap: usize,
    },
    /// The kernel has more bodies than the program's capacity.
    TooManyBodies {
        /// Bodies in the kernel.
        count: usize,
        /// Body capacity.
        cap: usize,
    },
    /// No handler exists for a UB instruction (opcode and dtype).
    Unsupported {
        /// Body.
        body: u32,
        /// Word offset in the body.
        word: u32,
        /// Opcode.
        opcode: Opcode,
    },
}

impl fmt::Display for PredecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PredecodeError::TooManyInstrs { body, cap } => write!(
                f,
                "body {body}: the kernel has more than {cap} instructions, the program's capacity"
            ),
            PredecodeError::TooManyBodies { count, cap } => {
                write!(
                    f,
                    "the kernel has {count} bodies, the program holds at most {cap}"
                )
            }
            PredecodeError::Unsupported { body, word, opcode } => write!(
                f,
                "body {body}, word {word}: no handler for `{}` with these dtypes",
                opcode.mnemonic()
            ),
        }
    }
}

impl core::error::Error for PredecodeError {}

/// Why [`Program::verify_and_predecode`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// The kernel does not verify.
    Verify(VerifyError),
    /// The kernel verifies but does not fit the program.
    Predecode(PredecodeError),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Verify(e) => write!(f, "{e}"),
            LoadError::Predecode(e) => write!(f, "{e}"),
        }
    }
}

impl core::error::Error for LoadError {}

#[cfg(feature = "defmt")]
impl defmt::Format for PredecodeError {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "{}", defmt::Display2Format(self))
    }
}

/// A predecoded kernel: at most `N` virtual instructions over at most `B`
/// bodies, no references to the module.
///
/// About 100 bytes per instruction; build it in place with
/// [`Program::empty`] and [`Program::predecode`] where the stack is small.
#[derive(Clone, Debug)]
pub struct Program<const N: usize = DEFAULT_INSTRS, const B: usize = DEFAULT_BODIES> {
    peephole: bool,
    kind: KernelKind,
    ub_bytes: u32,
    params: ParamSig,
    independent: bool,
    /// Most blocks a launch may have ([`DeviceLimits::max_blocks`] of the
    /// limits the kernel was verified against).
    max_blocks: u32,
    bodies: heapless::Vec<BodyInfo, B>,
    code: heapless::Vec<VInstr, N>,
}

impl<const N: usize, const B: usize> Default for Program<N, B> {
    fn default() -> Self {
        Program::empty()
    }
}

impl<const N: usize, const B: usize> Program<N, B> {
    /// A program with no bodies (runs nothing); fill it with
    /// [`Program::predecode`].
    pub const fn empty() -> Program<N, B> {
        Program {
            peephole: true,
            kind: KernelKind::Vector,
            ub_bytes: 0,
            params: ParamSig::EMPTY,
            independent: false,
            max_blocks: 0,
            bodies: heapless::Vec::new(),
            code: heapless::Vec::new(),
        }
    }

    /// Initialises an empty program in `slot`, field by field, so a boxed or
    /// static program is never built on the stack and copied (the
    /// instruction capacity stays uninitialised, as in [`Program::empty`]).
    pub fn init(slot: &mut core::mem::MaybeUninit<Self>) -> &mut Self {
        let p = slot.as_mut_ptr();
        // SAFETY: every field is written exactly once through a raw pointer
        // into `slot` (no reference to uninitialised memory is formed), so
        // the program is fully initialised when the reference is created.
        unsafe {
            core::ptr::addr_of_mut!((*p).peephole).write(true);
            core::ptr::addr_of_mut!((*p).kind).write(KernelKind::Vector);
            core::ptr::addr_of_mut!((*p).ub_bytes).write(0);
            core::ptr::addr_of_mut!((*p).params).write(ParamSig::EMPTY);
            core::ptr::addr_of_mut!((*p).independent).write(false);
            core::ptr::addr_of_mut!((*p).max_blocks).write(0);
            core::ptr::addr_of_mut!((*p).bodies).write(heapless::Vec::new());
            core::ptr::addr_of_mut!((*p).code).write(heapless::Vec::new());
            slot.assume_init_mut()
        }
    }

    /// Predecodes `kernel`.
    ///
    /// # Errors
    /// A [`PredecodeError`] when the kernel exceeds the capacity or uses an
    /// instruction without a handler.
    pub fn new(kernel: &VerifiedKernel<'_>) -> Result<Program<N, B>, PredecodeError> {
        let mut p = Program::empty();
        p.predecode(kernel)?;
        Ok(p)
    }

    /// Whether later predecodes fuse instruction pairs into
    /// superinstructions ([`crate::peephole`]; on by default). Off, every
    /// instruction keeps its own handler: the same results, for tests and
    /// comparisons.
    pub fn set_peephole(&mut self, on: bool) {
        self.peephole = on;
    }

    /// Replaces the program with the predecoded `kernel`. On error the
    /// program is left empty.
    ///
    /// # Errors
    /// As [`Program::new`].
    pub fn predecode(&mut self, kernel: &VerifiedKernel<'_>) -> Result<(), PredecodeError> {
        let r = self.fill(kernel);
        if r.is_err() {
            self.clear();
        }
        r
    }

    /// Verifies kernel `index` of `module` (exactly [`verify_kernel`]'s
    /// rules) and predecodes it from the same pass over the code, so every
    /// instruction is decoded once. The program holds the kernel only when
    /// both succeed; on any error it is left empty.
    ///
    /// # Errors
    /// [`LoadError::Verify`] when the kernel does not verify (checked
    /// first), else [`LoadError::Predecode`] as [`Program::predecode`].
    ///
    /// [`verify_kernel`]: dvm_isa::verify_kernel
    pub fn verify_and_predecode<'m>(
        &mut self,
        module: &Module<'m>,
        index: usize,
        limits: &DeviceLimits,
    ) -> Result<VerifiedKernel<'m>, LoadError> {
        self.bodies.clear();
        self.code.clear();
        let mut starts = [0u32; B];
        let mut failed: Option<PredecodeError> = None;
        // Stores are lowered without the parameter sizes (known only once
        // the whole kernel is verified); `finish` sets their `stream` flag.
        let no_sizes = ParamSig::EMPTY;
        let visit = |b: usize, word: u32, _: &Head, instr: &Instr| {
            if failed.is_some() || b >= B {
                return;
            }
            if word == 0 {
                starts[b] = self.code.len() as u32;
            }
            if let Err(e) = self.push(b, word, instr, &no_sizes) {
                failed = Some(e);
            }
        };
        let r = match verify_kernel_visit(module, index, limits, visit) {
            Err(e) => Err(LoadError::Verify(e)),
            Ok(kernel) => {
                let count = kernel.body_count();
                if count > B {
                    Err(LoadError::Predecode(PredecodeError::TooManyBodies {
                        count,
                        cap: B,
                    }))
                } else if let Some(e) = failed {
                    Err(LoadError::Predecode(e))
                } else {
                    self.finish(&kernel, &starts);
                    Ok(kernel)
                }
            }
        };
        if r.is_err() {
            self.clear();
        }
        r
    }

    /// Empties the program, keeping its options.
    fn clear(&mut self) {
        let peephole = self.peephole;
        *self = Program::empty();
        self.peephole = peephole;
    }

    fn fill(&mut self, kernel: &VerifiedKernel<'_>) -> Result<(), PredecodeError> {
        self.bodies.clear();
        self.code.clear();
        let count = kernel.body_count();
        if count > B {
            return Err(PredecodeError::TooManyBodies { count, cap: B });
        }
        let params = ParamSig::of(kernel);
        let mut starts = [0u32; B];
        for (b, start) in starts.iter_mut().enumerate().take(count) {
            *start = self.code.len() as u32;
            for (word, _head, instr) in kernel.instrs(b) {
                self.push(b, word, &instr, &params)?;
            }
        }
        self.finish(kernel, &starts);
        Ok(())
    }

    /// Lowers `instr` (body `b`, word `word`) and appends it.
    fn push(
        &mut self,
        b: usize,
        word: u32,
        instr: &Instr,
        params: &ParamSig,
    ) -> Result<(), PredecodeError> {
        let v = match lower(instr, params) {
            Lowered::V(v) => v,
            Lowered::Skip => return Ok(()),
            Lowered::Unsupported => {
                return Err(PredecodeError::Unsupported {
                    body: b as u32,
                    word,
                    opcode: instr.opcode(),
                })
            }
        };
        self.code
            .push(v)
            .map_err(|_| PredecodeError::TooManyInstrs {
                body: b as u32,
                cap: N,
            })
    }

    /// Sets the header fields and the stores' `stream` flags from the
    /// verified `kernel` and records its bodies, body `b`'s instructions
    /// starting at `starts[b]` (the caller checked `body_count() <= B`).
    fn finish(&mut self, kernel: &VerifiedKernel<'_>, starts: &[u32; B]) {
        self.kind = kernel.kind();
        self.ub_bytes = kernel.ub_bytes();
        self.params = ParamSig::of(kernel);
        self.independent = kernel.tiles_independent().is_ok();
        self.max_blocks = kernel.limits().max_blocks;
        let params = self.params;
        for v in self.code.iter_mut() {
            if let VInstr::Store {
                pattern, stream, ..
            } = v
            {
                *stream = params.required_bytes(pattern.buf as usize) >= STREAM_MIN_BYTES;
            }
        }
        let count = kernel.body_count().min(B);
        // Body `b` is `starts[b]..starts[b + 1]`, the last one up to `len`.
        let bounds = |starts: &[u32; B], b: usize, len: usize| {
            let end = if b + 1 < count {
                starts[b + 1] as usize
            } else {
                len
            };
            (starts[b] as usize, end)
        };
        // Superinstructions, each body compacted in place.
        let mut starts = *starts;
        if self.peephole {
            let (len, mut w) = (self.code.len(), 0);
            let mut fused = [0u32; B];
            // Where each body is now: bodies before `b` compacted, the rest
            // where they were.
            let mut at = [(0usize, 0usize); B];
            for (b, a) in at.iter_mut().enumerate().take(count) {
                *a = bounds(&starts, b, len);
            }
            for b in 0..count {
                fused[b] = w as u32;
                let mut others = [(0usize, 0usize); B];
                let mut n = 0;
                for (o, &r) in at.iter().enumerate().take(count) {
                    if o != b {
                        others[n] = r;
                        n += 1;
                    }
                }
                let end = peephole::fuse_body(&mut self.code, at[b], w, &others[..n]);
                at[b] = (w, end);
                w = end;
            }
            self.code.truncate(w);
            starts = fused;
        }
        let len = self.code.len();
        for b in 0..count {
            let (start, end) = bounds(&starts, b, len);
            let code = &self.code[start..end];
            let others = (0..count)
                .filter(move |&o| o != b)
                .map(|o| bounds(&starts, o, len))
                .map(|(s, e)| &self.code[s..e]);
            let plan = BodyPlan::decide(code, others);
            let (start, end) = (start as u32, end as u32);
            // Cannot fail: at most `B` bodies.
            let _ = self.bodies.push(BodyInfo {
                grid: kernel.grid(b),
                tiles: kernel.tiles(b),
                plan,
                start,
                len: end - start,
            });
        }
    }

    /// Kernel kind.
    pub fn kind(&self) -> KernelKind {
        self.kind
    }

    /// UB bytes the kernel needs.
    pub fn ub_bytes(&self) -> u32 {
        self.ub_bytes
    }

    /// What the kernel needs from its buffers.
    pub fn params(&self) -> &ParamSig {
        &self.params
    }

    /// Whether the kernel's tiles may run on several cores at once, in
    /// any split ([`VerifiedKernel::tiles_independent`] proved that no
    /// tile writes what another reads or writes). A multi-core executor
    /// runs any other kernel on one core.
    pub fn tiles_independent(&self) -> bool {
        self.independent
    }

    /// Most blocks one launch of this program may have.
    pub fn max_blocks(&self) -> u32 {
        self.max_blocks
    }

    /// Number of bodies.
    pub fn body_count(&self) -> usize {
        self.bodies.len()
    }

    /// Body `b`'s grid, tile count and plan.
    pub fn body_info(&self, b: usize) -> Option<&BodyInfo> {
        self.bodies.get(b)
    }

    /// Body `b`'s plan: how its full tiles run ([`BodyPlan`]).
    pub fn body_plan(&self, b: usize) -> Option<&BodyPlan> {
        self.bodies.get(b).map(|i| &i.plan)
    }

    /// The fused forms body `b` runs in: its plan's and its
    /// superinstructions' ([`BodyPlan::forms`]); empty when the body does
    /// not exist.
    ///
    /// These are predecode's decisions. At launch a form that reads a
    /// loaded buffer in place is dropped when that buffer overlaps a
    /// written one ([`BodyPlan::launched`]), and tiles with a tail or
    /// padding run the instructions one by one; the results are the same
    /// either way.
    ///
    /// ```
    /// # use dvm_device::{FusedForm, Program};
    /// let p: Program = Program::empty();
    /// assert!(p.fused_forms(0).is_empty());
    /// assert_eq!(FusedForm::SoftmaxGm.name(), "softmax_gm");
    /// ```
    pub fn fused_forms(&self, b: usize) -> FusedForms {
        self.bodies
            .get(b)
            .map_or(FusedForms::EMPTY, |i| i.plan.forms(self.body(b)))
    }

    /// [`Program::fused_forms`] of every body, in order.
    pub fn plan_summary(&self) -> impl Iterator<Item = FusedForms> + '_ {
        (0..self.bodies.len()).map(|b| self.fused_forms(b))
    }

    /// Body `b`'s virtual instructions (empty when it does not exist).
    pub fn body(&self, b: usize) -> &[VInstr] {
        self.bodies
            .get(b)
            .and_then(|i| self.code.get(i.start as usize..(i.start + i.len) as usize))
            .unwrap_or(&[])
    }

    /// Tiles over all bodies.
    pub fn total_tiles(&self) -> u64 {
        self.bodies.iter().map(|b| b.tiles as u64).sum()
    }

    /// Virtual instructions over all bodies.
    pub fn instr_count(&self) -> usize {
        self.code.len()
    }

    /// Runs every tile through UB, forwarding none ([`crate::forward`]):
    /// the same results, for comparisons and benchmarks.
    pub fn disable_forwarding(&mut self) {
        for b in self.bodies.iter_mut() {
            b.plan.forward = None;
        }
    }

    /// Runs every load on its own, apart from the fold or the binary op
    /// after it ([`crate::loadfold`]): the same results, for comparisons
    /// and benchmarks.
    pub fn disable_load_fold(&mut self) {
        for b in self.bodies.iter_mut() {
            b.plan.load = None;
            b.plan.pair = None;
        }
    }

    /// Keeps the fused load and fold but copies every tile into UB for the
    /// instruction after them ([`crate::loadfold::plan_map`]): the same
    /// results, for comparisons and benchmarks.
    pub fn disable_load_map(&mut self) {
        for b in self.bodies.iter_mut() {
            if let Some(l) = &mut b.plan.load {
                *l = FusedLoad::FoldCols(*l.fold());
            }
        }
    }

    /// Keeps the map after the fused load and fold reading global memory,
    /// but runs it, the op on its folds and the scaled store each over the
    /// whole tile ([`crate::loadfold::plan_rows`]): the same results, for
    /// comparisons and benchmarks.
    pub fn disable_load_rows(&mut self) {
        for b in self.bodies.iter_mut() {
            if let Some(FusedLoad::SoftmaxRows(fold, map, _)) = b.plan.load {
                b.plan.load = Some(FusedLoad::SoftmaxGm(fold, map));
            }
        }
    }
}

enum Lowered {
    V(VInstr),
    Skip,
    Unsupported,
}

/// Lowers one decoded instruction, by its pipe (every pipe has an arm):
/// UB-only instructions through [`ops::resolve`] (the device's dispatch
/// table, exhaustive over the opcodes), loads and stores through their
/// global-memory access, `barrier` to a marker and `end` to nothing.
fn lower(instr: &Instr, params: &ParamSig) -> Lowered {
    match instr.opcode().pipe() {
        Pipe::Vector | Pipe::Cube => match ops::resolve(instr) {
            Some(op) => Lowered::V(VInstr::Ub(op)),
            None => Lowered::Unsupported,
        },
        Pipe::Load | Pipe::Store => {
            let Some(gm) = instr.gm() else {
                return Lowered::Unsupported;
            };
            match (gm.kind, instr) {
                (GmKind::Load, Instr::Load { dt, pad, padv, .. }) => Lowered::V(VInstr::Load {
                    pattern: gm.pattern,
                    pad: match pad {
                        PadMode::Keep => None,
                        PadMode::Fill => Some(pad_bits(*dt, *padv)),
                    },
                }),
                (GmKind::Load, _) => Lowered::Unsupported,
                (GmKind::Gather, Instr::Gather { idx, rows, .. }) => Lowered::V(VInstr::Gather {
                    table: gm.pattern,
                    idx: *idx,
                    rows: *rows,
                }),
                (GmKind::Gather, _) => Lowered::Unsupported,
                (GmKind::Store, _) => Lowered::V(VInstr::Store {
                    pattern: gm.pattern,
                    stream: params.required_bytes(gm.pattern.buf as usize) >= STREAM_MIN_BYTES,
                    map: StoreMap::Copy,
                }),
                (GmKind::StoreAdd, _) => Lowered::V(VInstr::StoreAdd(gm.pattern)),
            }
        }
        Pipe::Control => match instr {
            Instr::Barrier {} => Lowered::V(VInstr::Barrier),
            Instr::End {} => Lowered::Skip,
            // A control instruction the executor does not know.
            _ => Lowered::Unsupported,
        },
    }
}
