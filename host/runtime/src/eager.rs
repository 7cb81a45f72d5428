//! The eager API with runtime fusion.
//!
//! Operations on [`LazyTensor`]s are checked (shapes, dtypes) and recorded
//! when they are called, but run only when a value is needed: when a tensor
//! is read back to the host ([`LazyTensor::to_tensor`], [`LazyTensor::item`]),
//! when an operation that does not fuse is recorded (concatenation), when
//! the window of recorded operations is full, or on [`Eager::sync`]. At that
//! flush point the recorded window becomes a graph with concrete shapes, the
//! fuser ([`dvm_fuse`]) groups it, and the runtime compiles (or fetches
//! from its cache) and launches the fused kernels. Only values that are
//! still referenced by a live handle are stored; intermediates stay in UB.
//!
//! Host control flow works on top: read a value back with
//! [`LazyTensor::item`] and branch or loop on it.
//!
//! ```
//! use dvm_runtime::eager::Eager;
//! use dvm_tensor::Tensor;
//!
//! let ex = Eager::new(2);
//! let mut x = ex.tensor(Tensor::from_f32(&[2, 3], &[1.0, -2.0, 3.0, 4.0, 5.0, -6.0])?);
//! // Halve until the largest magnitude is below 1: each `item` flushes
//! // the recorded abs/max/mul chain as fused kernels.
//! while x.abs()?.max_all()?.item()? >= 1.0 {
//!     x = x.scale(0.5)?;
//! }
//! assert!(x.abs()?.max_all()?.item()? < 1.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::rc::Rc;
use std::time::Instant;

use dvm_isa::{DType, Opcode};

use crate::{Prepared, RunError, Runtime};
use dvm_fuse::{sweep, FuseOptions, FuseScratch, FusionPlan, IdHasher};
use dvm_graph::{decompose_owned, Graph, GraphError, NodeId, ReduceOp, Shape};
use dvm_sym::{Bindings, Dim};
use dvm_tensor::{Tensor, TensorError};

/// Why an eager operation failed.
#[derive(Debug, thiserror::Error)]
pub enum EagerError {
    /// The operation does not apply to its operands (shape, dtype, axis).
    #[error(transparent)]
    Graph(Box<GraphError>),
    /// Running the recorded window failed.
    #[error(transparent)]
    Run(Box<RunError>),
    /// A tensor could not be built or read.
    #[error(transparent)]
    Tensor(#[from] TensorError),
    /// Operands from two different [`Eager`] contexts.
    #[error("operands belong to different eager contexts")]
    ForeignTensor,
    /// [`LazyTensor::item`] of a tensor with more than one element.
    #[error("item() of a tensor with {0} elements (needs exactly 1)")]
    NotScalar(usize),
    /// A value whose window failed to run earlier.
    #[error("tensor t{0} was lost when its window failed to run")]
    Lost(usize),
}

impl From<GraphError> for EagerError {
    fn from(e: GraphError) -> EagerError {
        EagerError::Graph(Box::new(e))
    }
}

impl From<RunError> for EagerError {
    fn from(e: RunError) -> EagerError {
        EagerError::Run(Box::new(e))
    }
}

/// Counters of an eager context.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EagerStats {
    /// Operations recorded.
    pub ops: u64,
    /// Flushes that ran something.
    pub flushes: u64,
    /// Kernels launched (stacked kernels count once per member).
    pub kernels: u64,
    /// Launches.
    pub launches: u64,
    /// Time spent deciding fusion, µs: the window's signature and the
    /// cache lookup, and on a miss the decision over its recorded
    /// operators ([`FusionPlan::decide_recorded`]), or, for a window it
    /// cannot decide, the decomposition and the pass over it.
    pub fuse_us: f64,
    /// Time spent after a new decision over the recorded operators, µs:
    /// decomposing the window's composites (which running it needs, fused
    /// or not) and mapping the decision onto the decomposition.
    pub prepare_us: f64,
    /// Flushes whose window structure was seen before (decision reused).
    pub decision_hits: u64,
    /// Time spent in flushes overall (fusion, lowering, compiling on cache
    /// misses, running), µs.
    pub flush_us: f64,
}

enum State {
    /// A host value.
    Ready(Rc<Tensor>),
    /// Recorded in the current window as this node.
    Pending(NodeId),
    /// No handle refers to it any more.
    Gone,
}

struct Slot {
    state: State,
    /// Live handles.
    refs: usize,
    /// The window input node of a ready value, once it is used there.
    input: Option<NodeId>,
}

struct Inner {
    rt: Runtime,
    options: FuseOptions,
    window_limit: usize,
    graph: Graph,
    recorded: usize,
    slots: Vec<Slot>,
    /// Slots whose ready values are inputs of the current window.
    inputs: Vec<usize>,
    stats: EagerStats,
    /// Fusion decisions of windows seen before, by structure.
    decisions: DecisionCache,
    /// The fusion pass's working memory, reused by every decision.
    scratch: FuseScratch,
}

thread_local! {
    /// The fusion pass's working memory of the last context this thread
    /// dropped, for the next one it makes: its first decision then finds
    /// its buffers grown (a new context's first flush spent about a sixth
    /// of its decision growing them).
    static SPARE_SCRATCH: std::cell::Cell<Option<FuseScratch>> =
        const { std::cell::Cell::new(None) };
}

impl Drop for Inner {
    fn drop(&mut self) {
        let scratch = std::mem::take(&mut self.scratch);
        // (During thread teardown the slot may be gone: then it is dropped.)
        let _ = SPARE_SCRATCH.try_with(|s| s.set(Some(scratch)));
    }
}

/// Fusion decisions (decomposed graph and fusion plan) of recorded windows,
/// keyed by the window's structure: operators, wiring, shapes, dtypes and
/// which values leave it. Inputs and outputs are named by position, so a
/// window that repeats (a loop body) hits.
///
/// A window is first looked up by its concrete shapes, then by their
/// classes (the class signature of [`signature`]): the second time a
/// structure shows up at other lengths, it is decided on a copy whose
/// extents are symbols ([`generalize`]), and that decision serves every
/// later window of the same structure whose extents are equal where its
/// were, whatever their values: a sequence length that changes every step
/// does not pay the fusion pass again. The copy takes the first window's
/// decision over its operators, its groups' spaces rewritten in symbols
/// ([`FirstSight`]), rather than running the pass again. A window whose
/// symbolic copy does not check out (a reshape, slice or constant ties an
/// extent to its value) is marked so and decided on its concrete shapes.
#[derive(Default)]
struct DecisionCache {
    /// Keys are [`key_of`] folds already: a multiply-rotate is hash enough.
    map: HashMap<u64, Vec<Decision>, BuildHasherDefault<IdHasher>>,
    /// Class signatures seen once, by key, with what their first window
    /// kept ([`DecisionCache::sighting`], [`DecisionCache::keep`]).
    seen: HashMap<u64, Option<FirstSight>, BuildHasherDefault<IdHasher>>,
    /// Entries of `map` and `seen`.
    len: usize,
}

/// The first window of a class signature, decided over its operators:
/// its concrete signature and that decision (for the symbolic copy made
/// at the class's second window).
struct FirstSight {
    sig: Vec<u64>,
    /// Words of `sig` that are the class signature.
    n: usize,
    decided: sweep::Decided,
}

/// What [`DecisionCache::sighting`] knows of a class signature.
enum Sighting {
    /// Not seen before (now recorded): decide on the concrete shapes and
    /// keep the decision for the next sighting ([`DecisionCache::keep`]).
    First,
    /// Seen once: decide on the symbolic copy, taking this decision (over
    /// a window of the same class) when there is one.
    Again(Option<FirstSight>),
}

/// A window's signature and what was decided for it.
type Decision = (Vec<u64>, Decided);

/// A cached decision.
#[derive(Clone)]
enum Decided {
    /// The prepared graph (symbolic for a class signature).
    Plan(Rc<Prepared>),
    /// The window's structure does not generalise: use its concrete shapes.
    Concrete,
}

impl DecisionCache {
    fn get(&self, key: u64, sig: &[u64]) -> Option<Decided> {
        self.map
            .get(&key)
            .and_then(|b| b.iter().find(|(s, _)| s.as_slice() == sig))
            .map(|(_, d)| d.clone())
    }

    /// Records `d` for `sig`, replacing what was recorded for it.
    fn insert(&mut self, key: u64, sig: Vec<u64>, d: Decided) {
        if let Some(e) = self
            .map
            .get_mut(&key)
            .and_then(|b| b.iter_mut().find(|(s, _)| *s == sig))
        {
            e.1 = d;
            return;
        }
        self.make_room();
        self.map.entry(key).or_default().push((sig, d));
        self.len += 1;
    }

    /// Whether the class signature `gsig` (key `key`) was seen before
    /// (the next window with it, at other lengths, is decided on the
    /// symbolic copy); records it if not. A class signature that shares
    /// its key with another seen before is taken for seen, and its window
    /// is decided on the symbolic copy at once, which is as correct (the
    /// copy is checked) if less thrifty; the other's decision is only
    /// handed over when the class signatures are equal.
    fn sighting(&mut self, key: u64, gsig: &[u64]) -> Sighting {
        if let Some(first) = self.seen.remove(&key) {
            // (The class's decision on the copy replaces this entry.)
            self.len -= 1;
            let first = first.filter(|f| f.sig.get(..f.n) == Some(gsig));
            return Sighting::Again(first);
        }
        self.make_room();
        self.seen.insert(key, None);
        self.len += 1;
        Sighting::First
    }

    /// Keeps the decision of the first window of the class signature of
    /// key `key` (the window's signature `sig`, `n` words of it the class
    /// signature).
    fn keep(&mut self, key: u64, sig: &[u64], n: usize, decided: sweep::Decided) {
        if let Some(first) = self.seen.get_mut(&key) {
            *first = Some(FirstSight {
                sig: sig.to_vec(),
                n,
                decided,
            });
        }
    }

    /// Forgets everything when the cache is full.
    fn make_room(&mut self) {
        if self.len >= DECISIONS {
            self.map.clear();
            self.seen.clear();
            self.len = 0;
        }
    }
}

/// A multiply-rotate fold of signature words, continued from `h`: a key
/// is the fold from 0 of its words, finished by [`key_of`], so the key of
/// a concrete signature continues the fold of the class signature it
/// starts with.
fn fold(mut h: u64, words: &[u64]) -> u64 {
    for &w in words {
        h = (h.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    h
}

/// The hash key of a signature of `len` words whose [`fold`] is `h`
/// (signatures are compared whole, the key only picks the bucket).
fn key_of(h: u64, len: usize) -> u64 {
    let h = fold(h, &[len as u64]);
    h ^ (h >> 29)
}

/// Most cached decisions (the cache is cleared when it is full).
const DECISIONS: usize = 256;

/// An eager execution context: a CPU runtime and the window of recorded
/// operations. Not thread-safe (tensors are `Rc` handles into it).
#[derive(Clone)]
pub struct Eager {
    inner: Rc<RefCell<Inner>>,
}

/// A tensor whose value may not have been computed yet.
pub struct LazyTensor {
    ctx: Rc<RefCell<Inner>>,
    id: usize,
    shape: Vec<u64>,
    dtype: DType,
}

impl Clone for LazyTensor {
    fn clone(&self) -> Self {
        if let Ok(mut inner) = self.ctx.try_borrow_mut() {
            inner.slots[self.id].refs += 1;
        }
        LazyTensor {
            ctx: Rc::clone(&self.ctx),
            id: self.id,
            shape: self.shape.clone(),
            dtype: self.dtype,
        }
    }
}

impl Drop for LazyTensor {
    fn drop(&mut self) {
        if let Ok(mut inner) = self.ctx.try_borrow_mut() {
            let slot = &mut inner.slots[self.id];
            slot.refs = slot.refs.saturating_sub(1);
            if slot.refs == 0 && matches!(slot.state, State::Ready(_)) && slot.input.is_none() {
                slot.state = State::Gone;
            }
        }
    }
}

impl Default for Eager {
    /// [`Eager::new`] on every core of the machine.
    fn default() -> Eager {
        Eager::new(crate::DeviceConfig::default().cores_or_all())
    }
}

impl Eager {
    /// A context on `cores` CPU cores with fusion on (without recording
    /// rejection reasons, which only `dvm explain` needs), decided by the
    /// one-pass sweep ([`FuseOptions::sweep`]), and a window of 64
    /// operations.
    pub fn new(cores: usize) -> Eager {
        Eager::with_options(cores, FuseOptions::eager(), 64)
    }

    /// A context with the given fusion options (use
    /// [`FuseOptions::off`] to run one kernel per operation) and window
    /// length (at least 1). With fusion on, it decides a small warm-up
    /// window first and throws the result away (a few tens of µs), so that
    /// the first window's decision finds its code warm.
    pub fn with_options(cores: usize, options: FuseOptions, window: usize) -> Eager {
        let mut scratch = SPARE_SCRATCH
            .try_with(std::cell::Cell::take)
            .ok()
            .flatten()
            .unwrap_or_default();
        if options.fuse {
            warm_decision(&options, &mut scratch);
        }
        Eager {
            inner: Rc::new(RefCell::new(Inner {
                rt: Runtime::new(cores, 1024),
                options,
                window_limit: window.max(1),
                graph: Graph::new(),
                recorded: 0,
                slots: Vec::new(),
                inputs: Vec::new(),
                stats: EagerStats::default(),
                decisions: DecisionCache::default(),
                scratch,
            })),
        }
    }

    /// A host tensor as a lazy tensor.
    pub fn tensor(&self, t: Tensor) -> LazyTensor {
        let mut inner = self.inner.borrow_mut();
        let (shape, dtype) = (t.shape().to_vec(), t.dtype());
        inner.slots.push(Slot {
            state: State::Ready(Rc::new(t)),
            refs: 1,
            input: None,
        });
        LazyTensor {
            ctx: Rc::clone(&self.inner),
            id: inner.slots.len() - 1,
            shape,
            dtype,
        }
    }

    /// Runs every recorded operation.
    ///
    /// # Errors
    /// [`EagerError::Run`] if the window fails to run (its operations are
    /// dropped; their handles then read as errors).
    pub fn sync(&self) -> Result<(), EagerError> {
        flush(&mut self.inner.borrow_mut())
    }

    /// Counters.
    pub fn stats(&self) -> EagerStats {
        self.inner.borrow().stats
    }

    /// Operations recorded and not yet run.
    pub fn pending(&self) -> usize {
        self.inner.borrow().recorded
    }
}

/// Runs the window: the live recorded values become outputs of its graph.
fn flush(inner: &mut Inner) -> Result<(), EagerError> {
    if inner.recorded == 0 {
        return Ok(());
    }
    let t0 = Instant::now();
    let mut graph = std::mem::take(&mut inner.graph);
    let inputs = std::mem::take(&mut inner.inputs);
    inner.recorded = 0;
    let mut outs: Vec<(String, usize)> = Vec::new();
    for (i, slot) in inner.slots.iter().enumerate() {
        if let State::Pending(n) = slot.state {
            if slot.refs > 0 {
                let name = format!("o{}", outs.len());
                graph.output(&name, n)?;
                outs.push((name, i));
            }
        }
    }
    // Recorded values nobody holds are never computed.
    for slot in inner.slots.iter_mut() {
        if matches!(slot.state, State::Pending(_)) && slot.refs == 0 {
            slot.state = State::Gone;
        }
    }
    let mut feed: Vec<(String, Rc<Tensor>)> = Vec::with_capacity(inputs.len());
    for (k, &i) in inputs.iter().enumerate() {
        let slot = &mut inner.slots[i];
        slot.input = None;
        if let State::Ready(t) = &slot.state {
            feed.push((format!("i{k}"), Rc::clone(t)));
        }
        if slot.refs == 0 {
            slot.state = State::Gone;
        }
    }
    if outs.is_empty() {
        return Ok(());
    }
    let f0 = Instant::now();
    let (prepared, prepare_us) = decide(inner, &mut graph)?;
    inner.stats.fuse_us += f0.elapsed().as_secs_f64() * 1e6 - prepare_us;
    inner.stats.prepare_us += prepare_us;
    let named: Vec<(&str, &Tensor)> = feed.iter().map(|(n, t)| (n.as_str(), &**t)).collect();
    let result = (|| {
        let bindings = prepared.graph().bind_tensors(&named, &Bindings::new())?;
        let planned = inner.rt.compiler().planned(&prepared, &bindings)?;
        let got = inner.rt.run_bound(&prepared, &named, &bindings)?;
        let (steps, launches) = (planned.plan.steps.len(), planned.plan.launches.len());
        Ok::<_, RunError>((steps, launches, got))
    })();
    let failed = result.is_err();
    if failed {
        for &(_, i) in &outs {
            inner.slots[i].state = State::Gone;
        }
    }
    let (kernels, launches, got) = result?;
    for (name, t) in got {
        if let Some(&(_, i)) = outs.iter().find(|(n, _)| *n == name) {
            inner.slots[i].state = State::Ready(Rc::new(t));
        }
    }
    inner.stats.flushes += 1;
    inner.stats.kernels += kernels as u64;
    inner.stats.launches += launches as u64;
    inner.stats.flush_us += t0.elapsed().as_secs_f64() * 1e6;
    Ok(())
}

fn dims(shape: &[u64]) -> Vec<Dim> {
    shape.iter().map(|&d| Dim::from(d as i64)).collect()
}

impl LazyTensor {
    /// The shape (known without running anything).
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The context this tensor belongs to.
    pub fn context(&self) -> Eager {
        Eager {
            inner: Rc::clone(&self.ctx),
        }
    }

    /// Records `build` over the operands' window nodes.
    fn record(
        &self,
        others: &[&LazyTensor],
        build: impl FnOnce(&mut Graph, &[NodeId]) -> Result<NodeId, GraphError>,
    ) -> Result<LazyTensor, EagerError> {
        if others.iter().any(|o| !Rc::ptr_eq(&o.ctx, &self.ctx)) {
            return Err(EagerError::ForeignTensor);
        }
        let mut inner = self.ctx.borrow_mut();
        if inner.recorded >= inner.window_limit {
            flush(&mut inner)?;
        }
        let mut nodes = Vec::with_capacity(others.len() + 1);
        for t in std::iter::once(self).chain(others.iter().copied()) {
            nodes.push(node_of(&mut inner, t)?);
        }
        let inner = &mut *inner;
        let n = build(&mut inner.graph, &nodes)?;
        let node = &inner.graph[n];
        let shape = node
            .shape
            .iter()
            .map(|d| d.as_const().and_then(|v| u64::try_from(v).ok()))
            .collect::<Option<Vec<u64>>>()
            .ok_or(EagerError::Lost(inner.slots.len()))?;
        let dtype = node.dtype;
        inner.recorded += 1;
        inner.stats.ops += 1;
        inner.slots.push(Slot {
            state: State::Pending(n),
            refs: 1,
            input: None,
        });
        Ok(LazyTensor {
            ctx: Rc::clone(&self.ctx),
            id: inner.slots.len() - 1,
            shape,
            dtype,
        })
    }

    /// Reads the value back (runs the recorded window first if needed).
    ///
    /// # Errors
    /// [`EagerError::Run`] if running the window fails.
    pub fn to_tensor(&self) -> Result<Tensor, EagerError> {
        let mut inner = self.ctx.borrow_mut();
        if matches!(inner.slots[self.id].state, State::Pending(_)) {
            flush(&mut inner)?;
        }
        match &inner.slots[self.id].state {
            State::Ready(t) => Ok((**t).clone()),
            _ => Err(EagerError::Lost(self.id)),
        }
    }

    /// The single element as `f64` (a shape-dependent or value-dependent
    /// decision point: flushes).
    ///
    /// # Errors
    /// [`EagerError::NotScalar`] unless the tensor has one element; the
    /// errors of [`LazyTensor::to_tensor`].
    pub fn item(&self) -> Result<f64, EagerError> {
        let n: u64 = self.shape.iter().product();
        if n != 1 {
            return Err(EagerError::NotScalar(n as usize));
        }
        let t = self.to_tensor()?;
        t.get_f64(0).ok_or(EagerError::NotScalar(t.numel()))
    }

    /// The values as `f32` (flushes).
    ///
    /// # Errors
    /// As [`LazyTensor::to_tensor`].
    pub fn to_f32_vec(&self) -> Result<Vec<f32>, EagerError> {
        Ok(self.to_tensor()?.to_f32_vec())
    }

    /// Element-wise unary opcode (`exp`, `tanh`, `relu`, …).
    ///
    /// # Errors
    /// [`EagerError::Graph`] if the opcode rejects the dtype.
    pub fn unary(&self, code: Opcode) -> Result<LazyTensor, EagerError> {
        self.record(&[], |g, n| g.unary(code, n[0]))
    }

    /// Element-wise binary opcode with broadcasting (`add`, `mul`, `max`, …).
    ///
    /// # Errors
    /// [`EagerError::Graph`] if the shapes do not broadcast or the dtypes
    /// differ; [`EagerError::ForeignTensor`].
    pub fn binary(&self, code: Opcode, other: &LazyTensor) -> Result<LazyTensor, EagerError> {
        self.record(&[other], |g, n| g.binary(code, n[0], n[1]))
    }

    /// Element-wise with a scalar (`adds`, `muls`, …).
    ///
    /// # Errors
    /// [`EagerError::Graph`] if the opcode rejects the dtype.
    pub fn scalar(&self, code: Opcode, value: f64) -> Result<LazyTensor, EagerError> {
        self.record(&[], |g, n| g.scalar(code, n[0], value))
    }

    dvm_graph::for_each_unary_op!(unary_ops);

    dvm_graph::for_each_binary_op!(binary_ops);

    dvm_graph::for_each_scalar_op!(scalar_ops);

    /// `self · k` ([`LazyTensor::muls`]).
    ///
    /// # Errors
    /// As [`LazyTensor::scalar`].
    pub fn scale(&self, k: f64) -> Result<LazyTensor, EagerError> {
        self.muls(k)
    }

    /// `self ? a : b` element-wise (`self` is the bool condition), with
    /// broadcasting of all three.
    ///
    /// # Errors
    /// [`EagerError::Graph`] if `self` is not bool, `a` and `b` differ in
    /// dtype or the shapes do not broadcast; [`EagerError::ForeignTensor`].
    pub fn where_(&self, a: &LazyTensor, b: &LazyTensor) -> Result<LazyTensor, EagerError> {
        self.record(&[a, b], |g, n| g.where_(n[0], n[1], n[2]))
    }

    /// Conversion to `dtype` (floats → ints truncate and saturate, NaN → 0;
    /// to bool is `x != 0`).
    ///
    /// # Errors
    /// [`EagerError::Graph`] if the conversion is not supported.
    pub fn cast(&self, dtype: DType) -> Result<LazyTensor, EagerError> {
        self.record(&[], |g, n| g.cast(n[0], dtype))
    }

    /// Matrix product of the last two axes (batch axes broadcast).
    ///
    /// # Errors
    /// [`EagerError::Graph`] if the shapes do not form a matmul.
    pub fn matmul(&self, other: &LazyTensor) -> Result<LazyTensor, EagerError> {
        self.matmul_t(other, false, false)
    }

    /// Matrix product with either operand's last two axes transposed, as
    /// [`Graph::matmul`] takes them.
    ///
    /// # Errors
    /// [`EagerError::Graph`] if the shapes do not form a matmul.
    pub fn matmul_t(
        &self,
        other: &LazyTensor,
        transpose_a: bool,
        transpose_b: bool,
    ) -> Result<LazyTensor, EagerError> {
        self.record(&[other], |g, n| {
            g.matmul(n[0], n[1], transpose_a, transpose_b)
        })
    }

    /// Axis permutation (a view: free).
    ///
    /// # Errors
    /// [`EagerError::Graph`] for a bad permutation.
    pub fn transpose(&self, perm: &[i64]) -> Result<LazyTensor, EagerError> {
        self.record(&[], |g, n| g.transpose(n[0], perm))
    }

    /// Reshape (free when the value is dense).
    ///
    /// # Errors
    /// [`EagerError::Graph`] if the element counts differ.
    pub fn reshape(&self, shape: &[u64]) -> Result<LazyTensor, EagerError> {
        let d = dims(shape);
        self.record(&[], |g, n| g.reshape(n[0], &d))
    }

    /// Sum over `axes`.
    ///
    /// # Errors
    /// [`EagerError::Graph`] for bad axes.
    pub fn sum(&self, axes: &[i64], keepdims: bool) -> Result<LazyTensor, EagerError> {
        self.record(&[], |g, n| g.sum(n[0], axes, keepdims))
    }

    /// Mean over `axes`.
    ///
    /// # Errors
    /// [`EagerError::Graph`] for bad axes.
    pub fn mean(&self, axes: &[i64], keepdims: bool) -> Result<LazyTensor, EagerError> {
        self.record(&[], |g, n| g.mean(n[0], axes, keepdims))
    }

    /// Maximum over every element (every axis kept with extent 1).
    ///
    /// # Errors
    /// [`EagerError::Graph`] for a tensor of rank 0.
    pub fn max_all(&self) -> Result<LazyTensor, EagerError> {
        let axes: Vec<i64> = (0..self.shape.len() as i64).collect();
        self.record(&[], |g, n| g.reduce(n[0], ReduceOp::Max, &axes, true))
    }

    /// Maximum over `axes`.
    ///
    /// # Errors
    /// [`EagerError::Graph`] for bad axes.
    pub fn reduce_max(&self, axes: &[i64], keepdims: bool) -> Result<LazyTensor, EagerError> {
        self.record(&[], |g, n| g.reduce_max(n[0], axes, keepdims))
    }

    /// Minimum over `axes`.
    ///
    /// # Errors
    /// [`EagerError::Graph`] for bad axes.
    pub fn reduce_min(&self, axes: &[i64], keepdims: bool) -> Result<LazyTensor, EagerError> {
        self.record(&[], |g, n| g.reduce_min(n[0], axes, keepdims))
    }

    /// Log-softmax along `axis`.
    ///
    /// # Errors
    /// [`EagerError::Graph`] for a bad axis or dtype.
    pub fn log_softmax(&self, axis: i64) -> Result<LazyTensor, EagerError> {
        self.record(&[], |g, n| g.log_softmax(n[0], axis))
    }

    /// RMS normalisation over the last axis, scaled by `gamma`.
    ///
    /// # Errors
    /// [`EagerError::Graph`] if gamma does not match the last axis.
    pub fn rms_norm(&self, gamma: &LazyTensor, eps: f64) -> Result<LazyTensor, EagerError> {
        self.record(&[gamma], |g, n| g.rms_norm(n[0], n[1], eps))
    }

    /// Slices `(axis, start, end, step)` ranges with Python's rules (a
    /// view).
    ///
    /// # Errors
    /// [`EagerError::Graph`] for a bad or repeated axis or a step < 1.
    pub fn slice(&self, ranges: &[(i64, i64, i64, i64)]) -> Result<LazyTensor, EagerError> {
        self.record(&[], |g, n| g.slice(n[0], ranges))
    }

    /// Broadcasts to `shape` (a view).
    ///
    /// # Errors
    /// [`EagerError::Graph`] where an extent is neither 1 nor the target's.
    pub fn expand(&self, shape: &[u64]) -> Result<LazyTensor, EagerError> {
        let d = dims(shape);
        self.record(&[], |g, n| g.expand(n[0], &d))
    }

    /// Removes the listed extent-1 axes; with none, every extent-1 axis.
    ///
    /// # Errors
    /// [`EagerError::Graph`] for an axis whose extent is not 1.
    pub fn squeeze(&self, axes: &[i64]) -> Result<LazyTensor, EagerError> {
        self.record(&[], |g, n| g.squeeze(n[0], axes))
    }

    /// Inserts extent-1 axes at the listed positions of the result.
    ///
    /// # Errors
    /// [`EagerError::Graph`] for an out-of-range or repeated axis.
    pub fn unsqueeze(&self, axes: &[i64]) -> Result<LazyTensor, EagerError> {
        self.record(&[], |g, n| g.unsqueeze(n[0], axes))
    }

    /// Softmax along `axis`.
    ///
    /// # Errors
    /// [`EagerError::Graph`] for a bad axis or dtype.
    pub fn softmax(&self, axis: i64) -> Result<LazyTensor, EagerError> {
        self.record(&[], |g, n| g.softmax(n[0], axis))
    }

    /// Layer normalisation over the last axis.
    ///
    /// # Errors
    /// [`EagerError::Graph`] if gamma or beta do not match the last axis.
    pub fn layer_norm(
        &self,
        gamma: &LazyTensor,
        beta: &LazyTensor,
        eps: f64,
    ) -> Result<LazyTensor, EagerError> {
        self.record(&[gamma, beta], |g, n| g.layer_norm(n[0], n[1], n[2], eps))
    }

    /// Concatenation along `axis`: not fused; runs the window before and
    /// after it.
    ///
    /// # Errors
    /// [`EagerError::Graph`] if the other axes differ.
    pub fn concat(&self, others: &[&LazyTensor], axis: i64) -> Result<LazyTensor, EagerError> {
        self.context().sync()?;
        let out = self.record(others, |g, n| g.concat(n, axis))?;
        self.context().sync()?;
        Ok(out)
    }
}

macro_rules! unary_ops {
    ($($(#[$doc:meta])* $name:ident => $code:ident;)*) => {$(
        $(#[$doc])*
        ///
        /// Records [`Graph`]'s operator of the same name.
        ///
        /// # Errors
        /// As [`LazyTensor::unary`].
        pub fn $name(&self) -> Result<LazyTensor, EagerError> {
            self.unary(Opcode::$code)
        }
    )*};
}
use unary_ops;

macro_rules! binary_ops {
    ($($(#[$doc:meta])* $name:ident => $code:ident;)*) => {$(
        $(#[$doc])*
        ///
        /// Records [`Graph`]'s operator of the same name, with broadcasting.
        ///
        /// # Errors
        /// As [`LazyTensor::binary`].
        pub fn $name(&self, other: &LazyTensor) -> Result<LazyTensor, EagerError> {
            self.binary(Opcode::$code, other)
        }
    )*};
}
use binary_ops;

macro_rules! scalar_ops {
    ($($(#[$doc:meta])* $name:ident => $code:ident;)*) => {$(
        $(#[$doc])*
        ///
        /// Records [`Graph`]'s operator of the same name.
        ///
        /// # Errors
        /// As [`LazyTensor::scalar`].
        pub fn $name(&self, value: f64) -> Result<LazyTensor, EagerError> {
            self.scalar(Opcode::$code, value)
        }
    )*};
}
use scalar_ops;

/// The window node of `t`: its recorded node, or (for a ready value) an
/// input node added on first use.
fn node_of(inner: &mut Inner, t: &LazyTensor) -> Result<NodeId, EagerError> {
    let slot = &inner.slots[t.id];
    match &slot.state {
        State::Pending(n) => Ok(*n),
        State::Ready(_) => {
            if let Some(n) = slot.input {
                return Ok(n);
            }
            let k = inner.inputs.len();
            let n = inner
                .graph
                .input(&format!("i{k}"), t.dtype, &dims(&t.shape))?;
            inner.slots[t.id].input = Some(n);
            inner.inputs.push(t.id);
            Ok(n)
        }
        State::Gone => Err(EagerError::Lost(t.id)),
    }
}

/// The prepared graph for window `graph` (see [`DecisionCache`]): a cached
/// decision for its concrete signature (a window that repeats exactly); else
/// one for its class signature (the same structure at other lengths), made
/// on the symbolic copy the second time a class signature is seen, so a
/// window that never changes length never pays for the copy; else a new
/// decision on the window itself. One walk of the window gives both
/// signatures ([`signature`]). Also the µs spent after a new decision
/// ([`prepare`]).
#[inline(never)]
fn decide(inner: &mut Inner, graph: &mut Graph) -> Result<(Rc<Prepared>, f64), GraphError> {
    let (sig, n) = signature(graph);
    let hg = fold(0, &sig[..n]);
    let key = key_of(fold(hg, &sig[n..]), sig.len());
    if let Some(Decided::Plan(p)) = inner.decisions.get(key, &sig) {
        inner.stats.decision_hits += 1;
        return Ok((p, 0.0));
    }
    let gkey = key_of(hg, n);
    let mut first = false;
    match inner.decisions.get(gkey, &sig[..n]) {
        Some(Decided::Plan(p)) => {
            inner.stats.decision_hits += 1;
            return Ok((p, 0.0));
        }
        Some(Decided::Concrete) => {}
        None => match inner.decisions.sighting(gkey, &sig[..n]) {
            Sighting::First => first = true,
            Sighting::Again(seen) => {
                let gsig = sig[..n].to_vec();
                // A copy that does not check out, or that fails to
                // prepare, leaves the structure to its concrete shapes.
                let scratch = &mut inner.scratch;
                let prepared = generalize(graph).map(|(copy, symbols)| {
                    let decided = seen.and_then(|f| {
                        symbolic_decision(f.decided, &f.sig[f.n..], &sig[n..], &symbols)
                    });
                    match decided {
                        Some(d) => {
                            debug_assert_own_decision(&copy, &d, &inner.options, scratch);
                            prepare_decided(copy, &d, &inner.options, scratch)
                        }
                        None => {
                            prepare(copy, &inner.options, scratch, false).map(|(p, us, _)| (p, us))
                        }
                    }
                });
                match prepared {
                    Some(Ok((p, us))) => {
                        let p = Rc::new(p);
                        inner
                            .decisions
                            .insert(gkey, gsig, Decided::Plan(Rc::clone(&p)));
                        return Ok((p, us));
                    }
                    Some(Err(_)) | None => inner.decisions.insert(gkey, gsig, Decided::Concrete),
                }
            }
        },
    }
    // A new decision on the window itself, which moves into it (a window
    // that hit a cached decision is left to the caller, as before); the
    // first of its class keeps its decision for the symbolic copy.
    let (p, us, decided) = prepare(
        std::mem::take(graph),
        &inner.options,
        &mut inner.scratch,
        first,
    )?;
    if let Some(d) = decided {
        inner.decisions.keep(gkey, &sig, n, d);
    }
    let p = Rc::new(p);
    inner
        .decisions
        .insert(key, sig, Decided::Plan(Rc::clone(&p)));
    Ok((p, us))
}

/// A small window of the operators eager code records: an element-wise
/// chain with a broadcast operand, a softmax, a layer norm, a matmul with
/// its epilogue and an RMS norm, two values leaving it.
fn warm_window() -> Result<Graph, GraphError> {
    let mut g = Graph::new();
    let (rows, cols) = (Dim::val(24), Dim::val(64));
    let x = g.input("i0", DType::F32, &[rows, cols.clone()])?;
    let w = g.input("i1", DType::F32, &[cols.clone(), cols.clone()])?;
    let v = g.input("i2", DType::F32, &[cols])?;
    let a = g.binary(Opcode::Mul, x, x)?;
    let b = g.binary(Opcode::Add, a, v)?;
    let s = g.softmax(b, -1)?;
    let n = g.layer_norm(s, v, v, 1e-5)?;
    let m = g.matmul(n, w, false, false)?;
    let e = g.binary(Opcode::Add, m, v)?;
    let t = g.unary(Opcode::Tanh, e)?;
    let y = g.binary(Opcode::Add, t, x)?;
    let z = g.rms_norm(y, v, 1e-6)?;
    g.output("o0", z)?;
    g.output("o1", m)?;
    Ok(g)
}

/// Decides and prepares [`warm_window`] with `options` in `scratch`, and
/// throws the result away: a new context's first decision then finds the
/// decision's code in the caches, its branches predicted and `scratch`
/// grown, as [`dvm_compile::warm::warm_up`] does for the compiler. (A context's
/// first decision took about twice as long as a new window's in a
/// context that had run others.)
fn warm_decision(options: &FuseOptions, scratch: &mut FuseScratch) {
    if let Ok(g) = warm_window() {
        std::hint::black_box(signature(&g));
        let _ = std::hint::black_box(prepare(g, options, scratch, true));
    }
}

/// The prepared window `graph`, decided over its recorded operators
/// ([`FusionPlan::decide_recorded`]) and then decomposed, the decision
/// mapped onto the decomposition; or, for a window that cannot be decided
/// so, decomposed and then fused ([`Prepared::from_graph_in`]). Also the
/// µs spent after a decision over the operators, and, when `keep`, that
/// decision (a copy).
fn prepare(
    graph: Graph,
    options: &FuseOptions,
    scratch: &mut FuseScratch,
    keep: bool,
) -> Result<(Prepared, f64, Option<sweep::Decided>), GraphError> {
    let Some(Ok(decided)) = FusionPlan::decide_recorded(&graph, options, scratch) else {
        return Ok((Prepared::from_graph_in(graph, options, scratch)?, 0.0, None));
    };
    let t = Instant::now();
    let (p, _) = prepare_decided(graph, &decided, options, scratch)?;
    Ok((p, t.elapsed().as_secs_f64() * 1e6, keep.then_some(decided)))
}

/// The prepared window `graph` with the decision over its operators
/// `decided`: decomposed, the decision mapped onto the decomposition (a
/// decision that does not map, a bug, leaves the window to the pass over
/// its decomposition). Also the µs it took.
fn prepare_decided(
    graph: Graph,
    decided: &sweep::Decided,
    options: &FuseOptions,
    scratch: &mut FuseScratch,
) -> Result<(Prepared, f64), GraphError> {
    let t = Instant::now();
    let (d, _) = decompose_owned(graph)?;
    let p = match decided.expand(&d) {
        Ok(plan) => Prepared::with_plan(d, plan, options),
        Err(_) => Prepared::from_graph_in(d, options, scratch)?,
    };
    Ok((p, t.elapsed().as_secs_f64() * 1e6))
}

/// In builds with debug assertions, checks the claim of
/// [`symbolic_decision`]: `decided`, handed over to `graph`, is the plan
/// `graph`'s own decision makes.
fn debug_assert_own_decision(
    graph: &Graph,
    decided: &sweep::Decided,
    options: &FuseOptions,
    scratch: &mut FuseScratch,
) {
    if !cfg!(debug_assertions) {
        return;
    }
    let Some(Ok(own)) = FusionPlan::decide_recorded(graph, options, scratch) else {
        return;
    };
    let Ok((d, _)) = decompose_owned(graph.clone()) else {
        return;
    };
    if let (Ok(a), Ok(b)) = (own.expand(&d), decided.expand(&d)) {
        debug_assert_eq!(a.groups, b.groups);
        debug_assert_eq!(a.stacks, b.stacks);
        debug_assert_eq!(a.order, b.order);
    }
}

/// The decision of the symbolic copy of a window, from `decided`, the
/// decision of another window of the same class signature: that window's
/// class values `were` (the signature's tail), this one's `are`, and the
/// copy's symbol for each of this window's values (`symbols`, from
/// [`generalize`]). Each of the decided window's class values becomes the
/// symbol of the value in its place; extents outside the classes (below 2,
/// or fixed by a constant) are the same in both windows and the copy.
///
/// The sweep compares extents only for equality and against 1, and the
/// map from the decided window's extents to the copy's is one to one and
/// keeps 0, 1 and fixed extents: the copy's own decision is this one
/// ([`sweep::Decided::with_spaces`]). `None` when an extent of a group's
/// space has no place in the map (the signatures do not match).
fn symbolic_decision(
    decided: sweep::Decided,
    were: &[u64],
    are: &[u64],
    symbols: &[(i64, Dim)],
) -> Option<sweep::Decided> {
    // The tails end with the class signature's length.
    let (were, are) = (were.split_last()?.1, are.split_last()?.1);
    if were.len() != are.len() {
        return None;
    }
    let mut lost = false;
    let d = decided.with_spaces(|d| {
        let Some(v) = d.as_const() else {
            lost = true;
            return d.clone();
        };
        match were.iter().position(|&w| w as i64 == v) {
            Some(i) => match symbols.iter().find(|(x, _)| *x as u64 == are[i]) {
                Some((_, s)) => s.clone(),
                None => {
                    lost = true;
                    d.clone()
                }
            },
            // Below 2 or fixed: the same in every window of the class.
            None => d.clone(),
        }
    });
    (!lost).then_some(d)
}

/// Extents a window's constants fix: they keep their values in a class
/// signature and in the symbolic copy.
fn fixed_extents(g: &Graph) -> Vec<i64> {
    use dvm_graph::Op;
    let mut fixed = Vec::new();
    for node in g.nodes() {
        if matches!(node.op, Op::Constant(_)) {
            fixed.extend(node.shape.iter().filter_map(Dim::as_const));
        }
    }
    fixed
}

/// `g` with every extent of at least 2 that no constant fixes replaced by
/// a symbol (one per distinct value, in order of first appearance, each
/// declared `>= 2`), or `None` when the copy does not check out: an
/// operator infers a shape that is not the symbols' image of the window's
/// (a reshape's or slice's extents follow from values, not from equality).
/// Its fusion plan then holds for every window whose extents are equal
/// where `g`'s are. Also each replaced value with its symbol.
#[inline(never)]
fn generalize(g: &Graph) -> Option<(Graph, Vec<(i64, Dim)>)> {
    use dvm_graph::Op;
    let fixed = fixed_extents(g);
    let mut out = Graph::new();
    let mut classes: Vec<(i64, Dim)> = Vec::new();
    let mut sym = |d: &Dim, out: &mut Graph| -> Option<Dim> {
        let v = d.as_const()?;
        if v < 2 || fixed.contains(&v) {
            return Some(d.clone());
        }
        if let Some((_, s)) = classes.iter().find(|(w, _)| *w == v) {
            return Some(s.clone());
        }
        let s = Dim::from(
            out.symbol(&format!("e{}", classes.len()), 2, i64::MAX)
                .ok()?,
        );
        classes.push((v, s.clone()));
        Some(s)
    };
    for node in g.nodes() {
        let shape: Shape = node
            .shape
            .iter()
            .map(|d| sym(d, &mut out))
            .collect::<Option<_>>()?;
        let op = match &node.op {
            Op::ScalarDim(c, d) => Op::ScalarDim(*c, sym(d, &mut out)?),
            op => op.clone(),
        };
        // The window's names are valid and unique: no checks or lookups.
        let id = out
            .add_named(
                node.name.clone(),
                op,
                &node.operands,
                Some(node.dtype),
                Some(&shape),
            )
            .ok()?;
        if out[id].shape != shape {
            return None;
        }
    }
    for (name, id) in g.outputs() {
        out.output(name, *id).ok()?;
    }
    // The copy must give back the window itself: its inputs bind every
    // symbol, and every node's shape comes out as the window's.
    let inputs: Vec<(&str, Vec<u64>)> = g
        .inputs()
        .iter()
        .map(|&id| {
            let n = &g[id];
            let shape = n.shape.iter().map(|d| u64::try_from(d.as_const()?).ok());
            Some((n.name.as_str(), shape.collect::<Option<Vec<u64>>>()?))
        })
        .collect::<Option<_>>()?;
    let named: Vec<(&str, &[u64])> = inputs.iter().map(|(n, s)| (*n, s.as_slice())).collect();
    let bindings = out.bind(&named, &dvm_sym::Bindings::new()).ok()?;
    for (node, copy) in g.nodes().iter().zip(out.nodes()) {
        if copy.shape.len() != node.shape.len() {
            return None;
        }
        for (d, want) in copy.shape.iter().zip(node.shape.iter()) {
            if d.eval(&bindings).ok()? != want.as_const()? {
                return None;
            }
        }
    }
    Some((out, classes))
}

/// The structure of window `g` as words, and how many of them are its
/// class signature: per node its operator and attributes, operands, dtype
/// and shape, then the outputs, where every extent of at least 2 that no
/// constant fixes is the index of its value's class (first appearance
/// first), so that windows equal but for such values share the class
/// signature; then the classes' values and the class signature's length.
/// The whole is the concrete signature: the class signature with the
/// values of its classes gives back every extent, and the length at the
/// end keeps two such pairs from running together. No concrete signature
/// is a class signature (the cache holds both): that would end with
/// output ids, and the length exceeds every node id.
fn signature(g: &Graph) -> (Vec<u64>, usize) {
    use dvm_graph::Op;
    use std::hash::{Hash, Hasher};
    // Twelve words a node hold an operator of up to three words, two
    // operands, the dtype and rank, and three extents: the signature of
    // a window of common operators is written without regrowing.
    let mut w: Vec<u64> = Vec::with_capacity(12 * g.nodes().len() + 8);
    let fixed = fixed_extents(g);
    let mut classes: Vec<i64> = Vec::new();
    let mut dim = |d: &Dim| -> u64 {
        match d.as_const() {
            Some(v) if v >= 2 && !fixed.contains(&v) => {
                let i = classes.iter().position(|&c| c == v).unwrap_or_else(|| {
                    classes.push(v);
                    classes.len() - 1
                });
                i as u64 | 1 << 62
            }
            Some(v) => v as u64,
            None => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                d.hash(&mut h);
                h.finish() | 1 << 63
            }
        }
    };
    for node in g.nodes() {
        match &node.op {
            Op::Input => w.push(1),
            Op::Constant(v) => {
                w.extend([2, v.len() as u64]);
                w.extend(v.iter().map(|x| x.to_bits()));
            }
            Op::Unary(c) => w.extend([3, *c as u64]),
            Op::Binary(c) => w.extend([4, *c as u64]),
            Op::Scalar(c, v) => w.extend([5, *c as u64, v.to_bits()]),
            Op::ScalarDim(c, d) => w.extend([6, *c as u64, dim(d)]),
            Op::Where => w.push(7),
            Op::Cast => w.push(8),
            Op::Reduce { op, axes, keepdims } => {
                w.extend([9, *op as u64, u64::from(*keepdims), axes.len() as u64]);
                w.extend(axes.iter().map(|&a| a as u64));
            }
            Op::Softmax { axis } => w.extend([10, *axis as u64]),
            Op::LogSoftmax { axis } => w.extend([11, *axis as u64]),
            Op::LayerNorm { eps } => w.extend([12, eps.to_bits()]),
            Op::RmsNorm { eps } => w.extend([13, eps.to_bits()]),
            Op::MatMul { trans_a, trans_b } => {
                w.extend([14, u64::from(*trans_a), u64::from(*trans_b)])
            }
            Op::Reshape => w.push(15),
            Op::Transpose { perm } => {
                w.extend([16, perm.len() as u64]);
                w.extend(perm.iter().map(|&p| p as u64));
            }
            Op::Slice { ranges } => {
                w.extend([17, ranges.len() as u64]);
                for &(a, s, e, st) in ranges {
                    w.extend([a as u64, s as u64, e as u64, st as u64]);
                }
            }
            Op::Concat { axis } => w.extend([18, *axis as u64]),
            Op::Expand => w.push(19),
            Op::Squeeze { axes } => {
                w.extend([20, axes.len() as u64]);
                w.extend(axes.iter().map(|&a| a as u64));
            }
            Op::Unsqueeze { axes } => {
                w.extend([21, axes.len() as u64]);
                w.extend(axes.iter().map(|&a| a as u64));
            }
            Op::Iota { axis } => w.extend([22, *axis as u64]),
            Op::Trilu { upper, k } => w.extend([23, u64::from(*upper), *k as u64]),
            Op::Gather { axis } => w.extend([24, *axis as u64]),
            Op::Conv2d(a) => {
                w.extend([25, a.groups as u64]);
                w.extend(
                    a.strides
                        .iter()
                        .chain(&a.pads)
                        .chain(&a.dilations)
                        .map(|&v| v as u64),
                );
            }
            Op::MaxPool2d(p) | Op::AvgPool2d { pool: p, .. } => {
                let avg = match &node.op {
                    Op::AvgPool2d {
                        count_include_pad, ..
                    } => 1 + u64::from(*count_include_pad),
                    _ => 0,
                };
                w.extend([26, avg]);
                let window = p.kernel.iter().chain(&p.strides).chain(&p.pads);
                w.extend(window.chain(&p.dilations).map(|&v| v as u64));
            }
        }
        w.push(node.operands.len() as u64);
        w.extend(node.operands.iter().map(|o| o.0 as u64));
        w.extend([node.dtype as u64, node.shape.len() as u64]);
        w.extend(node.shape.iter().map(&mut dim));
    }
    w.push(u64::MAX);
    w.extend(g.outputs().iter().map(|(_, id)| id.0 as u64));
    let n = w.len();
    w.extend(classes.iter().map(|&v| v as u64));
    w.push(n as u64);
    (w, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dvm_graph::models::generated_graph as generated_graph_rows;

    /// The warm-up window goes the way a context's windows go: decided
    /// over its recorded operators, then prepared, fused into fewer
    /// kernels than operators.
    #[test]
    fn the_warm_up_window_takes_the_decision_path() {
        let g = warm_window().expect("builds");
        let ops = g.nodes().len() - 3;
        let options = Eager::new(1).inner.borrow().options;
        let mut scratch = FuseScratch::default();
        let decided = FusionPlan::decide_recorded(&g, &options, &mut scratch);
        assert!(matches!(decided, Some(Ok(_))));
        let (p, _, kept) = prepare(g, &options, &mut scratch, true).expect("prepares");
        assert!(kept.is_some(), "decided over the recorded operators");
        let groups = p.fusion().groups.len();
        assert!(
            groups > 0 && groups < ops,
            "{groups} groups for {ops} operators"
        );
    }

    /// The decision cache is bounded: windows of more distinct structures
    /// than it holds (chains of nine adds and multiplies, the pattern
    /// spelling the window's number in binary) never make it hold more
    /// than [`DECISIONS`] entries, and the context keeps computing right
    /// values after it forgot.
    #[test]
    fn the_decision_cache_stays_bounded() {
        let cx = Eager::new(1);
        let mut most = 0;
        for n in 0..(DECISIONS as u32 + 40) {
            let mut y = cx.tensor(Tensor::from_f32(&[2, 3], &[1.0; 6]).unwrap());
            for bit in 0..9 {
                let op = if n >> bit & 1 == 1 {
                    Opcode::AddS
                } else {
                    Opcode::MulS
                };
                y = y.scalar(op, 1.0).unwrap();
            }
            let want = 1.0 + n.count_ones() as f32;
            assert_eq!(y.to_f32_vec().unwrap(), vec![want; 6], "window {n}");
            let len = cx.inner.borrow().decisions.len;
            assert!(len <= DECISIONS, "window {n}: {len} decisions kept");
            most = most.max(len);
        }
        assert!(
            most > DECISIONS / 2,
            "the windows were meant to fill it: {most}"
        );
    }

    /// [`symbolic_decision`]'s claim: a window's decision, its spaces
    /// rewritten in the symbols of the copy of another window of its
    /// class, is the copy's own decision.
    #[test]
    fn the_first_windows_decision_is_the_symbolic_copys() {
        let opts = FuseOptions::eager();
        let mut scratch = FuseScratch::default();
        let mut checked = 0;
        for seed in 0..400 {
            for (a, b) in [(33, 40), (17, 100), (2, 9)] {
                let (ga, gb) = (
                    generated_graph_rows(seed, Some(a)),
                    generated_graph_rows(seed, Some(b)),
                );
                let ((sa, na), (sb, nb)) = (signature(&ga), signature(&gb));
                assert_eq!(sa[..na], sb[..nb], "seed {seed}: one class");
                let Some((copy, symbols)) = generalize(&gb) else {
                    continue;
                };
                let Some(Ok(first)) = FusionPlan::decide_recorded(&ga, &opts, &mut scratch) else {
                    continue;
                };
                let handed = symbolic_decision(first, &sa[na..], &sb[nb..], &symbols)
                    .expect("every space maps");
                let own = FusionPlan::decide_recorded(&copy, &opts, &mut scratch)
                    .expect("the copy is decided like the window")
                    .unwrap();
                let (d, _) = decompose_owned(copy).unwrap();
                let (x, y) = (handed.expand(&d).unwrap(), own.expand(&d).unwrap());
                assert_eq!(x.groups, y.groups, "seed {seed}, rows {a} and {b}");
                assert_eq!(x.stacks, y.stacks, "seed {seed}");
                assert_eq!(x.order, y.order, "seed {seed}");
                checked += 1;
            }
        }
        assert!(checked > 600, "{checked} checked");
    }
}
