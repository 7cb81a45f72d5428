//! Graphs prepared for running: decomposed and fused once, on the
//! symbolic graph, with the plans they were lowered to at recent shapes.

use std::ops::Range;
use std::sync::Arc;

use dvm_compile::kernel::ReadyKernel;
use dvm_compile::lower::Plan;
use dvm_fuse::{FuseError, FuseOptions, FuseScratch, FusionPlan};
use dvm_graph::{decompose_owned, decompose_with_spans, Graph, GraphError};
use dvm_sym::Bindings;

/// A graph prepared for running: composites decomposed and the fusion pass
/// run, once, on the symbolic graph.
pub struct Prepared {
    graph: Graph,
    fusion: FusionPlan,
    options: FuseOptions,
    fuse_error: Option<FuseError>,
    plans: PlanCache,
}

/// A lowered plan and its kernels, one per launch.
pub(crate) struct Planned {
    pub(crate) plan: Plan,
    pub(crate) kernels: Vec<Arc<ReadyKernel>>,
}

/// Plans a prepared graph was lowered to, most recent first, by runtime
/// and bindings: a call at shapes seen a moment ago only binds and looks
/// its plan up instead of lowering again.
#[derive(Default)]
pub(crate) struct PlanCache(std::sync::Mutex<Vec<(u64, Bindings, Arc<Planned>)>>);

/// Most plans a [`Prepared`] keeps.
const PLANS_KEPT: usize = 8;

impl PlanCache {
    pub(crate) fn get(&self, runtime: u64, b: &Bindings) -> Option<Arc<Planned>> {
        let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let i = v.iter().position(|(r, k, _)| *r == runtime && k == b)?;
        let hit = v.remove(i);
        let planned = Arc::clone(&hit.2);
        v.insert(0, hit);
        Some(planned)
    }

    pub(crate) fn put(&self, runtime: u64, b: &Bindings, planned: &Arc<Planned>) {
        let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        v.truncate(PLANS_KEPT - 1);
        v.insert(0, (runtime, b.clone(), Arc::clone(planned)));
    }
}

impl Prepared {
    /// Decomposes `graph`'s composites and fuses it with the default options.
    ///
    /// # Errors
    /// [`GraphError`] from the decomposition.
    pub fn new(graph: &Graph) -> Result<Prepared, GraphError> {
        Prepared::with_options(graph, &FuseOptions::default())
    }

    /// Decomposes `graph`'s composites and fuses it with `options`
    /// ([`FuseOptions::off`]: one kernel per operator). Should the fusion
    /// pass fail its consistency check (a bug), the graph runs unfused and
    /// [`Prepared::fuse_error`] says why.
    ///
    /// # Errors
    /// [`GraphError`] from the decomposition.
    pub fn with_options(graph: &Graph, options: &FuseOptions) -> Result<Prepared, GraphError> {
        let (graph, composites) = decompose_with_spans(graph)?;
        let scratch = &mut FuseScratch::default();
        Ok(Prepared::decomposed(graph, &composites, options, scratch))
    }

    /// [`Prepared::with_options`] of a graph the caller gives up: its nodes
    /// move into the decomposed graph instead of being copied
    /// ([`decompose_owned`]); the result is the same.
    ///
    /// # Errors
    /// [`GraphError`] from the decomposition.
    pub fn from_graph(graph: Graph, options: &FuseOptions) -> Result<Prepared, GraphError> {
        Prepared::from_graph_in(graph, options, &mut FuseScratch::default())
    }

    /// [`Prepared::from_graph`], its fusion pass in the working memory of
    /// earlier ones ([`FusionPlan::with_scratch`]).
    ///
    /// # Errors
    /// As [`Prepared::from_graph`].
    pub fn from_graph_in(
        graph: Graph,
        options: &FuseOptions,
        scratch: &mut FuseScratch,
    ) -> Result<Prepared, GraphError> {
        let (graph, composites) = decompose_owned(graph)?;
        Ok(Prepared::decomposed(graph, &composites, options, scratch))
    }

    /// The decomposed `graph` with its fusion plan, made with `options`
    /// for this graph (lowering trusts the plan: crate-internal).
    pub(crate) fn with_plan(graph: Graph, fusion: FusionPlan, options: &FuseOptions) -> Prepared {
        Prepared {
            graph,
            fusion,
            options: *options,
            fuse_error: None,
            plans: PlanCache::default(),
        }
    }

    /// Fuses the decomposed `graph` whose composites became `composites`.
    fn decomposed(
        graph: Graph,
        composites: &[Range<usize>],
        options: &FuseOptions,
        scratch: &mut FuseScratch,
    ) -> Prepared {
        let (fusion, fuse_error) = if options.fuse || options.stack {
            match FusionPlan::with_scratch(&graph, options, composites, scratch) {
                Ok(f) => (f, None),
                Err(e) => (FusionPlan::unfused(&graph), Some(e)),
            }
        } else {
            (FusionPlan::unfused(&graph), None)
        };
        Prepared {
            graph,
            fusion,
            options: *options,
            fuse_error,
            plans: PlanCache::default(),
        }
    }

    /// The plans this graph was lowered to lately.
    pub(crate) fn plans(&self) -> &PlanCache {
        &self.plans
    }

    /// The decomposed graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The fusion plan.
    pub fn fusion(&self) -> &FusionPlan {
        &self.fusion
    }

    /// The fusion options.
    pub fn options(&self) -> &FuseOptions {
        &self.options
    }

    /// Why the fusion pass was abandoned, if it was.
    pub fn fuse_error(&self) -> Option<&FuseError> {
        self.fuse_error.as_ref()
    }
}
