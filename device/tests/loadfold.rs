//! A load fused with the fold along columns after it
//! (`dvm_device::loadfold`): full tiles run the pair in one pass and leave
//! the same bytes (the box and the folds) as the two instructions; tails
//! and aliased buffers take the two-instruction path.

mod common;

use common::*;
use dvm_device::{run_all_blocks_sequentially, GmBuf, KernelArgs, Program};
use dvm_isa::{verify_kernel, Axis, DType, DeviceLimits, Instr, Module, ParamAccess, Scalar};

const R: ParamAccess = ParamAccess::Read;
const W: ParamAccess = ParamAccess::Write;

/// `load x (rows × cols); fold m ← x; store x; store m` over `total` rows
/// (the last tile a tail when `rows` does not divide it): both the loaded
/// box and the folds reach global memory.
fn module(dt: DType, rows: u32, cols: u32, total: u32, fold: Fold) -> Vec<u8> {
    let s = dt.size();
    let tile = |buf: u8| {
        GmBox::new(dt, buf, rows, cols)
            .rows_tail(2, total)
            .step([0, 0, (rows * cols) as u64])
    };
    let m = GmBox::new(dt, 2, rows, 1)
        .ub(rows * cols * s)
        .rows_tail(2, total)
        .step([0, 0, rows as u64]);
    let op = fold.instr(dt, Axis::Cols, rows * cols * s, 0, rows, cols);
    build(vec![K::vector(
        (rows * cols + rows) * s,
        &[(dt, R), (dt, W), (dt, W)],
        [1, 1, total.div_ceil(rows)],
        vec![tile(0).load_fill(Scalar(0)), op, tile(1).store(), m.store()],
    )])
}

/// Runs kernel 0 of `bytes` over `x`, fused or not; returns both outputs
/// and whether the pair was planned.
fn run(bytes: &[u8], x: &Buf, total: usize, rows_out: usize, fused: bool) -> (Buf, Buf, bool) {
    let m = Module::parse(bytes).unwrap();
    let vk = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
    let mut prog: Program = Program::new(&vk).unwrap();
    let planned = prog.body_info(0).unwrap().load_fold().is_some();
    if !fused {
        prog.disable_load_fold();
    }
    let (mut out, mut folds) = (Buf::zeroed(total), Buf::zeroed(rows_out));
    let launch = KernelArgs::new(
        &vk,
        [
            GmBuf::from_slice(x.bytes()),
            GmBuf::from_mut_slice(out.bytes_mut()),
            GmBuf::from_mut_slice(folds.bytes_mut()),
        ],
    )
    .unwrap();
    let mut ub = ub();
    run_all_blocks_sequentially(&prog, &launch, 2, ub.as_mut_slice()).unwrap();
    drop(launch);
    (out, folds, planned)
}

/// Values of `dt` for `n` elements, with NaNs, infinities and signed zeros
/// among the floats.
fn values(rng: &mut Rng, dt: DType, n: usize) -> Buf {
    let special = [f32::NAN, -0.0, 0.0, f32::INFINITY, f32::NEG_INFINITY];
    let f = |rng: &mut Rng| match rng.next() % 64 {
        k @ 0..=4 => special[k as usize],
        _ => rng.f32(-3.0, 3.0),
    };
    match dt {
        DType::F32 => Buf::from_f32(&(0..n).map(|_| f(rng)).collect::<Vec<_>>()),
        DType::I32 => Buf::from_i32(&(0..n).map(|_| rng.next() as i32).collect::<Vec<_>>()),
        _ => Buf::from_u16(
            &(0..n)
                .map(|_| half::f16::from_f32(f(rng)).to_bits())
                .collect::<Vec<_>>(),
        ),
    }
}

/// Equal bits, or both NaN (Rust leaves a NaN's sign and payload
/// unspecified, so `inf + −inf` may come out as either NaN).
fn same_folds(dt: DType, a: &Buf, b: &Buf) -> bool {
    match dt {
        DType::F32 => a
            .f32s()
            .iter()
            .zip(b.f32s())
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())),
        DType::F16 => a.u16s().iter().zip(b.u16s()).all(|(&x, y)| {
            let (x, y) = (half::f16::from_bits(x), half::f16::from_bits(y));
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
        }),
        _ => a == b,
    }
}

#[test]
fn fused_load_folds_match_the_two_instructions() {
    let mut rng = Rng(13);
    for dt in [DType::F32, DType::I32, DType::F16] {
        // Rows of every accumulator width, tiles with and without a tail.
        for (rows, cols, total) in [
            (21, 768, 64),
            (8, 768, 64),
            (4, 100, 13),
            (3, 5, 7),
            (16, 40, 48),
        ] {
            let size = dt.size() as usize;
            let n = (total * cols) as usize;
            let x = values(&mut rng, dt, n);
            for fold in [Fold::Sum, Fold::Max, Fold::Min] {
                let bytes = module(dt, rows, cols, total, fold);
                let what = format!("{dt:?} {rows}x{cols} over {total} rows, {fold:?}");
                let want = run(&bytes, &x, n * size, total as usize * size, false);
                assert!(want.2, "{what}: pair not planned");
                let got = run(&bytes, &x, n * size, total as usize * size, true);
                assert!(got.0 == want.0, "{what}: the box differs");
                assert!(same_folds(dt, &got.1, &want.1), "{what}: the folds differ");
            }
        }
    }
}

#[test]
fn only_a_fold_of_the_loaded_box_fuses() {
    let dt = DType::F32;
    let (rows, cols) = (4u32, 64u32);
    let x = GmBox::new(dt, 0, rows, cols).step([0, 0, (rows * cols) as u64]);
    let m = GmBox::new(dt, 1, rows, 1)
        .ub(2 * rows * cols * 4)
        .step([0, 0, rows as u64]);
    let fold = |src: u32, rows: u32, cols: u32, axis: Axis| {
        Fold::Sum.instr(dt, axis, 2 * 4 * 64 * 4, src, rows, cols)
    };
    let planned = |op: Instr| {
        let bytes = build(vec![K::vector(
            2 * rows * cols * 4 + cols * 4,
            &[(dt, R), (dt, W)],
            [1, 1, 2],
            vec![x.load(), op, m.store()],
        )]);
        program(&bytes, 0)
            .body_info(0)
            .unwrap()
            .load_fold()
            .is_some()
    };
    assert!(planned(fold(0, rows, cols, Axis::Cols)));
    // Another source, another shape, the other axis: two instructions.
    assert!(!planned(fold(rows * cols * 4, rows, cols, Axis::Cols)));
    assert!(!planned(fold(0, rows / 2, cols * 2, Axis::Cols)));
    assert!(!planned(fold(0, rows, cols, Axis::Rows)));
}

#[test]
fn a_load_from_a_written_buffer_is_not_fused() {
    // The loaded buffer overlaps a writable one: the fused pass would read
    // it as a slice while the kernel may write it.
    let (rows, cols, total) = (4u32, 64u32, 8u32);
    let bytes = module(DType::F32, rows, cols, total, Fold::Sum);
    let prog = program(&bytes, 0);
    let at = prog.body_info(0).unwrap().load_fold().unwrap();
    let len = (total * cols * 4) as usize;
    let mut x = Buf::from_f32(&Rng(5).f32s(len / 4, -2.0, 2.0));
    let (mut y, mut m) = (Buf::zeroed(len), Buf::zeroed(total as usize * 4));
    let p = x.ptr();
    {
        // SAFETY: both views cover `x`'s `len` bytes, used by this thread
        // only while `aliased` lives (the `from_raw_parts` contract allows
        // buffers of one launch to alias).
        let aliased = unsafe {
            [
                GmBuf::from_raw_parts(p, len, false),
                GmBuf::from_raw_parts(p, len, true),
                GmBuf::from_mut_slice(m.bytes_mut()),
            ]
        };
        assert!(!dvm_device::loadfold::fits(prog.body(0), at, &aliased));
    }
    let apart = [
        GmBuf::from_slice(x.bytes()),
        GmBuf::from_mut_slice(y.bytes_mut()),
        GmBuf::from_mut_slice(m.bytes_mut()),
    ];
    assert!(dvm_device::loadfold::fits(prog.body(0), at, &apart));
}
