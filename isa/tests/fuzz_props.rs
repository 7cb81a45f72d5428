//! Property tests: random and mutated input never panics the parser, the
//! verifier, the metadata decoder, the disassembler or the assembler; and
//! random builder modules round-trip through text byte for byte.

mod common;

use common::Rng;
use dvm_isa::asm::{assemble, disassemble, disassemble_kernel, disassemble_lossy};
use dvm_isa::module::SectionKind;
use dvm_isa::ParseError;
use dvm_isa::{verify_kernel, verify_module, DeviceLimits, Module, VerifiedKernel};
use proptest::prelude::*;

/// Everything that reads module bytes, on `bytes`; checks the promises
/// that hold for any input.
fn exercise(bytes: &[u8]) {
    let Ok(m) = Module::parse(bytes) else { return };
    // A parsed module's metadata decodes, and is exactly what the encoder
    // writes for it (every byte accounted for).
    let meta = m.meta().unwrap_or_else(|e| panic!("parsed, but {e}"));
    assert_eq!(postcard::to_allocvec(&meta).unwrap(), m.meta_bytes());
    // The sections tile the module: their lengths and the padding before
    // each (under 8 bytes) add up to the whole.
    let mut end = 32 + 24 * 5;
    let mut ranges: Vec<_> = [
        SectionKind::Kernels,
        SectionKind::Bodies,
        SectionKind::Params,
        SectionKind::Code,
        SectionKind::Meta,
    ]
    .map(|k| m.section_range(k))
    .into_iter()
    .collect();
    ranges.sort_by_key(|r| r.start);
    for r in ranges {
        assert_eq!(r.start, usize::next_multiple_of(end, 8));
        end = r.end;
    }
    assert_eq!(end, bytes.len());
    let _ = verify_module(&m, &DeviceLimits::DEFAULT);
    for k in 0..m.kernel_count() {
        if let Ok(v) = verify_kernel(&m, k, &DeviceLimits::with_ub_bytes(u32::MAX)) {
            // Iterating a verified kernel decodes every instruction.
            for b in 0..v.body_count() {
                let words: usize = v.instrs(b).map(|(_, h, _)| h.len as usize).sum();
                assert_eq!(words, v.kernel().body_code(b).unwrap().len());
            }
            in_bounds(&v);
            let lens: Vec<u64> = (0..v.param_count()).map(|i| v.required_bytes(i)).collect();
            let writable = vec![true; v.param_count()];
            v.check_launch(&lens, &writable).unwrap();
        }
        let text = disassemble_kernel(&m, k).unwrap();
        assemble(&text).unwrap();
    }
    assert!(disassemble_kernel(&m, m.kernel_count()).is_err());
    // The exact disassembly, when it succeeds, reassembles to these bytes
    // (it checks that itself; check again from outside).
    if let Ok(text) = disassemble(&m) {
        assert_eq!(assemble(&text).unwrap(), bytes);
    }
    // The lossy one always assembles, into a module whose own disassembly
    // is exact.
    let lossy = disassemble_lossy(&m);
    let again = assemble(&lossy).unwrap_or_else(|e| panic!("{e}\n{lossy}"));
    let m2 = Module::parse(&again).unwrap();
    let text2 = disassemble(&m2).unwrap_or_else(|e| panic!("{e}\n{lossy}"));
    // And printing is idempotent from there on.
    assert_eq!(disassemble_lossy(&m2), text2);
}

/// What verification promises, checked naively: every UB range of every
/// instruction lies inside the kernel's UB, and (for grids small enough to
/// enumerate) every element every tile loads or stores lies inside the
/// bytes the launch check demands, and inside the UB box.
fn in_bounds(v: &VerifiedKernel<'_>) {
    for b in 0..v.body_count() {
        let grid = v.grid(b);
        let tiles = grid.iter().map(|g| *g as u64).product::<u64>();
        for (_, _, instr) in v.instrs(b) {
            instr
                .for_each_ub(|a| {
                    assert!(a.end().unwrap() <= v.ub_bytes() as u64, "{instr:?}");
                    Ok::<(), ()>(())
                })
                .unwrap();
            let Some(gm) = instr.gm() else { continue };
            let p = gm.pattern;
            if tiles > 512 {
                continue;
            }
            let size = p.dtype.size() as u64;
            for t in 0..tiles {
                let c = [
                    (t / (grid[1] as u64 * grid[2] as u64)) as u32,
                    (t / grid[2] as u64 % grid[1] as u64) as u32,
                    (t % grid[2] as u64) as u32,
                ];
                let (re, ce) = p.extent(c);
                assert!(
                    re >= 1 && ce >= 1 && re <= p.rows && ce <= p.cols,
                    "{instr:?} at {c:?}"
                );
                let last = p
                    .origin(c)
                    .checked_add((re as u64 - 1).checked_mul(p.row_stride).unwrap())
                    .and_then(|x| x.checked_add((ce as u64 - 1).checked_mul(p.col_stride).unwrap()))
                    .unwrap();
                assert!(
                    (last + 1) * size <= v.required_bytes(p.buf as usize),
                    "{instr:?} at {c:?}"
                );
                // A gather's UB box has the instruction's rows, not the
                // table's (`re` is the table's row count).
                let ub_rows = match instr {
                    dvm_isa::Instr::Gather { rows, .. } => rows,
                    _ => re,
                };
                let ub_last =
                    p.ub as u64 + ((ub_rows as u64 - 1) * p.pitch as u64 + ce as u64) * size;
                assert!(ub_last <= v.ub_bytes() as u64, "{instr:?} at {c:?}");
            }
        }
    }
}

/// Applies `n` random mutations to `bytes`.
fn mutate(bytes: &mut Vec<u8>, rng: &mut Rng, n: u64) {
    for _ in 0..n {
        if bytes.is_empty() {
            bytes.push(rng.next() as u8);
            continue;
        }
        let at = rng.below(bytes.len() as u64) as usize;
        match rng.below(7) {
            0 | 1 => bytes[at] ^= 1 << rng.below(8),
            2 => bytes[at] = rng.next() as u8,
            3 => {
                // A plausible small or extreme value in a 32-bit field.
                let v = rng.pick(&[0u32, 1, 2, 3, 0xff, 0xffff_ffff, 0x8000_0000, 24, 64]);
                let end = (at + 4).min(bytes.len());
                bytes[at..end].copy_from_slice(&v.to_le_bytes()[..end - at]);
            }
            4 => bytes.truncate(at),
            5 => bytes.insert(at, rng.next() as u8),
            _ => {
                bytes.remove(at);
            }
        }
    }
}

/// Applies `n` random edits to `text` (on character boundaries).
fn mutate_text(text: &str, rng: &mut Rng, n: u64) -> String {
    const BITS: &[&str] = &[
        " ",
        "=",
        ",",
        "[",
        "]",
        "\"",
        "\\",
        ";",
        "#",
        "\n",
        ".",
        "-",
        "|",
        "0",
        "9",
        "0x",
        "@wait=",
        "é",
        "\u{0}",
        ".end",
        ".body",
        ".kernel",
        ".param",
        ".word",
        ".label",
        ".module",
        "end",
        "add",
        "load",
        "f16",
        "4294967296",
        "18446744073709551616",
        "-1",
        "NaN",
        "bits:",
        "\\u{",
        "\\u{110000}",
        "}",
    ];
    let mut chars: Vec<char> = text.chars().collect();
    for _ in 0..n {
        let at = rng.below(chars.len() as u64 + 1) as usize;
        match rng.below(3) {
            0 if at < chars.len() => {
                chars.remove(at);
            }
            1 if at < chars.len() => {
                let len = (rng.below(8) as usize).min(chars.len() - at);
                chars.drain(at..at + len);
            }
            _ => {
                let bit = rng.pick(BITS);
                for (i, c) in bit.chars().enumerate() {
                    chars.insert(at + i, c);
                }
            }
        }
    }
    chars.into_iter().collect()
}

/// Assembling never panics; what assembles parses, and its disassembly is
/// exact.
fn exercise_text(text: &str) {
    if let Ok(bytes) = assemble(text) {
        let m = Module::parse(&bytes).unwrap();
        let back = disassemble(&m).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(assemble(&back).unwrap(), bytes);
        exercise(&bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random builder modules (random kernels of random instructions, raw
    /// words, labels anywhere, awkward names) round-trip exactly.
    #[test]
    fn builder_modules_round_trip(seed in any::<u64>()) {
        let bytes = common::module(seed);
        let m = Module::parse(&bytes).unwrap();
        let text = disassemble(&m).unwrap_or_else(|e| panic!("{e}"));
        prop_assert_eq!(assemble(&text).unwrap(), bytes.clone());
        // The lossy printer says the same when nothing is lost.
        prop_assert_eq!(disassemble_lossy(&m), text);
        exercise(&bytes);
    }

    /// One random byte flip, truncation or extension of a valid module
    /// never panics anything that reads it (see `exercise`); a truncation
    /// or an extension is always rejected, naming the missing or extra
    /// bytes; a flip either is rejected or gives a module whose metadata
    /// decodes and whose sections tile it, whatever it verifies to.
    #[test]
    fn flipped_truncated_or_extended_modules(
        seed in any::<u64>(),
        verifiable in any::<bool>(),
        how in 0u8..4,
        pos in any::<u64>(),
        byte in any::<u8>(),
        extra in 1usize..16,
    ) {
        let mut bytes = if verifiable {
            common::verifiable_module(seed)
        } else {
            common::module(seed)
        };
        let at = (pos % bytes.len() as u64) as usize;
        match how {
            0 => bytes[at] ^= 1 << (byte % 8),
            1 => bytes[at] = byte,
            2 => {
                bytes.truncate(at);
                let e = Module::parse(&bytes).unwrap_err();
                prop_assert!(
                    matches!(e, ParseError::Truncated { .. } | ParseError::SectionOutOfBounds { .. }),
                    "{}", e
                );
            }
            _ => {
                let len = bytes.len() as u64;
                bytes.extend(std::iter::repeat_n(byte, extra));
                prop_assert_eq!(
                    Module::parse(&bytes).unwrap_err(),
                    ParseError::TrailingBytes {
                        count: extra as u64,
                        last: SectionKind::Meta,
                        end: len,
                    }
                );
            }
        }
        exercise(&bytes);
    }

    /// Random verifiable modules verify, round-trip, and keep every access
    /// in bounds.
    #[test]
    fn verifiable_modules_verify(seed in any::<u64>()) {
        let bytes = common::verifiable_module(seed);
        let m = Module::parse(&bytes).unwrap();
        verify_module(&m, &DeviceLimits::DEFAULT).unwrap();
        let text = disassemble(&m).unwrap();
        prop_assert_eq!(assemble(&text).unwrap(), bytes.clone());
        exercise(&bytes);
    }

    /// Bit flips in the code of verifiable modules: whatever still
    /// verifies keeps every access in bounds.
    #[test]
    fn mutated_verifiable_code_stays_in_bounds(seed in any::<u64>(), n in 1u64..4) {
        let mut rng = Rng(seed ^ 0xbeef);
        let mut bytes = common::verifiable_module(seed);
        let (off, len) = common::section(&bytes, 4);
        for _ in 0..n {
            let at = off + rng.below(len as u64) as usize;
            match rng.below(3) {
                0 => bytes[at] ^= 1 << rng.below(8),
                1 => bytes[at] = rng.next() as u8,
                _ => bytes[at] = bytes[at].wrapping_add(1),
            }
        }
        exercise(&bytes);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        exercise(&bytes);
    }

    /// Random bytes behind a valid header and section table, so the
    /// parser gets past the magic.
    #[test]
    fn random_sections_never_panic(seed in any::<u64>(), tail in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut bytes = common::module(seed);
        bytes.truncate(32 + 5 * 24);
        bytes.extend_from_slice(&tail);
        exercise(&bytes);
    }

    #[test]
    fn mutated_modules_never_panic(seed in any::<u64>(), n in 1u64..6) {
        let mut rng = Rng(seed ^ 0x5151);
        let mut bytes = common::module(seed);
        mutate(&mut bytes, &mut rng, n);
        exercise(&bytes);
    }

    /// Mutations restricted to the code section, so that most modules
    /// still parse and the verifier sees the damage.
    #[test]
    fn mutated_code_never_panics(seed in any::<u64>(), n in 1u64..4) {
        let mut rng = Rng(seed ^ 0xc0de);
        let mut bytes = common::module(seed);
        let (off, len) = common::section(&bytes, 4);
        for _ in 0..n {
            if len == 0 {
                break;
            }
            let at = off + rng.below(len as u64) as usize;
            bytes[at] ^= 1 << rng.below(8);
        }
        exercise(&bytes);
    }

    #[test]
    fn random_text_never_panics(text in "(?s).{0,200}") {
        exercise_text(&text);
    }

    #[test]
    fn mutated_disassembly_never_panics(seed in any::<u64>(), n in 1u64..6) {
        let bytes = common::module(seed);
        let text = disassemble(&Module::parse(&bytes).unwrap()).unwrap();
        let mut rng = Rng(seed ^ 0x7e47);
        exercise_text(&mutate_text(&text, &mut rng, n));
    }
}
