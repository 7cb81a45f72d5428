//! Lowering a graph at concrete shapes into a plan: buffers, views, kernel
//! groups and launches.
//!
//! The fusion plan ([`dvm_fuse::FusionPlan`], made once on the symbolic
//! graph) says which operators share a kernel; lowering evaluates each fusion
//! group at the bound shapes into one [`Group`]: its external operands become
//! strided views broadcast to the group's space, its members tile-level
//! nodes, and only values used outside the group (or graph outputs) are
//! stored. A group that does not build at these shapes (live tiles beyond
//! the UB, or beyond the executor's capacity) is split in two along its
//! topological order, recursively, down to single operators: fusion never
//! fails a run that per-operator kernels can do.
//!
//! Views cost nothing: transpose, slice, expand, squeeze, unsqueeze and
//! reshape of a dense view only change the strides the consumers' loads use.
//! Reductions over several axes become one group per axis, concatenation one
//! copy group per operand. Graph outputs that are views of other buffers are
//! materialised by a copy.

use dvm_isa::{DType, Opcode};

use crate::codegen::view::contiguous_strides;
use crate::codegen::{Group, GroupKind, TileOp, View};
use crate::kernel::BuildError;
use dvm_fuse::legality::{validate, Facts};
use dvm_fuse::{FusionKind, FusionPlan, Role, Unit};
use dvm_graph::{ConcreteShapes, Graph, NodeId, Op, ReduceOp};
use dvm_sym::Bindings;

/// Index of a buffer in [`Plan::buffers`].
pub type BufId = usize;

/// Where a buffer's contents come from.
#[derive(Clone, Debug, PartialEq)]
pub enum BufKind {
    /// Graph input `i` (in [`Graph::inputs`] order).
    Input(usize),
    /// A constant, already converted to little-endian bytes.
    Const(Vec<u8>),
    /// Written by a kernel of the plan.
    Temp,
}

/// One buffer of a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Buf {
    /// Source.
    pub kind: BufKind,
    /// Size in bytes.
    pub bytes: u64,
}

/// One kernel of a plan (a fused group or a single operator).
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// Name (the graph node it comes from, plus a suffix when it takes several).
    pub name: String,
    /// What it computes.
    pub group: Group,
    /// Buffers bound to the group's inputs, then its outputs.
    pub args: Vec<BufId>,
    /// The graph nodes it computes (empty for copies of views).
    pub nodes: Vec<NodeId>,
}

/// How the kernels of one launch run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchKind {
    /// One kernel.
    Single,
    /// Independent kernels as the bodies of one parallel kernel.
    Parallel,
    /// Dependent kernels as the stages of one sequence kernel (a barrier
    /// between stages).
    Sequence,
}

/// One launch: one or more steps run as one kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// How its steps are combined.
    pub kind: LaunchKind,
    /// Steps, in order.
    pub steps: Vec<usize>,
}

/// A graph at concrete shapes, ready to compile and run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Buffers.
    pub buffers: Vec<Buf>,
    /// Kernels in dependence order.
    pub steps: Vec<Step>,
    /// Launches, covering every step once, in order.
    pub launches: Vec<Launch>,
    /// Graph outputs: name, buffer, dtype, shape (dense in the buffer).
    pub outputs: Vec<(String, BufId, DType, Vec<u64>)>,
    /// Fusion groups split at these shapes, and why.
    pub notes: Vec<String>,
}

impl Plan {
    /// The buffers launch `l` binds and whether it writes them. A single
    /// launch binds its step's arguments as they are: its kernel takes one
    /// parameter per group input, and a group may read one buffer through
    /// two views (a matmul's operand, read again by its epilogue as a
    /// residual). A stacked launch binds each buffer once, in first-seen
    /// order over its steps (a buffer one step writes and another reads is
    /// writable), which [`crate::stack::launch_maps`] maps its
    /// members' parameters onto.
    pub fn launch_args(&self, l: &Launch) -> (Vec<BufId>, Vec<bool>) {
        if let (LaunchKind::Single, [s]) = (l.kind, &l.steps[..]) {
            if let Some(step) = self.steps.get(*s) {
                let n_in = step.group.inputs.len();
                let writable = (0..step.args.len()).map(|k| k >= n_in).collect();
                return (step.args.clone(), writable);
            }
        }
        let mut bufs: Vec<BufId> = Vec::new();
        let mut writable: Vec<bool> = Vec::new();
        for &s in &l.steps {
            let step = &self.steps[s];
            let n_in = step.group.inputs.len();
            for (k, &b) in step.args.iter().enumerate() {
                match bufs.iter().position(|&x| x == b) {
                    Some(i) => writable[i] |= k >= n_in,
                    None => {
                        bufs.push(b);
                        writable.push(k >= n_in);
                    }
                }
            }
        }
        (bufs, writable)
    }
}

/// Why a graph could not be lowered.
#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    /// Shapes could not be evaluated.
    #[error(transparent)]
    Graph(Box<dvm_graph::GraphError>),
    /// The graph still holds an operator lowering does not handle
    /// (composites must be decomposed first).
    #[error("node `{node}`: {what}")]
    Unsupported {
        /// Node name.
        node: String,
        /// What is wrong.
        what: String,
    },
    /// A single operator's kernel did not build (nothing left to split).
    #[error("kernel `{step}`: {error}")]
    Build {
        /// Step name.
        step: String,
        /// The failure.
        error: Box<BuildError>,
    },
}

impl From<dvm_graph::GraphError> for LowerError {
    fn from(e: dvm_graph::GraphError) -> LowerError {
        LowerError::Graph(Box::new(e))
    }
}

#[derive(Clone, Debug)]
struct Value {
    buf: BufId,
    view: View,
}

/// Lowers `graph` (composites decomposed) at `bindings`, one kernel per
/// operator (no fusion), without compiling anything.
///
/// # Errors
/// [`LowerError`] naming the node at fault.
pub fn lower(graph: &Graph, bindings: &Bindings) -> Result<Plan, LowerError> {
    let fusion = FusionPlan::unfused(graph);
    lower_with(graph, bindings, &fusion, &mut |_, _| Ok(())).map(|(p, _)| p)
}

/// Lowers `graph` (composites decomposed) at `bindings` following `fusion`
/// (made for this graph), calling `build` on every kernel group; returns the
/// plan and what `build` returned for each step. When `build` fails on a
/// fused group, the group is split and its halves built instead (a note
/// records it); when it fails on a single operator, lowering fails.
///
/// # Errors
/// [`LowerError`] naming the node or step at fault.
pub fn lower_with<K>(
    graph: &Graph,
    bindings: &Bindings,
    fusion: &FusionPlan,
    build: &mut dyn FnMut(&Group, &str) -> Result<K, BuildError>,
) -> Result<(Plan, Vec<K>), LowerError> {
    let n = graph.nodes().len();
    if fusion.owner.len() != n || fusion.roles.len() != n {
        return Err(LowerError::Unsupported {
            node: String::new(),
            what: "the fusion plan was made for another graph".into(),
        });
    }
    // i64 is a graph and tensor dtype the instruction set does not have.
    if let Some(node) = graph.nodes().iter().find(|n| n.dtype == DType::I64) {
        return Err(LowerError::Unsupported {
            node: node.name.to_string(),
            what: "i64 tensors run on the reference device only: cast them to i32 \
                   (and the inputs to i32 tensors) to run on a compiled device"
                .into(),
        });
    }
    let shapes = graph.concrete_shapes(bindings)?;
    // A tensor without elements needs no kernel, and a group holding one
    // would be tiled over nothing: such a graph is lowered an operator at
    // a time, each empty value a buffer of no bytes (`lower_node`).
    let unfused;
    let empty = (0..n).find(|&i| is_empty(&shapes, NodeId(i)));
    let fusion = if empty.is_some() {
        unfused = FusionPlan::unfused(graph);
        &unfused
    } else {
        fusion
    };
    let mut lw = Lowerer {
        graph,
        bindings,
        shapes,
        plan: Plan::default(),
        values: vec![None; n],
        facts: fusion.facts(graph),
        layouts: &fusion.layouts,
    };
    if let Some(i) = empty {
        lw.plan.notes.push(format!(
            "lowered an operator at a time: `{}` has no elements at these shapes ({})",
            graph.nodes()[i].name,
            dvm_graph::DimsDisplay(&lw.shapes[i])
        ));
    }
    let mut kernels: Vec<K> = Vec::new();
    for unit in &fusion.order {
        match *unit {
            Unit::Node(id) => {
                let before = lw.plan.steps.len();
                lower_node(
                    graph,
                    bindings,
                    &lw.shapes,
                    &mut lw.plan,
                    &mut lw.values,
                    id.0,
                )?;
                for s in before..lw.plan.steps.len() {
                    lw.plan.steps[s].nodes = vec![id];
                    kernels.push(lw.build_step(s, build)?);
                    lw.plan.launches.push(Launch {
                        kind: LaunchKind::Single,
                        steps: vec![s],
                    });
                }
            }
            Unit::Group(c) => {
                let cl = fusion.groups.get(c).ok_or_else(|| bad_plan(graph))?;
                for s in lw.emit(&cl.nodes, build, &mut kernels)? {
                    lw.plan.launches.push(Launch {
                        kind: LaunchKind::Single,
                        steps: vec![s],
                    });
                }
            }
            Unit::Stack(st) => {
                let members = fusion.stacks.get(st).ok_or_else(|| bad_plan(graph))?;
                let mut per: Vec<Vec<usize>> = Vec::with_capacity(members.len());
                for &c in members {
                    let cl = fusion.groups.get(c).ok_or_else(|| bad_plan(graph))?;
                    per.push(lw.emit(&cl.nodes, build, &mut kernels)?);
                }
                let whole = per.iter().filter(|s| s.len() == 1).count();
                if whole >= 2 && per.iter().all(|s| s.len() <= 1) {
                    lw.plan.launches.push(Launch {
                        kind: LaunchKind::Parallel,
                        steps: per.into_iter().flatten().collect(),
                    });
                } else {
                    for s in per.into_iter().flatten() {
                        lw.plan.launches.push(Launch {
                            kind: LaunchKind::Single,
                            steps: vec![s],
                        });
                    }
                }
            }
        }
    }
    lower_outputs(graph, &mut lw.plan, &lw.values)?;
    // Output copies are steps too.
    let covered: usize = lw.plan.launches.iter().map(|l| l.steps.len()).sum();
    for s in covered..lw.plan.steps.len() {
        kernels.push(lw.build_step(s, build)?);
        lw.plan.launches.push(Launch {
            kind: LaunchKind::Single,
            steps: vec![s],
        });
    }
    Ok((lw.plan, kernels))
}

fn bad_plan(graph: &Graph) -> LowerError {
    LowerError::Unsupported {
        node: graph
            .nodes()
            .last()
            .map(|n| n.name.to_string())
            .unwrap_or_default(),
        what: "the fusion plan does not match the graph".into(),
    }
}

struct Lowerer<'a> {
    graph: &'a Graph,
    bindings: &'a Bindings,
    shapes: ConcreteShapes,
    plan: Plan,
    values: Vec<Option<Value>>,
    facts: Facts<'a>,
    layouts: &'a [Option<Vec<usize>>],
}

/// A group under construction ([`Lowerer::pending`]).
struct GroupBuilder {
    inputs: Vec<View>,
    /// The buffer of each input.
    in_args: Vec<BufId>,
    nodes: Vec<(TileOp, DType)>,
    /// Graph node → group node (members and loaded operands).
    map: Vec<(NodeId, usize)>,
}

/// A fused group before its output buffers exist.
struct Pending {
    group: Group,
    in_args: Vec<BufId>,
    /// Stored nodes with their shapes.
    outs: Vec<(NodeId, Vec<u64>, DType)>,
}

impl Lowerer<'_> {
    fn build_step<K>(
        &self,
        s: usize,
        build: &mut dyn FnMut(&Group, &str) -> Result<K, BuildError>,
    ) -> Result<K, LowerError> {
        let step = &self.plan.steps[s];
        build(&step.group, &step.name).map_err(|e| LowerError::Build {
            step: step.name.clone(),
            error: Box::new(e),
        })
    }

    /// Emits the fused group of `nodes` (ascending), splitting it when it
    /// is not a group at these shapes or does not build. Returns the steps.
    fn emit<K>(
        &mut self,
        nodes: &[NodeId],
        build: &mut dyn FnMut(&Group, &str) -> Result<K, BuildError>,
        kernels: &mut Vec<K>,
    ) -> Result<Vec<usize>, LowerError> {
        // A member without elements, or reading one, is lowered on its own
        // (`lower_node`: no kernel, or a constant).
        let empty = |n: NodeId| {
            is_empty(&self.shapes, n)
                || self.graph[n]
                    .operands
                    .iter()
                    .any(|&o| is_empty(&self.shapes, o))
        };
        if nodes.iter().any(|&n| empty(n)) {
            let mut steps = Vec::new();
            for &n in nodes {
                steps.extend(self.emit_single(n, build, kernels)?);
            }
            return Ok(steps);
        }
        let name = self.group_name(nodes);
        let member = |n: NodeId| nodes.binary_search(&n).is_ok();
        let why = match validate(&self.facts, nodes, &member) {
            Ok((kind, _)) => {
                let pending = self.pending(nodes, &kind, &member)?;
                if pending.outs.is_empty() {
                    // Nothing of the group is used: dead code.
                    return Ok(Vec::new());
                }
                match build(&pending.group, &name) {
                    Ok(k) => {
                        kernels.push(k);
                        return Ok(vec![self.commit(pending, name, nodes)]);
                    }
                    Err(e) if nodes.len() == 1 => {
                        // The per-operator lowering knows more ways to run one
                        // operator (two-stage reductions); should it fail too,
                        // the error is the group's own.
                        return self.emit_single(nodes[0], build, kernels).map_err(|_| {
                            LowerError::Build {
                                step: name,
                                error: Box::new(e),
                            }
                        });
                    }
                    Err(e) => e.to_string(),
                }
            }
            Err(reason) if nodes.len() > 1 => reason.to_string(),
            Err(reason) => {
                return Err(LowerError::Unsupported {
                    node: name,
                    what: reason.to_string(),
                })
            }
        };
        let mid = nodes.len() / 2;
        self.plan.notes.push(format!(
            "group `{name}` ({} nodes) split at these shapes: {why}",
            nodes.len()
        ));
        let mut steps = self.emit(&nodes[..mid], build, kernels)?;
        steps.extend(self.emit(&nodes[mid..], build, kernels)?);
        Ok(steps)
    }

    /// Lowers node `id` on its own, as the unfused path does; returns its
    /// steps (built).
    fn emit_single<K>(
        &mut self,
        id: NodeId,
        build: &mut dyn FnMut(&Group, &str) -> Result<K, BuildError>,
        kernels: &mut Vec<K>,
    ) -> Result<Vec<usize>, LowerError> {
        let before = self.plan.steps.len();
        let bufs_before = self.plan.buffers.len();
        let built_before = kernels.len();
        let result = lower_node(
            self.graph,
            self.bindings,
            &self.shapes,
            &mut self.plan,
            &mut self.values,
            id.0,
        )
        .and_then(|()| {
            for s in before..self.plan.steps.len() {
                self.plan.steps[s].nodes = vec![id];
                kernels.push(self.build_step(s, build)?);
            }
            Ok(())
        });
        if let Err(e) = result {
            kernels.truncate(built_before);
            self.plan.steps.truncate(before);
            self.plan.buffers.truncate(bufs_before);
            self.values[id.0] = None;
            return Err(e);
        }
        Ok((before..self.plan.steps.len()).collect())
    }

    /// The name of a group: its last stored member (a composite's name).
    fn group_name(&self, nodes: &[NodeId]) -> String {
        let member = |n: NodeId| nodes.binary_search(&n).is_ok();
        nodes
            .iter()
            .rev()
            .find(|&&n| self.facts.materialized(n, &member))
            .or(nodes.last())
            .map(|&n| self.graph[n].name.to_string())
            .unwrap_or_default()
    }

    fn value(&self, o: NodeId, at: NodeId) -> Result<&Value, LowerError> {
        self.values
            .get(o.0)
            .and_then(|v| v.as_ref())
            .ok_or_else(|| LowerError::Unsupported {
                node: self.graph[at].name.to_string(),
                what: format!("operand `{}` is not computed yet", self.graph[o].name),
            })
    }

    /// Builds the group of `nodes` at the bound shapes.
    fn pending(
        &self,
        nodes: &[NodeId],
        kind: &FusionKind,
        member: &dyn Fn(NodeId) -> bool,
    ) -> Result<Pending, LowerError> {
        let last = *nodes.last().ok_or_else(|| bad_plan(self.graph))?;
        let mut gb = GroupBuilder {
            inputs: Vec::new(),
            in_args: Vec::new(),
            nodes: Vec::with_capacity(nodes.len() + 4),
            map: Vec::with_capacity(nodes.len() + 4),
        };
        let (gkind, space, mm_node) = match kind {
            FusionKind::Matmul => {
                let (gkind, space, mm) = self.matmul_space(nodes, last, &mut gb)?;
                (gkind, space, Some(mm))
            }
            FusionKind::Reduce { axis } => {
                let r = nodes
                    .iter()
                    .find(|&&n| matches!(self.facts.roles[n.0], Role::Reduce { .. }))
                    .ok_or_else(|| {
                        self.unsupported(last, "reduce group without a reduction".into())
                    })?;
                let space = self.shapes[self.graph[*r].operands[0].0].clone();
                let gkind = GroupKind::Reduce {
                    shape: space.clone(),
                    axis: *axis,
                };
                (gkind, space, None)
            }
            FusionKind::Elementwise => {
                // The space is the shape of the widest stored node.
                let anchor = nodes
                    .iter()
                    .copied()
                    .filter(|&n| self.facts.materialized(n, member))
                    .max_by_key(|&n| (self.shapes[n.0].len(), n.0))
                    .unwrap_or(last);
                let space = self.shapes[anchor.0].clone();
                let gkind = GroupKind::Elementwise {
                    shape: space.clone(),
                };
                (gkind, space, None)
            }
        };
        for &n in nodes {
            if Some(n) != mm_node {
                self.add_member(n, &space, last, &mut gb)?;
            }
        }
        let mut outputs = Vec::new();
        let mut outs = Vec::new();
        for &n in nodes {
            if !self.facts.materialized(n, member) {
                continue;
            }
            let gi = gb
                .map
                .iter()
                .find(|(m, _)| *m == n)
                .map(|&(_, gi)| gi)
                .ok_or_else(|| bad_plan(self.graph))?;
            let shape = self.shapes[n.0].clone();
            let dt = self.graph[n].dtype;
            outputs.push((gi, self.stored_view(n, &gkind, &space, &shape, last)?));
            outs.push((n, shape, dt));
        }
        Ok(Pending {
            group: Group {
                kind: gkind,
                inputs: gb.inputs,
                nodes: gb.nodes,
                outputs,
            },
            in_args: gb.in_args,
            outs,
        })
    }

    /// A group's refusal, named after its last member `last`.
    fn unsupported(&self, last: NodeId, what: String) -> LowerError {
        LowerError::Unsupported {
            node: self.graph[last].name.to_string(),
            what,
        }
    }

    /// The kind and output space of a matmul group of `nodes` (`last` the
    /// last of them) and its matmul node: the matmul's operand views become
    /// the group's first two inputs and its result (cast from the
    /// accumulator's dtype when they differ) the first nodes of `gb`.
    fn matmul_space(
        &self,
        nodes: &[NodeId],
        last: NodeId,
        gb: &mut GroupBuilder,
    ) -> Result<(GroupKind, Vec<u64>, NodeId), LowerError> {
        let g = self.graph;
        let unsupported = |what: String| self.unsupported(last, what);
        let mm = *nodes
            .iter()
            .find(|&&n| self.facts.roles[n.0] == Role::Matmul)
            .ok_or_else(|| unsupported("matmul group without a matmul".into()))?;
        let Op::MatMul { trans_a, trans_b } = g[mm].op else {
            return Err(unsupported("matmul group without a matmul".into()));
        };
        let (a, b) = (
            self.value(g[mm].operands[0], mm)?,
            self.value(g[mm].operands[1], mm)?,
        );
        let mv = matmul_views(&a.view, &b.view, trans_a, trans_b).ok_or_else(|| {
            unsupported(format!(
                "`{}`: operand shapes do not form a matmul",
                g[mm].name
            ))
        })?;
        let mut osh = mv.batch.clone();
        osh.extend([mv.m, mv.n]);
        if osh != self.shapes[mm.0] {
            return Err(unsupported(format!(
                "`{}`: matmul output layout differs from its shape",
                g[mm].name
            )));
        }
        let dt = g[mm].dtype;
        let acc = acc_dtype(dt);
        gb.inputs.extend([mv.a, mv.b]);
        gb.in_args.extend([a.buf, b.buf]);
        gb.nodes.push((TileOp::Matmul, acc));
        if acc != dt {
            gb.nodes.push((TileOp::Cast(0), dt));
        }
        gb.map.push((mm, gb.nodes.len() - 1));
        let gkind = GroupKind::Matmul {
            batch: mv.batch,
            m: mv.m,
            n: mv.n,
            k: mv.k,
            acc,
        };
        Ok((gkind, osh, mm))
    }

    /// Adds member `n` to `gb` over `space`, after its operands: a member's
    /// node, or a value from outside the group loaded as a new input
    /// broadcast to the space.
    fn add_member(
        &self,
        n: NodeId,
        space: &[u64],
        last: NodeId,
        gb: &mut GroupBuilder,
    ) -> Result<(), LowerError> {
        let g = self.graph;
        let unsupported = |what: String| self.unsupported(last, what);
        let node = &g[n];
        let mut ops = [0usize; 3];
        for (k, &o) in node.operands.iter().enumerate().take(3) {
            ops[k] = match gb.map.iter().find(|(m, _)| *m == o) {
                Some(&(_, gi)) => gi,
                None => {
                    let v = self.value(o, n)?;
                    let view = v.view.broadcast_to(space).ok_or_else(|| {
                        unsupported(format!(
                            "operand `{}` does not broadcast to the group's space",
                            g[o].name
                        ))
                    })?;
                    let k = gb.inputs.len();
                    gb.nodes.push((TileOp::Input(k), view.dtype));
                    gb.inputs.push(view);
                    gb.in_args.push(v.buf);
                    gb.map.push((o, gb.nodes.len() - 1));
                    gb.nodes.len() - 1
                }
            };
        }
        let op = match &node.op {
            Op::Unary(c) => TileOp::Unary(*c, ops[0]),
            Op::Binary(c) => TileOp::Binary(*c, ops[0], ops[1]),
            Op::Scalar(c, v) => TileOp::Scalar(*c, ops[0], *v),
            Op::ScalarDim(c, d) => {
                let v = d
                    .eval(self.bindings)
                    .map_err(|e| unsupported(e.to_string()))?;
                TileOp::Scalar(*c, ops[0], v as f64)
            }
            Op::Where => TileOp::Select(ops[0], ops[1], ops[2]),
            Op::Cast => TileOp::Cast(ops[0]),
            Op::Reduce { op, .. } => TileOp::Reduce(
                reduce_opcode(*op).ok_or_else(|| {
                    unsupported(format!("`{}`: mean must be decomposed first", node.name))
                })?,
                ops[0],
            ),
            other => {
                return Err(unsupported(format!(
                    "`{}` ({}) cannot be part of a fused group",
                    node.name,
                    other.name()
                )))
            }
        };
        gb.nodes.push((op, node.dtype));
        gb.map.push((n, gb.nodes.len() - 1));
        Ok(())
    }

    /// The view member `n` (of `shape`) is stored through: dense over the
    /// group's space (in its layout's order, if it has one), or for a
    /// reduction's result, dense over the space with the axis reduced.
    fn stored_view(
        &self,
        n: NodeId,
        gkind: &GroupKind,
        space: &[u64],
        shape: &[u64],
        last: NodeId,
    ) -> Result<View, LowerError> {
        let g = self.graph;
        let dt = g[n].dtype;
        Ok(match (gkind, shape == space) {
            (_, true) => match self.layouts.get(n.0).and_then(|l| l.as_ref()) {
                Some(perm) => permuted_dense(dt, space, perm),
                None => View::contiguous(dt, space),
            },
            (GroupKind::Reduce { axis, .. }, false) => {
                let mut keep = space.to_vec();
                keep[*axis] = 1;
                let dropped: Vec<u64> = space
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| i != *axis)
                    .map(|(_, &d)| d)
                    .collect();
                if shape != keep && shape != dropped {
                    return Err(self.unsupported(
                        last,
                        format!(
                            "`{}` is stored but its shape fits neither the space nor the reduced space",
                            g[n].name
                        ),
                    ));
                }
                View::contiguous(dt, &keep)
            }
            _ => {
                return Err(self.unsupported(
                    last,
                    format!(
                        "`{}` is stored but its shape differs from the group's space",
                        g[n].name
                    ),
                ))
            }
        })
    }

    /// Allocates the stored values' buffers and records the step.
    fn commit(&mut self, p: Pending, name: String, nodes: &[NodeId]) -> usize {
        let mut args = p.in_args;
        for (k, (n, shape, dt)) in p.outs.into_iter().enumerate() {
            let mut v = new_buf(&mut self.plan, BufKind::Temp, dt, &shape);
            // A transposed store layout: the value's view has the strides
            // the group stores with.
            let stored = &p.group.outputs[k].1;
            if stored.shape == shape && stored.strides != v.view.strides {
                v.view.strides.clone_from(&stored.strides);
            }
            args.push(v.buf);
            self.values[n.0] = Some(v);
        }
        self.plan.steps.push(Step {
            name,
            group: p.group,
            args,
            nodes: nodes.to_vec(),
        });
        self.plan.steps.len() - 1
    }
}

/// A view of `shape` whose transpose by `perm` is dense: the buffer holds
/// the values in the transposed order.
fn permuted_dense(dt: DType, shape: &[u64], perm: &[usize]) -> View {
    let mut seen = vec![false; shape.len()];
    let valid = perm.len() == shape.len()
        && perm
            .iter()
            .all(|&p| p < shape.len() && !std::mem::replace(&mut seen[p], true));
    if !valid {
        return View::contiguous(dt, shape);
    }
    let tshape: Vec<u64> = perm.iter().map(|&p| shape[p]).collect();
    let tstrides = contiguous_strides(&tshape);
    let mut strides = vec![0u64; shape.len()];
    for (i, &p) in perm.iter().enumerate() {
        strides[p] = tstrides[i];
    }
    View {
        dtype: dt,
        offset: 0,
        shape: shape.to_vec(),
        strides,
    }
}

fn reduce_opcode(op: ReduceOp) -> Option<Opcode> {
    match op {
        ReduceOp::Sum => Some(Opcode::ReduceSum),
        ReduceOp::Max => Some(Opcode::ReduceMax),
        ReduceOp::Min => Some(Opcode::ReduceMin),
        ReduceOp::Mean => None,
    }
}

fn acc_dtype(dt: DType) -> DType {
    if dt == DType::I8 || dt == DType::I32 {
        DType::I32
    } else {
        DType::F32
    }
}

/// Lowers node `id` on its own, one kernel per operator: views change
/// strides only; copies, concatenations and multi-axis reductions become
/// steps of their own.
fn lower_node(
    graph: &Graph,
    bindings: &Bindings,
    shapes: &ConcreteShapes,
    plan: &mut Plan,
    values: &mut [Option<Value>],
    id: usize,
) -> Result<(), LowerError> {
    let node = &graph.nodes()[id];
    let shape = &shapes[id];
    let ln = NodeLowering {
        node,
        shape,
        values,
    };
    if let Some(value) = ln.value_without_elements(plan, shapes)? {
        values[id] = Some(value);
        return Ok(());
    }
    let dt = node.dtype;
    let value = match &node.op {
        Op::Input => {
            let i = graph
                .inputs()
                .iter()
                .position(|n| n.0 == id)
                .ok_or_else(|| ln.unsupported("input not in the input list"))?;
            new_buf(plan, BufKind::Input(i), dt, shape)
        }
        Op::Constant(vals) => ln.fill(plan, vals)?,
        Op::Iota { axis } => ln.iota(plan, *axis)?,
        Op::Unary(code) => ln.ewise(plan, &[ln.arg(0)?.clone()], TileOp::Unary(*code, 0))?,
        Op::Binary(code) => {
            let args = [ln.arg(0)?.clone(), ln.arg(1)?.clone()];
            ln.ewise(plan, &args, TileOp::Binary(*code, 0, 1))?
        }
        Op::Scalar(code, v) => {
            ln.ewise(plan, &[ln.arg(0)?.clone()], TileOp::Scalar(*code, 0, *v))?
        }
        Op::ScalarDim(code, d) => {
            let v = d
                .eval(bindings)
                .map_err(|e| ln.unsupported(&e.to_string()))? as f64;
            ln.ewise(plan, &[ln.arg(0)?.clone()], TileOp::Scalar(*code, 0, v))?
        }
        Op::Where => {
            let args = [ln.arg(0)?.clone(), ln.arg(1)?.clone(), ln.arg(2)?.clone()];
            ln.ewise(plan, &args, TileOp::Select(0, 1, 2))?
        }
        Op::Cast => ln.ewise(plan, &[ln.arg(0)?.clone()], TileOp::Cast(0))?,
        Op::Reduce { op, axes, keepdims } => ln.reduce(plan, *op, axes, *keepdims)?,
        Op::MatMul { trans_a, trans_b } => {
            let (a, b) = (ln.arg(0)?.clone(), ln.arg(1)?.clone());
            matmul(plan, &node.name, shape, dt, a, b, *trans_a, *trans_b)
                .ok_or_else(|| ln.unsupported("operand shapes do not form a matmul"))?
        }
        Op::Reshape => {
            let x = ln.arg(0)?.clone();
            let x = if is_dense(&x.view) {
                x
            } else {
                copy(plan, &node.name, &x)?
            };
            Value {
                buf: x.buf,
                view: dense(dt, shape, x.view.offset),
            }
        }
        Op::Transpose { perm } => {
            let x = ln.arg(0)?;
            Value {
                buf: x.buf,
                view: x.view.permute(perm),
            }
        }
        Op::Slice { ranges } => ln.slice(ranges)?,
        Op::Expand => {
            let x = ln.arg(0)?;
            let view = x
                .view
                .broadcast_to(shape)
                .ok_or_else(|| ln.unsupported("expand to an incompatible shape"))?;
            Value { buf: x.buf, view }
        }
        Op::Squeeze { .. } | Op::Unsqueeze { .. } => ln.squeeze()?,
        Op::Concat { axis } => ln.concat(plan, *axis)?,
        Op::Gather { axis } => ln.gather(plan, *axis)?,
        Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::LayerNorm { .. }
        | Op::RmsNorm { .. }
        | Op::Trilu { .. }
        | Op::Conv2d(_)
        | Op::MaxPool2d(_)
        | Op::AvgPool2d { .. } => {
            return Err(ln.unsupported("composites must be decomposed before lowering"))
        }
    };
    values[id] = Some(value);
    Ok(())
}

/// One node lowered on its own ([`lower_node`]): the node, its shape at
/// the bindings, and the values computed so far.
struct NodeLowering<'a> {
    node: &'a dvm_graph::Node,
    shape: &'a Vec<u64>,
    values: &'a [Option<Value>],
}

impl NodeLowering<'_> {
    fn unsupported(&self, what: &str) -> LowerError {
        LowerError::Unsupported {
            node: self.node.name.to_string(),
            what: what.to_string(),
        }
    }

    /// The value of operand `k`.
    fn arg(&self, k: usize) -> Result<&Value, LowerError> {
        self.node
            .operands
            .get(k)
            .and_then(|o| self.values.get(o.0))
            .and_then(|v| v.as_ref())
            .ok_or_else(|| self.unsupported("missing operand"))
    }

    /// A constant of the node's shape and dtype holding `vals`.
    fn fill(&self, plan: &mut Plan, vals: &[f64]) -> Result<Value, LowerError> {
        constant(plan, self.node.dtype, self.shape, vals)
            .map_err(|e| self.unsupported(&e.to_string()))
    }

    /// `iota` along `axis`: a constant of the axis' extent (`0, 1, …`)
    /// built at the bound shape and broadcast to the node's shape by a
    /// view (stride 0 on every other axis), so consumers load it as any
    /// operand and its cost is one value per index, not per element.
    fn iota(&self, plan: &mut Plan, axis: usize) -> Result<Value, LowerError> {
        let dt = self.node.dtype;
        let n = *self
            .shape
            .get(axis)
            .ok_or_else(|| self.unsupported("iota axis out of range"))?;
        let vals: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let v = constant(plan, dt, &[n], &vals).map_err(|e| self.unsupported(&e.to_string()))?;
        let mut strides = vec![0u64; self.shape.len()];
        strides[axis] = 1;
        Ok(Value {
            buf: v.buf,
            view: View {
                dtype: dt,
                offset: 0,
                shape: self.shape.clone(),
                strides,
            },
        })
    }

    /// One element-wise step computing `op` over `args`.
    fn ewise(&self, plan: &mut Plan, args: &[Value], op: TileOp) -> Result<Value, LowerError> {
        let node = self.node;
        ewise(plan, &node.name, self.shape, node.dtype, args, op)
    }

    /// The value of a node without elements or reading an operand without
    /// elements, which needs no kernel: a buffer of no bytes, or the
    /// constant an empty sum or matmul is. `None` for any other node (and
    /// for inputs, constants and concatenations, lowered as usual).
    fn value_without_elements(
        &self,
        plan: &mut Plan,
        shapes: &ConcreteShapes,
    ) -> Result<Option<Value>, LowerError> {
        let (node, shape) = (self.node, self.shape);
        let empty_operand = node.operands.iter().any(|&o| is_empty(shapes, o));
        Ok(match &node.op {
            Op::Input | Op::Constant(_) => None,
            // No elements: nothing to compute.
            _ if shape.contains(&0) => Some(new_buf(plan, BufKind::Temp, node.dtype, shape)),
            // Elements from none: a sum is 0, a product of `k = 0` terms
            // too; a maximum or minimum has none (as the reference says).
            Op::Reduce { op, .. } if empty_operand => match op {
                ReduceOp::Sum => Some(self.fill(plan, &[0.0])?),
                _ => return Err(self.unsupported("max/min over zero elements")),
            },
            Op::MatMul { .. } if empty_operand => Some(self.fill(plan, &[0.0])?),
            Op::Concat { .. } => None,
            _ if empty_operand => return Err(self.unsupported("an operand has no elements")),
            _ => None,
        })
    }

    /// A reduction over `axes`: one step per axis, innermost first.
    fn reduce(
        &self,
        plan: &mut Plan,
        op: ReduceOp,
        axes: &[usize],
        keepdims: bool,
    ) -> Result<Value, LowerError> {
        let dt = self.node.dtype;
        let code = match op {
            ReduceOp::Sum => Opcode::ReduceSum,
            ReduceOp::Max => Opcode::ReduceMax,
            ReduceOp::Min => Opcode::ReduceMin,
            ReduceOp::Mean => return Err(self.unsupported("mean must be decomposed first")),
        };
        let mut v = self.arg(0)?.clone();
        for (k, &axis) in axes.iter().enumerate().rev() {
            if axis >= v.view.shape.len() {
                return Err(self.unsupported("reduce axis out of range"));
            }
            let name = step_name(&self.node.name, k, axes.len());
            v = reduce_axis(plan, &name, v, axis, code, dt)?;
        }
        if !keepdims {
            v.view = dense(dt, self.shape, v.view.offset);
        }
        Ok(v)
    }

    /// The operand's view sliced by `ranges` (axis, start, end, step): an
    /// offset and strides, no copy.
    fn slice(&self, ranges: &[(usize, i64, i64, i64)]) -> Result<Value, LowerError> {
        let x = self.arg(0)?;
        let mut view = x.view.clone();
        for &(axis, start, _end, step) in ranges {
            let n = *view
                .shape
                .get(axis)
                .ok_or_else(|| self.unsupported("slice axis"))? as i64;
            let lo = if start >= 0 {
                start.min(n)
            } else {
                (n + start).max(0)
            };
            view.offset += lo as u64 * view.strides[axis];
            view.strides[axis] *= step as u64;
            view.shape[axis] = self.shape[axis];
        }
        Ok(Value { buf: x.buf, view })
    }

    /// The operand's view with extent-1 axes dropped or inserted: the
    /// strides of the other axes kept in order.
    fn squeeze(&self) -> Result<Value, LowerError> {
        let x = self.arg(0)?;
        let shape = self.shape;
        let mut strides = Vec::with_capacity(shape.len());
        let mut src = x
            .view
            .shape
            .iter()
            .zip(&x.view.strides)
            .filter(|(e, _)| **e != 1);
        for &e in shape {
            if e == 1 {
                strides.push(0);
            } else {
                let (_, s) = src
                    .next()
                    .ok_or_else(|| self.unsupported("squeeze shapes"))?;
                strides.push(*s);
            }
        }
        Ok(Value {
            buf: x.buf,
            view: View {
                dtype: self.node.dtype,
                offset: x.view.offset,
                shape: shape.clone(),
                strides,
            },
        })
    }

    /// `gather` along `axis`: one step of a [`GroupKind::Gather`] group
    /// over the table viewed as `[outer, extent, inner]` and the indices
    /// as `[n]` (each copied to a dense buffer first when its view does
    /// not merge into that form), into a new dense buffer.
    fn gather(&self, plan: &mut Plan, axis: usize) -> Result<Value, LowerError> {
        let node = self.node;
        let (mut x, mut idx) = (self.arg(0)?.clone(), self.arg(1)?.clone());
        if idx.view.dtype != DType::I32 {
            return Err(self.unsupported("gather indices must be i32 on a compiled device"));
        }
        let rank = x.view.shape.len();
        if axis >= rank {
            return Err(self.unsupported("gather axis out of range"));
        }
        let table = |v: &View| {
            let (outer, so) = merged(&v.shape[..axis], &v.strides[..axis])?;
            let (inner, si) = merged(&v.shape[axis + 1..], &v.strides[axis + 1..])?;
            Some(View {
                dtype: v.dtype,
                offset: v.offset,
                shape: vec![outer, v.shape[axis], inner],
                strides: vec![so, v.strides[axis], si],
            })
        };
        let tv = match table(&x.view) {
            Some(tv) => tv,
            None => {
                x = copy(plan, &node.name, &x)?;
                table(&x.view).ok_or_else(|| self.unsupported("gather table view"))?
            }
        };
        let flat = |v: &View| {
            let (n, s) = merged(&v.shape, &v.strides)?;
            Some(View {
                dtype: v.dtype,
                offset: v.offset,
                shape: vec![n],
                strides: vec![s],
            })
        };
        let iv = match flat(&idx.view) {
            Some(iv) => iv,
            None => {
                idx = copy(plan, &format!("{}.indices", node.name), &idx)?;
                flat(&idx.view).ok_or_else(|| self.unsupported("gather index view"))?
            }
        };
        let (outer, extent, inner, n) = (tv.shape[0], tv.shape[1], tv.shape[2], iv.shape[0]);
        let out = new_buf(plan, BufKind::Temp, node.dtype, self.shape);
        let dt = node.dtype;
        plan.steps.push(Step {
            name: node.name.to_string(),
            group: Group {
                kind: GroupKind::Gather {
                    outer,
                    extent,
                    n,
                    inner,
                },
                inputs: vec![tv, iv],
                nodes: vec![(TileOp::Input(0), dt)],
                outputs: vec![(0, View::contiguous(dt, &[outer, n, inner]))],
            },
            args: vec![x.buf, idx.buf, out.buf],
            nodes: Vec::new(),
        });
        Ok(out)
    }

    /// A new buffer holding the operands one after the other along
    /// `axis`: one copy step per operand with elements.
    fn concat(&self, plan: &mut Plan, axis: usize) -> Result<Value, LowerError> {
        let node = self.node;
        let out = new_buf(plan, BufKind::Temp, node.dtype, self.shape);
        let mut start = 0u64;
        for (k, o) in node.operands.iter().enumerate() {
            let v = self
                .values
                .get(o.0)
                .and_then(|v| v.clone())
                .ok_or_else(|| self.unsupported("missing operand"))?;
            let mut dst = out.view.clone();
            dst.offset += start * dst.strides[axis];
            dst.shape[axis] = v.view.shape[axis];
            start += v.view.shape[axis];
            if v.view.numel() == 0 {
                continue;
            }
            plan.steps.push(Step {
                name: step_name(&node.name, k, node.operands.len()),
                group: copy_group(&v.view, &dst),
                args: vec![v.buf, out.buf],
                nodes: Vec::new(),
            });
        }
        Ok(out)
    }
}

/// Gives every graph output a dense buffer of its own (a copy when the
/// value is a view, an input, a constant or shared with another output).
fn lower_outputs(
    graph: &Graph,
    plan: &mut Plan,
    values: &[Option<Value>],
) -> Result<(), LowerError> {
    // Outputs: dense buffers of their own.
    let mut used: Vec<BufId> = Vec::new();
    for (name, id) in graph.outputs() {
        let v =
            values
                .get(id.0)
                .and_then(|v| v.clone())
                .ok_or_else(|| LowerError::Unsupported {
                    node: name.clone(),
                    what: "output of an unknown node".into(),
                })?;
        let own = is_dense(&v.view)
            && v.view.offset == 0
            && matches!(plan.buffers[v.buf].kind, BufKind::Temp)
            && !used.contains(&v.buf);
        let v = if own {
            v
        } else if v.view.numel() == 0 {
            new_buf(plan, BufKind::Temp, v.view.dtype, &v.view.shape)
        } else {
            copy(plan, name, &v)?
        };
        used.push(v.buf);
        plan.outputs
            .push((name.clone(), v.buf, v.view.dtype, v.view.shape.clone()));
    }
    Ok(())
}

/// Reduced extents above this are reduced in two stages (see
/// [`reduce_axis`]); below it one pass always fits the UB.
const ONE_PASS_MAX: u64 = 32 * 1024;
/// Elements per chunk of a two-stage reduction.
const CHUNK: u64 = 8 * 1024;

/// Reduces `v` along `axis` with `code` into a new buffer (extent 1 at
/// `axis`).
///
/// An extent `R` above [`ONE_PASS_MAX`] does not fit the UB in one pass, so
/// it is reduced in stages, all with the existing group kinds: the first
/// `n·CHUNK` elements viewed as `[n, CHUNK]` (strides only, no copy) reduce
/// to `n` partials per output element, the `R mod CHUNK` remaining elements
/// (an offset view) reduce to one more, the partials reduce again
/// (recursively, should `n` itself be large) and an element-wise step
/// combines the two (`add`, `max` or `min`).
fn reduce_axis(
    plan: &mut Plan,
    name: &str,
    v: Value,
    axis: usize,
    code: Opcode,
    dt: DType,
) -> Result<Value, LowerError> {
    let extent = v.view.shape[axis];
    let mut out_shape = v.view.shape.clone();
    out_shape[axis] = 1;
    let one_pass = |plan: &mut Plan, name: &str, v: Value, axis: usize| {
        let mut out_shape = v.view.shape.clone();
        out_shape[axis] = 1;
        let out = View::contiguous(dt, &out_shape);
        let buf = temp(plan, dt, &out_shape);
        let group = Group {
            kind: GroupKind::Reduce {
                shape: v.view.shape.clone(),
                axis,
            },
            inputs: vec![v.view.clone()],
            nodes: vec![
                (TileOp::Input(0), v.view.dtype),
                (TileOp::Reduce(code, 0), dt),
            ],
            outputs: vec![(1, out.clone())],
        };
        plan.steps.push(Step {
            name: name.to_string(),
            group,
            args: vec![v.buf, buf],
            nodes: Vec::new(),
        });
        Value { buf, view: out }
    };
    if extent <= ONE_PASS_MAX {
        return Ok(one_pass(plan, name, v, axis));
    }
    let combine = match code {
        Opcode::ReduceSum => Opcode::Add,
        Opcode::ReduceMax => Opcode::Max,
        _ => Opcode::Min,
    };
    let (n, rem) = (extent / CHUNK, extent % CHUNK);
    let stride = v.view.strides[axis];
    // Stage 1: [.., n, CHUNK, ..] folded along the chunk axis.
    let mut chunked = v.view.clone();
    chunked.shape[axis] = CHUNK;
    chunked.shape.insert(axis, n);
    chunked.strides.insert(axis, stride * CHUNK);
    let partial = one_pass(
        plan,
        &format!("{name}.chunks"),
        Value {
            buf: v.buf,
            view: chunked,
        },
        axis + 1,
    );
    // [.., n, 1, ..] → [.., n, ..], then fold the partials.
    let mut pshape = partial.view.shape.clone();
    pshape.remove(axis + 1);
    let partials = Value {
        buf: partial.buf,
        view: dense(dt, &pshape, partial.view.offset),
    };
    let folded = reduce_axis(plan, &format!("{name}.partials"), partials, axis, code, dt)?;
    if rem == 0 {
        return Ok(folded);
    }
    // The tail: `rem` elements from `n·CHUNK` on.
    let mut tail = v.view.clone();
    tail.shape[axis] = rem;
    tail.offset += n * CHUNK * stride;
    let tail = one_pass(
        plan,
        &format!("{name}.tail"),
        Value {
            buf: v.buf,
            view: tail,
        },
        axis,
    );
    ewise(
        plan,
        &format!("{name}.combine"),
        &out_shape,
        dt,
        &[folded, tail],
        TileOp::Binary(combine, 0, 1),
    )
}

fn step_name(node: &str, k: usize, n: usize) -> String {
    if n > 1 {
        format!("{node}.{k}")
    } else {
        node.to_string()
    }
}

/// A constant buffer of `shape` holding `vals`, or its one value
/// everywhere (a fill, allocated fallibly: its size is the graph's word,
/// not the file's).
fn constant(
    plan: &mut Plan,
    dt: DType,
    shape: &[u64],
    vals: &[f64],
) -> Result<Value, dvm_tensor::TensorError> {
    let t = match *vals {
        [v] => dvm_tensor::Tensor::full(dt, shape, v),
        _ => dvm_tensor::Tensor::from_f64(dt, shape, vals),
    }?;
    Ok(new_buf(plan, BufKind::Const(t.into_bytes()), dt, shape))
}

/// Whether node `n`'s value has no elements at `shapes`.
fn is_empty(shapes: &ConcreteShapes, n: NodeId) -> bool {
    shapes.get(n.0).is_some_and(|s| s.contains(&0))
}

fn dense(dt: DType, shape: &[u64], offset: u64) -> View {
    View {
        dtype: dt,
        offset,
        shape: shape.to_vec(),
        strides: contiguous_strides(shape),
    }
}

/// The axes `shape` with `strides` as one axis: its extent and stride,
/// when they nest (each stride the next one's times its extent; axes of
/// extent 1 are skipped). No axes are one of extent 1.
fn merged(shape: &[u64], strides: &[u64]) -> Option<(u64, u64)> {
    let mut axes = shape.iter().zip(strides).filter(|(&e, _)| e != 1).rev();
    let Some((&e0, &s0)) = axes.next() else {
        return Some((1, 0));
    };
    let (mut extent, mut next) = (e0, s0.checked_mul(e0)?);
    for (&e, &s) in axes {
        if s != next {
            return None;
        }
        extent = extent.checked_mul(e)?;
        next = s.checked_mul(e)?;
    }
    Some((extent, s0))
}

/// True when the view is row-major dense (extent-1 axes may have any stride).
fn is_dense(v: &View) -> bool {
    let want = contiguous_strides(&v.shape);
    v.shape
        .iter()
        .zip(v.strides.iter().zip(&want))
        .all(|(e, (s, w))| *e == 1 || s == w)
}

fn new_buf(plan: &mut Plan, kind: BufKind, dt: DType, shape: &[u64]) -> Value {
    let bytes = shape.iter().product::<u64>() * dt.size() as u64;
    plan.buffers.push(Buf { kind, bytes });
    Value {
        buf: plan.buffers.len() - 1,
        view: View::contiguous(dt, shape),
    }
}

fn temp(plan: &mut Plan, dt: DType, shape: &[u64]) -> BufId {
    new_buf(plan, BufKind::Temp, dt, shape).buf
}

fn ewise(
    plan: &mut Plan,
    name: &str,
    shape: &[u64],
    dt: DType,
    args: &[Value],
    op: TileOp,
) -> Result<Value, LowerError> {
    let mut inputs = Vec::with_capacity(args.len());
    let mut nodes = Vec::with_capacity(args.len() + 1);
    for (k, a) in args.iter().enumerate() {
        let v = a
            .view
            .broadcast_to(shape)
            .ok_or_else(|| LowerError::Unsupported {
                node: name.to_string(),
                what: "operand does not broadcast to the result".into(),
            })?;
        nodes.push((TileOp::Input(k), v.dtype));
        inputs.push(v);
    }
    let n = args.len();
    let op = match op {
        TileOp::Unary(c, _) => TileOp::Unary(c, n - 1),
        TileOp::Binary(c, _, _) => TileOp::Binary(c, 0, 1),
        TileOp::Scalar(c, _, v) => TileOp::Scalar(c, 0, v),
        TileOp::Select(..) => TileOp::Select(0, 1, 2),
        TileOp::Cast(_) => TileOp::Cast(0),
        other => other,
    };
    nodes.push((op, dt));
    let out = new_buf(plan, BufKind::Temp, dt, shape);
    let mut args_ids: Vec<BufId> = args.iter().map(|a| a.buf).collect();
    args_ids.push(out.buf);
    plan.steps.push(Step {
        name: name.to_string(),
        group: Group {
            kind: GroupKind::Elementwise {
                shape: shape.to_vec(),
            },
            inputs,
            nodes,
            outputs: vec![(n, out.view.clone())],
        },
        args: args_ids,
        nodes: Vec::new(),
    });
    Ok(out)
}

fn copy_group(src: &View, dst: &View) -> Group {
    Group {
        kind: GroupKind::Elementwise {
            shape: dst.shape.clone(),
        },
        inputs: vec![src.clone()],
        nodes: vec![(TileOp::Input(0), src.dtype)],
        outputs: vec![(0, dst.clone())],
    }
}

/// Materialises `v` into a fresh dense buffer.
fn copy(plan: &mut Plan, name: &str, v: &Value) -> Result<Value, LowerError> {
    let out = new_buf(plan, BufKind::Temp, v.view.dtype, &v.view.shape);
    plan.steps.push(Step {
        name: format!("{name}.copy"),
        group: copy_group(&v.view, &out.view),
        args: vec![v.buf, out.buf],
        nodes: Vec::new(),
    });
    Ok(out)
}

/// The operand views of a matmul: batch broadcast applied, vectors as
/// 1×k rows or k×1 columns.
struct MatmulViews {
    a: View,
    b: View,
    batch: Vec<u64>,
    m: u64,
    n: u64,
    k: u64,
}

fn matmul_views(a: &View, b: &View, trans_a: bool, trans_b: bool) -> Option<MatmulViews> {
    let swap = |v: &View| {
        let r = v.shape.len();
        let mut perm: Vec<usize> = (0..r).collect();
        if r >= 2 {
            perm.swap(r - 1, r - 2);
        }
        v.permute(&perm)
    };
    let mut av = if trans_a { swap(a) } else { a.clone() };
    let mut bv = if trans_b { swap(b) } else { b.clone() };
    // NumPy: a vector operand is a 1×k row (a) or k×1 column (b).
    if av.shape.len() == 1 {
        av = View {
            shape: vec![1, av.shape[0]],
            strides: vec![0, av.strides[0]],
            ..av
        };
    }
    if bv.shape.len() == 1 {
        bv = View {
            shape: vec![bv.shape[0], 1],
            strides: vec![bv.strides[0], 0],
            ..bv
        };
    }
    let (ra, rb) = (av.shape.len(), bv.shape.len());
    if ra < 2 || rb < 2 {
        return None;
    }
    let (m, k) = (av.shape[ra - 2], av.shape[ra - 1]);
    let (k2, n) = (bv.shape[rb - 2], bv.shape[rb - 1]);
    if k != k2 {
        return None;
    }
    let nb = ra.max(rb) - 2;
    let mut batch = vec![1u64; nb];
    for (i, slot) in batch.iter_mut().enumerate() {
        let pick = |v: &View| {
            let lead = nb - (v.shape.len() - 2);
            if i < lead {
                1
            } else {
                v.shape[i - lead]
            }
        };
        let (x, y) = (pick(&av), pick(&bv));
        *slot = if x == 1 { y } else { x };
    }
    let mut ash = batch.clone();
    ash.extend([m, k]);
    let mut bsh = batch.clone();
    bsh.extend([k, n]);
    Some(MatmulViews {
        a: av.broadcast_to(&ash)?,
        b: bv.broadcast_to(&bsh)?,
        batch,
        m,
        n,
        k,
    })
}

#[allow(clippy::too_many_arguments)]
fn matmul(
    plan: &mut Plan,
    name: &str,
    shape: &[u64],
    dt: DType,
    a: Value,
    b: Value,
    trans_a: bool,
    trans_b: bool,
) -> Option<Value> {
    let mv = matmul_views(&a.view, &b.view, trans_a, trans_b)?;
    let mut osh = mv.batch.clone();
    osh.extend([mv.m, mv.n]);
    if osh.iter().product::<u64>() != shape.iter().product::<u64>() {
        return None;
    }
    let out = new_buf(plan, BufKind::Temp, dt, &osh);
    let acc = acc_dtype(dt);
    let mut nodes = vec![(TileOp::Matmul, acc)];
    if acc != dt {
        nodes.push((TileOp::Cast(0), dt));
    }
    let last = nodes.len() - 1;
    plan.steps.push(Step {
        name: name.to_string(),
        group: Group {
            kind: GroupKind::Matmul {
                batch: mv.batch,
                m: mv.m,
                n: mv.n,
                k: mv.k,
                acc,
            },
            inputs: vec![mv.a, mv.b],
            nodes,
            outputs: vec![(last, out.view.clone())],
        },
        args: vec![a.buf, b.buf, out.buf],
        nodes: Vec::new(),
    });
    Some(Value {
        buf: out.buf,
        view: dense(dt, shape, 0),
    })
}
