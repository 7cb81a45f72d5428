//! Boot code and the exception vectors.
//!
//! `_start` (placed first in `.text` by `link.x`) is where QEMU starts
//! core 0; `_dvm_secondary_start` is where PSCI `CPU_ON` starts the other
//! cores ([`crate::smp`]), with their core index in `x0`. Both then:
//! 1. at EL2 (`-M virt,virtualization=on`) make EL1 AArch64, stop
//!    trapping FP/SIMD, and `eret` to EL1 with interrupts masked; EL1 (the
//!    `virt` default) continues directly; EL3 is not supported (the core
//!    parks and the host's timeout reports it);
//! 2. turn FP/SIMD on (`CPACR_EL1.FPEN`), install the vector table and keep
//!    the core index in `TPIDR_EL1`;
//! 3. give `SP_EL1` the core's own exception stack and switch to `SP_EL0`
//!    for the core's main stack (from `link.x`, a guard page under each),
//!    so a fault on the main stack (a stack overflow into the guard page)
//!    is still reported on a good stack.
//!
//! Core 0 then zeroes `.bss` and calls `dvm_fw_main` with the EL it booted
//! at (which says which PSCI conduit QEMU offers). A secondary core turns
//! its MMU on with the tables core 0 built ([`crate::mmu`]), before it
//! touches memory, and calls `dvm_fw_secondary_main` with its index.
//!
//! A core that QEMU starts without PSCI (not core 0) parks in `wfe`.

use dvm_isa::job::Status;

use crate::{layout, mmu, report, CORES};

/// Size of each core's exception stack.
const EXC_STACK_BYTES: usize = 16 * 1024;

/// An exception stack (on `SP_EL1`).
#[repr(C, align(16))]
struct ExcStack([u8; EXC_STACK_BYTES]);

/// The cores' exception stacks, core `c`'s at index `c`.
#[no_mangle]
static mut DVM_EXC_STACK: [ExcStack; CORES] = [const { ExcStack([0; EXC_STACK_BYTES]) }; CORES];

// Registers: x19 holds the core index and x20 the EL the core entered at,
// from entry until the Rust code is called (nothing in between calls
// anything). Every address is that of a linker symbol: `adrp`/`add` for
// code and statics, `ldr =` for the absolute symbols of `link.x`.
core::arch::global_asm!(
    r#"
    .section .text.boot, "ax"
    .global _start
_start:
    // Core 0 only: QEMU keeps the others off until PSCI CPU_ON (or, with
    // PSCI off, starts them here, and they park).
    mrs     x0, mpidr_el1
    and     x0, x0, #0xff
    cbz     x0, 1f
0:  wfe
    b       0b
1:  mov     x19, #0
    b       2f

    // PSCI CPU_ON entry of a secondary core: x0 is the context id core 0
    // passed, the core index.
    .global _dvm_secondary_start
_dvm_secondary_start:
    mov     x19, x0

2:  mrs     x20, CurrentEL
    lsr     x20, x20, #2
    cmp     x20, #1
    b.eq    3f
    cmp     x20, #2
    b.ne    0b
    // EL2 -> EL1: EL1 is AArch64, no FP/SIMD traps, EL1h with DAIF masked.
    mov     x0, #(1 << 31)
    msr     hcr_el2, x0
    mov     x0, #0x33ff
    msr     cptr_el2, x0
    msr     hstr_el2, xzr
    mov     x0, #0x3c5
    msr     spsr_el2, x0
    adr     x0, 3f
    msr     elr_el2, x0
    eret
3:  mov     x0, #(3 << 20)
    msr     cpacr_el1, x0
    isb
    adrp    x0, _dvm_vectors
    add     x0, x0, :lo12:_dvm_vectors
    msr     vbar_el1, x0
    msr     tpidr_el1, x19
    // SP_EL1 = the top of this core's exception stack:
    // DVM_EXC_STACK + (index + 1) * size.
    adrp    x0, DVM_EXC_STACK
    add     x0, x0, :lo12:DVM_EXC_STACK
    add     x1, x19, #1
    ldr     x2, ={exc_stack}
    madd    x0, x1, x2, x0
    mov     sp, x0
    msr     spsel, #0
    // SP_EL0 = this core's stack top: _dvm_stack_top + index * stride.
    ldr     x0, =_dvm_stack_top
    ldr     x1, =_dvm_stack_stride
    madd    x0, x19, x1, x0
    mov     sp, x0
    cbnz    x19, 6f
    ldr     x0, =__bss_start
    ldr     x1, =__bss_end
4:  cmp     x0, x1
    b.hs    5f
    str     xzr, [x0], #8
    b       4b
5:  isb
    mov     x0, x20
    bl      dvm_fw_main
    b       0b

    // A secondary core: its MMU on with core 0's tables (the same
    // registers as `mmu::enable`), then Rust.
6:  ldr     x0, ={mair}
    msr     mair_el1, x0
    ldr     x0, ={tcr}
    msr     tcr_el1, x0
    adrp    x0, {l1}
    add     x0, x0, :lo12:{l1}
    msr     ttbr0_el1, x0
    dsb     ish
    tlbi    vmalle1
    dsb     ish
    isb
    mrs     x0, sctlr_el1
    ldr     x1, ={sctlr_set}
    orr     x0, x0, x1
    ldr     x1, ={sctlr_clear}
    bic     x0, x0, x1
    msr     sctlr_el1, x0
    isb
    mov     x0, x19
    bl      dvm_fw_secondary_main
    b       0b

    // The vector table: 16 entries of 0x80 bytes; each passes its index.
    .section .text.vectors, "ax"
    .balign 0x800
    .global _dvm_vectors
_dvm_vectors:
    .set idx, 0
    .rept 16
    .balign 0x80
    mov     x0, #idx
    b       dvm_fw_exception_entry
    .set idx, idx + 1
    .endr

dvm_fw_exception_entry:
    mrs     x1, esr_el1
    mrs     x2, far_el1
    mrs     x3, elr_el1
    bl      dvm_fw_exception
    b       .
"#,
    exc_stack = const EXC_STACK_BYTES,
    mair = const mmu::MAIR,
    tcr = const mmu::TCR,
    sctlr_set = const mmu::SCTLR_SET,
    sctlr_clear = const mmu::SCTLR_CLEAR,
    l1 = sym mmu::L1,
);

/// The index of the core this runs on (0 to [`CORES`] − 1), which the boot
/// code keeps in `TPIDR_EL1`.
pub fn core_index() -> usize {
    let core: u64;
    // SAFETY: reads a system register the boot code set; no memory access.
    unsafe { core::arch::asm!("mrs {}, tpidr_el1", out(reg) core, options(nomem, nostack)) };
    core as usize
}

/// ESR_EL1 exception class of a data abort taken without a change in EL.
const EC_DATA_ABORT_SAME_EL: u64 = 0x25;

/// Called from the vector table on the core's exception stack: logs what
/// happened and exits with [`Status::StackOverflow`] (a data abort in a
/// core's guard page) or [`Status::Exception`]. Exiting ends the emulation
/// (every core) without a report. An exception taken while this core
/// writes a log frame exits without logging ([`crate::logging_here`]).
#[no_mangle]
extern "C" fn dvm_fw_exception(vector: u64, esr: u64, far: u64, elr: u64) -> ! {
    let core = core_index();
    let class = esr >> 26;
    // The core whose guard page a data abort hit, if it hit one.
    let overflowed = (0..CORES)
        .find(|&c| (0..4096).contains(&far.wrapping_sub(layout::stack_guard(c) as u64)))
        .filter(|_| class == EC_DATA_ABORT_SAME_EL);
    if crate::logging_here() {
        report::exit(match overflowed {
            Some(_) => Status::StackOverflow,
            None => Status::Exception,
        })
    }
    if let Some(owner) = overflowed {
        defmt::error!(
            "core {=usize}: stack overflow: access at {=u64:#x} (core {=usize}'s guard page), pc {=u64:#x}",
            core,
            far,
            owner,
            elr
        );
        report::exit(Status::StackOverflow)
    }
    defmt::error!(
        "core {=usize}: exception: vector {=u64}, ESR {=u64:#x} (class {=u64:#x}), FAR {=u64:#x}, ELR {=u64:#x}",
        core,
        vector,
        esr,
        class,
        far,
        elr
    );
    report::exit(Status::Exception)
}
