//! The tile loop: one block of a launch runs its share of the tiles.
//!
//! Tiles are split into contiguous runs, one per block, as DVM does: of `T`
//! tiles and `B` blocks, block `b` runs tiles `[b·T/B, (b+1)·T/B)`
//! (balanced: runs differ by at most one tile). Tile `t` of a body with grid
//! `(g0, g1, g2)` has coordinates `(t / (g1·g2), (t / g2) mod g1, t mod g2)`.
//!
//! Kernel kinds:
//! - vector, cube, mix: one body, its tiles split across the blocks;
//! - parallel: the tile ranges of all bodies concatenated into one flat
//!   range and split across the blocks (different cores run different
//!   bodies);
//! - sequence: bodies in order, each split across all blocks, with a
//!   [`Barrier`] wait between stages.

use core::fmt;

use dvm_isa::verify::{LaunchError, UB_ALIGN};
use dvm_isa::{DeviceLimits, KernelKind};

use dvm_isa::GmPattern;

use crate::gm::{
    full_run, gather_tile, load_tile, load_tile_fused, load_tile_map, load_tile_map_rows,
    store_add_tile, store_tile, store_tile_affine, store_tile_scaled, store_tile_streaming,
    BindError, GmBuf, GmFault, KernelArgs, Prefetch, StoreMap,
};
use crate::ops::{UbArgs, UbOp};
use crate::plan::{BodyPlan, FusedLoad, Launched, LoadPair};
use crate::predecode::Program;
use crate::vinstr::VInstr;

/// Bytes of the default UB: an Ascend 910B UB, 192 KiB.
pub const UB_DEFAULT_BYTES: usize = DeviceLimits::DEFAULT.ub_bytes as usize;

/// A statically sized UB, aligned to [`UB_ALIGN`] (64) bytes.
#[repr(C, align(64))]
#[derive(Clone)]
pub struct UbStorage<const N: usize = UB_DEFAULT_BYTES>(pub [u8; N]);

impl<const N: usize> UbStorage<N> {
    /// A zeroed UB.
    pub const fn new() -> UbStorage<N> {
        UbStorage([0; N])
    }

    /// The UB as a slice (64-byte aligned).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl<const N: usize> Default for UbStorage<N> {
    fn default() -> Self {
        UbStorage::new()
    }
}

impl<const N: usize> fmt::Debug for UbStorage<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UbStorage<{N}>")
    }
}

/// A barrier across the blocks of one launch: every block calls
/// [`Barrier::wait`] between the stages of a sequence kernel, and no block
/// returns from it before all have called it.
pub trait Barrier {
    /// Blocks until every block of the launch has reached the barrier.
    fn wait(&self);

    /// Records that a block of the launch failed, so that the others stop
    /// working at their next barrier ([`Barrier::aborted`]). A block calls
    /// it before it reaches that barrier. The default does nothing.
    fn abort(&self) {}

    /// Whether a block of the launch called [`Barrier::abort`]: after a
    /// [`Barrier::wait`] that the failed block reached after its `abort`,
    /// every block sees `true`. The default is `false`.
    fn aborted(&self) -> bool {
        false
    }
}

/// The barrier of a single-block launch (or of blocks run one after the
/// other): does nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoBarrier;

impl Barrier for NoBarrier {
    fn wait(&self) {}
}

/// What a block did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RunStats {
    /// Tiles run.
    pub tiles: u64,
    /// Virtual instructions executed (summed over tiles).
    pub instrs: u64,
}

impl core::ops::AddAssign for RunStats {
    fn add_assign(&mut self, o: RunStats) {
        self.tiles += o.tiles;
        self.instrs += o.instrs;
    }
}

/// Why a block did not run (or stopped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecError {
    /// The UB is too small or misaligned ([`LaunchError::Ub`]), or the block
    /// index is outside the block count ([`LaunchError::Block`]).
    Launch(LaunchError),
    /// The launch's buffers do not fit the program.
    Bind(BindError),
    /// A tile's box failed its bounds check. Unreachable for a verified
    /// kernel: reported instead of touching memory outside a buffer.
    Fault {
        /// Body.
        body: u32,
        /// Index of the virtual instruction in the body.
        instr: u32,
        /// Tile index in the body.
        tile: u32,
        /// What failed.
        fault: GmFault,
    },
}

impl fmt::Display for ExecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecError::Launch(e) => write!(f, "{e}"),
            ExecError::Bind(e) => write!(f, "{e}"),
            ExecError::Fault {
                body,
                instr,
                tile,
                fault,
            } => write!(f, "body {body}, instruction {instr}, tile {tile}: {fault}"),
        }
    }
}

impl core::error::Error for ExecError {}

impl From<LaunchError> for ExecError {
    fn from(e: LaunchError) -> Self {
        ExecError::Launch(e)
    }
}

impl From<BindError> for ExecError {
    fn from(e: BindError) -> Self {
        ExecError::Bind(e)
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for ExecError {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "{}", defmt::Display2Format(self))
    }
}

/// The tiles `[start, end)` of `total` that block `idx` of `dim` runs.
#[inline]
pub fn block_range(total: u64, idx: u32, dim: u32) -> (u64, u64) {
    if dim == 0 {
        return (0, 0);
    }
    let at = |b: u32| ((b as u128 * total as u128) / dim as u128) as u64;
    (at(idx.min(dim)), at(idx.saturating_add(1).min(dim)))
}

/// Checks what is per block: block index, UB, buffers against the program.
fn check<const N: usize, const B: usize>(
    program: &Program<N, B>,
    launch: &KernelArgs<'_>,
    block_idx: u32,
    block_dim: u32,
    ub: &[u8],
) -> Result<(), ExecError> {
    check_block(program, block_idx, block_dim)?;
    let need = program.ub_bytes();
    let align = 1usize << (ub.as_ptr() as usize).trailing_zeros().min(12);
    if ub.len() < need as usize || align < UB_ALIGN {
        return Err(LaunchError::Ub {
            need,
            have: ub.len(),
            align,
        }
        .into());
    }
    program.params().check(launch.bufs())?;
    Ok(())
}

fn check_block<const N: usize, const B: usize>(
    program: &Program<N, B>,
    block_idx: u32,
    block_dim: u32,
) -> Result<(), ExecError> {
    dvm_isa::verify::check_blocks(block_dim, program.max_blocks())?;
    if block_idx >= block_dim {
        return Err(LaunchError::Block {
            idx: block_idx,
            dim: block_dim,
        }
        .into());
    }
    Ok(())
}

/// Runs block `block_idx` of `block_dim` of `program` over the buffers of
/// `launch`, with `ub` as this core's unified buffer.
///
/// For a sequence kernel the block calls `barrier.wait()` between stages;
/// once the block index is valid it does so at every stage even after an
/// error (skipping the work), so sibling blocks never deadlock.
///
/// # Errors
/// - [`ExecError::Launch`]: `block_dim` is zero or `block_idx` not below
///   it; `ub` is smaller than the kernel's UB or not 64-byte aligned;
/// - [`ExecError::Bind`]: `launch` was bound for a kernel whose buffers do
///   not fit this program;
/// - [`ExecError::Fault`]: a tile's box left a buffer or the UB (never for
///   a verified kernel; the tile's earlier instructions have run).
pub fn run_block<const N: usize, const B: usize>(
    program: &Program<N, B>,
    launch: &KernelArgs<'_>,
    block_idx: u32,
    block_dim: u32,
    ub: &mut [u8],
    barrier: &dyn Barrier,
) -> Result<RunStats, ExecError> {
    if program.kind() == KernelKind::Sequence {
        check_block(program, block_idx, block_dim)?;
        let mut result = check(program, launch, block_idx, block_dim, ub);
        let mut stats = RunStats::default();
        let stages = program.body_count();
        for s in 0..stages {
            if result.is_ok() {
                match run_stage(program, launch, s, block_idx, block_dim, ub) {
                    Ok(st) => stats += st,
                    Err(e) => result = Err(e),
                }
            }
            if s + 1 < stages {
                barrier.wait();
            }
        }
        return result.map(|()| stats);
    }
    check(program, launch, block_idx, block_dim, ub)?;
    run_flat(program, launch.bufs(), block_idx, block_dim, ub)
}

/// Runs blocks `first`, `first + step`, `first + 2·step`, … (those below
/// `block_dim`) of `program` one after the other on this core, with `ub` as
/// its unified buffer: the share of one core of `step` cores that run the
/// launch's blocks round-robin (`step` 0 counts as 1). A core with no
/// block (`first ≥ block_dim`) runs nothing.
///
/// For a sequence kernel, every core runs stage `s` of all its blocks,
/// then calls `barrier.wait()` (between stages), so every block of the
/// launch finishes a stage before any starts the next; the core calls it
/// at every stage boundary even after an error or with no blocks, so the
/// other cores never deadlock. After an error it calls
/// [`Barrier::abort`], and once [`Barrier::aborted`] is true it skips the
/// rest of its work (returning the tiles it ran): the other cores stop at
/// the next barrier at the latest.
///
/// # Errors
/// As [`run_block`] (`block_dim` zero is [`ExecError::Launch`]); stops at
/// the first error of this core.
pub fn run_blocks_strided<const N: usize, const B: usize>(
    program: &Program<N, B>,
    launch: &KernelArgs<'_>,
    first: u32,
    step: u32,
    block_dim: u32,
    ub: &mut [u8],
    barrier: &dyn Barrier,
) -> Result<RunStats, ExecError> {
    let blocks = || (first..block_dim).step_by(step.max(1) as usize);
    let mut stats = RunStats::default();
    if program.kind() == KernelKind::Sequence {
        check_block(program, 0, block_dim)?;
        let mut result = check(program, launch, 0, block_dim, ub);
        if result.is_err() {
            barrier.abort();
        }
        let stages = program.body_count();
        for s in 0..stages {
            if result.is_ok() && !barrier.aborted() {
                for b in blocks() {
                    match run_stage(program, launch, s, b, block_dim, ub) {
                        Ok(st) => stats += st,
                        Err(e) => {
                            result = Err(e);
                            barrier.abort();
                            break;
                        }
                    }
                }
            }
            if s + 1 < stages {
                barrier.wait();
            }
        }
        return result.map(|()| stats);
    }
    check(program, launch, 0, block_dim, ub)?;
    for b in blocks() {
        stats += run_flat(program, launch.bufs(), b, block_dim, ub)?;
    }
    Ok(stats)
}

/// Runs every block `0..block_dim` one after the other on this core (for
/// tests and single-core devices); a sequence kernel runs stage by stage,
/// every block finishing a stage before the next starts. Gives the same
/// result as any concurrent execution of the same blocks.
///
/// # Errors
/// As [`run_block`]; stops at the first error.
pub fn run_all_blocks_sequentially<const N: usize, const B: usize>(
    program: &Program<N, B>,
    launch: &KernelArgs<'_>,
    block_dim: u32,
    ub: &mut [u8],
) -> Result<RunStats, ExecError> {
    // One core taking every block in turn: stage by stage, so the
    // barriers between stages have nothing to wait for.
    run_blocks_strided(program, launch, 0, 1, block_dim, ub, &NoBarrier)
}

/// One stage of a sequence kernel: body `s`'s tiles split across blocks.
fn run_stage<const N: usize, const B: usize>(
    program: &Program<N, B>,
    launch: &KernelArgs<'_>,
    s: usize,
    block_idx: u32,
    block_dim: u32,
    ub: &mut [u8],
) -> Result<RunStats, ExecError> {
    let Some(info) = program.body_info(s) else {
        return Ok(RunStats::default());
    };
    let (start, end) = block_range(info.tiles as u64, block_idx, block_dim);
    run_tiles(program, s, launch.bufs(), start as u32, end as u32, ub)
}

/// Runs tiles `[start, end)` (clamped to the kernel's tiles) of `program`,
/// a kernel of any kind but sequence, over the buffers of `launch`, with
/// `ub` as this core's unified buffer. The tiles are numbered as blocks
/// split them: the bodies' tile ranges one after the other, each in
/// row-major order of its grid. Any split of the tiles into ranges, run
/// in any order or at once on several cores, gives the same result as
/// [`run_block`] does for the blocks of the kernel (its tiles write
/// disjoint elements): a runtime can hand out chunks of tiles to
/// whichever core is free, so that a core that runs slower (taken by
/// another process, or a smaller core) does not hold up the launch
/// ([`run_tile_ranges`]).
///
/// # Errors
/// - [`ExecError::Launch`]: [`LaunchError::Staged`] for a sequence
///   kernel; `ub` is smaller than the kernel's UB or not 64-byte aligned;
/// - [`ExecError::Bind`] and [`ExecError::Fault`]: as [`run_block`].
pub fn run_tile_range<const N: usize, const B: usize>(
    program: &Program<N, B>,
    launch: &KernelArgs<'_>,
    start: u64,
    end: u64,
    ub: &mut [u8],
) -> Result<RunStats, ExecError> {
    let mut once = Some((start, end));
    run_tile_ranges(program, launch, ub, || once.take())
}

/// [`run_tile_range`] for every range `next` gives, until it gives `None`
/// (a runtime's claims of chunks of tiles); the launch is checked once.
///
/// # Errors
/// As [`run_tile_range`]; stops at the first error.
pub fn run_tile_ranges<const N: usize, const B: usize>(
    program: &Program<N, B>,
    launch: &KernelArgs<'_>,
    ub: &mut [u8],
    mut next: impl FnMut() -> Option<(u64, u64)>,
) -> Result<RunStats, ExecError> {
    if program.kind() == KernelKind::Sequence {
        return Err(LaunchError::Staged.into());
    }
    check(program, launch, 0, 1, ub)?;
    let total = program.total_tiles();
    let mut stats = RunStats::default();
    while let Some((start, end)) = next() {
        stats += run_flat_range(program, launch.bufs(), start.min(total), end.min(total), ub)?;
    }
    Ok(stats)
}

/// The flat range of all bodies (one body for the single-body kinds).
fn run_flat<const N: usize, const B: usize>(
    program: &Program<N, B>,
    bufs: &[GmBuf<'_>],
    block_idx: u32,
    block_dim: u32,
    ub: &mut [u8],
) -> Result<RunStats, ExecError> {
    let (start, end) = block_range(program.total_tiles(), block_idx, block_dim);
    run_flat_range(program, bufs, start, end, ub)
}

/// Tiles `[start, end)` of the flat range of all bodies.
fn run_flat_range<const N: usize, const B: usize>(
    program: &Program<N, B>,
    bufs: &[GmBuf<'_>],
    start: u64,
    end: u64,
    ub: &mut [u8],
) -> Result<RunStats, ExecError> {
    let mut stats = RunStats::default();
    let mut off = 0u64;
    for b in 0..program.body_count() {
        let tiles = program.body_info(b).map_or(0, |i| i.tiles as u64);
        let (lo, hi) = (start.max(off), end.min(off + tiles));
        if lo < hi {
            stats += run_tiles(program, b, bufs, (lo - off) as u32, (hi - off) as u32, ub)?;
        }
        off += tiles;
    }
    Ok(stats)
}

/// The coordinates of the tile after `c` (row-major, dimension 2 fastest).
#[inline(always)]
fn next_coord(mut c: [u32; 3], g1: u32, g2: u32) -> [u32; 3] {
    c[2] += 1;
    if c[2] == g2 {
        c[2] = 0;
        c[1] += 1;
        if c[1] == g1 {
            c[1] = 0;
            c[0] += 1;
        }
    }
    c
}

/// Runs `op` a row at a time (`run(ub, args, r)` with row `r`'s
/// arguments, [`UbOp::row`]), prefetching `early` spread over the rows, a
/// row's part before each.
#[inline(always)]
fn by_rows(
    op: &UbOp,
    early: &Prefetch,
    mut run: impl FnMut(&mut [u8], &UbArgs, u32),
    ub: &mut [u8],
) {
    let rows = op.args.n;
    let mut step = early.spread(rows as usize);
    for r in 0..rows {
        step();
        if let Some(a) = op.row(r) {
            run(ub, &a, r);
        }
    }
}

/// Runs tiles `[start, end)` of body `b`: each tile in the forms of the
/// body's plan ([`crate::plan::BodyPlan`]) that the launch's buffers allow,
/// else through UB instruction by instruction.
fn run_tiles<const N: usize, const B: usize>(
    program: &Program<N, B>,
    b: usize,
    bufs: &[GmBuf<'_>],
    start: u32,
    end: u32,
    ub: &mut [u8],
) -> Result<RunStats, ExecError> {
    let Some(info) = program.body_info(b) else {
        return Ok(RunStats::default());
    };
    let code = program.body(b);
    let [_, g1, g2] = info.grid;
    if start >= end || g1 == 0 || g2 == 0 {
        return Ok(RunStats::default());
    }
    let run = TileRun {
        code,
        bufs,
        body: b,
        end,
        g1,
        g2,
        plan: &info.plan,
        launched: info.plan.launched(code, bufs),
    };
    // A copy: the forwarded tile loop reads it from registers.
    let forward = run.launched.forward.copied();
    let mut c = [start / g2 / g1, (start / g2) % g1, start % g2];
    let mut t = start;
    while t < end {
        let forwarded = match &forward {
            Some(f) => f
                .run_tile(code, bufs, c, ub.len())
                .map_err(|(i, e)| run.fault(i as usize, t, e))?,
            None => false,
        };
        if !forwarded {
            run.staged_tile(t, c, ub)?;
        }
        t += 1;
        c = next_coord(c, g1, g2);
    }
    let tiles = (end - start) as u64;
    Ok(RunStats {
        tiles,
        instrs: tiles * code.len() as u64,
    })
}

/// One call's run over a body's tiles: the body, the launch's buffers and
/// the plan's forms those buffers allow.
struct TileRun<'a, 'b> {
    code: &'a [VInstr],
    bufs: &'a [GmBuf<'b>],
    body: usize,
    /// The end of the tile range.
    end: u32,
    g1: u32,
    g2: u32,
    plan: &'a BodyPlan,
    launched: Launched<'a>,
}

/// The next tile's prefetches over one tile: an equal share for each op
/// run by rows and the streaming store, `left` keeping what is not issued
/// yet.
#[derive(Default)]
struct Shares {
    left: Option<Prefetch>,
    taken: usize,
}

impl TileRun<'_, '_> {
    /// A tile's box left its buffer or the UB: never for a verified
    /// kernel, so with the `extra-checks` feature a panic (a verifier gap).
    fn fault(&self, instr: usize, tile: u32, fault: GmFault) -> ExecError {
        if cfg!(feature = "extra-checks") {
            panic!(
                "verifier gap: body {} instruction {instr} tile {tile}: {fault}",
                self.body
            );
        }
        ExecError::Fault {
            body: self.body as u32,
            instr: instr as u32,
            tile,
            fault,
        }
    }

    /// The buffer of `pattern` (instruction `i`, tile `t`).
    #[inline]
    fn buf(&self, pattern: &GmPattern, i: usize, t: u32) -> Result<&GmBuf<'_>, ExecError> {
        self.bufs
            .get(pattern.buf as usize)
            .ok_or_else(|| self.fault(i, t, GmFault::Operand))
    }

    /// The loads of the tile after tile `t` (at `c`), if it is in range.
    fn next_loads(&self, t: u32, c: [u32; 3]) -> Prefetch {
        let mut pf = Prefetch::NONE;
        if t + 1 < self.end {
            let next = next_coord(c, self.g1, self.g2);
            for v in self.code {
                if let VInstr::Load { pattern: lp, .. } = v {
                    if let Some(lb) = self.bufs.get(lp.buf as usize) {
                        pf.add_load(lp, next, lb);
                    }
                }
            }
        }
        pf
    }

    /// The next share of the next tile's loads for an op run by rows.
    fn share(&self, s: &mut Shares, t: u32, c: [u32; 3]) -> Prefetch {
        let rest = s.left.take().unwrap_or_else(|| self.next_loads(t, c));
        let ops = self.plan.row_ops as usize;
        let (early, rest) = rest.split((1, (ops + 1).saturating_sub(s.taken).max(1)));
        s.taken += 1;
        s.left = Some(rest);
        early
    }

    /// Runs tile `t` (at `c`) through UB, instruction by instruction except
    /// where a fused load takes a full tile.
    ///
    /// A body with a streaming store prefetches the next tile's loads while
    /// it stores and, when it has ops that run a row at a time
    /// ([`UbOp::row`]: a norm's middle, a binary op and its row sums), an
    /// equal share of them over each such op, a row's part before each
    /// row: the loads of the next tile are then in flight while the tile
    /// computes, not only while it is stored.
    fn staged_tile(&self, t: u32, c: [u32; 3], ub: &mut [u8]) -> Result<(), ExecError> {
        let prefetching = self.plan.prefetch_at.is_some();
        // Instructions before this index already ran, fused into one.
        let mut skip_to = 0;
        let mut shares = Shares::default();
        for (i, v) in self.code.iter().enumerate() {
            if i < skip_to {
                continue;
            }
            match v {
                VInstr::Ub(op) if prefetching && op.by_rows() => {
                    let early = self.share(&mut shares, t, c);
                    by_rows(op, &early, |ub, a, _| (op.handler)(ub, a), ub);
                }
                VInstr::Ub(op) => op.run(ub),
                VInstr::Load { pattern, pad } => {
                    let buf = self.buf(pattern, i, t)?;
                    if let Some(p) = self.launched.pair.filter(|p| p.at as usize == i) {
                        if self.load_pair(p, pattern, buf, &mut shares, t, c, ub)? {
                            skip_to = i + 3;
                            continue;
                        }
                    }
                    if let Some(l) = self.launched.load.filter(|l| l.fold().at as usize == i) {
                        if let Some(ran) = self.fused_load(l, pattern, buf, t, c, ub)? {
                            skip_to = i + ran;
                            continue;
                        }
                    }
                    load_tile(pattern, *pad, c, buf, ub).map_err(|e| self.fault(i, t, e))?;
                }
                VInstr::Store {
                    pattern,
                    stream,
                    map,
                } => {
                    let buf = self.buf(pattern, i, t)?;
                    // Streamed: what to prefetch on the way (the next
                    // tile's loads, at the body's last streaming store;
                    // what the ops run by rows left of them).
                    let pf = stream.then(|| {
                        if self.plan.prefetch_at == Some(i as u32) {
                            shares.left.take().unwrap_or_else(|| self.next_loads(t, c))
                        } else {
                            Prefetch::NONE
                        }
                    });
                    match (map, &pf) {
                        (StoreMap::Scale(v), pf) => {
                            store_tile_scaled(pattern, c, buf, ub, *v, pf.as_ref())
                        }
                        (StoreMap::Affine(m), pf) => {
                            store_tile_affine(pattern, c, buf, ub, m, pf.as_ref())
                        }
                        (StoreMap::Copy, Some(pf)) => store_tile_streaming(pattern, c, buf, ub, pf),
                        (StoreMap::Copy, None) => store_tile(pattern, c, buf, ub),
                    }
                    .map_err(|e| self.fault(i, t, e))?;
                }
                VInstr::StoreAdd(pattern) => {
                    let buf = self.buf(pattern, i, t)?;
                    store_add_tile(pattern, c, buf, ub).map_err(|e| self.fault(i, t, e))?;
                }
                VInstr::Gather { table, idx, rows } => {
                    let buf = self.buf(table, i, t)?;
                    gather_tile(table, *idx, *rows, c, buf, ub).map_err(|e| self.fault(i, t, e))?;
                }
                VInstr::Barrier => {}
            }
        }
        Ok(())
    }

    /// The fused pair of loads `p` (the first at `pattern` in `buf`) with
    /// the op after them on tile `t`, when both boxes are full runs;
    /// `false` when it did nothing.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn load_pair(
        &self,
        p: &LoadPair,
        pattern: &GmPattern,
        buf: &GmBuf<'_>,
        shares: &mut Shares,
        t: u32,
        c: [u32; 3],
        ub: &mut [u8],
    ) -> Result<bool, ExecError> {
        let i = p.at as usize;
        let (q, op, pair) = (&p.second, &p.op, p.handler);
        let Some(qbuf) = self.bufs.get(q.buf as usize) else {
            return Ok(false);
        };
        let runs = (
            full_run(pattern, c, buf, ub.len()).map_err(|e| self.fault(i, t, e))?,
            full_run(q, c, qbuf, ub.len()).map_err(|e| self.fault(i + 1, t, e))?,
        );
        let (Some(x), Some(y)) = runs else {
            return Ok(false);
        };
        if self.plan.prefetch_at.is_some() {
            let early = self.share(shares, t, c);
            let row = op.args.cols as usize * q.dtype.size() as usize;
            by_rows(
                op,
                &early,
                |ub, a, r| {
                    let span = r as usize * row..(r as usize + 1) * row;
                    if let (Some(xr), Some(yr)) = (x.get(span.clone()), y.get(span)) {
                        pair(ub, xr, yr, a);
                    }
                },
                ub,
            );
        } else {
            pair(ub, x, y, &op.args);
        }
        Ok(true)
    }

    /// The fused load `l` (at `pattern` in `buf`) on tile `t`, in the
    /// largest of its forms the tile allows: how many instructions it ran,
    /// or `None` when the tile is not full (the load then runs alone).
    #[inline]
    fn fused_load(
        &self,
        l: &FusedLoad,
        pattern: &GmPattern,
        buf: &GmBuf<'_>,
        t: u32,
        c: [u32; 3],
        ub: &mut [u8],
    ) -> Result<Option<usize>, ExecError> {
        let i = l.fold().at as usize;
        let fault = |e| self.fault(i, t, e);
        if let FusedLoad::SoftmaxRows(fold, map, tail) = l {
            let si = tail.store_at as usize;
            let out = self.buf(&tail.store, si, t)?;
            let pf = tail.stream.then(|| {
                if self.plan.prefetch_at == Some(si as u32) {
                    self.next_loads(t, c)
                } else {
                    Prefetch::NONE
                }
            });
            if load_tile_map_rows(
                pattern,
                c,
                buf,
                ub,
                (fold.fold, &fold.args),
                ((map.handler, &map.args), tail.row),
                (tail.unary, &tail.unary_args),
                (&tail.store, out, pf.as_ref()),
            )
            .map_err(fault)?
            {
                return Ok(Some(5));
            }
        }
        if let FusedLoad::SoftmaxGm(fold, map) | FusedLoad::SoftmaxRows(fold, map, _) = l {
            if load_tile_map(
                pattern,
                c,
                buf,
                ub,
                (fold.fold, &fold.args),
                (map.handler, &map.args),
            )
            .map_err(fault)?
            {
                return Ok(Some(3));
            }
        }
        let fold = l.fold();
        if load_tile_fused(pattern, c, buf, ub, fold.load, &fold.args).map_err(fault)? {
            return Ok(Some(2));
        }
        Ok(None)
    }
}
