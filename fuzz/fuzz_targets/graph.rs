//! Graph JSON: any text loads or is refused with an error naming the
//! culprit; a graph that loads decomposes and fuses without panicking.
#![no_main]

use std::path::Path;

use dvm_graph::Graph;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = core::str::from_utf8(data) else {
        return;
    };
    // A directory that does not exist: file references fail, nothing is read.
    let Ok(g) = Graph::from_json(text, Path::new("/nonexistent/dvm-fuzz")) else {
        return;
    };
    let _ = dvm_runtime::Prepared::new(&g);
});
