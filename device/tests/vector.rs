//! Kernels that combine loads and stores with vector handlers (add, exp,
//! softmax, reductions with split `store_add`) against plain Rust, run with
//! one block, several blocks and on threads.

mod common;

use common::*;
use dvm_isa::{Axis, DType, Instr, ParamAccess, Scalar};

const R: ParamAccess = ParamAccess::Read;
const W: ParamAccess = ParamAccess::Write;
const RW: ParamAccess = ParamAccess::ReadWrite;
const F: DType = DType::F32;

fn close(got: &[f32], want: &[f32], rel: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = rel * w.abs().max(1e-30);
        assert!((g - w).abs() <= tol, "{what}[{i}]: got {g}, want {w}");
    }
}

#[test]
fn add_1000_elements_in_256_element_tiles() {
    let n = 1000u32;
    let a_box = GmBox::new(F, 0, 1, 256).cols_tail(2, n).step([0, 0, 256]);
    let b_box = GmBox {
        buf: 1,
        ub: 1024,
        ..a_box
    };
    let o_box = GmBox {
        buf: 2,
        ub: 2048,
        ..a_box
    };
    let bytes = build(vec![K::vector(
        3072,
        &[(F, R), (F, R), (F, W)],
        [1, 1, 4],
        vec![
            a_box.load(),
            b_box.load(),
            Instr::Add {
                dt: F,
                dst: 2048,
                a: 0,
                b: 1024,
                n: 256,
            },
            o_box.store(),
        ],
    )]);
    let mut rng = Rng(1);
    let a = rng.f32s(n as usize, -10.0, 10.0);
    let b = rng.f32s(n as usize, -10.0, 10.0);
    let out = check_multi_block(
        &bytes,
        0,
        &[
            Buf::from_f32(&a),
            Buf::from_f32(&b),
            Buf::zeroed(4 * n as usize),
        ],
        4,
    );
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    assert_eq!(out[2].f32s(), want);
}

#[test]
fn exp_and_scalar_ops_in_place() {
    // out = exp(x · 0.5 + 1), in place in UB, 777 elements in tiles of 128.
    let n = 777u32;
    let x = GmBox::new(F, 0, 1, 128).cols_tail(0, n).step([128, 0, 0]);
    let o = GmBox { buf: 1, ..x };
    let bytes = build(vec![K::vector(
        512,
        &[(F, R), (F, W)],
        [7, 1, 1],
        vec![
            x.load(),
            Instr::MulS {
                dt: F,
                dst: 0,
                a: 0,
                n: 128,
                imm: Scalar::f32(0.5),
            },
            Instr::AddS {
                dt: F,
                dst: 0,
                a: 0,
                n: 128,
                imm: Scalar::f32(1.0),
            },
            Instr::Exp {
                dt: F,
                dst: 0,
                src: 0,
                n: 128,
            },
            o.store(),
        ],
    )]);
    let xs = Rng(2).f32s(n as usize, -20.0, 20.0);
    let out = check_multi_block(
        &bytes,
        0,
        &[Buf::from_f32(&xs), Buf::zeroed(4 * n as usize)],
        7,
    );
    let want: Vec<f32> = xs
        .iter()
        .map(|v| ((*v as f64) * 0.5 + 1.0).exp() as f32)
        .collect();
    close(&out[1].f32s(), &want, 4e-6, "exp");
}

#[test]
fn softmax_over_rows_with_row_tails() {
    // Softmax of each row of a 37 × 100 matrix, 4 rows per tile.
    let (rows, cols, tr) = (37u32, 100u32, 4u32);
    let tile = tr * cols; // elements
    let x = GmBox::new(F, 0, tr, cols)
        .rows_tail(0, rows)
        .step([(tr * cols) as u64, 0, 0]);
    let o = GmBox { buf: 1, ..x };
    let (xu, mu, bu) = (0u32, 4 * tile, 4 * tile + 64);
    let bytes = build(vec![K::vector(
        4 * tile * 2 + 64,
        &[(F, R), (F, W)],
        [rows.div_ceil(tr), 1, 1],
        vec![
            x.load_fill(Scalar::f32(0.0)),
            Instr::ReduceMax {
                dt: F,
                axis: Axis::Cols,
                dst: mu,
                src: xu,
                rows: tr,
                cols,
            },
            Instr::BroadcastCol {
                dt: F,
                dst: bu,
                src: mu,
                rows: tr,
                cols,
            },
            Instr::Sub {
                dt: F,
                dst: xu,
                a: xu,
                b: bu,
                n: tile,
            },
            Instr::Exp {
                dt: F,
                dst: xu,
                src: xu,
                n: tile,
            },
            Instr::ReduceSum {
                dt: F,
                axis: Axis::Cols,
                dst: mu,
                src: xu,
                rows: tr,
                cols,
            },
            Instr::BroadcastCol {
                dt: F,
                dst: bu,
                src: mu,
                rows: tr,
                cols,
            },
            Instr::Div {
                dt: F,
                dst: xu,
                a: xu,
                b: bu,
                n: tile,
            },
            o.store(),
        ],
    )]);
    let xs = Rng(3).f32s((rows * cols) as usize, -8.0, 8.0);
    let out = check_multi_block(
        &bytes,
        0,
        &[Buf::from_f32(&xs), Buf::zeroed(4 * xs.len())],
        10,
    );
    let mut want = Vec::new();
    for r in xs.chunks(cols as usize) {
        let m = r.iter().fold(f64::NEG_INFINITY, |a, b| a.max(*b as f64));
        let s: f64 = r.iter().map(|v| (*v as f64 - m).exp()).sum();
        want.extend(r.iter().map(|v| ((*v as f64 - m).exp() / s) as f32));
    }
    close(&out[1].f32s(), &want, 2e-5, "softmax");
}

#[test]
fn column_sums_by_reduce_and_store_add() {
    // Column sums of a 1001 × 96 matrix: each tile reduces 8 rows in UB and
    // adds the partial row into the output atomically.
    let (rows, cols, tr) = (1001u32, 96u32, 8u32);
    let x = GmBox::new(F, 0, tr, cols)
        .rows_tail(0, rows)
        .step([(tr * cols) as u64, 0, 0]);
    let part = GmBox::new(F, 1, 1, cols).ub(4 * tr * cols);
    let bytes = build(vec![K::vector(
        4 * (tr + 1) * cols,
        &[(F, R), (F, RW)],
        [rows.div_ceil(tr), 1, 1],
        vec![
            x.load_fill(Scalar::f32(0.0)),
            Instr::ReduceSum {
                dt: F,
                axis: Axis::Rows,
                dst: 4 * tr * cols,
                src: 0,
                rows: tr,
                cols,
            },
            part.store_add(),
        ],
    )]);
    // Integer values: exact in any order of addition.
    let xs: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 31) % 9) as f32 - 4.0)
        .collect();
    let out = check_multi_block(
        &bytes,
        0,
        &[Buf::from_f32(&xs), Buf::zeroed(4 * cols as usize)],
        126,
    );
    let want: Vec<f32> = (0..cols as usize)
        .map(|c| (0..rows as usize).map(|r| xs[r * cols as usize + c]).sum())
        .collect();
    assert_eq!(out[1].f32s(), want);
}

#[test]
fn bias_add_with_a_broadcast_load() {
    // y = x + bias (bias broadcast down the rows by a stride-0 load).
    let (rows, cols) = (50u32, 40u32);
    let (tr, tc) = (8u32, 16u32);
    let g = [rows.div_ceil(tr), cols.div_ceil(tc), 1];
    let x = GmBox::new(F, 0, tr, tc)
        .rows_tail(0, rows)
        .cols_tail(1, cols)
        .step([(tr * cols) as u64, tc as u64, 0])
        .strides(cols as u64, 1);
    let bias = GmBox::new(F, 1, tr, tc)
        .ub(4 * tr * tc)
        .rows_tail(0, rows)
        .cols_tail(1, cols)
        .step([0, tc as u64, 0])
        .strides(0, 1);
    let y = GmBox { buf: 2, ..x };
    let n = tr * tc;
    let bytes = build(vec![K::vector(
        8 * n,
        &[(F, R), (F, R), (F, W)],
        g,
        vec![
            x.load(),
            bias.load(),
            Instr::Add {
                dt: F,
                dst: 0,
                a: 0,
                b: 4 * n,
                n,
            },
            y.store(),
        ],
    )]);
    let mut rng = Rng(4);
    let xs = rng.f32s((rows * cols) as usize, -1.0, 1.0);
    let bs = rng.f32s(cols as usize, -1.0, 1.0);
    let out = check_multi_block(
        &bytes,
        0,
        &[
            Buf::from_f32(&xs),
            Buf::from_f32(&bs),
            Buf::zeroed(4 * xs.len()),
        ],
        g[0] * g[1],
    );
    let want: Vec<f32> = xs
        .iter()
        .enumerate()
        .map(|(i, v)| v + bs[i % cols as usize])
        .collect();
    assert_eq!(out[2].f32s(), want);
}
