//! Predecode superinstructions (`dvm_device::peephole`): `brccol` followed
//! by a binary op reading the broadcast tile runs as one handler when the
//! tile is dead afterwards, with the same bytes as the two instructions;
//! when the tile is read later, the pair stays.

mod common;

use common::*;
use dvm_device::{run_all_blocks_sequentially, GmBuf, Launch, Program};
use dvm_isa::{verify_kernel, Axis, DType, DeviceLimits, Instr, Module, ParamAccess};

const R: ParamAccess = ParamAccess::Read;
const W: ParamAccess = ParamAccess::Write;

/// `load x; rmax → m; brccol t ← m; op; store` over `total` rows of `cols`
/// in tiles of `rows` (a tail when `rows` does not divide `total`); `op`
/// gets `(x, t)` UB offsets; `store_t` also stores the broadcast tile
/// (so it is live and the pair must stay).
fn module(
    dt: DType,
    (rows, cols, total): (u32, u32, u32),
    op: impl Fn(u32, u32, u32) -> Instr,
    store_t: bool,
) -> Vec<u8> {
    let s = dt.size();
    let tile = rows * cols * s;
    let (x, m, t) = (0, tile, tile + rows * s.max(4) * 16);
    let bx = |buf: u8, ub: u32| {
        GmBox::new(dt, buf, rows, cols)
            .ub(ub)
            .rows_tail(2, total)
            .step([0, 0, (rows * cols) as u64])
    };
    let mut params = vec![(dt, R), (dt, W)];
    let mut code = vec![
        bx(0, x).load_fill(dvm_isa::Scalar(0)),
        Instr::ReduceMax {
            dt,
            axis: Axis::Cols,
            dst: m,
            src: x,
            rows,
            cols,
        },
        Instr::BroadcastCol {
            dt,
            dst: t,
            src: m,
            rows,
            cols,
        },
        op(x, x, t),
        bx(1, x).store(),
    ];
    if store_t {
        params.push((dt, W));
        code.push(bx(2, t).store());
    }
    build(vec![K::vector(
        t + tile,
        &params,
        [1, 1, total.div_ceil(rows)],
        code,
    )])
}

/// Runs kernel 0 with the peephole on or off: outputs and instruction count.
fn run(bytes: &[u8], x: &Buf, outs: usize, len: usize, peephole: bool) -> (Vec<Buf>, usize) {
    let m = Module::parse(bytes).unwrap();
    let vk = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
    let mut prog: Program = Program::empty();
    prog.set_peephole(peephole);
    prog.predecode(&vk).unwrap();
    let mut out: Vec<Buf> = (0..outs).map(|_| Buf::zeroed(len)).collect();
    let mut gm = vec![GmBuf::from_slice(x.bytes())];
    gm.extend(out.iter_mut().map(|b| GmBuf::from_mut_slice(b.bytes_mut())));
    let launch = Launch::new(&vk, gm).unwrap();
    let mut ub = ub();
    run_all_blocks_sequentially(&prog, &launch, 2, ub.as_mut_slice()).unwrap();
    drop(launch);
    (out, prog.instr_count())
}

type Op = fn(DType, u32, u32, u32) -> Instr;

#[test]
fn fused_broadcast_ops_match_the_pair() {
    let ops: [(&str, Op); 8] = [
        ("x - t", |dt, dst, a, b| Instr::Sub {
            dt,
            dst,
            a,
            b,
            n: 0,
        }),
        ("t - x", |dt, dst, a, b| Instr::Sub {
            dt,
            dst,
            a: b,
            b: a,
            n: 0,
        }),
        ("x / t", |dt, dst, a, b| Instr::Div {
            dt,
            dst,
            a,
            b,
            n: 0,
        }),
        ("t / x", |dt, dst, a, b| Instr::Div {
            dt,
            dst,
            a: b,
            b: a,
            n: 0,
        }),
        ("x + t", |dt, dst, a, b| Instr::Add {
            dt,
            dst,
            a,
            b,
            n: 0,
        }),
        ("x * t", |dt, dst, a, b| Instr::Mul {
            dt,
            dst,
            a,
            b,
            n: 0,
        }),
        ("max", |dt, dst, a, b| Instr::Max {
            dt,
            dst,
            a,
            b,
            n: 0,
        }),
        ("min", |dt, dst, a, b| Instr::Min {
            dt,
            dst,
            a,
            b,
            n: 0,
        }),
    ];
    let with_n = |i: Instr, n: u32| match i {
        Instr::Sub { dt, dst, a, b, .. } => Instr::Sub { dt, dst, a, b, n },
        Instr::Div { dt, dst, a, b, .. } => Instr::Div { dt, dst, a, b, n },
        Instr::Add { dt, dst, a, b, .. } => Instr::Add { dt, dst, a, b, n },
        Instr::Mul { dt, dst, a, b, .. } => Instr::Mul { dt, dst, a, b, n },
        Instr::Max { dt, dst, a, b, .. } => Instr::Max { dt, dst, a, b, n },
        Instr::Min { dt, dst, a, b, .. } => Instr::Min { dt, dst, a, b, n },
        other => other,
    };
    let mut rng = Rng(5);
    for dt in [DType::F32, DType::F16, DType::I32] {
        for shape in [(4, 96, 10), (3, 7, 3), (8, 256, 20)] {
            let (rows, cols, total) = shape;
            let n = (total * cols) as usize;
            let x = match dt {
                DType::F32 => Buf::from_f32(&rng.f32s(n, -3.0, 3.0)),
                DType::I32 => Buf::from_i32(
                    &(0..n)
                        .map(|_| (rng.next() % 2001) as i32 - 1000)
                        .collect::<Vec<_>>(),
                ),
                _ => Buf::from_u16(
                    &(0..n)
                        .map(|_| half::f16::from_f32(rng.f32(0.5, 3.0)).to_bits())
                        .collect::<Vec<_>>(),
                ),
            };
            let len = n * dt.size() as usize;
            for (what, op) in ops {
                let op = |dst, a, b| with_n(op(dt, dst, a, b), rows * cols);
                for store_t in [false, true] {
                    let bytes = module(dt, shape, op, store_t);
                    let outs = 1 + store_t as usize;
                    let (fused, nf) = run(&bytes, &x, outs, len, true);
                    let (pair, np) = run(&bytes, &x, outs, len, false);
                    assert_eq!(fused, pair, "{dt:?} {what} {shape:?} store_t={store_t}");
                    let want = if store_t { np } else { np - 1 };
                    assert_eq!(nf, want, "{dt:?} {what}: fused {nf} of {np} instructions");
                }
            }
        }
    }
}

#[test]
fn a_tile_another_body_reads_is_not_fused() {
    // A sequence kernel: stage 0 broadcasts and subtracts, stage 1 stores
    // the broadcast tile. Bodies share the UB, so the tile is live.
    let dt = DType::F32;
    let (rows, cols, total) = (4u32, 64u32, 16u32);
    let tile = rows * cols * 4;
    let (x, m, t) = (0, tile, tile + 64);
    let bx = |buf: u8, ub: u32| {
        GmBox::new(dt, buf, rows, cols)
            .ub(ub)
            .rows_tail(2, total)
            .step([0, 0, (rows * cols) as u64])
    };
    let stage0 = vec![
        bx(0, x).load_fill(dvm_isa::Scalar(0)),
        Instr::ReduceMax {
            dt,
            axis: Axis::Cols,
            dst: m,
            src: x,
            rows,
            cols,
        },
        Instr::BroadcastCol {
            dt,
            dst: t,
            src: m,
            rows,
            cols,
        },
        Instr::Sub {
            dt,
            dst: x,
            a: x,
            b: t,
            n: rows * cols,
        },
        bx(1, x).store(),
    ];
    let stage1 = vec![bx(2, t).store()];
    let grid = [1, 1, total / rows];
    let bytes = build(vec![K {
        kind: dvm_isa::KernelKind::Sequence,
        ub_bytes: t + tile,
        params: vec![(dt, R), (dt, W), (dt, W)],
        bodies: vec![(grid, stage0), (grid, stage1)],
    }]);
    let x = Buf::from_f32(&Rng(9).f32s((total * cols) as usize, -2.0, 2.0));
    let len = (total * cols * 4) as usize;
    let (fused, nf) = run(&bytes, &x, 2, len, true);
    let (pair, np) = run(&bytes, &x, 2, len, false);
    assert_eq!(fused, pair);
    assert_eq!(nf, np, "the pair must stay");
}

#[test]
fn an_accumulating_matmul_reads_its_destination() {
    let mm = |accumulate| Instr::Matmul {
        dt: DType::F32,
        out: DType::F32,
        flags: dvm_isa::MmFlags {
            trans_a: false,
            trans_b: false,
            accumulate,
        },
        dst: 4096,
        a: 0,
        b: 1024,
        m: 16,
        n: 16,
        k: 16,
    };
    let f = dvm_device::ops::Footprint::of(&mm(true));
    assert!(f.read.0 <= 4096 && f.read.1 >= 4096 + 1024, "{f:?}");
    let f = dvm_device::ops::Footprint::of(&mm(false));
    assert!(f.read.1 <= 4096 && f.write == (4096, 4096 + 1024), "{f:?}");
}
