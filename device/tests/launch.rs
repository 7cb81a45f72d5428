//! Every launch-check and run-check failure is a typed error, and nothing
//! is written when one is reported.

mod common;

use common::*;
use dvm_device::exec::UB_DEFAULT_BYTES;
use dvm_device::gm::{load_tile, store_add_tile, store_tile};
use dvm_device::{
    run_all_blocks_sequentially, run_block, BindError, ExecError, GmBuf, GmFault, KernelArgs,
    LoadError, NoBarrier, PredecodeError, Program, UbStorage,
};
use dvm_isa::verify::LaunchError;
use dvm_isa::{verify_kernel, DType, DeviceLimits, KernelKind, Module, ParamAccess, Scalar};

const R: ParamAccess = ParamAccess::Read;
const W: ParamAccess = ParamAccess::Write;

/// Copies 1000 f32 in 4 tiles of 256: needs 4000 bytes in and out.
fn copy_module() -> Vec<u8> {
    let src = GmBox::new(DType::F32, 0, 1, 256)
        .cols_tail(2, 1000)
        .step([0, 0, 256]);
    let dst = GmBox { buf: 1, ..src };
    build(vec![
        K::vector(
            1024,
            &[(DType::F32, R), (DType::F32, W)],
            [1, 1, 4],
            vec![src.load(), dst.store()],
        ),
        // A second kernel with bigger buffers (5000 bytes).
        K::vector(
            1024,
            &[(DType::F32, R), (DType::F32, W)],
            [1, 1, 5],
            vec![
                GmBox {
                    col_total: 1250,
                    ..src
                }
                .load(),
                GmBox {
                    col_total: 1250,
                    ..dst
                }
                .store(),
            ],
        ),
    ])
}

#[test]
fn launch_check_failures_are_typed() {
    let bytes = copy_module();
    let m = Module::parse(&bytes).unwrap();
    let vk = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
    assert_eq!(vk.required_bytes(0), 4000);
    let a = Buf::zeroed(4000);
    let mut b = Buf::zeroed(4000);
    let small = Buf::zeroed(3999);

    // Wrong count.
    let e = KernelArgs::new(&vk, [GmBuf::from_slice(a.bytes())]).unwrap_err();
    assert_eq!(
        e,
        BindError::Launch(LaunchError::BufferCount {
            expected: 2,
            got: 1
        })
    );
    let mut c = Buf::zeroed(4000);
    let e = KernelArgs::new(
        &vk,
        [
            GmBuf::from_slice(a.bytes()),
            GmBuf::from_mut_slice(b.bytes_mut()),
            GmBuf::from_mut_slice(c.bytes_mut()),
        ],
    )
    .unwrap_err();
    assert_eq!(
        e,
        BindError::Launch(LaunchError::BufferCount {
            expected: 2,
            got: 3
        })
    );
    // Far too many buffers (more than 32) is the same error, not a panic.
    let many: Vec<Buf> = (0..40).map(|_| Buf::zeroed(4)).collect();
    let e = KernelArgs::new(&vk, many.iter().map(|x| GmBuf::from_slice(x.bytes()))).unwrap_err();
    assert_eq!(
        e,
        BindError::Launch(LaunchError::BufferCount {
            expected: 2,
            got: 40
        })
    );

    // Too small, input and output.
    let e = KernelArgs::new(
        &vk,
        [
            GmBuf::from_slice(small.bytes()),
            GmBuf::from_mut_slice(b.bytes_mut()),
        ],
    )
    .unwrap_err();
    assert_eq!(
        e,
        BindError::Launch(LaunchError::BufferTooSmall {
            param: 0,
            need: 4000,
            have: 3999
        })
    );
    let mut small_out = Buf::zeroed(3999);
    let e = KernelArgs::new(
        &vk,
        [
            GmBuf::from_slice(a.bytes()),
            GmBuf::from_mut_slice(small_out.bytes_mut()),
        ],
    )
    .unwrap_err();
    assert!(matches!(
        e,
        BindError::Launch(LaunchError::BufferTooSmall { param: 1, .. })
    ));

    // Read-only buffer bound to a written parameter.
    let e = KernelArgs::new(
        &vk,
        [GmBuf::from_slice(a.bytes()), GmBuf::from_slice(b.bytes())],
    )
    .unwrap_err();
    assert_eq!(e, BindError::Launch(LaunchError::ReadOnly { param: 1 }));

    // Misaligned f32 buffer.
    let big = Buf::zeroed(4008);
    let e = KernelArgs::new(
        &vk,
        [
            GmBuf::from_slice(&big.bytes()[1..4001]),
            GmBuf::from_mut_slice(b.bytes_mut()),
        ],
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            BindError::Misaligned {
                param: 0,
                align: 4,
                ..
            }
        ),
        "{e:?}"
    );

    // The same rules through the program's signature.
    let prog: Program = Program::new(&vk).unwrap();
    let e = KernelArgs::with_signature(
        prog.params(),
        [GmBuf::from_slice(a.bytes()), GmBuf::from_slice(b.bytes())],
    )
    .unwrap_err();
    assert_eq!(e, BindError::Launch(LaunchError::ReadOnly { param: 1 }));
    let launch = KernelArgs::with_signature(
        prog.params(),
        [
            GmBuf::from_slice(a.bytes()),
            GmBuf::from_mut_slice(b.bytes_mut()),
        ],
    );
    assert!(launch.is_ok());
    // Errors print.
    assert!(!format!("{e}").is_empty());
}

#[test]
fn run_checks_are_typed_and_write_nothing() {
    let bytes = copy_module();
    let m = Module::parse(&bytes).unwrap();
    let vk0 = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
    let vk1 = verify_kernel(&m, 1, &DeviceLimits::DEFAULT).unwrap();
    let p0: Program = Program::new(&vk0).unwrap();
    let p1: Program = Program::new(&vk1).unwrap();
    let a = Buf::from_f32(&vec![1.0; 1000]);
    let mut b = Buf::zeroed(4000);
    let mut ub = ub();
    {
        let launch = KernelArgs::new(
            &vk0,
            [
                GmBuf::from_slice(a.bytes()),
                GmBuf::from_mut_slice(b.bytes_mut()),
            ],
        )
        .unwrap();
        // Block index outside the block count; zero blocks.
        let e = run_block(&p0, &launch, 2, 2, ub.as_mut_slice(), &NoBarrier).unwrap_err();
        assert_eq!(e, ExecError::Launch(LaunchError::Block { idx: 2, dim: 2 }));
        let e = run_block(&p0, &launch, 0, 0, ub.as_mut_slice(), &NoBarrier).unwrap_err();
        assert_eq!(e, ExecError::Launch(LaunchError::Block { idx: 0, dim: 0 }));
        let e = run_all_blocks_sequentially(&p0, &launch, 0, ub.as_mut_slice()).unwrap_err();
        assert_eq!(e, ExecError::Launch(LaunchError::Block { idx: 0, dim: 0 }));
        // More blocks than the device allows: refused before any runs.
        let e = run_all_blocks_sequentially(&p0, &launch, u32::MAX, ub.as_mut_slice()).unwrap_err();
        assert_eq!(
            e,
            ExecError::Launch(LaunchError::TooManyBlocks {
                dim: u32::MAX,
                max: DeviceLimits::DEFAULT.max_blocks
            })
        );
        // UB too small.
        let e = run_block(
            &p0,
            &launch,
            0,
            1,
            &mut ub.as_mut_slice()[..1023],
            &NoBarrier,
        )
        .unwrap_err();
        assert!(matches!(
            e,
            ExecError::Launch(LaunchError::Ub {
                need: 1024,
                have: 1023,
                ..
            })
        ));
        // UB misaligned.
        let e = run_block(
            &p0,
            &launch,
            0,
            1,
            &mut ub.as_mut_slice()[4..2048],
            &NoBarrier,
        )
        .unwrap_err();
        assert!(
            matches!(e, ExecError::Launch(LaunchError::Ub { align: 4, .. })),
            "{e:?}"
        );
        // A launch bound for kernel 0 does not fit kernel 1 (bigger buffers).
        let e = run_block(&p1, &launch, 0, 1, ub.as_mut_slice(), &NoBarrier).unwrap_err();
        assert_eq!(
            e,
            ExecError::Bind(BindError::Launch(LaunchError::BufferTooSmall {
                param: 0,
                need: 5000,
                have: 4000
            }))
        );
        assert!(!format!("{e}").is_empty());
    }
    assert!(b.f32s().iter().all(|x| *x == 0.0), "nothing written");
}

/// `verify_and_predecode` (one decode per instruction) gives what
/// `verify_kernel` then `Program::new` give: the same program, the same
/// errors, and an empty program on any error.
#[test]
fn verify_and_predecode_matches_the_two_passes() {
    let bytes = copy_module();
    let m = Module::parse(&bytes).unwrap();
    for k in 0..2 {
        let vk = verify_kernel(&m, k, &DeviceLimits::DEFAULT).unwrap();
        let two: Program = Program::new(&vk).unwrap();
        let mut one: Program = Program::empty();
        let vk1 = one
            .verify_and_predecode(&m, k, &DeviceLimits::DEFAULT)
            .unwrap();
        assert_eq!(format!("{two:?}"), format!("{one:?}"));
        assert_eq!(vk1.required_bytes(1), vk.required_bytes(1));
    }
    // Verification errors come first and are the verifier's.
    let small = DeviceLimits::with_ub_bytes(512);
    let want = verify_kernel(&m, 0, &small).unwrap_err();
    let mut p: Program = Program::empty();
    p.verify_and_predecode(&m, 0, &DeviceLimits::DEFAULT)
        .unwrap();
    assert_eq!(
        p.verify_and_predecode(&m, 0, &small).unwrap_err(),
        LoadError::Verify(want)
    );
    assert_eq!((p.body_count(), p.instr_count()), (0, 0));
    // Capacity errors as `Program::new`'s.
    let mut p = Program::<1, 1>::empty();
    assert_eq!(
        p.verify_and_predecode(&m, 0, &DeviceLimits::DEFAULT)
            .unwrap_err(),
        LoadError::Predecode(PredecodeError::TooManyInstrs { body: 0, cap: 1 })
    );
    assert_eq!((p.body_count(), p.instr_count()), (0, 0));
    let bytes = three_body_module();
    let m = Module::parse(&bytes).unwrap();
    let mut p = Program::<8, 2>::empty();
    assert_eq!(
        p.verify_and_predecode(&m, 0, &DeviceLimits::DEFAULT)
            .unwrap_err(),
        LoadError::Predecode(PredecodeError::TooManyBodies { count: 3, cap: 2 })
    );
    assert_eq!((p.body_count(), p.instr_count()), (0, 0));
    let mut p = Program::<8, 4>::empty();
    p.verify_and_predecode(&m, 0, &DeviceLimits::DEFAULT)
        .unwrap();
    assert_eq!((p.body_count(), p.instr_count()), (3, 3));
    assert_eq!(p.body_info(2).map(|b| b.tiles), Some(1));
}

#[test]
fn program_capacity_is_a_typed_error() {
    let bytes = copy_module();
    let m = Module::parse(&bytes).unwrap();
    let vk = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
    let e = Program::<1, 1>::new(&vk).unwrap_err();
    assert_eq!(e, PredecodeError::TooManyInstrs { body: 0, cap: 1 });
    let ok = Program::<2, 1>::new(&vk).unwrap();
    assert_eq!(ok.instr_count(), 2);
    assert_eq!(ok.total_tiles(), 4);

    let bytes = three_body_module();
    let m = Module::parse(&bytes).unwrap();
    let vk = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
    let e = Program::<8, 2>::new(&vk).unwrap_err();
    assert_eq!(e, PredecodeError::TooManyBodies { count: 3, cap: 2 });
    // A failed predecode leaves an empty program.
    let mut p = Program::<8, 2>::empty();
    assert!(p.predecode(&vk).is_err());
    assert_eq!((p.body_count(), p.instr_count()), (0, 0));
    assert!(!format!("{e}").is_empty());
}

#[test]
fn sequence_block_with_an_error_still_passes_the_barriers() {
    // Three blocks on threads; block 1 gets a UB that is too small. The
    // others must not deadlock at the stage barriers.
    let s0 = GmBox::new(DType::F32, 0, 1, 8).step([8, 0, 0]);
    let s1 = GmBox { buf: 1, ..s0 };
    let bytes = build(vec![K {
        kind: KernelKind::Sequence,
        ub_bytes: 64,
        params: vec![(DType::F32, R), (DType::F32, W)],
        bodies: vec![
            ([4, 1, 1], vec![s0.load(), s1.store()]),
            ([4, 1, 1], vec![s0.load(), s1.store()]),
            ([4, 1, 1], vec![s0.load(), s1.store()]),
        ],
    }]);
    let m = Module::parse(&bytes).unwrap();
    let vk = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
    let prog: Program = Program::new(&vk).unwrap();
    let mut a = Buf::from_f32(&[1.0; 32]);
    let mut b = Buf::zeroed(128);
    let (pa, pb) = (a.ptr() as usize, b.ptr() as usize);
    let barrier = StdBarrier(std::sync::Barrier::new(3));
    let results: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3u32)
            .map(|i| {
                let (vk, prog, barrier) = (&vk, &prog, &barrier);
                s.spawn(move || {
                    // SAFETY: the buffers outlive the scope; blocks write
                    // disjoint tiles.
                    let bufs = unsafe {
                        [
                            GmBuf::from_raw_parts(pa as *mut u8, 128, false),
                            GmBuf::from_raw_parts(pb as *mut u8, 128, true),
                        ]
                    };
                    let launch = KernelArgs::new(vk, bufs).unwrap();
                    let mut ub = ub();
                    let len = if i == 1 { 32 } else { 64 };
                    run_block(prog, &launch, i, 3, &mut ub.as_mut_slice()[..len], barrier)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(results[0].is_ok() && results[2].is_ok());
    assert!(matches!(
        results[1],
        Err(ExecError::Launch(LaunchError::Ub { .. }))
    ));
}

#[test]
fn handlers_refuse_boxes_outside_their_buffers() {
    // Patterns no verifier would pass, fed to the handlers directly.
    let mut ub = UbStorage::<256>::new();
    let data = Buf::from_f32(&[3.0; 16]);
    let mut out = Buf::zeroed(64);
    let p = GmBox::new(DType::F32, 0, 4, 4);
    let instr_pattern = |b: GmBox| b.load().gm().unwrap().pattern;

    // GM: one element past the end.
    let pat = instr_pattern(p.base(1));
    assert_eq!(
        load_tile(
            &pat,
            None,
            [0; 3],
            &GmBuf::from_slice(data.bytes()),
            &mut ub.0
        ),
        Err(GmFault::Gm)
    );
    // GM: huge strides overflow.
    let pat = instr_pattern(p.strides(u64::MAX / 2, 1));
    assert_eq!(
        load_tile(
            &pat,
            None,
            [0; 3],
            &GmBuf::from_slice(data.bytes()),
            &mut ub.0
        ),
        Err(GmFault::Gm)
    );
    let pat = instr_pattern(p.step([u64::MAX, 0, 0]));
    assert_eq!(
        load_tile(
            &pat,
            None,
            [1, 0, 0],
            &GmBuf::from_slice(data.bytes()),
            &mut ub.0
        ),
        Err(GmFault::Gm)
    );
    // UB: the box leaves the UB.
    let pat = instr_pattern(p.ub(200));
    assert_eq!(
        load_tile(
            &pat,
            Some(0),
            [0; 3],
            &GmBuf::from_slice(data.bytes()),
            &mut ub.0
        ),
        Err(GmFault::Ub)
    );
    assert_eq!(
        store_tile(&pat, [0; 3], &GmBuf::from_mut_slice(out.bytes_mut()), &ub.0),
        Err(GmFault::Ub)
    );
    // UB: pitch below the width.
    let pat = instr_pattern(p.pitch(2));
    assert_eq!(
        load_tile(
            &pat,
            None,
            [0; 3],
            &GmBuf::from_slice(data.bytes()),
            &mut ub.0
        ),
        Err(GmFault::Ub)
    );
    // Stores into a read-only buffer.
    let pat = instr_pattern(p);
    assert_eq!(
        store_tile(&pat, [0; 3], &GmBuf::from_slice(data.bytes()), &ub.0),
        Err(GmFault::ReadOnly)
    );
    assert_eq!(
        store_add_tile(&pat, [0; 3], &GmBuf::from_slice(data.bytes()), &ub.0),
        Err(GmFault::ReadOnly)
    );
    // Misaligned atomic add.
    let mut big = Buf::zeroed(80);
    assert_eq!(
        store_add_tile(
            &pat,
            [0; 3],
            &GmBuf::from_mut_slice(&mut big.bytes_mut()[2..66]),
            &ub.0
        ),
        Err(GmFault::Operand)
    );
    assert!(ub.0.iter().all(|b| *b == 0), "UB untouched");
    assert!(out.bytes().iter().all(|b| *b == 0) && big.bytes().iter().all(|b| *b == 0));
    // And the in-bounds case works.
    let pat = instr_pattern(p);
    load_tile(
        &pat,
        Some(Scalar::f32(1.0).0),
        [0; 3],
        &GmBuf::from_slice(data.bytes()),
        &mut ub.0,
    )
    .unwrap();
    store_tile(&pat, [0; 3], &GmBuf::from_mut_slice(out.bytes_mut()), &ub.0).unwrap();
    assert_eq!(out.f32s(), vec![3.0; 16]);
}

#[test]
fn ub_storage_is_aligned_and_default_sized() {
    let mut u = ub();
    assert_eq!(u.as_mut_slice().len(), UB_DEFAULT_BYTES);
    assert_eq!(UB_DEFAULT_BYTES, 192 * 1024);
    assert_eq!(u.as_mut_slice().as_ptr() as usize % 64, 0);
    let mut small = UbStorage::<100>::new();
    assert_eq!(small.as_mut_slice().as_ptr() as usize % 64, 0);
}

/// A parallel kernel of three one-load bodies over one buffer.
fn three_body_module() -> Vec<u8> {
    let body = || {
        let b = GmBox::new(DType::F32, 0, 1, 4);
        ([1, 1, 1], vec![b.load()])
    };
    build(vec![K {
        kind: KernelKind::Parallel,
        ub_bytes: 64,
        params: vec![(DType::F32, R)],
        bodies: vec![body(), body(), body()],
    }])
}

/// std's barrier with the abort flag of [`Barrier::abort`].
struct AbortBarrier {
    barrier: std::sync::Barrier,
    aborted: std::sync::atomic::AtomicBool,
}

impl AbortBarrier {
    fn new(n: usize) -> AbortBarrier {
        AbortBarrier {
            barrier: std::sync::Barrier::new(n),
            aborted: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl dvm_device::Barrier for AbortBarrier {
    fn wait(&self) {
        self.barrier.wait();
    }
    fn abort(&self) {
        self.aborted
            .store(true, std::sync::atomic::Ordering::Release);
    }
    fn aborted(&self) -> bool {
        self.aborted.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// A sequence kernel: stage 0 copies `a` to `b` in 6 tiles of 8; stage 1
/// copies all of `b` to `c` in one tile, so it reads what every block
/// wrote in stage 0.
fn two_stage_module() -> Vec<u8> {
    let a = GmBox::new(DType::F32, 0, 1, 8).step([8, 0, 0]);
    let b = GmBox { buf: 1, ..a };
    let b_all = GmBox::new(DType::F32, 1, 1, 48);
    let c_all = GmBox { buf: 2, ..b_all };
    build(vec![K {
        kind: KernelKind::Sequence,
        ub_bytes: 192,
        params: vec![
            (DType::F32, R),
            (DType::F32, ParamAccess::ReadWrite),
            (DType::F32, W),
        ],
        bodies: vec![
            ([6, 1, 1], vec![a.load(), b.store()]),
            ([1, 1, 1], vec![b_all.load(), c_all.store()]),
        ],
    }])
}

/// Runs the blocks of `two_stage_module` on `cores` threads, core `c`
/// with blocks `c, c + cores, …` of `blocks`; core `bad` (if any) gets a
/// UB that is too small. Returns each core's result and `c`.
fn run_two_stage_strided(
    cores: u32,
    blocks: u32,
    bad: Option<u32>,
) -> (Vec<Result<dvm_device::RunStats, ExecError>>, Vec<f32>) {
    let bytes = two_stage_module();
    let m = Module::parse(&bytes).unwrap();
    let vk = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
    let prog: Program = Program::new(&vk).unwrap();
    let want: Vec<f32> = (0..48).map(|i| i as f32).collect();
    let mut a = Buf::from_f32(&want);
    let mut b = Buf::zeroed(192);
    let mut c = Buf::zeroed(192);
    let (pa, pb, pc) = (a.ptr() as usize, b.ptr() as usize, c.ptr() as usize);
    let barrier = AbortBarrier::new(cores as usize);
    let results: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..cores)
            .map(|core| {
                let (vk, prog, barrier) = (&vk, &prog, &barrier);
                s.spawn(move || {
                    // SAFETY: the buffers outlive the scope; within a stage
                    // the blocks write disjoint tiles, and the barrier
                    // orders the stages.
                    let bufs = unsafe {
                        [
                            GmBuf::from_raw_parts(pa as *mut u8, 192, false),
                            GmBuf::from_raw_parts(pb as *mut u8, 192, true),
                            GmBuf::from_raw_parts(pc as *mut u8, 192, true),
                        ]
                    };
                    let launch = KernelArgs::new(vk, bufs).unwrap();
                    let mut ub = ub();
                    let len = if bad == Some(core) { 64 } else { 192 };
                    dvm_device::run_blocks_strided(
                        prog,
                        &launch,
                        core,
                        cores,
                        blocks,
                        &mut ub.as_mut_slice()[..len],
                        barrier,
                    )
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    (results, c.f32s())
}

#[test]
fn strided_blocks_finish_every_stage_before_the_next() {
    let want: Vec<f32> = (0..48).map(|i| i as f32).collect();
    // More blocks than cores, as many, fewer (a core without blocks).
    for (cores, blocks) in [(2, 5), (3, 3), (4, 2), (1, 4)] {
        let (results, c) = run_two_stage_strided(cores, blocks, None);
        let tiles: u64 = results.iter().map(|r| r.as_ref().unwrap().tiles).sum();
        assert_eq!(tiles, 7, "{cores} cores, {blocks} blocks");
        assert_eq!(c, want, "{cores} cores, {blocks} blocks");
    }
}

#[test]
fn a_failed_core_stops_the_others_at_the_next_barrier() {
    let (results, c) = run_two_stage_strided(3, 6, Some(1));
    assert!(matches!(
        results[1],
        Err(ExecError::Launch(LaunchError::Ub { .. }))
    ));
    // The others returned, having run at most their stage-0 tiles (they
    // may see the abort before they start): nothing reached `c`.
    for r in [&results[0], &results[2]] {
        assert!(r.as_ref().unwrap().tiles <= 2, "{r:?}");
    }
    assert!(c.iter().all(|&v| v == 0.0), "{c:?}");
}
