//! The compiler a device runs kernels from: a prepared graph at bound
//! shapes is lowered, each group compiled (or found in the kernel cache)
//! for one [`Target`], small kernels packed into sequences and stacks
//! built.

use std::sync::Arc;

use dvm_compile::cache::{CacheStats, KernelCache};
use dvm_compile::codegen::Target;
use dvm_compile::kernel::ReadyKernel;
use dvm_compile::lower::{lower_with, Launch, LaunchKind, Plan};
use dvm_compile::stack::{launch_maps, pack_sequences, SequencePolicy};
use dvm_isa::KernelKind;
use dvm_sym::Bindings;

use crate::prepared::Planned;
use crate::{Prepared, RunError};

/// Lowers prepared graphs and compiles their kernels for one target,
/// keeping ready kernels in a cache.
pub struct Compiler {
    /// Unique in the process: keys the plans a [`Prepared`] keeps.
    id: u64,
    cache: KernelCache,
    target: Target,
}

impl std::fmt::Debug for Compiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiler")
            .field("target", &self.target)
            .field("cache", &self.cache.stats())
            .finish()
    }
}

impl Compiler {
    /// A compiler for `target` with a cache of `cache_capacity` kernels.
    pub fn new(target: Target, cache_capacity: usize) -> Compiler {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Compiler {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            cache: KernelCache::new(cache_capacity),
            target,
        }
    }

    /// A compiler for a device of `cores` cores (the default target
    /// otherwise) with a cache of `cache_capacity` kernels.
    pub fn for_cores(cores: usize, cache_capacity: usize) -> Compiler {
        let target = Target {
            cores: u32::try_from(cores).unwrap_or(u32::MAX).max(1),
            ..Target::default()
        };
        Compiler::new(target, cache_capacity)
    }

    /// The compile target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Cache counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// Lowers `prepared` at `bindings` following its fusion plan, compiles
    /// (or fetches) every kernel, packs small consecutive kernels into
    /// sequence launches (when the options allow) and builds the stacked
    /// kernels. Returns the plan and one kernel per launch. A stack that
    /// does not build falls back to separate launches. `prepared` keeps the
    /// last few plans it was lowered to (by compiler and bindings), so a call
    /// at recent shapes skips the lowering.
    ///
    /// # Errors
    /// [`RunError`] naming the node or step at fault.
    pub fn plan(
        &self,
        prepared: &Prepared,
        bindings: &Bindings,
    ) -> Result<(Plan, Vec<Arc<ReadyKernel>>), RunError> {
        let p = self.planned(prepared, bindings)?;
        Ok((p.plan.clone(), p.kernels.clone()))
    }

    /// [`Compiler::plan`], shared: from `prepared`'s plans when it was
    /// lowered at `bindings` by this compiler lately, else lowered and kept.
    pub(crate) fn planned(
        &self,
        prepared: &Prepared,
        bindings: &Bindings,
    ) -> Result<Arc<Planned>, RunError> {
        if let Some(p) = prepared.plans().get(self.id, bindings) {
            return Ok(p);
        }
        let (plan, kernels) = self.lower_plan(prepared, bindings)?;
        let p = Arc::new(Planned { plan, kernels });
        prepared.plans().put(self.id, bindings, &p);
        Ok(p)
    }

    fn lower_plan(
        &self,
        prepared: &Prepared,
        bindings: &Bindings,
    ) -> Result<(Plan, Vec<Arc<ReadyKernel>>), RunError> {
        let (mut plan, step_kernels) = lower_with(
            prepared.graph(),
            bindings,
            prepared.fusion(),
            &mut |g, name| self.cache.get_or_build(g, name, &self.target),
        )?;
        if prepared.options().sequence {
            let tiles: Vec<u64> = step_kernels.iter().map(|k| k.info.tiles).collect();
            let bodies: Vec<usize> = step_kernels.iter().map(|k| k.info.bodies).collect();
            pack_sequences(
                &mut plan,
                &tiles,
                &bodies,
                &SequencePolicy::for_cores(self.target.cores),
            );
        }
        let mut launches = Vec::with_capacity(plan.launches.len());
        let mut kernels = Vec::with_capacity(plan.launches.len());
        for l in std::mem::take(&mut plan.launches) {
            let kind = match l.kind {
                LaunchKind::Single => {
                    kernels.push(Arc::clone(&step_kernels[l.steps[0]]));
                    launches.push(l);
                    continue;
                }
                LaunchKind::Parallel => KernelKind::Parallel,
                LaunchKind::Sequence => KernelKind::Sequence,
            };
            let groups: Vec<&dvm_compile::codegen::Group> =
                l.steps.iter().map(|&s| &plan.steps[s].group).collect();
            let name = l
                .steps
                .iter()
                .map(|&s| plan.steps[s].name.as_str())
                .collect::<Vec<_>>()
                .join("+");
            let built = launch_maps(&plan, &l).map(|maps| {
                self.cache
                    .get_or_build_stack(kind, &groups, &maps, &name, &self.target)
            });
            match built {
                Some(Ok(k)) => {
                    kernels.push(k);
                    launches.push(l);
                }
                other => {
                    let why = match other {
                        Some(Err(e)) => e.to_string(),
                        _ => "too many buffers".to_string(),
                    };
                    plan.notes.push(format!(
                        "{} launch `{name}` not stacked at these shapes: {why}",
                        kind.name()
                    ));
                    for &s in &l.steps {
                        kernels.push(Arc::clone(&step_kernels[s]));
                        launches.push(Launch {
                            kind: LaunchKind::Single,
                            steps: vec![s],
                        });
                    }
                }
            }
        }
        plan.launches = launches;
        Ok((plan, kernels))
    }
}
