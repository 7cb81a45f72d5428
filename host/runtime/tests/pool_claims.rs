//! The CPU pool hands the tiles of a launch with several tiles per
//! participant out in chunks to whichever participant is free: the
//! element-wise, reduce and matmul kernels of the compiler give the same
//! bytes and the same counts (tiles, instructions) on pools of one, two
//! and three participants (one runs every tile in order; more claim
//! chunks in whatever order they come free), also when another thread
//! keeps one core busy.

use std::sync::atomic::{AtomicBool, Ordering};

use dvm_compile::codegen::{Group, GroupKind, Target, TileOp, View};
use dvm_compile::kernel::build;
use dvm_device::predecode::Program;
use dvm_isa::{DType, Opcode};
use dvm_runtime::pool::{CpuPool, RawBuf};
use dvm_tensor::sample_data as data;

/// `y = exp(x) · x` over `n` elements.
fn elementwise(n: u64) -> Group {
    let v = View::contiguous(DType::F32, &[n]);
    Group {
        kind: GroupKind::Elementwise { shape: vec![n] },
        inputs: vec![v.clone()],
        nodes: vec![
            (TileOp::Input(0), DType::F32),
            (TileOp::Unary(Opcode::Exp, 0), DType::F32),
            (TileOp::Binary(Opcode::Mul, 1, 0), DType::F32),
        ],
        outputs: vec![(2, v)],
    }
}

/// Row sums of `x · 0.5` over `[rows, cols]`.
fn row_sum(rows: u64, cols: u64) -> Group {
    Group {
        kind: GroupKind::Reduce {
            shape: vec![rows, cols],
            axis: 1,
        },
        inputs: vec![View::contiguous(DType::F32, &[rows, cols])],
        nodes: vec![
            (TileOp::Input(0), DType::F32),
            (TileOp::Scalar(Opcode::MulS, 0, 0.5), DType::F32),
            (TileOp::Reduce(Opcode::ReduceSum, 1), DType::F32),
        ],
        outputs: vec![(2, View::contiguous(DType::F32, &[rows, 1]))],
    }
}

/// `[m, k] · [k, n]`.
fn matmul(m: u64, n: u64, k: u64) -> Group {
    Group {
        kind: GroupKind::Matmul {
            batch: vec![],
            m,
            n,
            k,
            acc: DType::F32,
        },
        inputs: vec![
            View::contiguous(DType::F32, &[m, k]),
            View::contiguous(DType::F32, &[k, n]),
        ],
        nodes: vec![(TileOp::Matmul, DType::F32)],
        outputs: vec![(0, View::contiguous(DType::F32, &[m, n]))],
    }
}

/// The output bytes and run counts of `group`'s kernel (tiled for three
/// cores) on a pool of `cores` participants.
fn run(group: &Group, inputs: &[Vec<f32>], out_len: usize, cores: usize) -> (Vec<u32>, u64, u64) {
    let target = Target {
        cores: 3,
        ..Target::default()
    };
    let k = build(group, "k", &target).expect("builds");
    assert!(
        k.program.total_tiles() >= 12,
        "the test needs several tiles per participant, got {}",
        k.program.total_tiles()
    );
    let pool = CpuPool::new(cores);
    let mut out = vec![0f32; out_len];
    let mut bufs: Vec<RawBuf> = inputs.iter().map(|x| RawBuf::input(x)).collect();
    bufs.push(RawBuf::output(&mut out));
    // SAFETY: the inputs and the output are live vectors owned here, not
    // touched during the launch; only the output is written.
    let stats = unsafe { pool.launch(&k.program, &bufs) }.expect("runs");
    (
        out.iter().map(|x| x.to_bits()).collect(),
        stats.tiles,
        stats.instrs,
    )
}

fn same_on_every_pool(group: &Group, inputs: &[Vec<f32>], out_len: usize) {
    let one = run(group, inputs, out_len, 1);
    for cores in [2, 3] {
        assert!(
            run(group, inputs, out_len, cores) == one,
            "{cores} participants differ from one"
        );
    }
    // Another thread keeps a core busy: whoever is free claims the rest.
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        for _ in 0..3 {
            let got = run(group, inputs, out_len, 2);
            assert!(got == one, "2 participants beside a busy thread differ");
        }
        stop.store(true, Ordering::Relaxed);
    });
}

#[test]
fn elementwise_kernels_claim_chunks_with_the_same_result() {
    let n = 1 << 20;
    same_on_every_pool(&elementwise(n), &[data(n as usize, 1)], n as usize);
}

#[test]
fn reduce_kernels_claim_chunks_with_the_same_result() {
    let (rows, cols) = (8001, 96);
    let x = data((rows * cols) as usize, 2);
    same_on_every_pool(&row_sum(rows, cols), &[x], rows as usize);
}

#[test]
fn matmul_kernels_claim_chunks_with_the_same_result() {
    let (m, n, k) = (515, 260, 72);
    let a = data((m * k) as usize, 3);
    let b = data((k * n) as usize, 4);
    same_on_every_pool(&matmul(m, n, k), &[a, b], (m * n) as usize);
}

/// A kernel whose 16 tiles all store rows 0..4 of `y` (tile `t` the rows
/// `4t..4t + 4` of `x`) is not proven independent: the pool runs it on the
/// caller alone, in tile order, so the last tile's rows are what `y`
/// holds, launch after launch. On two threads the winner would be
/// whichever finished last.
#[test]
fn kernels_with_overlapping_stores_run_on_one_core() {
    // Tile t loads rows 4t..4t + 4 of x; every tile stores rows 0..4 of y.
    let text = include_str!("../../cli/tests/data/same_box.s");
    let bytes = dvm_isa::asm::assemble(text).unwrap();
    let m = dvm_isa::Module::parse(&bytes).unwrap();
    let v = dvm_isa::verify_kernel(&m, 0, &dvm_isa::DeviceLimits::DEFAULT).unwrap();
    assert!(v.tiles_independent().is_err());
    let mut slot = Box::<Program>::new_uninit();
    Program::init(&mut slot).predecode(&v).unwrap();
    // SAFETY: `Program::init` initialised the slot.
    let program = unsafe { slot.assume_init() };
    assert!(!program.tiles_independent());
    let x: Vec<f32> = (0..64 * 16).map(|i| i as f32).collect();
    let pool = CpuPool::new(2);
    for _ in 0..200 {
        let mut y = vec![0f32; 4 * 16];
        let bufs = [RawBuf::input(&x), RawBuf::output(&mut y)];
        // SAFETY: both buffers are live vectors owned here, untouched
        // during the launch; only `y` is written.
        let stats = unsafe { pool.launch(&program, &bufs) }.expect("runs");
        assert_eq!(stats.tiles, 16);
        assert_eq!(y, x[60 * 16..]);
    }
}
