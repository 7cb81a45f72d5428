//! `dvm compile` and `dvm explain`: a graph at given bindings, as a
//! module of its kernels or as a report of its fusion groups and kernels.

use std::path::Path;

use dvm_isa::builder::ModuleBuilder;
use dvm_runtime::{Prepared, Runtime};

use crate::out_files::{write_all_atomic, write_atomic};
use crate::say::{out, outln};
use crate::sim_cmd::{print_report, SimArgs};
use crate::{all_cores, complete_binds, fuse_options, load_graph, run_failure, Failure};

/// Runs `dvm compile`: the graph's kernels at `binds`, one per launch
/// (named after its steps), written to `output` as one module.
pub fn cmd_compile(graph: &Path, binds: &[String], output: &Path) -> Result<(), Failure> {
    let g = load_graph(graph)?;
    let complete = complete_binds(&g, binds)?;
    let rt = Runtime::new(1, 1024);
    let prepared = Prepared::new(&g).map_err(|e| Failure(e.to_string(), 2))?;
    let (plan, kernels) = rt.plan(&prepared, &complete).map_err(run_failure)?;
    let mut builder = ModuleBuilder::new();
    for (launch, k) in plan.launches.iter().zip(&kernels) {
        // The kernel was verified when built: not parsing is a bug.
        let mut def = k
            .kernel_def()
            .map_err(|e| Failure(format!("internal error: {e}"), 1))?;
        def.name = launch
            .steps
            .iter()
            .map(|&s| plan.steps[s].name.as_str())
            .collect::<Vec<_>>()
            .join("+");
        builder
            .add_kernel(def)
            .map_err(|e| Failure(e.to_string(), 2))?;
    }
    write_atomic(output, &builder.finish(), &[graph], || {
        outln!("{}: {} kernel(s)", output.display(), kernels.len())
    })
}

/// Runs `dvm explain`: the fusion groups, why neighbours were not fused,
/// and the kernels at `binds` tiled for `cores`.
///
/// With `sim` (`--sim`), the kernels are tiled for the simulator's spec
/// and then timed on it (no values); its report follows.
pub fn cmd_explain(
    graph: &Path,
    binds: &[String],
    no_fuse: bool,
    cores: Option<usize>,
    sim: Option<&SimArgs>,
) -> Result<(), Failure> {
    let g = load_graph(graph)?;
    let complete = complete_binds(&g, binds)?;
    let dev = sim.map(|s| s.open(cores)).transpose()?;
    // With the simulator, the kernels listed are those it times.
    let own;
    let rt = match &dev {
        Some(d) => d.runtime(),
        None => {
            own = Runtime::new(cores.unwrap_or_else(all_cores), 1024);
            &own
        }
    };
    let text = dvm_runtime::explain::explain(&g, &complete, &fuse_options(no_fuse), rt)
        .map_err(run_failure)?;
    out!("{text}")?;
    if let (Some(dev), Some(args)) = (dev, sim) {
        let prepared = Prepared::with_options(&g, &fuse_options(no_fuse))
            .map_err(|e| Failure(e.to_string(), 2))?;
        dev.simulate(&prepared, &complete).map_err(run_failure)?;
        out!("\n")?;
        print_report(&dev, true)?;
        let files = args.files(&dev);
        let refs: Vec<(&Path, &[u8])> = files
            .iter()
            .map(|(p, b)| (p.as_path(), b.as_slice()))
            .collect();
        write_all_atomic(&refs, &[graph], || {
            files
                .iter()
                .try_for_each(|(p, _)| outln!("{}", p.display()))
        })?;
    }
    Ok(())
}
