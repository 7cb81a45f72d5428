//! Code generation for gather groups: table rows picked by run-time
//! indices (an embedding lookup).
//!
//! The space is `[outer, n, inner]`: `outer` tables of `extent` rows of
//! `inner` elements, `n` indices. A tile is `tn` indices by `td` columns
//! of one table; its body loads the `tn` indices (`i32`, padded with 0),
//! gathers the rows they pick into a `tn × td` box (the `gather`
//! instruction clamps every index into the table) and stores the box.
//! The grid is `[outer, ⌈n / tn⌉, ⌈inner / td⌉]`.

use dvm_isa::{DType, GridDim, Instr, KernelKind, PadMode, Pipe, Scalar, WaitMask};

use super::group::{Group, GroupKind, TileOp};
use super::ub_alloc::ALIGN;
use super::{CompileError, Scratch, Summary, Target};

/// Most columns of a tile.
const MAX_TILE_COLS: u64 = 4096;
/// Elements of a tile's box the tiling aims at.
const TILE_ELEMS: u64 = 8192;
/// Most indices of a tile.
const MAX_TILE_ROWS: u64 = 4096;

/// The shape of a gather group, checked against its views.
struct Shape {
    outer: u64,
    extent: u64,
    n: u64,
    inner: u64,
}

impl Shape {
    fn of(group: &Group) -> Result<Shape, CompileError> {
        let GroupKind::Gather {
            outer,
            extent,
            n,
            inner,
        } = group.kind
        else {
            return Err(malformed("not a gather group"));
        };
        let (Some(table), Some(idx), [(0, out)]) = (
            group.inputs.first(),
            group.inputs.get(1),
            group.outputs.as_slice(),
        ) else {
            return Err(malformed("a gather has a table, indices and one output"));
        };
        let dims_ok = |v: &super::View, shape: &[u64]| v.shape == shape && v.strides.len() == 3;
        if group.inputs.len() != 2
            || !matches!(group.nodes.as_slice(), [(TileOp::Input(0), _)])
            || !dims_ok(table, &[outer, extent, inner])
            || idx.shape != [n]
            || idx.strides.len() != 1
            || idx.dtype != DType::I32
            || !dims_ok(out, &[outer, n, inner])
            || out.dtype != table.dtype
        {
            return Err(malformed("gather views do not match the group's shape"));
        }
        if [outer, extent, n, inner].contains(&0) {
            return Err(malformed("a gather without elements"));
        }
        Ok(Shape {
            outer,
            extent,
            n,
            inner,
        })
    }
}

/// [`super::compile`]'s code for a gather group, into `sc`.
pub(super) fn compile_into(
    group: &Group,
    target: &Target,
    sc: &mut Scratch,
) -> Result<Summary, CompileError> {
    let s = Shape::of(group)?;
    let (table, idx, out) = (&group.inputs[0], &group.inputs[1], &group.outputs[0].1);
    let dt = table.dtype;
    let size = dt.size() as u64;
    let td = s.inner.min(MAX_TILE_COLS);
    let tn = s.n.min((TILE_ELEMS / td).max(1)).min(MAX_TILE_ROWS);
    let box_bytes = (tn * td * size).next_multiple_of(ALIGN as u64);
    let ub_bytes = box_bytes + (tn * 4).next_multiple_of(ALIGN as u64);
    if ub_bytes > target.ub_bytes as u64 {
        return Err(CompileError::DoesNotFit(
            format!("a {tn} × {td} gather tile"),
            target.ub_bytes,
        ));
    }
    let u32_of =
        |v: u64, what: &str| u32::try_from(v).map_err(|_| CompileError::TooLarge(what.to_string()));
    let grid = [
        u32_of(s.outer, "the number of tables")?,
        u32_of(s.n.div_ceil(tn), "the number of index tiles")?,
        u32_of(s.inner.div_ceil(td), "the number of column tiles")?,
    ];
    if grid
        .iter()
        .try_fold(1u32, |a, &g| a.checked_mul(g))
        .is_none()
    {
        return Err(CompileError::TooLarge("the tile grid".into()));
    }
    let (tn32, td32) = (u32_of(tn, "tile rows")?, u32_of(td, "tile columns")?);
    let (n32, inner32) = (u32_of(s.n, "indices")?, u32_of(s.inner, "a row")?);
    let idx_ub = u32_of(box_bytes, "the UB")?;
    let mul = |a: u64, b: u64| {
        a.checked_mul(b)
            .ok_or_else(|| CompileError::TooLarge("a stride".into()))
    };
    let load_idx = Instr::Load {
        dt: DType::I32,
        pad: PadMode::Fill,
        buf: 1,
        row_dim: GridDim::Dim(1),
        col_dim: GridDim::None,
        ub: idx_ub,
        pitch: 1,
        rows: tn32,
        cols: 1,
        row_total: n32,
        col_total: 0,
        padv: Scalar::i32(0),
        base: idx.offset,
        step0: 0,
        step1: mul(tn, idx.strides[0])?,
        step2: 0,
        row_stride: idx.strides[0],
        col_stride: 1,
    };
    let gather = Instr::Gather {
        dt,
        buf: 0,
        col_dim: GridDim::Dim(2),
        ub: 0,
        idx: idx_ub,
        pitch: td32,
        rows: tn32,
        cols: td32,
        extent: u32_of(s.extent, "the table's rows")?,
        col_total: inner32,
        base: table.offset,
        step0: table.strides[0],
        step1: 0,
        step2: mul(td, table.strides[2])?,
        row_stride: table.strides[1],
        col_stride: table.strides[2],
    };
    let store = Instr::Store {
        dt,
        buf: 2,
        row_dim: GridDim::Dim(1),
        col_dim: GridDim::Dim(2),
        ub: 0,
        pitch: td32,
        rows: tn32,
        cols: td32,
        row_total: n32,
        col_total: inner32,
        base: out.offset,
        step0: out.strides[0],
        step1: mul(tn, out.strides[1])?,
        step2: mul(td, out.strides[2])?,
        row_stride: out.strides[1],
        col_stride: out.strides[2],
    };
    sc.clear_bodies(1);
    let code = &mut sc.bodies[0];
    code.push(&load_idx, WaitMask::NONE);
    code.push(&gather, WaitMask::NONE);
    code.push(&store, WaitMask::NONE.with(Pipe::Load));
    code.push(&Instr::End {}, WaitMask::NONE);
    let tiles = grid.iter().map(|&g| g as u64).product();
    Ok(Summary {
        kind: KernelKind::Vector,
        ub_bytes: u32_of(ub_bytes, "the UB")?,
        bodies: 1,
        grid,
        tile: (tn, td),
        tiles,
        // Statistics: the indices once per table and column tile, the
        // rows they pick and the output once.
        bytes_moved: s
            .n
            .saturating_mul(4)
            .saturating_mul(grid[0] as u64 * grid[2] as u64)
            .saturating_add(
                s.outer
                    .saturating_mul(s.n)
                    .saturating_mul(s.inner)
                    .saturating_mul(2 * size),
            ),
    })
}

fn malformed(what: &str) -> CompileError {
    CompileError::Malformed(what.to_string())
}
