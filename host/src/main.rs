fn main() {
    eprintln!("dvm: the host CLI is not built yet");
    std::process::exit(2);
}
