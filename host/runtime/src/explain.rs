//! `dvm explain`: the fusion groups of a graph (decided once, symbolically),
//! why neighbouring operators were not fused, and the kernels at a bound
//! shape with their kind, tiling and bytes moved, next to the unfused
//! figures.

use std::fmt::Write as _;

use crate::{Prepared, RunError, Runtime};
use dvm_compile::lower::{LaunchKind, Plan};
use dvm_fuse::{FuseOptions, FusionPlan, Reason, Rejection, Role, Unit};
use dvm_graph::{Graph, NodeId, ShapeDisplay};
use dvm_sym::Bindings;

/// The summary of one plan at a bound shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Totals {
    /// Kernel groups (steps).
    pub kernels: usize,
    /// Launches.
    pub launches: usize,
    /// Bytes read and written in global memory per call.
    pub bytes_moved: u64,
}

/// Kernel and launch counts and bytes moved of `prepared` at `bindings`.
///
/// # Errors
/// [`RunError`] from lowering or compiling.
pub fn totals(rt: &Runtime, prepared: &Prepared, bindings: &Bindings) -> Result<Totals, RunError> {
    let (plan, kernels) = rt.plan(prepared, bindings)?;
    Ok(Totals {
        kernels: plan.steps.len(),
        launches: plan.launches.len(),
        bytes_moved: kernels.iter().map(|k| k.info.bytes_moved).sum(),
    })
}

fn names(g: &Graph, nodes: &[NodeId]) -> String {
    nodes
        .iter()
        .map(|n| g[*n].name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn bytes(b: u64) -> String {
    if b >= 10 << 20 {
        format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
    } else if b >= 10 << 10 {
        format!("{:.1} KiB", b as f64 / 1024.0)
    } else {
        format!("{b} B")
    }
}

/// The `dvm explain` report for `graph` at `bindings` with `options`,
/// compiled for `rt`'s target.
///
/// # Errors
/// [`RunError`] for a graph that does not decompose, lower or compile at
/// these bindings (e.g. an unbound symbol).
pub fn explain(
    graph: &Graph,
    bindings: &Bindings,
    options: &FuseOptions,
    rt: &Runtime,
) -> Result<String, RunError> {
    let prepared = Prepared::with_options(graph, options)?;
    let g = prepared.graph();
    let f = prepared.fusion();
    let mut out = String::new();
    let binds: Vec<String> = bindings.iter().map(|(s, v)| format!("{s}={v}")).collect();
    let _ = writeln!(
        out,
        "fusion {} (stacking {}, sequences {}), {} core(s), bindings: {}",
        if options.fuse { "on" } else { "off" },
        if options.stack { "on" } else { "off" },
        if options.sequence { "on" } else { "off" },
        rt.target().cores,
        if binds.is_empty() {
            "none".to_string()
        } else {
            binds.join(" ")
        }
    );
    if let Some(e) = prepared.fuse_error() {
        let _ = writeln!(out, "fusion abandoned, running unfused: {e}");
    }

    write_groups(&mut out, g, f);
    write_not_fused(&mut out, g, f);
    write_kernels(&mut out, g, f, rt, &prepared, bindings)?;
    if options.fuse || options.stack || options.sequence {
        let unfused = Prepared::with_options(graph, &FuseOptions::off())?;
        let t = totals(rt, &unfused, bindings)?;
        let _ = writeln!(
            out,
            "unfused: {} kernel(s) in {} launch(es), {} moved per call",
            t.kernels,
            t.launches,
            bytes(t.bytes_moved)
        );
    }
    Ok(out)
}

/// The plan's fusion groups, stacks and the nodes in none.
fn write_groups(out: &mut String, g: &Graph, f: &FusionPlan) {
    let _ = writeln!(
        out,
        "\nfusion groups (decided once on the symbolic graph, {} rewrites):",
        f.applied.len()
    );
    for (i, c) in f.groups.iter().enumerate() {
        let _ = writeln!(
            out,
            "  g{i:<3} {:<16} {:<16} {}",
            c.kind.describe(),
            ShapeDisplay(&c.space).to_string(),
            names(g, &c.nodes)
        );
    }
    for (i, s) in f.stacks.iter().enumerate() {
        let members: Vec<String> = s.iter().map(|c| format!("g{c}")).collect();
        let _ = writeln!(out, "  stack {i}: parallel launch of {}", members.join(" "));
    }
    let data: Vec<String> = f
        .order
        .iter()
        .filter_map(|u| match u {
            Unit::Node(n) if g[*n].op != dvm_graph::Op::Input => {
                Some(format!("{} ({})", g[*n].name, g[*n].op.name()))
            }
            _ => None,
        })
        .collect();
    if !data.is_empty() {
        let _ = writeln!(
            out,
            "  not in a group (views, data, opaque): {}",
            data.join(", ")
        );
    }
}

/// Why neighbouring groups were not fused: the plan's rejections, and the
/// group values that views and opaque operators read.
fn write_not_fused(out: &mut String, g: &Graph, f: &FusionPlan) {
    let _ = writeln!(out, "\nwhy neighbours were not fused:");
    let mut any = !f.rejections.is_empty();
    write_rejections(out, g, &f.rejections);
    // Group outputs consumed by views or opaque operators.
    for (i, node) in g.nodes().iter().enumerate() {
        if !matches!(f.roles[i], Role::Data | Role::Opaque) || node.op == dvm_graph::Op::Input {
            continue;
        }
        for o in &node.operands {
            if f.owner[o.0].is_some() {
                any = true;
                let _ = writeln!(
                    out,
                    "  {} / {}: `{}` ({}) is not fused (views and data movement end a group): its operand is stored",
                    g[*o].name,
                    node.name,
                    node.name,
                    node.op.name()
                );
            }
        }
    }
    if !any {
        let _ = writeln!(out, "  (none)");
    }
}

/// The kernels at `bindings`: per launch its kind, tiling, UB bytes and
/// bytes moved, and the total.
fn write_kernels(
    out: &mut String,
    g: &Graph,
    f: &FusionPlan,
    rt: &Runtime,
    prepared: &Prepared,
    bindings: &Bindings,
) -> Result<(), RunError> {
    let (plan, kernels) = rt.plan(prepared, bindings)?;
    let _ = writeln!(out, "\nkernels at these shapes:");
    let _ = writeln!(
        out,
        "  {:<3} {:<9} {:<9} {:<24} {:<10} {:>6} {:>7} {:>9} {:>12}",
        "#", "launch", "kind", "name", "tile", "tiles", "bodies", "UB bytes", "bytes moved"
    );
    for (i, (l, k)) in plan.launches.iter().zip(&kernels).enumerate() {
        let launch = match l.kind {
            LaunchKind::Single => "single",
            LaunchKind::Parallel => "parallel",
            LaunchKind::Sequence => "sequence",
        };
        let info = &k.info;
        let mut name = k.name().to_string();
        if name.len() > 24 {
            name.truncate(21);
            name.push_str("...");
        }
        let _ = writeln!(
            out,
            "  {i:<3} {launch:<9} {:<9} {name:<24} {:<10} {:>6} {:>7} {:>9} {:>12}",
            info.kind.name(),
            format!("{}x{}", info.tile.0, info.tile.1),
            info.tiles,
            info.bodies,
            info.ub_bytes,
            bytes(info.bytes_moved)
        );
        for &s in &l.steps {
            let step = &plan.steps[s];
            let group = step
                .nodes
                .first()
                .and_then(|n| f.owner[n.0])
                .map(|c| format!("g{c}"))
                .unwrap_or_else(|| "-".into());
            let _ = writeln!(
                out,
                "        {group:<5} {}: {}",
                step.name,
                if step.nodes.is_empty() {
                    "copy".to_string()
                } else {
                    names(g, &step.nodes)
                }
            );
        }
    }
    for n in &plan.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    let moved: u64 = kernels.iter().map(|k| k.info.bytes_moved).sum();
    let _ = writeln!(
        out,
        "\ntotal: {} kernel(s) in {} launch(es), {} moved per call",
        plan.steps.len(),
        plan.launches.len(),
        bytes(moved)
    );
    Ok(())
}

/// Number of kernels (steps) and launches of `plan`.
pub fn counts(plan: &Plan) -> (usize, usize) {
    (plan.steps.len(), plan.launches.len())
}

/// Rejections of sibling candidates listed per shared input, at most this
/// many: an input every layer of a model reads (an attention mask, a
/// bias shared by all layers) has readers in every layer, and every pair
/// of them is a candidate that a dependence between the layers rejects,
/// which would be hundreds of thousands of lines for a deep model.
pub(crate) const SIBLINGS_LISTED: usize = 6;

/// One line per rejection; sibling candidates beyond
/// [`SIBLINGS_LISTED`] per shared input are counted in one line after
/// that input's last listed rejection, by reason (a cycle between
/// kernels, or another).
fn write_rejections(out: &mut String, g: &Graph, rejections: &[Rejection]) {
    use std::collections::HashMap;
    // Per shared input: the rejections past the listed ones, as
    // (cycles, others).
    let mut rest: HashMap<NodeId, (usize, usize)> = HashMap::new();
    let mut seen: HashMap<NodeId, usize> = HashMap::new();
    for r in rejections {
        if let Some(v) = r.via {
            let k = seen.entry(v).or_default();
            *k += 1;
            if *k > SIBLINGS_LISTED {
                let e = rest.entry(v).or_default();
                match r.reason {
                    Reason::Cycle { .. } => e.0 += 1,
                    _ => e.1 += 1,
                }
            }
        }
    }
    seen.clear();
    for r in rejections {
        let mut last_listed = None;
        if let Some(v) = r.via {
            let k = seen.entry(v).or_default();
            *k += 1;
            if *k > SIBLINGS_LISTED {
                continue;
            }
            if *k == SIBLINGS_LISTED {
                last_listed = rest.get(&v).map(|&counts| (v, counts));
            }
        }
        let via = r
            .via
            .map(|v| format!(" (both read `{}`)", g[v].name))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {} / {}{via} [{}]: {}",
            g[r.a].name, g[r.b].name, r.rule, r.reason
        );
        if let Some((v, (cycles, others))) = last_listed {
            let mut why = Vec::new();
            if cycles > 0 {
                why.push(format!(
                    "{cycles} would create a cycle between kernels (one group depends on the other)"
                ));
            }
            if others > 0 {
                why.push(format!("{others} for other reasons"));
            }
            let _ = writeln!(
                out,
                "  … and {} more pairs of groups that both read `{}` [{}]: {}",
                cycles + others,
                g[v].name,
                r.rule,
                why.join(", ")
            );
        }
    }
}
