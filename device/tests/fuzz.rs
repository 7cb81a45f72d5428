//! Property tests: random byte strings and random mutations of valid
//! modules (bit flips, byte overwrites, truncations, word swaps) never panic
//! `Module::parse`, `verify_kernel`, predecode or `run_block`; mutants that
//! verify run against buffers sized by `required_bytes` and never fault
//! (every access stays inside its buffer and the UB).

mod common;

use common::*;
use dvm_device::{run_block, ExecError, GmBuf, KernelArgs, NoBarrier, Program};
use dvm_isa::{
    verify_kernel, Axis, DType, DeviceLimits, Instr, KernelKind, MmFlags, Module, ParamAccess,
    Scalar,
};
use proptest::prelude::*;

const R: ParamAccess = ParamAccess::Read;
const W: ParamAccess = ParamAccess::Write;
const RW: ParamAccess = ParamAccess::ReadWrite;

/// Valid modules covering every GM path, every kernel kind and some UB ops.
fn seeds() -> Vec<Vec<u8>> {
    let f = DType::F32;
    let mut out = Vec::new();
    // 1-D copy with a tail.
    let src = GmBox::new(f, 0, 1, 256)
        .cols_tail(2, 1000)
        .step([0, 0, 256]);
    out.push(build(vec![K::vector(
        1024,
        &[(f, R), (f, W)],
        [1, 1, 4],
        vec![src.load(), GmBox { buf: 1, ..src }.store()],
    )]));
    // 2-D tails, pad fill, transposed and broadcast loads, store_add.
    let t = GmBox::new(f, 0, 8, 16)
        .pitch(20)
        .rows_tail(0, 37)
        .cols_tail(1, 53)
        .step([8 * 53, 16, 0])
        .strides(53, 1);
    let tr = GmBox::new(f, 0, 16, 8)
        .ub(1024)
        .rows_tail(1, 53)
        .cols_tail(0, 37)
        .step([8 * 53, 16, 0])
        .strides(1, 53);
    let bc = GmBox::new(f, 2, 8, 16)
        .ub(2048)
        .rows_tail(0, 37)
        .cols_tail(1, 53)
        .step([0, 16, 0])
        .strides(0, 1);
    let add = GmBox::new(f, 3, 8, 16)
        .ub(0)
        .pitch(20)
        .rows_tail(0, 37)
        .cols_tail(1, 53)
        .strides(0, 1);
    out.push(build(vec![K::vector(
        4096,
        &[(f, R), (f, W), (f, R), (f, RW)],
        [5, 4, 1],
        vec![
            t.load_fill(Scalar::f32(-1.0)),
            GmBox { buf: 1, ..t }.store(),
            tr.load(),
            bc.load(),
            add.store_add(),
        ],
    )]));
    // Vector ops (run once the handlers exist): add, exp, reductions,
    // broadcast, transpose, cast.
    let x = GmBox::new(f, 0, 4, 64).rows_tail(0, 30).step([256, 0, 0]);
    let y = GmBox::new(f, 1, 4, 64)
        .ub(1024)
        .rows_tail(0, 30)
        .step([256, 0, 0]);
    let o = GmBox::new(f, 2, 4, 64)
        .ub(2048)
        .rows_tail(0, 30)
        .step([256, 0, 0]);
    out.push(build(vec![K::vector(
        8192,
        &[(f, R), (f, R), (f, W)],
        [8, 1, 1],
        vec![
            x.load_fill(Scalar::f32(0.0)),
            y.load_fill(Scalar::f32(0.0)),
            Instr::Add {
                dt: f,
                dst: 2048,
                a: 0,
                b: 1024,
                n: 256,
            },
            Instr::Exp {
                dt: f,
                dst: 2048,
                src: 2048,
                n: 256,
            },
            Instr::ReduceMax {
                dt: f,
                axis: Axis::Cols,
                dst: 3072,
                src: 2048,
                rows: 4,
                cols: 64,
            },
            Instr::BroadcastCol {
                dt: f,
                dst: 4096,
                src: 3072,
                rows: 4,
                cols: 64,
            },
            Instr::Sub {
                dt: f,
                dst: 2048,
                a: 2048,
                b: 4096,
                n: 256,
            },
            Instr::ReduceSum {
                dt: f,
                axis: Axis::Rows,
                dst: 3072,
                src: 2048,
                rows: 4,
                cols: 64,
            },
            Instr::Transpose {
                dt: f,
                dst: 5120,
                src: 2048,
                rows: 4,
                cols: 64,
            },
            Instr::MulS {
                dt: f,
                dst: 2048,
                a: 2048,
                n: 256,
                imm: Scalar::f32(0.5),
            },
            Instr::Cast {
                dt: f,
                to: DType::F16,
                dst: 6144,
                src: 2048,
                n: 256,
            },
            Instr::Barrier {},
            o.store(),
        ],
    )]));
    // Matmul (mix kind).
    let a = GmBox::new(f, 0, 8, 8);
    let b = GmBox::new(f, 1, 8, 8).ub(256);
    let c = GmBox::new(f, 2, 8, 8).ub(512).step([64, 0, 0]);
    out.push(build(vec![K {
        kind: KernelKind::Mix,
        ub_bytes: 1024,
        params: vec![(f, R), (f, R), (f, W)],
        bodies: vec![(
            [3, 1, 1],
            vec![
                a.load(),
                b.load(),
                Instr::Matmul {
                    dt: f,
                    out: f,
                    flags: MmFlags::default(),
                    dst: 512,
                    a: 0,
                    b: 256,
                    m: 8,
                    n: 8,
                    k: 8,
                },
                Instr::Relu {
                    dt: f,
                    dst: 512,
                    src: 512,
                    n: 64,
                },
                c.store(),
            ],
        )],
    }]));
    // Load-forwarded bodies: a lone element-wise op and a row fold, with
    // tails (`dvm_device::forward`).
    let a = GmBox::new(f, 0, 1, 256)
        .cols_tail(2, 1000)
        .step([0, 0, 256]);
    out.push(build(vec![K::vector(
        3072,
        &[(f, R), (f, R), (f, W)],
        [1, 1, 4],
        vec![
            a.load(),
            GmBox {
                buf: 1,
                ub: 1024,
                ..a
            }
            .load(),
            Instr::Add {
                dt: f,
                dst: 2048,
                a: 0,
                b: 1024,
                n: 256,
            },
            GmBox {
                buf: 2,
                ub: 2048,
                ..a
            }
            .store(),
        ],
    )]));
    let rows = GmBox::new(f, 0, 4, 64).rows_tail(2, 30).step([0, 0, 256]);
    out.push(build(vec![K::vector(
        1040,
        &[(f, R), (f, W)],
        [1, 1, 8],
        vec![
            rows.load(),
            Instr::ReduceSum {
                dt: f,
                axis: Axis::Cols,
                dst: 1024,
                src: 0,
                rows: 4,
                cols: 64,
            },
            GmBox::new(f, 1, 4, 1)
                .ub(1024)
                .rows_tail(2, 30)
                .step([0, 0, 4])
                .store(),
        ],
    )]));
    // Parallel and sequence, other dtypes.
    let h = GmBox::new(DType::F16, 0, 2, 32)
        .rows_tail(0, 9)
        .step([64, 0, 0]);
    let i8b = GmBox::new(DType::I8, 2, 2, 32)
        .ub(256)
        .rows_tail(0, 9)
        .step([64, 0, 0]);
    let bodies = vec![
        ([5, 1, 1], vec![h.load(), GmBox { buf: 1, ..h }.store()]),
        (
            [5, 1, 1],
            vec![i8b.load(), GmBox { buf: 3, ..i8b }.store_add()],
        ),
    ];
    let params = vec![
        (DType::F16, R),
        (DType::F16, W),
        (DType::I8, R),
        (DType::I8, RW),
    ];
    for kind in [KernelKind::Parallel, KernelKind::Sequence] {
        out.push(build(vec![K {
            kind,
            ub_bytes: 512,
            params: params.clone(),
            bodies: bodies.clone(),
        }]));
    }
    out
}

/// Largest total buffer size a mutant may ask for before its run is skipped.
const MAX_BUF_BYTES: u64 = 64 << 20;
/// Tiles per block run (blocks are sized so a huge grid stays cheap).
const TILES_PER_BLOCK: u64 = 16;

/// Parses, verifies, predecodes and runs everything in `bytes`; panics only
/// if an execution faults (a verifier hole) — the property under test.
fn exercise(bytes: &[u8]) {
    let Ok(m) = Module::parse(bytes) else { return };
    let _ = m.kernels().count();
    for k in 0..m.kernel_count().min(4) {
        let Ok(vk) = verify_kernel(&m, k, &DeviceLimits::DEFAULT) else {
            continue;
        };
        let Ok(prog) = Program::<256, 16>::new(&vk) else {
            continue;
        };
        let needs: Vec<u64> = (0..vk.param_count())
            .map(|i| vk.required_bytes(i))
            .collect();
        // Mutated kernels may need up to u64::MAX bytes per buffer.
        if needs.iter().fold(0u64, |a, &n| a.saturating_add(n)) > MAX_BUF_BYTES {
            continue;
        }
        let mut bufs: Vec<Buf> = needs.iter().map(|n| Buf::zeroed(*n as usize)).collect();
        let launch = KernelArgs::new(
            &vk,
            bufs.iter_mut()
                .map(|b| GmBuf::from_mut_slice(b.bytes_mut())),
        )
        .expect("buffers sized by required_bytes bind");
        let mut ub = ub();
        let total = prog.total_tiles().max(1);
        // At most the device's block limit: the launch check refuses more.
        let dim = total
            .div_ceil(TILES_PER_BLOCK)
            .min(u64::from(prog.max_blocks())) as u32;
        let mut blocks = vec![0, dim / 2, dim - 1];
        blocks.dedup();
        for b in blocks {
            match run_block(&prog, &launch, b, dim, ub.as_mut_slice(), &NoBarrier) {
                Ok(_) => {}
                Err(e @ ExecError::Fault { .. }) => panic!("verified kernel {k} faulted: {e}"),
                Err(e) => panic!("verified kernel {k} refused a correct launch: {e}"),
            }
        }
    }
}

/// The byte offset and length of the code section, if the module parses.
fn code_range(bytes: &[u8]) -> Option<(usize, usize)> {
    let m = Module::parse(bytes).ok()?;
    let code = m.code();
    let start = code.as_ptr() as usize - bytes.as_ptr() as usize;
    Some((start, std::mem::size_of_val(code)))
}

/// Applies `count` random mutations drawn from `seed`.
fn mutate(bytes: &mut Vec<u8>, seed: u64, count: u32) {
    let mut rng = Rng(seed);
    let code = code_range(bytes);
    for _ in 0..count {
        if bytes.is_empty() {
            return;
        }
        let r = rng.next();
        // Most mutations target the code section, where they reach the
        // verifier and the executor; the rest hit anywhere.
        let (lo, len) = match code {
            Some((s, l)) if r & 3 != 0 && s + l <= bytes.len() && l > 0 => (s, l),
            _ => (0, bytes.len()),
        };
        let pos = lo + (rng.next() as usize) % len;
        match (r >> 8) % 6 {
            0 | 1 => bytes[pos] ^= 1 << (rng.next() % 8),
            2 => bytes[pos] = rng.next() as u8,
            3 => {
                // A small field value: plausible counts, strides, offsets.
                let v = [0u8, 1, 2, 3, 4, 8, 16, 0xff][(rng.next() % 8) as usize];
                bytes[pos] = v;
            }
            4 => {
                // Swap two aligned words.
                let words = bytes.len() / 8;
                if words >= 2 {
                    let (a, b) = ((rng.next() as usize) % words, (rng.next() as usize) % words);
                    for i in 0..8 {
                        bytes.swap(a * 8 + i, b * 8 + i);
                    }
                }
            }
            _ => {
                if rng.next() & 3 == 0 {
                    bytes.truncate(pos);
                }
            }
        }
    }
}

#[test]
fn seeds_are_valid_and_run() {
    for (i, s) in seeds().iter().enumerate() {
        let m = Module::parse(s).unwrap();
        for k in 0..m.kernel_count() {
            verify_kernel(&m, k, &DeviceLimits::DEFAULT)
                .unwrap_or_else(|e| panic!("seed {i}: {e}"));
        }
        exercise(s);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        exercise(&bytes);
    }

    #[test]
    fn random_bytes_behind_a_valid_header_never_panic(
        seed in 0usize..5,
        tail in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        // Keep a valid header and section table, randomise the rest.
        let mut bytes = seeds()[seed].clone();
        let keep = 32 + 5 * 24;
        bytes.truncate(keep);
        bytes.extend_from_slice(&tail);
        exercise(&bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn mutated_modules_never_panic_or_fault(which in 0usize..64, seed in any::<u64>(), count in 1u32..6) {
        let seeds = seeds();
        let mut bytes = seeds[which % seeds.len()].clone();
        mutate(&mut bytes, seed, count);
        exercise(&bytes);
    }

    #[test]
    fn sampled_instructions_never_panic_or_fault(seed in any::<u64>(), n in 1usize..4, grid in any::<[u8; 3]>()) {
        // Bodies of instructions drawn from the table with random fields; the
        // few that verify must run in bounds.
        let mut rng = Rng(seed);
        let mut next = || rng.next();
        let mut code = Vec::new();
        for _ in 0..n {
            let op = dvm_isa::Opcode::ALL[(next() as usize) % dvm_isa::Opcode::ALL.len()];
            if op == dvm_isa::Opcode::End {
                continue;
            }
            let mut ins = Instr::sample(op, &mut next);
            shrink_fields(&mut ins, &mut next);
            code.push(ins);
        }
        let dt = DType::INSTR[(next() % 6) as usize];
        let bytes = build(vec![K {
            kind: KernelKind::ALL[(next() % 5) as usize],
            ub_bytes: (next() % (192 * 1024)) as u32,
            params: vec![(dt, RW), (dt, R), (dt, W)],
            bodies: vec![(grid.map(|g| g as u32 % 9 + 1), code)],
        }]);
        exercise(&bytes);
    }
}

/// Makes sampled loads and stores plausible (small extents, strides and
/// offsets) so that some of them verify and run.
fn shrink_fields(ins: &mut Instr, next: &mut dyn FnMut() -> u64) {
    let mut small = |m: u64| next() % m;
    match ins {
        Instr::Load {
            buf,
            ub,
            pitch,
            rows,
            cols,
            row_total,
            col_total,
            base,
            step0,
            step1,
            step2,
            row_stride,
            col_stride,
            ..
        }
        | Instr::Store {
            buf,
            ub,
            pitch,
            rows,
            cols,
            row_total,
            col_total,
            base,
            step0,
            step1,
            step2,
            row_stride,
            col_stride,
            ..
        }
        | Instr::StoreAdd {
            buf,
            ub,
            pitch,
            rows,
            cols,
            row_total,
            col_total,
            base,
            step0,
            step1,
            step2,
            row_stride,
            col_stride,
            ..
        } => {
            *buf = small(3) as u8;
            *ub = (small(64) * 64) as u32;
            *rows = small(8) as u32 + 1;
            *cols = small(16) as u32 + 1;
            *pitch = *cols + small(4) as u32;
            *row_total = small(80) as u32;
            *col_total = small(160) as u32;
            *base = small(64);
            *step0 = small(64);
            *step1 = small(64);
            *step2 = small(64);
            *row_stride = small(32);
            *col_stride = small(4);
        }
        _ => {}
    }
}
