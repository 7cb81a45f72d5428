//! `dvm-firmware`: the dvm executor as bare-metal firmware for the AI-CPU
//! (aarch64, `aarch64-unknown-none`), run under `qemu-system-aarch64 -M virt`.
//!
//! Boot ([`boot`]) drops core 0 from EL2 to EL1 if needed, turns FP/SIMD
//! on, moves the exception stack apart from the main stack, zeroes `.bss`
//! and calls [`dvm_fw_main`], which maps memory ([`mmu`]: caches on, a
//! guard page under each core's stack), starts the other cores with PSCI
//! ([`smp`]), reads the job the host's loader put at `_dvm_job_base`, and
//! runs it ([`job`]): every launch's blocks split across the cores, each
//! with its own unified buffer. The report goes back to the host through
//! semihosting ([`report`]); the exit code is the job's
//! [`dvm_isa::job::Status`]. Logs are `defmt` frames on semihosting stdout.
//!
//! The semihosting command line `selftest=stack-overflow` (QEMU's `-append`)
//! runs a self-test instead of the job: it recurses until the stack hits its
//! guard page, which must end in [`dvm_isa::job::Status::StackOverflow`];
//! `selftest=stack-overflow-secondary` does the same on core 1;
//! `selftest=fault-while-logging` faults in the middle of a log frame, which
//! must end in the fault's status, not in a hang.
//!
//! Memory layout (from `dvm-linker`'s `memory.x`/`link.x`): code, data, bss,
//! one unified buffer per core (`.ub`), per core a guard page and a stack,
//! then the job. The core count ([`CORES`]) is fixed at build time, from
//! the same device description as the layout.
#![no_std]
#![no_main]

mod boot;
mod job;
mod mmu;
mod report;
mod selftest;
mod smp;

use core::panic::PanicInfo;
use core::sync::atomic::{AtomicUsize, Ordering};

use defmt_semihosting as _;
use dvm_isa::job::Status;

// `pub const CORES: usize`, written by `build.rs` from the device
// description that `memory.x` comes from.
include!(concat!(env!("OUT_DIR"), "/cores.rs"));

/// Symbols of the linker script.
mod layout {
    extern "C" {
        static _dvm_ub_start: u8;
        static _dvm_ub_size: u8;
        static _dvm_stack_guard: u8;
        static _dvm_stack_stride: u8;
        static _dvm_cores: u8;
        static _dvm_job_base: u8;
    }

    /// Address (or value, for an absolute symbol) of a linker symbol.
    macro_rules! addr {
        ($s:ident) => {
            // Only the address of the linker-defined symbol is taken; it is
            // never read through.
            core::ptr::addr_of!($s) as usize
        };
    }

    /// Core `core`'s unified buffer: `[start, end)`.
    pub fn ub(core: usize) -> (usize, usize) {
        let size = addr!(_dvm_ub_size);
        let start = addr!(_dvm_ub_start) + core * size;
        (start, start + size)
    }

    /// The 4 KiB guard page under core `core`'s stack.
    pub fn stack_guard(core: usize) -> usize {
        addr!(_dvm_stack_guard) + core * addr!(_dvm_stack_stride)
    }

    /// The core count the linker script laid memory out for.
    pub fn cores() -> usize {
        addr!(_dvm_cores)
    }

    /// Where the host's loader places the job.
    pub fn job_base() -> usize {
        addr!(_dvm_job_base)
    }
}

/// Interrupts masked through DAIF plus a spin lock between the cores
/// (`defmt`'s logger runs inside it, so log frames of different cores do
/// not interleave). Re-entry on the core that holds it (an exception while
/// logging) nests instead of deadlocking.
struct CoreCriticalSection;
critical_section::set_impl!(CoreCriticalSection);

/// Who holds the critical section: a core index, or [`CS_FREE`].
static CS_OWNER: AtomicUsize = AtomicUsize::new(CS_FREE);
const CS_FREE: usize = usize::MAX;
/// Set in the restore state when the acquire nested (DAIF is bits 6..9).
const CS_NESTED: u64 = 1 << 63;

// SAFETY: acquire saves DAIF, masks every interrupt and takes the lock
// (unless this core holds it already), release gives the lock back (unless
// the acquire nested) and restores the saved DAIF; nesting restores in
// reverse order, as the trait requires. One core at a time is inside.
unsafe impl critical_section::Impl for CoreCriticalSection {
    unsafe fn acquire() -> u64 {
        let daif: u64;
        // SAFETY: reads DAIF and masks interrupts; no memory effects.
        unsafe { core::arch::asm!("mrs {}, daif", "msr daifset, #0xf", out(reg) daif) };
        let me = boot::core_index();
        if CS_OWNER.load(Ordering::Relaxed) == me {
            return daif | CS_NESTED;
        }
        while CS_OWNER
            .compare_exchange_weak(CS_FREE, me, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            core::hint::spin_loop();
        }
        daif
    }

    unsafe fn release(state: u64) {
        if state & CS_NESTED == 0 {
            CS_OWNER.store(CS_FREE, Ordering::Release);
        }
        // SAFETY: restores the DAIF value saved by `acquire`.
        unsafe { core::arch::asm!("msr daif, {}", in(reg) state & !CS_NESTED) };
    }
}

/// Whether this core holds the critical section, which it does while
/// `defmt` writes a log frame. An exception or a panic taken then must not
/// log: `defmt`'s logger refuses to be entered again (it panics, and the
/// panic handler's own log line would panic again, so the run would end
/// only by the host's timeout).
pub fn logging_here() -> bool {
    CS_OWNER.load(Ordering::Relaxed) == boot::core_index()
}

/// Rust entry of core 0, called by the boot code on core 0's stack with
/// `.bss` zeroed; `boot_el` is the exception level it entered at.
#[no_mangle]
extern "C" fn dvm_fw_main(boot_el: u64) -> ! {
    mmu::enable();
    defmt::info!("dvm-firmware {=str}: MMU on", env!("CARGO_PKG_VERSION"));
    if layout::cores() != CORES {
        defmt::error!(
            "built for {=usize} cores, linked for {=usize}",
            CORES,
            layout::cores()
        );
        report::exit(Status::Panic)
    }
    smp::start_secondaries(boot_el);
    let mut cmdline = [0u8; 128];
    // QEMU passes the kernel's path, then the `-append` text.
    let args = report::command_line(&mut cmdline);
    for a in args.split(|&c| c == b' ') {
        match a {
            b"selftest=stack-overflow" => selftest::overflow_the_stack(),
            b"selftest=stack-overflow-secondary" => smp::overflow_a_secondary_stack(),
            b"selftest=fault-while-logging" => selftest::fault_while_logging(),
            _ => {}
        }
    }
    let status = job::run();
    defmt::info!("job done: {}", status.describe());
    report::exit(status)
}

#[panic_handler]
fn panic(info: &PanicInfo) -> ! {
    if logging_here() {
        // Inside a log frame (see `logging_here`): no further log line.
        report::exit(Status::Panic)
    }
    let core = boot::core_index();
    if let Some(loc) = info.location() {
        defmt::error!(
            "core {=usize}: panic at {=str}:{=u32}",
            core,
            loc.file(),
            loc.line()
        );
    } else {
        defmt::error!("core {=usize}: panic", core);
    }
    report::exit(Status::Panic)
}
