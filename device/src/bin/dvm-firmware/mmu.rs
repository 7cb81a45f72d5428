//! An identity map with caches on and a guard page under each core's stack.
//!
//! 4 KiB granule, 39-bit addresses, translation from level 1:
//! - `0x0000_0000..0x4000_0000` (devices): one 1 GiB device-memory block,
//!   never executable;
//! - `0x4000_0000..0x8000_0000` (RAM on `virt`): a level-2 table of 2 MiB
//!   normal write-back blocks, inner shareable (so exclusives and the
//!   atomics the cores share work), except each 2 MiB block holding a
//!   core's stack guard page, which is a level-3 table of 4 KiB pages with
//!   the guard pages left unmapped: touching one is a data abort that
//!   [`crate::boot`] reports as a stack overflow;
//! - everything else unmapped.
//!
//! Core 0 builds the tables ([`enable`]); the other cores load the same
//! registers in their boot code ([`crate::boot`]). With the MMU on, RAM is
//! normal memory, so unaligned accesses are allowed and caches work.

use core::arch::asm;
use core::ptr::addr_of_mut;

use crate::{layout, CORES};

const RAM_BASE: usize = 0x4000_0000;
const RAM_END: usize = 0x8000_0000;

/// A translation table.
#[repr(C, align(4096))]
pub struct Table([u64; 512]);

/// The level-1 table (its address goes to `TTBR0_EL1` on every core).
pub static mut L1: Table = Table([0; 512]);
static mut L2: Table = Table([0; 512]);
/// Level-3 tables: at most one per core's guard page.
static mut L3: [Table; CORES] = [const { Table([0; 512]) }; CORES];

const VALID: u64 = 1 << 0;
const TABLE: u64 = 1 << 1; // also "page" at level 3
const ATTR_DEVICE: u64 = 0 << 2; // MAIR index 0
const ATTR_NORMAL: u64 = 1 << 2; // MAIR index 1
const SH_INNER: u64 = 3 << 8;
const AF: u64 = 1 << 10;
const PXN: u64 = 1 << 53;
const UXN: u64 = 1 << 54;

/// MAIR: index 0 device nGnRnE, index 1 normal inner/outer write-back.
pub const MAIR: u64 = 0xff << 8;
/// TCR: T0SZ 25 (39-bit VA), inner/outer write-back walks, inner
/// shareable, 4 KiB granule, TTBR1 walks off (EPD1), 36-bit PA.
pub const TCR: u64 = 25 | (1 << 8) | (1 << 10) | (3 << 12) | (1 << 23) | (1 << 32);
const SCTLR_M: u64 = 1 << 0;
const SCTLR_A: u64 = 1 << 1;
const SCTLR_C: u64 = 1 << 2;
const SCTLR_I: u64 = 1 << 12;
const SCTLR_WXN: u64 = 1 << 19;
/// `SCTLR_EL1` bits set: MMU, data and instruction caches.
pub const SCTLR_SET: u64 = SCTLR_M | SCTLR_C | SCTLR_I;
/// `SCTLR_EL1` bits cleared: alignment checks, write-implies-never-execute.
pub const SCTLR_CLEAR: u64 = SCTLR_A | SCTLR_WXN;
/// Address bits of a table descriptor.
const TABLE_ADDR: u64 = 0x0000_ffff_ffff_f000;

/// Builds the tables and turns the MMU and caches on, on core 0. Call once,
/// first, before any other core starts.
pub fn enable() {
    // SAFETY: runs once on core 0 before anything else touches the tables
    // and before the other cores start; the MMU is off, so the tables are
    // written straight to memory (where the other cores' table walks find
    // them). The identity map keeps every address the code uses valid
    // across the switch, and the guard pages hold no live data.
    unsafe {
        let l1 = &mut *addr_of_mut!(L1);
        let l2 = &mut *addr_of_mut!(L2);
        let l3s = &mut *addr_of_mut!(L3);
        l1.0[0] = VALID | ATTR_DEVICE | AF | PXN | UXN;
        l1.0[1] = (l2.0.as_ptr() as u64) | VALID | TABLE;
        for (i, e) in l2.0.iter_mut().enumerate() {
            *e = (RAM_BASE + (i << 21)) as u64 | VALID | ATTR_NORMAL | SH_INNER | AF;
        }
        let mut used = 0;
        for core in 0..CORES {
            let guard = layout::stack_guard(core);
            if !(RAM_BASE..RAM_END).contains(&guard) {
                continue;
            }
            let block = guard & !((1 << 21) - 1);
            let entry = &mut l2.0[(block - RAM_BASE) >> 21];
            // The block's level-3 table: a new one (all pages mapped) for
            // the first guard page in the block.
            let l3 = if *entry & TABLE != 0 {
                &mut *((*entry & TABLE_ADDR) as *mut Table)
            } else {
                let l3 = &mut l3s[used];
                used += 1;
                for (j, e) in l3.0.iter_mut().enumerate() {
                    let page = block + (j << 12);
                    *e = page as u64 | VALID | TABLE | ATTR_NORMAL | SH_INNER | AF;
                }
                *entry = (l3.0.as_ptr() as u64) | VALID | TABLE;
                l3
            };
            l3.0[(guard - block) >> 12] = 0;
        }
        // Attributes, translation control and the table base; then the TLBs
        // invalidated (after the table writes are complete) and, once that
        // is done, the MMU and caches turned on in SCTLR_EL1.
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
            set = in(reg) SCTLR_SET,
            clear = in(reg) SCTLR_CLEAR,
            s = out(reg) _,
        );
    }
}
