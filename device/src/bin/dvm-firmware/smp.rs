//! The other cores: started with PSCI `CPU_ON`, then a work loop that runs
//! their share of each launch core 0 publishes.
//!
//! **Start.** QEMU `virt` keeps the secondary cores powered off and
//! emulates PSCI itself; the conduit is `hvc` when the firmware boots at
//! EL1 (the default) and `smc` when it boots at EL2 (`virtualization=on`),
//! as the device tree QEMU writes says. Core 0 calls `CPU_ON` for cores
//! `1..CORES` (core `c` is the CPU with MPIDR affinity 0 = `c`) with
//! `_dvm_secondary_start` as the entry and `c` as the context id, and goes
//! on reading the job; when it first needs the core count ([`cores`]: its
//! first launch on several blocks, or the report) it waits (at most
//! [`START_TIMEOUT_MS`] from the start) for each to check in from Rust. The
//! cores up to the first that does not start (PSCI error, e.g. fewer CPUs
//! given to QEMU with `-smp`, or no check-in) run the job; the rest park.
//!
//! **Launches.** Core 0 writes a [`Work`] (the predecoded program, the
//! buffers as raw parts, the block count), then increments [`GENERATION`]
//! (release); every running core (core 0 too) runs blocks `c`, `c + n`,
//! `c + 2n`, … of the launch on its own UB ([`run_blocks_strided`]), with
//! [`BARRIER`] between the stages of a sequence kernel, adds its tiles and
//! instructions to its counters, records the launch's first error, and
//! (secondaries) increments [`DONE`] (release). Core 0 waits until every
//! secondary is done (acquire) before it reads the results or writes the
//! next `Work`. Idle secondaries sleep in `wfi` and core 0 wakes them with
//! a software-generated interrupt through `virt`'s GICv2 (masked: it only
//! ends the `wfi`), so they leave the host's CPUs to core 0 between
//! launches; without a GICv2 they spin. A core that fails calls [`FwBarrier::abort`] first, so the
//! others skip their remaining stages at the next barrier; a CPU exception
//! or panic on any core ends the emulation from that core with its status.
//!
//! Every shared variable is an atomic or is written by one core while the
//! others are ordered after (or before) it by these release/acquire pairs.
//! RAM is normal, inner-shareable write-back memory on every core
//! ([`crate::mmu`]), so the exclusives behind the atomics work.

use core::cell::UnsafeCell;
use core::hint::spin_loop;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use dvm_device::{run_blocks_strided, Barrier, ExecError, GmBuf, KernelArgs, Program, RunStats};
use dvm_isa::job::Status;
use dvm_isa::verify::MAX_PARAMS;
use dvm_isa::KernelKind;
use heapless::Vec;

use crate::{layout, report, selftest, CORES};

/// How long core 0 waits for a started core to check in.
pub const START_TIMEOUT_MS: u64 = 1000;

/// PSCI 0.2 `CPU_ON`, SMC64 calling convention.
const PSCI_CPU_ON_64: u64 = 0xc400_0003;

/// How the firmware calls PSCI.
#[derive(Clone, Copy)]
enum Conduit {
    Hvc,
    Smc,
}

/// PSCI return codes, in words.
fn psci_error(code: i64) -> &'static str {
    match code {
        -1 => "NOT_SUPPORTED",
        -2 => "INVALID_PARAMETERS (no such CPU)",
        -3 => "DENIED",
        -4 => "ALREADY_ON",
        -5 => "ON_PENDING",
        -6 => "INTERNAL_FAILURE",
        -7 => "NOT_PRESENT",
        -8 => "DISABLED",
        -9 => "INVALID_ADDRESS",
        _ => "unknown error",
    }
}

/// PSCI `CPU_ON` for the CPU `mpidr`: start it at `entry` with `context`
/// in `x0`. Returns PSCI's status (0 on success).
fn cpu_on(conduit: Conduit, mpidr: u64, entry: u64, context: u64) -> i64 {
    let ret: u64;
    // One call for either conduit: only the instruction differs.
    macro_rules! psci {
        ($insn:literal) => {
            core::arch::asm!(
                $insn,
                inout("x0") PSCI_CPU_ON_64 => ret,
                inout("x1") mpidr => _, inout("x2") entry => _, inout("x3") context => _,
                out("x4") _, out("x5") _, out("x6") _, out("x7") _, out("x8") _,
                out("x9") _, out("x10") _, out("x11") _, out("x12") _, out("x13") _,
                out("x14") _, out("x15") _, out("x16") _, out("x17") _,
                options(nostack),
            )
        };
    }
    // SAFETY: a PSCI call (SMC Calling Convention): function id and
    // arguments in x0..x3, the result in x0; x4..x17 may be clobbered
    // (SMCCC 1.0). QEMU's PSCI starts the other CPU and touches no memory
    // of this one.
    unsafe {
        match conduit {
            Conduit::Hvc => psci!("hvc #0"),
            Conduit::Smc => psci!("smc #0"),
        }
    }
    ret as i64
}

/// Milliseconds since some point (the generic timer).
fn now_ms() -> u64 {
    let (count, freq): (u64, u64);
    // SAFETY: reads the generic timer's counter and frequency, which EL1
    // may always read; no memory access.
    unsafe {
        core::arch::asm!(
            "isb",
            "mrs {c}, cntpct_el0",
            "mrs {f}, cntfrq_el0",
            c = out(reg) count,
            f = out(reg) freq,
            options(nomem, nostack),
        );
    }
    count / (freq / 1000).max(1)
}

/// QEMU `virt`'s GICv2 distributor.
const GICD: usize = 0x0800_0000;
/// QEMU `virt`'s GICv2 CPU interface (banked per core).
const GICC: usize = 0x0801_0000;
const GICD_CTLR: usize = GICD;
const GICD_ISENABLER0: usize = GICD + 0x100;
const GICD_SGIR: usize = GICD + 0xf00;
const GICD_PIDR2: usize = GICD + 0xfe8;
const GICC_CTLR: usize = GICC;
const GICC_PMR: usize = GICC + 0x4;
const GICC_IAR: usize = GICC + 0xc;
const GICC_EOIR: usize = GICC + 0x10;
/// The software-generated interrupt that wakes the secondaries.
const WAKE_SGI: u32 = 0;

/// Whether idle secondaries sleep in `wfi` until core 0 sends them
/// [`WAKE_SGI`] (a GICv2 was found), instead of spinning. Set by core 0
/// before it starts them.
static SLEEP: AtomicBool = AtomicBool::new(false);

fn mmio_read(addr: usize) -> u32 {
    // SAFETY: `addr` is a GICv2 register of QEMU `virt`, in the device
    // memory the MMU maps; reading it has no effect but the GIC's own.
    unsafe { core::ptr::read_volatile(addr as *const u32) }
}

fn mmio_write(addr: usize, v: u32) {
    // SAFETY: as `mmio_read`; writes only change the GIC's state.
    unsafe { core::ptr::write_volatile(addr as *mut u32, v) }
}

/// Core 0: if the board has a GICv2 where QEMU `virt` puts it (its
/// peripheral id says architecture version 2), turns its distributor on
/// so that [`WAKE_SGI`] can wake the secondaries from `wfi`.
fn gic_init_distributor() {
    if (mmio_read(GICD_PIDR2) >> 4) & 0xf == 2 {
        mmio_write(GICD_CTLR, 1);
        SLEEP.store(true, Ordering::Relaxed);
    }
}

/// A secondary: enables [`WAKE_SGI`] and its CPU interface. The interrupt
/// stays masked (DAIF): it only ends `wfi`, and is acknowledged by hand.
fn gic_init_cpu() {
    mmio_write(GICD_ISENABLER0, 1 << WAKE_SGI);
    mmio_write(GICC_PMR, 0xff);
    mmio_write(GICC_CTLR, 1);
}

/// Core 0: makes the work just published visible, then sends
/// [`WAKE_SGI`] to every other core.
fn wake_secondaries() {
    if SLEEP.load(Ordering::Relaxed) {
        // SAFETY: a barrier: the stores before it (the work and the
        // generation) complete before the interrupt is sent.
        unsafe { core::arch::asm!("dsb ish", options(nostack, preserves_flags)) };
        // Target list filter 0b01: every core but this one.
        mmio_write(GICD_SGIR, (1 << 24) | WAKE_SGI);
    }
}

/// A secondary waits for a generation other than `seen`: in `wfi` when
/// core 0 wakes it with [`WAKE_SGI`], else spinning.
fn wait_for_work(seen: u32) -> u32 {
    let sleep = SLEEP.load(Ordering::Relaxed);
    loop {
        let gen = GENERATION.load(Ordering::Acquire);
        if gen != seen {
            return gen;
        }
        if sleep {
            // SAFETY: waits for an interrupt to be pending (masked ones
            // count); an SGI sent after the load above is still pending
            // here, so no wake-up is lost. No memory effects.
            unsafe { core::arch::asm!("wfi", options(nomem, nostack, preserves_flags)) };
            let iar = mmio_read(GICC_IAR);
            if iar & 0x3ff < 1020 {
                mmio_write(GICC_EOIR, iar);
            }
        } else {
            spin_loop();
        }
    }
}

extern "C" {
    /// The secondary cores' entry in [`crate::boot`].
    fn _dvm_secondary_start();
}

/// Which cores checked in (from their Rust entry).
static ONLINE: [AtomicBool; CORES] = [const { AtomicBool::new(false) }; CORES];
/// Cores that run the job (cores `0..RUNNING`), 0 until core 0 decided.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
/// Cores `1..STARTED` accepted `CPU_ON` (core 0 only).
static STARTED: AtomicUsize = AtomicUsize::new(1);
/// When core 0 started them ([`now_ms`]; core 0 only).
static STARTED_AT: AtomicU64 = AtomicU64::new(0);

/// The cores running the job: on the first call (core 0), waits until the
/// started cores have checked in (at most [`START_TIMEOUT_MS`] after
/// [`start_secondaries`]) and decides.
pub fn cores() -> usize {
    let running = RUNNING.load(Ordering::Acquire);
    if running != 0 {
        return running;
    }
    let started = STARTED.load(Ordering::Relaxed);
    let since = STARTED_AT.load(Ordering::Relaxed);
    let mut running = 1;
    while running < started {
        while !ONLINE[running].load(Ordering::Acquire)
            && now_ms().wrapping_sub(since) < START_TIMEOUT_MS
        {
            spin_loop();
        }
        if !ONLINE[running].load(Ordering::Acquire) {
            defmt::warn!(
                "core {=usize}: started but did not check in within {=u64} ms",
                running,
                START_TIMEOUT_MS
            );
            break;
        }
        running += 1;
    }
    RUNNING.store(running, Ordering::Release);
    defmt::info!("{=usize} of {=usize} cores running", running, CORES);
    running
}

/// Starts cores `1..CORES` with PSCI `CPU_ON`, up to the first that PSCI
/// refuses, and returns without waiting for them: they boot while core 0
/// reads the job, and [`cores`] waits for them when first asked. `boot_el`
/// is the EL core 0 entered at: 2 means the `smc` conduit, else `hvc`.
pub fn start_secondaries(boot_el: u64) {
    let conduit = if boot_el == 2 {
        Conduit::Smc
    } else {
        Conduit::Hvc
    };
    let entry = _dvm_secondary_start as *const () as usize as u64;
    if CORES > 1 {
        gic_init_distributor();
    }
    STARTED_AT.store(now_ms(), Ordering::Relaxed);
    let mut started = 1;
    for core in 1..CORES {
        let ret = cpu_on(conduit, core as u64, entry, core as u64);
        if ret != 0 {
            defmt::warn!(
                "core {=usize}: PSCI CPU_ON failed: {=i64} {=str}",
                core,
                ret,
                psci_error(ret)
            );
            break;
        }
        started += 1;
    }
    STARTED.store(started, Ordering::Relaxed);
}

/// One launch buffer as raw parts.
#[derive(Clone, Copy)]
pub struct RawBuf {
    /// Base address.
    pub ptr: *mut u8,
    /// Length in bytes.
    pub len: usize,
    /// Whether the kernel may write it.
    pub writable: bool,
}

/// What the secondaries do for one [`GENERATION`].
#[derive(Clone, Copy)]
enum Task {
    /// Nothing (the initial state).
    Idle,
    /// Their share of a launch.
    Launch,
    /// Core 1 overflows its stack (the self-test); the others do nothing.
    OverflowCore1,
}

/// The work core 0 publishes.
struct Work {
    task: Task,
    program: *const Program,
    bufs: Vec<RawBuf, MAX_PARAMS>,
    block_dim: u32,
    /// Cores taking part: `0..cores`.
    cores: u32,
}

/// [`Work`], shared: written by core 0 only while no secondary reads it.
struct WorkCell(UnsafeCell<Work>);

// SAFETY: core 0 writes the work only before it increments `GENERATION`
// (release) and after every secondary incremented `DONE` (acquire) for the
// previous generation; secondaries read it only between their acquire of
// the new `GENERATION` and their release of `DONE`. The raw pointers it
// holds are used under the same protocol.
unsafe impl Sync for WorkCell {}

static WORK: WorkCell = WorkCell(UnsafeCell::new(Work {
    task: Task::Idle,
    program: core::ptr::null(),
    bufs: Vec::new(),
    block_dim: 0,
    cores: 1,
}));
/// Incremented by core 0 to publish a new [`Work`].
static GENERATION: AtomicU32 = AtomicU32::new(0);
/// Secondaries done with the current generation.
static DONE: AtomicU32 = AtomicU32::new(0);
/// Tiles and instructions each core ran in the current launch.
static TILES: [AtomicU64; CORES] = [const { AtomicU64::new(0) }; CORES];
static INSTRS: [AtomicU64; CORES] = [const { AtomicU64::new(0) }; CORES];

/// The first error of the current launch.
struct FirstError {
    claimed: AtomicBool,
    error: UnsafeCell<Option<(usize, ExecError)>>,
}

// SAFETY: only the core that wins `claimed` writes `error`, before it
// signals that it is done; core 0 reads it after every core is done and
// resets it before the next launch is published.
unsafe impl Sync for FirstError {}

static FIRST_ERROR: FirstError = FirstError {
    claimed: AtomicBool::new(false),
    error: UnsafeCell::new(None),
};

fn record_error(core: usize, e: ExecError) {
    defmt::error!("core {=usize}: exec: {}", core, defmt::Display2Format(&e));
    if !FIRST_ERROR.claimed.swap(true, Ordering::AcqRel) {
        // SAFETY: this core won `claimed`: no other core writes `error`,
        // and core 0 reads it only after this core is done.
        unsafe { *FIRST_ERROR.error.get() = Some((core, e)) };
    }
}

/// A spinning barrier over the cores of a launch that also carries the
/// launch's abort flag.
pub struct FwBarrier {
    /// Cores taking part (set by core 0 before the launch is published).
    n: AtomicU32,
    count: AtomicU32,
    generation: AtomicU32,
    aborted: AtomicBool,
}

static BARRIER: FwBarrier = FwBarrier {
    n: AtomicU32::new(1),
    count: AtomicU32::new(0),
    generation: AtomicU32::new(0),
    aborted: AtomicBool::new(false),
};

impl Barrier for FwBarrier {
    fn wait(&self) {
        let gen = self.generation.load(Ordering::Acquire);
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.n.load(Ordering::Relaxed) {
            // The last to arrive: reset for the next barrier, then release
            // the others (and with them everything written before any
            // core arrived).
            self.count.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        while self.generation.load(Ordering::Acquire) == gen {
            spin_loop();
        }
    }

    fn abort(&self) {
        self.aborted.store(true, Ordering::Release);
    }

    fn aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }
}

/// Core `core`'s unified buffer.
fn ub(core: usize) -> &'static mut [u8] {
    let (start, end) = layout::ub(core);
    // SAFETY: `.ub` holds one 64-byte-aligned UB per core, reserved by the
    // linker script for this use; only core `core` calls this with its own
    // index, and it keeps one such slice alive at a time (each call's
    // slice is dropped when its launch ends).
    unsafe { core::slice::from_raw_parts_mut(start as *mut u8, end - start) }
}

/// Runs core `core`'s share of the published launch on its UB.
fn run_share(core: usize, w: &Work) -> Result<RunStats, ExecError> {
    // SAFETY: core 0 published a program it does not change until every
    // core is done with this launch.
    let program = unsafe { &*w.program };
    let bufs = w.bufs.iter().map(|b| {
        // SAFETY: core 0 checked (`Job::parse`) that every buffer lies in
        // the job, past the stacks (so apart from every UB), apart from
        // every module and from each other, and that the launch names no
        // buffer twice; it publishes a launch to several cores only when
        // the kernel's tiles are proven independent
        // (`Program::tiles_independent`), so no element one core writes is
        // read or written by another.
        unsafe { GmBuf::from_raw_parts(b.ptr, b.len, b.writable) }
    });
    match KernelArgs::with_signature(program.params(), bufs) {
        Ok(launch) => run_blocks_strided(
            program,
            &launch,
            core as u32,
            w.cores,
            w.block_dim,
            ub(core),
            &BARRIER,
        ),
        Err(e) => {
            // Keep a sequence kernel's other cores from waiting forever.
            BARRIER.abort();
            if program.kind() == KernelKind::Sequence {
                for _ in 1..program.body_count() {
                    BARRIER.wait();
                }
            }
            Err(ExecError::Bind(e))
        }
    }
}

/// Runs the share of core `core` and records its counts or its error.
fn run_and_record(core: usize, w: &Work) {
    let stats = run_share(core, w).unwrap_or_else(|e| {
        record_error(core, e);
        RunStats::default()
    });
    TILES[core].store(stats.tiles, Ordering::Relaxed);
    INSTRS[core].store(stats.instrs, Ordering::Relaxed);
}

/// What a launch on several cores did.
pub struct ParallelRun {
    /// Tiles and instructions summed over the cores.
    pub stats: RunStats,
    /// Bit `c`: core `c` ran at least one tile.
    pub core_mask: u64,
}

/// Runs the `block_dim` blocks of `program` over `bufs` on every running
/// core (core `c` runs blocks `c`, `c + n`, …), core 0 included, and
/// returns when all are done.
///
/// # Errors
/// The launch's first [`ExecError`] (of whichever core hit one first).
///
/// # Safety
/// Every buffer is valid for reads (and writes, if writable) of its length
/// and accessed by nothing else during the call; no two overlap, none
/// overlaps a UB; `program`'s tiles are independent
/// ([`Program::tiles_independent`]).
pub unsafe fn run_parallel(
    program: &Program,
    bufs: &[RawBuf],
    block_dim: u32,
) -> Result<ParallelRun, ExecError> {
    let n = cores();
    {
        // SAFETY: every secondary is done with the previous generation
        // (core 0 waited for `DONE`), so none reads the work now.
        let w = unsafe { &mut *WORK.0.get() };
        w.task = Task::Launch;
        w.program = program;
        w.bufs.clear();
        // Capacity: a bound launch has at most MAX_PARAMS buffers.
        let _ = w.bufs.extend_from_slice(bufs);
        w.block_dim = block_dim;
        w.cores = n as u32;
    }
    // SAFETY: as above; no core records an error outside a launch.
    unsafe { *FIRST_ERROR.error.get() = None };
    FIRST_ERROR.claimed.store(false, Ordering::Relaxed);
    BARRIER.n.store(n as u32, Ordering::Relaxed);
    BARRIER.aborted.store(false, Ordering::Relaxed);
    DONE.store(0, Ordering::Relaxed);
    // Publishes everything above to the secondaries.
    GENERATION.fetch_add(1, Ordering::Release);
    wake_secondaries();
    // SAFETY: core 0 only reads the work until the next launch.
    run_and_record(0, unsafe { &*WORK.0.get() });
    while DONE.load(Ordering::Acquire) != n as u32 - 1 {
        spin_loop();
    }
    // SAFETY: every core is done: nobody writes the error any more.
    if let Some((_, e)) = unsafe { *FIRST_ERROR.error.get() } {
        return Err(e);
    }
    let mut run = ParallelRun {
        stats: RunStats::default(),
        core_mask: 0,
    };
    for c in 0..n {
        let tiles = TILES[c].load(Ordering::Relaxed);
        run.stats += RunStats {
            tiles,
            instrs: INSTRS[c].load(Ordering::Relaxed),
        };
        if tiles > 0 {
            run.core_mask |= 1 << c;
        }
    }
    Ok(run)
}

/// The self-test `selftest=stack-overflow-secondary`: core 1 recurses into
/// its guard page, which must end the run with [`Status::StackOverflow`]
/// from core 1. Without a second core it exits with [`Status::Panic`].
pub fn overflow_a_secondary_stack() -> ! {
    if cores() < 2 {
        defmt::error!("selftest: no second core running");
        report::exit(Status::Panic)
    }
    {
        // SAFETY: no launch has been published; no secondary reads the work.
        let w = unsafe { &mut *WORK.0.get() };
        w.task = Task::OverflowCore1;
    }
    DONE.store(0, Ordering::Relaxed);
    GENERATION.fetch_add(1, Ordering::Release);
    wake_secondaries();
    // Core 1 ends the emulation; if it comes back, the guard failed.
    while DONE.load(Ordering::Acquire) < cores() as u32 - 1 {
        spin_loop();
    }
    defmt::error!("selftest: core 1's stack did not overflow");
    report::exit(Status::Panic)
}

/// Rust entry of a secondary core (boot code, MMU on, own stacks):
/// checks in, then runs its share of every launch core 0 publishes (if it
/// is one of the running cores).
#[no_mangle]
extern "C" fn dvm_fw_secondary_main(core: u64) -> ! {
    let core = core as usize;
    if core == 0 || core >= CORES {
        // Not a core of this layout: never touch shared state.
        loop {
            spin_loop();
        }
    }
    // SLEEP was set before core 0 called CPU_ON for this core, and this
    // core reads it with its caches on, so it sees the value.
    if SLEEP.load(Ordering::Relaxed) {
        gic_init_cpu();
    }
    ONLINE[core].store(true, Ordering::Release);
    let mut seen = 0u32;
    loop {
        seen = wait_for_work(seen);
        // Core 0 decided which cores run before it published any work.
        if core >= RUNNING.load(Ordering::Acquire) {
            // Checked in too late: core 0 runs without this core, and it
            // must not touch the work or count as done.
            loop {
                spin_loop();
            }
        }
        // SAFETY: core 0 wrote the work before publishing `gen` (acquired
        // above) and does not write it again before this core is done.
        let w = unsafe { &*WORK.0.get() };
        match w.task {
            Task::Idle => {}
            Task::Launch => run_and_record(core, w),
            Task::OverflowCore1 if core == 1 => selftest::overflow_the_stack(),
            Task::OverflowCore1 => {}
        }
        DONE.fetch_add(1, Ordering::Release);
    }
}
