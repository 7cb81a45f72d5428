//! Job parsing for the firmware, and what the firmware does with a parsed
//! job before any core runs: each launch's module parsed and kernel
//! verified, its block count and its buffers checked.
#![no_main]

use dvm_device::{GmBuf, KernelArgs};
use dvm_isa::job::Job;
use dvm_isa::{verify_kernel, DeviceLimits, Module};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(job) = Job::parse(bytes) else {
        return;
    };
    for l in job.launches() {
        let Some(m) = job.module(l.module.get() as usize) else {
            continue;
        };
        let Ok(m) = Module::parse(m) else {
            continue;
        };
        let Ok(v) = verify_kernel(&m, l.kernel.get() as usize, &DeviceLimits::DEFAULT) else {
            continue;
        };
        if v.check_blocks(l.blocks.get()).is_err() {
            continue;
        }
        let lens: Vec<usize> = job
            .args(l)
            .map(|a| job.buffers().get(a).map_or(0, |b| b.len.get() as usize))
            .collect();
        let mut mem: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0; n.min(1 << 20)]).collect();
        let _ = KernelArgs::new(&v, mem.iter_mut().map(|b| GmBuf::from_mut_slice(b)));
    }
});
