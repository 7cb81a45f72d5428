//! What an instruction touches: UB ranges and global-memory access patterns.
//!
//! These are produced by the instruction table (`instr.rs`) and consumed by the
//! verifier, the simulator and the executor; nothing else re-derives them.

use crate::dtype::DType;
use crate::instr::MAX_UB_ACCESSES;
use crate::operand::GridDim;

/// Whether an access reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessKind {
    /// The instruction reads the range.
    Read,
    /// The instruction writes the range.
    Write,
}

/// One UB range an instruction reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UbAccess {
    /// Read or write.
    pub kind: AccessKind,
    /// The operand field the range comes from.
    pub field: &'static str,
    /// Byte offset in UB.
    pub addr: u32,
    /// Number of elements.
    pub elems: u64,
    /// Element type.
    pub dtype: DType,
}

impl UbAccess {
    /// Length in bytes, or `None` on overflow.
    pub fn bytes(&self) -> Option<u64> {
        self.elems.checked_mul(self.dtype.size() as u64)
    }
    /// One past the last byte, or `None` on overflow.
    pub fn end(&self) -> Option<u64> {
        (self.addr as u64).checked_add(self.bytes()?)
    }
}

/// The UB ranges of one instruction (see [`crate::Instr::ub_accesses`]):
/// a fixed-capacity list, [`MAX_UB_ACCESSES`] long, no allocation.
#[derive(Clone, Copy, Debug)]
pub struct UbAccesses {
    items: [UbAccess; MAX_UB_ACCESSES],
    len: usize,
}

impl UbAccesses {
    const UNUSED: UbAccess = UbAccess {
        kind: AccessKind::Read,
        field: "",
        addr: 0,
        elems: 0,
        dtype: DType::Bool,
    };

    /// The list holding one table row's accesses. A row longer than the
    /// capacity does not compile, so no access is ever dropped.
    #[inline]
    pub(crate) fn from_row<const N: usize>(row: [UbAccess; N]) -> UbAccesses {
        const { assert!(N <= MAX_UB_ACCESSES) };
        let mut items = [UbAccesses::UNUSED; MAX_UB_ACCESSES];
        items[..N].copy_from_slice(&row);
        UbAccesses { items, len: N }
    }

    /// The accesses, in table order.
    #[inline]
    pub fn as_slice(&self) -> &[UbAccess] {
        // `len <= MAX_UB_ACCESSES` by construction.
        self.items.get(..self.len).unwrap_or(&[])
    }
}

/// How a load or store moves data between global memory and UB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GmKind {
    /// Global memory → UB.
    Load,
    /// Global memory → UB by index (`gather`): the pattern's box is the
    /// tile's whole table (`rows` is its row count, the instruction's
    /// `extent`), of which the index tile picks one row per UB row; its
    /// `ub` and `pitch` are the UB box's, whose row count is the
    /// instruction's own.
    Gather,
    /// UB → global memory.
    Store,
    /// UB → global memory, adding into what is there (atomically per element).
    StoreAdd,
}

/// A 2-D box in global memory whose origin is affine in the tile coordinates.
///
/// For tile coordinates `c = (c0, c1, c2)` the box starts at element
/// `base + c0·step0 + c1·step1 + c2·step2` of parameter `buf`; element
/// `(r, k)` of the box is at `start + r·row_stride + k·col_stride` and lands at
/// UB byte `ub + (r·pitch + k)·size`.
///
/// Tails are described, not branched on: when `row_dim` names a grid dimension
/// `d`, the tile's valid rows are `min(rows, row_total − c[d]·rows)`; the same
/// for columns. A stride of 0 broadcasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GmPattern {
    /// Parameter index of the buffer.
    pub buf: u8,
    /// Element type, equal to the parameter's.
    pub dtype: DType,
    /// Grid dimension whose last tile has fewer rows.
    pub row_dim: GridDim,
    /// Grid dimension whose last tile has fewer columns.
    pub col_dim: GridDim,
    /// UB byte offset of the box.
    pub ub: u32,
    /// UB elements between consecutive rows.
    pub pitch: u32,
    /// Rows of a full tile.
    pub rows: u32,
    /// Columns of a full tile.
    pub cols: u32,
    /// Total rows along `row_dim` (ignored when `row_dim` is none).
    pub row_total: u32,
    /// Total columns along `col_dim` (ignored when `col_dim` is none).
    pub col_total: u32,
    /// Element offset of the box at tile (0, 0, 0).
    pub base: u64,
    /// Element offset added per unit of each tile coordinate.
    pub step: [u64; 3],
    /// Element distance between rows.
    pub row_stride: u64,
    /// Element distance between columns.
    pub col_stride: u64,
}

impl GmPattern {
    /// Valid rows and columns of the tile at `coord`.
    ///
    /// Relies on the verifier's guarantee that every tile is non-empty
    /// (`row_total > (grid[d] − 1)·rows`); saturates otherwise. A grid
    /// dimension index above 2 (which no decoded instruction holds) gives an
    /// empty extent rather than a panic.
    #[inline]
    pub fn extent(&self, coord: [u32; 3]) -> (u32, u32) {
        let lim = |dim: GridDim, full: u32, total: u32| match dim.index() {
            None => full,
            Some(d) => match coord.get(d) {
                Some(&c) => {
                    let start = c as u64 * full as u64;
                    (total as u64).saturating_sub(start).min(full as u64) as u32
                }
                None => 0,
            },
        };
        (
            lim(self.row_dim, self.rows, self.row_total),
            lim(self.col_dim, self.cols, self.col_total),
        )
    }

    /// Element offset of the box origin at `coord` (wrapping; the launch check
    /// proved it does not wrap for any tile of the grid).
    #[inline]
    pub fn origin(&self, coord: [u32; 3]) -> u64 {
        self.base
            .wrapping_add(self.step[0].wrapping_mul(coord[0] as u64))
            .wrapping_add(self.step[1].wrapping_mul(coord[1] as u64))
            .wrapping_add(self.step[2].wrapping_mul(coord[2] as u64))
    }
}

/// The global-memory side of a load or store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GmAccess {
    /// Direction.
    pub kind: GmKind,
    /// The address pattern.
    pub pattern: GmPattern,
}
