//! Running graphs: lower at the bound shapes, fetch kernels from the cache,
//! allocate buffers, launch every step on the CPU device.

use std::sync::Arc;

use super::cache::{CacheStats, KernelCache};
use super::pool::{CpuPool, RawBuf};
use crate::compile::Target;
use crate::graph::{decompose, Graph, GraphError};
use crate::kernel::{BuildError, ReadyKernel};
use crate::lower::{lower, Buf, BufKind, LowerError, Plan};
use crate::sym::Bindings;
use crate::tensor::Tensor;

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad graph or inputs.
    #[error(transparent)]
    Graph(Box<GraphError>),
    /// Lowering failed.
    #[error(transparent)]
    Lower(Box<LowerError>),
    /// A kernel did not compile.
    #[error("kernel `{step}`: {error}")]
    Build {
        /// Step name.
        step: String,
        /// The failure.
        error: Box<BuildError>,
    },
    /// The QEMU device failed.
    #[error(transparent)]
    Qemu(Box<super::qemu::QemuError>),
    /// A launch failed.
    #[error("kernel `{step}`: {error}")]
    Launch {
        /// Step name.
        step: String,
        /// The failure.
        error: dvm_device::exec::ExecError,
    },
}

impl From<GraphError> for RunError {
    fn from(e: GraphError) -> RunError {
        RunError::Graph(Box::new(e))
    }
}

impl From<LowerError> for RunError {
    fn from(e: LowerError) -> RunError {
        RunError::Lower(Box::new(e))
    }
}

/// A graph prepared for running: composites decomposed once.
pub struct Prepared {
    graph: Graph,
}

impl Prepared {
    /// Decomposes `graph`'s composites.
    ///
    /// # Errors
    /// [`GraphError`] from the decomposition.
    pub fn new(graph: &Graph) -> Result<Prepared, GraphError> {
        Ok(Prepared {
            graph: decompose(graph)?,
        })
    }

    /// The decomposed graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
}

/// The CPU device runtime: a worker pool and a kernel cache.
pub struct Runtime {
    pool: CpuPool,
    cache: KernelCache,
    target: Target,
}

/// A dense, 8-byte aligned device buffer.
struct DevBuf(Vec<u64>, usize);

impl DevBuf {
    fn new(bytes: usize) -> DevBuf {
        DevBuf(vec![0u64; bytes.div_ceil(8).max(1)], bytes)
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        let n = self.1;
        &mut bytemuck_bytes(&mut self.0)[..n]
    }
    fn bytes(&self) -> &[u8] {
        let n = self.1;
        // SAFETY: u64 storage viewed as bytes; every bit pattern is a valid u8.
        let all =
            unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast::<u8>(), self.0.len() * 8) };
        &all[..n]
    }
}

fn bytemuck_bytes(v: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 storage viewed as bytes; every bit pattern is a valid u8
    // and u8 has alignment 1; the length covers exactly the same memory.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), v.len() * 8) }
}

impl Runtime {
    /// A runtime on `cores` cores with a cache of `cache_capacity` kernels.
    pub fn new(cores: usize, cache_capacity: usize) -> Runtime {
        let pool = CpuPool::new(cores);
        let target = Target {
            cores: pool.cores() as u32,
            ..Target::default()
        };
        Runtime {
            pool,
            cache: KernelCache::new(cache_capacity),
            target,
        }
    }

    /// The worker pool.
    pub fn pool(&self) -> &CpuPool {
        &self.pool
    }

    /// The compile target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Cache counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// Lowers `prepared` at `bindings` and compiles (or fetches) its kernels.
    ///
    /// # Errors
    /// [`RunError`] naming the node or step at fault.
    pub fn plan(
        &self,
        prepared: &Prepared,
        bindings: &Bindings,
    ) -> Result<(Plan, Vec<Arc<ReadyKernel>>), RunError> {
        let plan = lower(&prepared.graph, bindings)?;
        let kernels = plan
            .steps
            .iter()
            .map(|s| {
                self.cache
                    .get_or_build(&s.group, &s.name, &self.target)
                    .map_err(|error| RunError::Build {
                        step: s.name.clone(),
                        error: Box::new(error),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((plan, kernels))
    }

    /// Runs `prepared` on named `inputs`; symbols are deduced from the input
    /// shapes, plus `explicit` bindings.
    ///
    /// # Errors
    /// [`RunError`]: bad inputs (named), lowering, compile or launch failures.
    pub fn run(
        &self,
        prepared: &Prepared,
        inputs: &[(&str, &Tensor)],
        explicit: &Bindings,
    ) -> Result<Vec<(String, Tensor)>, RunError> {
        let graph = &prepared.graph;
        let bindings = graph.bind_tensors(inputs, explicit)?;
        let (plan, kernels) = self.plan(prepared, &bindings)?;
        let mut bufs: Vec<DevBuf> = plan
            .buffers
            .iter()
            .map(|b| DevBuf::new(b.bytes as usize))
            .collect();
        for (buf, info) in bufs.iter_mut().zip(&plan.buffers) {
            if let Some(src) = initial_bytes(graph, info, inputs) {
                let dst = buf.bytes_mut();
                let n = dst.len().min(src.len());
                dst[..n].copy_from_slice(&src[..n]);
            }
        }
        for (step, kernel) in plan.steps.iter().zip(&kernels) {
            let n_in = step.group.inputs.len();
            let raw: Vec<RawBuf> = step
                .args
                .iter()
                .enumerate()
                .map(|(k, &b)| {
                    let buf = &mut bufs[b];
                    RawBuf {
                        ptr: buf.0.as_mut_ptr().cast::<u8>(),
                        len: buf.1,
                        writable: k >= n_in,
                    }
                })
                .collect();
            // SAFETY: every buffer is a live allocation owned by this
            // function and not otherwise accessed during the launch; a
            // step's outputs are buffers distinct from its inputs.
            unsafe { self.pool.launch(&kernel.program, &raw) }.map_err(|error| {
                RunError::Launch {
                    step: step.name.clone(),
                    error,
                }
            })?;
        }
        plan.outputs
            .iter()
            .map(|(name, b, dt, shape)| {
                let bytes = bufs[*b].bytes().to_vec();
                Tensor::new(*dt, shape.clone(), bytes)
                    .map(|t| (name.clone(), t))
                    .map_err(|e| {
                        RunError::from(LowerError::Unsupported {
                            node: name.clone(),
                            what: e.to_string(),
                        })
                    })
            })
            .collect()
    }
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
