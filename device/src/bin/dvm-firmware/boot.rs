//! Boot code and the exception vectors.
//!
//! `_start` (placed first in `.text` by `link.x`):
//! 1. cores other than 0 park in `wfe`;
//! 2. at EL2 (`-M virt,virtualization=on`) it makes EL1 AArch64, stops
//!    trapping FP/SIMD, and `eret`s to EL1 with interrupts masked; EL1 (the
//!    `virt` default) continues directly; EL3 is not supported (the core
//!    parks and the host's timeout reports it);
//! 3. FP/SIMD on (`CPACR_EL1.FPEN`), the vector table installed;
//! 4. `SP_EL1` gets a separate exception stack and the code switches to
//!    `SP_EL0` for the main stack, so a fault on the main stack (a stack
//!    overflow into the guard page) is still reported on a good stack;
//! 5. `.bss` zeroed, then `dvm_fw_main`.

use dvm_isa::job::Status;

use crate::{layout, report};

/// Size of the exception stack.
const EXC_STACK_BYTES: usize = 16 * 1024;

/// The exception stack (on `SP_EL1`).
#[repr(C, align(16))]
struct ExcStack([u8; EXC_STACK_BYTES]);

#[no_mangle]
static mut DVM_EXC_STACK: ExcStack = ExcStack([0; EXC_STACK_BYTES]);

core::arch::global_asm!(
    r#"
    .section .text.boot, "ax"
    .global _start
_start:
    mrs     x0, mpidr_el1
    and     x0, x0, #0xff
    cbz     x0, 1f
0:  wfe
    b       0b
1:  mrs     x0, CurrentEL
    lsr     x0, x0, #2
    cmp     x0, #1
    b.eq    3f
    cmp     x0, #2
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
    adrp    x0, DVM_EXC_STACK
    add     x0, x0, :lo12:DVM_EXC_STACK
    add     x0, x0, #{exc_stack}
    mov     sp, x0
    msr     spsel, #0
    ldr     x0, =_dvm_stack_top
    mov     sp, x0
    ldr     x0, =__bss_start
    ldr     x1, =__bss_end
4:  cmp     x0, x1
    b.hs    5f
    str     xzr, [x0], #8
    b       4b
5:  isb
    bl      dvm_fw_main
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
);

/// ESR_EL1 exception class of a data abort taken without a change in EL.
const EC_DATA_ABORT_SAME_EL: u64 = 0x25;

/// Called from the vector table on the exception stack: logs what happened
/// and exits with [`Status::StackOverflow`] (a data abort in the guard page)
/// or [`Status::Exception`].
#[no_mangle]
extern "C" fn dvm_fw_exception(vector: u64, esr: u64, far: u64, elr: u64) -> ! {
    let guard = layout::stack_guard() as u64;
    let class = esr >> 26;
    if class == EC_DATA_ABORT_SAME_EL && (guard..guard + 4096).contains(&far) {
        defmt::error!(
            "stack overflow: access at {=u64:#x} (guard page), pc {=u64:#x}",
            far,
            elr
        );
        report::exit(Status::StackOverflow)
    }
    defmt::error!(
        "exception: vector {=u64}, ESR {=u64:#x} (class {=u64:#x}), FAR {=u64:#x}, ELR {=u64:#x}",
        vector,
        esr,
        class,
        far,
        elr
    );
    report::exit(Status::Exception)
}
