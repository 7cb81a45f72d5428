//! Shared helpers for the device integration tests: building modules,
//! aligned buffers, and running a kernel one block at a time or on threads.
#![allow(dead_code)]

use dvm_device::{
    run_all_blocks_sequentially, run_block, run_tile_range, run_tile_ranges, Barrier, ExecError,
    GmBuf, KernelArgs, Program, RunStats, UbStorage,
};
use dvm_isa::builder::{BodyDef, CodeWriter, KernelDef, ModuleBuilder, ParamDef};
use dvm_isa::{
    verify_kernel, Axis, DType, DeviceLimits, GridDim, Instr, KernelKind, Module, PadMode,
    ParamAccess, Scalar, WaitMask,
};

/// A fold of a `rows × cols` tile at UB `src` into `dst` along `axis`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fold {
    Sum,
    Max,
    Min,
}

impl Fold {
    pub fn instr(self, dt: DType, axis: Axis, dst: u32, src: u32, rows: u32, cols: u32) -> Instr {
        match self {
            Fold::Sum => Instr::ReduceSum {
                dt,
                axis,
                dst,
                src,
                rows,
                cols,
            },
            Fold::Max => Instr::ReduceMax {
                dt,
                axis,
                dst,
                src,
                rows,
                cols,
            },
            Fold::Min => Instr::ReduceMin {
                dt,
                axis,
                dst,
                src,
                rows,
                cols,
            },
        }
    }
}

/// A GM box: the fields of a load or store except the UB destination's.
#[derive(Clone, Copy, Debug)]
pub struct GmBox {
    pub dt: DType,
    pub buf: u8,
    pub ub: u32,
    pub pitch: u32,
    pub rows: u32,
    pub cols: u32,
    pub row_dim: GridDim,
    pub col_dim: GridDim,
    pub row_total: u32,
    pub col_total: u32,
    pub base: u64,
    pub step: [u64; 3],
    pub rs: u64,
    pub cs: u64,
}

impl GmBox {
    /// A `rows × cols` box of `buf` at UB 0, pitch = cols, no tails,
    /// row-major contiguous rows of `cols` elements.
    pub fn new(dt: DType, buf: u8, rows: u32, cols: u32) -> GmBox {
        GmBox {
            dt,
            buf,
            ub: 0,
            pitch: cols,
            rows,
            cols,
            row_dim: GridDim::None,
            col_dim: GridDim::None,
            row_total: 0,
            col_total: 0,
            base: 0,
            step: [0; 3],
            rs: cols as u64,
            cs: 1,
        }
    }
    pub fn ub(mut self, ub: u32) -> Self {
        self.ub = ub;
        self
    }
    pub fn pitch(mut self, pitch: u32) -> Self {
        self.pitch = pitch;
        self
    }
    pub fn rows_tail(mut self, dim: u8, total: u32) -> Self {
        self.row_dim = GridDim::Dim(dim);
        self.row_total = total;
        self
    }
    pub fn cols_tail(mut self, dim: u8, total: u32) -> Self {
        self.col_dim = GridDim::Dim(dim);
        self.col_total = total;
        self
    }
    pub fn base(mut self, base: u64) -> Self {
        self.base = base;
        self
    }
    pub fn step(mut self, step: [u64; 3]) -> Self {
        self.step = step;
        self
    }
    pub fn strides(mut self, rs: u64, cs: u64) -> Self {
        self.rs = rs;
        self.cs = cs;
        self
    }
    pub fn load(&self) -> Instr {
        self.load_pad(PadMode::Keep, Scalar(0))
    }
    pub fn load_fill(&self, padv: Scalar) -> Instr {
        self.load_pad(PadMode::Fill, padv)
    }
    fn load_pad(&self, pad: PadMode, padv: Scalar) -> Instr {
        Instr::Load {
            dt: self.dt,
            pad,
            buf: self.buf,
            row_dim: self.row_dim,
            col_dim: self.col_dim,
            ub: self.ub,
            pitch: self.pitch,
            rows: self.rows,
            cols: self.cols,
            row_total: self.row_total,
            col_total: self.col_total,
            padv,
            base: self.base,
            step0: self.step[0],
            step1: self.step[1],
            step2: self.step[2],
            row_stride: self.rs,
            col_stride: self.cs,
        }
    }
    pub fn store(&self) -> Instr {
        Instr::Store {
            dt: self.dt,
            buf: self.buf,
            row_dim: self.row_dim,
            col_dim: self.col_dim,
            ub: self.ub,
            pitch: self.pitch,
            rows: self.rows,
            cols: self.cols,
            row_total: self.row_total,
            col_total: self.col_total,
            base: self.base,
            step0: self.step[0],
            step1: self.step[1],
            step2: self.step[2],
            row_stride: self.rs,
            col_stride: self.cs,
        }
    }
    pub fn store_add(&self) -> Instr {
        Instr::StoreAdd {
            dt: self.dt,
            buf: self.buf,
            row_dim: self.row_dim,
            col_dim: self.col_dim,
            ub: self.ub,
            pitch: self.pitch,
            rows: self.rows,
            cols: self.cols,
            row_total: self.row_total,
            col_total: self.col_total,
            base: self.base,
            step0: self.step[0],
            step1: self.step[1],
            step2: self.step[2],
            row_stride: self.rs,
            col_stride: self.cs,
        }
    }
}

/// A kernel: kind, UB bytes, parameters, bodies (grid + instructions; `end`
/// is appended).
pub struct K {
    pub kind: KernelKind,
    pub ub_bytes: u32,
    pub params: Vec<(DType, ParamAccess)>,
    pub bodies: Vec<([u32; 3], Vec<Instr>)>,
}

impl K {
    pub fn vector(
        ub_bytes: u32,
        params: &[(DType, ParamAccess)],
        grid: [u32; 3],
        code: Vec<Instr>,
    ) -> K {
        K {
            kind: KernelKind::Vector,
            ub_bytes,
            params: params.to_vec(),
            bodies: vec![(grid, code)],
        }
    }
}

/// Builds a module of `kernels`.
pub fn build(kernels: Vec<K>) -> Vec<u8> {
    let mut mb = ModuleBuilder::new();
    for (i, k) in kernels.into_iter().enumerate() {
        let bodies = k
            .bodies
            .into_iter()
            .map(|(grid, code)| {
                let mut w = CodeWriter::new();
                for ins in &code {
                    w.push(ins, WaitMask::NONE);
                }
                w.push(&Instr::End {}, WaitMask::NONE);
                BodyDef { grid, code: w }
            })
            .collect();
        mb.add_kernel(KernelDef {
            name: format!("k{i}"),
            kind: k.kind,
            ub_bytes: k.ub_bytes,
            params: k
                .params
                .iter()
                .enumerate()
                .map(|(j, (dtype, access))| ParamDef {
                    name: format!("p{j}"),
                    dtype: *dtype,
                    access: *access,
                    dims: vec![],
                })
                .collect(),
            bodies,
        })
        .expect("unique kernel name");
    }
    mb.finish()
}

/// A byte buffer aligned to 8 bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Buf {
    words: Vec<u64>,
    len: usize,
}

impl Buf {
    pub fn zeroed(len: usize) -> Buf {
        Buf {
            words: vec![0; len.div_ceil(8)],
            len,
        }
    }
    pub fn from_bytes(b: &[u8]) -> Buf {
        let mut x = Buf::zeroed(b.len());
        x.bytes_mut().copy_from_slice(b);
        x
    }
    pub fn from_f32(v: &[f32]) -> Buf {
        Buf::from_bytes(&v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>())
    }
    pub fn from_i32(v: &[i32]) -> Buf {
        Buf::from_bytes(&v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>())
    }
    pub fn from_u16(v: &[u16]) -> Buf {
        Buf::from_bytes(&v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>())
    }
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `words` holds at least `len` initialised bytes.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.len) }
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), self.len) }
    }
    pub fn ptr(&mut self) -> *mut u8 {
        self.words.as_mut_ptr().cast()
    }
    pub fn f32s(&self) -> Vec<f32> {
        self.bytes()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
    pub fn i32s(&self) -> Vec<i32> {
        self.bytes()
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
    pub fn u16s(&self) -> Vec<u16> {
        self.bytes()
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
}

/// A heap-allocated default-size UB.
pub fn ub() -> Box<UbStorage> {
    // SAFETY: all-zero bytes are a valid `[u8; N]`.
    unsafe { Box::<UbStorage>::new_zeroed().assume_init() }
}

pub fn program(bytes: &[u8], k: usize) -> Program {
    let m = Module::parse(bytes).expect("parse");
    let vk = verify_kernel(&m, k, &DeviceLimits::DEFAULT).expect("verify");
    Program::new(&vk).expect("predecode")
}

fn writable(bytes: &[u8], k: usize) -> Vec<bool> {
    let m = Module::parse(bytes).unwrap();
    m.kernel(k)
        .unwrap()
        .params()
        .map(|p| p.access.writable())
        .collect()
}

/// Calls `f` with kernel `k`'s program, a launch over `bufs` and a UB.
fn with_launch<R>(
    bytes: &[u8],
    k: usize,
    bufs: &mut [Buf],
    f: impl FnOnce(&Program, &KernelArgs<'_>, &mut [u8]) -> R,
) -> R {
    let m = Module::parse(bytes).expect("parse");
    let vk = verify_kernel(&m, k, &DeviceLimits::DEFAULT).expect("verify");
    let prog: Program = Program::new(&vk).expect("predecode");
    let w = writable(bytes, k);
    let gm: Vec<GmBuf<'_>> = bufs
        .iter_mut()
        .zip(&w)
        .map(|(b, w)| {
            if *w {
                GmBuf::from_mut_slice(b.bytes_mut())
            } else {
                GmBuf::from_slice(b.bytes())
            }
        })
        .collect();
    let launch = KernelArgs::new(&vk, gm).expect("launch");
    let mut ub = ub();
    f(&prog, &launch, ub.as_mut_slice())
}

/// Runs kernel `k` with `bufs`, blocks `0..block_dim` one after the other.
pub fn run_seq(
    bytes: &[u8],
    k: usize,
    bufs: &mut [Buf],
    block_dim: u32,
) -> Result<RunStats, ExecError> {
    with_launch(bytes, k, bufs, |prog, launch, ub| {
        run_all_blocks_sequentially(prog, launch, block_dim, ub)
    })
}

/// Runs kernel `k` with `bufs` as ranges of `chunk` tiles
/// ([`run_tile_ranges`]), the last range first, then every other one
/// backwards: the order a runtime's claims may take.
pub fn run_ranges(
    bytes: &[u8],
    k: usize,
    bufs: &mut [Buf],
    chunk: u64,
) -> Result<RunStats, ExecError> {
    with_launch(bytes, k, bufs, |prog, launch, ub| {
        let end = prog.total_tiles();
        let starts: Vec<u64> = (0..end).step_by(chunk as usize).collect();
        let mut ranges = starts.iter().rev().map(|&s| (s, s + chunk));
        let mut total = run_tile_ranges(prog, launch, ub, || ranges.next())?;
        // Ranges past the end run nothing.
        total += run_tile_range(prog, launch, end, end + chunk, ub)?;
        Ok(total)
    })
}

/// `std::sync::Barrier` as the executor's barrier.
pub struct StdBarrier(pub std::sync::Barrier);

impl Barrier for StdBarrier {
    fn wait(&self) {
        self.0.wait();
    }
}

#[derive(Clone, Copy)]
struct Raw(usize, usize, bool);

/// Runs kernel `k` with `bufs` on `block_dim` threads at once, each with its
/// own raw-pointer `GmBuf`s, `Launch` and UB.
pub fn run_threads(
    bytes: &[u8],
    k: usize,
    bufs: &mut [Buf],
    block_dim: u32,
) -> Result<RunStats, ExecError> {
    let m = Module::parse(bytes).expect("parse");
    let vk = verify_kernel(&m, k, &DeviceLimits::DEFAULT).expect("verify");
    let prog: Program = Program::new(&vk).expect("predecode");
    let w = writable(bytes, k);
    let raws: Vec<Raw> = bufs
        .iter_mut()
        .zip(&w)
        .map(|(b, w)| Raw(b.ptr() as usize, b.len, *w))
        .collect();
    let barrier = StdBarrier(std::sync::Barrier::new(block_dim as usize));
    let results: Vec<Result<RunStats, ExecError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..block_dim)
            .map(|b| {
                let (vk, prog, raws, barrier) = (&vk, &prog, &raws, &barrier);
                s.spawn(move || {
                    // SAFETY: the buffers outlive the scope, nothing else
                    // touches them while the threads run, and the test
                    // kernels' blocks write disjoint elements except
                    // through `store_add`.
                    let gm = raws
                        .iter()
                        .map(|r| unsafe { GmBuf::from_raw_parts(r.0 as *mut u8, r.1, r.2) });
                    let launch = KernelArgs::new(vk, gm).expect("launch");
                    let mut ub = ub();
                    run_block(prog, &launch, b, block_dim, ub.as_mut_slice(), barrier)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut total = RunStats::default();
    for r in results {
        total += r?;
    }
    Ok(total)
}

/// Block counts every multi-block test uses, plus one above `tiles`.
pub fn block_counts(tiles: u32) -> Vec<u32> {
    vec![1, 2, 3, 7, tiles + 5]
}

/// Runs `k` once per block count, sequentially and on threads, and checks
/// every output buffer equals the one-block result. Returns that result.
pub fn check_multi_block(bytes: &[u8], k: usize, inputs: &[Buf], tiles: u32) -> Vec<Buf> {
    let mut reference = inputs.to_vec();
    let st = run_seq(bytes, k, &mut reference, 1).expect("one block");
    for dim in block_counts(tiles) {
        let mut a = inputs.to_vec();
        let sa = run_seq(bytes, k, &mut a, dim).expect("sequential blocks");
        assert_eq!(a, reference, "sequential, {dim} blocks");
        assert_eq!(sa, st, "stats, sequential, {dim} blocks");
        let mut b = inputs.to_vec();
        let sb = run_threads(bytes, k, &mut b, dim).expect("threaded blocks");
        assert_eq!(b, reference, "threads, {dim} blocks");
        assert_eq!(sb, st, "stats, threads, {dim} blocks");
    }
    let kind = program(bytes, k).kind();
    for chunk in [1, 2, 3, 7] {
        let mut c = inputs.to_vec();
        let sc = run_ranges(bytes, k, &mut c, chunk);
        if kind == KernelKind::Sequence {
            assert!(
                matches!(
                    sc,
                    Err(ExecError::Launch(dvm_isa::verify::LaunchError::Staged))
                ),
                "a sequence kernel does not run by ranges"
            );
            continue;
        }
        assert_eq!(c, reference, "ranges of {chunk} tiles");
        assert_eq!(sc.expect("ranges"), st, "stats, ranges of {chunk} tiles");
    }
    reference
}

/// Deterministic pseudo-random numbers (splitmix64).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi).
    pub fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
    }
    pub fn f32s(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32(lo, hi)).collect()
    }
}
