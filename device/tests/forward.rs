//! Load-forwarded bodies (`dvm_device::forward`): a lone element-wise op
//! between its loads and its store runs straight over global memory on full
//! tiles and gives the same bytes as running through UB; bodies of any
//! other form, tails and aliased buffers take the UB path.

mod common;

use common::*;
use dvm_device::{run_all_blocks_sequentially, GmBuf, KernelArgs, Program};
use dvm_isa::{verify_kernel, DType, DeviceLimits, Instr, Module, ParamAccess, Scalar};

const R: ParamAccess = ParamAccess::Read;
const W: ParamAccess = ParamAccess::Write;

/// `load a; [load b;] op; store` over `total` elements in tiles of `tile`
/// (the last one a tail when `tile` does not divide `total`).
fn module(dt: DType, tile: u32, total: u32, op: Instr, binary: bool) -> Vec<u8> {
    let size = dt.size();
    let bx = |buf: u8, ub: u32| {
        GmBox::new(dt, buf, 1, tile)
            .ub(ub)
            .cols_tail(2, total)
            .step([0, 0, tile as u64])
    };
    let (a, b) = (bx(0, 0), bx(1, tile * size));
    let out = bx(if binary { 2 } else { 1 }, 2 * tile * size);
    let mut code = vec![a.load_fill(Scalar(0))];
    let mut params = vec![(dt, R)];
    if binary {
        code.push(b.load_fill(Scalar(0)));
        params.push((dt, R));
    }
    code.push(op);
    code.push(out.store());
    params.push((dt, W));
    build(vec![K::vector(
        3 * tile * size,
        &params,
        [1, 1, total.div_ceil(tile)],
        code,
    )])
}

/// Runs kernel 0 of `bytes` over `ins` into a zeroed output of `out_len`
/// bytes, forwarded or not; also reports whether the body was forwarded.
fn run(bytes: &[u8], ins: &[Buf], out_len: usize, forward: bool) -> (Buf, bool) {
    let m = Module::parse(bytes).unwrap();
    let vk = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
    let mut prog: Program = Program::new(&vk).unwrap();
    let planned = prog.body_info(0).unwrap().forward().is_some();
    if !forward {
        prog.disable_forwarding();
    }
    let mut out = Buf::zeroed(out_len);
    let mut gm: Vec<GmBuf<'_>> = ins.iter().map(|b| GmBuf::from_slice(b.bytes())).collect();
    gm.push(GmBuf::from_mut_slice(out.bytes_mut()));
    let launch = KernelArgs::new(&vk, gm).unwrap();
    let mut ub = ub();
    run_all_blocks_sequentially(&prog, &launch, 3, ub.as_mut_slice()).unwrap();
    drop(launch);
    (out, planned)
}

#[test]
fn forwarded_ops_match_the_ub_path() {
    let mut rng = Rng(7);
    let f32s = |rng: &mut Rng| Buf::from_f32(&rng.f32s(4099, -4.0, 4.0));
    let (x, y) = (f32s(&mut rng), f32s(&mut rng));
    let ints = |rng: &mut Rng| {
        Buf::from_i32(
            &(0..4099)
                .map(|_| rng.next() as i32 % 1000)
                .collect::<Vec<_>>(),
        )
    };
    let (i, j) = (ints(&mut rng), ints(&mut rng));
    let halves = Buf::from_u16(
        &(0..4099)
            .map(|k| half::f16::from_f32((k as f32 - 2000.0) / 300.0).to_bits())
            .collect::<Vec<_>>(),
    );
    const F: DType = DType::F32;
    // An op from `(dt, dst, a, b, n)` (one-source ops read `a`).
    type Op = fn(DType, u32, u32, u32, u32) -> Instr;
    let cases: [(&str, DType, Op, Vec<Buf>); 10] = [
        (
            "add f32",
            F,
            |dt, dst, a, b, n| Instr::Add { dt, dst, a, b, n },
            vec![x.clone(), y.clone()],
        ),
        (
            "div f32",
            F,
            |dt, dst, a, b, n| Instr::Div { dt, dst, a, b, n },
            vec![x.clone(), y.clone()],
        ),
        (
            "max i32",
            DType::I32,
            |dt, dst, a, b, n| Instr::Max { dt, dst, a, b, n },
            vec![i.clone(), j.clone()],
        ),
        (
            "sub f16",
            DType::F16,
            |dt, dst, a, b, n| Instr::Sub { dt, dst, a, b, n },
            vec![halves.clone(), halves.clone()],
        ),
        (
            "exp f32",
            F,
            |dt, dst, a, _, n| Instr::Exp { dt, dst, src: a, n },
            vec![x.clone()],
        ),
        (
            "tanh f16",
            DType::F16,
            |dt, dst, a, _, n| Instr::Tanh { dt, dst, src: a, n },
            vec![halves.clone()],
        ),
        (
            "relu i32",
            DType::I32,
            |dt, dst, a, _, n| Instr::Relu { dt, dst, src: a, n },
            vec![i.clone()],
        ),
        (
            "muls f32",
            F,
            |dt, dst, a, _, n| Instr::MulS {
                dt,
                dst,
                a,
                n,
                imm: Scalar::f32(0.5),
            },
            vec![x.clone()],
        ),
        (
            "rsubs i32",
            DType::I32,
            |dt, dst, a, _, n| Instr::RSubS {
                dt,
                dst,
                a,
                n,
                imm: Scalar::i32(7),
            },
            vec![i.clone()],
        ),
        (
            "pows 2 f32",
            F,
            |dt, dst, a, _, n| Instr::PowS {
                dt,
                dst,
                a,
                n,
                imm: Scalar::f32(2.0),
            },
            vec![x.clone()],
        ),
    ];
    for (what, dt, make, ins) in cases {
        let s = dt.size();
        let op = |tile: u32| make(dt, 2 * tile * s, 0, tile * s, tile);
        check(dt, &op, ins.len() == 2, &ins, what);
    }
}

/// Forwarded and staged runs of `op(tile)` agree byte for byte, with and
/// without a tail tile.
fn check(dt: DType, op: &dyn Fn(u32) -> Instr, binary: bool, ins: &[Buf], what: &str) {
    let size = dt.size() as usize;
    for (tile, total) in [(256, 1024), (256, 1000), (64, 37), (1024, 4099)] {
        let bytes = module(dt, tile, total, op(tile), binary);
        let ins: Vec<Buf> = ins
            .iter()
            .map(|b| Buf::from_bytes(&b.bytes()[..total as usize * size]))
            .collect();
        let (fwd, planned) = run(&bytes, &ins, total as usize * size, true);
        let (staged, _) = run(&bytes, &ins, total as usize * size, false);
        assert!(planned, "{what}: body not forwarded");
        assert_eq!(fwd, staged, "{what}: tile {tile}, total {total}");
    }
}

/// A one-source op reading `a`, writing `dst`, over `n` elements.
fn exp(dst: u32, a: u32, n: u32) -> Instr {
    Instr::Exp {
        dt: DType::F32,
        dst,
        src: a,
        n,
    }
}

#[test]
fn other_bodies_are_not_forwarded() {
    let bx = |buf: u8, ub: u32| GmBox::new(DType::F32, buf, 1, 256).ub(ub).step([0, 0, 256]);
    let params = [(DType::F32, R), (DType::F32, W)];
    let planned = |code: Vec<Instr>| {
        let bytes = build(vec![K::vector(4096, &params, [1, 1, 4], code)]);
        program(&bytes, 0).body_info(0).unwrap().forward().is_some()
    };
    let (load, store) = (bx(0, 0).load(), bx(1, 1024).store());
    assert!(planned(vec![load, exp(1024, 0, 256), store]));
    // Two ops.
    assert!(!planned(vec![
        load,
        exp(1024, 0, 256),
        exp(1024, 1024, 256),
        store
    ]));
    // The op does not read what was loaded, or writes elsewhere than stored.
    assert!(!planned(vec![load, exp(1024, 2048, 256), store]));
    assert!(!planned(vec![load, exp(2048, 0, 256), store]));
    // The op covers part of the box.
    assert!(!planned(vec![load, exp(1024, 0, 128), store]));
    // A load the op does not read.
    assert!(!planned(vec![
        load,
        bx(0, 3072).load(),
        exp(1024, 0, 256),
        store
    ]));
    // No GM handler (a fold along rows).
    assert!(!planned(vec![
        load,
        Instr::ReduceSum {
            dt: DType::F32,
            axis: dvm_isa::Axis::Rows,
            dst: 1024,
            src: 0,
            rows: 1,
            cols: 256,
        },
        store,
    ]));
}

#[test]
fn unpadded_loads_with_tails_are_not_forwarded() {
    // On a tail tile a `pad=keep` load leaves the padding lanes as the
    // previous tile left them, which a forwarded tile never wrote.
    let params = [(DType::F32, R), (DType::F32, W)];
    let planned = |load: Instr, store: Instr, tiles: u32| {
        let bytes = build(vec![K::vector(
            4096,
            &params,
            [1, 1, tiles],
            vec![load, exp(1024, 0, 256), store],
        )]);
        program(&bytes, 0).body_info(0).unwrap().forward().is_some()
    };
    let tail = |buf: u8, ub: u32, total: u32| {
        GmBox::new(DType::F32, buf, 1, 256)
            .ub(ub)
            .cols_tail(2, total)
            .step([0, 0, 256])
    };
    assert!(!planned(
        tail(0, 0, 1000).load(),
        tail(1, 1024, 1000).store(),
        4
    ));
    assert!(planned(
        tail(0, 0, 1000).load_fill(Scalar(0)),
        tail(1, 1024, 1000).store(),
        4
    ));
    // No tail: every tile is forwarded, padding or not.
    assert!(planned(
        tail(0, 0, 1024).load(),
        tail(1, 1024, 1024).store(),
        4
    ));
}

#[test]
fn aliased_output_is_not_forwarded() {
    let bx = |buf: u8, ub: u32| GmBox::new(DType::F32, buf, 1, 256).ub(ub).step([0, 0, 256]);
    let params = [(DType::F32, R), (DType::F32, W)];
    let bytes = build(vec![K::vector(
        4096,
        &params,
        [1, 1, 4],
        vec![bx(0, 0).load(), exp(1024, 0, 256), bx(1, 1024).store()],
    )]);
    let prog = program(&bytes, 0);
    let fwd = prog.body_info(0).unwrap().forward().unwrap();
    let mut x = Buf::from_f32(&Rng(3).f32s(1024, -2.0, 2.0));
    let mut y = Buf::zeroed(4096);
    let p = x.ptr();
    // SAFETY: both views cover `x`'s 4096 bytes, used by this thread only
    // while `aliased` lives (the `from_raw_parts` contract allows buffers
    // of one launch to alias).
    let aliased = unsafe {
        [
            GmBuf::from_raw_parts(p, 4096, false),
            GmBuf::from_raw_parts(p, 4096, true),
        ]
    };
    assert!(!fwd.fits(prog.body(0), &aliased));
    let apart = [
        GmBuf::from_slice(x.bytes()),
        GmBuf::from_mut_slice(y.bytes_mut()),
    ];
    assert!(fwd.fits(prog.body(0), &apart));
}

/// A row fold: `load x (rows × cols); rsum/rmax cols; store (rows × 1)`
/// over `total` rows (the last tile a tail when `rows` does not divide it).
fn fold_module(dt: DType, rows: u32, cols: u32, total: u32, max: bool) -> Vec<u8> {
    let s = dt.size();
    let x = GmBox::new(dt, 0, rows, cols)
        .rows_tail(2, total)
        .step([0, 0, (rows * cols) as u64]);
    let out = GmBox::new(dt, 1, rows, 1)
        .ub(rows * cols * s)
        .rows_tail(2, total)
        .step([0, 0, rows as u64]);
    let (dst, src) = (rows * cols * s, 0);
    let fold = if max { Fold::Max } else { Fold::Sum };
    let op = fold.instr(dt, dvm_isa::Axis::Cols, dst, src, rows, cols);
    build(vec![K::vector(
        (rows * cols + rows) * s,
        &[(dt, R), (dt, W)],
        [1, 1, total.div_ceil(rows)],
        vec![x.load_fill(Scalar(0)), op, out.store()],
    )])
}

#[test]
fn forwarded_row_folds_match_the_ub_path() {
    let mut rng = Rng(11);
    for (dt, what) in [
        (DType::F32, "f32"),
        (DType::I32, "i32"),
        (DType::F16, "f16"),
    ] {
        for (rows, cols, total) in [(8, 768, 64), (21, 768, 100), (3, 5, 7), (16, 200, 16)] {
            let n = (total * cols) as usize;
            let x = match dt {
                DType::F32 => Buf::from_f32(&rng.f32s(n, -3.0, 3.0)),
                DType::I32 => Buf::from_i32(&(0..n).map(|_| rng.next() as i32).collect::<Vec<_>>()),
                _ => Buf::from_u16(
                    &(0..n)
                        .map(|_| half::f16::from_f32(rng.f32(-3.0, 3.0)).to_bits())
                        .collect::<Vec<_>>(),
                ),
            };
            for max in [false, true] {
                let bytes = fold_module(dt, rows, cols, total, max);
                let out = total as usize * dt.size() as usize;
                let (fwd, planned) = run(&bytes, std::slice::from_ref(&x), out, true);
                let (staged, _) = run(&bytes, std::slice::from_ref(&x), out, false);
                assert!(planned, "{what} {rows}x{cols}: body not forwarded");
                assert_eq!(
                    fwd, staged,
                    "{what} {rows}x{cols} over {total} rows, max={max}"
                );
            }
        }
    }
}

#[test]
fn lone_ops_and_row_folds_report_forwarding() {
    let names =
        |bytes: &[u8]| -> Vec<&'static str> { program(bytes, 0).fused_forms(0).names().collect() };
    let bytes = module(DType::F32, 256, 1000, exp(2 * 256 * 4, 0, 256), false);
    assert_eq!(names(&bytes), ["forward"]);
    // A row sum is forwarded, and its load fuses with the fold on tiles
    // that run through UB.
    let bytes = fold_module(DType::F32, 4, 64, 40, false);
    assert_eq!(names(&bytes), ["forward", "load_fold_cols"]);
    let mut prog = program(&bytes, 0);
    prog.disable_forwarding();
    assert_eq!(
        prog.fused_forms(0).names().collect::<Vec<_>>(),
        ["load_fold_cols"]
    );
}
