//! Predecode superinstructions (`dvm_device::peephole`): `brccol` followed
//! by a binary op reading the broadcast tile runs as one handler when the
//! tile is dead afterwards, with the same bytes as the two instructions;
//! when the tile is read later, the pair stays. An `f32` row scale whose
//! result only its store reads becomes that store, scaling on the way out.

mod common;

use common::*;
use dvm_device::loadfold::ROWS_MIN_COLS;
use dvm_device::{run_all_blocks_sequentially, GmBuf, KernelArgs, Program};
use dvm_isa::{verify_kernel, Axis, DType, DeviceLimits, Instr, Module, ParamAccess};

const R: ParamAccess = ParamAccess::Read;
const W: ParamAccess = ParamAccess::Write;

/// A kernel's UB layout and boxes: `x` (the tile), `m` (its row maxima),
/// `t` (their broadcast) over `total` rows of `cols` in tiles of `rows`.
struct Layout {
    dt: DType,
    rows: u32,
    cols: u32,
    total: u32,
    x: u32,
    m: u32,
    t: u32,
    tile: u32,
}

impl Layout {
    fn new(dt: DType, (rows, cols, total): (u32, u32, u32)) -> Layout {
        let s = dt.size();
        let tile = rows * cols * s;
        Layout {
            dt,
            rows,
            cols,
            total,
            x: 0,
            m: tile,
            t: tile + rows * s.max(4) * 16,
            tile,
        }
    }

    /// The `rows × cols` box of parameter `buf` at UB `ub`.
    fn bx(&self, buf: u8, ub: u32) -> GmBox {
        GmBox::new(self.dt, buf, self.rows, self.cols)
            .ub(ub)
            .rows_tail(2, self.total)
            .step([0, 0, (self.rows * self.cols) as u64])
    }

    /// `load x; rmax → m; brccol t ← m`.
    fn head(&self) -> Vec<Instr> {
        let (dt, rows, cols) = (self.dt, self.rows, self.cols);
        vec![
            self.bx(0, self.x).load_fill(dvm_isa::Scalar(0)),
            Instr::ReduceMax {
                dt,
                axis: Axis::Cols,
                dst: self.m,
                src: self.x,
                rows,
                cols,
            },
            Instr::BroadcastCol {
                dt,
                dst: self.t,
                src: self.m,
                rows,
                cols,
            },
        ]
    }

    fn grid(&self) -> [u32; 3] {
        [1, 1, self.total.div_ceil(self.rows)]
    }
}

/// `load x; rmax → m; brccol t ← m; op; store` (a tail when `rows` does
/// not divide `total`); `op` gets `(x, x, t)` UB offsets; `store_t` also
/// stores the broadcast tile (so it is live and the pair must stay).
fn module(
    dt: DType,
    shape: (u32, u32, u32),
    op: impl Fn(u32, u32, u32) -> Instr,
    store_t: bool,
) -> Vec<u8> {
    let l = Layout::new(dt, shape);
    let mut params = vec![(dt, R), (dt, W)];
    let mut code = l.head();
    code.push(op(l.x, l.x, l.t));
    code.push(l.bx(1, l.x).store());
    if store_t {
        params.push((dt, W));
        code.push(l.bx(2, l.t).store());
    }
    build(vec![K::vector(l.t + l.tile, &params, l.grid(), code)])
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
    let launch = KernelArgs::new(&vk, gm).unwrap();
    let mut ub = ub();
    run_all_blocks_sequentially(&prog, &launch, 2, ub.as_mut_slice()).unwrap();
    drop(launch);
    (out, prog.instr_count())
}

/// A binary op from `(dt, dst, a, b, n)`.
type Op = fn(DType, u32, u32, u32, u32) -> Instr;

#[test]
fn fused_broadcast_ops_match_the_pair() {
    let ops: [(&str, Op); 8] = [
        ("x - t", |dt, dst, a, b, n| Instr::Sub { dt, dst, a, b, n }),
        ("t - x", |dt, dst, a, b, n| Instr::Sub {
            dt,
            dst,
            a: b,
            b: a,
            n,
        }),
        ("x / t", |dt, dst, a, b, n| Instr::Div { dt, dst, a, b, n }),
        ("t / x", |dt, dst, a, b, n| Instr::Div {
            dt,
            dst,
            a: b,
            b: a,
            n,
        }),
        ("x + t", |dt, dst, a, b, n| Instr::Add { dt, dst, a, b, n }),
        ("x * t", |dt, dst, a, b, n| Instr::Mul { dt, dst, a, b, n }),
        ("max", |dt, dst, a, b, n| Instr::Max { dt, dst, a, b, n }),
        ("min", |dt, dst, a, b, n| Instr::Min { dt, dst, a, b, n }),
    ];
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
                let op = |dst, a, b| op(dt, dst, a, b, rows * cols);
                for store_t in [false, true] {
                    let bytes = module(dt, shape, op, store_t);
                    let outs = 1 + store_t as usize;
                    let (fused, nf) = run(&bytes, &x, outs, len, true);
                    let (pair, np) = run(&bytes, &x, outs, len, false);
                    assert_eq!(fused, pair, "{dt:?} {what} {shape:?} store_t={store_t}");
                    // An f32 row scale whose tile only the store reads
                    // also fuses with that store.
                    let scaled = what == "x * t" && dt == DType::F32;
                    let want = match (store_t, scaled) {
                        (true, _) => np,
                        (false, false) => np - 1,
                        (false, true) => np - 2,
                    };
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
    let l = Layout::new(dt, (4, 64, 16));
    let mut stage0 = l.head();
    stage0.push(Instr::Sub {
        dt,
        dst: l.x,
        a: l.x,
        b: l.t,
        n: l.rows * l.cols,
    });
    stage0.push(l.bx(1, l.x).store());
    let stage1 = vec![l.bx(2, l.t).store()];
    let bytes = build(vec![K {
        kind: dvm_isa::KernelKind::Sequence,
        ub_bytes: l.t + l.tile,
        params: vec![(dt, R), (dt, W), (dt, W)],
        bodies: vec![(l.grid(), stage0), (l.grid(), stage1)],
    }]);
    let (total, cols) = (l.total, l.cols);
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
    let dst = (4096, 4096 + 1024);
    let f = dvm_device::ops::Footprint::of(&mm(true));
    assert!(f.reads_from(dst) && f.reads.contains(&dst), "{f:?}");
    let f = dvm_device::ops::Footprint::of(&mm(false));
    assert!(!f.reads_from(dst) && f.write == dst, "{f:?}");
    // Each operand listed on its own: the bytes between them are not read.
    assert!(
        f.reads.contains(&(0, 1024)) && f.reads.contains(&(1024, 2048)),
        "{f:?}"
    );
    assert!(!f.reads_from((2048, 4096)), "{f:?}");
}

/// Where a softmax body's `exp` writes and its row sums go.
#[derive(Clone, Copy, Debug)]
enum Sums {
    /// Over the row maxima (what the compiler emits).
    OverMaxima,
    /// Apart from everything.
    Apart,
    /// One element past the maxima: overlaps them, so row `r`'s sum would
    /// clobber row `r + 1`'s maximum.
    OneOff,
    /// `exp` into another tile: not in place.
    ExpElsewhere,
}

/// A softmax body: `load x; rmax m; brccol t ← m; x − t; exp; rsum s;
/// recip s; brccol t ← s; · t; store`, with `exp` and the sums placed as
/// `sums` says.
fn softmax_module(dt: DType, shape: (u32, u32, u32), sums: Sums) -> Vec<u8> {
    let l = Layout::new(dt, shape);
    let (rows, cols, n) = (l.rows, l.cols, l.rows * l.cols);
    let size = dt.size();
    let y = l.t + l.tile;
    let s = match sums {
        Sums::OverMaxima | Sums::ExpElsewhere => l.m,
        Sums::Apart => l.m + rows * size * 4,
        Sums::OneOff => l.m + size,
    };
    let e = if matches!(sums, Sums::ExpElsewhere) {
        y
    } else {
        l.x
    };
    let mut code = l.head();
    code.extend([
        Instr::Sub {
            dt,
            dst: l.x,
            a: l.x,
            b: l.t,
            n,
        },
        Instr::Exp {
            dt,
            dst: e,
            src: l.x,
            n,
        },
        Instr::ReduceSum {
            dt,
            axis: Axis::Cols,
            dst: s,
            src: e,
            rows,
            cols,
        },
        Instr::Recip {
            dt,
            dst: s,
            src: s,
            n: rows,
        },
        Instr::BroadcastCol {
            dt,
            dst: l.t,
            src: s,
            rows,
            cols,
        },
        Instr::Mul {
            dt,
            dst: l.x,
            a: e,
            b: l.t,
            n,
        },
        l.bx(1, l.x).store(),
    ]);
    build(vec![K::vector(
        y + l.tile,
        &[(dt, R), (dt, W)],
        l.grid(),
        code,
    )])
}

#[test]
fn softmax_middle_fuses_with_the_same_bytes() {
    let mut rng = Rng(11);
    for dt in [DType::F32, DType::F16] {
        for shape in [
            (4, 96, 10),
            (3, 7, 3),
            (5, 200, 23),
            (8, 256, 20),
            (21, 768, 43),
            // Over 8 MiB of f32 output: streamed, the fold a row at a time
            // with a share of the prefetches.
            (21, 768, 2800),
        ] {
            let (_, cols, total) = shape;
            let n = (total * cols) as usize;
            let v = rng.f32s(n, -30.0, 30.0);
            let x = match dt {
                DType::F32 => Buf::from_f32(&v),
                _ => Buf::from_u16(
                    &v.iter()
                        .map(|&f| half::f16::from_f32(f).to_bits())
                        .collect::<Vec<_>>(),
                ),
            };
            let len = n * dt.size() as usize;
            for sums in [
                Sums::OverMaxima,
                Sums::Apart,
                Sums::OneOff,
                Sums::ExpElsewhere,
            ] {
                let bytes = softmax_module(dt, shape, sums);
                let (fused, nf) = run(&bytes, &x, 1, len, true);
                let (plain, np) = run(&bytes, &x, 1, len, false);
                assert_eq!(fused, plain, "{dt:?} {shape:?} {sums:?}");
                // The two broadcast pairs always fuse; the triple only in
                // place, over f32, with the sums where they cannot clobber
                // a maximum still to be read; over f32 the row scale then
                // fuses with the store.
                let triple = dt == DType::F32 && matches!(sums, Sums::OverMaxima | Sums::Apart);
                let scaled = dt == DType::F32;
                let want = np - 2 - 2 * triple as usize - scaled as usize;
                assert_eq!(nf, want, "{dt:?} {shape:?} {sums:?}: {nf} of {np}");
            }
        }
    }
}

/// How [`run_map`] runs a softmax's full tiles.
#[derive(Clone, Copy, Debug)]
enum Map {
    /// Read from global memory by the superinstruction, then it, the
    /// reciprocals and the scaled store a row at a time (the default).
    Rows,
    /// Read from global memory, each instruction over the whole tile
    /// (`Program::disable_load_rows`).
    Tile,
    /// Copied into UB first (`Program::disable_load_map`).
    Copied,
}

/// Runs kernel 0 with the peephole on and its full tiles run as `map`
/// says: outputs, and whether the load map and the rows were planned.
fn run_map(bytes: &[u8], x: &Buf, len: usize, map: Map) -> (Buf, bool, bool) {
    let m = Module::parse(bytes).unwrap();
    let vk = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
    let mut prog: Program = Program::new(&vk).unwrap();
    let info = prog.body_info(0).unwrap();
    let planned = (info.load_map(), info.load_rows());
    match map {
        Map::Rows => {}
        Map::Tile => prog.disable_load_rows(),
        Map::Copied => prog.disable_load_map(),
    }
    let mut out = Buf::zeroed(len);
    let launch = KernelArgs::new(
        &vk,
        [
            GmBuf::from_slice(x.bytes()),
            GmBuf::from_mut_slice(out.bytes_mut()),
        ],
    )
    .unwrap();
    let mut ub = ub();
    run_all_blocks_sequentially(&prog, &launch, 2, ub.as_mut_slice()).unwrap();
    drop(launch);
    (out, planned.0, planned.1)
}

#[test]
fn softmax_tiles_read_from_global_memory_give_the_same_bytes() {
    let mut rng = Rng(17);
    let special = [
        f32::NAN,
        -0.0,
        0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -1e30,
        1e30,
    ];
    // Full tiles and tails (those copy into UB), rows of every width class
    // (rows shorter than `ROWS_MIN_COLS` run over whole tiles);
    // 5470 rows of 768 (over 16 MiB) store with non-temporal stores.
    for shape in [
        (4, 96, 10),
        (3, 7, 3),
        (5, 200, 23),
        (3, 300, 11),
        (8, 256, 16),
        (21, 768, 43),
        (70, 16, 150),
        (21, 768, 5470),
    ] {
        let (_, cols, total) = shape;
        let n = (total * cols) as usize;
        let v: Vec<f32> = (0..n)
            .map(|_| match rng.next() % 97 {
                k @ 0..=6 => special[k as usize],
                _ => rng.f32(-90.0, 90.0),
            })
            .collect();
        let x = Buf::from_f32(&v);
        for sums in [Sums::OverMaxima, Sums::Apart] {
            let bytes = softmax_module(DType::F32, shape, sums);
            let (rows, planned, by_rows) = run_map(&bytes, &x, n * 4, Map::Rows);
            assert!(planned, "{shape:?} {sums:?}: not planned");
            assert_eq!(
                by_rows,
                cols >= ROWS_MIN_COLS,
                "{shape:?} {sums:?}: rows planned wrong"
            );
            let (from_gm, ..) = run_map(&bytes, &x, n * 4, Map::Tile);
            let (copied, ..) = run_map(&bytes, &x, n * 4, Map::Copied);
            let (plain, _) = run(&bytes, &x, 1, n * 4, false);
            let same = |a: &Buf, b: &Buf| {
                a.f32s()
                    .iter()
                    .zip(b.f32s())
                    .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
            };
            assert!(
                same(&rows, &from_gm),
                "{shape:?} {sums:?}: by rows differs from by tiles"
            );
            assert!(
                same(&from_gm, &copied),
                "{shape:?} {sums:?}: differs from the copy"
            );
            assert!(
                same(&from_gm, &plain[0]),
                "{shape:?} {sums:?}: differs from the plain body"
            );
        }
    }
    // Not in place (`exp` into another tile): the copy stays.
    let bytes = softmax_module(DType::F32, (4, 96, 8), Sums::ExpElsewhere);
    let x = Buf::from_f32(&rng.f32s(4 * 96 * 2, -3.0, 3.0));
    assert!(!run_map(&bytes, &x, 4 * 96 * 2 * 4, Map::Rows).1);
}

/// `load x; rsum s ← x; recip s; brccol t ← s; x · t; store` (rows
/// normalised by their sums) over `total` rows of `cols` in tiles of
/// `rows`, the store `base` elements into the output.
fn row_scale_module((rows, cols, total): (u32, u32, u32), base: u64) -> Vec<u8> {
    let dt = DType::F32;
    let l = Layout::new(dt, (rows, cols, total));
    let n = rows * cols;
    let code = vec![
        l.bx(0, l.x).load_fill(dvm_isa::Scalar(0)),
        Instr::ReduceSum {
            dt,
            axis: Axis::Cols,
            dst: l.m,
            src: l.x,
            rows,
            cols,
        },
        Instr::Recip {
            dt,
            dst: l.m,
            src: l.m,
            n: rows,
        },
        Instr::BroadcastCol {
            dt,
            dst: l.t,
            src: l.m,
            rows,
            cols,
        },
        Instr::Mul {
            dt,
            dst: l.x,
            a: l.x,
            b: l.t,
            n,
        },
        l.bx(1, l.x).base(base).store(),
    ];
    build(vec![K::vector(
        l.t + l.tile,
        &[(dt, R), (dt, W)],
        l.grid(),
        code,
    )])
}

#[test]
fn row_scales_fuse_with_their_stores_streamed_or_not() {
    use dvm_device::{StoreMap, VInstr};
    let mut rng = Rng(23);
    let special = [f32::NAN, -0.0, 0.0, f32::INFINITY, f32::NEG_INFINITY, 1e-40];
    // Small outputs store plainly; 5470 rows of 768 (over 16 MiB) stream,
    // from a misaligned start (3 elements in) and with a tail tile.
    for (shape, base) in [((4, 96, 10), 0), ((3, 7, 3), 1), ((21, 768, 5470), 3)] {
        let (_, cols, total) = shape;
        let n = (total * cols) as usize;
        let v: Vec<f32> = (0..n)
            .map(|_| match rng.next() % 211 {
                k @ 0..=5 => special[k as usize],
                _ => rng.f32(-4.0, 4.0),
            })
            .collect();
        let x = Buf::from_f32(&v);
        let bytes = row_scale_module(shape, base);
        let m = Module::parse(&bytes).unwrap();
        let vk = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
        let prog: Program = Program::new(&vk).unwrap();
        let body = prog.body(0);
        let stream = n >= 4 << 20;
        assert!(
            matches!(body.last(), Some(VInstr::Store { map: StoreMap::Scale(_), stream: s, .. }) if *s == stream),
            "{shape:?}: the scale fuses with the store (streaming: {stream})"
        );
        let len = (n + base as usize) * 4;
        let (fused, nf) = run(&bytes, &x, 1, len, true);
        let (plain, np) = run(&bytes, &x, 1, len, false);
        assert_eq!(nf, np - 2, "{shape:?}: brccol, mul and store become one");
        let same = fused[0]
            .f32s()
            .iter()
            .zip(plain[0].f32s())
            .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()));
        assert!(same, "{shape:?}: scaled store differs from mul then store");
    }
}

#[test]
fn a_scaled_tile_read_after_its_store_keeps_the_mul() {
    // The scaled tile is stored twice: the second store reads it, so the
    // mul must still write it.
    let dt = DType::F32;
    let l = Layout::new(dt, (4, 96, 10));
    let mut code = l.head();
    code.push(Instr::Mul {
        dt,
        dst: l.x,
        a: l.x,
        b: l.t,
        n: l.rows * l.cols,
    });
    code.push(l.bx(1, l.x).store());
    code.push(l.bx(2, l.x).store());
    let bytes = build(vec![K::vector(
        l.t + l.tile,
        &[(dt, R), (dt, W), (dt, W)],
        l.grid(),
        code,
    )]);
    let x = Buf::from_f32(&Rng(29).f32s(960, -3.0, 3.0));
    let (fused, nf) = run(&bytes, &x, 2, 960 * 4, true);
    let (plain, np) = run(&bytes, &x, 2, 960 * 4, false);
    assert_eq!(fused, plain);
    assert_eq!(nf, np - 1, "only the broadcast pair fuses");
}

/// Runs kernel 0 with the peephole on or off over `inputs` and outputs of
/// `out_lens` bytes: the outputs and the instruction count.
fn run_io(bytes: &[u8], inputs: &[&Buf], out_lens: &[usize], peephole: bool) -> (Vec<Buf>, usize) {
    let m = Module::parse(bytes).unwrap();
    let vk = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
    let mut prog: Program = Program::empty();
    prog.set_peephole(peephole);
    prog.predecode(&vk).unwrap();
    let mut out: Vec<Buf> = out_lens.iter().map(|&l| Buf::zeroed(l)).collect();
    let mut gm: Vec<GmBuf<'_>> = inputs
        .iter()
        .map(|b| GmBuf::from_slice(b.bytes()))
        .collect();
    gm.extend(out.iter_mut().map(|b| GmBuf::from_mut_slice(b.bytes_mut())));
    let launch = KernelArgs::new(&vk, gm).unwrap();
    let mut ub = ub();
    run_all_blocks_sequentially(&prog, &launch, 2, ub.as_mut_slice()).unwrap();
    drop(launch);
    (out, prog.instr_count())
}

/// Random elements of `dt` for a buffer of `n`.
fn random(dt: DType, n: usize, rng: &mut Rng) -> Buf {
    match dt {
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
    }
}

/// `brcrow t ← g` (one row of a `[cols]` input, as the compiler loads a
/// norm's weight) then a binary op reading `t`: one handler when `t` is
/// dead afterwards, the same bytes as the pair either way.
#[test]
fn fused_row_broadcast_ops_match_the_pair() {
    let ops: [(&str, Op); 6] = [
        ("x * t", |dt, dst, a, b, n| Instr::Mul { dt, dst, a, b, n }),
        ("x + t", |dt, dst, a, b, n| Instr::Add { dt, dst, a, b, n }),
        ("t - x", |dt, dst, a, b, n| Instr::Sub {
            dt,
            dst,
            a: b,
            b: a,
            n,
        }),
        ("x / t", |dt, dst, a, b, n| Instr::Div { dt, dst, a, b, n }),
        ("max", |dt, dst, a, b, n| Instr::Max { dt, dst, a, b, n }),
        ("t min x", |dt, dst, a, b, n| Instr::Min {
            dt,
            dst,
            a: b,
            b: a,
            n,
        }),
    ];
    let mut rng = Rng(11);
    for dt in [DType::F32, DType::F16, DType::I32] {
        for (rows, cols, total) in [(4u32, 96u32, 10u32), (3, 7, 3), (8, 256, 20), (1, 64, 3)] {
            let l = Layout::new(dt, (rows, cols, total));
            let s = dt.size();
            // UB: x, then the row g, then the broadcast tile t.
            let g_at = l.tile.next_multiple_of(64);
            let t_at = (g_at + cols * s).next_multiple_of(64);
            let n = (total * cols) as usize;
            let x = random(dt, n, &mut rng);
            let g = random(dt, cols as usize, &mut rng);
            let len = n * s as usize;
            for (what, op) in ops {
                for store_t in [false, true] {
                    let mut params = vec![(dt, R), (dt, R), (dt, W)];
                    let mut code = vec![
                        l.bx(0, l.x).load_fill(dvm_isa::Scalar(0)),
                        GmBox::new(dt, 1, 1, cols).ub(g_at).load(),
                        Instr::BroadcastRow {
                            dt,
                            dst: t_at,
                            src: g_at,
                            rows,
                            cols,
                        },
                        op(dt, l.x, l.x, t_at, rows * cols),
                        l.bx(2, l.x).store(),
                    ];
                    if store_t {
                        params.push((dt, W));
                        code.push(l.bx(3, t_at).store());
                    }
                    let ub_bytes = t_at + l.tile;
                    let bytes = build(vec![K::vector(ub_bytes, &params, l.grid(), code)]);
                    let outs = vec![len; 1 + store_t as usize];
                    let (fused, nf) = run_io(&bytes, &[&x, &g], &outs, true);
                    let (pair, np) = run_io(&bytes, &[&x, &g], &outs, false);
                    let case = format!("{dt:?} {what} {rows}x{cols}/{total} store_t={store_t}");
                    assert_eq!(fused, pair, "{case}");
                    // One row per tile broadcasts nothing worth fusing.
                    let want = if store_t || rows < 2 { np } else { np - 1 };
                    assert_eq!(nf, want, "{case}: fused {nf} of {np} instructions");
                }
            }
        }
    }
}

/// A binary op into `t`, then a sum along the columns of `t`: one handler
/// folding each row as it is written, the same bytes (the tile and the
/// sums) as the pair, in place, into another tile, and as a square
/// (`x · x`); sums that overlap an operand keep the pair.
#[test]
fn a_binary_op_and_the_row_sums_of_its_result_match_the_pair() {
    #[derive(Clone, Copy, Debug)]
    enum Case {
        InPlace,
        Elsewhere,
        Square,
        SumsOverlapY,
        /// In place over `x`, and `y`'s box stored afterwards: live.
        YStored,
    }
    let mut rng = Rng(13);
    for dt in [DType::F32, DType::F16, DType::I32] {
        // The last shape's output (over 8 MiB) streams: the pair then runs
        // a row at a time, issuing a share of the next tile's prefetches.
        let shapes = [
            (4u32, 96u32, 10u32),
            (3, 7, 3),
            (8, 768, 20),
            (5, 200, 5),
            (16, 768, 5600),
        ];
        for (rows, cols, total) in shapes {
            let s = dt.size();
            let tile = rows * cols * s;
            let step = (rows * cols) as u64;
            let bx = |buf: u8, ub: u32| {
                GmBox::new(dt, buf, rows, cols)
                    .ub(ub)
                    .rows_tail(2, total)
                    .step([0, 0, step])
            };
            let sums_box = |buf: u8, ub: u32| {
                GmBox::new(dt, buf, rows, 1)
                    .ub(ub)
                    .rows_tail(2, total)
                    .step([0, 0, rows as u64])
            };
            let (x_at, y_at) = (0, tile.next_multiple_of(64));
            let t_at = (y_at + tile).next_multiple_of(64);
            let v_at = (t_at + tile).next_multiple_of(64);
            let n = (total * cols) as usize;
            let x = random(dt, n, &mut rng);
            let y = random(dt, n, &mut rng);
            let len = n * s as usize;
            let sums_len = total as usize * s as usize;
            for case in [
                Case::InPlace,
                Case::Elsewhere,
                Case::Square,
                Case::SumsOverlapY,
                Case::YStored,
            ] {
                let (dst, a, b, v) = match case {
                    Case::InPlace | Case::YStored => (x_at, x_at, y_at, v_at),
                    Case::Elsewhere => (t_at, x_at, y_at, v_at),
                    Case::Square => (t_at, x_at, x_at, v_at),
                    // The sums land in `y`'s first row: the pair must stay.
                    Case::SumsOverlapY => (t_at, x_at, y_at, y_at),
                };
                let code = vec![
                    bx(0, x_at).load_fill(dvm_isa::Scalar(0)),
                    bx(1, y_at).load_fill(dvm_isa::Scalar(0)),
                    Instr::Mul {
                        dt,
                        dst,
                        a,
                        b,
                        n: rows * cols,
                    },
                    Instr::ReduceSum {
                        dt,
                        axis: Axis::Cols,
                        dst: v,
                        src: dst,
                        rows,
                        cols,
                    },
                    bx(
                        2,
                        if matches!(case, Case::YStored) {
                            y_at
                        } else {
                            dst
                        },
                    )
                    .store(),
                    sums_box(3, v).store(),
                ];
                let params = vec![(dt, R), (dt, R), (dt, W), (dt, W)];
                let ub_bytes = v_at + (rows * s).next_multiple_of(64);
                let bytes = build(vec![K::vector(
                    ub_bytes,
                    &params,
                    [1, 1, total.div_ceil(rows)],
                    code,
                )]);
                let outs = [len, sums_len];
                let (fused, nf) = run_io(&bytes, &[&x, &y], &outs, true);
                let (pair, np) = run_io(&bytes, &[&x, &y], &outs, false);
                let what = format!("{dt:?} {case:?} {rows}x{cols}/{total}");
                assert_eq!(fused, pair, "{what}");
                // The op reads both loads' tiles from global memory when
                // its sources are the two loaded boxes and the one it does
                // not overwrite is dead.
                let m = Module::parse(&bytes).unwrap();
                let vk = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
                let prog: Program = Program::new(&vk).unwrap();
                let load_pair = prog.body_info(0).and_then(|b| b.load_pair());
                assert_eq!(
                    load_pair.is_some(),
                    matches!(case, Case::InPlace | Case::Elsewhere),
                    "{what}: loads fused with the op: {load_pair:?}"
                );
                let want = if matches!(case, Case::SumsOverlapY) {
                    np
                } else {
                    np - 1
                };
                assert_eq!(nf, want, "{what}: fused {nf} of {np} instructions");
            }
        }
    }
}

/// A layer norm's body as the compiler emits it (the weight and bias rows
/// loaded first, `x` and `t` tiles, `m` the row values), with the weight
/// and bias operands first or second and the bias left out (an RMS norm's
/// tail): its middle (`x − m`, the squares, their sums) and its tail (row
/// scale, weight, bias) each run as one handler, the tail as part of the
/// store, with the same bytes as the instructions.
#[test]
fn a_norms_middle_and_tail_fuse_with_the_same_bytes() {
    use dvm_device::{StoreMap, VInstr};
    let dt = DType::F32;
    let mut rng = Rng(17);
    // The last output (over 16 MiB) streams.
    for (rows, cols, total) in [
        (4u32, 96u32, 10u32),
        (20, 768, 41),
        (3, 7, 3),
        (6, 300, 12),
        (30, 768, 5470),
    ] {
        let step = (rows * cols) as u64;
        let tile = rows * cols * 4;
        let (g_at, b_at) = (0, (cols * 4).next_multiple_of(64));
        let x_at = (b_at + cols * 4).next_multiple_of(64);
        let m_at = (x_at + tile).next_multiple_of(64);
        let t_at = (m_at + rows * 4).next_multiple_of(64);
        let bx = |buf: u8, ub: u32| {
            GmBox::new(dt, buf, rows, cols)
                .ub(ub)
                .rows_tail(2, total)
                .step([0, 0, step])
        };
        let n = (total * cols) as usize;
        let x = Buf::from_f32(&rng.f32s(n, -3.0, 3.0));
        let g = Buf::from_f32(&rng.f32s(cols as usize, -2.0, 2.0));
        let b = Buf::from_f32(&rng.f32s(cols as usize, -1.0, 1.0));
        let e = rows * cols;
        let imm = |v: f32| dvm_isa::Scalar(v.to_bits());
        for (bias, operand_first) in [(true, false), (true, true), (false, false)] {
            // `x ← x op t`, or `x ← t op x`.
            let bin = |mk: fn(DType, u32, u32, u32, u32) -> Instr, first: bool| {
                if first {
                    mk(dt, x_at, t_at, x_at, e)
                } else {
                    mk(dt, x_at, x_at, t_at, e)
                }
            };
            let mul: fn(DType, u32, u32, u32, u32) -> Instr =
                |dt, dst, a, b, n| Instr::Mul { dt, dst, a, b, n };
            let add: fn(DType, u32, u32, u32, u32) -> Instr =
                |dt, dst, a, b, n| Instr::Add { dt, dst, a, b, n };
            let brc_col = Instr::BroadcastCol {
                dt,
                dst: t_at,
                src: m_at,
                rows,
                cols,
            };
            let brc_row = |src| Instr::BroadcastRow {
                dt,
                dst: t_at,
                src,
                rows,
                cols,
            };
            let mut code = vec![
                GmBox::new(dt, 1, 1, cols).ub(g_at).load(),
                GmBox::new(dt, 2, 1, cols).ub(b_at).load(),
                bx(0, x_at).load_fill(dvm_isa::Scalar(0)),
                Instr::ReduceSum {
                    dt,
                    axis: Axis::Cols,
                    dst: m_at,
                    src: x_at,
                    rows,
                    cols,
                },
                Instr::DivS {
                    dt,
                    dst: m_at,
                    a: m_at,
                    n: rows,
                    imm: imm(cols as f32),
                },
                brc_col,
                Instr::Sub {
                    dt,
                    dst: x_at,
                    a: x_at,
                    b: t_at,
                    n: e,
                },
                Instr::Mul {
                    dt,
                    dst: t_at,
                    a: x_at,
                    b: x_at,
                    n: e,
                },
                Instr::ReduceSum {
                    dt,
                    axis: Axis::Cols,
                    dst: m_at,
                    src: t_at,
                    rows,
                    cols,
                },
                Instr::AddS {
                    dt,
                    dst: m_at,
                    a: m_at,
                    n: rows,
                    imm: imm(1e-5),
                },
                Instr::Rsqrt {
                    dt,
                    dst: m_at,
                    src: m_at,
                    n: rows,
                },
                brc_col,
                bin(mul, operand_first),
                brc_row(g_at),
                bin(mul, operand_first),
            ];
            if bias {
                code.push(brc_row(b_at));
                code.push(bin(add, operand_first));
            }
            code.push(bx(3, x_at).store());
            let params = vec![(dt, R), (dt, R), (dt, R), (dt, W)];
            let bytes = build(vec![K::vector(
                t_at + tile,
                &params,
                [1, 1, total.div_ceil(rows)],
                code,
            )]);
            let outs = [n * 4];
            let (fused, nf) = run_io(&bytes, &[&x, &g, &b], &outs, true);
            let (plain, np) = run_io(&bytes, &[&x, &g, &b], &outs, false);
            let what = format!("{rows}x{cols}/{total} bias={bias} first={operand_first}");
            assert_eq!(fused, plain, "{what}");
            let m = Module::parse(&bytes).unwrap();
            let vk = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
            let prog: Program = Program::new(&vk).unwrap();
            let stream = n * 4 >= 8 << 20;
            assert!(
                matches!(prog.body(0).last(), Some(VInstr::Store { map: StoreMap::Affine(_), stream: s, .. }) if *s == stream),
                "{what}: the tail fuses with the store (streaming: {stream})"
            );
            // brccol+sub, mul+rsum → 1 (3 fewer); brccol+mul, brcrow+mul
            // [, brcrow+add] → 1 (3 or 5 fewer), and it with the store (1).
            let want = np - 3 - if bias { 5 } else { 3 } - 1;
            assert_eq!(nf, want, "{what}: fused {nf} of {np} instructions");
            let names: Vec<_> = prog.fused_forms(0).names().collect();
            assert_eq!(
                names,
                ["load_fold_cols", "norm_middle", "norm_tail_store"],
                "{what}"
            );
        }
    }
}

/// The fused forms a program reports ([`Program::fused_forms`]), by name.
fn forms(bytes: &[u8], peephole: bool) -> Vec<&'static str> {
    let m = Module::parse(bytes).unwrap();
    let vk = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
    let mut prog: Program = Program::empty();
    prog.set_peephole(peephole);
    prog.predecode(&vk).unwrap();
    assert_eq!(prog.plan_summary().count(), 1);
    prog.fused_forms(0).names().collect()
}

#[test]
fn a_softmax_reports_its_fused_forms() {
    // Rows of at least `ROWS_MIN_COLS` run the tail a row at a time.
    let wide = softmax_module(DType::F32, (21, 768, 43), Sums::OverMaxima);
    assert_eq!(
        forms(&wide, true),
        [
            "load_fold_cols",
            "softmax_gm",
            "softmax_rows",
            "softmax_middle",
            "scale_store"
        ]
    );
    let narrow = softmax_module(DType::F32, (4, 96, 10), Sums::OverMaxima);
    assert_eq!(
        forms(&narrow, true),
        [
            "load_fold_cols",
            "softmax_gm",
            "softmax_middle",
            "scale_store"
        ]
    );
    // Without superinstructions only the load and its fold fuse.
    assert_eq!(forms(&wide, false), ["load_fold_cols"]);
    // Sums overlapping the maxima: the middle stays three instructions.
    let off = softmax_module(DType::F32, (21, 768, 43), Sums::OneOff);
    assert!(!forms(&off, true).contains(&"softmax_middle"));
}

#[test]
fn a_row_scale_reports_its_fused_store() {
    let bytes = row_scale_module((8, 256, 64), 0);
    let f = forms(&bytes, true);
    assert!(f.contains(&"scale_store"), "{f:?}");
    assert!(f.contains(&"load_fold_cols"), "{f:?}");
    assert!(!forms(&bytes, false).contains(&"scale_store"));
}

#[test]
fn fused_form_names_are_distinct_and_round_trip() {
    use dvm_device::{FusedForm, FusedForms};
    let mut all = FusedForms::EMPTY;
    for f in FusedForm::ALL {
        assert_eq!(FusedForm::from_name(f.name()), Some(f));
        assert_eq!(f.to_string(), f.name());
        all.insert(f);
    }
    assert_eq!(all.len(), FusedForm::ALL.len());
    assert!(all.iter().eq(FusedForm::ALL));
    assert_eq!(FusedForm::from_name("nothing"), None);
    let some: FusedForms = [FusedForm::NormTail, FusedForm::Forward]
        .into_iter()
        .collect();
    assert_eq!(format!("{some:?}"), r#"{"forward", "norm_tail"}"#);
    let empty: Program = Program::empty();
    assert!(empty.fused_forms(0).is_empty());
}
