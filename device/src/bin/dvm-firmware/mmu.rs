//! An identity map with caches on and a guard page under the stack.
//!
//! 4 KiB granule, 39-bit addresses, translation from level 1:
//! - `0x0000_0000..0x4000_0000` (devices): one 1 GiB device-memory block,
//!   never executable;
//! - `0x4000_0000..0x8000_0000` (RAM on `virt`): a level-2 table of 2 MiB
//!   normal write-back blocks, except the 2 MiB around the stack guard,
//!   which is a level-3 table of 4 KiB pages with the guard page left
//!   unmapped: touching it is a data abort that [`crate::boot`] reports as a
//!   stack overflow;
//! - everything else unmapped.
//!
//! With the MMU on, RAM is normal memory, so unaligned accesses are allowed
//! and caches work.

use core::arch::asm;
use core::ptr::addr_of_mut;

use crate::layout;

const RAM_BASE: usize = 0x4000_0000;
const RAM_END: usize = 0x8000_0000;

#[repr(C, align(4096))]
struct Table([u64; 512]);

static mut L1: Table = Table([0; 512]);
static mut L2: Table = Table([0; 512]);
static mut L3: Table = Table([0; 512]);

const VALID: u64 = 1 << 0;
const TABLE: u64 = 1 << 1; // also "page" at level 3
const ATTR_DEVICE: u64 = 0 << 2; // MAIR index 0
const ATTR_NORMAL: u64 = 1 << 2; // MAIR index 1
const SH_INNER: u64 = 3 << 8;
const AF: u64 = 1 << 10;
const PXN: u64 = 1 << 53;
const UXN: u64 = 1 << 54;

/// MAIR: index 0 device nGnRnE, index 1 normal inner/outer write-back.
const MAIR: u64 = 0xff << 8;
/// TCR: T0SZ 25 (39-bit VA), inner/outer write-back walks, inner
/// shareable, 4 KiB granule, TTBR1 walks off (EPD1), 36-bit PA.
const TCR: u64 = 25 | (1 << 8) | (1 << 10) | (3 << 12) | (1 << 23) | (1 << 32);
const SCTLR_M: u64 = 1 << 0;
const SCTLR_A: u64 = 1 << 1;
const SCTLR_C: u64 = 1 << 2;
const SCTLR_I: u64 = 1 << 12;
const SCTLR_WXN: u64 = 1 << 19;

/// Builds the tables and turns the MMU and caches on. Call once, first.
pub fn enable() {
    let guard = layout::stack_guard();
    // SAFETY: runs once on the only core before anything else touches the
    // tables; the MMU is off, so the tables are written straight to memory.
    // The identity map keeps every address the code uses valid across the
    // switch, and the guard page holds no live data.
    unsafe {
        let l1 = &mut *addr_of_mut!(L1);
        let l2 = &mut *addr_of_mut!(L2);
        let l3 = &mut *addr_of_mut!(L3);
        l1.0[0] = VALID | ATTR_DEVICE | AF | PXN | UXN;
        l1.0[1] = (l2.0.as_ptr() as u64) | VALID | TABLE;
        for (i, e) in l2.0.iter_mut().enumerate() {
            *e = (RAM_BASE + (i << 21)) as u64 | VALID | ATTR_NORMAL | SH_INNER | AF;
        }
        if (RAM_BASE..RAM_END).contains(&guard) {
            let block = guard & !((1 << 21) - 1);
            for (j, e) in l3.0.iter_mut().enumerate() {
                let page = block + (j << 12);
                *e = if page == guard {
                    0
                } else {
                    page as u64 | VALID | TABLE | ATTR_NORMAL | SH_INNER | AF
                };
            }
            l2.0[(block - RAM_BASE) >> 21] = (l3.0.as_ptr() as u64) | VALID | TABLE;
        }
        asm!(
            "msr mair_el1, {mair}",
            "msr tcr_el1, {tcr}",
            "msr ttbr0_el1, {ttbr}",
            "dsb ish",
            "tlbi vmalle1",
            "dsb ish",
            "isb",
            "mrs {s}, sctlr_el1",
            "orr {s}, {s}, {set}",
            "bic {s}, {s}, {clear}",
            "msr sctlr_el1, {s}",
            "isb",
            mair = in(reg) MAIR,
            tcr = in(reg) TCR,
            ttbr = in(reg) l1.0.as_ptr() as u64,
            set = in(reg) SCTLR_M | SCTLR_C | SCTLR_I,
            clear = in(reg) SCTLR_A | SCTLR_WXN,
            s = out(reg) _,
        );
    }
}
