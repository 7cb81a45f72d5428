//! The firmware's memory layout: `memory.x` from a [`DeviceDesc`] and a
//! fixed `link.x` that includes it (cortex-m-rt style).
//!
//! `memory.x` ([`memory_x`]) defines the `RAM` region, two sizes and the
//! number of cores:
//!
//! ```text
//! MEMORY { RAM : ORIGIN = 0x40080000, LENGTH = 0xf80000 }
//! _dvm_stack_size = 0x10000;
//! _dvm_ub_size = 0x30000;
//! _dvm_cores = 2;
//! ```
//!
//! Every core has its own UB and its own stack with a guard page under it;
//! core `c`'s UB starts at `_dvm_ub_start + c·_dvm_ub_size` and its guard
//! page at `_dvm_stack_guard + c·_dvm_stack_stride`, where
//! `_dvm_stack_stride = 4096 + ALIGN(_dvm_stack_size, 4096)` (its stack
//! top is `guard + 4096 + _dvm_stack_size`).
//!
//! `link.x` ([`link_x`]) places, in this order and all in `RAM`:
//!
//! | output section | contents, symbols | segment |
//! |---|---|---|
//! | `.text` | `KEEP(*(.text.boot))` first (entry `_start`), then `*(.text .text.*)` | `text` (R X) |
//! | `.rodata` | `*(.rodata .rodata.*)` | `text` |
//! | `.dvm.image` | `KEEP(*(.dvm.image))`: kernels linked in by `dvm link` | `text` |
//! | `.data` | `*(.data .data.*)`, starts on a new 4 KiB page | `data` (R W) |
//! | `.bss` (NOLOAD) | `__bss_start` … `__bss_end`, both 8-byte aligned | `data` |
//! | `.ub` (NOLOAD) | `_dvm_ub_start` (64-byte aligned) … `_dvm_ub_end = _dvm_ub_start + _dvm_cores·_dvm_ub_size`: one UB per core | `data` |
//! | `.stack` (NOLOAD) | per core, from `_dvm_stack_guard` (4 KiB aligned): a 4096-byte guard page, then the stack; core 0's are `_dvm_stack_guard`, `_dvm_stack_bottom = _dvm_stack_guard + 4096`, `_dvm_stack_top = _dvm_stack_bottom + _dvm_stack_size` (16-byte aligned); `_dvm_stacks_end = _dvm_stack_guard + _dvm_cores·_dvm_stack_stride` | `data` |
//!
//! and then `_dvm_ram_end = ORIGIN(RAM) + LENGTH(RAM)` and
//! `_dvm_job_base = ALIGN(_dvm_stacks_end, 4096)`, where the host's loader
//! places the job (it may extend past the `RAM` region into the rest of
//! guest RAM). `.ARM.exidx*` and `.comment` are discarded. `ASSERT`s fail
//! the link with a `dvm: …` message when the last stack passes the end of
//! RAM, the UB size is not a non-zero multiple of 64, the stack size is not
//! a multiple of 16 of at least 4 KiB, the core count is not 1 to
//! [`MAX_CORES`], or the RAM origin is not 4 KiB aligned.

use crate::error::LayoutError;

/// Size of the stack guard page below the stack.
pub const GUARD_SIZE: u64 = 4096;

/// Most cores a firmware layout may have. The firmware starts core `c` as
/// the CPU with MPIDR affinity 0 equal to `c` (affinity 1 zero), which QEMU
/// `virt` gives its first 8 CPUs (its GICv2 limit).
pub const MAX_CORES: u32 = 8;

/// What the firmware's memory looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceDesc {
    /// First byte of the RAM the firmware is linked into.
    pub ram_base: u64,
    /// Bytes of that RAM.
    pub ram_size: u64,
    /// Bytes of the unified buffer (UB).
    pub ub_size: u64,
    /// Bytes of each core's stack (a guard page lies below it).
    pub stack_size: u64,
    /// Cores the firmware runs on, 1 to [`MAX_CORES`]; each has its own UB
    /// of `ub_size` bytes and its own stack.
    pub cores: u32,
}

impl DeviceDesc {
    /// QEMU `virt`: RAM from 0x4008_0000 (above QEMU's DTB at 0x4000_0000),
    /// 16 MiB − 512 KiB of it, 2 cores, each with a 192 KiB UB and a 64 KiB
    /// stack.
    pub const QEMU_VIRT: DeviceDesc = DeviceDesc {
        ram_base: 0x4008_0000,
        ram_size: (16 << 20) - 0x8_0000,
        ub_size: 192 << 10,
        stack_size: 64 << 10,
        cores: 2,
    };

    /// Bytes from one core's stack guard page to the next core's:
    /// the guard page plus the stack rounded up to whole pages.
    pub fn stack_stride(&self) -> Option<u64> {
        self.stack_size
            .checked_next_multiple_of(GUARD_SIZE)?
            .checked_add(GUARD_SIZE)
    }

    /// Checks what the link script's `ASSERT`s check, as far as it can be
    /// known without the code: RAM origin 4 KiB aligned and not wrapping,
    /// UB a non-zero multiple of 64 below 4 GiB, stack a multiple of 16 of
    /// at least 4 KiB, 1 to [`MAX_CORES`] cores, and every core's UB,
    /// guard page and stack within the RAM.
    ///
    /// # Errors
    /// The first [`LayoutError`] found.
    pub fn validate(&self) -> Result<(), LayoutError> {
        if !self.ram_base.is_multiple_of(4096) {
            return Err(LayoutError::RamBaseAlign(self.ram_base));
        }
        if self.ram_base.checked_add(self.ram_size).is_none() {
            return Err(LayoutError::RamWraps {
                base: self.ram_base,
                size: self.ram_size,
            });
        }
        if self.ub_size == 0
            || !self.ub_size.is_multiple_of(64)
            || self.ub_size > u64::from(u32::MAX)
        {
            return Err(LayoutError::UbSize(self.ub_size));
        }
        if !self.stack_size.is_multiple_of(16) || self.stack_size < 4096 {
            return Err(LayoutError::StackSize(self.stack_size));
        }
        if self.cores == 0 || self.cores > MAX_CORES {
            return Err(LayoutError::Cores(self.cores));
        }
        let cores = u64::from(self.cores);
        let need = self
            .stack_stride()
            .and_then(|stride| self.ub_size.checked_add(stride)?.checked_mul(cores));
        if need.is_none_or(|n| n > self.ram_size) {
            return Err(LayoutError::DoesNotFit {
                ram: self.ram_size,
                ub: self.ub_size,
                stack: self.stack_size,
                cores: self.cores,
            });
        }
        Ok(())
    }
}

impl Default for DeviceDesc {
    fn default() -> Self {
        DeviceDesc::QEMU_VIRT
    }
}

/// The text of `memory.x` for `desc`: the `RAM` region, `_dvm_stack_size`,
/// `_dvm_ub_size` and `_dvm_cores`. It does not check `desc`; call
/// [`DeviceDesc::validate`] first (the link script's `ASSERT`s catch the
/// rest at link time).
pub fn memory_x(desc: &DeviceDesc) -> String {
    format!(
        "/* dvm firmware memory, generated by dvm-linker (`dvm memory-x`). */\n\
         MEMORY\n\
         {{\n  RAM : ORIGIN = {:#x}, LENGTH = {:#x}\n}}\n\
         \n\
         /* Bytes of each core's stack (above a 4096-byte guard page) and unified buffer. */\n\
         _dvm_stack_size = {:#x};\n\
         _dvm_ub_size = {:#x};\n\
         /* Cores the firmware starts (PSCI CPU_ON); each has its own UB and stack. */\n\
         _dvm_cores = {};\n",
        desc.ram_base, desc.ram_size, desc.stack_size, desc.ub_size, desc.cores
    )
}

/// The text of `link.x`, the firmware's link script. It includes
/// `memory.x` (put both in a directory on the linker's search path, `-L`).
pub fn link_x() -> String {
    LINK_X.to_string()
}

const LINK_X: &str = r#"/* dvm firmware link script, generated by dvm-linker (`dvm memory-x`).
   The RAM region and the UB and stack sizes come from memory.x. */
INCLUDE memory.x

ENTRY(_start)

/* From one core's stack guard page to the next core's. */
_dvm_stack_stride = 4096 + ALIGN(_dvm_stack_size, 4096);

PHDRS
{
  text PT_LOAD FLAGS(5);  /* R X */
  data PT_LOAD FLAGS(6);  /* R W */
}

SECTIONS
{
  .text ORIGIN(RAM) :
  {
    KEEP(*(.text.boot))
    *(.text .text.*)
  } > RAM :text

  .rodata : ALIGN(8)
  {
    *(.rodata .rodata.*)
  } > RAM :text

  /* Kernel images from `dvm link` objects, if any are linked in. */
  .dvm.image : ALIGN(8)
  {
    KEEP(*(.dvm.image))
  } > RAM :text

  /* Read-write data starts on its own page. */
  .data : ALIGN(4096)
  {
    *(.data .data.*)
  } > RAM :data

  .bss (NOLOAD) : ALIGN(8)
  {
    __bss_start = .;
    *(.bss .bss.* COMMON)
    . = ALIGN(8);
    __bss_end = .;
  } > RAM :data

  /* One UB per core: core c's starts at _dvm_ub_start + c * _dvm_ub_size. */
  .ub (NOLOAD) : ALIGN(64)
  {
    _dvm_ub_start = .;
    . += _dvm_ub_size * _dvm_cores;
  } > RAM :data
  _dvm_ub_end = _dvm_ub_start + _dvm_ub_size * _dvm_cores;

  /* Per core: a guard page, then the stack; core c's guard page is at
     _dvm_stack_guard + c * _dvm_stack_stride. */
  .stack (NOLOAD) : ALIGN(4096)
  {
    _dvm_stack_guard = .;
    . += 4096;
    _dvm_stack_bottom = .;
    . += _dvm_stack_size;
    _dvm_stack_top = .;
    . = _dvm_stack_guard + _dvm_stack_stride * _dvm_cores;
    _dvm_stacks_end = .;
  } > RAM :data

  /DISCARD/ :
  {
    *(.ARM.exidx .ARM.exidx.*)
    *(.comment)
  }
}

_dvm_ram_end = ORIGIN(RAM) + LENGTH(RAM);
_dvm_job_base = ALIGN(_dvm_stacks_end, 4096);

ASSERT(ORIGIN(RAM) % 4096 == 0,
  "dvm: RAM origin is not 4 KiB aligned; fix ram_base in memory.x")
ASSERT(_dvm_ub_size > 0 && _dvm_ub_size % 64 == 0,
  "dvm: _dvm_ub_size must be a non-zero multiple of 64 bytes; fix ub_size in memory.x")
ASSERT(_dvm_stack_size >= 4096 && _dvm_stack_size % 16 == 0,
  "dvm: _dvm_stack_size must be a multiple of 16 bytes of at least 4096; fix stack_size in memory.x")
ASSERT(_dvm_cores >= 1 && _dvm_cores <= 8,
  "dvm: _dvm_cores must be 1 to 8 (core c is MPIDR affinity 0 = c); fix cores in memory.x")
ASSERT(_dvm_stack_top % 16 == 0, "dvm: the stack top is not 16-byte aligned")
ASSERT(_dvm_stacks_end <= _dvm_ram_end,
  "dvm: firmware RAM too small: code + data + a UB and a stack per core end past ORIGIN(RAM)+LENGTH(RAM); raise ram_size or lower cores/stack_size/ub_size")
"#;

/// Parses a size or address: decimal or `0x` hex, `_` separators allowed,
/// with an optional `K`/`KiB`, `M`/`MiB` or `G`/`GiB` suffix (powers of
/// 1024). For command-line options.
///
/// # Errors
/// [`LayoutError::BadNumber`] when `s` is not such a number,
/// [`LayoutError::TooLarge`] when it is one that overflows a `u64`.
pub fn parse_size(s: &str) -> Result<u64, LayoutError> {
    let bad = || LayoutError::BadNumber(s.to_string());
    let t = s.trim();
    let (digits, shift) = [
        ("KiB", 10),
        ("MiB", 20),
        ("GiB", 30),
        ("K", 10),
        ("M", 20),
        ("G", 30),
    ]
    .into_iter()
    .find_map(|(suffix, shift)| t.strip_suffix(suffix).map(|d| (d, shift)))
    .unwrap_or((t, 0));
    let digits: String = digits.chars().filter(|c| *c != '_').collect();
    let too_large = || LayoutError::TooLarge(s.to_string());
    let value = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => digits.parse::<u64>(),
    }
    .map_err(|e| match e.kind() {
        core::num::IntErrorKind::PosOverflow => too_large(),
        _ => bad(),
    })?;
    value.checked_mul(1u64 << shift).ok_or_else(too_large)
}
