//! The CPU device: a persistent pool of worker threads, one per core, each
//! with its own UB, running `dvm-device` blocks.
//!
//! A launch publishes a job (the predecoded program and raw buffer
//! descriptors), wakes the parked workers and runs its share on the
//! calling thread.
//!
//! - **Claimed tiles** (every kernel kind but sequence): the participants
//!   claim chunks of tiles as they come free (`chunk_for`), so a core
//!   that runs slower, taken by another process on a shared machine,
//!   delays the launch by one chunk at most. The job has a seat per helper
//!   (`Shared::seats`): a worker that takes a seat runs chunks until none
//!   is left; one that finds no seat leaves the job alone. Once every tile
//!   is claimed the launcher closes the seats and waits only for the
//!   helpers that took one, so a launch never waits for a worker that was
//!   not running: when the worker shares the launcher's CPU, the launcher
//!   runs every tile itself.
//! - **Blocks** (sequence kernels, whose stages need barriers between
//!   them): every participant runs its block, and the launcher waits for
//!   every helper.
//!
//! Waits that could hold a CPU another thread needs (the launcher's wait
//! for its helpers, a worker's idle window after a job) spin for a few
//! microseconds, then yield (`SPIN`), so that a thread runnable on the
//! same CPU runs instead. An idle worker stays awake for `IDLE` after a
//! job, so back-to-back launches do not pay a wake-up each time, then
//! parks; a new worker parks until its first job.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dvm_device::exec::{run_block, run_tile_ranges, Barrier, ExecError, RunStats, UbStorage};
use dvm_device::gm::{GmBuf, KernelArgs};
use dvm_device::predecode::Program;
use dvm_isa::KernelKind;

/// One buffer of a launch, as raw parts.
#[derive(Clone, Copy, Debug)]
pub struct RawBuf {
    /// Base address.
    pub ptr: *mut u8,
    /// Length in bytes.
    pub len: usize,
    /// Whether the kernel may write it.
    pub writable: bool,
}

impl RawBuf {
    /// A read-only buffer over `data` (valid while `data` is).
    pub fn input<T>(data: &[T]) -> RawBuf {
        RawBuf {
            ptr: data.as_ptr().cast::<u8>().cast_mut(),
            len: std::mem::size_of_val(data),
            writable: false,
        }
    }

    /// A writable buffer over `data` (valid while `data` is).
    pub fn output<T>(data: &mut [T]) -> RawBuf {
        RawBuf {
            ptr: data.as_mut_ptr().cast::<u8>(),
            len: std::mem::size_of_val(data),
            writable: true,
        }
    }
}

struct Shared {
    /// Incremented for every job; workers compare with the last they ran.
    generation: AtomicU64,
    /// The current job's seats: open seats (helpers that may still join)
    /// in the high half, active helpers (joined and not yet done) in the
    /// low half ([`seats`]). A claimed-tile job opens a seat per helper;
    /// a job by blocks opens none and counts every helper active.
    seats: AtomicU64,
    /// The current job and the parked workers.
    board: Mutex<Board>,
    wake: Condvar,
    /// First error of the current job, as text (blocks report the first).
    error: Mutex<Option<ExecError>>,
    stats_tiles: AtomicU64,
    stats_instrs: AtomicU64,
    shutdown: AtomicU32,
    /// Workers that have finished starting up (their UB allocated).
    ready: AtomicUsize,
    /// The first tile not yet claimed, when the current job's tiles are
    /// claimed in chunks ([`JobSlot::chunk`]).
    next_tile: AtomicU64,
}

/// What the launcher and the workers share under [`Shared::board`].
struct Board {
    /// The current job, while its launch runs.
    job: Option<JobSlot>,
    /// Workers waiting on [`Shared::wake`]: a launch notifies only when
    /// some are.
    parked: usize,
}

/// The halves of [`Shared::seats`].
mod seats {
    /// One open seat.
    pub const SEAT: u64 = 1 << 32;
    /// The active helpers' half.
    pub const ACTIVE: u64 = SEAT - 1;

    /// Open seats of `word`.
    pub fn open(word: u64) -> u64 {
        word >> 32
    }

    /// Active helpers of `word`.
    pub fn active(word: u64) -> u64 {
        word & ACTIVE
    }
}

#[derive(Clone, Copy)]
struct JobSlot {
    program: usize,
    bufs: usize,
    nbufs: usize,
    block_dim: u32,
    barrier: usize,
    /// Tiles per claim, or 0 when every participant runs its block
    /// ([`chunk_for`]).
    chunk: u64,
}

/// Chunks of tiles each participant of a launch claims, about: enough that
/// a participant that runs slower (its core taken by another process, or
/// a smaller core) holds up the launch by one chunk at most, few enough
/// that claims (an atomic add on a line every participant writes) cost
/// nothing next to the tiles.
const CLAIMS_PER_PARTICIPANT: u64 = 16;

/// Fewest tiles per participant for which a launch claims
/// [`CLAIMS_PER_PARTICIPANT`] chunks each: below, a chunk is a
/// participant's share (`tiles / participants`, rounded up), so a launch
/// of a few tiles pays a claim or two per participant.
const MIN_TILES_PER_PARTICIPANT: u64 = 4;

/// Tiles per claim for `program`'s `tiles` tiles on `block_dim`
/// participants, or 0 for a launch by blocks: one participant, or a
/// sequence kernel (its stages need the barriers between them).
fn chunk_for(program: &Program, tiles: u64, block_dim: u32) -> u64 {
    let parts = block_dim as u64;
    if parts < 2 || program.kind() == KernelKind::Sequence {
        return 0;
    }
    if tiles < MIN_TILES_PER_PARTICIPANT * parts {
        return tiles.div_ceil(parts).max(1);
    }
    (tiles / (parts * CLAIMS_PER_PARTICIPANT)).max(1)
}

/// Waits until `done` holds: spins for [`SPIN`], then yields, so that a
/// thread runnable on this CPU (the one waited for, say) runs meanwhile.
fn wait_until(mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        if start.elapsed() < SPIN {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// A barrier over `n` participants that spins, then yields (stages are
/// short; the participants are running already).
pub struct SpinBarrier {
    n: u32,
    count: AtomicU32,
    generation: AtomicU32,
}

impl SpinBarrier {
    fn new(n: u32) -> SpinBarrier {
        SpinBarrier {
            n,
            count: AtomicU32::new(0),
            generation: AtomicU32::new(0),
        }
    }
}

impl Barrier for SpinBarrier {
    fn wait(&self) {
        let gen = self.generation.load(Ordering::Acquire);
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.count.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == gen {
            spins += 1;
            if spins < 1 << 12 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// The CPU device's worker pool.
pub struct CpuPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// The calling thread's UB (block 0).
    ub: Mutex<Box<UbStorage>>,
    /// Serialises launches: one job in flight at a time.
    launch_lock: Mutex<()>,
}

/// The most participants a pool has ([`CpuPool::new`] clamps to it): each
/// is a thread with its own UB, and a launch splits its tiles among them.
/// Well above the cores of any machine the VM targets; a count beyond it
/// would spawn threads to no purpose (or fail to).
pub const MAX_CORES: usize = 1024;

/// How long a wait spins before it yields ([`wait_until`], a worker's
/// idle window): long enough to see a helper finish, or the next launch of
/// a run come, without a system call; short enough that a thread waiting
/// for this CPU loses next to nothing.
const SPIN: Duration = Duration::from_micros(4);

/// How long an idle worker stays awake after a job (spinning for [`SPIN`],
/// then yielding) before parking, so that the next launch of a run finds
/// it awake. A new worker parks at once instead: what follows a pool's
/// creation is host work (the eager API's first window is recorded and
/// its fusion decided), and a worker awake beside it slows the caller's
/// thread (on a shared or virtual machine it takes the caller's core, or
/// its sibling's resources): the first launch pays one wake-up instead.
const IDLE: Duration = Duration::from_micros(200);

impl CpuPool {
    /// A pool of `cores` participants: the calling thread plus `cores − 1`
    /// workers, `cores` clamped to `1..=`[`MAX_CORES`] (one thread and one
    /// UB per participant: a larger count is a mistake, not a machine).
    /// If the system refuses a worker thread, the pool keeps those it
    /// started ([`CpuPool::cores`] says how many participate).
    pub fn new(cores: usize) -> CpuPool {
        let cores = cores.clamp(1, MAX_CORES);
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            seats: AtomicU64::new(0),
            board: Mutex::new(Board {
                job: None,
                parked: 0,
            }),
            wake: Condvar::new(),
            error: Mutex::new(None),
            stats_tiles: AtomicU64::new(0),
            stats_instrs: AtomicU64::new(0),
            shutdown: AtomicU32::new(0),
            ready: AtomicUsize::new(0),
            next_tile: AtomicU64::new(0),
        });
        // A thread the system refuses (a process or memory limit) leaves
        // the pool with the workers it has: fewer cores, not a failure.
        let workers = (1..cores)
            .map_while(|idx| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("dvm-cpu-{idx}"))
                    .spawn(move || worker(shared, idx as u32))
                    .ok()
            })
            .collect();
        CpuPool {
            shared,
            workers,
            ub: Mutex::new(Box::default()),
            launch_lock: Mutex::new(()),
        }
    }

    /// Waits (yielding, at most `limit`) until every worker has started
    /// and allocated its UB, so their start-up (page faults included) does
    /// not run alongside what the caller does next. Returns whether they
    /// all did in time; a pool works either way.
    pub fn wait_ready(&self, limit: Duration) -> bool {
        let start = Instant::now();
        while self.shared.ready.load(Ordering::Acquire) < self.workers.len() {
            if start.elapsed() >= limit {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }

    /// Participants (blocks a launch can use at once).
    pub fn cores(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `program` over `bufs` on up to [`CpuPool::cores`]
    /// participants, or on the caller alone when its tiles are not proven
    /// independent ([`Program::tiles_independent`]). A launch of any kind
    /// but sequence hands its tiles out in chunks to whichever participant
    /// is running, so a participant whose core runs slower, or is not
    /// running at all, does not hold up the others
    /// ([`dvm_device::exec::run_tile_ranges`]; each tile runs once, the
    /// result is the same); a sequence kernel runs a block per participant.
    ///
    /// # Errors
    /// The first [`ExecError`] any block reported (binding errors included).
    ///
    /// # Safety
    /// Every `RawBuf` must be valid for reads of `len` bytes (and writes, if
    /// `writable`) for the duration of the call, accessed by nothing else
    /// meanwhile; written buffers must not overlap any other buffer.
    pub unsafe fn launch(&self, program: &Program, bufs: &[RawBuf]) -> Result<RunStats, ExecError> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.launch_as(program, bufs, Mode::Normal) }
    }

    /// [`CpuPool::launch`] in `mode`.
    ///
    /// # Safety
    /// As [`CpuPool::launch`].
    unsafe fn launch_as(
        &self,
        program: &Program,
        bufs: &[RawBuf],
        mode: Mode,
    ) -> Result<RunStats, ExecError> {
        let _serial = self.launch_lock.lock().unwrap_or_else(|p| p.into_inner());
        let tiles = program.total_tiles();
        // Tiles not proven apart (a kernel from elsewhere than the
        // compiler, say) run on the caller alone: no two threads then
        // write the same element.
        let block_dim = if program.tiles_independent() {
            (self.cores() as u64).min(tiles.max(1)) as u32
        } else {
            1
        };
        let mut ub = self.ub.lock().unwrap_or_else(|p| p.into_inner());
        if block_dim == 1 {
            return run_one(
                program,
                bufs,
                0,
                1,
                ub.as_mut_slice(),
                &dvm_device::exec::NoBarrier,
                None,
            );
        }
        let barrier = SpinBarrier::new(block_dim);
        let helpers = u64::from(block_dim - 1);
        *self.shared.error.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.shared.stats_tiles.store(0, Ordering::Relaxed);
        self.shared.stats_instrs.store(0, Ordering::Relaxed);
        let chunk = chunk_for(program, tiles, block_dim);
        // Claimed tiles: a seat per helper, none active yet. By blocks:
        // every helper must run its block, so all count as active.
        let seats = match mode {
            _ if chunk == 0 => helpers,
            Mode::Normal => helpers * seats::SEAT,
            #[cfg(test)]
            Mode::NoSeats => 0,
            #[cfg(test)]
            Mode::HelpersOnly => helpers * seats::SEAT,
        };
        // Published with the job: the board's lock orders it.
        self.shared.next_tile.store(0, Ordering::Relaxed);
        let parked = {
            let mut board = self.shared.board.lock().unwrap_or_else(|p| p.into_inner());
            self.shared.seats.store(seats, Ordering::Relaxed);
            board.job = Some(JobSlot {
                program: program as *const Program as usize,
                bufs: bufs.as_ptr() as usize,
                nbufs: bufs.len(),
                block_dim,
                barrier: &barrier as *const SpinBarrier as usize,
                chunk,
            });
            self.shared.generation.fetch_add(1, Ordering::AcqRel);
            board.parked
        };
        // A worker about to park checks the generation under the board's
        // lock first: one not counted here sees this job without a wake-up.
        if parked > 0 {
            self.shared.wake.notify_all();
        }
        let claim = (chunk > 0).then_some((&self.shared.next_tile, chunk));
        let mine = if mode.launcher_runs() {
            run_one(
                program,
                bufs,
                0,
                block_dim,
                ub.as_mut_slice(),
                &barrier,
                claim,
            )
        } else {
            wait_until(|| seats::open(self.shared.seats.load(Ordering::Acquire)) == 0);
            Ok(RunStats::default())
        };
        // Every tile is claimed (or every block run): no helper joins from
        // here on, and only those that did are waited for.
        self.shared.seats.fetch_and(seats::ACTIVE, Ordering::AcqRel);
        wait_until(|| seats::active(self.shared.seats.load(Ordering::Acquire)) == 0);
        self.shared
            .board
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .job = None;
        let mut stats = mine?;
        if let Some(e) = self
            .shared
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            return Err(e);
        }
        stats.tiles += self.shared.stats_tiles.load(Ordering::Relaxed);
        stats.instrs += self.shared.stats_instrs.load(Ordering::Relaxed);
        Ok(stats)
    }
}

/// How a launch runs: [`Mode::Normal`] but in the pool's own tests, which
/// make the interleavings a busy machine produces happen every time.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The launcher claims tiles beside whichever helpers join.
    Normal,
    /// No seat opens: the launcher runs every tile, as when its helpers
    /// are not running until the launch ends.
    #[cfg(test)]
    NoSeats,
    /// The launcher waits until every seat is taken and runs no tile: the
    /// helpers run them all (claimed-tile launches only).
    #[cfg(test)]
    HelpersOnly,
}

impl Mode {
    /// Whether the launcher runs tiles (or its block) itself.
    fn launcher_runs(self) -> bool {
        match self {
            Mode::Normal => true,
            #[cfg(test)]
            Mode::NoSeats => true,
            #[cfg(test)]
            Mode::HelpersOnly => false,
        }
    }
}

/// Runs one block over raw buffers, or with `claim` (the launch's next
/// unclaimed tile and the chunk size), chunks of tiles until none is left.
fn run_one(
    program: &Program,
    bufs: &[RawBuf],
    block: u32,
    block_dim: u32,
    ub: &mut [u8],
    barrier: &dyn Barrier,
    claim: Option<(&AtomicU64, u64)>,
) -> Result<RunStats, ExecError> {
    // SAFETY: the launcher's contract (see `CpuPool::launch`) makes every
    // RawBuf valid for the launch and free of outside access; blocks of one
    // launch run at once only when the program's tiles are independent
    // (`Program::tiles_independent`): no element one writes is read or
    // written by another.
    let gm = bufs
        .iter()
        .map(|b| unsafe { GmBuf::from_raw_parts(b.ptr, b.len, b.writable) });
    match KernelArgs::with_signature(program.params(), gm) {
        Ok(launch) => match claim {
            Some((next, chunk)) => run_claimed(program, &launch, next, chunk, ub),
            None => run_block(program, &launch, block, block_dim, ub, barrier),
        },
        Err(e) => {
            // Keep sequence-kernel siblings from waiting forever.
            if program.kind() == KernelKind::Sequence {
                for _ in 1..program.body_count() {
                    barrier.wait();
                }
            }
            Err(ExecError::Bind(e))
        }
    }
}

/// Claims chunks of `chunk` tiles from `next` and runs them until every
/// tile is claimed; after an error, claims the rest so that the other
/// participants stop too.
fn run_claimed(
    program: &Program,
    launch: &KernelArgs<'_>,
    next: &AtomicU64,
    chunk: u64,
    ub: &mut [u8],
) -> Result<RunStats, ExecError> {
    let total = program.total_tiles();
    // Only the claims need to be atomic: the results are published when
    // the launch joins its participants (`Shared::seats`).
    let claim = || {
        let start = next.fetch_add(chunk, Ordering::Relaxed);
        (start < total).then(|| (start, start.saturating_add(chunk)))
    };
    run_tile_ranges(program, launch, ub, claim)
        .inspect_err(|_| next.store(total, Ordering::Relaxed))
}

fn worker(shared: Arc<Shared>, idx: u32) {
    let mut ub: Box<UbStorage> = Box::default();
    shared.ready.fetch_add(1, Ordering::Release);
    let mut seen = 0u64;
    loop {
        // Stay awake for a while on the generation (see `IDLE`), then park
        // on the condvar; before the first job, park at once.
        let start = Instant::now();
        let idle = if seen == 0 { Duration::ZERO } else { IDLE };
        loop {
            if shared.shutdown.load(Ordering::Acquire) != 0 {
                return;
            }
            if shared.generation.load(Ordering::Acquire) != seen {
                break;
            }
            let waited = start.elapsed();
            if waited < idle.min(SPIN) {
                std::hint::spin_loop();
                continue;
            }
            if waited < idle {
                std::thread::yield_now();
                continue;
            }
            let mut board = shared.board.lock().unwrap_or_else(|p| p.into_inner());
            if shared.generation.load(Ordering::Acquire) == seen
                && shared.shutdown.load(Ordering::Acquire) == 0
            {
                board.parked += 1;
                board = shared
                    .wake
                    .wait_timeout(board, Duration::from_millis(50))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                board.parked -= 1;
            }
        }
        let (gen, job) = {
            let board = shared.board.lock().unwrap_or_else(|p| p.into_inner());
            let gen = shared.generation.load(Ordering::Acquire);
            // Joining under the lock under which the slot was read: the
            // launcher replaces the slot only under this lock, and opens a
            // job's seats with it, so the seats taken here are this job's,
            // not those of a later job published between the read and the
            // join. A job by blocks has no seats: every helper below its
            // block count runs its block.
            let job = board.job.filter(|job| {
                if job.chunk == 0 {
                    idx < job.block_dim
                } else {
                    take_seat(&shared.seats)
                }
            });
            (gen, job)
        };
        seen = gen;
        let Some(job) = job else { continue };
        // SAFETY: the launcher keeps the program, the buffer list and the
        // barrier alive until no helper is active, which happens only after
        // this one (counted active above) finished with them.
        let (program, bufs, barrier) = unsafe {
            (
                &*(job.program as *const Program),
                std::slice::from_raw_parts(job.bufs as *const RawBuf, job.nbufs),
                &*(job.barrier as *const SpinBarrier),
            )
        };
        let claim = (job.chunk > 0).then_some((&shared.next_tile, job.chunk));
        match run_one(
            program,
            bufs,
            idx,
            job.block_dim,
            ub.as_mut_slice(),
            barrier,
            claim,
        ) {
            Ok(s) => {
                shared.stats_tiles.fetch_add(s.tiles, Ordering::Relaxed);
                shared.stats_instrs.fetch_add(s.instrs, Ordering::Relaxed);
            }
            Err(e) => {
                let mut slot = shared.error.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert(e);
            }
        }
        // Publishes the results (and the stats) to the launcher.
        shared.seats.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Takes an open seat of `seats` and counts its helper active; false when
/// no seat is open (the job's launcher has claimed every tile, or its
/// other helpers took them all).
fn take_seat(seats: &AtomicU64) -> bool {
    seats
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
            (seats::open(word) > 0).then(|| word - seats::SEAT + 1)
        })
        .is_ok()
}

impl Drop for CpuPool {
    fn drop(&mut self) {
        {
            // Under the board's lock: a worker about to park either sees
            // the flag or is parked when the notification comes.
            let _board = self.shared.board.lock().unwrap_or_else(|p| p.into_inner());
            self.shared.shutdown.store(1, Ordering::Release);
        }
        self.shared.wake.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use dvm_compile::codegen::{compile, Group, GroupKind, Target, TileOp, View};
    use dvm_compile::kernel::{build, ready, ReadyKernel};
    use dvm_compile::stack::combine;
    use dvm_device::exec::ExecError;
    use dvm_isa::{DType, KernelKind, Opcode};
    use dvm_tensor::sample_data as data;

    use super::{CpuPool, Mode, RawBuf};

    /// `y = op(x)` over `n` elements.
    fn unary(n: u64, op: Opcode) -> Group {
        let v = View::contiguous(DType::F32, &[n]);
        Group {
            kind: GroupKind::Elementwise { shape: vec![n] },
            inputs: vec![v.clone()],
            nodes: vec![
                (TileOp::Input(0), DType::F32),
                (TileOp::Unary(op, 0), DType::F32),
            ],
            outputs: vec![(1, v)],
        }
    }

    fn target() -> Target {
        Target {
            cores: 3,
            ..Target::default()
        }
    }

    /// `exp(x)` over `n` elements, tiled for three cores.
    fn exp(n: u64) -> Arc<ReadyKernel> {
        build(&unary(n, Opcode::Exp), "exp", &target()).expect("builds")
    }

    /// The output bits and the tiles run of `k` over `x` on `pool` in
    /// `mode`, or the error.
    fn run(
        pool: &CpuPool,
        k: &ReadyKernel,
        x: &[f32],
        out_len: usize,
        mode: Mode,
    ) -> Result<(Vec<u32>, u64), ExecError> {
        let mut y = vec![0f32; out_len];
        let bufs = [RawBuf::input(x), RawBuf::output(&mut y)];
        // SAFETY: both buffers are live vectors owned here, untouched
        // during the launch; only `y` is written.
        let stats = unsafe { pool.launch_as(&k.program, &bufs, mode) }?;
        Ok((y.iter().map(|v| v.to_bits()).collect(), stats.tiles))
    }

    /// A launch whose helpers get no seat (not running until every tile
    /// is claimed) runs every tile on the launcher, in claimed chunks,
    /// with the bytes and the tile count of a one-participant pool; the
    /// next launch still uses the helpers.
    #[test]
    fn a_launch_without_helpers_runs_every_tile_on_the_launcher() {
        let solo = CpuPool::new(1);
        // 2, 3, 7 and 22 tiles.
        for n in [1u64 << 16, 100_000, 300_000, 1 << 20] {
            let k = exp(n);
            assert!(k.program.total_tiles() >= 2, "{n}: one tile");
            let x = data(n as usize, 7);
            let want = run(&solo, &k, &x, n as usize, Mode::Normal).unwrap();
            assert_eq!(want.1, k.program.total_tiles());
            for cores in [2, 3] {
                let pool = CpuPool::new(cores);
                for _ in 0..20 {
                    assert!(run(&pool, &k, &x, n as usize, Mode::NoSeats).unwrap() == want);
                    assert!(run(&pool, &k, &x, n as usize, Mode::Normal).unwrap() == want);
                }
            }
        }
    }

    /// A launch whose launcher runs no tile: the helpers that joined run
    /// them all, and their bytes and counts reach the caller.
    #[test]
    fn helpers_that_join_run_tiles_and_report_them() {
        let solo = CpuPool::new(1);
        for n in [1u64 << 16, 300_000, 1 << 20] {
            let k = exp(n);
            assert!(k.program.total_tiles() >= 2, "{n}: one tile");
            let x = data(n as usize, 8);
            let want = run(&solo, &k, &x, n as usize, Mode::Normal).unwrap();
            for cores in [2, 3] {
                let pool = CpuPool::new(cores);
                for _ in 0..20 {
                    assert!(run(&pool, &k, &x, n as usize, Mode::HelpersOnly).unwrap() == want);
                }
            }
        }
    }

    /// The error of a helper that joined is the launch's error, also when
    /// the launcher itself ran nothing.
    #[test]
    fn errors_of_a_joined_helper_are_reported() {
        let k = exp(300_000);
        assert!(k.program.total_tiles() >= 3);
        let x = data(300_000, 9);
        for cores in [2, 3] {
            let pool = CpuPool::new(cores);
            for mode in [Mode::HelpersOnly, Mode::Normal] {
                // The output is too short: binding fails.
                let e = run(&pool, &k, &x, 200_000, mode).unwrap_err();
                assert!(matches!(e, ExecError::Bind(_)), "{e}");
                // The next launch succeeds: the error was the last one's.
                run(&pool, &k, &x, 300_000, mode).unwrap();
            }
        }
    }

    /// Launches of different kernels (a few tiles, many, one) back to back
    /// on a fresh pool, its worker not started yet for the first: each
    /// gives the one-participant bytes, whoever runs its tiles.
    #[test]
    fn back_to_back_launches_of_different_kernels() {
        let solo = CpuPool::new(1);
        let ks: Vec<(Arc<ReadyKernel>, Vec<f32>)> = [1u64 << 16, 1 << 20, 16, 100_000, 300_000, 8]
            .iter()
            .enumerate()
            .map(|(i, &n)| (exp(n), data(n as usize, i as u32)))
            .collect();
        let want: Vec<_> = ks
            .iter()
            .map(|(k, x)| run(&solo, k, x, x.len(), Mode::Normal).unwrap())
            .collect();
        for cores in [2, 3] {
            for _ in 0..4 {
                let pool = CpuPool::new(cores);
                for round in 0..100 {
                    for (i, (k, x)) in ks.iter().enumerate() {
                        let got = run(&pool, k, x, x.len(), Mode::Normal).unwrap();
                        assert!(got == want[i], "kernel {i}, round {round}, {cores} cores");
                    }
                }
            }
        }
    }

    /// A sequence kernel (stage b reads what stage a stored) runs a block
    /// per participant with barriers between the stages: the same bytes
    /// on every pool, launch after launch.
    #[test]
    fn sequence_kernels_run_by_blocks() {
        let t = target();
        let n = 1 << 16;
        let a = compile(&unary(n, Opcode::Exp), "a", &t).unwrap();
        let b = compile(&unary(n, Opcode::Neg), "b", &t).unwrap();
        // a reads buffer 0 and writes 1; b reads 1 and writes 2.
        let maps = vec![vec![0u8, 1], vec![1u8, 2]];
        let s = combine(KernelKind::Sequence, "ab", &[a, b], &maps).unwrap();
        let k = ready(s, &t).unwrap();
        assert_eq!(k.program.kind(), KernelKind::Sequence);
        assert!(k.program.tiles_independent());
        let x = data(n as usize, 10);
        let go = |pool: &CpuPool| {
            let mut mid = vec![0f32; n as usize];
            let mut y = vec![0f32; n as usize];
            let bufs = [
                RawBuf::input(&x),
                RawBuf::output(&mut mid),
                RawBuf::output(&mut y),
            ];
            // SAFETY: the buffers are live vectors owned here, untouched
            // during the launch and apart from each other.
            unsafe { pool.launch(&k.program, &bufs) }.expect("runs");
            y.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
        };
        let want = go(&CpuPool::new(1));
        // Stage b negates what stage a stored: exp(x) > 0, where an
        // unwritten `mid` would give −0.
        assert!(want.iter().all(|&y| f32::from_bits(y) < 0.0));
        for cores in [2, 3] {
            let pool = CpuPool::new(cores);
            for _ in 0..50 {
                assert!(go(&pool) == want, "{cores} participants differ");
            }
        }
    }
}
