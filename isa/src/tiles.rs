//! Whether a verified kernel's tiles may run at the same time on several
//! cores: no tile writes an element that another tile running beside it
//! reads or writes.
//!
//! The verifier proves every access stays inside its buffer; this proves
//! the accesses of different tiles apart, so that a multi-core executor may
//! hand a kernel's tiles to its cores in any split. A kernel it cannot
//! prove independent still runs, on one core. The proof is sufficient, not
//! exact: it accepts the layouts tiled code uses (boxes side by side along
//! rows, columns and outer dimensions, tails included) and refuses the rest.
//!
//! Which tiles run beside each other: all tiles of all bodies, except in a
//! sequence kernel, whose stages (bodies) are apart by barriers, so each
//! stage is checked alone. Within one tile the instructions run in order,
//! so a tile may read back and overwrite its own box.
//!
//! For each buffer some tile writes, the accesses to it are grouped by
//! body and global-memory geometry (identical boxes at every tile). Then:
//! - a group that stores, or that loads what it adds to, must not touch
//!   the same element at two tiles ([`boxes_disjoint`]);
//! - two groups of which one writes must cover disjoint element ranges;
//! - accesses that only add atomically (`store_add`) need neither: the
//!   adds are atomic.

use crate::access::{GmKind, GmPattern};
use crate::operand::GridDim;

/// Most distinct access groups to written buffers one stage may have; a
/// stage with more is not proven independent. The compiler's parallel
/// launches stack at most 8 kernels (the fuser's default `max_stack`),
/// which leaves each of them 4 stored outputs.
pub const MAX_GROUPS: usize = 32;

/// Why a kernel's tiles may not run concurrently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TileConflict {
    /// Two tiles of this access may touch the same element of the buffer,
    /// and at least one of them writes it.
    #[error("body {body}: tiles of one access to parameter {param} may touch the same elements, and it writes them")]
    SelfOverlap {
        /// Body of the access.
        body: u32,
        /// Parameter index.
        param: u8,
    },
    /// Two accesses to the buffer, at least one a write, cover overlapping
    /// element ranges.
    #[error("bodies {body} and {other}: two accesses to parameter {param} cover overlapping elements, and one writes them")]
    Overlap {
        /// Body of the first access.
        body: u32,
        /// Body of the second.
        other: u32,
        /// Parameter index.
        param: u8,
    },
    /// A stage accesses written buffers in more than [`MAX_GROUPS`] ways.
    #[error("body {body}: more than {MAX_GROUPS} distinct accesses to written parameters")]
    TooManyAccesses {
        /// The body where the limit was reached.
        body: u32,
    },
}

/// The accesses of one body to one buffer with one geometry.
#[derive(Clone, Copy)]
struct Group {
    body: u32,
    grid: [u32; 3],
    pattern: GmPattern,
    /// The furthest element it touches (the verifier computed it).
    last: u64,
    loads: bool,
    stores: bool,
    adds: bool,
}

impl Group {
    fn writes(&self) -> bool {
        self.stores || self.adds
    }

    /// Only atomic adds: concurrent with other such groups at will.
    fn adds_only(&self) -> bool {
        self.adds && !self.stores && !self.loads
    }
}

/// The global-memory side of two patterns is the same: at every tile they
/// cover the same elements (the UB side and the dtype do not matter here).
fn same_geometry(a: &GmPattern, b: &GmPattern) -> bool {
    a.buf == b.buf
        && a.base == b.base
        && a.step == b.step
        && a.rows == b.rows
        && a.cols == b.cols
        && a.row_stride == b.row_stride
        && a.col_stride == b.col_stride
        && a.row_dim == b.row_dim
        && a.col_dim == b.col_dim
        && (a.row_dim == GridDim::None || a.row_total == b.row_total)
        && (a.col_dim == GridDim::None || a.col_total == b.col_total)
}

/// Collects, during verification, the accesses to written buffers of the
/// stage being verified, and checks each stage as it closes: the
/// verifier's own pass over the code, so the kernel is decoded once.
pub(crate) struct Tracker {
    groups: [Option<Group>; MAX_GROUPS],
    len: usize,
    result: Result<(), TileConflict>,
}

impl Tracker {
    pub(crate) fn new() -> Tracker {
        Tracker {
            groups: [None; MAX_GROUPS],
            len: 0,
            result: Ok(()),
        }
    }

    /// Records an access of body `body` (of `grid`) to a writable
    /// parameter through `p`, whose furthest element is `last`.
    pub(crate) fn add(
        &mut self,
        body: u32,
        grid: [u32; 3],
        kind: GmKind,
        p: &GmPattern,
        last: u64,
    ) {
        if self.result.is_err() {
            return;
        }
        let live = &mut self.groups[..self.len];
        let g = match live
            .iter_mut()
            .flatten()
            .find(|g| g.body == body && same_geometry(&g.pattern, p))
        {
            Some(g) => g,
            None => {
                let Some(slot) = self.groups.get_mut(self.len) else {
                    self.result = Err(TileConflict::TooManyAccesses { body });
                    return;
                };
                self.len += 1;
                slot.insert(Group {
                    body,
                    grid,
                    pattern: *p,
                    last,
                    loads: false,
                    stores: false,
                    adds: false,
                })
            }
        };
        match kind {
            GmKind::Load | GmKind::Gather => g.loads = true,
            GmKind::Store => g.stores = true,
            GmKind::StoreAdd => g.adds = true,
        }
    }

    /// Checks the stage's accesses (all tiles recorded since the last
    /// close run at once) and starts the next stage.
    pub(crate) fn close_stage(&mut self) {
        if self.result.is_ok() {
            self.result = check_stage(self.groups[..self.len].iter().flatten());
        }
        self.len = 0;
    }

    /// The first conflict found, if any.
    pub(crate) fn result(&self) -> Result<(), TileConflict> {
        self.result
    }
}

/// The rules of [`crate::tiles`] over one stage's groups.
fn check_stage<'a>(groups: impl Iterator<Item = &'a Group> + Clone) -> Result<(), TileConflict> {
    for (i, g) in groups.clone().enumerate() {
        let param = g.pattern.buf;
        // A group that stores, or loads what it adds to, must keep its
        // tiles apart; loads alone and atomic adds alone need not.
        if (g.stores || (g.adds && g.loads)) && !boxes_disjoint(&g.pattern, g.grid) {
            return Err(TileConflict::SelfOverlap {
                body: g.body,
                param,
            });
        }
        for h in groups.clone().skip(i + 1) {
            let writes = g.writes() || h.writes();
            if h.pattern.buf != param || !writes || (g.adds_only() && h.adds_only()) {
                continue;
            }
            // Element ranges `[base, last]`.
            if g.pattern.base <= h.last && h.pattern.base <= g.last {
                return Err(TileConflict::Overlap {
                    body: g.body,
                    other: h.body,
                    param,
                });
            }
        }
    }
    Ok(())
}

/// Whether no element is in the boxes of two different tiles of `grid`
/// through `p`: either the boxes are apart as rows and columns of a
/// matrix (a contiguous inner axis, every grid dimension moving the box by
/// whole rows or across them, the columns never running into the next
/// row), or their hulls, `[origin, origin + span)`, are apart along the
/// grid's steps (a mixed radix, with the last tile's span shorter along a
/// tail dimension). Sufficient, not exact: it may refuse disjoint layouts
/// but never accepts overlapping ones. A pattern the verifier would reject
/// (an empty grid dimension or box, totals that do not match the grid) is
/// refused, never a panic.
pub fn boxes_disjoint(p: &GmPattern, grid: [u32; 3]) -> bool {
    if grid.contains(&0) || p.rows == 0 || p.cols == 0 {
        return false;
    }
    boxes_disjoint_2d(p, grid).unwrap_or(false) || boxes_disjoint_1d(p, grid).unwrap_or(false)
}

/// The proof on the box's hull: each tile's box lies in the element range
/// `[origin, origin + span)`, where the span is shorter for the last tile
/// along a dimension that drives a tail. Taken in order of increasing
/// step, each grid dimension's step must clear the reach of the block of
/// tiles the smaller steps span (a mixed radix), so the ranges are apart.
/// `None` on arithmetic overflow.
fn boxes_disjoint_1d(p: &GmPattern, grid: [u32; 3]) -> Option<bool> {
    let tail = |dim: GridDim, full: u32, total: u32| -> Option<(Option<usize>, u64)> {
        match dim.index() {
            Some(d) if d < 3 => {
                let before = (grid[d] as u64 - 1).checked_mul(full as u64)?;
                Some((
                    Some(d),
                    (total as u64).checked_sub(before)?.min(full as u64),
                ))
            }
            _ => Some((None, full as u64)),
        }
    };
    // The tail dimensions of rows and columns and the last tile's extents.
    let (rd, rows_last) = tail(p.row_dim, p.rows, p.row_total)?;
    let (cd, cols_last) = tail(p.col_dim, p.cols, p.col_total)?;
    let hull = |rows: u64, cols: u64| -> Option<u64> {
        rows.checked_sub(1)?
            .checked_mul(p.row_stride)?
            .checked_add(cols.checked_sub(1)?.checked_mul(p.col_stride)?)?
            .checked_add(1)
    };
    // reach[r][c]: the furthest offset, plus one, of the block of tiles
    // processed so far, for tiles whose coordinate along the row tail's
    // (column tail's) dimension is the last one (`r`, `c` = 1) or not.
    let mut reach = [[0u64; 2]; 2];
    for (r, row) in reach.iter_mut().enumerate() {
        for (c, v) in row.iter_mut().enumerate() {
            let rows = if r == 1 { rows_last } else { p.rows as u64 };
            let cols = if c == 1 { cols_last } else { p.cols as u64 };
            *v = hull(rows, cols)?;
        }
    }
    // A tail dimension of one tile: its only coordinate is the last.
    let single = |d: Option<usize>| d.is_some_and(|d| grid[d] == 1);
    if single(rd) {
        reach = [reach[1]; 2];
    }
    if single(cd) {
        reach = reach.map(|row| [row[1]; 2]);
    }
    let mut order = [0usize, 1, 2];
    order.sort_unstable_by_key(|&d| p.step[d]);
    for d in order {
        let (s, g) = (p.step[d], grid[d] as u64);
        if g <= 1 {
            continue;
        }
        // Consecutive coordinates along `d` must be apart: the lower one
        // is never the last, whatever the other tail's coordinate.
        let lower = |v: [[u64; 2]; 2]| -> u64 {
            if Some(d) == rd {
                v[0][0].max(v[0][1])
            } else if Some(d) == cd {
                v[0][0].max(v[1][0])
            } else {
                v.iter().flatten().copied().max().unwrap_or(0)
            }
        };
        if s < lower(reach) {
            return Some(false);
        }
        // The block's new reach: the last coordinate along `d` (with its
        // tail, if `d` drives one) or the one before it.
        let grow = |last: u64, full: u64| -> Option<u64> {
            let a = s.checked_mul(g - 1)?.checked_add(last)?;
            let b = s.checked_mul(g - 2)?.checked_add(full)?;
            Some(a.max(b))
        };
        let mut next = [[0u64; 2]; 2];
        for r in 0..2 {
            for c in 0..2 {
                next[r][c] = if Some(d) == rd {
                    grow(reach[1][c], reach[0][c])?
                } else if Some(d) == cd {
                    grow(reach[r][1], reach[r][0])?
                } else {
                    s.checked_mul(g - 1)?.checked_add(reach[r][c])?
                };
            }
        }
        reach = next;
    }
    Some(true)
}

/// The proof on rows and columns, for a box whose inner axis is
/// contiguous: element `e` of the pattern is `base + R·w + K` with `w` the
/// outer stride and `K < w`, so `(R, K)` names it uniquely. Each grid
/// dimension moves the box either down by whole rows (its step a multiple
/// of `w`) or across (its step below `w`); the boxes are apart when both
/// sets of steps form a mixed radix over the box's extent and the columns
/// of every tile stay below `w`. `None` when the box has no such layout.
fn boxes_disjoint_2d(p: &GmPattern, grid: [u32; 3]) -> Option<bool> {
    // (outer stride, outer count, inner count, inner tail's dimension and total)
    let (w, outer, inner, dim, total) = if p.cols > 1 && p.col_stride == 1 && p.rows > 1 {
        (p.row_stride, p.rows, p.cols, p.col_dim, p.col_total)
    } else if p.rows > 1 && p.row_stride == 1 && p.cols > 1 {
        (p.col_stride, p.cols, p.rows, p.row_dim, p.row_total)
    } else {
        return None;
    };
    if w < inner as u64 {
        return None;
    }
    let mut down = [(0u64, 1u32); 3];
    let mut across = [(0u64, 1u32); 3];
    // The furthest column any tile reaches, plus one.
    let mut reach = inner as u64;
    for d in 0..3 {
        let (s, g) = (p.step[d], grid[d]);
        if g <= 1 {
            continue;
        }
        if s % w == 0 && s != 0 {
            down[d] = (s / w, g);
        } else if s < w {
            across[d] = (s, g);
            reach = reach.checked_add(s.checked_mul(g as u64 - 1)?)?;
        } else {
            return Some(false);
        }
    }
    // With the tail along an across dimension, the last tile is narrower:
    // the reach is the larger of the last tile's end and the one before.
    if let Some(d) = dim.index().filter(|&d| d < 3) {
        let (s, g) = across[d];
        if g >= 2 {
            let tail = (total as u64).checked_sub((g as u64 - 1) * inner as u64)?;
            let last = s.checked_mul(g as u64 - 1)?.checked_add(tail)?;
            let before = s.checked_mul(g as u64 - 2)?.checked_add(inner as u64)?;
            reach = reach - s * (g as u64 - 1) - inner as u64 + last.max(before);
        }
    }
    Some(reach <= w && mixed_radix(down, outer as u64) && mixed_radix(across, inner as u64))
}

/// Whether the sums `Σ step·c` (`c < count` per dimension) lie at least
/// `extent` apart: sorted by step, each step must clear the span the
/// smaller ones cover. A dimension of count 1 does not matter; one with a
/// zero step and count above 1 fails.
fn mixed_radix(mut dims: [(u64, u32); 3], extent: u64) -> bool {
    dims.sort_unstable_by_key(|&(s, _)| s);
    let mut span = extent;
    for (s, g) in dims {
        if g <= 1 {
            continue;
        }
        if s < span {
            return false;
        }
        match s
            .checked_mul(g as u64 - 1)
            .and_then(|x| x.checked_add(span))
        {
            Some(x) => span = x,
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests;
