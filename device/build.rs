fn main() {
    if std::env::var_os("CARGO_FEATURE_FIRMWARE").is_some() {
        println!("cargo:rustc-link-search=/tmp/fwscripts");
        println!("cargo:rustc-link-arg-bin=dvm-firmware=-Tlink.x");
        println!("cargo:rustc-link-arg-bin=dvm-firmware=-Tdefmt.x");
    }
}
