//! The way back to the host: the report file and the exit code, both
//! through semihosting.

use dvm_isa::job::{LaunchReport, OutputHeader, ReportHeader, Status, JOB_VERSION, REPORT_MAGIC};
use semihosting::fs::File;
use semihosting::io::Write;
use zerocopy::IntoBytes;

use crate::job::{self, Tables as JobTables};

/// The report's file name, relative to QEMU's working directory.
pub const REPORT_FILE: &core::ffi::CStr = c"dvm-report.bin";

/// Writes the report for `status` and returns the status to exit with
/// ([`Status::Io`] when the report could not be written).
pub fn write(
    base: usize,
    tables: &JobTables,
    status: Status,
    failed_launch: Option<u32>,
    detail: u64,
) -> Status {
    match try_write(base, tables, status, failed_launch, detail) {
        Ok(()) => status,
        Err(_) => {
            defmt::error!("cannot write the report");
            Status::Io
        }
    }
}

fn try_write(
    base: usize,
    t: &JobTables,
    status: Status,
    failed_launch: Option<u32>,
    detail: u64,
) -> semihosting::io::Result<()> {
    let reports: &[LaunchReport] = &t.reports;
    // Outputs are only meaningful when every launch ran.
    let send_outputs = status == Status::Ok;
    let outputs = if send_outputs {
        job::outputs(base, t).count()
    } else {
        0
    };
    let header = ReportHeader {
        magic: REPORT_MAGIC,
        version: JOB_VERSION.into(),
        cores: (crate::smp::cores() as u16).into(),
        status: (status as u32).into(),
        failed_launch: failed_launch.unwrap_or(u32::MAX).into(),
        detail: detail.into(),
        launches: (reports.len() as u32).into(),
        outputs: (outputs as u32).into(),
    };
    let mut f = File::create(REPORT_FILE)?;
    f.write_all(header.as_bytes())?;
    f.write_all(reports.as_bytes())?;
    if send_outputs {
        for (index, addr, len) in job::outputs(base, t) {
            let h = OutputHeader {
                buffer: index.into(),
                reserved: 0.into(),
                len: (len as u64).into(),
            };
            f.write_all(h.as_bytes())?;
            // SAFETY: the buffer was checked to lie inside the job, and no
            // launch is running any more.
            let bytes = unsafe { core::slice::from_raw_parts(addr as *const u8, len) };
            f.write_all(bytes)?;
            f.write_all(&[0u8; 8][..len.next_multiple_of(8) - len])?;
        }
    }
    Ok(())
}

/// Ends the emulation with `status` as the exit code.
pub fn exit(status: Status) -> ! {
    semihosting::process::exit(status as i32)
}

/// The command line QEMU passes through semihosting (`-append` or
/// `-semihosting-config …,arg=…`), copied into `buf`; empty when there is
/// none or it does not fit.
pub fn command_line(buf: &mut [u8]) -> &[u8] {
    const SYS_GET_CMDLINE: u64 = 0x15;
    let mut block = [buf.as_mut_ptr() as u64, buf.len() as u64];
    let ret: u64;
    // SAFETY: the semihosting call writes at most `block[1]` bytes into
    // `buf` and the new length into `block[1]`; both outlive the call.
    unsafe {
        core::arch::asm!(
            "hlt #0xf000",
            inout("x0") SYS_GET_CMDLINE => ret,
            in("x1") block.as_mut_ptr(),
            options(nostack),
        );
    }
    let n = block[1] as usize;
    if ret != 0 || n > buf.len() {
        return &[];
    }
    &buf[..n]
}
