//! Execution after verification: every kernel of the module that verifies
//! runs on guard-paged buffers of exactly the size the launch check
//! accepts, on one and on three blocks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    // The module's own bytes fill the buffers: data varies with the input.
    dvm_fuzz::run_module(bytes, bytes, 1);
    dvm_fuzz::run_module(bytes, bytes, 3);
});
