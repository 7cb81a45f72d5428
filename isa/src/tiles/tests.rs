//! `boxes_disjoint` against brute force: every element of every tile's box
//! enumerated. The proof may refuse disjoint layouts, never accept
//! overlapping ones.

extern crate std;

use std::collections::HashMap;

use proptest::prelude::*;

use super::boxes_disjoint;
use crate::access::GmPattern;
use crate::operand::GridDim;
use crate::verify::furthest_element;
use crate::DType;

/// A pattern over `grid` with full tiles of `rows × cols` (tails from the
/// totals when a dimension drives them).
#[allow(clippy::too_many_arguments)]
fn pat(
    rows: u32,
    cols: u32,
    row_stride: u64,
    col_stride: u64,
    step: [u64; 3],
    row_dim: GridDim,
    row_total: u32,
    col_dim: GridDim,
    col_total: u32,
) -> GmPattern {
    GmPattern {
        buf: 0,
        dtype: DType::F32,
        row_dim,
        col_dim,
        ub: 0,
        pitch: cols,
        rows,
        cols,
        row_total,
        col_total,
        base: 3,
        step,
        row_stride,
        col_stride,
    }
}

/// Whether two tiles' boxes share an element (by enumeration).
fn overlaps_brute(p: &GmPattern, grid: [u32; 3]) -> bool {
    let mut owner: HashMap<u64, u32> = HashMap::new();
    let mut t = 0u32;
    for c0 in 0..grid[0] {
        for c1 in 0..grid[1] {
            for c2 in 0..grid[2] {
                let c = [c0, c1, c2];
                let (r, k) = p.extent(c);
                let o = p.origin(c);
                for i in 0..r as u64 {
                    for j in 0..k as u64 {
                        let e = o + i * p.row_stride + j * p.col_stride;
                        if owner.insert(e, t).is_some_and(|was| was != t) {
                            return true;
                        }
                    }
                }
                t += 1;
            }
        }
    }
    false
}

#[test]
fn row_tiles_of_a_matrix_are_apart() {
    // 100 × 64, tiles of 16 full rows along dimension 2 (a 4-row tail).
    let p = pat(
        16,
        64,
        64,
        1,
        [0, 0, 16 * 64],
        GridDim::Dim(2),
        100,
        GridDim::None,
        64,
    );
    assert!(boxes_disjoint(&p, [1, 1, 7]));
    // One row too few between tiles: the boxes share a row.
    let q = GmPattern {
        step: [0, 0, 15 * 64],
        ..p
    };
    assert!(!boxes_disjoint(&q, [1, 1, 7]));
    assert!(overlaps_brute(&q, [1, 1, 7]));
}

#[test]
fn matmul_tiles_with_tails_along_both_axes_are_apart() {
    // A 100 × 100 output in 32 × 64 tiles: rows along dim 1, columns along
    // dim 2; the last column tile is 36 wide and ends at the row's end.
    let p = pat(
        32,
        64,
        100,
        1,
        [0, 32 * 100, 64],
        GridDim::Dim(1),
        100,
        GridDim::Dim(2),
        100,
    );
    let grid = [1, 4, 2];
    assert!(boxes_disjoint(&p, grid));
    assert!(!overlaps_brute(&p, grid));
    // With rows of 90 elements the columns would run into the next row.
    let q = GmPattern {
        row_stride: 90,
        step: [0, 32 * 90, 64],
        ..p
    };
    assert!(!boxes_disjoint(&q, grid));
    assert!(overlaps_brute(&q, grid));
}

#[test]
fn a_batch_dimension_moves_whole_matrices() {
    // 8 matrices of 64 × 48, tiles of 16 rows, batch along dim 0.
    let p = pat(
        16,
        48,
        48,
        1,
        [64 * 48, 0, 16 * 48],
        GridDim::None,
        16,
        GridDim::None,
        48,
    );
    assert!(boxes_disjoint(&p, [8, 1, 4]));
    // A batch step of one matrix minus a row: the last tile of a matrix
    // meets the first of the next.
    let q = GmPattern {
        step: [63 * 48, 0, 16 * 48],
        ..p
    };
    assert!(!boxes_disjoint(&q, [8, 1, 4]));
    assert!(overlaps_brute(&q, [8, 1, 4]));
}

#[test]
fn a_column_of_partial_sums_with_a_short_last_tile_is_apart() {
    // What a two-stage row sum stores: per row of the input (dim 1, 12
    // apart), 12 partial sums in tiles of 5 along dim 2, the last of 2.
    let p = pat(
        5,
        1,
        1,
        0,
        [0, 12, 5],
        GridDim::Dim(2),
        12,
        GridDim::None,
        1,
    );
    assert!(boxes_disjoint(&p, [1, 2, 3]));
    // Without the tail the third tile would reach into the next row's.
    let q = GmPattern { row_total: 15, ..p };
    assert!(!boxes_disjoint(&q, [1, 2, 3]));
    assert!(overlaps_brute(&q, [1, 2, 3]));
}

#[test]
fn every_tile_at_the_same_place_overlaps() {
    // A grid dimension that does not move the box: each tile writes the
    // same elements.
    let p = pat(4, 8, 8, 1, [0, 0, 0], GridDim::None, 4, GridDim::None, 8);
    assert!(!boxes_disjoint(&p, [1, 1, 2]));
    assert!(boxes_disjoint(&p, [1, 1, 1]));
}

#[test]
fn transposed_boxes_use_the_row_axis_as_inner() {
    // Rows contiguous (row stride 1), columns 64 apart: a transposed store
    // of 16 × 8 tiles into a 64 × 64 matrix.
    let p = pat(
        16,
        8,
        1,
        64,
        [0, 8 * 64, 16],
        GridDim::None,
        16,
        GridDim::None,
        8,
    );
    assert!(boxes_disjoint(&p, [1, 8, 4]));
    assert!(!overlaps_brute(&p, [1, 8, 4]));
}

/// Small random layouts: strides and steps near the box's extent, so that
/// both outcomes occur.
fn layout() -> impl Strategy<Value = (GmPattern, [u32; 3])> {
    (
        (1u32..5, 1u32..5, 0u64..9, 0u64..4),
        // Steps as whole rows plus columns, as tiled code moves its boxes.
        [(0u64..4, 0u64..7), (0u64..4, 0u64..7), (0u64..4, 0u64..7)],
        [1u32..4, 1u32..4, 1u32..4],
        (0u8..4, 0u8..4, 0u32..3, 0u32..3),
    )
        .prop_map(
            |((rows, cols, rs, cs), steps, grid, (rd, cd, rcut, ccut))| {
                let step = steps.map(|(a, b)| a * rs.max(1) * rows as u64 + b);
                let dim = |d: u8| {
                    if d < 3 {
                        GridDim::Dim(d)
                    } else {
                        GridDim::None
                    }
                };
                let (row_dim, col_dim) = (dim(rd), if cd == rd { GridDim::None } else { dim(cd) });
                // Totals that leave the last tile along the driving dimension
                // shorter by up to `cut` (at least one element).
                let total = |d: GridDim, full: u32, cut: u32| match d.index() {
                    Some(d) => grid[d] * full - cut.min(full - 1),
                    None => full,
                };
                let p = pat(
                    rows,
                    cols,
                    rs,
                    cs,
                    step,
                    row_dim,
                    total(row_dim, rows, rcut),
                    col_dim,
                    total(col_dim, cols, ccut),
                );
                (p, grid)
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// Any pattern and grid, also ones the verifier rejects (zero or huge
    /// extents, totals that do not match): an answer, never a panic.
    #[test]
    fn any_pattern_gets_an_answer(
        (rows, cols, row_total, col_total) in (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()),
        (rs, cs, base) in (any::<u64>(), any::<u64>(), any::<u64>()),
        step in any::<[u64; 3]>(),
        grid in any::<[u32; 3]>(),
        (rd, cd) in (0u8..5, 0u8..5),
    ) {
        let dim = |d: u8| if d < 4 { GridDim::Dim(d) } else { GridDim::None };
        let p = GmPattern { base, ..pat(rows, cols, rs, cs, step, dim(rd), row_total, dim(cd), col_total) };
        let _ = boxes_disjoint(&p, grid);
        let small = grid.map(|g| g % 5);
        let _ = boxes_disjoint(&p, small);
    }

    /// Never accepts a layout where two tiles share an element.
    #[test]
    fn accepted_layouts_never_overlap((p, grid) in layout()) {
        prop_assume!(furthest_element(&p, grid).is_ok());
        if boxes_disjoint(&p, grid) {
            prop_assert!(!overlaps_brute(&p, grid), "{p:?} over {grid:?}");
        }
    }
}

/// Every layout of boxes up to 3 × 3 with strides up to 5 and steps up to
/// 8 along two grid dimensions of 1 to 3 tiles, with and without tails
/// (rows along the first, columns along the second): accepted ones never
/// overlap, and the proof accepts at least half of those that are apart.
#[test]
fn exhaustive_small_layouts() {
    let (mut apart, mut accepted) = (0u32, 0u32);
    for rows in 1..=3u32 {
        for cols in 1..=3u32 {
            for rs in 0..=5u64 {
                for cs in 0..=2u64 {
                    for s1 in 0..=8u64 {
                        for s2 in 0..=8u64 {
                            for (g1, g2) in [(2u32, 2u32), (3, 2), (1, 3)] {
                                for (rcut, ccut) in
                                    (0..rows).flat_map(|r| (0..cols).map(move |c| (r, c)))
                                {
                                    let p = pat(
                                        rows,
                                        cols,
                                        rs,
                                        cs,
                                        [0, s1, s2],
                                        GridDim::Dim(1),
                                        g1 * rows - rcut,
                                        GridDim::Dim(2),
                                        g2 * cols - ccut,
                                    );
                                    let grid = [1, g1, g2];
                                    let overlap = overlaps_brute(&p, grid);
                                    let ok = boxes_disjoint(&p, grid);
                                    assert!(!(ok && overlap), "{p:?} over {grid:?}");
                                    apart += u32::from(!overlap);
                                    accepted += u32::from(ok);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(accepted * 2 >= apart, "{accepted} of {apart} accepted");
}
