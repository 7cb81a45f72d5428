//! A compiled, verified, predecoded kernel ready to launch, and the one-call
//! path from a [`Group`] to it.
//!
//! [`build`] is the kernel cache's miss path. It compiles into per-thread
//! scratch (see [`crate::codegen::Scratch`]) and writes the module straight
//! from it, so a warm build allocates only its output: the `Arc` of the
//! [`ReadyKernel`], the module bytes (allocated once at their final size)
//! and the boxed [`Program`] (`host/tests/compile_alloc.rs` checks it).

use std::cell::RefCell;
use std::sync::Arc;

use dvm_device::predecode::{LoadError, PredecodeError, Program};
use dvm_isa::builder::{
    write_module, BodyDef, CodeWriter, KernelDef, ModuleBuilder, ModuleParts, ParamDef,
};
use dvm_isa::meta::MetaWriter;
use dvm_isa::module::{BodyEntry, KernelEntry, ParamEntry};
use dvm_isa::VerifyError;
use dvm_isa::{DeviceLimits, KernelKind, Module, ParamAccess, ParseError, Rule};
use zerocopy::little_endian::U32;

use crate::codegen::{compile_into, CompileError, Compiled, Group, Scratch, Target, BODY_WORDS};

/// Why a group did not become a runnable kernel.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The compiler refused the group.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// The module did not parse (a compiler bug, reported).
    #[error("compiled module does not parse: {0}")]
    Parse(#[from] ParseError),
    /// The kernel did not verify (a compiler bug, reported).
    #[error("compiled kernel does not verify: {0}")]
    Verify(#[from] VerifyError),
    /// The module builder refused the kernel (a compiler bug, reported).
    #[error("kernel cannot be added to a module: {0}")]
    Build(#[from] dvm_isa::builder::BuildError),
    /// The kernel does not fit the executor's program capacity.
    #[error("kernel does not fit the executor: {0}")]
    Predecode(PredecodeError),
    /// The kernel is beyond the device's work limits (tiles, instructions,
    /// the instruction budget: `DeviceLimits`): the shapes are too large
    /// for one launch.
    #[error("kernel exceeds the device's work limits: {}", .0.rule)]
    Limits(VerifyError),
}

/// A kernel ready to launch: the module bytes (for `dvm compile`), the
/// predecoded program, and what the compiler reported.
pub struct ReadyKernel {
    /// The module holding the kernel (its only kernel).
    pub module: Vec<u8>,
    /// The predecoded program.
    pub program: Box<Program>,
    /// Kind, tiling and traffic.
    pub info: KernelInfo,
}

/// What the compiler reported about a [`ReadyKernel`]. Its name, parameter
/// names and code live in [`ReadyKernel::module`]: see
/// [`ReadyKernel::name`] and [`ReadyKernel::kernel_def`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// Kernel kind.
    pub kind: KernelKind,
    /// UB bytes the kernel declares.
    pub ub_bytes: u32,
    /// Number of bodies.
    pub bodies: usize,
    /// Tile box rows × cols.
    pub tile: (u64, u64),
    /// Tiles over all bodies.
    pub tiles: u64,
    /// Bytes the kernel reads from and writes to global memory per launch:
    /// each operand's distinct elements once (a broadcast operand at its
    /// own size), and for a matmul its operands once per tile that reads
    /// them.
    pub bytes_moved: u64,
    /// Byte range of the name within the module.
    name: (usize, usize),
}

impl ReadyKernel {
    /// The kernel's name (as given to [`build`]).
    pub fn name(&self) -> &str {
        self.module
            .get(self.info.name.0..self.info.name.1)
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or("")
    }

    /// The kernel as a builder definition (name, parameters with their
    /// names and dimensions, bodies), decoded from [`ReadyKernel::module`],
    /// e.g. to add it to another module.
    ///
    /// # Errors
    /// [`ParseError`] if the module does not parse (it always does: it was
    /// verified when built).
    pub fn kernel_def(&self) -> Result<KernelDef, ParseError> {
        let m = Module::parse(&self.module)?;
        let mut meta = m.meta()?;
        let k = m.kernel(0).ok_or(ParseError::BadMeta {
            at: 0,
            what: "the module has no kernel",
        })?;
        let km = meta.kernels.swap_remove(0);
        let params = k
            .params()
            .zip(km.params)
            .map(|(p, pm)| ParamDef {
                name: pm.name,
                dtype: p.dtype,
                access: p.access,
                dims: pm.dims,
            })
            .collect();
        let bodies = (0..k.bodies.len())
            .map(|b| {
                let mut code = CodeWriter::new();
                for w in k.body_code(b).unwrap_or(&[]) {
                    code.push_word(w.get());
                }
                for l in km.labels.iter().filter(|l| l.body as usize == b) {
                    code.label_at(l.word, l.text.clone());
                }
                BodyDef {
                    grid: k.bodies[b].grid(),
                    code,
                }
            })
            .collect();
        Ok(KernelDef {
            name: km.name,
            kind: k.kind,
            ub_bytes: k.ub_bytes,
            params,
            bodies,
        })
    }
}

/// Per-thread buffers of [`build`].
struct BuildScratch {
    compile: Scratch,
    kernels: Vec<KernelEntry>,
    bodies: Vec<BodyEntry>,
    params: Vec<ParamEntry>,
    code: Vec<u64>,
    meta: Vec<u8>,
}

impl BuildScratch {
    fn new() -> BuildScratch {
        BuildScratch {
            compile: Scratch::new(),
            kernels: Vec::with_capacity(1),
            bodies: Vec::with_capacity(16),
            params: Vec::with_capacity(16),
            // The code of any kernel the executor can hold.
            code: Vec::with_capacity(BODY_WORDS),
            meta: Vec::with_capacity(1024),
        }
    }

    /// Faults in the buffers a long kernel fills (the module's code and the
    /// compiler's first body), so the first one does not page-fault.
    fn touch(&mut self) {
        self.compile.touch();
        self.code.clear();
        self.code.resize(self.code.capacity(), 0);
        self.code.clear();
    }
}

thread_local! {
    static BUILD: RefCell<BuildScratch> = RefCell::new(BuildScratch::new());
}

/// Compiles, encodes, verifies and predecodes `group`. The module holds one
/// kernel named `name` whose parameters are the group's inputs (`in0`, …,
/// read) then its outputs (`out0`, …, written), with their shapes as
/// dimensions.
///
/// # Errors
/// [`BuildError`] at the first stage that fails.
pub fn build(group: &Group, name: &str, target: &Target) -> Result<Arc<ReadyKernel>, BuildError> {
    BUILD.with(|cell| match cell.try_borrow_mut() {
        Ok(mut sc) => build_with(&mut sc, group, name, target),
        Err(_) => build_with(&mut BuildScratch::new(), group, name, target),
    })
}

/// Creates this thread's compile scratch if needed and faults in its
/// buffers: part of [`crate::warm::warm_up`].
pub(crate) fn touch_scratch() {
    BUILD.with(|cell| {
        if let Ok(mut sc) = cell.try_borrow_mut() {
            sc.touch();
        }
    });
}

fn build_with(
    sc: &mut BuildScratch,
    group: &Group,
    name: &str,
    target: &Target,
) -> Result<Arc<ReadyKernel>, BuildError> {
    let s = compile_into(group, target, &mut sc.compile)?;
    let bodies = &sc.compile.bodies()[..s.bodies];

    // The tables, straight from the scratch (what `ModuleBuilder` would
    // collect from a `KernelDef`).
    let nparams = group.inputs.len() + group.outputs.len();
    sc.kernels.clear();
    sc.kernels.push(KernelEntry {
        kind: s.kind as u8,
        reserved: [0; 3],
        ub_bytes: U32::new(s.ub_bytes),
        param_start: U32::new(0),
        param_count: U32::new(nparams as u32),
        body_start: U32::new(0),
        body_count: U32::new(s.bodies as u32),
    });
    sc.bodies.clear();
    sc.code.clear();
    let mut features = 0;
    if s.bodies > 1 {
        features |= dvm_isa::module::features::MULTI_BODY;
    }
    for b in bodies {
        features |= b.features();
        sc.bodies.push(BodyEntry {
            grid: s.grid.map(U32::new),
            reserved: U32::new(0),
            code_start: U32::new(sc.code.len() as u32),
            code_len: U32::new(b.words().len() as u32),
        });
        sc.code.extend_from_slice(b.words());
    }
    let params = group
        .inputs
        .iter()
        .map(|v| (v, ParamAccess::Read))
        .chain(group.outputs.iter().map(|(_, v)| (v, ParamAccess::Write)));
    sc.params.clear();
    sc.params
        .extend(params.clone().map(|(v, access)| ParamEntry {
            dtype: v.dtype as u8,
            access: access as u8,
            reserved: [0; 2],
        }));

    // Metadata: what `postcard` writes for the kernel's `ModuleMeta`.
    sc.meta.clear();
    let mut w = MetaWriter::new(&mut sc.meta);
    w.seq(1);
    w.str(name);
    w.seq(nparams);
    for (i, (v, access)) in params.enumerate() {
        match access {
            ParamAccess::Read => w.prefixed_index("in", i as u64),
            _ => w.prefixed_index("out", (i - group.inputs.len()) as u64),
        }
        w.seq(v.shape.len());
        for &d in &v.shape {
            w.u64_str(d);
        }
    }
    w.seq(0);

    let mut module = Vec::new();
    write_module(
        &mut module,
        &ModuleParts {
            features,
            kernels: &sc.kernels,
            bodies: &sc.bodies,
            params: &sc.params,
            code: &[&sc.code],
            meta: &sc.meta,
        },
    );
    finish(module, target, s.tile, s.tiles, s.bytes_moved)
}

/// Encodes, verifies and predecodes an already compiled kernel (one group,
/// or a stack of groups built by [`crate::stack`]).
///
/// # Errors
/// [`BuildError`] at the first stage that fails.
pub fn ready(info: Compiled, target: &Target) -> Result<Arc<ReadyKernel>, BuildError> {
    let mut builder = ModuleBuilder::new();
    builder.add_kernel(info.kernel)?;
    finish(
        builder.finish(),
        target,
        info.tile,
        info.tiles,
        info.bytes_moved,
    )
}

/// Parses, verifies and predecodes the one-kernel `module`.
fn finish(
    module: Vec<u8>,
    target: &Target,
    tile: (u64, u64),
    tiles: u64,
    bytes_moved: u64,
) -> Result<Arc<ReadyKernel>, BuildError> {
    let parsed = Module::parse(&module)?;
    let limits = DeviceLimits::with_ub_bytes(target.ub_bytes);
    // One pass over the code: the verifier decodes each instruction and
    // hands it to the predecoder, which keeps the program only if the whole
    // kernel verifies.
    let mut slot = Box::<Program>::new_uninit();
    let verified = Program::init(&mut slot)
        .verify_and_predecode(&parsed, 0, &limits)
        .map_err(|e| match e {
            LoadError::Verify(e)
                if matches!(
                    e.rule,
                    Rule::TooManyTiles { .. }
                        | Rule::TooManyInstrs { .. }
                        | Rule::InstrBudget { .. }
                ) =>
            {
                BuildError::Limits(e)
            }
            LoadError::Verify(e) => BuildError::Verify(e),
            LoadError::Predecode(e) => BuildError::Predecode(e),
        })?;
    // SAFETY: `Program::init` initialised the slot.
    let program = unsafe { slot.assume_init() };
    let info = KernelInfo {
        kind: verified.kind(),
        ub_bytes: verified.ub_bytes(),
        bodies: verified.body_count(),
        tile,
        tiles,
        bytes_moved,
        name: name_range(&parsed).ok_or(ParseError::BadMeta {
            at: 0,
            what: "no kernel name",
        })?,
    };
    Ok(Arc::new(ReadyKernel {
        module,
        program,
        info,
    }))
}

/// Byte range, within the module, of the first kernel's name (read by
/// [`Module::kernel_name`], a sub-slice of the module's bytes).
fn name_range(m: &Module<'_>) -> Option<(usize, usize)> {
    let name = m.kernel_name(0)?;
    let start = (name.as_ptr() as usize).checked_sub(m.bytes().as_ptr() as usize)?;
    Some((start, start + name.len()))
}

/// Whether `build` and the allocating `compile` + [`ready`] path agree
/// (module bytes, info). For tests.
#[cfg(test)]
pub(crate) fn paths_agree(group: &Group, name: &str, target: &Target) -> bool {
    let fast = build(group, name, target).expect("builds");
    let slow = ready(
        crate::codegen::compile(group, name, target).expect("compiles"),
        target,
    )
    .expect("ready");
    // The one-pass verify + predecode gives the program the separate
    // passes give.
    let parsed = Module::parse(&fast.module).expect("parses");
    let limits = DeviceLimits::with_ub_bytes(target.ub_bytes);
    let verified = dvm_isa::verify_kernel(&parsed, 0, &limits).expect("verifies");
    let mut slot = Box::<Program>::new_uninit();
    Program::init(&mut slot)
        .predecode(&verified)
        .expect("predecodes");
    // SAFETY: `Program::init` initialised the slot.
    let two_pass = unsafe { slot.assume_init() };
    fast.module == slow.module
        && fast.info == slow.info
        && fast.name() == name
        && format!("{:?}", fast.program) == format!("{two_pass:?}")
}
