//! The assembler and disassembler: text that assembles gives a module that
//! parses, and a module's disassembly assembles back to the same bytes
//! (both ways, starting from text or from module bytes).
#![no_main]

use dvm_isa::asm::{assemble, disassemble};
use dvm_isa::Module;
use libfuzzer_sys::fuzz_target;

fn round_trip(bytes: &[u8]) {
    let m = Module::parse(bytes).expect("assembled modules parse");
    let Ok(text) = disassemble(&m) else {
        return;
    };
    let again =
        assemble(&text).unwrap_or_else(|e| panic!("disassembly does not assemble: {e}\n{text}"));
    assert_eq!(
        again, bytes,
        "disassembly assembles to other bytes:\n{text}"
    );
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = core::str::from_utf8(data) {
        if let Ok(bytes) = assemble(text) {
            round_trip(&bytes);
        }
    }
    if let Ok(m) = Module::parse(data) {
        if let Ok(text) = disassemble(&m) {
            let bytes = assemble(&text)
                .unwrap_or_else(|e| panic!("disassembly does not assemble: {e}\n{text}"));
            round_trip(&bytes);
        }
    }
});
