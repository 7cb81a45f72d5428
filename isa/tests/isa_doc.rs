//! `docs/isa.md` is generated from the instruction table: this test fails
//! when the file differs from what `dvm_isa::doc::markdown()` renders, and
//! rewrites it when `DVM_BLESS=1` is set.

use std::path::PathBuf;

#[test]
fn isa_md_matches_the_instruction_table() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/isa.md");
    let want = dvm_isa::doc::markdown();
    if std::env::var_os("DVM_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &want).expect("write docs/isa.md");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    if have != want {
        let line = have
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| have.lines().count().min(want.lines().count()))
            + 1;
        panic!(
            "docs/isa.md is stale: it differs from the instruction table from line {line} on \
             (or is missing). Regenerate it with `{}` and commit the result.",
            dvm_isa::doc::BLESS_COMMAND
        );
    }
}
