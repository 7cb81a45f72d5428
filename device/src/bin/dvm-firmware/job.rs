//! Runs the job at `_dvm_job_base`: parse, then for every launch parse and
//! verify its module, predecode the kernel, bind the buffers and run all
//! blocks, on every running core ([`crate::smp`]) when the launch has
//! several blocks and tiles, the kernel's tiles are proven independent and
//! the launch names no buffer twice, else on core 0 alone; then write the
//! report.
//!
//! The job's tables are checked by [`Job::parse`] and copied into bounded
//! static storage before anything runs; after that no reference covers the
//! whole job, only a module's bytes (shared) or a buffer (through a
//! [`GmBuf`]), and `Job::parse` has proven those ranges disjoint.

use core::ptr::addr_of_mut;

use dvm_device::{run_all_blocks_sequentially, ExecError, GmBuf, KernelArgs, Program};
use dvm_isa::job::{
    BufferEntry, Job, JobHeader, LaunchEntry, LaunchReport, ModuleEntry, Status, BUF_OUTPUT,
    HEADER_BYTES,
};
use dvm_isa::verify::LaunchError;
use dvm_isa::{verify_kernel, DeviceLimits, Module};
use heapless::Vec;
use zerocopy::FromBytes;

use crate::smp::{self, RawBuf};
use crate::{layout, report};

/// Most modules a job may carry.
pub const MAX_MODULES: usize = 256;
/// Most buffers a job may carry.
pub const MAX_BUFFERS: usize = 1024;
/// Most launches a job may carry.
pub const MAX_LAUNCHES: usize = 1024;
/// Most launch arguments a job may carry.
pub const MAX_ARGS: usize = 8192;
/// End of the mapped RAM ([`crate::mmu`]); no job may extend past it.
const RAM_END: usize = 0x8000_0000;

/// The job's tables, copied out of guest memory, and the launch reports.
pub struct Tables {
    modules: Vec<ModuleEntry, MAX_MODULES>,
    buffers: Vec<BufferEntry, MAX_BUFFERS>,
    launches: Vec<LaunchEntry, MAX_LAUNCHES>,
    args: Vec<u32, MAX_ARGS>,
    pub reports: Vec<LaunchReport, MAX_LAUNCHES>,
}

static mut TABLES: Tables = Tables {
    modules: Vec::new(),
    buffers: Vec::new(),
    launches: Vec::new(),
    args: Vec::new(),
    reports: Vec::new(),
};

static mut PROGRAM: Option<Program> = None;

/// A failed launch: status and detail for the report.
struct Failure {
    status: Status,
    detail: u64,
}

fn fail(status: Status, detail: u64) -> Failure {
    Failure { status, detail }
}

/// Runs the job, writes the report and returns the status to exit with.
pub fn run() -> Status {
    let base = layout::job_base();
    // SAFETY: runs once on core 0; no other core refers to these statics
    // (the secondaries see the program only through `smp::run_parallel`,
    // while this core does not change it).
    let (tables, program) = unsafe { (&mut *addr_of_mut!(TABLES), &mut *addr_of_mut!(PROGRAM)) };
    let program = program.get_or_insert_with(Program::default);
    if let Err(f) = load_tables(base, tables) {
        defmt::error!("bad job: {=str}", f.status.describe());
        return report::write(base, tables, f.status, None, f.detail);
    }
    defmt::info!(
        "job: {=usize} modules, {=usize} buffers, {=usize} launches",
        tables.modules.len(),
        tables.buffers.len(),
        tables.launches.len()
    );
    for i in 0..tables.launches.len() {
        match launch(base, tables, program, i) {
            Ok(stats) => {
                // Capacity: reports has the launches' capacity.
                let _ = tables.reports.push(stats);
            }
            Err(f) => {
                defmt::error!("launch {=usize}: {=str}", i, f.status.describe());
                return report::write(base, tables, f.status, Some(i as u32), f.detail);
            }
        }
    }
    report::write(base, tables, Status::Ok, None, 0)
}

/// Checks the job and copies its tables.
fn load_tables(base: usize, t: &mut Tables) -> Result<(), Failure> {
    let limit = RAM_END.saturating_sub(base);
    // SAFETY: the header lies in mapped RAM just past the firmware's stack.
    let head = unsafe { core::slice::from_raw_parts(base as *const u8, HEADER_BYTES) };
    let header = JobHeader::read_from_bytes(head).map_err(|_| fail(Status::BadJob, 0))?;
    let total = header.total_len.get();
    if total > limit as u64 {
        return Err(fail(Status::BadJob, total));
    }
    // SAFETY: `total` bytes from `base` lie in mapped RAM (checked above);
    // the slice is dropped before any buffer is written.
    let bytes = unsafe { core::slice::from_raw_parts(base as *const u8, total as usize) };
    let job = Job::parse(bytes).map_err(|e| {
        defmt::error!("{}", defmt::Display2Format(&e));
        fail(Status::BadJob, 0)
    })?;
    fn too_many<E>(_: E) -> Failure {
        fail(Status::Capacity, 0)
    }
    t.modules
        .extend_from_slice(job.modules())
        .map_err(too_many)?;
    t.buffers
        .extend_from_slice(job.buffers())
        .map_err(too_many)?;
    t.launches
        .extend_from_slice(job.launches())
        .map_err(too_many)?;
    for a in job.arg_table() {
        t.args.push(a.get()).map_err(too_many)?;
    }
    Ok(())
}

/// Runs launch `i`.
fn launch(
    base: usize,
    t: &Tables,
    program: &mut Program,
    i: usize,
) -> Result<LaunchReport, Failure> {
    let l = &t.launches[i];
    let m = t
        .modules
        .get(l.module.get() as usize)
        .ok_or(fail(Status::MissingKernel, l.module.get() as u64))?;
    // SAFETY: the range was checked by `Job::parse` to lie inside the job
    // and not to overlap any buffer, so nothing writes it while this lives.
    let bytes = unsafe {
        core::slice::from_raw_parts(
            (base + m.offset.get() as usize) as *const u8,
            m.len.get() as usize,
        )
    };
    let module = Module::parse(bytes).map_err(|e| {
        defmt::error!("module: {}", defmt::Display2Format(&e));
        fail(Status::BadModule, 0)
    })?;
    let k = l.kernel.get() as usize;
    if k >= module.kernel_count() {
        return Err(fail(Status::MissingKernel, k as u64));
    }
    let (ub_start, ub_end) = layout::ub(0);
    let limits = DeviceLimits::with_ub_bytes((ub_end - ub_start) as u32);
    let kernel = verify_kernel(&module, k, &limits).map_err(|e| {
        defmt::error!("verify: {}", defmt::Display2Format(&e));
        fail(Status::Verify, e.word as u64)
    })?;
    program
        .predecode(&kernel)
        .map_err(|_| fail(Status::Capacity, 0))?;
    let first = l.first_arg.get() as usize;
    let args = &t.args[first..first + l.arg_count.get() as usize];
    let raw = |a: u32| {
        let b = &t.buffers[a as usize];
        RawBuf {
            ptr: (base + b.offset.get() as usize) as *mut u8,
            len: b.len.get() as usize,
            writable: true,
        }
    };
    let bufs = args.iter().map(|&a| {
        let b = raw(a);
        // SAFETY: `Job::parse` checked the buffer lies inside the job, is
        // 64-byte aligned relative to the job (whose base is page aligned)
        // and overlaps no other buffer, no module and (being past the
        // stacks) no UB; the launch below is dropped before any block runs.
        unsafe { GmBuf::from_raw_parts(b.ptr, b.len, b.writable) }
    });
    // The launch check (binding), here so that its failure is reported
    // before any core starts.
    let launch = KernelArgs::new(&kernel, bufs).map_err(|e| {
        defmt::error!("bind: {}", e);
        fail(Status::Bind, 0)
    })?;
    let program = &*program;
    let blocks = l.blocks.get();
    // The block count against the device's limit, before any core starts
    // (the executor checks it again per block).
    kernel.check_blocks(blocks).map_err(|e| {
        defmt::error!("launch: {}", defmt::Display2Format(&e));
        fail(Status::BadJob, u64::from(blocks))
    })?;
    let distinct = args.iter().enumerate().all(|(i, a)| !args[..i].contains(a));
    // Several cores only pay off with a tile for more than one of them.
    let result = if smp::cores() > 1
        && blocks > 1
        && program.total_tiles() > 1
        && program.tiles_independent()
        && distinct
    {
        drop(launch);
        let mut raws: Vec<RawBuf, { dvm_isa::verify::MAX_PARAMS }> = Vec::new();
        for &a in args {
            // Capacity: the binding above accepted at most MAX_PARAMS.
            raws.push(raw(a)).map_err(|_| fail(Status::Bind, 0))?;
        }
        // SAFETY: the buffers are valid, disjoint (`Job::parse`, and no
        // buffer named twice) and apart from the UBs; nothing else uses
        // them during the launch; the tiles are independent.
        unsafe { smp::run_parallel(program, &raws, blocks) }.map(|r| (r.stats, r.core_mask))
    } else {
        // SAFETY: the `.ub` region is reserved by the linker script, one
        // 64-byte-aligned UB per core; core 0's is used only by core 0.
        let ub = unsafe { core::slice::from_raw_parts_mut(ub_start as *mut u8, ub_end - ub_start) };
        run_all_blocks_sequentially(program, &launch, blocks, ub)
            .map(|s| (s, u64::from(s.tiles > 0)))
    };
    let (stats, core_mask) = result.map_err(|e| {
        defmt::error!("exec: {}", defmt::Display2Format(&e));
        match e {
            ExecError::Launch(LaunchError::Ub { .. }) => fail(Status::Capacity, 0),
            ExecError::Launch(_) => fail(Status::BadJob, 0),
            ExecError::Bind(_) => fail(Status::Bind, 0),
            ExecError::Fault { tile, .. } => fail(Status::Fault, tile as u64),
        }
    })?;
    Ok(LaunchReport {
        tiles: stats.tiles.into(),
        instrs: stats.instrs.into(),
        core_mask: core_mask.into(),
    })
}

/// `(buffer index, address, length)` of every output buffer.
pub fn outputs(base: usize, t: &Tables) -> impl Iterator<Item = (u32, usize, usize)> + '_ {
    t.buffers
        .iter()
        .enumerate()
        .filter(|(_, b)| b.flags.get() & BUF_OUTPUT != 0)
        .map(move |(i, b)| {
            (
                i as u32,
                base + b.offset.get() as usize,
                b.len.get() as usize,
            )
        })
}
