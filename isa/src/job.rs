//! The job format between a host and the device firmware: what to run
//! ([`Job`]) and what happened ([`ReportHeader`], read back as a [`Report`]).
//!
//! ```text
//! JobHeader (32 bytes)        magic "DVMJ", version, total length, counts
//! ModuleEntry   × modules     offset, length of a DVMB module inside the job
//! BufferEntry   × buffers     offset, length, flags (output: written back)
//! LaunchEntry   × launches    module, kernel, first argument, argument count, blocks
//! u32           × arguments   buffer indices, launch by launch
//! …                           module bytes and buffer bytes, 64-byte aligned
//! ```
//!
//! The report the firmware writes back:
//!
//! ```text
//! ReportHeader (32 bytes)     magic "DVMR", version, cores, status, failed launch, detail
//! LaunchReport  × launches    tiles and virtual instructions run, cores that ran tiles, per launch that ran
//! …                           the bytes of every output buffer, in buffer order
//! ```
//!
//! Offsets are from the start of the job; every table type has alignment one
//! and is read in place, so [`Job::parse`] copies nothing. Buffers are
//! mutable: the firmware runs launches over the job's own bytes.

use core::fmt;

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// The magic bytes of a job.
pub const JOB_MAGIC: [u8; 4] = *b"DVMJ";
/// The magic bytes of a report.
pub const REPORT_MAGIC: [u8; 4] = *b"DVMR";
/// Major version of both formats. Version 2 added the cores to the report
/// ([`ReportHeader::cores`], [`LaunchReport::core_mask`]).
pub const JOB_VERSION: u16 = 2;
/// Alignment of module and buffer bytes inside a job.
pub const JOB_ALIGN: usize = 64;
/// [`BufferEntry::flags`] bit: the buffer is written back in the report.
pub const BUF_OUTPUT: u32 = 1;

/// The fixed job header.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct JobHeader {
    /// [`JOB_MAGIC`].
    pub magic: [u8; 4],
    /// [`JOB_VERSION`].
    pub version: U16,
    /// Reserved, zero.
    pub reserved: U16,
    /// Length of the whole job in bytes.
    pub total_len: U64,
    /// Number of [`ModuleEntry`]s.
    pub modules: U32,
    /// Number of [`BufferEntry`]s.
    pub buffers: U32,
    /// Number of [`LaunchEntry`]s.
    pub launches: U32,
    /// Number of `u32` launch arguments.
    pub args: U32,
}

/// A module inside the job.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct ModuleEntry {
    /// Byte offset in the job.
    pub offset: U64,
    /// Length in bytes.
    pub len: U64,
}

/// A global-memory buffer inside the job.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct BufferEntry {
    /// Byte offset in the job ([`JOB_ALIGN`]-aligned).
    pub offset: U64,
    /// Length in bytes.
    pub len: U64,
    /// [`BUF_OUTPUT`] or zero.
    pub flags: U32,
    /// Reserved, zero.
    pub reserved: U32,
}

/// One kernel launch.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct LaunchEntry {
    /// Index of the module.
    pub module: U32,
    /// Index of the kernel in that module.
    pub kernel: U32,
    /// First argument in the argument table.
    pub first_arg: U32,
    /// Number of arguments (buffer indices, one per kernel parameter).
    pub arg_count: U32,
    /// Blocks the tile range is split into (run one after the other).
    pub blocks: U32,
    /// Reserved, zero.
    pub reserved: U32,
}

/// The fixed report header.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct ReportHeader {
    /// [`REPORT_MAGIC`].
    pub magic: [u8; 4],
    /// [`JOB_VERSION`].
    pub version: U16,
    /// Cores the firmware ran the job on (those that started).
    pub cores: U16,
    /// A [`Status`] code.
    pub status: U32,
    /// The launch that failed, or `u32::MAX`.
    pub failed_launch: U32,
    /// Status-specific detail (a rule, a parameter index, an address).
    pub detail: U64,
    /// Number of [`LaunchReport`]s that follow (the launches that ran).
    pub launches: U32,
    /// Number of [`OutputHeader`]s (each followed by its bytes, padded to
    /// 8) after the launch reports.
    pub outputs: U32,
}

/// Precedes the bytes of one output buffer in a report.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct OutputHeader {
    /// Index of the buffer in the job.
    pub buffer: U32,
    /// Reserved, zero.
    pub reserved: U32,
    /// Length of the bytes that follow.
    pub len: U64,
}

/// What one launch did.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(C)]
pub struct LaunchReport {
    /// Tiles run.
    pub tiles: U64,
    /// Virtual instructions executed.
    pub instrs: U64,
    /// Bit `c` is set when core `c` ran at least one of the launch's tiles.
    pub core_mask: U64,
}

/// Size of [`JobHeader`] and of [`ReportHeader`] in bytes.
pub const HEADER_BYTES: usize = 32;
const _: () = assert!(core::mem::size_of::<JobHeader>() == HEADER_BYTES);
const _: () = assert!(core::mem::size_of::<ReportHeader>() == HEADER_BYTES);

/// What happened to a job: the firmware's exit code and report status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Status {
    /// Every launch ran.
    Ok = 0,
    /// The job itself is malformed (header, tables, ranges).
    BadJob = 1,
    /// A module did not parse.
    BadModule = 2,
    /// A kernel did not verify.
    Verify = 3,
    /// A launch names a module or kernel that does not exist.
    MissingKernel = 4,
    /// A launch's buffers do not fit its kernel (count, size, access, alignment).
    Bind = 5,
    /// A kernel does not fit the executor's program capacity or UB.
    Capacity = 6,
    /// The executor stopped a tile (a bounds check fired).
    Fault = 7,
    /// The report could not be written to the host.
    Io = 8,
    /// The firmware panicked.
    Panic = 100,
    /// A CPU exception (data abort, undefined instruction, …).
    Exception = 101,
    /// The stack ran into its guard page.
    StackOverflow = 102,
}

impl Status {
    /// Decodes a status code.
    pub const fn from_u32(v: u32) -> Option<Status> {
        Some(match v {
            0 => Status::Ok,
            1 => Status::BadJob,
            2 => Status::BadModule,
            3 => Status::Verify,
            4 => Status::MissingKernel,
            5 => Status::Bind,
            6 => Status::Capacity,
            7 => Status::Fault,
            8 => Status::Io,
            100 => Status::Panic,
            101 => Status::Exception,
            102 => Status::StackOverflow,
            _ => return None,
        })
    }

    /// What the status means, in words.
    pub const fn describe(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::BadJob => "malformed job",
            Status::BadModule => "module does not parse",
            Status::Verify => "kernel does not verify",
            Status::MissingKernel => "launch names a missing module or kernel",
            Status::Bind => "buffers do not fit the kernel",
            Status::Capacity => "kernel exceeds the executor's capacity",
            Status::Fault => "executor fault",
            Status::Io => "cannot write the report",
            Status::Panic => "firmware panic",
            Status::Exception => "CPU exception",
            Status::StackOverflow => "stack overflow",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// Why a job did not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// Shorter than its header or its declared length.
    #[error("job is truncated")]
    Truncated,
    /// Wrong magic bytes.
    #[error("not a dvm job (bad magic)")]
    BadMagic,
    /// A version this reader does not know.
    #[error("unsupported job version {0}")]
    BadVersion(u16),
    /// A reserved field is not zero.
    #[error("reserved job field is set")]
    Reserved,
    /// A table does not fit the job.
    #[error("job tables run past the end")]
    Tables,
    /// A module or buffer range leaves the job, overlaps the tables, or a
    /// buffer is not aligned.
    #[error("{what} {index} has a bad range")]
    Range {
        /// "module" or "buffer".
        what: &'static str,
        /// Its index.
        index: u32,
    },
    /// A launch's arguments leave the argument table, or an argument names
    /// no buffer.
    #[error("launch {0} has bad arguments")]
    Args(u32),
    /// Two buffers overlap, or a buffer overlaps a module.
    #[error("buffer {0} overlaps another range")]
    Overlap(u32),
}

/// A parsed job, viewing its bytes in place.
#[derive(Debug)]
pub struct Job<'a> {
    bytes: &'a [u8],
    modules: &'a [ModuleEntry],
    buffers: &'a [BufferEntry],
    launches: &'a [LaunchEntry],
    args: &'a [U32],
}

fn table<'a, T: FromBytes + Immutable + KnownLayout + Unaligned>(
    bytes: &'a [u8],
    at: &mut usize,
    n: u32,
) -> Result<&'a [T], JobError> {
    let size = (n as usize)
        .checked_mul(core::mem::size_of::<T>())
        .ok_or(JobError::Tables)?;
    let end = at.checked_add(size).ok_or(JobError::Tables)?;
    let slice = bytes.get(*at..end).ok_or(JobError::Tables)?;
    *at = end;
    <[T]>::ref_from_bytes(slice).map_err(|_| JobError::Tables)
}

impl<'a> Job<'a> {
    /// Parses and checks the header, the tables and every range: after this,
    /// every module and buffer range lies inside the job, past the tables,
    /// buffers are [`JOB_ALIGN`]-aligned (relative to the job start) and do
    /// not overlap each other or a module, and every launch argument names a
    /// buffer.
    ///
    /// # Errors
    /// [`JobError`] naming the first thing that is wrong.
    pub fn parse(bytes: &'a [u8]) -> Result<Job<'a>, JobError> {
        let (h, _) = JobHeader::ref_from_prefix(bytes).map_err(|_| JobError::Truncated)?;
        if h.magic != JOB_MAGIC {
            return Err(JobError::BadMagic);
        }
        if h.version.get() != JOB_VERSION {
            return Err(JobError::BadVersion(h.version.get()));
        }
        if h.reserved.get() != 0 {
            return Err(JobError::Reserved);
        }
        let total = usize::try_from(h.total_len.get()).map_err(|_| JobError::Truncated)?;
        let bytes = bytes.get(..total).ok_or(JobError::Truncated)?;
        let mut at = HEADER_BYTES;
        let modules = table::<ModuleEntry>(bytes, &mut at, h.modules.get())?;
        let buffers = table::<BufferEntry>(bytes, &mut at, h.buffers.get())?;
        let launches = table::<LaunchEntry>(bytes, &mut at, h.launches.get())?;
        let args = table::<U32>(bytes, &mut at, h.args.get())?;
        let tables_end = at as u64;
        let range = |what, index: usize, off: u64, len: u64, align: u64| {
            let err = JobError::Range {
                what,
                index: index as u32,
            };
            let end = off.checked_add(len).ok_or(err)?;
            if off < tables_end || end > total as u64 || !off.is_multiple_of(align) {
                return Err(err);
            }
            Ok((off, end))
        };
        for (i, m) in modules.iter().enumerate() {
            range("module", i, m.offset.get(), m.len.get(), 8)?;
        }
        for (i, b) in buffers.iter().enumerate() {
            let (lo, hi) = range("buffer", i, b.offset.get(), b.len.get(), JOB_ALIGN as u64)?;
            if b.reserved.get() != 0 || b.flags.get() & !BUF_OUTPUT != 0 {
                return Err(JobError::Reserved);
            }
            let overlaps = |o: u64, l: u64| lo < o + l && o < hi && l > 0 && hi > lo;
            let clash = buffers[..i]
                .iter()
                .any(|o| overlaps(o.offset.get(), o.len.get()))
                || modules
                    .iter()
                    .any(|m| overlaps(m.offset.get(), m.len.get()));
            if clash {
                return Err(JobError::Overlap(i as u32));
            }
        }
        for (i, l) in launches.iter().enumerate() {
            let bad = JobError::Args(i as u32);
            if l.reserved.get() != 0 {
                return Err(JobError::Reserved);
            }
            let lo = l.first_arg.get() as usize;
            let hi = lo.checked_add(l.arg_count.get() as usize).ok_or(bad)?;
            let a = args.get(lo..hi).ok_or(bad)?;
            if a.iter().any(|b| b.get() >= h.buffers.get()) {
                return Err(bad);
            }
        }
        Ok(Job {
            bytes,
            modules,
            buffers,
            launches,
            args,
        })
    }

    /// The job's bytes (up to its declared length).
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Number of modules.
    pub fn module_count(&self) -> usize {
        self.modules.len()
    }

    /// The module table.
    pub fn modules(&self) -> &'a [ModuleEntry] {
        self.modules
    }

    /// The argument table (buffer indices of every launch, in launch order;
    /// each [`LaunchEntry`] names its run of it).
    pub fn arg_table(&self) -> &'a [U32] {
        self.args
    }

    /// The bytes of module `i`.
    pub fn module(&self, i: usize) -> Option<&'a [u8]> {
        let m = self.modules.get(i)?;
        let lo = m.offset.get() as usize;
        self.bytes.get(lo..lo + m.len.get() as usize)
    }

    /// The buffer table.
    pub fn buffers(&self) -> &'a [BufferEntry] {
        self.buffers
    }

    /// The launch table.
    pub fn launches(&self) -> &'a [LaunchEntry] {
        self.launches
    }

    /// The buffer indices launch `l` binds, one per kernel parameter.
    pub fn args(&self, l: &LaunchEntry) -> impl Iterator<Item = usize> + 'a {
        let lo = l.first_arg.get() as usize;
        let hi = lo + l.arg_count.get() as usize;
        let args = self.args.get(lo..hi).unwrap_or(&[]);
        args.iter().map(|a| a.get() as usize)
    }
}

#[cfg(feature = "alloc")]
mod write;
#[cfg(feature = "alloc")]
pub use write::{parse_report, JobBuilder, Report, ReportError};
