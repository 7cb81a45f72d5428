//! `.npy` reading: any bytes give a tensor or an error, never a panic, and
//! a tensor read writes back to bytes that read as the same tensor.
#![no_main]

use std::path::Path;

use dvm_tensor::npy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let path = Path::new("fuzz.npy");
    let Ok(t) = npy::from_bytes(bytes, path, None) else {
        return;
    };
    let again = npy::to_bytes(&t, path).expect("a tensor read writes back");
    let t2 = npy::from_bytes(&again, path, None).expect("written bytes read back");
    assert_eq!(t.shape(), t2.shape());
    assert_eq!(t.dtype(), t2.dtype());
});
