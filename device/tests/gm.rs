//! Loads, stores and atomic adds against plain Rust, with tails, broadcasts,
//! transposes and padding; multi-block runs (sequential and on threads)
//! equal the one-block run; parallel and sequence kernels.

mod common;

use common::*;
use dvm_isa::{DType, KernelKind, ParamAccess, Scalar};

const R: ParamAccess = ParamAccess::Read;
const W: ParamAccess = ParamAccess::Write;
const RW: ParamAccess = ParamAccess::ReadWrite;

fn iota_f32(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 * 0.5 - 7.0).collect()
}

#[test]
fn copy_1000_elements_in_256_element_tiles() {
    let n = 1000u32;
    let src = GmBox::new(DType::F32, 0, 1, 256)
        .cols_tail(2, n)
        .step([0, 0, 256]);
    let dst = GmBox { buf: 1, ..src };
    let bytes = build(vec![K::vector(
        1024,
        &[(DType::F32, R), (DType::F32, W)],
        [1, 1, 4],
        vec![src.load(), dst.store()],
    )]);
    let a = iota_f32(n as usize);
    let out = check_multi_block(
        &bytes,
        0,
        &[Buf::from_f32(&a), Buf::zeroed(4 * n as usize)],
        4,
    );
    assert_eq!(out[1].f32s(), a);
    // Stats: 4 tiles × (load, store).
    let mut bufs = vec![Buf::from_f32(&a), Buf::zeroed(4000)];
    let st = run_seq(&bytes, 0, &mut bufs, 3).unwrap();
    assert_eq!((st.tiles, st.instrs), (4, 8));
}

#[test]
fn grid_with_three_dimensions_visits_every_tile_once() {
    // A 3 × 5 × 7 grid of 1 × 4 tiles over a 3·5·7·4 buffer; every tile adds
    // its tile-specific slice, so missing or repeated tiles show up.
    let g = [3u32, 5, 7];
    let src = GmBox::new(DType::I32, 0, 1, 4).step([5 * 7 * 4, 7 * 4, 4]);
    let dst = GmBox { buf: 1, ..src };
    let bytes = build(vec![K::vector(
        64,
        &[(DType::I32, R), (DType::I32, RW)],
        g,
        vec![src.load(), dst.store_add()],
    )]);
    let n = (3 * 5 * 7 * 4) as usize;
    let a: Vec<i32> = (0..n as i32).collect();
    let out = check_multi_block(&bytes, 0, &[Buf::from_i32(&a), Buf::zeroed(4 * n)], 105);
    assert_eq!(out[1].i32s(), a);
}

/// A `rows × cols` matrix copied through `tr × tc` tiles with row and column
/// tails, UB pitch `pitch`.
fn tiled_copy(rows: u32, cols: u32, tr: u32, tc: u32, pitch: u32, dt: DType) -> (Vec<u8>, u32) {
    let g = [rows.div_ceil(tr), cols.div_ceil(tc), 1];
    let src = GmBox::new(dt, 0, tr, tc)
        .pitch(pitch)
        .rows_tail(0, rows)
        .cols_tail(1, cols)
        .step([(tr * cols) as u64, tc as u64, 0])
        .strides(cols as u64, 1);
    let dst = GmBox { buf: 1, ..src };
    let ub = (tr * pitch * dt.size()).next_multiple_of(64);
    let bytes = build(vec![K::vector(
        ub,
        &[(dt, R), (dt, W)],
        g,
        vec![src.load(), dst.store()],
    )]);
    (bytes, g[0] * g[1])
}

#[test]
fn copy_2d_with_row_and_column_tails() {
    let (rows, cols) = (37u32, 53u32);
    let a = iota_f32((rows * cols) as usize);
    for pitch in [16, 17, 24] {
        let (bytes, tiles) = tiled_copy(rows, cols, 8, 16, pitch, DType::F32);
        let out = check_multi_block(
            &bytes,
            0,
            &[Buf::from_f32(&a), Buf::zeroed(a.len() * 4)],
            tiles,
        );
        assert_eq!(out[1].f32s(), a, "pitch {pitch}");
    }
    // One-byte and two-byte elements take the same paths.
    let b: Vec<u8> = (0..rows * cols).map(|i| (i * 7) as u8).collect();
    for dt in [DType::I8, DType::Bool, DType::F16, DType::BF16] {
        let data: Vec<u8> = if dt.size() == 1 {
            b.iter()
                .map(|x| if dt == DType::Bool { x & 1 } else { *x })
                .collect()
        } else {
            b.iter().flat_map(|x| [*x, x.wrapping_mul(3)]).collect()
        };
        let (bytes, tiles) = tiled_copy(rows, cols, 8, 16, 16, dt);
        let out = check_multi_block(
            &bytes,
            0,
            &[Buf::from_bytes(&data), Buf::zeroed(data.len())],
            tiles,
        );
        assert_eq!(out[1].bytes(), &data[..], "{dt}");
    }
}

#[test]
fn whole_box_copy_when_rows_are_contiguous() {
    // Full-width tiles: rows contiguous in GM and UB (pitch = cols), with a
    // row tail.
    let (rows, cols) = (29u32, 64u32);
    let a = iota_f32((rows * cols) as usize);
    let src = GmBox::new(DType::F32, 0, 8, cols)
        .rows_tail(0, rows)
        .step([(8 * cols) as u64, 0, 0]);
    let dst = GmBox { buf: 1, ..src };
    let bytes = build(vec![K::vector(
        8 * 64 * 4,
        &[(DType::F32, R), (DType::F32, W)],
        [4, 1, 1],
        vec![src.load(), dst.store()],
    )]);
    let out = check_multi_block(&bytes, 0, &[Buf::from_f32(&a), Buf::zeroed(a.len() * 4)], 4);
    assert_eq!(out[1].f32s(), a);
}

/// Loads `rows × cols` tiles of a matrix with `pad=fill` and stores each
/// whole `tr × pitch` UB box into its own slot of the output.
fn padded_boxes(dt: DType, padv: Scalar, data: &[u8], rows: u32, cols: u32) -> Vec<u8> {
    let (tr, tc, pitch) = (8u32, 16u32, 20u32);
    let g = [rows.div_ceil(tr), cols.div_ceil(tc), 1];
    let src = GmBox::new(dt, 0, tr, tc)
        .pitch(pitch)
        .rows_tail(0, rows)
        .cols_tail(1, cols)
        .step([(tr * cols) as u64, tc as u64, 0])
        .strides(cols as u64, 1);
    let slot = (tr * pitch) as u64;
    let dst = GmBox::new(dt, 1, tr, pitch).step([g[1] as u64 * slot, slot, 0]);
    let ub = (tr * pitch * dt.size()).next_multiple_of(64);
    let bytes = build(vec![K::vector(
        ub,
        &[(dt, R), (dt, W)],
        g,
        vec![src.load_fill(padv), dst.store()],
    )]);
    let out_len = (g[0] * g[1]) as usize * slot as usize * dt.size() as usize;
    let out = check_multi_block(
        &bytes,
        0,
        &[Buf::from_bytes(data), Buf::zeroed(out_len)],
        g[0] * g[1],
    );
    out[1].bytes().to_vec()
}

/// The expected padded boxes: element bytes of `data` inside the matrix,
/// `pad` outside.
fn expected_boxes(size: usize, data: &[u8], pad: &[u8], rows: u32, cols: u32) -> Vec<u8> {
    let (tr, tc, pitch) = (8u32, 16u32, 20u32);
    let g = [rows.div_ceil(tr), cols.div_ceil(tc)];
    let mut out = Vec::new();
    for t0 in 0..g[0] {
        for t1 in 0..g[1] {
            for r in 0..tr {
                for k in 0..pitch {
                    let (i, j) = (t0 * tr + r, t1 * tc + k);
                    if k < tc && i < rows && j < cols {
                        let e = (i * cols + j) as usize * size;
                        out.extend_from_slice(&data[e..e + size]);
                    } else {
                        out.extend_from_slice(pad);
                    }
                }
            }
        }
    }
    out
}

#[test]
fn pad_fill_writes_the_rest_of_the_box() {
    let (rows, cols) = (19u32, 37u32);
    let n = (rows * cols) as usize;
    // f32: the scalar's bits.
    let a = iota_f32(n);
    let a_bytes = Buf::from_f32(&a).bytes().to_vec();
    let got = padded_boxes(DType::F32, Scalar::f32(-7.5), &a_bytes, rows, cols);
    assert_eq!(
        got,
        expected_boxes(4, &a_bytes, &(-7.5f32).to_le_bytes(), rows, cols)
    );
    // -inf pads for a max reduction.
    let got = padded_boxes(
        DType::F32,
        Scalar::f32(f32::NEG_INFINITY),
        &a_bytes,
        rows,
        cols,
    );
    assert_eq!(
        got,
        expected_boxes(4, &a_bytes, &f32::NEG_INFINITY.to_le_bytes(), rows, cols)
    );
    // f16 / bf16: the f32 value converted.
    let h: Vec<u8> = (0..n)
        .flat_map(|i| half::f16::from_f32(i as f32).to_le_bytes())
        .collect();
    let got = padded_boxes(DType::F16, Scalar::f32(-2.5), &h, rows, cols);
    assert_eq!(
        got,
        expected_boxes(2, &h, &half::f16::from_f32(-2.5).to_le_bytes(), rows, cols)
    );
    let got = padded_boxes(DType::BF16, Scalar::f32(3.0), &h, rows, cols);
    assert_eq!(
        got,
        expected_boxes(2, &h, &half::bf16::from_f32(3.0).to_le_bytes(), rows, cols)
    );
    // i32: the scalar's bits; i8 saturates; bool is `!= 0`.
    let i = Buf::from_i32(&(0..n as i32).collect::<Vec<_>>())
        .bytes()
        .to_vec();
    let got = padded_boxes(DType::I32, Scalar::i32(-123_456), &i, rows, cols);
    assert_eq!(
        got,
        expected_boxes(4, &i, &(-123_456i32).to_le_bytes(), rows, cols)
    );
    let b: Vec<u8> = (0..n).map(|i| i as u8).collect();
    let got = padded_boxes(DType::I8, Scalar::i32(i32::MIN), &b, rows, cols);
    assert_eq!(got, expected_boxes(1, &b, &[0x80], rows, cols));
    let got = padded_boxes(DType::I8, Scalar::i32(-5), &b, rows, cols);
    assert_eq!(got, expected_boxes(1, &b, &[(-5i8) as u8], rows, cols));
    let bits: Vec<u8> = (0..n).map(|i| (i % 3 == 0) as u8).collect();
    let got = padded_boxes(DType::Bool, Scalar::i32(7), &bits, rows, cols);
    assert_eq!(got, expected_boxes(1, &bits, &[1], rows, cols));
}

#[test]
fn pad_keep_leaves_the_rest_of_the_box() {
    // Load a full box of 99s, then a tail tile with pad=keep over it, then
    // store the whole box.
    let (tr, tc) = (4u32, 8u32);
    let (rows, cols) = (6u32, 11u32);
    let g = [2u32, 2, 1];
    let bg = GmBox::new(DType::F32, 0, tr, tc);
    let src = GmBox::new(DType::F32, 1, tr, tc)
        .rows_tail(0, rows)
        .cols_tail(1, cols)
        .step([(tr * cols) as u64, tc as u64, 0])
        .strides(cols as u64, 1);
    let slot = (tr * tc) as u64;
    let dst = GmBox::new(DType::F32, 2, tr, tc).step([2 * slot, slot, 0]);
    let bytes = build(vec![K::vector(
        256,
        &[(DType::F32, R), (DType::F32, R), (DType::F32, W)],
        g,
        vec![bg.load(), src.load(), dst.store()],
    )]);
    let a = iota_f32((rows * cols) as usize);
    let inputs = [
        Buf::from_f32(&[99.0; 32]),
        Buf::from_f32(&a),
        Buf::zeroed(4 * 4 * slot as usize),
    ];
    let out = check_multi_block(&bytes, 0, &inputs, 4)[2].f32s();
    let mut want = Vec::new();
    for t0 in 0..2 {
        for t1 in 0..2 {
            for r in 0..tr {
                for k in 0..tc {
                    let (i, j) = (t0 * tr + r, t1 * tc + k);
                    want.push(if i < rows && j < cols {
                        a[(i * cols + j) as usize]
                    } else {
                        99.0
                    });
                }
            }
        }
    }
    assert_eq!(out, want);
}

#[test]
fn broadcast_loads_with_stride_zero() {
    let (rows, cols) = (21u32, 30u32);
    let (tr, tc) = (8u32, 16u32);
    let g = [rows.div_ceil(tr), cols.div_ceil(tc), 1];
    let out_box = GmBox::new(DType::F32, 1, tr, tc)
        .rows_tail(0, rows)
        .cols_tail(1, cols)
        .step([(tr * cols) as u64, tc as u64, 0])
        .strides(cols as u64, 1);
    // A row vector repeated down the rows: row stride 0.
    let bias = GmBox::new(DType::F32, 0, tr, tc)
        .rows_tail(0, rows)
        .cols_tail(1, cols)
        .step([0, tc as u64, 0])
        .strides(0, 1);
    // A column vector repeated across the columns: column stride 0.
    let col = GmBox::new(DType::F32, 0, tr, tc)
        .rows_tail(0, rows)
        .cols_tail(1, cols)
        .step([tr as u64, 0, 0])
        .strides(1, 0);
    let params = [(DType::F32, R), (DType::F32, W)];
    let bytes = build(vec![
        K::vector(512, &params, g, vec![bias.load(), out_box.store()]),
        K::vector(512, &params, g, vec![col.load(), out_box.store()]),
    ]);
    let v = iota_f32(cols as usize);
    let out = check_multi_block(
        &bytes,
        0,
        &[Buf::from_f32(&v), Buf::zeroed((4 * rows * cols) as usize)],
        6,
    );
    let want: Vec<f32> = (0..rows * cols).map(|e| v[(e % cols) as usize]).collect();
    assert_eq!(out[1].f32s(), want);
    let v = iota_f32(rows as usize);
    let out = check_multi_block(
        &bytes,
        1,
        &[Buf::from_f32(&v), Buf::zeroed((4 * rows * cols) as usize)],
        6,
    );
    let want: Vec<f32> = (0..rows * cols).map(|e| v[(e / cols) as usize]).collect();
    assert_eq!(out[1].f32s(), want);
}

#[test]
fn scalar_broadcast_with_both_strides_zero() {
    // Both strides zero: one element fills the box.
    let b = GmBox::new(DType::I32, 0, 3, 5).strides(0, 0);
    let o = GmBox::new(DType::I32, 1, 3, 5).step([15, 0, 0]);
    let bytes = build(vec![K::vector(
        64,
        &[(DType::I32, R), (DType::I32, W)],
        [2, 1, 1],
        vec![b.load(), o.store()],
    )]);
    let out = check_multi_block(&bytes, 0, &[Buf::from_i32(&[42]), Buf::zeroed(120)], 2);
    assert_eq!(out[1].i32s(), vec![42; 30]);
}

/// `B = Aᵀ` for an `rows × cols` matrix `A` of `dt`, through 16 × 8 tiles
/// loaded with a column stride of `cols`.
fn transpose_kernel(dt: DType, rows: u32, cols: u32) -> (Vec<u8>, u32) {
    let (tr, tc) = (16u32, 8u32); // tile of B: tr rows (j), tc cols (i)
    let g = [cols.div_ceil(tr), rows.div_ceil(tc), 1];
    let load = GmBox::new(dt, 0, tr, tc)
        .rows_tail(0, cols)
        .cols_tail(1, rows)
        .step([tr as u64, (tc * cols) as u64, 0])
        .strides(1, cols as u64);
    let store = GmBox::new(dt, 1, tr, tc)
        .rows_tail(0, cols)
        .cols_tail(1, rows)
        .step([(tr * rows) as u64, tc as u64, 0])
        .strides(rows as u64, 1);
    let bytes = build(vec![K::vector(
        (tr * tc * 4).next_multiple_of(64),
        &[(dt, R), (dt, W)],
        g,
        vec![load.load(), store.store()],
    )]);
    (bytes, g[0] * g[1])
}

#[test]
fn transposed_strided_loads() {
    let (rows, cols) = (45u32, 70u32);
    let a = iota_f32((rows * cols) as usize);
    let (bytes, tiles) = transpose_kernel(DType::F32, rows, cols);
    let out = check_multi_block(
        &bytes,
        0,
        &[Buf::from_f32(&a), Buf::zeroed(a.len() * 4)],
        tiles,
    );
    let want: Vec<f32> = (0..cols)
        .flat_map(|j| (0..rows).map(move |i| (i, j)))
        .map(|(i, j)| a[(i * cols + j) as usize])
        .collect();
    assert_eq!(out[1].f32s(), want);
    // Two- and one-byte gathers.
    let h: Vec<u16> = (0..rows * cols).map(|x| x as u16).collect();
    let (bytes, tiles) = transpose_kernel(DType::F16, rows, cols);
    let out = check_multi_block(
        &bytes,
        0,
        &[Buf::from_u16(&h), Buf::zeroed(h.len() * 2)],
        tiles,
    );
    let want: Vec<u16> = (0..cols)
        .flat_map(|j| (0..rows).map(move |i| (i, j)))
        .map(|(i, j)| h[(i * cols + j) as usize])
        .collect();
    assert_eq!(out[1].u16s(), want);
    let b: Vec<u8> = (0..rows * cols).map(|x| x as u8).collect();
    let (bytes, tiles) = transpose_kernel(DType::I8, rows, cols);
    let out = check_multi_block(
        &bytes,
        0,
        &[Buf::from_bytes(&b), Buf::zeroed(b.len())],
        tiles,
    );
    let want: Vec<u8> = (0..cols)
        .flat_map(|j| (0..rows).map(move |i| (i, j)))
        .map(|(i, j)| b[(i * cols + j) as usize])
        .collect();
    assert_eq!(out[1].bytes(), &want[..]);
}

#[test]
fn strided_store_scatters() {
    // Load contiguous 8-element tiles, store them with column stride 3.
    let src = GmBox::new(DType::F32, 0, 1, 8)
        .cols_tail(0, 30)
        .step([8, 0, 0]);
    let dst = GmBox::new(DType::F32, 1, 1, 8)
        .cols_tail(0, 30)
        .step([24, 0, 0])
        .strides(0, 3);
    let bytes = build(vec![K::vector(
        64,
        &[(DType::F32, R), (DType::F32, W)],
        [4, 1, 1],
        vec![src.load(), dst.store()],
    )]);
    let a = iota_f32(30);
    let out = check_multi_block(&bytes, 0, &[Buf::from_f32(&a), Buf::zeroed(4 * 90)], 4);
    let got = out[1].f32s();
    for (i, x) in got.iter().enumerate() {
        assert_eq!(*x, if i % 3 == 0 { a[i / 3] } else { 0.0 }, "element {i}");
    }
}

#[test]
fn store_with_stride_zero_keeps_the_last_element() {
    let src = GmBox::new(DType::I32, 0, 2, 4);
    let dst = GmBox::new(DType::I32, 1, 2, 4).strides(1, 0);
    let bytes = build(vec![K::vector(
        64,
        &[(DType::I32, R), (DType::I32, W)],
        [1, 1, 1],
        vec![src.load(), dst.store()],
    )]);
    let mut bufs = vec![Buf::from_i32(&[1, 2, 3, 4, 5, 6, 7, 8]), Buf::zeroed(8)];
    run_seq(&bytes, 0, &mut bufs, 1).unwrap();
    assert_eq!(bufs[1].i32s(), vec![4, 8]);
}

/// Column sums of a `rows × cols` matrix by `store_add` of `tr`-row boxes
/// into one output row (row stride 0): a split reduction.
fn split_reduction(dt: DType, rows: u32, cols: u32, tr: u32) -> (Vec<u8>, u32) {
    let g = [rows.div_ceil(tr), 1, 1];
    let src = GmBox::new(dt, 0, tr, cols)
        .rows_tail(0, rows)
        .step([(tr * cols) as u64, 0, 0]);
    let dst = GmBox::new(dt, 1, tr, cols).rows_tail(0, rows).strides(0, 1);
    let bytes = build(vec![K::vector(
        (tr * cols * dt.size()).next_multiple_of(64),
        &[(dt, R), (dt, RW)],
        g,
        vec![src.load(), dst.store_add()],
    )]);
    (bytes, g[0])
}

#[test]
fn store_add_split_reduction_every_dtype() {
    let (rows, cols, tr) = (1001u32, 64u32, 4u32);
    let n = (rows * cols) as usize;
    // f32 with integer values: exact in any order.
    let a: Vec<f32> = (0..n).map(|i| ((i * 37) % 11) as f32 - 5.0).collect();
    let init: Vec<f32> = (0..cols).map(|c| c as f32).collect();
    let (bytes, tiles) = split_reduction(DType::F32, rows, cols, tr);
    let out = check_multi_block(&bytes, 0, &[Buf::from_f32(&a), Buf::from_f32(&init)], tiles);
    let want: Vec<f32> = (0..cols as usize)
        .map(|c| {
            init[c]
                + (0..rows as usize)
                    .map(|r| a[r * cols as usize + c])
                    .sum::<f32>()
        })
        .collect();
    assert_eq!(out[1].f32s(), want);
    // i32 wraps.
    let a: Vec<i32> = (0..n as i32).map(|i| i.wrapping_mul(0x3fff_1234)).collect();
    let (bytes, tiles) = split_reduction(DType::I32, rows, cols, tr);
    let out = check_multi_block(
        &bytes,
        0,
        &[Buf::from_i32(&a), Buf::zeroed(4 * cols as usize)],
        tiles,
    );
    let want: Vec<i32> = (0..cols as usize)
        .map(|c| (0..rows as usize).fold(0i32, |s, r| s.wrapping_add(a[r * cols as usize + c])))
        .collect();
    assert_eq!(out[1].i32s(), want);
    // i8 wraps.
    let a: Vec<u8> = (0..n).map(|i| (i * 13) as u8).collect();
    let (bytes, tiles) = split_reduction(DType::I8, rows, cols, tr);
    let out = check_multi_block(
        &bytes,
        0,
        &[Buf::from_bytes(&a), Buf::zeroed(cols as usize)],
        tiles,
    );
    let want: Vec<u8> = (0..cols as usize)
        .map(|c| (0..rows as usize).fold(0u8, |s, r| s.wrapping_add(a[r * cols as usize + c])))
        .collect();
    assert_eq!(out[1].bytes(), &want[..]);
    // f16 / bf16 with small integers (sums stay exact: |sum| ≤ 1001 < 2048, bf16 < 256 values).
    let (rows16, cols16) = (97u32, 32u32);
    let n16 = (rows16 * cols16) as usize;
    let vals: Vec<f32> = (0..n16).map(|i| ((i * 7) % 5) as f32 - 2.0).collect();
    for dt in [DType::F16, DType::BF16] {
        let enc = |v: f32| match dt {
            DType::F16 => half::f16::from_f32(v).to_bits(),
            _ => half::bf16::from_f32(v).to_bits(),
        };
        let data: Vec<u16> = vals.iter().map(|v| enc(*v)).collect();
        let (bytes, tiles) = split_reduction(dt, rows16, cols16, 4);
        let out = check_multi_block(
            &bytes,
            0,
            &[Buf::from_u16(&data), Buf::zeroed(2 * cols16 as usize)],
            tiles,
        );
        let want: Vec<u16> = (0..cols16 as usize)
            .map(|c| {
                enc((0..rows16 as usize)
                    .map(|r| vals[r * cols16 as usize + c])
                    .sum::<f32>())
            })
            .collect();
        assert_eq!(out[1].u16s(), want, "{dt}");
    }
}

#[test]
fn store_add_is_atomic_under_contention() {
    // Every tile adds 1 into the same 16 elements; 8 threads at once.
    let tiles = 4096u32;
    let src = GmBox::new(DType::I32, 0, 1, 16).strides(0, 1);
    let dst = GmBox::new(DType::I32, 1, 1, 16).strides(0, 1);
    let f = GmBox::new(DType::F32, 2, 1, 16).ub(64).strides(0, 1);
    let fd = GmBox::new(DType::F32, 3, 1, 16).ub(64).strides(0, 1);
    let bytes = build(vec![K::vector(
        128,
        &[
            (DType::I32, R),
            (DType::I32, RW),
            (DType::F32, R),
            (DType::F32, RW),
        ],
        [tiles, 1, 1],
        vec![src.load(), dst.store_add(), f.load(), fd.store_add()],
    )]);
    for dim in [2u32, 8] {
        let mut bufs = vec![
            Buf::from_i32(&[1; 16]),
            Buf::zeroed(64),
            Buf::from_f32(&[0.5; 16]),
            Buf::zeroed(64),
        ];
        run_threads(&bytes, 0, &mut bufs, dim).unwrap();
        assert_eq!(bufs[1].i32s(), vec![tiles as i32; 16]);
        assert_eq!(bufs[3].f32s(), vec![tiles as f32 * 0.5; 16]);
    }
}

#[test]
fn parallel_kernel_runs_every_body() {
    // Body 0: copy a (1000 elements, 7 tiles of 150); body 1: y = bᵀ
    // (transpose of 13 × 9 through 4 × 4 tiles, 12 tiles).
    let copy_src = GmBox::new(DType::F32, 0, 1, 150)
        .cols_tail(0, 1000)
        .step([150, 0, 0]);
    let copy_dst = GmBox { buf: 2, ..copy_src };
    let (rows, cols) = (13u32, 9u32);
    let t_load = GmBox::new(DType::F32, 1, 4, 4)
        .rows_tail(0, cols)
        .cols_tail(1, rows)
        .step([4, (4 * cols) as u64, 0])
        .strides(1, cols as u64);
    let t_store = GmBox::new(DType::F32, 3, 4, 4)
        .rows_tail(0, cols)
        .cols_tail(1, rows)
        .step([(4 * rows) as u64, 4, 0])
        .strides(rows as u64, 1);
    let bytes = build(vec![K {
        kind: KernelKind::Parallel,
        ub_bytes: 1024,
        params: vec![
            (DType::F32, R),
            (DType::F32, R),
            (DType::F32, W),
            (DType::F32, W),
        ],
        bodies: vec![
            ([7, 1, 1], vec![copy_src.load(), copy_dst.store()]),
            ([3, 4, 1], vec![t_load.load(), t_store.store()]),
        ],
    }]);
    let a = iota_f32(1000);
    let b = iota_f32((rows * cols) as usize);
    let inputs = [
        Buf::from_f32(&a),
        Buf::from_f32(&b),
        Buf::zeroed(4000),
        Buf::zeroed((4 * rows * cols) as usize),
    ];
    let out = check_multi_block(&bytes, 0, &inputs, 19);
    assert_eq!(out[2].f32s(), a);
    let bt = &b;
    let want: Vec<f32> = (0..cols)
        .flat_map(|j| (0..rows).map(move |i| bt[(i * cols + j) as usize]))
        .collect();
    assert_eq!(out[3].f32s(), want);
}

/// Stage 0: `x = a` in row tiles; stage 1: `y = xᵀ` in column tiles, so
/// every tile of stage 1 reads what several blocks wrote in stage 0;
/// stage 2: `z += y` rows, atomically, into one row.
fn sequence_kernel(rows: u32, cols: u32) -> Vec<u8> {
    let s0_load = GmBox::new(DType::F32, 0, 1, cols).step([cols as u64, 0, 0]);
    let s0_store = GmBox { buf: 1, ..s0_load };
    let t_load = GmBox::new(DType::F32, 1, 4, rows)
        .rows_tail(0, cols)
        .step([4, 0, 0])
        .strides(1, cols as u64);
    let t_store = GmBox::new(DType::F32, 2, 4, rows)
        .rows_tail(0, cols)
        .step([(4 * rows) as u64, 0, 0])
        .strides(rows as u64, 1);
    let s2_load = GmBox::new(DType::F32, 2, 1, rows).step([rows as u64, 0, 0]);
    let s2_add = GmBox::new(DType::F32, 3, 1, rows).strides(0, 1);
    build(vec![K {
        kind: KernelKind::Sequence,
        ub_bytes: 4096,
        params: vec![
            (DType::F32, R),
            (DType::F32, RW),
            (DType::F32, RW),
            (DType::F32, RW),
        ],
        bodies: vec![
            ([rows, 1, 1], vec![s0_load.load(), s0_store.store()]),
            (
                [cols.div_ceil(4), 1, 1],
                vec![t_load.load(), t_store.store()],
            ),
            ([cols, 1, 1], vec![s2_load.load(), s2_add.store_add()]),
        ],
    }])
}

#[test]
fn sequence_kernel_waits_between_stages() {
    let (rows, cols) = (24u32, 30u32);
    let bytes = sequence_kernel(rows, cols);
    let a: Vec<f32> = (0..rows * cols).map(|i| (i % 17) as f32).collect();
    let n = (rows * cols) as usize;
    let inputs = [
        Buf::from_f32(&a),
        Buf::zeroed(4 * n),
        Buf::zeroed(4 * n),
        Buf::zeroed(4 * rows as usize),
    ];
    let out = check_multi_block(&bytes, 0, &inputs, rows);
    let at = &a;
    let want_t: Vec<f32> = (0..cols)
        .flat_map(|j| (0..rows).map(move |i| at[(i * cols + j) as usize]))
        .collect();
    assert_eq!(out[1].f32s(), a);
    assert_eq!(out[2].f32s(), want_t);
    let want_sum: Vec<f32> = (0..rows)
        .map(|i| (0..cols).map(|j| a[(i * cols + j) as usize]).sum())
        .collect();
    assert_eq!(out[3].f32s(), want_sum);
    // Repeat on threads a few times: a missing barrier shows up as a race.
    for _ in 0..20 {
        let mut bufs = inputs.to_vec();
        run_threads(&bytes, 0, &mut bufs, 4).unwrap();
        assert_eq!(bufs[2].f32s(), want_t);
        assert_eq!(bufs[3].f32s(), want_sum);
    }
}

#[test]
fn block_ranges_are_balanced_and_cover_the_grid() {
    for total in [0u64, 1, 5, 1000, u32::MAX as u64 * 3] {
        for dim in [1u32, 2, 3, 7, 64, 1000] {
            let mut next = 0;
            for b in 0..dim {
                let (s, e) = dvm_device::block_range(total, b, dim);
                assert_eq!(s, next);
                let len = e - s;
                assert!(len == total / dim as u64 || len == total / dim as u64 + 1);
                next = e;
            }
            assert_eq!(next, total);
        }
    }
}

#[test]
fn streaming_stores_for_large_outputs() {
    use dvm_device::VInstr;
    // 1-D: 4 Mi + 1001 f32 (over 16 MiB) in tiles of 6000 elements, stored
    // 3 elements into the output so that runs start misaligned.
    let n = (4u32 << 20) + 1001;
    let tile = 6000u32;
    let src = GmBox::new(DType::F32, 0, 1, tile)
        .cols_tail(0, n)
        .step([tile as u64, 0, 0]);
    let dst = GmBox { buf: 1, ..src }.base(3);
    let bytes = build(vec![K::vector(
        4 * tile.next_multiple_of(16),
        &[(DType::F32, R), (DType::F32, W)],
        [n.div_ceil(tile), 1, 1],
        vec![src.load(), dst.store()],
    )]);
    let prog = program(&bytes, 0);
    assert!(
        matches!(prog.body(0)[1], VInstr::Store { stream: true, .. }),
        "a 16 MiB output streams"
    );
    assert_eq!(prog.body_info(0).unwrap().prefetch_at(), Some(1));
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut reference = vec![Buf::from_f32(&a), Buf::zeroed(4 * (n as usize + 3))];
    run_seq(&bytes, 0, &mut reference, 1).unwrap();
    let out = reference[1].f32s();
    assert_eq!(&out[..3], &[0.0; 3]);
    assert!(out[3..] == a[..], "1-D streamed copy");
    for dim in [3u32, 7] {
        let mut b = vec![Buf::from_f32(&a), Buf::zeroed(4 * (n as usize + 3))];
        run_threads(&bytes, 0, &mut b, dim).unwrap();
        assert!(b[1] == reference[1], "threads, {dim} blocks");
    }

    // 2-D: 2049 × 2050 f32 through 8 × 1500 tiles (rows of 6000 bytes
    // stream, the UB pitch is wider than a row), tails on both axes.
    let (rows, cols) = (2049u32, 2050u32);
    let (tr, tc, pitch) = (8u32, 1500u32, 1504u32);
    let g = [rows.div_ceil(tr), cols.div_ceil(tc), 1];
    let src = GmBox::new(DType::F32, 0, tr, tc)
        .pitch(pitch)
        .rows_tail(0, rows)
        .cols_tail(1, cols)
        .step([(tr * cols) as u64, tc as u64, 0])
        .strides(cols as u64, 1);
    let dst = GmBox { buf: 1, ..src };
    let bytes = build(vec![K::vector(
        4 * tr * pitch,
        &[(DType::F32, R), (DType::F32, W)],
        g,
        vec![src.load(), dst.store()],
    )]);
    let a: Vec<f32> = (0..rows * cols).map(|i| (i % 1_000_003) as f32).collect();
    let mut bufs = vec![Buf::from_f32(&a), Buf::zeroed(a.len() * 4)];
    run_threads(&bytes, 0, &mut bufs, 2).unwrap();
    assert!(bufs[1].f32s() == a, "2-D streamed copy");
}

/// `gather` of a `v × d` table by `n` i32 indices in `tn × td` tiles
/// (row and column tails), over `outer` tables one after the other: the
/// module, its tile count and the expected output.
fn gather_module(
    outer: u32,
    v: u32,
    d: u32,
    n: u32,
    (tn, td): (u32, u32),
    table: &[f32],
    idx: &[i32],
) -> (Vec<u8>, u32, Vec<f32>) {
    let g = [outer, n.div_ceil(tn), d.div_ceil(td)];
    let load_idx = GmBox::new(DType::I32, 1, tn, 1)
        .ub(tn * td * 4)
        .rows_tail(1, n)
        .step([0, tn as u64, 0])
        .strides(1, 1)
        .load_fill(Scalar::i32(0));
    let gather = dvm_isa::Instr::Gather {
        dt: DType::F32,
        buf: 0,
        col_dim: dvm_isa::GridDim::Dim(2),
        ub: 0,
        idx: tn * td * 4,
        pitch: td,
        rows: tn,
        cols: td,
        extent: v,
        col_total: d,
        base: 0,
        step0: (v * d) as u64,
        step1: 0,
        step2: td as u64,
        row_stride: d as u64,
        col_stride: 1,
    };
    let store = GmBox::new(DType::F32, 2, tn, td)
        .rows_tail(1, n)
        .cols_tail(2, d)
        .step([(n * d) as u64, (tn * d) as u64, td as u64])
        .strides(d as u64, 1)
        .store();
    let ub = (tn * td * 4 + tn * 4).next_multiple_of(64);
    let bytes = build(vec![K::vector(
        ub,
        &[(DType::F32, R), (DType::I32, R), (DType::F32, W)],
        g,
        vec![load_idx, gather, store],
    )]);
    let mut want = Vec::new();
    for o in 0..outer as usize * (v > 0) as usize {
        for &i in idx {
            let i = if i < 0 { i as i64 + v as i64 } else { i as i64 };
            let i = i.clamp(0, v as i64 - 1) as usize;
            let row = (o * v as usize + i) * d as usize;
            want.extend_from_slice(&table[row..row + d as usize]);
        }
    }
    (bytes, g[0] * g[1] * g[2], want)
}

#[test]
fn gather_picks_rows_by_index_and_clamps_the_rest() {
    let (outer, v, d) = (2u32, 10u32, 7u32);
    let table = iota_f32((outer * v * d) as usize);
    // In range, negative (from the end), and beyond both ends (clamped).
    let idx = [3, 0, 9, -1, -10, 5, 5, 12, -11, i32::MIN, i32::MAX, 2, 7];
    let n = idx.len() as u32;
    for tile in [(4, 4), (1, 7), (13, 3), (8, 8)] {
        let (bytes, tiles, want) = gather_module(outer, v, d, n, tile, &table, &idx);
        let out = check_multi_block(
            &bytes,
            0,
            &[
                Buf::from_f32(&table),
                Buf::from_i32(&idx),
                Buf::zeroed(want.len() * 4),
            ],
            tiles,
        );
        assert_eq!(out[2].f32s(), want, "tile {tile:?}");
    }
}

#[test]
fn gather_needs_the_whole_table_and_refuses_an_empty_one() {
    let (v, d) = (5u32, 3u32);
    let table = iota_f32((v * d) as usize);
    let (bytes, _, _) = gather_module(1, v, d, 2, (2, 3), &table, &[0, 1]);
    let m = dvm_isa::Module::parse(&bytes).unwrap();
    let vk = dvm_isa::verify_kernel(&m, 0, &dvm_isa::DeviceLimits::DEFAULT).unwrap();
    // Every row an index can pick, whatever the indices are.
    assert_eq!(vk.required_bytes(0), (v * d * 4) as u64);
    let (bytes, _, _) = gather_module(1, 0, d, 2, (2, 3), &[], &[0, 1]);
    let m = dvm_isa::Module::parse(&bytes).unwrap();
    let e = dvm_isa::verify_kernel(&m, 0, &dvm_isa::DeviceLimits::DEFAULT).unwrap_err();
    assert!(e.to_string().contains("extent"), "{e}");
}

#[test]
fn gather_handler_refuses_a_table_or_box_outside_its_memory() {
    use dvm_device::gm::gather_tile;
    use dvm_device::{GmBuf, GmFault};
    let (bytes, _, _) = gather_module(1, 4, 2, 2, (2, 2), &iota_f32(8), &[0, 3]);
    let m = dvm_isa::Module::parse(&bytes).unwrap();
    let vk = dvm_isa::verify_kernel(&m, 0, &dvm_isa::DeviceLimits::DEFAULT).unwrap();
    let (_, _, gather) = vk.instrs(0).nth(1).unwrap();
    let dvm_isa::Instr::Gather { idx, rows, .. } = gather else {
        panic!("{gather:?}")
    };
    let table = gather.gm().unwrap().pattern;
    let mut ub = vec![0u8; 64];
    // A table one element short: refused before anything is written,
    // whatever the indices.
    let short = vec![0u8; 7 * 4];
    let e = gather_tile(
        &table,
        idx,
        rows,
        [0; 3],
        &GmBuf::from_slice(&short),
        &mut ub,
    );
    assert_eq!(e, Err(GmFault::Gm));
    assert!(ub.iter().all(|&b| b == 0));
    let full = vec![0u8; 8 * 4];
    let e = gather_tile(
        &table,
        idx,
        rows,
        [0; 3],
        &GmBuf::from_slice(&full),
        &mut ub[..20],
    );
    assert_eq!(e, Err(GmFault::Ub));
    assert_eq!(
        gather_tile(
            &table,
            idx,
            rows,
            [0; 3],
            &GmBuf::from_slice(&full),
            &mut ub
        ),
        Ok(())
    );
}
