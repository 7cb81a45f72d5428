//! `dvm disasm`, `dvm verify` and `dvm asm`: modules as files, text
//! assembly and verified kernels.

use std::path::Path;

use dvm_isa::DeviceLimits;

use crate::out_files::write_atomic;
use crate::say::{out, outln};
use crate::{parse, read, Failure};

/// Runs `dvm disasm`: the module as text assembly on standard output.
pub fn cmd_disasm(module: &Path) -> Result<(), Failure> {
    let bytes = read(module)?;
    let m = parse(module, &bytes)?;
    out!("{}", dvm_isa::asm::disassemble_lossy(&m))?;
    Ok(())
}

/// Runs `dvm verify`: every kernel verified against the default device;
/// those a multi-core runtime keeps on one core are listed after, with
/// the reason.
pub fn cmd_verify(module: &Path) -> Result<(), Failure> {
    let bytes = read(module)?;
    let m = parse(module, &bytes)?;
    let mut one_core = Vec::new();
    for i in 0..m.kernel_count() {
        let k = dvm_isa::verify_kernel(&m, i, &DeviceLimits::DEFAULT)
            .map_err(|e| Failure(format!("{}: {e}", module.display()), 2))?;
        if let Err(why) = k.tiles_independent() {
            one_core.push((i, why));
        }
    }
    outln!(
        "{}: {} kernel(s) verified",
        module.display(),
        m.kernel_count()
    )?;
    let names = m.meta().ok().map(|meta| meta.kernels);
    for (i, why) in one_core {
        let name = names
            .as_ref()
            .and_then(|n| n.get(i))
            .map_or(String::new(), |k| format!(" {:?}", k.name));
        outln!("  kernel {i}{name}: runs on one core ({why})")?;
    }
    Ok(())
}

/// Runs `dvm asm`: the text in `input` assembled into the module `output`.
pub fn cmd_asm(input: &Path, output: &Path) -> Result<(), Failure> {
    let text = String::from_utf8(read(input)?)
        .map_err(|_| Failure(format!("{}: not UTF-8 text", input.display()), 2))?;
    let bytes = dvm_isa::asm::assemble(&text)
        .map_err(|e| Failure(format!("{}: {e}", input.display()), 2))?;
    write_atomic(output, &bytes, &[input], || Ok(()))
}
