//! The conformance suite, one named test per case per device:
//!
//! - `cpu::NAME`: the CPU device against the f64 reference device, within
//!   the case's tolerance;
//! - `qemu::NAME`: the QEMU device (the aarch64 firmware) against the CPU
//!   device, bit for bit. They need the firmware, named by `DVM_FIRMWARE`
//!   (`cargo ci qemu` builds it and sets it); without it they are listed as
//!   ignored.
//! - `sim::NAME`: the simulator device (the 910B-class preset, tiled for
//!   the suite's 2 cores) against the CPU device, bit for bit: its values
//!   come from the same kernels and handlers, and every launch is timed
//!   on the way.
//!
//! `NAME` is the case's name with every character other than a letter or a
//! digit replaced by `_` (`softmax/128x1000` → `softmax_128x1000`), so
//! `cargo test -p dvm-tests --test conformance -- softmax_128x1000` runs one
//! case on every device and `-- cpu::` every case on one.
//!
//! Devices are opened through the registry ([`dvm_runtime::device::open`]),
//! once, and shared by the tests. The harness is `libtest-mimic`: it takes
//! libtest's arguments (filters, `--exact`, `--ignored`,
//! `--include-ignored`, `--test-threads`, `--list`).

use std::sync::{Arc, OnceLock};

use dvm_runtime::device::{self, Device, DeviceConfig};
use dvm_runtime::{Prepared, Runtime};
use dvm_sym::Bindings;
use dvm_tests::{bitwise, cases, within, Case};
use libtest_mimic::{Arguments, Failed, Trial};

/// The devices a case runs on: each one's tests are `NAME::case`.
const DEVICES: &[&str] = &["cpu", "qemu", "sim"];

/// The configuration every device is opened with: 2 cores, so the CPU,
/// QEMU and simulator devices compile the same kernels.
fn config() -> DeviceConfig {
    DeviceConfig {
        cores: Some(2),
        firmware: firmware(),
        ..DeviceConfig::default()
    }
}

/// The firmware image, when `DVM_FIRMWARE` names one.
fn firmware() -> Option<std::path::PathBuf> {
    std::env::var_os("DVM_FIRMWARE").map(Into::into)
}

/// A device opened on first use, or why it did not open.
type Opened = OnceLock<Result<Box<dyn Device>, String>>;

/// Devices opened once, on first use, and shared by every test.
struct Devices {
    opened: Vec<(&'static str, Opened)>,
}

impl Devices {
    fn new() -> Devices {
        let mut names = DEVICES.to_vec();
        names.push("reference");
        Devices {
            opened: names.into_iter().map(|n| (n, OnceLock::new())).collect(),
        }
    }

    fn get(&self, name: &str) -> Result<&dyn Device, Failed> {
        let (_, cell) = self
            .opened
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| Failed::from(format!("no device `{name}` in the suite")))?;
        cell.get_or_init(|| device::open(name, &config()).map_err(|e| e.to_string()))
            .as_deref()
            .map_err(|e| Failed::from(format!("device `{name}` does not open: {e}")))
    }
}

/// A case's test name: every character other than an ASCII letter or
/// digit becomes `_`.
fn test_name(case: &str) -> String {
    case.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Runs `case` on `device` and checks it against its oracle: the reference
/// device within the case's tolerance for the CPU device, the CPU device
/// bit for bit for QEMU.
fn check(devices: &Devices, device: &str, case: &Case) -> Result<(), Failed> {
    let named = case.named();
    let prepared = Prepared::new(&case.graph).map_err(|e| format!("decomposition: {e}"))?;
    let verdict = match device {
        "cpu" => {
            let want = devices.get("reference")?.run(&prepared, &named);
            // Twice: the second call's outputs and temporaries are memory
            // the first one gave back to the runtime (filled with
            // `dvm_tensor::POISON` in debug builds), so a kernel that
            // leaves part of an output unwritten fails here.
            let first = devices.get("cpu")?.run(&prepared, &named);
            let first = first.map(|o| o.as_slice().to_vec());
            let got = devices.get("cpu")?.run(&prepared, &named);
            match (want, got) {
                (Ok(w), Ok(g)) => within(w.as_slice(), g.as_slice(), case.rtol, case.atol)
                    .and_then(|()| match &first {
                        Ok(f) => bitwise(f, g.as_slice()),
                        Err(e) => Err(format!("cpu failed on the first call only: {e}")),
                    }),
                (Err(e), _) => Err(format!("reference failed: {e}")),
                (_, Err(e)) => Err(format!("cpu failed: {e}")),
            }
        }
        "qemu" | "sim" => {
            let cpu = devices.get("cpu")?.run(&prepared, &named);
            let other = devices.get(device)?.run(&prepared, &named);
            match (cpu, other) {
                (Ok(c), Ok(q)) => bitwise(c.as_slice(), q.as_slice()),
                (Err(e), _) => Err(format!("cpu failed: {e}")),
                (_, Err(e)) => Err(format!("{device} failed: {e}")),
            }
        }
        other => Err(format!("no oracle for device `{other}`")),
    };
    verdict.map_err(|e| Failed::from(format!("{}: {e}", case.name)))
}

/// The suite's names are unique, also as test names, and there are many.
fn case_names_are_unique(cases: &[Case]) -> Result<(), Failed> {
    let mut names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    let n = names.len();
    names.dedup();
    assert_eq!(names.len(), n);
    assert!(n > 100, "the suite has {n} cases");
    let mut tests: Vec<String> = cases.iter().map(|c| test_name(&c.name)).collect();
    tests.sort_unstable();
    tests.dedup();
    assert_eq!(tests.len(), n, "two cases map to one test name");
    Ok(())
}

/// Every kernel the compiler makes for the suite, fused and unfused, is
/// proven to have independent tiles: none falls back to one core.
fn every_compiled_kernel_has_independent_tiles(cases: &[Case]) -> Result<(), Failed> {
    use dvm_fuse::FuseOptions;
    let rt = Runtime::new(2, 1024);
    let mut refused = Vec::new();
    let mut kernels = 0;
    for case in cases {
        for opts in [FuseOptions::default(), FuseOptions::off()] {
            let p = Prepared::with_options(&case.graph, &opts).unwrap();
            let bindings = p
                .graph()
                .bind_tensors(&case.named(), &Bindings::new())
                .unwrap();
            let Ok((_, ready)) = rt.plan(&p, &bindings) else {
                continue;
            };
            for k in &ready {
                kernels += 1;
                if !k.program.tiles_independent() {
                    let m = dvm_isa::Module::parse(&k.module).unwrap();
                    let v = dvm_isa::verify_kernel(&m, 0, &dvm_isa::DeviceLimits::DEFAULT).unwrap();
                    refused.push(format!(
                        "{} ({}): {:?}",
                        case.name,
                        k.name(),
                        v.tiles_independent()
                    ));
                }
            }
        }
    }
    assert!(kernels > 200, "{kernels} kernels");
    assert!(
        refused.is_empty(),
        "{} kernels refused:\n{}",
        refused.len(),
        refused.join("\n")
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Arguments::from_args();
    let cases: Arc<Vec<Case>> = Arc::new(cases().expect("the suite's graphs are well-formed"));
    let devices = Arc::new(Devices::new());
    let mut trials = Vec::new();
    {
        let cases = Arc::clone(&cases);
        trials.push(Trial::test("case_names_are_unique", move || {
            case_names_are_unique(&cases)
        }));
    }
    {
        let cases = Arc::clone(&cases);
        trials.push(Trial::test(
            "every_compiled_kernel_has_independent_tiles",
            move || every_compiled_kernel_has_independent_tiles(&cases),
        ));
    }
    let no_firmware = firmware().is_none();
    for &dev in DEVICES {
        for i in 0..cases.len() {
            let (cases, devices) = (Arc::clone(&cases), Arc::clone(&devices));
            let name = format!("{dev}::{}", test_name(&cases[i].name));
            let trial = Trial::test(name, move || check(&devices, dev, &cases[i]));
            // Without the firmware the QEMU tests are listed as ignored, as
            // `#[ignore]` would; `--include-ignored` runs them and they fail
            // naming what is missing.
            trials.push(trial.with_ignored_flag(dev == "qemu" && no_firmware));
        }
    }
    libtest_mimic::run(&args, trials).exit_code()
}
