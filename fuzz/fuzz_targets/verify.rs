//! Verification and predecoding: any parsed module verifies or is refused,
//! and the one-pass verify + predecode agrees with the two passes.
#![no_main]

use dvm_device::Program;
use dvm_isa::{verify_kernel, verify_module, DeviceLimits, Module};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(m) = Module::parse(bytes) else {
        return;
    };
    let all = verify_module(&m, &DeviceLimits::DEFAULT);
    let mut first_err = None;
    for k in 0..m.kernel_count() {
        let one = verify_kernel(&m, k, &DeviceLimits::DEFAULT);
        let mut slot = Box::<Program>::new_uninit();
        let fused = Program::init(&mut slot)
            .verify_and_predecode(&m, k, &DeviceLimits::DEFAULT)
            .map(|_| ());
        match &one {
            Ok(v) => {
                let mut slot = Box::<Program>::new_uninit();
                let two = Program::init(&mut slot).predecode(v);
                assert_eq!(
                    two.is_ok(),
                    fused.is_ok(),
                    "kernel {k}: one pass and two disagree"
                );
            }
            Err(e) => {
                assert!(
                    fused.is_err(),
                    "kernel {k}: predecoded a kernel that fails {e}"
                );
                first_err.get_or_insert(*e);
            }
        }
    }
    assert_eq!(
        all.err(),
        first_err,
        "verify_module reports the first kernel's error"
    );
});
