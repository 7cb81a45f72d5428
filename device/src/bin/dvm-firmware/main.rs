//! `dvm-firmware`: the dvm executor as bare-metal firmware for the AI-CPU
//! (aarch64, `aarch64-unknown-none`), run under `qemu-system-aarch64 -M virt`.
//!
//! Boot ([`boot`]) parks secondary cores, drops from EL2 to EL1 if needed,
//! turns FP/SIMD on, moves the exception stack apart from the main stack,
//! zeroes `.bss` and calls [`dvm_fw_main`], which maps memory ([`mmu`]: caches
//! on, a guard page under the stack), reads the job the host's loader put at
//! `_dvm_job_base`, and runs it ([`job`]). The report goes back to the host
//! through semihosting ([`report`]); the exit code is the job's
//! [`dvm_isa::job::Status`]. Logs are `defmt` frames on semihosting stdout.
//!
//! The semihosting command line `selftest=stack-overflow` (QEMU's `-append`)
//! runs a self-test instead of the job: it recurses until the stack hits its
//! guard page, which must end in [`dvm_isa::job::Status::StackOverflow`].
//!
//! Memory layout (from `dvm-linker`'s `memory.x`/`link.x`): code, data, bss,
//! the unified buffer (`.ub`), a guard page, the stack, then the job.
#![no_std]
#![no_main]

mod boot;
mod job;
mod mmu;
mod report;
mod selftest;

use core::panic::PanicInfo;

use defmt_semihosting as _;
use dvm_isa::job::Status;

/// Symbols of the linker script.
mod layout {
    extern "C" {
        static _dvm_ub_start: u8;
        static _dvm_ub_end: u8;
        static _dvm_stack_guard: u8;
        static _dvm_job_base: u8;
    }

    /// Address of a linker symbol.
    macro_rules! addr {
        ($s:ident) => {
            // Only the address of the linker-defined symbol is taken; it is
            // never read through.
            core::ptr::addr_of!($s) as usize
        };
    }

    /// The unified buffer: `[start, end)`.
    pub fn ub() -> (usize, usize) {
        (addr!(_dvm_ub_start), addr!(_dvm_ub_end))
    }

    /// The 4 KiB guard page under the stack.
    pub fn stack_guard() -> usize {
        addr!(_dvm_stack_guard)
    }

    /// Where the host's loader places the job.
    pub fn job_base() -> usize {
        addr!(_dvm_job_base)
    }
}

/// Interrupts masked through DAIF: the firmware runs on one core with
/// interrupts off, so this only guards against re-entry from exceptions.
struct DaifCriticalSection;
critical_section::set_impl!(DaifCriticalSection);

// SAFETY: acquire saves DAIF and masks every interrupt, release restores the
// saved value; nesting restores in reverse order, as the trait requires.
unsafe impl critical_section::Impl for DaifCriticalSection {
    unsafe fn acquire() -> u64 {
        let daif: u64;
        // SAFETY: reading DAIF and masking interrupts has no memory effects.
        unsafe { core::arch::asm!("mrs {}, daif", "msr daifset, #0xf", out(reg) daif) };
        daif
    }

    unsafe fn release(daif: u64) {
        // SAFETY: restores the DAIF value saved by `acquire`.
        unsafe { core::arch::asm!("msr daif, {}", in(reg) daif) };
    }
}

/// Rust entry, called by the boot code on the main stack with `.bss` zeroed.
#[no_mangle]
extern "C" fn dvm_fw_main() -> ! {
    mmu::enable();
    defmt::info!("dvm-firmware {=str}: MMU on", env!("CARGO_PKG_VERSION"));
    let mut cmdline = [0u8; 128];
    // QEMU passes the kernel's path, then the `-append` text.
    let args = report::command_line(&mut cmdline);
    if args
        .split(|&c| c == b' ')
        .any(|a| a == b"selftest=stack-overflow")
    {
        selftest::overflow_the_stack();
    }
    let status = job::run();
    defmt::info!("job done: {}", status.describe());
    report::exit(status)
}

#[panic_handler]
fn panic(info: &PanicInfo) -> ! {
    if let Some(loc) = info.location() {
        defmt::error!("panic at {=str}:{=u32}", loc.file(), loc.line());
    } else {
        defmt::error!("panic");
    }
    report::exit(Status::Panic)
}
