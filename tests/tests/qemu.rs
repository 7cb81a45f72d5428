//! The QEMU device (the aarch64 firmware under qemu-system-aarch64): the
//! firmware's answers to good and bad jobs, its cores and its guards. The
//! conformance cases on the QEMU device are `qemu::NAME` in
//! `conformance.rs`.
//!
//! Needs the firmware: `cargo ci qemu` builds it and runs these tests with
//! `DVM_FIRMWARE` pointing at it (they are `#[ignore]`d otherwise).

use std::time::Duration;

use dvm_isa::job::{JobBuilder, Status};
use dvm_runtime::{Prepared, QemuDevice, QemuError, Runtime};
use dvm_sym::Bindings;

fn device() -> QemuDevice {
    let fw = std::env::var_os("DVM_FIRMWARE")
        .expect("DVM_FIRMWARE must name the firmware ELF (cargo ci qemu sets it)");
    QemuDevice::new(fw).expect("firmware loads")
}

/// A module with one kernel `out = a + b` over 1024 f32, from the compiler.
fn add_module() -> Vec<u8> {
    add_module_of(1024)
}

/// A module with one kernel `out = a + b` over `n` f32, from the compiler.
fn add_module_of(n: i64) -> Vec<u8> {
    let rt = Runtime::new(1, 4);
    let mut g = dvm_graph::Graph::new();
    let f32 = dvm_isa::DType::F32;
    let a = g.input("a", f32, &[n.into()]).unwrap();
    let b = g.input("b", f32, &[n.into()]).unwrap();
    let c = g.add(a, b).unwrap();
    g.output("out", c).unwrap();
    let p = Prepared::new(&g).unwrap();
    let (_, kernels) = rt.plan(&p, &Bindings::new()).unwrap();
    kernels[0].module.clone()
}

fn f32_bytes(v: impl IntoIterator<Item = f32>) -> Vec<u8> {
    v.into_iter().flat_map(f32::to_le_bytes).collect()
}

/// A job adding two 1024-element vectors; `tweak` may break it.
fn job(tweak: impl FnOnce(&mut Vec<u8>, &mut [usize; 3])) -> Vec<u8> {
    let mut module = add_module();
    let mut lens = [4096usize, 4096, 4096];
    tweak(&mut module, &mut lens);
    let mut j = JobBuilder::new();
    let m = j.module(&module);
    let a = j.buffer(f32_bytes((0..lens[0] / 4).map(|i| i as f32)), false);
    let b = j.buffer(f32_bytes((0..lens[1] / 4).map(|i| 2.0 * i as f32)), false);
    let o = j.buffer(vec![0; lens[2]], true);
    j.launch(m, 0, &[a, b, o], 3);
    j.finish()
}

#[test]
#[ignore = "needs the firmware and QEMU: run `cargo ci qemu`"]
fn a_good_job_runs_and_reports_counts() {
    let run = device().run_job(&job(|_, _| {})).expect("runs");
    let r = run.report;
    assert_eq!(r.status, Status::Ok);
    assert_eq!(r.launches.len(), 1);
    let tiles = r.launches[0].tiles.get();
    assert!(tiles >= 1);
    // At least load, load, add, store per tile.
    assert!(r.launches[0].instrs.get() >= 4 * tiles);
    let out = &r.outputs[0].1;
    let want = f32_bytes((0..1024).map(|i| 3.0 * i as f32));
    assert_eq!(out, &want);
}

/// A job of two launches of `out = a + b` over 256 Ki f32 (many tiles):
/// on `blocks` blocks, then on one; and the expected output.
fn big_add_job(blocks: u32) -> (Vec<u8>, Vec<u8>) {
    let n = 256 * 1024;
    let mut j = JobBuilder::new();
    let m = j.module(&add_module_of(n));
    let a = j.buffer(f32_bytes((0..n).map(|i| i as f32)), false);
    let b = j.buffer(f32_bytes((0..n).map(|i| 0.5 * i as f32)), false);
    let o = j.buffer(vec![0; 4 * n as usize], true);
    j.launch(m, 0, &[a, b, o], blocks);
    j.launch(m, 0, &[a, b, o], 1);
    (j.finish(), f32_bytes((0..n).map(|i| 1.5 * i as f32)))
}

#[test]
#[ignore = "needs the firmware and QEMU: run `cargo ci qemu`"]
fn a_multi_block_launch_runs_on_every_core() {
    let dev = device();
    let cores = dev.cores();
    assert!(cores >= 2, "the firmware should have several cores");
    let (job, want) = big_add_job(cores);
    let r = dev.run_job(&job).expect("runs").report;
    assert_eq!(r.status, Status::Ok);
    assert_eq!(u32::from(r.cores), cores, "every core started");
    let (many, one) = (&r.launches[0], &r.launches[1]);
    assert!(many.tiles.get() >= u64::from(cores), "{many:?}");
    assert_eq!(
        many.core_mask.get(),
        (1u64 << cores) - 1,
        "every core ran tiles: {many:?}"
    );
    assert_eq!(one.core_mask.get(), 1, "one block runs on core 0: {one:?}");
    assert_eq!(
        (many.tiles.get(), many.instrs.get()),
        (one.tiles.get(), one.instrs.get()),
        "counts summed over the cores"
    );
    assert!(r.outputs[0].1 == want, "wrong sums");
}

#[test]
#[ignore = "needs the firmware and QEMU: run `cargo ci qemu`"]
fn with_fewer_cpus_the_firmware_runs_on_the_cores_that_start() {
    let dev = device();
    let (job, want) = big_add_job(dev.cores());
    let r = dev.with_cpus(1).run_job(&job).expect("runs").report;
    assert_eq!(r.status, Status::Ok);
    assert_eq!(r.cores, 1, "PSCI refused the missing cores");
    assert_eq!(r.launches[0].core_mask.get(), 1);
    assert!(r.outputs[0].1 == want, "wrong sums");
}

fn status_of(job: &[u8]) -> (Status, Option<u32>) {
    let r = device().run_job(job).expect("the firmware reports").report;
    assert!(r.outputs.is_empty(), "no outputs after a failure");
    (r.status, r.failed_launch)
}

#[test]
#[ignore = "needs the firmware and QEMU: run `cargo ci qemu`"]
fn a_corrupt_module_is_reported() {
    let j = job(|m, _| m[0] ^= 0xff);
    assert_eq!(status_of(&j), (Status::BadModule, Some(0)));
}

#[test]
#[ignore = "needs the firmware and QEMU: run `cargo ci qemu`"]
fn a_buffer_too_small_is_reported() {
    let j = job(|_, lens| lens[2] = 4092);
    assert_eq!(status_of(&j), (Status::Bind, Some(0)));
}

#[test]
#[ignore = "needs the firmware and QEMU: run `cargo ci qemu`"]
fn a_launch_of_too_many_blocks_is_refused_before_it_runs() {
    let mut j = JobBuilder::new();
    let m = j.module(&add_module());
    let a = j.buffer(f32_bytes((0..1024).map(|i| i as f32)), false);
    let o = j.buffer(vec![0; 4096], true);
    j.launch(m, 0, &[a, a, o], u32::MAX);
    assert_eq!(status_of(&j.finish()), (Status::BadJob, Some(0)));
}

#[test]
#[ignore = "needs the firmware and QEMU: run `cargo ci qemu`"]
fn a_missing_kernel_is_reported() {
    let mut j = JobBuilder::new();
    let m = j.module(&add_module());
    let a = j.buffer(vec![0; 4096], false);
    j.launch(m, 7, &[a, a, a], 1);
    assert_eq!(status_of(&j.finish()), (Status::MissingKernel, Some(0)));
    let mut j = JobBuilder::new();
    j.launch(3, 0, &[], 1);
    assert_eq!(status_of(&j.finish()), (Status::MissingKernel, Some(0)));
}

#[test]
#[ignore = "needs the firmware and QEMU: run `cargo ci qemu`"]
fn a_malformed_job_is_reported() {
    let mut j = job(|_, _| {});
    j.truncate(40);
    assert_eq!(status_of(&j), (Status::BadJob, None));
    let mut j = job(|_, _| {});
    j[0] = b'X';
    assert_eq!(status_of(&j), (Status::BadJob, None));
}

#[test]
#[ignore = "needs the firmware and QEMU: run `cargo ci qemu`"]
fn a_firmware_that_takes_too_long_is_killed() {
    let dev = device().with_timeout(Duration::from_millis(1));
    match dev.run_job(&job(|_, _| {})) {
        Err(QemuError::Timeout(_)) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
}

#[test]
fn a_missing_firmware_is_a_clear_error() {
    let e = QemuDevice::new("/nonexistent/dvm-firmware").unwrap_err();
    assert!(e.to_string().contains("/nonexistent/dvm-firmware"), "{e}");
    let e = QemuDevice::new(env!("CARGO_MANIFEST_DIR")).unwrap_err();
    assert!(matches!(e, QemuError::Firmware { .. }), "{e}");
}

#[test]
#[ignore = "needs the firmware and QEMU: run `cargo ci qemu`"]
fn a_stack_overflow_hits_the_guard_page_and_is_reported() {
    let status = device().selftest("stack-overflow").expect("QEMU runs");
    assert_eq!(status, Some(Status::StackOverflow));
}

#[test]
#[ignore = "needs the firmware and QEMU: run `cargo ci qemu`"]
fn a_fault_in_the_middle_of_a_log_line_is_reported_not_hung() {
    // The logger cannot be entered again while it writes a frame: the
    // exception handler must exit with the fault's status without logging.
    let status = device().selftest("fault-while-logging").expect("QEMU runs");
    assert_eq!(status, Some(Status::StackOverflow));
}

#[test]
#[ignore = "needs the firmware and QEMU: run `cargo ci qemu`"]
fn a_stack_overflow_on_a_secondary_core_is_reported() {
    let status = device()
        .selftest("stack-overflow-secondary")
        .expect("QEMU runs");
    assert_eq!(status, Some(Status::StackOverflow));
}
