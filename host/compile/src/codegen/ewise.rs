//! Code generation for element-wise and reduce groups.

use dvm_isa::builder::{CodeWriter, ParamDef};
use dvm_isa::{Axis, DType, Instr, KernelKind, Opcode, ParamAccess, WaitMask};

use super::group::{Group, GroupKind, TileOp};
use super::space::{coalesce_keep, grid_layout, BoxShape, Tiled};
use super::ub_alloc::{UbAlloc, ALIGN};
use super::view::MAX_RANK;
use super::{instr, scalar, CompileError, Compiled, Scratch, Summary, Target};

/// Value class of a node inside a tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Full,
    Reduced,
}

/// How an input constant along one axis of the tile is loaded: one row or
/// one column, broadcast to a tile only where an operation reads it
/// (`brcrow` / `brccol` right before it, which the device's predecoder
/// fuses into the operation). A `[cols]` norm weight is then one row of
/// UB, not `tr` copies of it loaded from global memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spread {
    /// The same row for every tile row (stride 0 along the rows): a
    /// `1 × tc` load, `brcrow` at each use.
    DownRows,
    /// The same value across each row (stride 0 along the columns): a
    /// `tr × 1` load, `brccol` at each use.
    AcrossCols,
}

/// Which inputs of `group` are [`Spread`] over the tiled space `t` (its
/// `rdim` and `cdim` set), written to `out` per node. An input stored as
/// an output as it is stays a tile.
pub(super) fn spreads(group: &Group, t: &Tiled, out: &mut Vec<Option<Spread>>) {
    out.clear();
    for (i, (node, _)) in group.nodes.iter().enumerate() {
        let stored = group.outputs.iter().any(|(n, _)| *n == i);
        // A matmul's own operands (inputs 0 and 1) are not over its space.
        let own = |k: usize| matches!(group.kind, GroupKind::Matmul { .. }) && k < 2;
        let s = match *node {
            TileOp::Input(k) if !stored && !own(k) => t.strides.get(k).and_then(|st| {
                if st[t.cdim] == 0 {
                    Some(Spread::AcrossCols)
                } else if t.rdim.is_some_and(|r| st[r] == 0) {
                    Some(Spread::DownRows)
                } else {
                    None
                }
            }),
            _ => None,
        };
        out.push(s);
    }
}

/// Compiles an element-wise or reduce group.
///
/// # Errors
/// [`CompileError`] when the group is malformed or does not fit in UB.
pub fn compile(group: &Group, name: &str, target: &Target) -> Result<Compiled, CompileError> {
    if matches!(
        group.kind,
        GroupKind::Matmul { .. } | GroupKind::Gather { .. }
    ) {
        return Err(malformed("matmul or gather group in ewise"));
    }
    super::compile(group, name, target)
}

/// [`compile`] into `sc` (see [`super::compile_into`]).
pub(super) fn compile_into(
    group: &Group,
    target: &Target,
    sc: &mut Scratch,
) -> Result<Summary, CompileError> {
    let (shape, axis) = match &group.kind {
        GroupKind::Elementwise { shape } => (shape.as_slice(), None),
        GroupKind::Reduce { shape, axis } => (shape.as_slice(), Some(*axis)),
        GroupKind::Matmul { .. } | GroupKind::Gather { .. } => {
            return Err(malformed("matmul or gather group in ewise"))
        }
    };
    if axis.is_some_and(|a| a >= shape.len()) {
        return Err(malformed("reduce axis out of range"));
    }
    if shape.len() > MAX_RANK {
        return Err(CompileError::TooLarge("the iteration space's rank".into()));
    }
    classify(group, &mut sc.classes)?;
    let classes = &sc.classes;

    // Operand strides over the space: inputs, then outputs (reduced outputs
    // do not move along the axis).
    let strides = &mut sc.strides;
    strides.clear();
    let t = &mut sc.tiled;
    t.offsets.clear();
    for v in &group.inputs {
        if v.shape.as_slice() != shape || v.strides.len() != shape.len() {
            return Err(malformed("input view not broadcast to the space"));
        }
        strides.push(stride_array(&v.strides));
        t.offsets.push(v.offset);
    }
    for (node, v) in &group.outputs {
        if v.shape.len() != shape.len() || v.strides.len() != shape.len() {
            return Err(malformed("output rank differs from the space"));
        }
        let mut s = stride_array(&v.strides);
        if classes.get(*node) == Some(&Class::Reduced) {
            if let Some(a) = axis {
                s[a] = 0;
            }
        }
        strides.push(s);
        t.offsets.push(v.offset);
    }
    let caxis = coalesce_keep(shape, strides, axis, &mut t.dims, &mut t.strides)?;

    // Box: innermost dimension as columns; a reduce axis becomes the box's
    // columns when it is innermost, its rows otherwise.
    let last = t.dims.len() - 1;
    let (rdim, cdim, fold) = match caxis {
        Some(a) if a == last => (last.checked_sub(1), last, Some(Axis::Cols)),
        Some(a) => (Some(a), last, Some(Axis::Rows)),
        None => (last.checked_sub(1), last, None),
    };
    t.rdim = rdim;
    t.cdim = cdim;
    t.tr = 1;
    t.tc = 1;
    last_uses(group, &mut sc.last);
    spreads(group, t, &mut sc.spread);
    choose_tile(t, group, classes, &sc.spread, &sc.last, fold, target)?;
    grid_layout(t);

    if group.inputs.len() + group.outputs.len() > 255 {
        return Err(CompileError::TooLarge("parameter count".into()));
    }
    let grid = t.grid3()?;
    let nbodies = t.bodies();
    let n = usize::try_from(nbodies).map_err(|_| CompileError::TooLarge("bodies".into()))?;
    sc.clear_bodies(n);
    let cx = Ctx {
        group,
        t: &sc.tiled,
        classes: &sc.classes,
        spread: &sc.spread,
        last: &sc.last,
        fold,
        target,
    };
    let ub_bytes = emit_bodies(&cx, &mut sc.bodies[..n], &mut sc.ub, &mut sc.addr, None)?;
    let kind = if nbodies > 1 {
        KernelKind::Parallel
    } else {
        KernelKind::Vector
    };
    let t = &sc.tiled;
    // Statistics for `dvm explain`: saturating (see the matmul's).
    let tiles = nbodies.saturating_mul(t.tiles_per_body());
    let bytes_moved = group
        .inputs
        .iter()
        .chain(group.outputs.iter().map(|(_, v)| v))
        .fold(0u64, |acc, v| {
            acc.saturating_add(v.distinct_numel().saturating_mul(v.dtype.size() as u64))
        });
    Ok(Summary {
        kind,
        ub_bytes,
        bodies: n,
        grid,
        tile: (t.tr, t.tc),
        tiles,
        bytes_moved,
    })
}

/// `strides` as a fixed array (the caller checked the rank).
pub(super) fn stride_array(strides: &[u64]) -> [u64; MAX_RANK] {
    let mut a = [0; MAX_RANK];
    a[..strides.len()].copy_from_slice(strides);
    a
}

/// The kernel parameters of a group: its inputs (read), then its outputs
/// (written), with their shapes as metadata.
pub(super) fn params(group: &Group) -> Vec<ParamDef> {
    let inputs = group
        .inputs
        .iter()
        .enumerate()
        .map(|(i, v)| param(format!("in{i}"), v.dtype, ParamAccess::Read, &v.shape));
    let outputs = group
        .outputs
        .iter()
        .enumerate()
        .map(|(i, (_, v))| param(format!("out{i}"), v.dtype, ParamAccess::Write, &v.shape));
    inputs.chain(outputs).collect()
}

fn param(name: String, dtype: DType, access: ParamAccess, shape: &[u64]) -> ParamDef {
    ParamDef {
        name,
        dtype,
        access,
        dims: shape.iter().map(|d| d.to_string()).collect(),
    }
}

fn malformed(what: &str) -> CompileError {
    CompileError::Malformed(what.to_string())
}

pub(super) fn classify(group: &Group, classes: &mut Vec<Class>) -> Result<(), CompileError> {
    classes.clear();
    for (i, (node, _)) in group.nodes.iter().enumerate() {
        let mut class = Class::Full;
        let mut any_full = false;
        let mut n_ops = 0;
        for o in node.operands() {
            if o >= i {
                return Err(malformed("nodes are not in topological order"));
            }
            n_ops += 1;
            any_full |= classes[o] == Class::Full;
        }
        match node {
            TileOp::Input(k) if *k >= group.inputs.len() => {
                return Err(malformed("input index out of range"))
            }
            TileOp::Reduce(..) => {
                if !matches!(group.kind, GroupKind::Reduce { .. }) {
                    return Err(malformed("reduce node outside a reduce group"));
                }
                class = Class::Reduced;
            }
            TileOp::Matmul if !matches!(group.kind, GroupKind::Matmul { .. }) => {
                return Err(malformed("matmul node outside a matmul group"));
            }
            TileOp::Matmul => {}
            _ if n_ops > 0 && !any_full => class = Class::Reduced,
            _ => {}
        }
        classes.push(class);
    }
    Ok(())
}

/// Last node (or output position, counted after all nodes) using each
/// node, written to `last`.
pub(super) fn last_uses(group: &Group, last: &mut Vec<usize>) {
    last.clear();
    last.resize(group.nodes.len(), 0);
    for (i, (node, _)) in group.nodes.iter().enumerate() {
        for o in node.operands() {
            last[o] = last[o].max(i);
        }
    }
}

pub(super) fn max_elem_size(group: &Group) -> u64 {
    group
        .nodes
        .iter()
        .map(|(_, d)| d.size() as u64)
        .chain(group.inputs.iter().map(|v| v.dtype.size() as u64))
        .max()
        .unwrap_or(4)
}

/// Peak numbers of live buffers: full tiles (broadcast temporaries
/// included), reduced vectors, and [`Spread`] inputs (a row or a column
/// each).
pub(super) fn peak_buffers(
    group: &Group,
    classes: &[Class],
    spread: &[Option<Spread>],
    last: &[usize],
) -> (u64, u64, u64) {
    // Which count a node's buffer is in: full, reduced, spread.
    let kind = |o: usize| match (spread.get(o).copied().flatten(), classes[o]) {
        (Some(_), _) => 2,
        (None, Class::Full) => 0,
        (None, Class::Reduced) => 1,
    };
    let mut live = [0u64; 2];
    let mut peak = [0u64; 2];
    for (i, (node, _)) in group.nodes.iter().enumerate() {
        // Operands broadcast to full need a temporary: reduced ones read by
        // a full node, spread ones read by any.
        let temps = node
            .operands()
            .filter(|&o| kind(o) == 2 || (classes[i] == Class::Full && kind(o) == 1))
            .count() as u64;
        // A result written over an operand that dies here takes no buffer
        // of its own (as `emit_body` does).
        let reused = reused_operand(group, classes, spread, last, i);
        if kind(i) != 2 && reused.is_none() {
            live[kind(i)] += 1;
        }
        peak[0] = peak[0].max(live[0] + temps);
        peak[1] = peak[1].max(live[1]);
        // Each distinct operand dies once (`mul(x, x)` reads x twice).
        for (k, o) in node.operands().enumerate() {
            let first = !node.operands().take(k).any(|p| p == o);
            if last[o] == i && first && kind(o) != 2 && reused != Some(o) {
                live[kind(o)] -= 1;
            }
        }
        // A node nobody reads is still stored; it dies after its store.
        if !is_read(last, i) && kind(i) != 2 {
            live[kind(i)] -= 1;
        }
    }
    // Spread inputs load at the body's start: all live at once.
    let spread_inputs = (0..group.nodes.len()).filter(|&o| kind(o) == 2).count() as u64;
    (peak[0].max(1), peak[1], spread_inputs)
}

/// The operand whose buffer node `i`'s result takes over (`emit_body`
/// writes it there, `peak_buffers` counts it so): the first of its
/// element-wise operands (`x`, or `a` then `b`) of the same class and
/// element size, not spread, read once by the node and for the last time
/// (an operand feeding two slots is not overwritten).
fn reused_operand(
    group: &Group,
    classes: &[Class],
    spread: &[Option<Spread>],
    last: &[usize],
    i: usize,
) -> Option<usize> {
    let (node, dt) = &group.nodes[i];
    let candidates = match *node {
        TileOp::Unary(_, x) | TileOp::Cast(x) | TileOp::Scalar(_, x, _) => [Some(x), None],
        TileOp::Binary(_, a, b) | TileOp::Select(_, a, b) => [Some(a), Some(b)],
        _ => [None, None],
    };
    candidates.into_iter().flatten().find(|&o| {
        classes[o] == classes[i]
            && spread.get(o).copied().flatten().is_none()
            && group.nodes[o].1.size() == dt.size()
            && last[o] == i
            && node.operands().filter(|&p| p == o).count() == 1
    })
}

/// Whether a later node reads node `i`, from [`last_uses`] (operands come
/// before their users, so a read node's last use is after it).
fn is_read(last: &[usize], i: usize) -> bool {
    last[i] > i
}

fn choose_tile(
    t: &mut Tiled,
    group: &Group,
    classes: &[Class],
    spread: &[Option<Spread>],
    last: &[usize],
    fold: Option<Axis>,
    target: &Target,
) -> Result<(), CompileError> {
    let es = max_elem_size(group);
    let (nf, nr, nv) = peak_buffers(group, classes, spread, last);
    let ub = target.ub_bytes as u64;
    let (er, ec) = (t.er(), t.ec());
    let align = ALIGN as u64;
    // Bytes for a tr × tc tile: nf full buffers, nr reduced ones, and nv
    // spread inputs (a row or a column, whichever is longer, bounds both).
    let cost = |tr: u64, tc: u64| -> u64 {
        let red_len = match fold {
            Some(Axis::Cols) => tr,
            Some(Axis::Rows) => tc,
            None => 0,
        };
        nf * (tr * tc * es).next_multiple_of(align)
            + nr * (red_len * es).next_multiple_of(align)
            + nv * (tr.max(tc) * es).next_multiple_of(align)
    };
    // Columns: a fold along the columns needs whole rows; otherwise as many
    // columns as fit one row of buffers.
    let tc_max = (ub / (nf + nr + nv).max(1) / es).max(1) / 16 * 16;
    let tc = match fold {
        Some(Axis::Cols) => ec,
        // A fold along the rows keeps all `er` rows of a column strip in UB:
        // as many columns as fit (multiples of 16 when there is room), after
        // the spread inputs' columns of `er`.
        Some(Axis::Rows) => {
            let per_col = (nf * er + nr + nv) * es;
            let ub = ub.saturating_sub(nv * (er * es).next_multiple_of(align));
            let fit = ub / per_col.max(1);
            let fit = if fit >= 16 { fit / 16 * 16 } else { fit };
            ec.min(fit.max(1))
        }
        None => ec.min(tc_max.max(16)),
    };
    // Rows: as many as fit (all of them when folding the rows).
    let fits = |tr: u64| cost(tr, tc) <= ub;
    let mut tr = match fold {
        Some(Axis::Rows) => er,
        _ => {
            // Largest tr with cost(tr) ≤ ub, by bisection over [1, er].
            let (mut lo, mut hi) = (0u64, er);
            while lo < hi {
                let mid = (lo + hi).div_ceil(2);
                if fits(mid) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            lo
        }
    };
    if tr == 0 || !fits(tr) {
        let what = match fold {
            Some(_) => format!(
                "a reduction over {} elements",
                if fold == Some(Axis::Cols) { ec } else { er }
            ),
            None => "one tile row".to_string(),
        };
        return Err(CompileError::DoesNotFit(what, target.ub_bytes));
    }
    // Enough tiles for every core (twice over, for balance), without
    // shrinking tiles below 4 KiB.
    let outer: u64 = (0..t.dims.len())
        .filter(|&d| Some(d) != t.rdim && d != t.cdim)
        .map(|d| t.dims[d])
        .product();
    let want = 2 * target.cores as u64;
    let col_tiles = ec.div_ceil(tc);
    if fold != Some(Axis::Rows) && outer * col_tiles * er.div_ceil(tr) < want {
        let need_row_tiles = want.div_ceil(outer * col_tiles);
        let min_rows = (4096 / (tc * es)).max(1);
        tr = tr.min(er.div_ceil(need_row_tiles).max(min_rows)).max(1);
    }
    t.tr = tr;
    t.tc = tc;
    Ok(())
}

/// Emits the code that produces the matmul node's tile; returns its UB address.
pub(super) type MatmulEmitter<'a> =
    &'a dyn Fn(&mut CodeWriter, &mut UbAlloc, u64) -> Result<u32, CompileError>;

/// What every body of a kernel shares.
pub(super) struct Ctx<'a> {
    pub group: &'a Group,
    pub t: &'a Tiled,
    pub classes: &'a [Class],
    /// [`spreads`] of the group over `t`.
    pub spread: &'a [Option<Spread>],
    /// [`last_uses`] of the group.
    pub last: &'a [usize],
    pub fold: Option<Axis>,
    pub target: &'a Target,
}

/// Broadcast temporaries of one node (at most one per operand).
#[derive(Default)]
struct Temps {
    addr: [u32; 3],
    len: usize,
}

impl Temps {
    fn push(&mut self, a: u32) {
        if let Some(slot) = self.addr.get_mut(self.len) {
            *slot = a;
            self.len += 1;
        }
    }

    fn as_slice(&self) -> &[u32] {
        &self.addr[..self.len]
    }
}

/// Emits every body of a kernel into `bodies` (one per body, cleared);
/// returns the UB bytes the most demanding one needs.
pub(super) fn emit_bodies(
    cx: &Ctx<'_>,
    bodies: &mut [CodeWriter],
    ub: &mut UbAlloc,
    addr: &mut Vec<u32>,
    matmul: Option<MatmulEmitter<'_>>,
) -> Result<u32, CompileError> {
    let mut ub_bytes = 0;
    for (body, code) in bodies.iter_mut().enumerate() {
        emit_body(cx, body as u64, ub, addr, code, matmul)?;
        ub_bytes = ub_bytes.max(ub.high_water());
    }
    Ok(ub_bytes)
}

/// Emits one body: every node in order, stores of the outputs, `end`.
pub(super) fn emit_body(
    cx: &Ctx<'_>,
    body: u64,
    ub: &mut UbAlloc,
    addr: &mut Vec<u32>,
    code: &mut CodeWriter,
    matmul: Option<MatmulEmitter<'_>>,
) -> Result<(), CompileError> {
    let group = cx.group;
    let bx = BodyEmitter::new(cx, body, matmul);
    ub.reset();
    addr.clear();
    addr.resize(group.nodes.len(), u32::MAX);
    bx.load_spread_inputs(ub, addr, code)?;
    for (i, (node, dt)) in group.nodes.iter().enumerate() {
        let mut temps = Temps::default();
        let result = bx.emit_node(i, addr, &mut temps, ub, code)?;
        addr[i] = result;
        for &tmp in temps.as_slice() {
            ub.free(tmp);
        }
        bx.store_outputs(i, *dt, result, code)?;
        // Free operands that die here (unless reused as the result).
        for o in node.operands() {
            if cx.last[o] == i && addr[o] != result {
                ub.free(addr[o]);
            }
        }
        if !is_read(cx.last, i) {
            ub.free(result);
        }
    }
    code.push(&Instr::End {}, WaitMask::NONE);
    Ok(())
}

/// One body being emitted: the kernel's [`Ctx`], the body's index, and
/// the sizes of its UB buffers.
struct BodyEmitter<'c, 'a> {
    cx: &'c Ctx<'a>,
    body: u64,
    matmul: Option<MatmulEmitter<'c>>,
    /// Largest element size of the group: every buffer is sized for it.
    es: u64,
    /// Elements of a full tile.
    full_elems: u64,
    /// Elements of a reduced vector (one per row or column folded).
    red_elems: u64,
}

impl<'c, 'a> BodyEmitter<'c, 'a> {
    fn new(cx: &'c Ctx<'a>, body: u64, matmul: Option<MatmulEmitter<'c>>) -> Self {
        let t = cx.t;
        BodyEmitter {
            cx,
            body,
            matmul,
            es: max_elem_size(cx.group),
            full_elems: t.tr * t.tc,
            red_elems: match cx.fold {
                Some(Axis::Cols) => t.tr,
                Some(Axis::Rows) => t.tc,
                None => 1,
            },
        }
    }

    /// A new UB buffer for one value of class `c`.
    fn alloc(&self, ub: &mut UbAlloc, c: Class) -> Result<u32, CompileError> {
        let e = if c == Class::Full {
            self.full_elems
        } else {
            self.red_elems
        };
        self.alloc_bytes(ub, e * self.es)
    }

    fn alloc_bytes(&self, ub: &mut UbAlloc, bytes: u64) -> Result<u32, CompileError> {
        let limit = self.cx.target.ub_bytes;
        ub.alloc(bytes as u32, limit)
            .ok_or_else(|| CompileError::DoesNotFit("the group's live tiles".into(), limit))
    }

    /// The buffer of node `i`'s result: `reused` (an operand's, see
    /// [`reused_operand`]) or a new one of class `c`.
    fn result_buf(
        &self,
        ub: &mut UbAlloc,
        reused: Option<u32>,
        c: Class,
    ) -> Result<u32, CompileError> {
        reused.map_or_else(|| self.alloc(ub, c), Ok)
    }

    /// A spread input as this tile loads it: a row only for tiles of
    /// several rows, a column only for tiles of several columns.
    fn spread_of(&self, o: usize) -> Option<Spread> {
        let t = self.cx.t;
        self.cx
            .spread
            .get(o)
            .copied()
            .flatten()
            .filter(|s| match s {
                Spread::DownRows => t.tr > 1,
                Spread::AcrossCols => t.tc > 1,
            })
    }

    /// Loads the spread inputs first, a row or a column each: the
    /// operations that read them then sit next to each other, which lets
    /// the predecoder fuse runs of them (a norm's scale, weight and bias).
    fn load_spread_inputs(
        &self,
        ub: &mut UbAlloc,
        addr: &mut [u32],
        code: &mut CodeWriter,
    ) -> Result<(), CompileError> {
        let (group, t) = (self.cx.group, self.cx.t);
        for (i, (node, _)) in group.nodes.iter().enumerate() {
            let (&TileOp::Input(k), Some(s)) = (node, self.spread_of(i)) else {
                continue;
            };
            let (shape, len) = match s {
                Spread::DownRows => (BoxShape::ColVec, t.tc * self.es),
                Spread::AcrossCols => (BoxShape::RowVec, t.tr * self.es),
            };
            addr[i] = self.alloc_bytes(ub, len)?;
            let dt = group.inputs[k].dtype;
            code.push(
                &t.load(k, k as u8, dt, addr[i], self.body, shape)?,
                WaitMask::NONE,
            );
        }
        Ok(())
    }

    /// The address node `i` reads operand `o` at: its own buffer, or a
    /// broadcast temporary (pushed to `temps`) where a spread operand is
    /// read, or a reduced one by a full node.
    fn operand(
        &self,
        i: usize,
        o: usize,
        addr: &[u32],
        temps: &mut Temps,
        ub: &mut UbAlloc,
        code: &mut CodeWriter,
    ) -> Result<u32, CompileError> {
        let Ctx {
            group,
            t,
            classes,
            fold,
            ..
        } = *self.cx;
        let op = if let Some(s) = self.spread_of(o) {
            match s {
                Spread::DownRows => Opcode::BroadcastRow,
                Spread::AcrossCols => Opcode::BroadcastCol,
            }
        } else if classes[i] == Class::Full && classes[o] == Class::Reduced {
            if fold == Some(Axis::Cols) {
                Opcode::BroadcastCol
            } else {
                Opcode::BroadcastRow
            }
        } else {
            return Ok(addr[o]);
        };
        let tmp = self.alloc(ub, Class::Full)?;
        let odt = group.nodes[o].1;
        code.push(
            &instr(op, &[odt as u64, tmp as u64, addr[o] as u64, t.tr, t.tc])?,
            WaitMask::NONE,
        );
        temps.push(tmp);
        Ok(tmp)
    }

    /// Emits node `i` (its operands broadcast where needed); returns the
    /// address of its result, written in place over an operand that dies
    /// here by the rule the UB estimate counts with ([`peak_buffers`]).
    fn emit_node(
        &self,
        i: usize,
        addr: &[u32],
        temps: &mut Temps,
        ub: &mut UbAlloc,
        code: &mut CodeWriter,
    ) -> Result<u32, CompileError> {
        let Ctx {
            group,
            t,
            classes,
            spread,
            last,
            fold,
            ..
        } = *self.cx;
        let (node, dt) = &group.nodes[i];
        let dt = *dt;
        let class = classes[i];
        let n = match class {
            Class::Full => self.full_elems,
            Class::Reduced => self.red_elems,
        };
        let w = WaitMask::NONE;
        let reused = reused_operand(group, classes, spread, last, i).map(|o| addr[o]);
        let mut opnd = |o: usize, ub: &mut UbAlloc, code: &mut CodeWriter| {
            self.operand(i, o, addr, temps, ub, code)
        };
        let odt = |o: usize| group.nodes[o].1 as u64;
        let result = match *node {
            // Loaded with the spread inputs.
            TileOp::Input(_) if self.spread_of(i).is_some() => addr[i],
            TileOp::Input(k) => {
                let result = self.alloc(ub, class)?;
                let kdt = group.inputs[k].dtype;
                code.push(
                    &t.load(k, k as u8, kdt, result, self.body, BoxShape::Full)?,
                    w,
                );
                result
            }
            TileOp::Unary(op, x) => {
                let xa = opnd(x, ub, code)?;
                let result = self.result_buf(ub, reused, class)?;
                code.push(&instr(op, &[odt(x), result as u64, xa as u64, n])?, w);
                result
            }
            TileOp::Cast(x) => {
                let xa = opnd(x, ub, code)?;
                let result = self.result_buf(ub, reused, class)?;
                let raw = [odt(x), dt as u64, result as u64, xa as u64, n];
                code.push(&instr(Opcode::Cast, &raw)?, w);
                result
            }
            TileOp::Scalar(op, x, v) => {
                let xa = opnd(x, ub, code)?;
                let result = self.result_buf(ub, reused, class)?;
                let imm = scalar(group.nodes[x].1, v).0 as u64;
                let raw = [odt(x), result as u64, xa as u64, n, imm];
                code.push(&instr(op, &raw)?, w);
                result
            }
            TileOp::Binary(op, a, b) => {
                let aa = opnd(a, ub, code)?;
                let ba = opnd(b, ub, code)?;
                let result = self.result_buf(ub, reused, class)?;
                let raw = [odt(a), result as u64, aa as u64, ba as u64, n];
                code.push(&instr(op, &raw)?, w);
                result
            }
            TileOp::Select(c, a, b) => {
                let ca = opnd(c, ub, code)?;
                let aa = opnd(a, ub, code)?;
                let ba = opnd(b, ub, code)?;
                let result = self.result_buf(ub, reused, class)?;
                let raw = [dt as u64, result as u64, ca as u64, aa as u64, ba as u64, n];
                code.push(&instr(Opcode::Select, &raw)?, w);
                result
            }
            TileOp::Fill(v) => {
                let result = self.alloc(ub, class)?;
                let raw = [dt as u64, result as u64, n, scalar(dt, v).0 as u64];
                code.push(&instr(Opcode::Fill, &raw)?, w);
                result
            }
            TileOp::Reduce(op, x) => {
                let xa = opnd(x, ub, code)?;
                let result = self.alloc(ub, Class::Reduced)?;
                let axis = fold.ok_or_else(|| malformed("reduce without a fold"))?;
                let raw = [odt(x), axis as u64, result as u64, xa as u64, t.tr, t.tc];
                code.push(&instr(op, &raw)?, w);
                result
            }
            TileOp::Matmul => {
                let emit = self
                    .matmul
                    .ok_or_else(|| malformed("matmul node without operands"))?;
                emit(code, ub, self.body)?
            }
        };
        Ok(result)
    }

    /// Stores every output node `i` (of dtype `dt`, at `result`) produces.
    fn store_outputs(
        &self,
        i: usize,
        dt: DType,
        result: u32,
        code: &mut CodeWriter,
    ) -> Result<(), CompileError> {
        let Ctx {
            group,
            t,
            classes,
            fold,
            ..
        } = *self.cx;
        let n_in = group.inputs.len();
        for (k, (node_id, v)) in group.outputs.iter().enumerate() {
            if *node_id == i {
                if v.dtype != dt {
                    return Err(malformed("output dtype differs from its node"));
                }
                let shape = match (classes[i], fold) {
                    (Class::Full, _) => BoxShape::Full,
                    (Class::Reduced, Some(Axis::Rows)) => BoxShape::ColVec,
                    (Class::Reduced, _) => BoxShape::RowVec,
                };
                code.push(
                    &t.store(
                        n_in + k,
                        (n_in + k) as u8,
                        dt,
                        result,
                        self.body,
                        shape,
                        false,
                    )?,
                    WaitMask::NONE,
                );
            }
        }
        Ok(())
    }
}
