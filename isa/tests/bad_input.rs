//! One test per rule of the parser, the verifier and the launch check, each
//! asserting the exact typed error; plus hand-computed and brute-force
//! checks of `furthest_element`, the guard against out-of-bounds access.

mod common;

use common::{put_u32, put_u64, section, sections, Rng};
use dvm_isa::asm::assemble;
use dvm_isa::builder::{BodyDef, CodeWriter, KernelDef, ModuleBuilder, ParamDef};
use dvm_isa::error::{DecodeError, ParseError};
use dvm_isa::module::{features, SectionKind};
use dvm_isa::verify::furthest_element;
use dvm_isa::{
    verify_kernel, verify_module, DType, DTypeSet, DeviceLimits, GmKind, GmPattern, GridDim, Instr,
    KernelKind, LaunchError, Module, Opcode, PadMode, ParamAccess, Pipe, Rule, Scalar, Site,
    VerifyError, WaitMask,
};
use proptest::prelude::*;

// ---------------------------------------------------------------------------
// Module container
// ---------------------------------------------------------------------------

/// A valid module with two kernels, labels and every section non-empty.
fn valid() -> Vec<u8> {
    assemble(
        r#".module 1.0 features=none
.kernel "a" kind=vector ub=4096
  .param "x" f32 in dims=[N]
  .param "y" f32 out dims=[N]
  .body grid=4,1,1
    .label "start"
    add dt=f32 dst=0 a=0 b=64 n=16
    end
.end
.kernel "b" kind=vector ub=4096
  .param "z" i32 inout
  .body grid=1,1,1
    end
.end
"#,
    )
    .unwrap()
}

const KERNELS: u32 = SectionKind::Kernels as u32;
const BODIES: u32 = SectionKind::Bodies as u32;
const PARAMS: u32 = SectionKind::Params as u32;
const CODE: u32 = SectionKind::Code as u32;
const META: u32 = SectionKind::Meta as u32;

fn kind_of(k: u32) -> SectionKind {
    [
        SectionKind::Kernels,
        SectionKind::Bodies,
        SectionKind::Params,
        SectionKind::Code,
        SectionKind::Meta,
    ][k as usize - 1]
}

fn parse_err(bytes: &[u8]) -> ParseError {
    Module::parse(bytes).unwrap_err()
}

#[test]
fn the_valid_module_parses_and_verifies() {
    let bytes = valid();
    let m = Module::parse(&bytes).unwrap();
    verify_module(&m, &DeviceLimits::DEFAULT).unwrap();
    assert_eq!(m.meta().unwrap().kernels.len(), 2);
}

#[test]
fn truncated_header() {
    let bytes = valid();
    for cut in [0, 1, 4, 16, 31] {
        assert_eq!(
            parse_err(&bytes[..cut]),
            ParseError::Truncated {
                what: "header",
                need: 32,
                have: cut as u64
            },
            "cut at {cut}"
        );
    }
}

#[test]
fn truncated_section_table() {
    let bytes = valid();
    for cut in [32, 33, 56, 151] {
        assert_eq!(
            parse_err(&bytes[..cut]),
            ParseError::Truncated {
                what: "section table",
                need: 32 + 5 * 24,
                have: cut as u64
            },
            "cut at {cut}"
        );
    }
}

/// Every strict prefix is rejected, with the error the first failing
/// structure dictates.
#[test]
fn truncated_at_every_cut_point() {
    let bytes = valid();
    let secs = sections(&bytes);
    for cut in 0..bytes.len() {
        let expected = if cut < 32 {
            ParseError::Truncated {
                what: "header",
                need: 32,
                have: cut as u64,
            }
        } else if cut < 152 {
            ParseError::Truncated {
                what: "section table",
                need: 152,
                have: cut as u64,
            }
        } else {
            let (k, off, len) = *secs.iter().find(|s| s.1 + s.2 > cut).unwrap();
            ParseError::SectionOutOfBounds {
                section: kind_of(k),
                offset: off as u64,
                len: len as u64,
                file_len: cut as u64,
            }
        };
        assert_eq!(parse_err(&bytes[..cut]), expected, "cut at {cut}");
    }
    // Some cut points land in each section.
    let (code, _) = section(&bytes, CODE);
    assert!(matches!(
        parse_err(&bytes[..code + 8]),
        ParseError::SectionOutOfBounds {
            section: SectionKind::Code,
            ..
        }
    ));
}

#[test]
fn bad_magic() {
    let mut bytes = valid();
    bytes[0] = b'X';
    assert_eq!(parse_err(&bytes), ParseError::BadMagic(*b"XVMB"));
}

#[test]
fn unsupported_version() {
    for major in [0u16, 2, 0xffff] {
        let mut bytes = valid();
        bytes[4..6].copy_from_slice(&major.to_le_bytes());
        bytes[6..8].copy_from_slice(&3u16.to_le_bytes());
        assert_eq!(
            parse_err(&bytes),
            ParseError::UnsupportedVersion { major, minor: 3 }
        );
    }
    // Any minor of major 1 is accepted.
    let mut bytes = valid();
    bytes[6..8].copy_from_slice(&9u16.to_le_bytes());
    Module::parse(&bytes).unwrap();
}

#[test]
fn bad_header_size_or_reserved() {
    let mut bytes = valid();
    put_u32(&mut bytes, 20, 33);
    assert_eq!(parse_err(&bytes), ParseError::BadHeader);
    let mut bytes = valid();
    bytes[24] = 1;
    assert_eq!(parse_err(&bytes), ParseError::BadHeader);
    // A section entry's reserved field.
    let mut bytes = valid();
    put_u32(&mut bytes, 32 + 4, 1);
    assert_eq!(parse_err(&bytes), ParseError::BadHeader);
}

#[test]
fn unknown_feature_bits() {
    for bit in [5u32, 17, 63] {
        let mut bytes = valid();
        put_u64(&mut bytes, 8, features::F16 | 1 << bit);
        assert_eq!(parse_err(&bytes), ParseError::UnknownFeatures(1 << bit));
    }
}

#[test]
fn unknown_section_kind() {
    for kind in [0u32, 6, 0xffff_ffff] {
        let mut bytes = valid();
        put_u32(&mut bytes, 32 + 24 * 2, kind);
        assert_eq!(parse_err(&bytes), ParseError::UnknownSection(kind));
    }
}

#[test]
fn duplicate_section() {
    let mut bytes = valid();
    // Entry 3 (code) claims to be the kernel table again.
    put_u32(&mut bytes, 32 + 24 * 3, KERNELS);
    assert_eq!(
        parse_err(&bytes),
        ParseError::DuplicateSection(SectionKind::Kernels)
    );
}

#[test]
fn missing_section() {
    // Drop the last entry (META) by shrinking the count.
    let mut bytes = valid();
    put_u32(&mut bytes, 16, 4);
    assert_eq!(
        parse_err(&bytes),
        ParseError::MissingSection(SectionKind::Meta)
    );
    // Overwrite entry i with the META entry and drop the last one.
    for i in 0..4 {
        let mut bytes = valid();
        let meta_entry: Vec<u8> = bytes[32 + 24 * 4..32 + 24 * 5].to_vec();
        bytes[32 + 24 * i..32 + 24 * (i + 1)].copy_from_slice(&meta_entry);
        put_u32(&mut bytes, 16, 4);
        assert_eq!(
            parse_err(&bytes),
            ParseError::MissingSection(kind_of(i as u32 + 1))
        );
    }
    // No sections at all: the first lookup fails.
    let mut bytes = valid();
    put_u32(&mut bytes, 16, 0);
    assert_eq!(
        parse_err(&bytes),
        ParseError::MissingSection(SectionKind::Kernels)
    );
}

#[test]
fn section_out_of_bounds() {
    let bytes = valid();
    let len = bytes.len() as u64;
    // Offset past the end.
    let mut b = bytes.clone();
    put_u64(&mut b, 32 + 24 * 3 + 8, len + 8);
    let (_, code_len) = section(&bytes, CODE);
    assert_eq!(
        parse_err(&b),
        ParseError::SectionOutOfBounds {
            section: SectionKind::Code,
            offset: len + 8,
            len: code_len as u64,
            file_len: len
        }
    );
    // Length one byte too long (META is last in the file).
    let mut b = bytes.clone();
    let (meta_off, meta_len) = section(&bytes, META);
    put_u64(&mut b, 32 + 24 * 4 + 16, meta_len as u64 + 1);
    assert_eq!(
        parse_err(&b),
        ParseError::SectionOutOfBounds {
            section: SectionKind::Meta,
            offset: meta_off as u64,
            len: meta_len as u64 + 1,
            file_len: len
        }
    );
    // offset + len overflows u64.
    let mut b = bytes.clone();
    put_u64(&mut b, 32 + 8, 16);
    put_u64(&mut b, 32 + 16, u64::MAX);
    assert_eq!(
        parse_err(&b),
        ParseError::SectionOutOfBounds {
            section: SectionKind::Kernels,
            offset: 16,
            len: u64::MAX,
            file_len: len
        }
    );
    // A section table entry count far beyond the file.
    let mut b = bytes;
    put_u32(&mut b, 16, u32::MAX);
    assert_eq!(
        parse_err(&b),
        ParseError::Truncated {
            what: "section table",
            need: 32 + u32::MAX as u64 * 24,
            have: len
        }
    );
}

#[test]
fn table_sizes_not_whole_entries() {
    for (i, kind) in [(0, KERNELS), (1, BODIES), (2, PARAMS), (3, CODE)] {
        let mut bytes = valid();
        let (_, len) = section(&bytes, kind);
        put_u64(&mut bytes, 32 + 24 * i + 16, len as u64 - 1);
        assert_eq!(
            parse_err(&bytes),
            ParseError::SectionSize(kind_of(kind)),
            "section {kind}"
        );
    }
}

/// Byte offset of field `at` of kernel entry `k`.
fn kernel_field(bytes: &[u8], k: usize, at: usize) -> usize {
    section(bytes, KERNELS).0 + 24 * k + at
}

#[test]
fn kernel_ranges_outside_the_tables() {
    let bad = |what| ParseError::BadKernel { kernel: 1, what };
    // param_start + param_count past the table (3 entries).
    let mut b = valid();
    let at = kernel_field(&b, 1, 8);
    put_u32(&mut b, at, 3);
    assert_eq!(
        parse_err(&b),
        bad("parameter range outside the parameter table")
    );
    let mut b = valid();
    let at = kernel_field(&b, 1, 12);
    put_u32(&mut b, at, 2);
    assert_eq!(
        parse_err(&b),
        bad("parameter range outside the parameter table")
    );
    // start + count overflows u32 (checked in u64).
    let mut b = valid();
    let at = kernel_field(&b, 1, 8);
    put_u32(&mut b, at, u32::MAX);
    assert_eq!(
        parse_err(&b),
        bad("parameter range outside the parameter table")
    );
    // Bodies.
    let mut b = valid();
    let at = kernel_field(&b, 1, 16);
    put_u32(&mut b, at, 2);
    assert_eq!(parse_err(&b), bad("body range outside the body table"));
    let mut b = valid();
    let at = kernel_field(&b, 1, 20);
    put_u32(&mut b, at, u32::MAX);
    assert_eq!(parse_err(&b), bad("body range outside the body table"));
}

#[test]
fn kernel_entry_fields() {
    let mut b = valid();
    let at = kernel_field(&b, 1, 0);
    b[at] = 5;
    assert_eq!(
        parse_err(&b),
        ParseError::BadKernel {
            kernel: 1,
            what: "unknown kernel kind"
        }
    );
    let mut b = valid();
    let at = kernel_field(&b, 0, 2);
    b[at] = 1;
    assert_eq!(
        parse_err(&b),
        ParseError::BadKernel {
            kernel: 0,
            what: "reserved bytes set"
        }
    );
}

#[test]
fn body_ranges_outside_the_code() {
    let (off, _) = section(&valid(), BODIES);
    let (_, code_len) = section(&valid(), CODE);
    let words = (code_len / 8) as u32;
    let bad = |what| ParseError::BadBody { body: 1, what };
    // Body 1 is `end` at the last word: start it one word later.
    let mut b = valid();
    put_u32(&mut b, off + 24 + 16, words);
    assert_eq!(parse_err(&b), bad("code range outside the code section"));
    let mut b = valid();
    put_u32(&mut b, off + 24 + 20, 2);
    assert_eq!(parse_err(&b), bad("code range outside the code section"));
    let mut b = valid();
    put_u32(&mut b, off + 24 + 16, u32::MAX);
    assert_eq!(parse_err(&b), bad("code range outside the code section"));
    // Empty range at the very end is fine.
    let mut b = valid();
    put_u32(&mut b, off + 24 + 16, words);
    put_u32(&mut b, off + 24 + 20, 0);
    Module::parse(&b).unwrap();
    let mut b = valid();
    put_u32(&mut b, off + 24 + 12, 1);
    assert_eq!(parse_err(&b), bad("reserved field set"));
}

#[test]
fn param_entries() {
    let (off, _) = section(&valid(), PARAMS);
    for (at, v) in [(0, 6u8), (0, 0xff), (1, 0), (1, 4), (2, 1), (3, 1)] {
        let mut b = valid();
        b[off + 4 * 2 + at] = v;
        assert_eq!(
            parse_err(&b),
            ParseError::BadParam { param: 2 },
            "byte {at} = {v}"
        );
    }
}

#[test]
fn bad_metadata() {
    // Garbage: every consumer's parse fails, naming the metadata.
    let mut b = valid();
    let (off, len) = section(&b, META);
    for x in &mut b[off..off + len] {
        *x = 0xff;
    }
    let e = parse_err(&b);
    assert!(matches!(e, ParseError::BadMeta { at: 0, .. }), "{e}");
    assert!(
        e.to_string().starts_with("metadata section malformed"),
        "{e}"
    );
    // One byte of a name made invalid UTF-8 (the probe's flipped byte).
    let mut b = valid();
    let name_at = off + 2; // kernel count, name length, then "a"
    assert_eq!(b[name_at], b'a');
    b[name_at] = 0xff;
    assert_eq!(
        parse_err(&b),
        ParseError::BadMeta {
            at: 1,
            what: "string is not UTF-8"
        }
    );
    // A length running past the section.
    let mut b = valid();
    b[off + 1] = 0x7f;
    assert!(matches!(parse_err(&b), ParseError::BadMeta { at: 1, .. }));
    // A number not in its shortest form (postcard would accept it; the
    // encoder never writes it).
    let mut b = valid();
    let n = b[off];
    b[off] = n | 0x80;
    b.insert(off + 1, 0);
    put_u64(&mut b, 32 + 24 * 4 + 16, len as u64 + 1);
    assert_eq!(
        parse_err(&b),
        ParseError::BadMeta {
            at: 0,
            what: "number not in its shortest encoding"
        }
    );
    // Bytes after the metadata inside the section.
    let mut b = valid();
    b.push(0);
    put_u64(&mut b, 32 + 24 * 4 + 16, len as u64 + 1);
    assert_eq!(
        parse_err(&b),
        ParseError::BadMeta {
            at: len as u64,
            what: "bytes after the metadata"
        }
    );
}

/// Re-encodes `meta` into `bytes`' metadata section (the last one).
fn with_meta(bytes: &[u8], meta: &dvm_isa::meta::ModuleMeta) -> Vec<u8> {
    let (off, _) = section(bytes, META);
    let mut b = bytes[..off].to_vec();
    b.extend(postcard::to_allocvec(meta).unwrap());
    let len = b.len() - off;
    put_u64(&mut b, 32 + 24 * 4 + 16, len as u64);
    b
}

#[test]
fn metadata_must_match_the_tables() {
    let good = valid();
    let meta = Module::parse(&good).unwrap().meta().unwrap();
    assert_eq!(with_meta(&good, &meta), good);
    // A kernel too few.
    let mut m = meta.clone();
    m.kernels.pop();
    assert_eq!(
        parse_err(&with_meta(&good, &m)),
        ParseError::MetaKernelCount { meta: 1, table: 2 }
    );
    // A parameter name too few.
    let mut m = meta.clone();
    m.kernels[0].params.pop();
    let e = parse_err(&with_meta(&good, &m));
    assert_eq!(
        e,
        ParseError::MetaParamCount {
            kernel: 0,
            meta: 1,
            table: 2
        }
    );
    // A label on a body the kernel lacks.
    let mut m = meta.clone();
    m.kernels[0].labels[0].body = 1;
    assert_eq!(
        parse_err(&with_meta(&good, &m)),
        ParseError::MetaLabelBody {
            kernel: 0,
            body: 1,
            bodies: 1
        }
    );
    // A label names a word of its body: `a`'s body is `add` (3 words)
    // and `end`, so word 3 (`end`) is the last it may name.
    let mut m = meta.clone();
    m.kernels[0].labels[0].word = 3;
    Module::parse(&with_meta(&good, &m)).unwrap();
    for word in [4, 5, u32::MAX] {
        let mut m = meta.clone();
        m.kernels[0].labels[0].word = word;
        let e = parse_err(&with_meta(&good, &m));
        assert!(
            matches!(e, ParseError::MetaLabelWord { kernel: 0, body: 0, word: w, words: 4, label }
                if w == word && label.as_str() == "start"),
            "{e}"
        );
    }
    // Also in a later kernel, and the message says where.
    let mut m = meta.clone();
    m.kernels[1].labels.push(dvm_isa::meta::Label {
        body: 0,
        word: 1,
        text: "after \"end\"".into(),
    });
    let e = parse_err(&with_meta(&good, &m));
    assert_eq!(
        e.to_string(),
        "metadata of kernel 1: label \"after \\\"end\\\"\" is on word 1 of body 0, which \
         has 1 word(s): a label must name a word of its body"
    );
    // Two kernels of one name.
    let mut m = meta.clone();
    m.kernels[1].name = "a".into();
    let e = parse_err(&with_meta(&good, &m));
    assert!(
        matches!(e, ParseError::DuplicateKernelName { first: 0, second: 1, name } if name.as_str() == "a"),
        "{e}"
    );
    assert_eq!(e.to_string(), "kernels 0 and 1 have the same name \"a\"");
}

#[test]
fn duplicate_kernel_names_in_large_modules() {
    // Beyond a few kernels the names are sorted, not compared pairwise.
    let mut text = String::new();
    for i in 0..20 {
        text += &format!(".kernel \"k{i}\" kind=vector ub=0\n  .body grid=1,1,1\n    end\n.end\n");
    }
    let good = assemble(&text).unwrap();
    let meta = Module::parse(&good).unwrap().meta().unwrap();
    let mut m = meta.clone();
    m.kernels[17].name = "k3".into();
    let e = parse_err(&with_meta(&good, &m));
    assert!(
        matches!(
            e,
            ParseError::DuplicateKernelName {
                first: 3,
                second: 17,
                ..
            }
        ),
        "{e}"
    );
    // A long name is shortened in the message.
    let mut m = meta;
    let long = "é".repeat(40);
    m.kernels[5].name = long.clone();
    m.kernels[9].name = long;
    let e = parse_err(&with_meta(&good, &m));
    let ParseError::DuplicateKernelName {
        first: 5,
        second: 9,
        name,
    } = e
    else {
        panic!("{e}")
    };
    assert!(name.is_cut() && name.as_str().len() <= 48, "{name}");
    assert!(e.to_string().ends_with("…\""), "{e}");
}

#[test]
fn duplicate_kernel_names_are_refused_when_built() {
    let def = KernelDef {
        name: "twice".into(),
        kind: KernelKind::Vector,
        ub_bytes: 0,
        params: vec![],
        bodies: vec![BodyDef {
            grid: [1, 1, 1],
            code: CodeWriter::new(),
        }],
    };
    let mut b = ModuleBuilder::new();
    assert_eq!(b.add_kernel(def.clone()), Ok(0));
    let e = b.add_kernel(def).unwrap_err();
    assert!(e.to_string().contains("\"twice\""), "{e}");
    // The builder is unchanged: one kernel.
    assert_eq!(Module::parse(&b.finish()).unwrap().kernel_count(), 1);
    // The assembler names the kernel at its second `.kernel` line.
    let k = ".kernel \"twice\" kind=vector ub=0\n  .body grid=1,1,1\n    end\n.end\n";
    let e = assemble(&format!("{k}{k}")).unwrap_err();
    assert_eq!((e.line, e.col), (5, 9), "{e}");
    assert_eq!(
        e.to_string(),
        "line 5, column 9: kernel \"twice\" is defined twice (first as kernel 0)"
    );
}

#[test]
fn sections_tile_the_module() {
    let good = valid();
    Module::parse(&good).unwrap();
    // The kernel table's length zeroed: its entries are unaccounted for.
    let mut b = good.clone();
    let (koff, klen) = section(&b, KERNELS);
    put_u64(&mut b, 32 + 16, 0);
    let e = parse_err(&b);
    assert_eq!(
        e,
        ParseError::SectionGap {
            section: SectionKind::Bodies,
            offset: (koff + klen) as u64,
            after: dvm_isa::SectionSite::Section(SectionKind::Kernels),
            prev_end: koff as u64,
            expected: koff as u64,
        }
    );
    assert!(
        e.to_string().contains("48 bytes are unaccounted for"),
        "{e}"
    );
    // A table one entry shorter than its section is not a whole number...
    // but one made longer overlaps the next section.
    let mut b = good.clone();
    put_u64(&mut b, 32 + 16, klen as u64 + 24);
    let e = parse_err(&b);
    assert!(e.to_string().contains("overlap by 24 bytes"), "{e}");
    // A gap between the section table and the first section.
    let mut b = good.clone();
    for s in 0..5 {
        let at = 32 + 24 * s + 8;
        let o = u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        put_u64(&mut b, at, o + 8);
    }
    b.splice(koff..koff, [0u8; 8]);
    assert!(matches!(
        parse_err(&b),
        ParseError::SectionGap {
            section: SectionKind::Kernels,
            after: dvm_isa::SectionSite::Table,
            ..
        }
    ));
    // Non-zero padding.
    let mut b = good.clone();
    let (poff, plen) = section(&b, PARAMS);
    let (coff, _) = section(&b, CODE);
    assert!(coff > poff + plen, "the params section is padded");
    b[poff + plen] = 7;
    assert_eq!(
        parse_err(&b),
        ParseError::BadPadding {
            offset: (poff + plen) as u64,
            section: SectionKind::Code,
            value: 7
        }
    );
}

#[test]
fn trailing_bytes_are_rejected() {
    let good = valid();
    for n in [1usize, 7, 8, 100] {
        let mut b = good.clone();
        b.extend(std::iter::repeat_n(0u8, n));
        let e = parse_err(&b);
        assert_eq!(
            e,
            ParseError::TrailingBytes {
                count: n as u64,
                last: SectionKind::Meta,
                end: good.len() as u64
            }
        );
        assert!(
            e.to_string()
                .starts_with(&format!("{n} trailing bytes after the module")),
            "{e}"
        );
    }
}

// ---------------------------------------------------------------------------
// Verifier
// ---------------------------------------------------------------------------

const PARAMS_TEXT: &str = r#"  .param "x" f32 in dims=[16,16]
  .param "y" f32 out dims=[16,16]
  .param "z" f32 inout dims=[16,16]
  .param "h" f16 in dims=[16,16]
"#;

/// A vector kernel over a 4×1×1 grid with UB 4096 and parameters
/// x: f32 in, y: f32 out, z: f32 inout, h: f16 in; `body` is the code.
fn kernel_text(features: &str, kind: &str, body: &str) -> String {
    format!(
        ".module 1.0 features={features}\n.kernel \"k\" kind={kind} ub=4096\n{PARAMS_TEXT}  .body grid=4,1,1\n{body}\n.end\n"
    )
}

fn verify_text(text: &str) -> Result<(), VerifyError> {
    let bytes = assemble(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let m = Module::parse(&bytes).unwrap();
    verify_module(&m, &DeviceLimits::DEFAULT)
}

/// Verifies `body` in the standard vector kernel (all features declared).
fn verify_body(body: &str) -> Result<(), VerifyError> {
    verify_text(&kernel_text("f16|bf16|cube|atomic_add", "vector", body))
}

fn at(word: u32, rule: Rule) -> Result<(), VerifyError> {
    Err(VerifyError {
        kernel: 0,
        body: 0,
        word,
        site: Site::Word,
        rule,
    })
}

/// A kernel-level error of kernel 0 at `site` (its entry or parameter
/// table).
fn at_site(site: Site, rule: Rule) -> Result<(), VerifyError> {
    Err(VerifyError {
        kernel: 0,
        body: 0,
        word: 0,
        site,
        rule,
    })
}

/// The words of one instruction.
fn enc(line: &str) -> Vec<u64> {
    let text = kernel_text("f16|bf16|cube|atomic_add", "vector", line);
    let bytes = assemble(&text).unwrap();
    let m = Module::parse(&bytes).unwrap();
    m.code().iter().map(|w| w.get()).collect()
}

fn words(ws: &[u64]) -> String {
    let mut s = String::from("    .word");
    for w in ws {
        s += &format!(" {w:#x}");
    }
    s
}

const LOAD: &str =
    "load dt=f32 pad=keep buf=0 row_dim=0 col_dim=- ub=0 pitch=16 rows=4 cols=16 row_total=16 \
                    col_total=0 padv=0 base=0 step0=64 step1=0 step2=0 row_stride=16 col_stride=1";
const STORE: &str =
    "store dt=f32 buf=1 row_dim=0 col_dim=- ub=0 pitch=16 rows=4 cols=16 row_total=16 \
                     col_total=0 base=0 step0=64 step1=0 step2=0 row_stride=16 col_stride=1";

/// `line` with some `key=value` operands replaced.
fn with(line: &str, changes: &[(&str, &str)]) -> String {
    line.split_whitespace()
        .map(|tok| {
            let key = tok.split('=').next().unwrap();
            match changes.iter().find(|c| c.0 == key) {
                Some((k, v)) => format!("{k}={v}"),
                None => tok.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn the_template_verifies() {
    verify_body(&format!(
        "    {LOAD}\n    exp dt=f32 dst=0 src=0 n=64 @wait=load\n    {STORE} @wait=vector\n    end"
    ))
    .unwrap();
}

#[test]
fn unknown_opcode() {
    // opcode 0x07, length 1, vector pipe.
    let body = format!(
        "    add dt=f32 dst=0 a=0 b=64 n=4\n{}\n    end",
        words(&[0x0001_0107])
    );
    assert_eq!(
        verify_body(&body),
        at(3, Rule::Decode(DecodeError::UnknownOpcode(7)))
    );
}

#[test]
fn length_runs_past_the_end_of_the_body() {
    // The head of a 3-word `add` as the body's last word.
    let add = enc("    add dt=f32 dst=0 a=0 b=64 n=4");
    let body = format!("    end\n{}", words(&add[..1]));
    // `end` first: the early end is reported before the bad word.
    assert_eq!(verify_body(&body), at(1, Rule::EarlyEnd));
    let body = format!("    exp dt=f32 dst=0 src=0 n=4\n{}", words(&add[..2]));
    assert_eq!(
        verify_body(&body),
        at(3, Rule::Decode(DecodeError::Truncated))
    );
}

#[test]
fn wrong_length_for_the_opcode() {
    let add = enc("    add dt=f32 dst=0 a=0 b=64 n=4");
    for len in [1u64, 2, 4, 255] {
        let head = add[0] & !0xff00 | len << 8;
        let body = format!("{}\n    end", words(&[head, add[1], add[2], 0, 0]));
        assert_eq!(
            verify_body(&body),
            at(
                0,
                Rule::Decode(DecodeError::BadLength {
                    opcode: Opcode::Add,
                    len: len as u8,
                    expected: 3
                })
            )
        );
    }
    let head = add[0] & !0xff00;
    assert_eq!(
        verify_body(&format!("{}\n    end", words(&[head, add[1], add[2]]))),
        at(0, Rule::Decode(DecodeError::ZeroLength))
    );
}

#[test]
fn wrong_pipe() {
    let add = enc("    add dt=f32 dst=0 a=0 b=64 n=4");
    for (bits, pipe) in [
        (0u64, Pipe::Load),
        (2, Pipe::Cube),
        (3, Pipe::Store),
        (4, Pipe::Control),
    ] {
        let head = add[0] & !(7 << 16) | bits << 16;
        assert_eq!(
            verify_body(&format!("{}\n    end", words(&[head, add[1], add[2]]))),
            at(
                0,
                Rule::Decode(DecodeError::WrongPipe {
                    opcode: Opcode::Add,
                    pipe
                })
            )
        );
    }
    let head = add[0] | 7 << 16;
    assert_eq!(
        verify_body(&format!("{}\n    end", words(&[head, add[1], add[2]]))),
        at(0, Rule::Decode(DecodeError::BadPipe(7)))
    );
}

#[test]
fn reserved_bits() {
    let add = enc("    add dt=f32 dst=0 a=0 b=64 n=4");
    // Head bit 19, head bits 24..32, the alignment gap after `dt` (bits
    // 40..64), and in `end`'s unused operand half.
    for bit in [19u64, 24, 31, 40, 63] {
        let head = add[0] | 1 << bit;
        assert_eq!(
            verify_body(&format!("{}\n    end", words(&[head, add[1], add[2]]))),
            at(0, Rule::Decode(DecodeError::ReservedBits)),
            "bit {bit}"
        );
    }
    let end = enc("    end")[0];
    assert_eq!(
        verify_body(&words(&[end | 1 << 32])),
        at(0, Rule::Decode(DecodeError::ReservedBits))
    );
}

#[test]
fn bad_field_values() {
    let add = enc("    add dt=f32 dst=0 a=0 b=64 n=4");
    let head = add[0] | 9 << 32;
    assert_eq!(
        verify_body(&format!("{}\n    end", words(&[head, add[1], add[2]]))),
        at(0, Rule::Decode(DecodeError::BadDType(9)))
    );
    let rsum = enc("    rsum dt=f32 axis=rows dst=0 src=64 rows=4 cols=4");
    let head = rsum[0] | 2 << 40;
    let mut w = rsum.clone();
    w[0] = head;
    assert_eq!(
        verify_body(&format!("{}\n    end", words(&w))),
        at(
            0,
            Rule::Decode(DecodeError::BadField {
                field: "axis",
                value: 2
            })
        )
    );
}

#[test]
fn ub_range_outside_the_kernel_ub() {
    // Ends exactly at the kernel's UB: fine.
    verify_body("    add dt=f32 dst=4092 a=0 b=16 n=1\n    end").unwrap();
    assert_eq!(
        verify_body("    add dt=f32 dst=4096 a=0 b=16 n=1\n    end"),
        at(
            0,
            Rule::UbOutOfRange {
                field: "dst",
                start: 4096,
                end: 4100,
                ub_bytes: 4096
            }
        )
    );
    assert_eq!(
        verify_body("    add dt=f32 dst=0 a=4000 b=2048 n=25\n    end"),
        at(
            0,
            Rule::UbOutOfRange {
                field: "a",
                start: 4000,
                end: 4100,
                ub_bytes: 4096
            }
        )
    );
    // Huge counts are computed in u64 without wrapping.
    assert_eq!(
        verify_body("    exp dt=f32 dst=4294967292 src=0 n=4294967295\n    end"),
        at(
            0,
            Rule::UbOutOfRange {
                field: "src",
                start: 0,
                end: 4 * 4294967295,
                ub_bytes: 4096
            }
        )
    );
    // rows × pitch × 4 overflows u64: the end saturates.
    let load = with(LOAD, &[("pitch", "4294967295"), ("rows", "4294967295")]);
    assert_eq!(
        verify_body(&format!("    {load}\n    end")),
        at(
            0,
            Rule::UbOutOfRange {
                field: "ub",
                start: 0,
                end: u64::MAX,
                ub_bytes: 4096
            }
        )
    );
    // A load box of rows × pitch, not rows × cols: 4 × 256 × 4 bytes fit
    // exactly, 4 × 257 × 4 do not.
    let load = with(LOAD, &[("pitch", "256")]);
    verify_body(&format!("    {load}\n    end")).unwrap();
    let load = with(LOAD, &[("pitch", "257")]);
    assert_eq!(
        verify_body(&format!("    {load}\n    end")),
        at(
            0,
            Rule::UbOutOfRange {
                field: "ub",
                start: 0,
                end: 4112,
                ub_bytes: 4096
            }
        )
    );
}

#[test]
fn kernel_ub_larger_than_the_device_ub() {
    let text = kernel_text("none", "vector", "    end").replace("ub=4096", "ub=196609");
    assert_eq!(
        verify_text(&text),
        at_site(
            Site::Entry,
            Rule::KernelUb {
                need: 196_609,
                have: 196_608
            }
        )
    );
    let text = kernel_text("none", "vector", "    end").replace("ub=4096", "ub=196608");
    verify_text(&text).unwrap();
    // Against a smaller device.
    let bytes = assemble(&kernel_text("none", "vector", "    end")).unwrap();
    let m = Module::parse(&bytes).unwrap();
    assert_eq!(
        verify_kernel(&m, 0, &DeviceLimits::with_ub_bytes(4095))
            .unwrap_err()
            .rule,
        Rule::KernelUb {
            need: 4096,
            have: 4095
        }
    );
}

#[test]
fn misaligned_ub_address() {
    assert_eq!(
        verify_body("    add dt=f32 dst=2 a=0 b=16 n=1\n    end"),
        at(
            0,
            Rule::Misaligned {
                field: "dst",
                addr: 2,
                align: 4
            }
        )
    );
    assert_eq!(
        verify_body("    exp dt=f16 dst=0 src=7 n=1\n    end"),
        at(
            0,
            Rule::Misaligned {
                field: "src",
                addr: 7,
                align: 2
            }
        )
    );
    // Bytes need no alignment; the dst of a compare is bool.
    verify_body("    lt dt=f32 dst=3 a=4 b=8 n=1\n    end").unwrap();
    verify_body(&format!("    {}\n    end", with(LOAD, &[("ub", "64")]))).unwrap();
    assert_eq!(
        verify_body(&format!("    {}\n    end", with(LOAD, &[("ub", "66")]))),
        at(
            0,
            Rule::Misaligned {
                field: "ub",
                addr: 66,
                align: 4
            }
        )
    );
}

#[test]
fn partially_overlapping_operands() {
    assert_eq!(
        verify_body("    add dt=f32 dst=0 a=4 b=64 n=4\n    end"),
        at(0, Rule::Overlap { a: "a", b: "dst" })
    );
    assert_eq!(
        verify_body("    add dt=f32 dst=64 a=0 b=60 n=4\n    end"),
        at(0, Rule::Overlap { a: "b", b: "dst" })
    );
    // Adjacent is disjoint.
    verify_body("    add dt=f32 dst=16 a=0 b=32 n=4\n    end").unwrap();
    // Reads may overlap each other.
    verify_body("    add dt=f32 dst=64 a=0 b=4 n=4\n    end").unwrap();
    // Identical ranges of different element sizes are a partial overlap.
    assert_eq!(
        verify_body("    cast dt=f32 to=f16 dst=0 src=0 n=4\n    end"),
        at(0, Rule::Overlap { a: "src", b: "dst" })
    );
    // select: the bool condition inside the f32 destination.
    assert_eq!(
        verify_body("    select dt=f32 dst=0 cond=4 a=64 b=128 n=4\n    end"),
        at(
            0,
            Rule::Overlap {
                a: "cond",
                b: "dst"
            }
        )
    );
}

#[test]
fn identical_operands_allowed_for_elementwise_only() {
    verify_body("    add dt=f32 dst=0 a=0 b=0 n=4\n    end").unwrap();
    verify_body("    exp dt=f32 dst=0 src=0 n=4\n    end").unwrap();
    verify_body("    cast dt=f32 to=i32 dst=0 src=0 n=4\n    end").unwrap();
    verify_body("    select dt=bool dst=0 cond=0 a=0 b=0 n=4\n    end").unwrap();
    assert_eq!(
        verify_body("    transpose dt=f32 dst=0 src=0 rows=4 cols=4\n    end"),
        at(0, Rule::Overlap { a: "src", b: "dst" })
    );
    assert_eq!(
        verify_body("    rsum dt=f32 axis=rows dst=0 src=0 rows=1 cols=4\n    end"),
        at(0, Rule::Overlap { a: "src", b: "dst" })
    );
    assert_eq!(
        verify_body("    brcrow dt=f32 dst=0 src=0 rows=1 cols=4\n    end"),
        at(0, Rule::Overlap { a: "src", b: "dst" })
    );
    let mm = |dst: u32, a: u32, b: u32| {
        kernel_text(
            "cube",
            "cube",
            &format!(
                "    matmul dt=f32 out=f32 flags=acc dst={dst} a={a} b={b} m=4 n=4 k=4\n    end"
            ),
        )
    };
    verify_text(&mm(128, 0, 64)).unwrap();
    // a and b may be the same tile (both read).
    verify_text(&mm(128, 0, 0)).unwrap();
    assert_eq!(
        verify_text(&mm(0, 0, 64)),
        at(0, Rule::Overlap { a: "a", b: "dst" })
    );
    assert_eq!(
        verify_text(&mm(64, 0, 64)),
        at(0, Rule::Overlap { a: "b", b: "dst" })
    );
}

#[test]
fn dtype_not_allowed() {
    assert_eq!(
        verify_body("    exp dt=i32 dst=0 src=0 n=4\n    end"),
        at(
            0,
            Rule::DType {
                opcode: Opcode::Exp,
                field: "dt",
                dtype: DType::I32,
                allowed: DTypeSet::FLOAT
            }
        )
    );
    assert_eq!(
        verify_body("    and dt=f32 dst=0 a=0 b=0 n=4\n    end"),
        at(
            0,
            Rule::DType {
                opcode: Opcode::And,
                field: "dt",
                dtype: DType::F32,
                allowed: DTypeSet::BOOL
            }
        )
    );
    assert_eq!(
        verify_body("    add dt=bool dst=0 a=0 b=0 n=4\n    end"),
        at(
            0,
            Rule::DType {
                opcode: Opcode::Add,
                field: "dt",
                dtype: DType::Bool,
                allowed: DTypeSet::NUM
            }
        )
    );
    let mm = |dt: &str, out: &str| {
        verify_text(&kernel_text(
            "f16|bf16|cube",
            "cube",
            &format!(
                "    matmul dt={dt} out={out} flags=none dst=128 a=0 b=64 m=4 n=4 k=4\n    end"
            ),
        ))
    };
    assert_eq!(
        mm("i32", "i32"),
        at(
            0,
            Rule::DType {
                opcode: Opcode::Matmul,
                field: "dt",
                dtype: DType::I32,
                allowed: DTypeSet::MM_IN
            }
        )
    );
    assert_eq!(
        mm("f32", "i8"),
        at(
            0,
            Rule::DType {
                opcode: Opcode::Matmul,
                field: "out",
                dtype: DType::I8,
                allowed: DTypeSet::MM_OUT
            }
        )
    );
}

#[test]
fn matmul_dtype_pair() {
    let mm = |dt: &str, out: &str| {
        verify_text(&kernel_text(
            "f16|bf16|cube",
            "cube",
            &format!(
                "    matmul dt={dt} out={out} flags=none dst=128 a=0 b=64 m=4 n=4 k=4\n    end"
            ),
        ))
    };
    mm("i8", "i32").unwrap();
    mm("f16", "f32").unwrap();
    mm("bf16", "f16").unwrap();
    for (dt, out, from, to) in [
        ("i8", "f32", DType::I8, DType::F32),
        ("i8", "f16", DType::I8, DType::F16),
        ("f32", "i32", DType::F32, DType::I32),
        ("f16", "i32", DType::F16, DType::I32),
    ] {
        assert_eq!(
            mm(dt, out),
            at(
                0,
                Rule::DTypePair {
                    opcode: Opcode::Matmul,
                    from,
                    to
                }
            )
        );
    }
}

#[test]
fn load_from_write_only_store_to_read_only() {
    assert_eq!(
        verify_body(&format!("    {}\n    end", with(LOAD, &[("buf", "1")]))),
        at(
            0,
            Rule::ParamAccess {
                buf: 1,
                access: ParamAccess::Write,
                kind: GmKind::Load
            }
        )
    );
    assert_eq!(
        verify_body(&format!("    {}\n    end", with(STORE, &[("buf", "0")]))),
        at(
            0,
            Rule::ParamAccess {
                buf: 0,
                access: ParamAccess::Read,
                kind: GmKind::Store
            }
        )
    );
    let add = STORE.replace("store ", "store_add ");
    assert_eq!(
        verify_body(&format!("    {}\n    end", with(&add, &[("buf", "0")]))),
        at(
            0,
            Rule::ParamAccess {
                buf: 0,
                access: ParamAccess::Read,
                kind: GmKind::StoreAdd
            }
        )
    );
    // inout takes both.
    verify_body(&format!(
        "    {}\n    {} @wait=load\n    end",
        with(LOAD, &[("buf", "2")]),
        with(STORE, &[("buf", "2")])
    ))
    .unwrap();
}

#[test]
fn param_dtype_mismatch() {
    assert_eq!(
        verify_body(&format!("    {}\n    end", with(LOAD, &[("buf", "3")]))),
        at(
            0,
            Rule::ParamDType {
                buf: 3,
                param: DType::F16,
                instr: DType::F32
            }
        )
    );
    verify_body(&format!(
        "    {}\n    end",
        with(LOAD, &[("buf", "3"), ("dt", "f16")])
    ))
    .unwrap();
}

#[test]
fn buffer_index_out_of_range() {
    for buf in ["4", "31", "255"] {
        assert_eq!(
            verify_body(&format!("    {}\n    end", with(LOAD, &[("buf", buf)]))),
            at(
                0,
                Rule::NoSuchParam {
                    buf: buf.parse().unwrap(),
                    count: 4
                }
            )
        );
    }
}

const TOTAL_MISMATCH: &str =
    "row/col total does not match the grid: a tile would be empty or the total exceeds the grid";

#[test]
fn inconsistent_tails() {
    let load =
        |changes: &[(&str, &str)]| verify_body(&format!("    {}\n    end", with(LOAD, changes)));
    // Grid 4 along dim 0, 4 rows per tile: totals 13..=16 are consistent.
    for total in ["13", "14", "16"] {
        load(&[("row_total", total)]).unwrap();
    }
    // The last tile would be empty.
    assert_eq!(
        load(&[("row_total", "12")]),
        at(0, Rule::BadPattern(TOTAL_MISMATCH))
    );
    assert_eq!(
        load(&[("row_total", "0")]),
        at(0, Rule::BadPattern(TOTAL_MISMATCH))
    );
    // More rows than the grid covers.
    assert_eq!(
        load(&[("row_total", "17")]),
        at(0, Rule::BadPattern(TOTAL_MISMATCH))
    );
    // Column tails along dim 1 (grid 1): total in 1..=16.
    let cols = [("row_dim", "-"), ("col_dim", "1")];
    load(&[cols[0], cols[1], ("col_total", "5")]).unwrap();
    assert_eq!(
        load(&[cols[0], cols[1], ("col_total", "17")]),
        at(0, Rule::BadPattern(TOTAL_MISMATCH))
    );
    assert_eq!(
        load(&[cols[0], cols[1], ("col_total", "0")]),
        at(0, Rule::BadPattern(TOTAL_MISMATCH))
    );
    // Both sides on one dimension.
    assert_eq!(
        load(&[("col_dim", "0"), ("col_total", "16")]),
        at(
            0,
            Rule::BadPattern("rows and cols are driven by the same grid dimension")
        )
    );
    // Zero extents and pitch below cols.
    assert_eq!(
        load(&[("rows", "0")]),
        at(0, Rule::BadPattern("rows and cols must be at least 1"))
    );
    assert_eq!(
        load(&[("cols", "0"), ("row_dim", "-")]),
        at(0, Rule::BadPattern("rows and cols must be at least 1"))
    );
    assert_eq!(
        load(&[("pitch", "15")]),
        at(0, Rule::BadPattern("pitch is smaller than cols"))
    );
}

#[test]
fn gm_arithmetic_overflow() {
    let load =
        |changes: &[(&str, &str)]| verify_body(&format!("    {}\n    end", with(LOAD, changes)));
    // base + offsets overflows.
    assert_eq!(
        load(&[("base", "18446744073709551615")]),
        at(0, Rule::GmOverflow)
    );
    // step × (grid − 1) overflows.
    assert_eq!(
        load(&[("step0", "9223372036854775808")]),
        at(0, Rule::GmOverflow)
    );
    // (rows − 1) × row_stride overflows.
    assert_eq!(
        load(&[("row_stride", "9223372036854775807")]),
        at(0, Rule::GmOverflow)
    );
    // The furthest element fits, its byte end does not: (2^62 + 1) × 4.
    assert_eq!(
        load(&[
            ("row_dim", "-"),
            ("rows", "1"),
            ("cols", "1"),
            ("step0", "0"),
            ("base", "4611686018427387904")
        ]),
        at(0, Rule::GmOverflow)
    );
    // Largest that fits: element 2^62 − 2, bytes 2^64 − 4.
    load(&[
        ("row_dim", "-"),
        ("rows", "1"),
        ("cols", "1"),
        ("step0", "0"),
        ("base", "4611686018427387902"),
    ])
    .unwrap();
}

#[test]
fn kernel_without_end() {
    assert_eq!(
        verify_body("    add dt=f32 dst=0 a=0 b=0 n=4"),
        at(3, Rule::MissingEnd)
    );
    assert_eq!(verify_body(""), at(0, Rule::MissingEnd));
    // A second body without `end`.
    let text = kernel_text(
        "multi_body",
        "parallel",
        "    end\n  .body grid=1,1,1\n    exp dt=f32 dst=0 src=0 n=4",
    );
    assert_eq!(
        verify_text(&text),
        Err(VerifyError {
            kernel: 0,
            body: 1,
            word: 3,
            site: Site::Word,
            rule: Rule::MissingEnd
        })
    );
}

#[test]
fn end_not_last() {
    assert_eq!(
        verify_body("    end\n    add dt=f32 dst=0 a=0 b=0 n=4\n    end"),
        at(1, Rule::EarlyEnd)
    );
    assert_eq!(verify_body("    end\n    end"), at(1, Rule::EarlyEnd));
    // Even an undecodable word after `end`.
    assert_eq!(
        verify_body(&format!("    end\n{}", words(&[0]))),
        at(1, Rule::EarlyEnd)
    );
}

#[test]
fn wait_flag_on_own_pipe() {
    assert_eq!(
        verify_body("    exp dt=f32 dst=0 src=0 n=4 @wait=load|vector\n    end"),
        at(
            0,
            Rule::BadWait {
                pipe: Pipe::Vector,
                mask: 0b0011
            }
        )
    );
    assert_eq!(
        verify_body(&format!("    {LOAD} @wait=load\n    end")),
        at(
            0,
            Rule::BadWait {
                pipe: Pipe::Load,
                mask: 0b0001
            }
        )
    );
    // Control instructions take no wait flags at all.
    assert_eq!(
        verify_body("    end @wait=store"),
        at(
            0,
            Rule::BadWait {
                pipe: Pipe::Control,
                mask: 0b1000
            }
        )
    );
    verify_body("    exp dt=f32 dst=0 src=0 n=4 @wait=load|cube|store\n    barrier\n    end")
        .unwrap();
}

#[test]
fn undeclared_feature() {
    let t =
        |features: &str, kind: &str, body: &str| verify_text(&kernel_text(features, kind, body));
    assert_eq!(
        t("none", "vector", "    exp dt=f16 dst=0 src=0 n=4\n    end"),
        at(0, Rule::UndeclaredFeature(features::F16))
    );
    assert_eq!(
        t(
            "f16",
            "vector",
            "    cast dt=f16 to=bf16 dst=0 src=64 n=4\n    end"
        ),
        at(0, Rule::UndeclaredFeature(features::BF16))
    );
    assert_eq!(
        t(
            "none",
            "cube",
            "    matmul dt=f32 out=f32 flags=none dst=128 a=0 b=64 m=4 n=4 k=4\n    end"
        ),
        at(0, Rule::UndeclaredFeature(features::CUBE))
    );
    let add = with(&STORE.replace("store ", "store_add "), &[("buf", "2")]);
    assert_eq!(
        t("none", "vector", &format!("    {add}\n    end")),
        at(0, Rule::UndeclaredFeature(features::ATOMIC_ADD))
    );
    // Several bodies need multi_body (a kernel-level rule).
    assert_eq!(
        t("none", "parallel", "    end\n  .body grid=1,1,1\n    end"),
        at_site(Site::Entry, Rule::UndeclaredFeature(features::MULTI_BODY))
    );
    t(
        "multi_body",
        "parallel",
        "    end\n  .body grid=1,1,1\n    end",
    )
    .unwrap();
    // The builder declares every feature it sees.
    let mut b = ModuleBuilder::new();
    let mut code = CodeWriter::new();
    code.push(
        &Instr::Exp {
            dt: DType::BF16,
            dst: 0,
            src: 0,
            n: 4,
        },
        WaitMask::NONE,
    );
    code.push(&Instr::End {}, WaitMask::NONE);
    let body = |code: &CodeWriter| BodyDef {
        grid: [1, 1, 1],
        code: code.clone(),
    };
    b.add_kernel(KernelDef {
        name: "k".into(),
        kind: KernelKind::Sequence,
        ub_bytes: 64,
        params: vec![],
        bodies: vec![body(&code), body(&code)],
    })
    .expect("unique kernel name");
    let bytes = b.finish();
    let m = Module::parse(&bytes).unwrap();
    assert_eq!(m.features(), features::BF16 | features::MULTI_BODY);
    verify_module(&m, &DeviceLimits::DEFAULT).unwrap();
}

const KIND_MSG: &str =
    "kind disagrees with the pipes used (vector: no matmul; cube: matmul, no vector ops; mix: matmul)";
const BODIES_MSG: &str =
    "vector, cube and mix kernels have one body; parallel and sequence at least one";

#[test]
fn kernel_kind_mismatch() {
    let t = |kind: &str, body: &str| verify_text(&kernel_text("cube|multi_body", kind, body));
    let mm = "    matmul dt=f32 out=f32 flags=none dst=128 a=0 b=64 m=4 n=4 k=4";
    let exp = "    exp dt=f32 dst=0 src=0 n=4";
    assert_eq!(
        t("vector", &format!("{mm}\n    end")),
        at_site(Site::Entry, Rule::Kind(KIND_MSG))
    );
    assert_eq!(
        t("cube", &format!("{exp}\n{mm}\n    end")),
        at_site(Site::Entry, Rule::Kind(KIND_MSG))
    );
    assert_eq!(
        t("mix", &format!("{exp}\n    end")),
        at_site(Site::Entry, Rule::Kind(KIND_MSG))
    );
    t("mix", &format!("{mm}\n{exp}\n    end")).unwrap();
    t("cube", &format!("    {LOAD}\n{mm}\n    end")).unwrap();
    t("parallel", &format!("{mm}\n{exp}\n    end")).unwrap();
    // Body counts.
    assert_eq!(
        t("vector", "    end\n  .body grid=1,1,1\n    end"),
        at_site(Site::Entry, Rule::Kind(BODIES_MSG))
    );
    let empty = "\n.module 1.0 features=none\n.kernel \"k\" kind=sequence ub=0\n.end\n";
    assert_eq!(
        verify_text(empty),
        at_site(Site::Entry, Rule::Kind(BODIES_MSG))
    );
    // An index outside the table.
    let bytes = assemble(empty).unwrap();
    let m = Module::parse(&bytes).unwrap();
    assert_eq!(
        verify_kernel(&m, 1, &DeviceLimits::DEFAULT).unwrap_err(),
        VerifyError {
            kernel: 1,
            body: 0,
            word: 0,
            site: Site::Entry,
            rule: Rule::Kind("no such kernel")
        }
    );
}

#[test]
fn bad_grid() {
    for grid in [
        [0, 1, 1],
        [1, 0, 1],
        [1, 1, 0],
        [65536, 65536, 1],
        [u32::MAX, 2, 1],
    ] {
        let text = kernel_text("none", "vector", "    end").replace(
            "grid=4,1,1",
            &format!("grid={},{},{}", grid[0], grid[1], grid[2]),
        );
        assert_eq!(verify_text(&text), at_site(Site::Body, Rule::BadGrid(grid)));
    }
    // 2^32 − 1 tiles is a grid (the default budget refuses it with more
    // than one instruction per tile: `work_limits`).
    let text = kernel_text("none", "vector", "    end").replace("grid=4,1,1", "grid=65535,65537,1");
    let bytes = assemble(&text).unwrap();
    let roomy = DeviceLimits {
        max_tiles: u64::MAX,
        max_launch_instrs: u64::MAX,
        ..DeviceLimits::DEFAULT
    };
    verify_kernel(&Module::parse(&bytes).unwrap(), 0, &roomy).unwrap();
}

#[test]
fn too_many_params() {
    let mut text = String::from(".kernel \"k\" kind=vector ub=64\n");
    for i in 0..33 {
        text += &format!("  .param \"p{i}\" f32 in\n");
    }
    text += "  .body grid=1,1,1\n    end\n.end\n";
    let err = verify_text(&text);
    assert_eq!(err, at_site(Site::Params, Rule::TooManyParams(33)));
    // The message names the parameter table, not an instruction word.
    let msg = err.unwrap_err().to_string();
    assert!(msg.starts_with("kernel 0, parameter table: "), "{msg}");
    assert!(!msg.contains("word"), "{msg}");
}

#[test]
fn zero_extents_of_tile_operations() {
    let cases = [
        ("rsum dt=f32 axis=cols dst=0 src=64 rows=0 cols=4", "rows"),
        ("rmax dt=f32 axis=cols dst=0 src=64 rows=4 cols=0", "cols"),
        ("brcrow dt=f32 dst=0 src=64 rows=0 cols=4", "rows"),
        ("brccol dt=f32 dst=0 src=64 rows=4 cols=0", "cols"),
        ("transpose dt=f32 dst=0 src=64 rows=0 cols=0", "rows"),
    ];
    for (line, field) in cases {
        assert_eq!(
            verify_body(&format!("    {line}\n    end")),
            at(0, Rule::ZeroExtent(field)),
            "{line}"
        );
    }
    for (mnk, field) in [
        ("m=0 n=4 k=4", "m"),
        ("m=4 n=0 k=4", "n"),
        ("m=4 n=4 k=0", "k"),
    ] {
        let text = kernel_text(
            "cube",
            "cube",
            &format!("    matmul dt=f32 out=f32 flags=none dst=128 a=0 b=64 {mnk}\n    end"),
        );
        assert_eq!(verify_text(&text), at(0, Rule::ZeroExtent(field)));
    }
    // Element-wise instructions over nothing are harmless.
    verify_body("    add dt=f32 dst=4096 a=4096 b=0 n=0\n    end").unwrap();
}

#[test]
fn errors_name_kernel_body_and_word() {
    let text = format!(
        "{}.kernel \"second\" kind=parallel ub=4096\n  .body grid=1,1,1\n    end\n  .body grid=1,1,1\n    exp dt=f32 dst=0 src=0 n=4\n    exp dt=i8 dst=0 src=0 n=4\n    end\n.end\n",
        kernel_text("multi_body", "vector", "    end")
    );
    assert_eq!(
        verify_text(&text),
        Err(VerifyError {
            kernel: 1,
            body: 1,
            word: 3,
            site: Site::Word,
            rule: Rule::DType {
                opcode: Opcode::Exp,
                field: "dt",
                dtype: DType::I8,
                allowed: DTypeSet::FLOAT
            }
        })
    );
}

// ---------------------------------------------------------------------------
// Launch checks and furthest_element
// ---------------------------------------------------------------------------

/// A pattern for a load of `dt` from parameter 0.
#[allow(clippy::too_many_arguments)]
fn pat(
    dt: DType,
    dims: (GridDim, GridDim),
    box_: (u32, u32),
    totals: (u32, u32),
    base: u64,
    step: [u64; 3],
    strides: (u64, u64),
) -> GmPattern {
    GmPattern {
        buf: 0,
        dtype: dt,
        row_dim: dims.0,
        col_dim: dims.1,
        ub: 0,
        pitch: box_.1,
        rows: box_.0,
        cols: box_.1,
        row_total: totals.0,
        col_total: totals.1,
        base,
        step,
        row_stride: strides.0,
        col_stride: strides.1,
    }
}

fn load_of(p: &GmPattern) -> Instr {
    Instr::Load {
        dt: p.dtype,
        pad: PadMode::Fill,
        buf: p.buf,
        row_dim: p.row_dim,
        col_dim: p.col_dim,
        ub: p.ub,
        pitch: p.pitch,
        rows: p.rows,
        cols: p.cols,
        row_total: p.row_total,
        col_total: p.col_total,
        padv: Scalar::f32(0.0),
        base: p.base,
        step0: p.step[0],
        step1: p.step[1],
        step2: p.step[2],
        row_stride: p.row_stride,
        col_stride: p.col_stride,
    }
}

/// A module with one vector kernel: parameter 0 of `p.dtype` read through
/// `p` (as a load, and as a store into a second parameter when `store`).
fn pattern_module(p: &GmPattern, grid: [u32; 3], store: bool) -> Vec<u8> {
    let mut code = CodeWriter::new();
    let load = load_of(p);
    code.push(&load, WaitMask::NONE);
    if store {
        let q = GmPattern { buf: 1, ..*p };
        code.push(
            &Instr::Store {
                dt: q.dtype,
                buf: 1,
                row_dim: q.row_dim,
                col_dim: q.col_dim,
                ub: q.ub,
                pitch: q.pitch,
                rows: q.rows,
                cols: q.cols,
                row_total: q.row_total,
                col_total: q.col_total,
                base: q.base,
                step0: q.step[0],
                step1: q.step[1],
                step2: q.step[2],
                row_stride: q.row_stride,
                col_stride: q.col_stride,
            },
            WaitMask::NONE.with(Pipe::Load),
        );
    }
    code.push(&Instr::End {}, WaitMask::NONE);
    let param = |name: &str, access| ParamDef {
        name: name.into(),
        dtype: p.dtype,
        access,
        dims: vec![],
    };
    let mut b = ModuleBuilder::new();
    b.add_kernel(KernelDef {
        name: "k".into(),
        kind: KernelKind::Vector,
        ub_bytes: 196_608,
        params: vec![
            param("in", ParamAccess::Read),
            param("out", ParamAccess::Write),
        ],
        bodies: vec![BodyDef { grid, code }],
    })
    .expect("unique kernel name");
    b.finish()
}

/// Verifies the pattern's kernel and checks that exactly `need` bytes are
/// required of both buffers: `need` passes, `need − 1` is refused.
fn assert_launch_need(p: &GmPattern, grid: [u32; 3], need: u64) {
    assert_eq!(
        furthest_element(p, grid).unwrap() + 1,
        need / p.dtype.size() as u64
    );
    let bytes = pattern_module(p, grid, true);
    let m = Module::parse(&bytes).unwrap();
    let v = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
    assert_eq!(v.required_bytes(0), need);
    assert_eq!(v.required_bytes(1), need);
    v.check_launch(&[need, need], &[false, true]).unwrap();
    v.check_launch(&[need + 1, u64::MAX], &[true, true])
        .unwrap();
    assert_eq!(
        v.check_launch(&[need - 1, need], &[false, true]),
        Err(LaunchError::BufferTooSmall {
            param: 0,
            need,
            have: need - 1
        })
    );
    assert_eq!(
        v.check_launch(&[need, need - 1], &[false, true]),
        Err(LaunchError::BufferTooSmall {
            param: 1,
            need,
            have: need - 1
        })
    );
}

const D0: GridDim = GridDim::Dim(0);
const D1: GridDim = GridDim::Dim(1);
const NO: GridDim = GridDim::None;

#[test]
fn launch_contiguous_rows_with_a_tail() {
    // x: [120, 768] f32, tiles of 16 full rows, 8 tiles (the last has 8 rows).
    let p = pat(
        DType::F32,
        (D0, NO),
        (16, 768),
        (120, 0),
        0,
        [16 * 768, 0, 0],
        (768, 1),
    );
    assert_launch_need(&p, [8, 1, 1], 120 * 768 * 4);
    // Without the tail (120 of 128 rows described as full tiles) the need
    // is the full 128 rows.
    let full = pat(
        DType::F32,
        (NO, NO),
        (16, 768),
        (0, 0),
        0,
        [16 * 768, 0, 0],
        (768, 1),
    );
    assert_launch_need(&full, [8, 1, 1], 128 * 768 * 4);
}

#[test]
fn launch_broadcast_row() {
    // A bias row [768] broadcast over every row of every tile.
    let p = pat(
        DType::F32,
        (D0, NO),
        (16, 768),
        (120, 0),
        0,
        [0, 0, 0],
        (0, 1),
    );
    assert_launch_need(&p, [8, 1, 1], 768 * 4);
    // A scalar broadcast to the whole tile, at element 5.
    let s = pat(
        DType::F16,
        (D0, D1),
        (16, 64),
        (120, 100),
        5,
        [0, 0, 0],
        (0, 0),
    );
    assert_launch_need(&s, [8, 2, 1], 6 * 2);
}

#[test]
fn launch_transposed_strides() {
    // x^T: the tensor is stored [768, 120]; a tile reads 16 of the 120
    // along its rows (stride 1) and all 768 along its columns (stride 120).
    let p = pat(
        DType::F32,
        (D0, NO),
        (16, 768),
        (120, 0),
        0,
        [16, 0, 0],
        (1, 120),
    );
    assert_launch_need(&p, [8, 1, 1], 768 * 120 * 4);
}

#[test]
fn launch_two_dimensional_tails() {
    // [50, 70] f16 in 16×32 tiles: grid 4×3, tails of 2 rows and 6 columns.
    let p = pat(
        DType::F16,
        (D0, D1),
        (16, 32),
        (50, 70),
        0,
        [16 * 70, 32, 0],
        (70, 1),
    );
    assert_launch_need(&p, [4, 3, 1], 50 * 70 * 2);
    // The same with rows and columns on swapped grid dimensions.
    let q = pat(
        DType::F16,
        (D1, D0),
        (16, 32),
        (50, 70),
        0,
        [32, 16 * 70, 0],
        (70, 1),
    );
    assert_launch_need(&q, [3, 4, 1], 50 * 70 * 2);
}

#[test]
fn launch_second_to_last_tile_dominates() {
    // Overlapping windows: the origin moves by 1 per tile, rows are 10
    // apart. Tile 2 has one row (furthest element 2), tile 1 has four
    // (1 + 3·10 = 31).
    let p = pat(DType::F32, (D0, NO), (4, 1), (9, 0), 0, [1, 0, 0], (10, 1));
    assert_launch_need(&p, [3, 1, 1], 32 * 4);
}

#[test]
fn launch_batch_dimension_without_tail() {
    // Grid dim 2 is a batch of 3 with stride 1000; base 7.
    let p = pat(
        DType::I8,
        (D0, NO),
        (4, 8),
        (10, 0),
        7,
        [32, 0, 1000],
        (8, 1),
    );
    // Rows: tile 2 has 2 rows: 64 + 1·8 = 72 (tile 1: 32 + 3·8 = 56);
    // columns 7; batch 2000; base 7.
    assert_launch_need(&p, [3, 1, 3], 7 + 72 + 7 + 2000 + 1);
}

#[test]
fn launch_buffer_count_and_access() {
    let p = pat(DType::F32, (NO, NO), (1, 4), (0, 0), 0, [4, 0, 0], (4, 1));
    let bytes = pattern_module(&p, [2, 1, 1], true);
    let m = Module::parse(&bytes).unwrap();
    let v = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
    assert_eq!(
        v.check_launch(&[32], &[false]),
        Err(LaunchError::BufferCount {
            expected: 2,
            got: 1
        })
    );
    assert_eq!(
        v.check_launch(&[32, 32], &[true]),
        Err(LaunchError::BufferCount {
            expected: 2,
            got: 1
        })
    );
    assert_eq!(
        v.check_launch(&[32, 32], &[true, false]),
        Err(LaunchError::ReadOnly { param: 1 })
    );
    v.check_launch(&[32, 32], &[false, true]).unwrap();
}

#[test]
fn furthest_element_rejects_impossible_grids_without_panicking() {
    let p = pat(DType::F32, (D0, NO), (4, 4), (16, 0), 0, [16, 0, 0], (4, 1));
    assert_eq!(
        furthest_element(&p, [0, 1, 1]),
        Err(Rule::BadGrid([0, 1, 1]))
    );
    assert_eq!(
        furthest_element(&p, [4, 1, 0]),
        Err(Rule::BadGrid([4, 1, 0]))
    );
    let q = GmPattern {
        row_dim: GridDim::Dim(7),
        ..p
    };
    assert_eq!(
        furthest_element(&q, [4, 1, 1]),
        Err(Rule::BadPattern("tail driven by a grid dimension above 2"))
    );
    // `extent` does not panic on such a pattern either.
    assert_eq!(q.extent([0, 0, 0]), (0, 4));
}

/// The naive maximum: every tile, every element.
fn naive_furthest(p: &GmPattern, grid: [u32; 3]) -> Option<u64> {
    let mut max = None::<u64>;
    for c0 in 0..grid[0] {
        for c1 in 0..grid[1] {
            for c2 in 0..grid[2] {
                let c = [c0, c1, c2];
                let ext = |dim: GridDim, full: u32, total: u32| match dim.index() {
                    None => full as i64,
                    Some(d) => (total as i64 - c[d] as i64 * full as i64).min(full as i64),
                };
                let (re, ce) = (
                    ext(p.row_dim, p.rows, p.row_total),
                    ext(p.col_dim, p.cols, p.col_total),
                );
                if re <= 0 || ce <= 0 {
                    return None; // an empty tile: the verifier must refuse
                }
                assert_eq!(p.extent(c), (re as u32, ce as u32));
                let origin =
                    p.base + p.step[0] * c0 as u64 + p.step[1] * c1 as u64 + p.step[2] * c2 as u64;
                assert_eq!(p.origin(c), origin);
                for r in 0..re as u64 {
                    for k in 0..ce as u64 {
                        let e = origin + r * p.row_stride + k * p.col_stride;
                        max = Some(max.map_or(e, |m| m.max(e)));
                    }
                }
            }
        }
    }
    max
}

fn small_pattern(seed: u64) -> (GmPattern, [u32; 3]) {
    let mut rng = Rng(seed);
    let grid = [
        1 + rng.below(4) as u32,
        1 + rng.below(3) as u32,
        1 + rng.below(3) as u32,
    ];
    let dims = [NO, D0, D1, GridDim::Dim(2)];
    let row_dim = rng.pick(&dims);
    let mut col_dim = rng.pick(&dims);
    if col_dim == row_dim && row_dim != NO {
        col_dim = NO;
    }
    let rows = 1 + rng.below(5) as u32;
    let cols = 1 + rng.below(5) as u32;
    let total = |rng: &mut Rng, dim: GridDim, full: u32| match dim.index() {
        None => rng.below(3) as u32,
        Some(d) => {
            let g = grid[d];
            // Mostly consistent: in ((g−1)·full, g·full]; sometimes one off.
            let lo = (g - 1) * full;
            match rng.below(10) {
                0 => lo,
                1 => g * full + 1,
                _ => lo + 1 + rng.below(full as u64) as u32,
            }
        }
    };
    let row_total = total(&mut rng, row_dim, rows);
    let col_total = total(&mut rng, col_dim, cols);
    let small = |rng: &mut Rng| if rng.chance(25) { 0 } else { rng.below(40) };
    let p = GmPattern {
        buf: 0,
        dtype: rng.pick(&DType::INSTR),
        row_dim,
        col_dim,
        ub: 0,
        pitch: cols + rng.below(3) as u32,
        rows,
        cols,
        row_total,
        col_total,
        base: rng.below(10),
        step: [small(&mut rng), small(&mut rng), small(&mut rng)],
        row_stride: small(&mut rng),
        col_stride: small(&mut rng),
    };
    (p, grid)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// `furthest_element` is the maximum over every tile and element, and
    /// it refuses exactly the patterns that leave a tile empty or describe
    /// more than the grid covers.
    #[test]
    fn furthest_element_matches_brute_force(seed in any::<u64>()) {
        let (p, grid) = small_pattern(seed);
        let over = |dim: GridDim, full: u32, total: u32| {
            dim.index().is_some_and(|d| total as u64 > grid[d] as u64 * full as u64)
        };
        let naive = naive_furthest(&p, grid)
            .filter(|_| !over(p.row_dim, p.rows, p.row_total) && !over(p.col_dim, p.cols, p.col_total));
        match (furthest_element(&p, grid), naive) {
            (Ok(f), Some(n)) => prop_assert_eq!(f, n),
            (Err(Rule::BadPattern(TOTAL_MISMATCH)), None) => {}
            (got, want) => prop_assert!(false, "{:?} vs naive {:?} for {:?} on {:?}", got, want, p, grid),
        }
    }

    /// The same through the verifier and the launch check: the exact byte
    /// count is accepted, one byte less refused.
    #[test]
    fn launch_check_matches_brute_force(seed in any::<u64>()) {
        let (p, grid) = small_pattern(seed);
        let bytes = pattern_module(&p, grid, false);
        let features = if p.dtype == DType::F16 { features::F16 } else if p.dtype == DType::BF16 { features::BF16 } else { 0 };
        let m = Module::parse(&bytes).unwrap();
        prop_assert_eq!(m.features(), features);
        match (verify_kernel(&m, 0, &DeviceLimits::DEFAULT), naive_furthest(&p, grid)) {
            (Ok(v), Some(n)) => {
                let need = (n + 1) * p.dtype.size() as u64;
                prop_assert_eq!(v.required_bytes(0), need);
                prop_assert!(v.check_launch(&[need, 0], &[false, true]).is_ok());
                prop_assert_eq!(
                    v.check_launch(&[need - 1, 0], &[false, true]),
                    Err(LaunchError::BufferTooSmall { param: 0, need, have: need - 1 })
                );
            }
            (Err(e), _) => prop_assert_eq!(e.rule, Rule::BadPattern(TOTAL_MISMATCH)),
            (Ok(_), None) => prop_assert!(false, "verified a pattern with an empty tile: {:?}", p),
        }
    }
}

/// The work limits: instructions per kernel, tiles per launch, and the
/// instruction budget (tiles × instructions), each at its bound and one
/// past it; the defaults accept a grid of 2^32 − 1 tiles of one `end` only
/// when the budget allows it.
#[test]
fn work_limits() {
    let body = "    add dt=f32 dst=0 a=0 b=0 n=1\n    add dt=f32 dst=0 a=0 b=0 n=1\n    end";
    // 4 tiles × 3 instructions.
    let bytes = assemble(&kernel_text("none", "vector", body)).unwrap();
    let m = Module::parse(&bytes).unwrap();
    let limits = |instrs: u32, tiles: u64, budget: u64| DeviceLimits {
        max_kernel_instrs: instrs,
        max_tiles: tiles,
        max_launch_instrs: budget,
        ..DeviceLimits::DEFAULT
    };
    let rule = |l: DeviceLimits| verify_kernel(&m, 0, &l).map(|_| ()).map_err(|e| e.rule);
    assert_eq!(rule(limits(3, 4, 12)), Ok(()));
    assert_eq!(
        rule(limits(2, 4, 12)),
        Err(Rule::TooManyInstrs { count: 3, max: 2 })
    );
    assert_eq!(
        rule(limits(3, 3, 12)),
        Err(Rule::TooManyTiles { tiles: 4, max: 3 })
    );
    assert_eq!(
        rule(limits(3, 4, 11)),
        Err(Rule::InstrBudget {
            executed: 12,
            max: 11
        })
    );
    let e = verify_kernel(&m, 0, &limits(3, 4, 11)).unwrap_err();
    assert_eq!((e.site, e.body, e.word), (Site::Body, 0, 0));
    assert!(e.to_string().contains("budget of 11"), "{e}");
    // A grid of 2^32 − 1 tiles of two instructions: over the default
    // budget.
    let huge = kernel_text(
        "none",
        "vector",
        "    add dt=f32 dst=0 a=0 b=0 n=1\n    end",
    )
    .replace("grid=4,1,1", "grid=65535,65537,1");
    assert_eq!(
        verify_text(&huge).unwrap_err().rule,
        Rule::InstrBudget {
            executed: 2 * u64::from(u32::MAX),
            max: DeviceLimits::DEFAULT.max_launch_instrs
        }
    );
}

/// The launch check's block count: zero, the limit, one past it.
#[test]
fn block_limit() {
    use dvm_isa::LaunchError;
    let bytes = assemble(&kernel_text("none", "vector", "    end")).unwrap();
    let m = Module::parse(&bytes).unwrap();
    let v = verify_kernel(&m, 0, &DeviceLimits::DEFAULT).unwrap();
    let max = DeviceLimits::DEFAULT.max_blocks;
    assert_eq!(v.check_blocks(max), Ok(()));
    assert_eq!(
        v.check_blocks(0),
        Err(LaunchError::Block { idx: 0, dim: 0 })
    );
    assert_eq!(
        v.check_blocks(u32::MAX),
        Err(LaunchError::TooManyBlocks { dim: u32::MAX, max })
    );
}
