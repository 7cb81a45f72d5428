//! The CPU device: a persistent pool of worker threads, one per core, each
//! with its own UB, running `dvm-device` blocks.
//!
//! A launch publishes a job (the predecoded program and raw buffer
//! descriptors), wakes the workers, runs block 0 on the calling thread and
//! waits for the rest. With several tiles per participant (and no stages),
//! the participants claim chunks of tiles as they come free instead of a
//! block each, so that a core that runs slower, taken by another process
//! on a shared machine, delays the launch by one chunk, not by the rest of
//! its block. Workers spin briefly after each job before parking,
//! so back-to-back launches do not pay a wake-up each time; a new worker
//! parks until its first job.

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
    /// Workers still running the current job.
    pending: AtomicUsize,
    /// The current job.
    job: Mutex<Option<JobSlot>>,
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

/// Fewest tiles per participant for which a launch claims chunks: below,
/// every participant runs its block (its tile range) as before, and a
/// launch of a few tiles pays no claims.
const MIN_TILES_PER_PARTICIPANT: u64 = 4;

/// Tiles per claim for `program`'s `tiles` tiles on `block_dim`
/// participants, or 0 for a launch by blocks: one participant, a sequence
/// kernel (its stages need the barriers between them) or few tiles.
fn chunk_for(program: &Program, tiles: u64, block_dim: u32) -> u64 {
    let parts = block_dim as u64;
    if parts < 2
        || program.kind() == KernelKind::Sequence
        || tiles < MIN_TILES_PER_PARTICIPANT * parts
    {
        return 0;
    }
    (tiles / (parts * CLAIMS_PER_PARTICIPANT)).max(1)
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

/// How long an idle worker spins after a job before parking, so that the
/// next launch of a run finds it awake. A new worker parks at once
/// instead: what follows a pool's creation is host work (the eager API's
/// first window is recorded and its fusion decided), and a spinning
/// worker slows the caller's thread (on a shared or virtual machine it
/// takes the caller's core, or its sibling's resources): the first
/// launch pays one wake-up instead.
const SPIN: Duration = Duration::from_micros(200);

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
            pending: AtomicUsize::new(0),
            job: Mutex::new(None),
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

    /// Runs `program` over `bufs` on up to [`CpuPool::cores`] blocks, or on
    /// the caller alone when its tiles are not proven independent
    /// ([`Program::tiles_independent`]). A
    /// launch of several tiles per participant (any kind but sequence)
    /// hands its tiles out in chunks to whichever participant is free, so
    /// a participant whose core runs slower does not hold up the others
    /// ([`dvm_device::exec::run_tile_ranges`]; the result is the same).
    ///
    /// # Errors
    /// The first [`ExecError`] any block reported (binding errors included).
    ///
    /// # Safety
    /// Every `RawBuf` must be valid for reads of `len` bytes (and writes, if
    /// `writable`) for the duration of the call, accessed by nothing else
    /// meanwhile; written buffers must not overlap any other buffer.
    pub unsafe fn launch(&self, program: &Program, bufs: &[RawBuf]) -> Result<RunStats, ExecError> {
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
        let helpers = block_dim as usize - 1;
        *self.shared.error.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.shared.stats_tiles.store(0, Ordering::Relaxed);
        self.shared.stats_instrs.store(0, Ordering::Relaxed);
        self.shared.pending.store(helpers, Ordering::Release);
        let chunk = chunk_for(program, tiles, block_dim);
        // Published with the job: the generation's increment below orders it.
        self.shared.next_tile.store(0, Ordering::Relaxed);
        {
            let mut slot = self.shared.job.lock().unwrap_or_else(|p| p.into_inner());
            *slot = Some(JobSlot {
                program: program as *const Program as usize,
                bufs: bufs.as_ptr() as usize,
                nbufs: bufs.len(),
                block_dim,
                barrier: &barrier as *const SpinBarrier as usize,
                chunk,
            });
            self.shared.generation.fetch_add(1, Ordering::AcqRel);
        }
        self.shared.wake.notify_all();
        let claim = (chunk > 0).then_some((&self.shared.next_tile, chunk));
        let mine = run_one(
            program,
            bufs,
            0,
            block_dim,
            ub.as_mut_slice(),
            &barrier,
            claim,
        );
        // Wait for the helpers: spin, then yield.
        let start = Instant::now();
        while self.shared.pending.load(Ordering::Acquire) != 0 {
            if start.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        *self.shared.job.lock().unwrap_or_else(|p| p.into_inner()) = None;
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
    // the launch joins its participants (`pending`).
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
        // Spin for a while on the generation, then park on the condvar;
        // before the first job, park at once (see `SPIN`).
        let start = Instant::now();
        let spin = if seen == 0 { Duration::ZERO } else { SPIN };
        loop {
            if shared.shutdown.load(Ordering::Acquire) != 0 {
                return;
            }
            if shared.generation.load(Ordering::Acquire) != seen {
                break;
            }
            if start.elapsed() < spin {
                std::hint::spin_loop();
                continue;
            }
            let guard = shared.job.lock().unwrap_or_else(|p| p.into_inner());
            if shared.generation.load(Ordering::Acquire) == seen
                && shared.shutdown.load(Ordering::Acquire) == 0
            {
                drop(
                    shared
                        .wake
                        .wait_timeout(guard, Duration::from_millis(50))
                        .unwrap_or_else(|p| p.into_inner()),
                );
            }
        }
        let (gen, slot) = {
            let guard = shared.job.lock().unwrap_or_else(|p| p.into_inner());
            (shared.generation.load(Ordering::Acquire), *guard)
        };
        seen = gen;
        let Some(job) = slot else { continue };
        if idx >= job.block_dim {
            continue;
        }
        // SAFETY: the launcher keeps the program, the buffer list and the
        // barrier alive until `pending` reaches zero, which happens only
        // after this block finished with them.
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
        shared.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for CpuPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(1, Ordering::Release);
        self.shared.wake.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}
