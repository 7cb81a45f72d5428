//! The CPU device: [`Runtime`], worker threads running the VM on this
//! machine. A call lowers at the bound shapes (through its [`Compiler`]),
//! binds input tensors in place, allocates outputs and temporaries, and
//! launches every step on the pool.

use std::sync::Arc;

use dvm_compile::cache::CacheStats;
use dvm_compile::codegen::Target;
use dvm_compile::kernel::ReadyKernel;
use dvm_compile::lower::{Buf, BufKind, LowerError, Plan};
use dvm_graph::Graph;
use dvm_sym::Bindings;
use dvm_tensor::BufferPool;
use dvm_tensor::Tensor;
use zerocopy::IntoBytes;

use super::{Capabilities, Device, DeviceConfig, DeviceEntry, DeviceError};
use crate::pool::{CpuPool, RawBuf};
use crate::{Compiler, Outputs, Prepared, RunError};

/// The CPU device: a worker pool running the kernels of its [`Compiler`].
pub struct Runtime {
    compiler: Compiler,
    pool: CpuPool,
    /// The memory of temporaries and of the output tensors `run` returns:
    /// buffers of earlier calls (and outputs the caller has dropped) are
    /// reused, so that a steady state does not allocate (and fault in)
    /// fresh memory on every call.
    buffers: BufferPool,
}

/// Most bytes of free buffers a runtime keeps between calls.
const SPARE_BYTES: usize = 1 << 30;

/// A dense, 8-byte aligned device buffer of the runtime's
/// [`BufferPool`]: its words and the bytes in use.
struct DevBuf(Vec<u64>, usize);

impl DevBuf {
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.0.as_mut_bytes()[..self.1]
    }
    fn bytes(&self) -> &[u8] {
        &self.0.as_bytes()[..self.1]
    }
}

/// Where one buffer of a plan lives during a call.
enum Mem<'a> {
    /// A runtime device buffer (reused across calls).
    Dev(DevBuf),
    /// An input tensor's bytes, bound in place, read-only.
    Input(&'a [u8]),
    /// A fresh tensor that becomes an output.
    Output(Tensor),
    /// The bytes of an output tensor the caller gave, written in place.
    Caller(&'a mut [u8]),
}

impl Mem<'_> {
    /// The buffer as a launch argument; input tensors are never writable.
    fn raw(&mut self, writable: bool) -> RawBuf {
        match self {
            Mem::Dev(b) => RawBuf {
                ptr: b.0.as_mut_ptr().cast::<u8>(),
                len: b.1,
                writable,
            },
            Mem::Input(s) => RawBuf::input(s),
            Mem::Output(t) => {
                let v = t.bytes_mut();
                RawBuf {
                    ptr: v.as_mut_ptr(),
                    len: v.len(),
                    writable,
                }
            }
            Mem::Caller(s) => RawBuf {
                ptr: s.as_mut_ptr(),
                len: s.len(),
                writable,
            },
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Mem::Dev(b) => b.bytes(),
            Mem::Input(s) => s,
            Mem::Output(t) => t.bytes(),
            Mem::Caller(s) => s,
        }
    }
}

/// Prepares a freshly allocated (zeroed) buffer of the runtime's pool: a
/// large one is fresh memory from the OS, which is backed by huge pages
/// where possible and faulted in here (faulting it page by page inside a
/// kernel would stall the kernel's stores).
fn fault_in(words: &mut [u64]) {
    const PAGE: usize = 4096;
    let v = words.as_mut_bytes();
    let bytes = v.len();
    if bytes >= 256 * PAGE {
        huge_pages(v);
        for i in (0..bytes).step_by(PAGE) {
            // SAFETY: `i < bytes = v.len()`; a volatile write so that the
            // store of a zero into zeroed memory is not optimised away.
            unsafe { std::ptr::write_volatile(v.as_mut_ptr().add(i), 0) };
        }
    }
}

/// Asks the kernel to back the 2 MiB-aligned part of `v` with transparent
/// huge pages, so faulting it in takes one fault per 2 MiB instead of one
/// per 4 KiB (where transparent huge pages are on `madvise`, as on most
/// distributions). Only a hint: nothing changes when it is refused.
fn huge_pages(v: &mut [u8]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = v.as_mut_ptr() as usize;
        let (lo, hi) = (
            start.next_multiple_of(HUGE),
            (start + v.len()) / HUGE * HUGE,
        );
        if lo < hi {
            // SAFETY: `lo..hi` lies inside `v`'s allocation, which this
            // function borrows mutably; MADV_HUGEPAGE changes only how the
            // kernel backs the pages, never their contents.
            unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = v;
}

/// Whether `bytes` starts at the alignment of a device buffer (8 bytes,
/// enough for every element type).
fn aligned(bytes: &[u8]) -> bool {
    bytes.as_ptr().align_offset(8) == 0
}

impl Runtime {
    /// A runtime on `cores` cores (clamped to `1..=`[`crate::pool::MAX_CORES`])
    /// with a cache of `cache_capacity` kernels.
    /// It waits (at most 100 ms) for the workers to start, then warms the
    /// compile path on the calling thread (see [`dvm_compile::warm`]), last, so
    /// the first kernel it compiles there is as fast as the next ones.
    ///
    /// [`Runtime::default`] takes every core of the machine and
    /// [`DEFAULT_CACHE_CAPACITY`](crate::DEFAULT_CACHE_CAPACITY) kernels;
    /// [`Runtime::with_cores`] sets only the cores.
    pub fn new(cores: usize, cache_capacity: usize) -> Runtime {
        Runtime::with_target(cores, cache_capacity, None)
    }

    /// [`Runtime::new`] compiling for `target` (the UB bytes and the cores
    /// a launch is tiled for) instead of this pool's cores and the default
    /// UB: the simulator's runtime tiles for the modelled device and runs
    /// those kernels on the pool.
    pub fn with_target(cores: usize, cache_capacity: usize, target: Option<Target>) -> Runtime {
        let pool = CpuPool::new(cores);
        let target = target.unwrap_or(Target {
            cores: pool.cores() as u32,
            ..Target::default()
        });
        pool.wait_ready(std::time::Duration::from_millis(100));
        dvm_compile::warm::warm_up(&target);
        Runtime {
            compiler: Compiler::new(target, cache_capacity),
            pool,
            buffers: BufferPool::with_fresh_hook(SPARE_BYTES, fault_in),
        }
    }

    /// A runtime on `cores` cores with a cache of
    /// [`DEFAULT_CACHE_CAPACITY`](crate::DEFAULT_CACHE_CAPACITY) kernels.
    pub fn with_cores(cores: usize) -> Runtime {
        Runtime::new(cores, crate::DEFAULT_CACHE_CAPACITY)
    }

    /// A buffer of `bytes` from the runtime's pool. Its contents are
    /// unspecified: every buffer of a plan is written (inputs and
    /// constants copied, temporaries stored by their kernel) before it is
    /// read.
    fn take_buf(&self, bytes: usize) -> Option<DevBuf> {
        let words = self.buffers.take(bytes.div_ceil(8).max(1))?;
        Some(DevBuf(words, bytes))
    }

    /// Returns buffers to the runtime's pool for reuse.
    fn give_bufs(&self, bufs: Vec<DevBuf>) {
        for b in bufs {
            self.buffers.give(b.0);
        }
    }

    /// The worker pool.
    pub fn pool(&self) -> &CpuPool {
        &self.pool
    }

    /// The compiler whose kernels this runtime runs.
    pub fn compiler(&self) -> &Compiler {
        &self.compiler
    }

    /// The compile target.
    pub fn target(&self) -> &Target {
        self.compiler.target()
    }

    /// Cache counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.compiler.cache_stats()
    }

    /// [`Compiler::plan`] with this runtime's compiler.
    ///
    /// # Errors
    /// As [`Compiler::plan`].
    pub fn plan(
        &self,
        prepared: &Prepared,
        bindings: &Bindings,
    ) -> Result<(Plan, Vec<Arc<ReadyKernel>>), RunError> {
        self.compiler.plan(prepared, bindings)
    }

    /// Runs `prepared` on named `inputs`, every symbol deduced from the
    /// input shapes; the outputs come back by name, in the graph's order.
    ///
    /// ```
    /// use dvm_graph::Graph;
    /// use dvm_isa::DType;
    /// use dvm_runtime::{Prepared, Runtime};
    /// use dvm_tensor::Tensor;
    ///
    /// let mut g = Graph::new();
    /// let n = g.symbol("N", 1, 1 << 20)?;
    /// let x = g.input("x", DType::F32, &[n.into()])?;
    /// let y = g.relu(x)?;
    /// g.output("y", y)?;
    /// let prepared = Prepared::new(&g)?;
    /// let rt = Runtime::with_cores(2);
    /// let x = Tensor::from_f32(&[3], &[-1.0, 0.5, 2.0])?;
    /// let out = rt.run(&prepared, &[("x", &x)])?; // N = 3, from x
    /// assert_eq!(out["y"].as_slice::<f32>()?, &[0.0, 0.5, 2.0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`RunError`]: bad inputs (named; a symbol no input's shape fixes
    /// among them: give it with [`Runtime::run_with_bindings`]), lowering,
    /// compile or launch failures.
    pub fn run(
        &self,
        prepared: &Prepared,
        inputs: &[(&str, &Tensor)],
    ) -> Result<Outputs, RunError> {
        self.run_profiled(prepared, inputs, &Bindings::new(), None)
    }

    /// [`Runtime::run`] with `explicit` bindings for the symbols the inputs'
    /// shapes do not fix (those they do must agree with them).
    ///
    /// # Errors
    /// As [`Runtime::run`].
    pub fn run_with_bindings(
        &self,
        prepared: &Prepared,
        inputs: &[(&str, &Tensor)],
        explicit: &Bindings,
    ) -> Result<Outputs, RunError> {
        self.run_profiled(prepared, inputs, explicit, None)
    }

    /// [`Runtime::run_with_bindings`], also recording each launch's name and wall time
    /// (kernel execution only: no lowering, allocation or copies) in
    /// `profile`.
    ///
    /// # Errors
    /// As [`Runtime::run`].
    pub fn run_profiled(
        &self,
        prepared: &Prepared,
        inputs: &[(&str, &Tensor)],
        explicit: &Bindings,
        profile: Option<&mut Vec<(String, std::time::Duration)>>,
    ) -> Result<Outputs, RunError> {
        self.run_with(prepared, inputs, Bind::Deduce(explicit), profile, None)
    }

    /// [`Runtime::run`] into tensors the caller owns: each of the graph's
    /// outputs is written into the tensor of its name in `outputs`, in
    /// place where its memory is aligned for the device (else through a
    /// device buffer and one copy). A loop that calls a graph again and
    /// again at one shape keeps its output tensors and skips allocating
    /// and faulting in fresh memory for every call (at S = 32768, hidden
    /// 768, that is most of a softmax's time outside its kernel).
    ///
    /// # Errors
    /// As [`Runtime::run`]; [`RunError::Output`] when `outputs` misses one
    /// of the graph's outputs, names one twice or one it does not have,
    /// or gives a tensor of another dtype or shape than the output has at
    /// these bindings (nothing is written then). Should a launch fail,
    /// what the output tensors hold is unspecified.
    pub fn run_into(
        &self,
        prepared: &Prepared,
        inputs: &[(&str, &Tensor)],
        explicit: &Bindings,
        outputs: &mut [(&str, &mut Tensor)],
    ) -> Result<(), RunError> {
        self.run_with(
            prepared,
            inputs,
            Bind::Deduce(explicit),
            None,
            Some(outputs),
        )
        .map(|_| ())
    }

    /// [`Runtime::run_into`], also recording each launch's name and wall
    /// time in `profile` (as [`Runtime::run_profiled`]): kernels writing
    /// into memory an earlier call already wrote, as a runtime that keeps
    /// its buffers runs them.
    ///
    /// # Errors
    /// As [`Runtime::run_into`].
    pub fn run_into_profiled(
        &self,
        prepared: &Prepared,
        inputs: &[(&str, &Tensor)],
        explicit: &Bindings,
        outputs: &mut [(&str, &mut Tensor)],
        profile: Option<&mut Vec<(String, std::time::Duration)>>,
    ) -> Result<(), RunError> {
        self.run_with(
            prepared,
            inputs,
            Bind::Deduce(explicit),
            profile,
            Some(outputs),
        )
        .map(|_| ())
    }

    /// [`Runtime::run`] at `bindings` that [`Graph::bind_tensors`] already
    /// deduced from these `inputs` (they are not checked again).
    pub(crate) fn run_bound(
        &self,
        prepared: &Prepared,
        inputs: &[(&str, &Tensor)],
        bindings: &Bindings,
    ) -> Result<Outputs, RunError> {
        self.run_with(prepared, inputs, Bind::Bound(bindings), None, None)
    }

    /// The run behind [`Runtime::run`], [`Runtime::run_into`] and
    /// [`Runtime::run_bound`]: the outputs as new tensors, or none when
    /// they were written into `caller`'s.
    fn run_with<'a>(
        &self,
        prepared: &Prepared,
        inputs: &[(&str, &'a Tensor)],
        bind: Bind<'_>,
        profile: Option<&mut Vec<(String, std::time::Duration)>>,
        caller: Option<&'a mut [(&str, &mut Tensor)]>,
    ) -> Result<Outputs, RunError> {
        let graph = prepared.graph();
        let deduced;
        let bindings = match bind {
            Bind::Deduce(explicit) => {
                deduced = graph.bind_tensors(inputs, explicit)?;
                &deduced
            }
            Bind::Bound(b) => b,
        };
        let planned = self.compiler.planned(prepared, bindings)?;
        let (plan, kernels) = (&planned.plan, &planned.kernels);
        // The caller's tensor for each output, checked before anything runs.
        let in_caller = caller.is_some();
        let mut slots: Vec<Option<&'a mut [u8]>> = Vec::new();
        let mut slot_of: Vec<usize> = Vec::new();
        if let Some(outs) = caller {
            slot_of = caller_slots(plan, outs)?;
            slots = outs.iter_mut().map(|(_, t)| Some(t.bytes_mut())).collect();
        }
        // Inputs are bound in place and outputs written straight into the
        // tensors they become; only temporaries (and buffers whose memory
        // is not aligned for the device) use the runtime's device buffers.
        let mut mems: Vec<Mem<'_>> = Vec::with_capacity(plan.buffers.len());
        for (i, info) in plan.buffers.iter().enumerate() {
            let bytes = info.bytes as usize;
            let first_out = plan.outputs.iter().position(|o| o.1 == i);
            // Shapes within an address space may still need more memory
            // than there is: an error naming the buffer, not an abort.
            let no_memory = || RunError::Alloc {
                what: match first_out {
                    Some(k) => format!("output `{}`", plan.outputs[k].0),
                    None => "a temporary buffer".into(),
                },
                bytes: info.bytes,
            };
            if let Some(src) = initial_bytes(graph, info, inputs) {
                if matches!(info.kind, BufKind::Input(_)) && src.len() >= bytes && aligned(src) {
                    mems.push(Mem::Input(&src[..bytes]));
                    continue;
                }
                let mut buf = self.take_buf(bytes).ok_or_else(no_memory)?;
                let dst = buf.bytes_mut();
                let n = dst.len().min(src.len());
                dst[..n].copy_from_slice(&src[..n]);
                mems.push(Mem::Dev(buf));
                continue;
            }
            if let Some(k) = first_out {
                if in_caller {
                    let fits = |b: &mut &mut [u8]| aligned(b) && b.len() == bytes;
                    if let Some(b) = slots[slot_of[k]].take_if(fits) {
                        mems.push(Mem::Caller(b));
                        continue;
                    }
                } else {
                    let (_, _, dt, shape) = &plan.outputs[k];
                    // Memory of the pool: its bytes are whatever they were;
                    // the plan's kernels write every byte of an output.
                    let t = self.buffers.tensor(*dt, shape).map_err(|_| no_memory())?;
                    if aligned(t.bytes()) && t.bytes().len() == bytes {
                        mems.push(Mem::Output(t));
                        continue;
                    }
                }
            }
            mems.push(Mem::Dev(self.take_buf(bytes).ok_or_else(no_memory)?));
        }
        let result = self.launch_all(plan, kernels, &mut mems, profile);
        let outputs = result.and_then(|()| {
            if in_caller {
                // Outputs not written in place: copied into their tensors.
                for (k, (name, b, ..)) in plan.outputs.iter().enumerate() {
                    if let Some(dst) = slots[slot_of[k]].as_deref_mut() {
                        let src = mems[*b].bytes();
                        if src.len() != dst.len() {
                            return Err(RunError::Output {
                                name: name.clone(),
                                what: format!(
                                    "its buffer holds {} bytes, the tensor {}",
                                    src.len(),
                                    dst.len()
                                ),
                            });
                        }
                        dst.copy_from_slice(src);
                    }
                }
                return Ok(Outputs::default());
            }
            plan.outputs
                .iter()
                .enumerate()
                .map(|(i, (name, b, dt, shape))| {
                    let used_again = plan.outputs[i + 1..].iter().any(|o| o.1 == *b);
                    if !used_again && matches!(mems[*b], Mem::Output(_)) {
                        if let Mem::Output(t) = std::mem::replace(&mut mems[*b], Mem::Input(&[])) {
                            return Ok((name.clone(), t));
                        }
                    }
                    Tensor::new(*dt, shape.clone(), mems[*b].bytes().to_vec())
                        .map(|t| (name.clone(), t))
                        .map_err(|e| {
                            RunError::from(LowerError::Unsupported {
                                node: name.clone(),
                                what: e.to_string(),
                            })
                        })
                })
                .collect()
        });
        self.give_bufs(
            mems.into_iter()
                .filter_map(|m| match m {
                    Mem::Dev(b) => Some(b),
                    _ => None,
                })
                .collect(),
        );
        outputs
    }

    /// Runs the launches of `plan` over `mems`.
    fn launch_all(
        &self,
        plan: &Plan,
        kernels: &[Arc<ReadyKernel>],
        mems: &mut [Mem<'_>],
        mut profile: Option<&mut Vec<(String, std::time::Duration)>>,
    ) -> Result<(), RunError> {
        for (launch, kernel) in plan.launches.iter().zip(kernels) {
            let (args, writable) = plan.launch_args(launch);
            let raw: Vec<RawBuf> = args
                .iter()
                .zip(&writable)
                .map(|(&b, &w)| mems[b].raw(w))
                .collect();
            let t0 = std::time::Instant::now();
            // SAFETY: every buffer is live for the launch: device buffers
            // and output vectors owned by the caller's `mems`, input
            // tensors borrowed for the whole call. None is otherwise
            // accessed during the launch; a buffer it binds twice (one
            // group reading it through two views) is an input, read-only
            // both times; the buffers it writes are temporaries or outputs,
            // distinct from every other buffer and bound once, and input
            // tensors are bound read-only (`Mem::raw` never marks them
            // writable).
            unsafe { self.pool.launch(&kernel.program, &raw) }.map_err(|error| {
                RunError::Launch {
                    step: kernel.name().to_string(),
                    error,
                }
            })?;
            if let Some(p) = profile.as_deref_mut() {
                p.push((kernel.name().to_string(), t0.elapsed()));
            }
        }
        Ok(())
    }
}

/// Where a run's bindings come from.
enum Bind<'b> {
    /// Deduced from the inputs, plus these explicit ones.
    Deduce(&'b Bindings),
    /// Already deduced from these very inputs.
    Bound(&'b Bindings),
}

/// For each of `plan`'s outputs, the index of the caller's tensor of its
/// name in `outs`, after checking that every output has exactly one tensor
/// of its dtype and shape and that no tensor names anything else.
fn caller_slots(plan: &Plan, outs: &[(&str, &mut Tensor)]) -> Result<Vec<usize>, RunError> {
    let bad = |name: &str, what: String| RunError::Output {
        name: name.to_string(),
        what,
    };
    for (i, (name, _)) in outs.iter().enumerate() {
        if outs[..i].iter().any(|(n, _)| n == name) {
            return Err(bad(name, "given twice".into()));
        }
        if !plan.outputs.iter().any(|o| o.0 == *name) {
            return Err(bad(name, "the graph has no output of this name".into()));
        }
    }
    plan.outputs
        .iter()
        .map(|(name, _, dt, shape)| {
            let k = outs
                .iter()
                .position(|(n, _)| n == name)
                .ok_or_else(|| bad(name, "no tensor given for it".into()))?;
            let t = &outs[k].1;
            if t.dtype() != *dt || t.shape() != shape.as_slice() {
                return Err(bad(
                    name,
                    format!(
                        "the graph writes {dt:?} {shape:?} here, the tensor given is {:?} {:?}",
                        t.dtype(),
                        t.shape()
                    ),
                ));
            }
            Ok(k)
        })
        .collect()
}

/// The bytes a buffer starts with: its input tensor or constant, if any.
pub(crate) fn initial_bytes<'a>(
    graph: &Graph,
    info: &'a Buf,
    inputs: &[(&str, &'a Tensor)],
) -> Option<&'a [u8]> {
    match &info.kind {
        BufKind::Input(i) => {
            let name = graph
                .inputs()
                .get(*i)
                .map(|id| graph.nodes()[id.0].name.as_str());
            let (_, t) = inputs.iter().find(|(n, _)| Some(*n) == name)?;
            Some(t.bytes())
        }
        BufKind::Const(bytes) => Some(bytes),
        BufKind::Temp => None,
    }
}

pub(super) const ENTRY: DeviceEntry = DeviceEntry {
    name: "cpu",
    about: "worker threads running the VM on this machine (the default)",
    open,
};

fn open(config: &DeviceConfig) -> Result<Box<dyn Device>, DeviceError> {
    Ok(Box::new(Runtime::new(
        config.cores_or_all(),
        config.cache_capacity,
    )))
}

impl Default for Runtime {
    /// A runtime on every core of the machine with a cache of
    /// [`DEFAULT_CACHE_CAPACITY`](crate::DEFAULT_CACHE_CAPACITY) kernels.
    fn default() -> Runtime {
        let config = DeviceConfig::default();
        Runtime::new(config.cores_or_all(), config.cache_capacity)
    }
}

impl Device for Runtime {
    fn name(&self) -> &'static str {
        ENTRY.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            runs_kernels: true,
            bit_exact_with_cpu: true,
            cores: self.pool().cores(),
        }
    }

    fn run(&self, prepared: &Prepared, inputs: &[(&str, &Tensor)]) -> Result<Outputs, RunError> {
        Runtime::run(self, prepared, inputs)
    }

    fn run_with_bindings(
        &self,
        prepared: &Prepared,
        inputs: &[(&str, &Tensor)],
        explicit: &Bindings,
    ) -> Result<Outputs, RunError> {
        Runtime::run_with_bindings(self, prepared, inputs, explicit)
    }
}
