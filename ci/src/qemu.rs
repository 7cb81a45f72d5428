//! The firmware and the QEMU device: build `dvm-firmware` for
//! `aarch64-unknown-none`, report its sizes, run the conformance suite on
//! the QEMU device against the CPU device, and the ONNX model zoo on it
//! against PyTorch's outputs.

use std::path::PathBuf;

use xshell::cmd;

use crate::cross::{debian_cargo, target_dir};
use crate::step::{Ctx, Step};
use crate::Result;

/// Build the firmware and print its section and executor sizes.
pub const FIRMWARE: Step = Step {
    name: "firmware",
    run: firmware,
};
/// Run the conformance suite, the bad-job tests and the ONNX model zoo on
/// the QEMU device.
pub const CONFORMANCE: Step = Step {
    name: "qemu-conformance",
    run: conformance,
};

/// Where the firmware ELF is written.
pub fn firmware_path(ctx: &Ctx) -> PathBuf {
    target_dir(ctx).join("aarch64-unknown-none/firmware/dvm-firmware")
}

fn firmware(ctx: &Ctx) -> Result {
    #[rustfmt::skip]
    debian_cargo(ctx, &[
        "build", "--profile", "firmware", "--target", "aarch64-unknown-none",
        "-Zbuild-std=core,alloc", "-p", "dvm-device", "--features", "firmware",
        "--bin", "dvm-firmware",
    ])?
    .env("DEFMT_LOG", "info")
    .run()?;
    let fw = firmware_path(ctx);
    let sizes = cmd!(ctx.sh, "aarch64-linux-gnu-size -A {fw}").read()?;
    let section = |name: &str| -> u64 {
        sizes
            .lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                (f.next() == Some(name)).then(|| f.next()?.parse().ok())?
            })
            .unwrap_or(0)
    };
    let (text, rodata, data, bss) = (
        section(".text"),
        section(".rodata"),
        section(".data"),
        section(".bss"),
    );
    let (ub, stack) = (section(".ub"), section(".stack"));
    // The executor alone: code of dvm-device (predecode, tile loop, handlers,
    // math, GM access), without the verifier, the job runner and boot code.
    let syms = cmd!(
        ctx.sh,
        "aarch64-linux-gnu-nm --print-size --size-sort -C {fw}"
    )
    .read()?;
    let mut executor = 0u64;
    let mut verifier = 0u64;
    for l in syms.lines() {
        let mut f = l.split_whitespace();
        let (Some(_addr), Some(size), Some(kind)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if !matches!(kind, "t" | "T") {
            continue;
        }
        let name: String = f.collect::<Vec<_>>().join(" ");
        let size = u64::from_str_radix(size, 16).unwrap_or(0);
        if name.contains("dvm_device::") {
            executor += size;
        } else if name.contains("dvm_isa::") {
            verifier += size;
        }
    }
    eprintln!(
        "firmware {}:\n  .text {text} B, .rodata {rodata} B, .data {data} B, .bss {bss} B \
         (static RAM: .data + .bss = {} B, plus the UBs {ub} B and stacks {stack} B incl. guard pages, all cores)\n  \
         executor alone (dvm_device code): {executor} B; module parser + verifier (dvm_isa code): {verifier} B",
        fw.display(),
        data + bss
    );
    Ok(())
}

fn conformance(ctx: &Ctx) -> Result {
    let fw = firmware_path(ctx);
    if !fw.exists() {
        return Err(format!("{} is missing: run `cargo ci firmware` first", fw.display()).into());
    }
    // Every conformance case on the QEMU device (`qemu::NAME`), then the
    // firmware's answers to bad jobs.
    #[rustfmt::skip]
    cmd!(ctx.sh, "cargo test -p dvm-tests --profile ci --test conformance -- --include-ignored --test-threads 1 qemu::")
        .env("DVM_FIRMWARE", &fw)
        .run()?;
    #[rustfmt::skip]
    cmd!(ctx.sh, "cargo test -p dvm-tests --profile ci --test qemu -- --include-ignored --nocapture --test-threads 1")
        .env("DVM_FIRMWARE", &fw)
        .run()?;
    // Every zoo model at every saved shape against PyTorch's outputs and
    // the CPU device's bits (`host/dvm/tests/onnx_zoo.rs`).
    #[rustfmt::skip]
    cmd!(ctx.sh, "cargo test -p dvm --profile ci --test onnx_zoo -- --include-ignored --test-threads 1 qemu_")
        .env("DVM_FIRMWARE", &fw)
        .run()?;
    Ok(())
}
