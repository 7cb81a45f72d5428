//! The linker's error types: one per stage (linking, ELF objects, memory
//! layout). Every message names the input, kernel, symbol or setting at
//! fault.

use dvm_isa::{ParseError, VerifyError};

/// Why modules could not be linked.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// An input is not a valid module container.
    #[error("{input}: {source}")]
    Parse {
        /// The input (file name, or `module N`).
        input: String,
        /// What is wrong with it.
        source: ParseError,
    },
    /// An input's metadata disagrees with its tables.
    #[error("{input}: kernel {kernel}: {what}")]
    BadMeta {
        /// The input.
        input: String,
        /// The kernel (its name, or its index when the name is unknown).
        kernel: String,
        /// What disagrees.
        what: String,
    },
    /// A kernel of an input fails verification.
    #[error("{input}: kernel `{kernel}`: {source}")]
    Verify {
        /// The input.
        input: String,
        /// The kernel's name.
        kernel: String,
        /// The rule it breaks.
        source: VerifyError,
    },
    /// Two different kernels carry the same name.
    #[error(
        "kernel `{kernel}` is defined differently in {first} and in {second} \
         (only identical kernels may share a name)"
    )]
    NameClash {
        /// The kernel name.
        kernel: String,
        /// The input that defined it first.
        first: String,
        /// The input that defines it again, differently.
        second: String,
    },
    /// The linked image would overflow a 32-bit table index.
    #[error("the linked image has too many {what} ({count}) for the module format")]
    TooLarge {
        /// Which table.
        what: &'static str,
        /// How many entries it would need.
        count: u64,
    },
    /// The linked image does not verify although its inputs did: a bug in
    /// the linker, reported instead of writing a broken image.
    #[error("internal error: the linked image does not verify: {0}")]
    Internal(String),
}

/// Why an ELF object could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The bytes are not an ELF object `object` can parse.
    #[error("not an ELF object: {0}")]
    NotElf(String),
    /// The ELF object has no `.dvm.image` section.
    #[error("ELF object without a `.dvm.image` section (not written by `dvm link`?)")]
    NoImage,
    /// A part of the ELF object cannot be read (truncated, out of bounds).
    #[error("corrupt ELF object: {0}")]
    Corrupt(String),
    /// The image is not a valid module container.
    #[error("`.dvm.image` does not hold a valid module: {0}")]
    BadImage(ParseError),
    /// A kernel of the image fails verification.
    #[error("`.dvm.image`: kernel {kernel}: {source}")]
    Verify {
        /// The kernel (name or index).
        kernel: String,
        /// The rule it breaks.
        source: VerifyError,
    },
    /// A `dvm_*` symbol does not point where it should.
    #[error("symbol `{symbol}`: {what}")]
    BadSymbol {
        /// The symbol name.
        symbol: String,
        /// What is wrong with it.
        what: String,
    },
    /// A symbol the format requires is missing.
    #[error("missing symbol `{0}`")]
    MissingSymbol(String),
    /// The architecture name is not one the linker writes.
    #[error("unknown architecture `{0}` (expected aarch64 or x86_64)")]
    UnknownArch(String),
    /// `object` failed to write the file.
    #[error("cannot write the ELF object: {0}")]
    Write(String),
}

/// Why a device description cannot be laid out.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// RAM must start on a 4 KiB page.
    #[error("ram_base {0:#x} is not 4 KiB aligned")]
    RamBaseAlign(u64),
    /// RAM must not wrap around the address space.
    #[error("ram_base {base:#x} + ram_size {size:#x} overflows the 64-bit address space")]
    RamWraps {
        /// Base.
        base: u64,
        /// Size.
        size: u64,
    },
    /// The UB must be a non-zero multiple of 64 bytes that fits a `u32`.
    #[error("ub_size {0} is not a non-zero multiple of 64 bytes below 4 GiB")]
    UbSize(u64),
    /// The stack must be a multiple of 16 bytes, at least 4 KiB.
    #[error("stack_size {0} is not a multiple of 16 bytes of at least 4096")]
    StackSize(u64),
    /// The core count is not 1 to [`crate::layout::MAX_CORES`].
    #[error("cores {0} is not 1 to {max}", max = crate::layout::MAX_CORES)]
    Cores(u32),
    /// The cores' UBs, stack guards and stacks alone already exceed the RAM.
    #[error(
        "ram_size {ram:#x} cannot hold {cores} cores' UB ({ub:#x} each), stack guard page \
         and stack ({stack:#x} each); raise ram_size or lower ub_size/stack_size/cores"
    )]
    DoesNotFit {
        /// RAM bytes.
        ram: u64,
        /// UB bytes (per core).
        ub: u64,
        /// Stack bytes (per core).
        stack: u64,
        /// Cores.
        cores: u32,
    },
    /// A size on the command line does not parse.
    #[error("`{0}` is not a size (decimal or 0x hex, optional K/KiB, M/MiB or G/GiB suffix)")]
    BadNumber(String),
    /// A size on the command line is a number, but beyond 2^64-1 bytes.
    #[error("`{0}` is more than a 64-bit size or address can hold (2^64-1)")]
    TooLarge(String),
}
