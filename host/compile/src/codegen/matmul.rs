//! Code generation for matmul groups: cube tiles with the contraction
//! unrolled in UB-sized chunks, then the element-wise epilogue on the
//! accumulator tile (the mix kernel).

use dvm_isa::builder::CodeWriter;
use dvm_isa::{DType, Instr, KernelKind, MmFlags, Pipe, WaitMask};

use super::ewise::{
    classify, emit_bodies, last_uses, max_elem_size, peak_buffers, spreads, stride_array, Ctx,
};
use super::group::{Group, GroupKind, TileOp};
use super::space::{coalesce_keep, grid_layout, load_from, BoxShape, PatternFields, Tiled};
use super::ub_alloc::{UbAlloc, ALIGN};
use super::view::{View, MAX_RANK};
use super::{CompileError, Compiled, Scratch, Summary, Target};

/// Compiles a matmul group.
///
/// # Errors
/// [`CompileError`] when the group is malformed or does not fit in UB.
pub fn compile(group: &Group, name: &str, target: &Target) -> Result<Compiled, CompileError> {
    if !matches!(group.kind, GroupKind::Matmul { .. }) {
        return Err(CompileError::Malformed("not a matmul group".into()));
    }
    super::compile(group, name, target)
}

/// [`compile`] into `sc` (see [`super::compile_into`]).
pub(super) fn compile_into(
    group: &Group,
    target: &Target,
    sc: &mut Scratch,
) -> Result<Summary, CompileError> {
    let op = Operands::of(group)?;
    classify(group, &mut sc.classes)?;
    last_uses(group, &mut sc.last);
    let r = tile_output_space(group, &op, sc)?;
    let (tm, tn, tk) = tile_plan(group, &op, r, sc, target)?;
    if group.inputs.len() + group.outputs.len() > 255 {
        return Err(CompileError::TooLarge("parameter count".into()));
    }
    check_contraction_length(op.k, tk)?;
    let t = &sc.tiled;
    let grid = t.grid3()?;
    let nbodies = t.bodies();
    let nbodies_usize =
        usize::try_from(nbodies).map_err(|_| CompileError::TooLarge("bodies".into()))?;
    sc.clear_bodies(nbodies_usize);
    let t = &sc.tiled;
    let contraction = Contraction::new(&op, t, (tm, tn, tk), target.ub_bytes);
    let emit_mm =
        |code: &mut CodeWriter, ubx: &mut UbAlloc, body: u64| contraction.emit(code, ubx, body);
    let cx = Ctx {
        group,
        t,
        classes: &sc.classes,
        spread: &sc.spread,
        last: &sc.last,
        fold: None,
        target,
    };
    let ub_bytes = emit_bodies(
        &cx,
        &mut sc.bodies[..nbodies_usize],
        &mut sc.ub,
        &mut sc.addr,
        Some(&emit_mm),
    )?;
    Ok(Summary {
        kind: kernel_kind(group, nbodies),
        ub_bytes,
        bodies: nbodies_usize,
        grid,
        tile: (tm, tn),
        // Statistics for `dvm explain`: saturating, as shapes may be large
        // enough to overflow them (a kernel that is never run).
        tiles: nbodies.saturating_mul(t.tiles_per_body()),
        bytes_moved: bytes_moved(group, &op, tm, tn),
    })
}

/// A matmul group's own operands, checked: A `[batch…, m, k]` and
/// B `[batch…, k, n]` of one dtype, accumulated in `acc`.
struct Operands<'a> {
    batch: &'a [u64],
    m: u64,
    n: u64,
    k: u64,
    acc: DType,
    a: &'a View,
    b: &'a View,
}

impl<'a> Operands<'a> {
    fn of(group: &'a Group) -> Result<Operands<'a>, CompileError> {
        let GroupKind::Matmul {
            batch,
            m,
            n,
            k,
            acc,
        } = &group.kind
        else {
            return Err(CompileError::Malformed("not a matmul group".into()));
        };
        let (m, n, k, acc) = (*m, *n, *k, *acc);
        if group.inputs.len() < 2 {
            return Err(CompileError::Malformed("matmul needs two operands".into()));
        }
        let (a, b) = (&group.inputs[0], &group.inputs[1]);
        let nb = batch.len();
        let rank = nb + 2;
        if rank > MAX_RANK {
            return Err(CompileError::TooLarge("the iteration space's rank".into()));
        }
        if a.shape.len() != rank
            || b.shape.len() != rank
            || a.strides.len() != rank
            || b.strides.len() != rank
        {
            return Err(CompileError::Malformed("operand rank".into()));
        }
        if a.shape[nb..] != [m, k] || b.shape[nb..] != [k, n] || a.dtype != b.dtype {
            return Err(CompileError::Malformed("operand shapes or dtypes".into()));
        }
        Ok(Operands {
            batch,
            m,
            n,
            k,
            acc,
            a,
            b,
        })
    }
}

/// Tiles the output space `[batch…, m, n]` into `sc.tiled` (box rows and
/// columns m and n, tiles of one element until [`tile_plan`]): every
/// operand's strides over it, A not moving along n nor B along m, the
/// epilogue's inputs and the outputs over the whole space. Returns the
/// box's rows dimension.
fn tile_output_space(
    group: &Group,
    op: &Operands<'_>,
    sc: &mut Scratch,
) -> Result<usize, CompileError> {
    let (a, b, m, n) = (op.a, op.b, op.m, op.n);
    let nb = op.batch.len();
    let rank = nb + 2;
    let space = &mut sc.space;
    space.clear();
    space.extend_from_slice(op.batch);
    space.push(m);
    space.push(n);
    let strides = &mut sc.strides;
    strides.clear();
    let t = &mut sc.tiled;
    t.offsets.clear();
    let mut sa = stride_array(&a.strides[..nb]);
    sa[nb] = a.strides[nb];
    let mut sb = stride_array(&b.strides[..nb]);
    sb[nb + 1] = b.strides[nb + 1];
    strides.push(sa);
    strides.push(sb);
    t.offsets.extend([a.offset, b.offset]);
    for v in &group.inputs[2..] {
        if v.shape != *space || v.strides.len() != rank {
            return Err(CompileError::Malformed(
                "epilogue input not over the output space".into(),
            ));
        }
        strides.push(stride_array(&v.strides));
        t.offsets.push(v.offset);
    }
    for (_, v) in &group.outputs {
        if v.shape != *space || v.strides.len() != rank {
            return Err(CompileError::Malformed(
                "output not over the output space".into(),
            ));
        }
        strides.push(stride_array(&v.strides));
        t.offsets.push(v.offset);
    }
    // Coalesce the batch dimensions only: m and n stay the box.
    coalesce_keep(&space[..nb], strides, None, &mut t.dims, &mut t.strides)?;
    if nb == 0 || (t.dims == [1] && space[..nb].iter().product::<u64>() == 1) {
        t.dims.clear();
    }
    let r = t.dims.len();
    t.dims.extend([m, n]);
    for (c, s) in t.strides.iter_mut().zip(strides.iter()) {
        c[r] = s[nb];
        c[r + 1] = s[nb + 1];
    }
    t.rdim = Some(r);
    t.cdim = r + 1;
    t.tr = 1;
    t.tc = 1;
    Ok(r)
}

/// The tile sizes `(tm, tn, tk)` and the grid laid out for them in
/// `sc.tiled` (`r`: the box's rows dimension): from 64 × 128 × 256, shrunk
/// until A, B and the epilogue's live tiles fit, then rows halved until
/// there are enough tiles for the cores.
fn tile_plan(
    group: &Group,
    op: &Operands<'_>,
    r: usize,
    sc: &mut Scratch,
    target: &Target,
) -> Result<(u64, u64, u64), CompileError> {
    let (m, n, k) = (op.m, op.n, op.k);
    let t = &mut sc.tiled;
    // `nf` counts the accumulator itself (the matmul node is a full tile of
    // the epilogue); A and B stay allocated during the epilogue in the
    // worst case (slots are reused by size).
    let es_in = op.a.dtype.size() as u64;
    let es = max_elem_size(group).max(op.acc.size() as u64);
    spreads(group, t, &mut sc.spread);
    let (nf, _, nv) = peak_buffers(group, &sc.classes, &sc.spread, &sc.last);
    let al = |x: u64| x.next_multiple_of(ALIGN as u64);
    let ub = target.ub_bytes as u64;
    let (mut tm, mut tn, mut tk) = (m.min(64), n.min(128), k.min(256));
    let cost = |tm: u64, tn: u64, tk: u64| {
        al(tm * tk * es_in) + al(tk * tn * es_in) + nf * al(tm * tn * es) + nv * al(tm.max(tn) * es)
    };
    while cost(tm, tn, tk) > ub {
        if tk > 32 {
            tk /= 2;
        } else if tm > 8 {
            tm /= 2;
        } else if tn > 16 {
            tn /= 2;
        } else {
            return Err(CompileError::DoesNotFit(
                "a matmul tile".into(),
                target.ub_bytes,
            ));
        }
    }
    // Enough tiles for the cores.
    let outer: u64 = t.dims[..r].iter().product();
    while outer * m.div_ceil(tm) * n.div_ceil(tn) < 2 * target.cores as u64 && tm > 8 {
        tm = (tm / 2).max(8);
    }
    t.tr = tm;
    t.tc = tn;
    grid_layout(t);
    Ok((tm, tn, tk))
}

/// Refuses a contraction of length `k` in chunks of `tk` whose chunks
/// alone overflow the executor's program: each chunk is three
/// instructions (two loads and a matmul) in every body, and the check
/// comes before any code is written (a long contraction would take
/// minutes and gigabytes to emit).
fn check_contraction_length(k: u64, tk: u64) -> Result<(), CompileError> {
    let chunks = k.div_ceil(tk);
    if chunks.saturating_mul(3) > dvm_device::predecode::DEFAULT_INSTRS as u64 {
        return Err(CompileError::TooLarge(format!(
            "a contraction of length {k} ({chunks} chunks of {tk}, 3 instructions each, \
             in a program of at most {} instructions)",
            dvm_device::predecode::DEFAULT_INSTRS
        )));
    }
    Ok(())
}

/// The contraction that produces the matmul node's tile: `k` in chunks of
/// `tk`, each an A box and a B box loaded and multiplied into the
/// accumulator.
struct Contraction<'a> {
    t: &'a Tiled,
    tm: u64,
    tn: u64,
    tk: u64,
    k: u64,
    in_dt: DType,
    acc: DType,
    /// A stored transposed (contiguous along m), loaded as `k × m` boxes.
    trans_a: bool,
    /// B stored transposed (contiguous along k), loaded as `n × k` boxes.
    trans_b: bool,
    /// A's and B's strides along k.
    ka: u64,
    kb: u64,
    limit: u32,
}

impl<'a> Contraction<'a> {
    fn new(op: &Operands<'_>, t: &'a Tiled, (tm, tn, tk): (u64, u64, u64), limit: u32) -> Self {
        let (a, b) = (op.a, op.b);
        let nb = op.batch.len();
        Contraction {
            t,
            tm,
            tn,
            tk,
            k: op.k,
            in_dt: a.dtype,
            acc: op.acc,
            trans_a: a.strides[nb + 1] != 1 && a.strides[nb] == 1 && op.m > 1,
            trans_b: b.strides[nb + 1] != 1 && b.strides[nb] == 1 && op.n > 1,
            ka: a.strides[nb + 1],
            kb: b.strides[nb],
            limit,
        }
    }

    /// Emits the contraction of `body`'s tile; returns the accumulator's
    /// UB address (A's and B's buffers freed).
    fn emit(
        &self,
        code: &mut CodeWriter,
        ubx: &mut UbAlloc,
        body: u64,
    ) -> Result<u32, CompileError> {
        let Contraction {
            t,
            tm,
            tn,
            tk,
            k,
            in_dt,
            acc,
            trans_a,
            trans_b,
            ka,
            kb,
            limit,
        } = *self;
        let es_in = in_dt.size() as u64;
        let oom = || CompileError::DoesNotFit("a matmul tile".into(), limit);
        let c = ubx
            .alloc((tm * tn * acc.size() as u64) as u32, limit)
            .ok_or_else(oom)?;
        let abuf = ubx.alloc((tm * tk * es_in) as u32, limit).ok_or_else(oom)?;
        let bbuf = ubx.alloc((tk * tn * es_in) as u32, limit).ok_or_else(oom)?;
        let pa = t.pattern(0, body, BoxShape::Full)?;
        let pb = t.pattern(1, body, BoxShape::Full)?;
        let mut k0 = 0;
        while k0 < k {
            let kc = tk.min(k - k0);
            let la = a_box(&pa, trans_a, tm, kc, ka, k0)?;
            let lb = b_box(&pb, trans_b, tn, kc, kb, k0)?;
            code.push(&load_from(&la, 0, in_dt, abuf)?, WaitMask::NONE);
            code.push(&load_from(&lb, 1, in_dt, bbuf)?, WaitMask::NONE);
            let flags = MmFlags {
                trans_a,
                trans_b,
                accumulate: k0 > 0,
            };
            code.push(
                &Instr::Matmul {
                    dt: in_dt,
                    out: acc,
                    flags,
                    dst: c,
                    a: abuf,
                    b: bbuf,
                    m: tm as u32,
                    n: tn as u32,
                    k: kc as u32,
                },
                WaitMask::NONE.with(Pipe::Load),
            );
            k0 += kc;
        }
        ubx.free(abuf);
        ubx.free(bbuf);
        Ok(c)
    }
}

/// The kernel kind: parallel over several bodies, else mix when an
/// epilogue runs on the vector pipe (any node but the matmul and the loads
/// of its operands), else cube.
fn kernel_kind(group: &Group, nbodies: u64) -> KernelKind {
    let vector = group
        .nodes
        .iter()
        .any(|(n, _)| !matches!(n, TileOp::Matmul | TileOp::Input(_)));
    if nbodies > 1 {
        KernelKind::Parallel
    } else if vector {
        KernelKind::Mix
    } else {
        KernelKind::Cube
    }
}

/// Bytes moved per launch with `tm × tn` tiles (saturating): A read once
/// per column tile, B once per row tile, the epilogue's inputs and the
/// outputs once.
fn bytes_moved(group: &Group, op: &Operands<'_>, tm: u64, tn: u64) -> u64 {
    let (a, b) = (op.a, op.b);
    let io = |d: DType, e: u64| e.saturating_mul(d.size() as u64);
    io(a.dtype, a.numel())
        .saturating_mul(op.n.div_ceil(tn))
        .saturating_add(io(b.dtype, b.numel()).saturating_mul(op.m.div_ceil(tm)))
        .saturating_add(
            group.inputs[2..]
                .iter()
                .chain(group.outputs.iter().map(|(_, v)| v))
                .fold(0u64, |acc, v| {
                    acc.saturating_add(io(v.dtype, v.distinct_numel()))
                }),
        )
}

/// The A box for contraction chunk `k0..k0+kc`: `tm × kc` (or `kc × tm`
/// when A is stored transposed and loaded with contiguous rows).
fn a_box(
    p: &PatternFields,
    trans: bool,
    tm: u64,
    kc: u64,
    ka: u64,
    k0: u64,
) -> Result<PatternFields, CompileError> {
    let base = p
        .base
        .checked_add(k0.checked_mul(ka).ok_or_else(big)?)
        .ok_or_else(big)?;
    Ok(if trans {
        PatternFields {
            pitch: tm,
            rows: kc,
            cols: tm,
            row_total: kc,
            col_total: p.row_total,
            row_dim: dvm_isa::GridDim::None,
            col_dim: p.row_dim,
            base,
            step: p.step,
            row_stride: ka,
            col_stride: p.row_stride,
        }
    } else {
        PatternFields {
            pitch: kc,
            rows: p.rows,
            cols: kc,
            row_total: p.row_total,
            col_total: kc,
            row_dim: p.row_dim,
            col_dim: dvm_isa::GridDim::None,
            base,
            step: p.step,
            row_stride: p.row_stride,
            col_stride: ka,
        }
    })
}

/// The B box for contraction chunk `k0..k0+kc`: `kc × tn` (or `tn × kc`
/// when B is stored transposed).
fn b_box(
    p: &PatternFields,
    trans: bool,
    tn: u64,
    kc: u64,
    kb: u64,
    k0: u64,
) -> Result<PatternFields, CompileError> {
    let base = p
        .base
        .checked_add(k0.checked_mul(kb).ok_or_else(big)?)
        .ok_or_else(big)?;
    Ok(if trans {
        PatternFields {
            pitch: kc,
            rows: tn,
            cols: kc,
            row_total: p.col_total,
            col_total: kc,
            row_dim: p.col_dim,
            col_dim: dvm_isa::GridDim::None,
            base,
            step: p.step,
            row_stride: p.col_stride,
            col_stride: kb,
        }
    } else {
        PatternFields {
            pitch: tn,
            rows: kc,
            cols: p.cols,
            row_total: kc,
            col_total: p.col_total,
            row_dim: dvm_isa::GridDim::None,
            col_dim: p.col_dim,
            base,
            step: p.step,
            row_stride: kb,
            col_stride: p.col_stride,
        }
    })
}

fn big() -> CompileError {
    CompileError::TooLarge("a matmul offset".into())
}
