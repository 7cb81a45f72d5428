//! The CPU device: a persistent pool of worker threads, one per core, each
//! with its own UB, running `dvm-device` blocks.
//!
//! A launch publishes a job (the predecoded program and raw buffer
//! descriptors), wakes the workers, runs block 0 on the calling thread and
//! waits for the rest. Workers spin briefly after each job before parking,
//! so back-to-back launches do not pay a wake-up each time; a new worker
//! parks until its first job.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dvm_device::exec::{run_block, Barrier, ExecError, RunStats, UbStorage};
use dvm_device::gm::{GmBuf, Launch};
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
}

#[derive(Clone, Copy)]
struct JobSlot {
    program: usize,
    bufs: usize,
    nbufs: usize,
    block_dim: u32,
    barrier: usize,
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
    /// workers (at least one participant).
    pub fn new(cores: usize) -> CpuPool {
        let cores = cores.max(1);
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
        });
        let workers = (1..cores)
            .map(|idx| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("dvm-cpu-{idx}"))
                    .spawn(move || worker(shared, idx as u32))
                    .expect("spawning a dvm worker thread")
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

    /// Runs `program` over `bufs` on up to [`CpuPool::cores`] blocks.
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
        let block_dim = (self.cores() as u64).min(tiles.max(1)) as u32;
        let mut ub = self.ub.lock().unwrap_or_else(|p| p.into_inner());
        if block_dim == 1 {
            return run_one(
                program,
                bufs,
                0,
                1,
                ub.as_mut_slice(),
                &dvm_device::exec::NoBarrier,
            );
        }
        let barrier = SpinBarrier::new(block_dim);
        let helpers = block_dim as usize - 1;
        *self.shared.error.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.shared.stats_tiles.store(0, Ordering::Relaxed);
        self.shared.stats_instrs.store(0, Ordering::Relaxed);
        self.shared.pending.store(helpers, Ordering::Release);
        {
            let mut slot = self.shared.job.lock().unwrap_or_else(|p| p.into_inner());
            *slot = Some(JobSlot {
                program: program as *const Program as usize,
                bufs: bufs.as_ptr() as usize,
                nbufs: bufs.len(),
                block_dim,
                barrier: &barrier as *const SpinBarrier as usize,
            });
            self.shared.generation.fetch_add(1, Ordering::AcqRel);
        }
        self.shared.wake.notify_all();
        let mine = run_one(program, bufs, 0, block_dim, ub.as_mut_slice(), &barrier);
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

/// Runs one block over raw buffers.
fn run_one(
    program: &Program,
    bufs: &[RawBuf],
    block: u32,
    block_dim: u32,
    ub: &mut [u8],
    barrier: &dyn Barrier,
) -> Result<RunStats, ExecError> {
    // SAFETY: the launcher's contract (see `CpuPool::launch`) makes every
    // RawBuf valid for the launch and free of outside access; blocks of one
    // launch write disjoint elements by construction of the kernels.
    let gm = bufs
        .iter()
        .map(|b| unsafe { GmBuf::from_raw_parts(b.ptr, b.len, b.writable) });
    match Launch::with_signature(program.params(), gm) {
        Ok(launch) => run_block(program, &launch, block, block_dim, ub, barrier),
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
        match run_one(
            program,
            bufs,
            idx,
            job.block_dim,
            ub.as_mut_slice(),
            barrier,
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
