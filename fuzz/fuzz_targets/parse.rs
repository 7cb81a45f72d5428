//! Module parsing: any bytes parse or are refused with an error, and a
//! parsed module's accessors and lossy disassembly never panic.
#![no_main]

use dvm_isa::Module;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(m) = Module::parse(bytes) else {
        return;
    };
    for k in 0..m.kernel_count() {
        let Some(kernel) = m.kernel(k) else {
            continue;
        };
        for p in 0..kernel.param_count() {
            let _ = kernel.param(p);
        }
        for b in 0..kernel.bodies.len() {
            let _ = kernel.body_code(b);
        }
    }
    let _ = dvm_isa::asm::disassemble_lossy(&m);
});
