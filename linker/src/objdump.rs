//! Human-readable description of an object read back: what `dvm objdump`
//! prints.

use std::fmt::Write as _;

use dvm_isa::module::features;

use crate::elf::{LinkedObject, IMAGE_END, IMAGE_SECTION, IMAGE_START};

/// Describes `obj`: architecture, image size and features, the image
/// symbols, then per kernel its symbol (offset, size), kind, UB bytes,
/// bodies (grid, code size) and parameters (name, dtype, access, dims).
/// With `disasm`, each kernel's disassembly (with word offsets) follows.
pub fn describe(obj: &LinkedObject<'_>, disasm: bool) -> String {
    let mut out = String::new();
    let m = &obj.module;
    let feats: Vec<&str> = features::NAMES
        .iter()
        .filter(|(_, bit)| m.features() & bit != 0)
        .map(|(name, _)| *name)
        .collect();
    let _ = writeln!(
        out,
        "{} {}, section {IMAGE_SECTION} at {:#x}: {} bytes, {} kernel(s), features {}",
        obj.arch.map_or(obj.machine.as_str(), |a| a.name()),
        if obj.relocatable {
            "relocatable"
        } else {
            "linked"
        },
        obj.address,
        obj.image.len(),
        m.kernel_count(),
        if feats.is_empty() {
            "none".to_string()
        } else {
            feats.join("|")
        },
    );
    let _ = writeln!(
        out,
        "  symbol {IMAGE_START} offset 0x0 size {}",
        obj.image.len()
    );
    let _ = writeln!(
        out,
        "  symbol {IMAGE_END} offset {:#x} size 0",
        obj.image.len()
    );
    for ks in &obj.kernels {
        let Some(k) = m.kernel(ks.index as usize) else {
            continue;
        };
        let words: u64 = k.bodies.iter().map(|b| u64::from(b.code_len.get())).sum();
        let _ = writeln!(
            out,
            "kernel {} \"{}\": symbol {} offset {:#x} size {}, kind {}, ub {} bytes, {} body(ies), code {} bytes",
            ks.index,
            ks.name.escape_debug(),
            ks.symbol,
            ks.offset,
            ks.size,
            k.kind,
            k.ub_bytes,
            k.bodies.len(),
            words * 8
        );
        for (b, body) in k.bodies.iter().enumerate() {
            let [x, y, z] = body.grid();
            let _ = writeln!(
                out,
                "  body {b}: grid {x},{y},{z}, {} words at word {}",
                body.code_len.get(),
                body.code_start.get()
            );
        }
        let pmeta = obj.meta.kernels.get(ks.index as usize).map(|k| &k.params);
        for (i, p) in k.params().enumerate() {
            let (name, dims) = pmeta
                .and_then(|ps| ps.get(i))
                .map_or((String::new(), String::new()), |pm| {
                    (pm.name.escape_debug().to_string(), pm.dims.join(","))
                });
            let _ = writeln!(
                out,
                "  param {i} \"{name}\": {} {} dims [{dims}]",
                p.dtype,
                p.access.name()
            );
        }
        if disasm {
            match dvm_isa::asm::disassemble_kernel(m, ks.index as usize) {
                Ok(text) => out.push_str(&text),
                Err(e) => {
                    let _ = writeln!(out, "  ; cannot disassemble: {e}");
                }
            }
        }
    }
    out
}
