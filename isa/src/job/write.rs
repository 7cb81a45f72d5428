//! Writing jobs and reading reports (host side).

use alloc::vec::Vec;

use zerocopy::{FromBytes, IntoBytes};

use super::{
    BufferEntry, JobHeader, LaunchEntry, LaunchReport, ModuleEntry, OutputHeader, ReportHeader,
    Status, BUF_OUTPUT, HEADER_BYTES, JOB_ALIGN, JOB_MAGIC, JOB_VERSION, REPORT_MAGIC,
};

struct LaunchSpec {
    module: u32,
    kernel: u32,
    args: Vec<u32>,
    blocks: u32,
}

/// Collects modules, buffers and launches, then lays them out as one job.
#[derive(Default)]
pub struct JobBuilder {
    modules: Vec<Vec<u8>>,
    buffers: Vec<(Vec<u8>, bool)>,
    launches: Vec<LaunchSpec>,
}

impl JobBuilder {
    /// An empty job.
    pub fn new() -> JobBuilder {
        JobBuilder::default()
    }

    /// Adds a module; returns its index.
    pub fn module(&mut self, bytes: &[u8]) -> u32 {
        self.modules.push(bytes.to_vec());
        (self.modules.len() - 1) as u32
    }

    /// Adds a buffer with its initial contents; `output` buffers come back in
    /// the report. Returns its index.
    pub fn buffer(&mut self, init: Vec<u8>, output: bool) -> u32 {
        self.buffers.push((init, output));
        (self.buffers.len() - 1) as u32
    }

    /// Adds a launch of kernel `kernel` of module `module` over `args`
    /// (buffer indices, one per parameter), split into `blocks` blocks.
    pub fn launch(&mut self, module: u32, kernel: u32, args: &[u32], blocks: u32) {
        self.launches.push(LaunchSpec {
            module,
            kernel,
            args: args.to_vec(),
            blocks,
        });
    }

    /// The job's bytes. Nothing is checked here: the firmware's
    /// [`super::Job::parse`] and verifier are the judges.
    pub fn finish(&self) -> Vec<u8> {
        let n_args: usize = self.launches.iter().map(|l| l.args.len()).sum();
        let tables = HEADER_BYTES
            + self.modules.len() * core::mem::size_of::<ModuleEntry>()
            + self.buffers.len() * core::mem::size_of::<BufferEntry>()
            + self.launches.len() * core::mem::size_of::<LaunchEntry>()
            + n_args * 4;
        let mut at = tables.next_multiple_of(JOB_ALIGN);
        let mut place = |len: usize| {
            let off = at;
            at = (at + len).next_multiple_of(JOB_ALIGN);
            off
        };
        let module_offs: Vec<usize> = self.modules.iter().map(|m| place(m.len())).collect();
        let buffer_offs: Vec<usize> = self.buffers.iter().map(|(b, _)| place(b.len())).collect();
        let total = at;

        let mut out = Vec::with_capacity(total);
        let header = JobHeader {
            magic: JOB_MAGIC,
            version: JOB_VERSION.into(),
            reserved: 0.into(),
            total_len: (total as u64).into(),
            modules: (self.modules.len() as u32).into(),
            buffers: (self.buffers.len() as u32).into(),
            launches: (self.launches.len() as u32).into(),
            args: (n_args as u32).into(),
        };
        out.extend_from_slice(header.as_bytes());
        for (m, &off) in self.modules.iter().zip(&module_offs) {
            let e = ModuleEntry {
                offset: (off as u64).into(),
                len: (m.len() as u64).into(),
            };
            out.extend_from_slice(e.as_bytes());
        }
        for ((b, output), &off) in self.buffers.iter().zip(&buffer_offs) {
            let e = BufferEntry {
                offset: (off as u64).into(),
                len: (b.len() as u64).into(),
                flags: (if *output { BUF_OUTPUT } else { 0 }).into(),
                reserved: 0.into(),
            };
            out.extend_from_slice(e.as_bytes());
        }
        let mut first = 0u32;
        for l in &self.launches {
            let e = LaunchEntry {
                module: l.module.into(),
                kernel: l.kernel.into(),
                first_arg: first.into(),
                arg_count: (l.args.len() as u32).into(),
                blocks: l.blocks.into(),
                reserved: 0.into(),
            };
            first += l.args.len() as u32;
            out.extend_from_slice(e.as_bytes());
        }
        for l in &self.launches {
            for a in &l.args {
                out.extend_from_slice(&a.to_le_bytes());
            }
        }
        out.resize(total, 0);
        for (m, &off) in self.modules.iter().zip(&module_offs) {
            out[off..off + m.len()].copy_from_slice(m);
        }
        for ((b, _), &off) in self.buffers.iter().zip(&buffer_offs) {
            out[off..off + b.len()].copy_from_slice(b);
        }
        out
    }
}

/// A report read back from the firmware.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// What happened.
    pub status: Status,
    /// The launch that failed, if one did.
    pub failed_launch: Option<u32>,
    /// Status-specific detail.
    pub detail: u64,
    /// Cores the firmware ran the job on.
    pub cores: u16,
    /// One entry per launch that ran.
    pub launches: Vec<LaunchReport>,
    /// `(buffer index, bytes)` of every output buffer.
    pub outputs: Vec<(u32, Vec<u8>)>,
}

/// Why a report did not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// Shorter than it says.
    #[error("report is truncated")]
    Truncated,
    /// Wrong magic or version.
    #[error("not a dvm report (bad magic or version)")]
    BadMagic,
    /// An unknown status code.
    #[error("unknown status code {0}")]
    BadStatus(u32),
}

/// Parses a report written by the firmware.
///
/// # Errors
/// [`ReportError`] when the bytes are not a whole report.
pub fn parse_report(bytes: &[u8]) -> Result<Report, ReportError> {
    let (h, mut rest) =
        ReportHeader::read_from_prefix(bytes).map_err(|_| ReportError::Truncated)?;
    if h.magic != REPORT_MAGIC || h.version.get() != JOB_VERSION {
        return Err(ReportError::BadMagic);
    }
    let status = Status::from_u32(h.status.get()).ok_or(ReportError::BadStatus(h.status.get()))?;
    let mut launches = Vec::new();
    for _ in 0..h.launches.get() {
        let (l, r) = LaunchReport::read_from_prefix(rest).map_err(|_| ReportError::Truncated)?;
        launches.push(l);
        rest = r;
    }
    let mut outputs = Vec::new();
    for _ in 0..h.outputs.get() {
        let (o, r) = OutputHeader::read_from_prefix(rest).map_err(|_| ReportError::Truncated)?;
        let len = usize::try_from(o.len.get()).map_err(|_| ReportError::Truncated)?;
        let padded = len
            .checked_next_multiple_of(8)
            .ok_or(ReportError::Truncated)?;
        let data = r.get(..len).ok_or(ReportError::Truncated)?;
        outputs.push((o.buffer.get(), data.to_vec()));
        rest = r.get(padded..).ok_or(ReportError::Truncated)?;
    }
    let failed = h.failed_launch.get();
    Ok(Report {
        status,
        failed_launch: (failed != u32::MAX).then_some(failed),
        detail: h.detail.get(),
        cores: h.cores.get(),
        launches,
        outputs,
    })
}
