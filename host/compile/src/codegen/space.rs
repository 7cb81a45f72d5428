//! Mapping an N-D iteration space onto tiles.
//!
//! After coalescing, the space's innermost dimension becomes the UB box's
//! columns and (usually) the one before it the box's rows. The box dimensions
//! are tiled (`tr × tc` elements per tile, tails described in the loads and
//! stores); every other dimension is a grid dimension of tile extent 1. The
//! tile grid has three dimensions: when more are needed, the outermost
//! dimensions are iterated by separate bodies of a parallel kernel, each with
//! its own base offsets.

use dvm_isa::operand::GridDim;
use dvm_isa::{DType, Instr, Opcode, PadMode, Scalar};

use super::view::MAX_RANK;
use super::CompileError;

/// One grid dimension of the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GridAxis {
    /// A space dimension iterated one index per tile.
    Dim(usize),
    /// Tiles of the box rows.
    Rows,
    /// Tiles of the box columns.
    Cols,
}

/// Which part of a tile box an operand occupies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoxShape {
    /// `tr × tc`.
    Full,
    /// `tr × 1` (reduced along the columns).
    RowVec,
    /// `1 × tc` (reduced along the rows).
    ColVec,
}

/// The tiled space of one kernel.
#[derive(Clone, Debug, Default)]
pub struct Tiled {
    /// Coalesced extents.
    pub dims: Vec<u64>,
    /// Per operand, its stride along each coalesced dimension (entries past
    /// `dims.len()` are unused).
    pub strides: Vec<[u64; MAX_RANK]>,
    /// Per operand, its element offset.
    pub offsets: Vec<u64>,
    /// Box rows dimension, if any.
    pub rdim: Option<usize>,
    /// Box columns dimension.
    pub cdim: usize,
    /// Rows per tile.
    pub tr: u64,
    /// Columns per tile.
    pub tc: u64,
    /// Grid dimensions (at most three), outermost first.
    pub grid: Vec<GridAxis>,
    /// Space dimensions iterated by bodies, outermost first.
    pub body_dims: Vec<usize>,
}

impl Tiled {
    /// Rows of the space along the box rows (1 without a rows dimension).
    pub fn er(&self) -> u64 {
        self.rdim.map_or(1, |r| self.dims[r])
    }
    /// Columns of the space along the box columns.
    pub fn ec(&self) -> u64 {
        self.dims[self.cdim]
    }

    /// Extent of a grid axis in tiles.
    pub fn grid_extent(&self, g: GridAxis) -> u64 {
        match g {
            GridAxis::Dim(d) => self.dims[d],
            GridAxis::Rows => self.er().div_ceil(self.tr),
            GridAxis::Cols => self.ec().div_ceil(self.tc),
        }
    }

    /// Number of bodies.
    pub fn bodies(&self) -> u64 {
        self.body_dims.iter().map(|&d| self.dims[d]).product()
    }

    /// Tiles per body.
    pub fn tiles_per_body(&self) -> u64 {
        self.grid.iter().map(|&g| self.grid_extent(g)).product()
    }

    /// The grid of one body as encoded (padded with 1s).
    pub fn grid3(&self) -> Result<[u32; 3], CompileError> {
        let mut g = [1u32; 3];
        let off = 3 - self.grid.len();
        for (i, &a) in self.grid.iter().enumerate() {
            g[off + i] = u32::try_from(self.grid_extent(a))
                .map_err(|_| CompileError::TooLarge("tile grid".into()))?;
        }
        // The tile index of a body is a `u32` (the verifier's rule).
        let tiles = g
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(u64::from(d)))
            .filter(|&n| n <= u64::from(u32::MAX));
        if tiles.is_none() {
            return Err(CompileError::TooLarge(format!(
                "tile grid {g:?} (more than 2^32-1 tiles)"
            )));
        }
        Ok(g)
    }

    /// Index of body `b` along each body dimension.
    fn body_index(&self, mut b: u64) -> [u64; MAX_RANK] {
        let mut idx = [0; MAX_RANK];
        for &d in self.body_dims.iter().rev() {
            idx[d] = b % self.dims[d];
            b /= self.dims[d];
        }
        idx
    }

    /// The load/store fields of operand `op` for body `body`.
    ///
    /// # Errors
    /// [`CompileError::TooLarge`] when the base offset overflows.
    pub fn pattern(
        &self,
        op: usize,
        body: u64,
        shape: BoxShape,
    ) -> Result<PatternFields, CompileError> {
        let st = &self.strides[op];
        let idx = self.body_index(body);
        let mut base = self.offsets[op];
        for &d in &self.body_dims {
            base = base
                .checked_add(idx[d].checked_mul(st[d]).ok_or_else(too_large)?)
                .ok_or_else(too_large)?;
        }
        let (rows, cols) = match shape {
            BoxShape::Full => (self.tr, self.tc),
            BoxShape::RowVec => (self.tr, 1),
            BoxShape::ColVec => (1, self.tc),
        };
        let off = 3 - self.grid.len();
        let mut step = [0u64; 3];
        let mut row_dim = GridDim::None;
        let mut col_dim = GridDim::None;
        for (i, &g) in self.grid.iter().enumerate() {
            let gi = off + i;
            step[gi] = match g {
                GridAxis::Dim(d) => st[d],
                GridAxis::Rows => {
                    if shape != BoxShape::ColVec {
                        row_dim = GridDim::Dim(gi as u8);
                    }
                    self.rdim.map_or(0, |r| st[r]).saturating_mul(self.tr)
                }
                GridAxis::Cols => {
                    if shape != BoxShape::RowVec {
                        col_dim = GridDim::Dim(gi as u8);
                    }
                    st[self.cdim].saturating_mul(self.tc)
                }
            };
        }
        Ok(PatternFields {
            pitch: cols,
            rows,
            cols,
            row_total: if row_dim == GridDim::None {
                rows
            } else {
                self.er()
            },
            col_total: if col_dim == GridDim::None {
                cols
            } else {
                self.ec()
            },
            row_dim,
            col_dim,
            base,
            step,
            row_stride: self.rdim.map_or(0, |r| st[r]),
            col_stride: st[self.cdim],
        })
    }

    /// A `load` of operand `op` into `ub` for body `body`.
    ///
    /// # Errors
    /// [`CompileError::TooLarge`] when an extent exceeds the encoding.
    pub fn load(
        &self,
        op: usize,
        param: u8,
        dtype: DType,
        ub: u32,
        body: u64,
        shape: BoxShape,
    ) -> Result<Instr, CompileError> {
        let p = self.pattern(op, body, shape)?;
        load_from(&p, param, dtype, ub)
    }

    /// A `store` (or `store_add`) of UB `ub` to operand `op` for body `body`.
    ///
    /// # Errors
    /// [`CompileError::TooLarge`] when an extent exceeds the encoding.
    #[allow(clippy::too_many_arguments)]
    pub fn store(
        &self,
        op: usize,
        param: u8,
        dtype: DType,
        ub: u32,
        body: u64,
        shape: BoxShape,
        add: bool,
    ) -> Result<Instr, CompileError> {
        let p = self.pattern(op, body, shape)?;
        let opcode = if add { Opcode::StoreAdd } else { Opcode::Store };
        let gd = |d: GridDim| d.index().map_or(0xff, |i| i as u64);
        let raw = [
            dtype as u64,
            param as u64,
            gd(p.row_dim),
            gd(p.col_dim),
            ub as u64,
            u32c(p.pitch)? as u64,
            u32c(p.rows)? as u64,
            u32c(p.cols)? as u64,
            u32c(p.row_total)? as u64,
            u32c(p.col_total)? as u64,
            p.base,
            p.step[0],
            p.step[1],
            p.step[2],
            p.row_stride,
            p.col_stride,
        ];
        super::instr(opcode, &raw)
    }
}

/// The fields of one load or store box (see [`dvm_isa::GmPattern`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct PatternFields {
    pub pitch: u64,
    pub rows: u64,
    pub cols: u64,
    pub row_total: u64,
    pub col_total: u64,
    pub row_dim: GridDim,
    pub col_dim: GridDim,
    pub base: u64,
    pub step: [u64; 3],
    pub row_stride: u64,
    pub col_stride: u64,
}

/// A `load` of the box `p` into UB `ub` (tails zero-filled).
///
/// # Errors
/// [`CompileError::TooLarge`] when an extent exceeds the encoding.
pub fn load_from(
    p: &PatternFields,
    param: u8,
    dtype: DType,
    ub: u32,
) -> Result<Instr, CompileError> {
    Ok(Instr::Load {
        dt: dtype,
        pad: PadMode::Fill,
        buf: param,
        row_dim: p.row_dim,
        col_dim: p.col_dim,
        ub,
        pitch: u32c(p.pitch)?,
        rows: u32c(p.rows)?,
        cols: u32c(p.cols)?,
        row_total: u32c(p.row_total)?,
        col_total: u32c(p.col_total)?,
        padv: Scalar(0),
        base: p.base,
        step0: p.step[0],
        step1: p.step[1],
        step2: p.step[2],
        row_stride: p.row_stride,
        col_stride: p.col_stride,
    })
}

fn too_large() -> CompileError {
    CompileError::TooLarge("a buffer offset".into())
}

fn u32c(v: u64) -> Result<u32, CompileError> {
    u32::try_from(v).map_err(|_| CompileError::TooLarge(format!("extent {v}")))
}

/// Coalesces `shape` over the operands' `strides`, never merging dimension
/// `keep` with a neighbour (nor dropping it). Writes the coalesced extents
/// to `dims` and each operand's coalesced strides to `out` (both cleared
/// first, capacity kept); returns the new index of `keep`.
///
/// # Errors
/// [`CompileError::TooLarge`] when `shape` has more than [`MAX_RANK`]
/// dimensions.
pub fn coalesce_keep(
    shape: &[u64],
    strides: &[[u64; MAX_RANK]],
    keep: Option<usize>,
    dims: &mut Vec<u64>,
    out: &mut Vec<[u64; MAX_RANK]>,
) -> Result<Option<usize>, CompileError> {
    if shape.len() > MAX_RANK {
        return Err(CompileError::TooLarge("the iteration space's rank".into()));
    }
    dims.clear();
    out.clear();
    out.resize(strides.len(), [0; MAX_RANK]);
    let mut kept = None;
    let mut barrier = false;
    for (d, &ext) in shape.iter().enumerate() {
        let is_keep = Some(d) == keep;
        if ext == 1 && !is_keep {
            continue;
        }
        let n = dims.len();
        let merge = !is_keep
            && !barrier
            && n > 0
            && out
                .iter()
                .zip(strides)
                .all(|(o, s)| o[n - 1] == s[d].saturating_mul(ext));
        if merge {
            dims[n - 1] *= ext;
            for (o, s) in out.iter_mut().zip(strides) {
                o[n - 1] = s[d];
            }
        } else {
            dims.push(ext);
            for (o, s) in out.iter_mut().zip(strides) {
                o[n] = s[d];
            }
        }
        if is_keep {
            kept = Some(dims.len() - 1);
        }
        barrier = is_keep;
    }
    if dims.is_empty() {
        dims.push(1);
        for o in out.iter_mut() {
            o[0] = 0;
        }
    }
    Ok(kept)
}

/// Chooses the grid and the body dimensions for a space whose box is
/// `(rdim, cdim)`: the other dimensions in order, then row tiles, then column
/// tiles, dropping axes of extent 1; beyond three, outermost axes go to bodies.
pub fn grid_layout(t: &mut Tiled) {
    let mut axes = core::mem::take(&mut t.grid);
    axes.clear();
    axes.extend(
        (0..t.dims.len())
            .filter(|&d| Some(d) != t.rdim && d != t.cdim)
            .map(GridAxis::Dim),
    );
    axes.push(GridAxis::Rows);
    axes.push(GridAxis::Cols);
    axes.retain(|&a| t.grid_extent(a) > 1);
    t.body_dims.clear();
    let extra = axes.len().saturating_sub(3);
    for a in axes.drain(..extra) {
        if let GridAxis::Dim(d) = a {
            t.body_dims.push(d);
        }
    }
    t.grid = axes;
}
