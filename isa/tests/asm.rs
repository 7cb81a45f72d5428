//! The text assembly format: exact errors (line, column, kind), the
//! corners of the round trip, and the disassembler's handling of code and
//! metadata it cannot print as instructions.

mod common;

use dvm_isa::asm::{
    assemble, disassemble, disassemble_code, disassemble_kernel, disassemble_lossy,
    disassemble_with, format_instr, AsmError, AsmErrorKind, DisasmError, DisasmOptions,
};
use dvm_isa::builder::{BodyDef, BuildError, CodeWriter, KernelDef, ModuleBuilder, ParamDef};
use dvm_isa::error::{OperandError, ParseError};
use dvm_isa::module::{features, SectionKind};
use dvm_isa::{DType, Instr, KernelKind, Module, Opcode, ParamAccess, Pipe, Scalar, WaitMask};

fn err(line: u32, col: u32, kind: AsmErrorKind) -> Result<Vec<u8>, AsmError> {
    Err(AsmError { line, col, kind })
}

fn misplaced(what: &'static str, rule: &'static str) -> AsmErrorKind {
    AsmErrorKind::Misplaced { what, rule }
}

fn expected(expected: &'static str, found: &str) -> AsmErrorKind {
    AsmErrorKind::Expected {
        expected,
        found: found.into(),
    }
}

fn bad(what: &'static str, found: &str) -> AsmErrorKind {
    AsmErrorKind::BadValue {
        what,
        found: found.into(),
    }
}

/// `line` as the only instruction of a body (on line 3).
fn in_body(line: &str) -> String {
    format!(".kernel \"k\" kind=vector ub=64\n  .body grid=1,1,1\n{line}\n.end\n")
}

/// Text → bytes → text → bytes.
fn round_trip(text: &str) -> (Vec<u8>, String) {
    let bytes = assemble(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let m = Module::parse(&bytes).unwrap();
    let back = disassemble(&m).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(assemble(&back).unwrap(), bytes, "{back}");
    (bytes, back)
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

#[test]
fn empty_text_is_an_empty_module() {
    let (bytes, text) = round_trip("");
    let m = Module::parse(&bytes).unwrap();
    assert_eq!(m.kernel_count(), 0);
    assert_eq!(m.features(), 0);
    assert_eq!(text, ".module 1.0 features=none\n");
    assert_eq!(
        assemble("; only a comment\n\n   # another\n").unwrap(),
        bytes
    );
}

#[test]
fn misplaced_statements() {
    assert_eq!(
        assemble("add dt=f32"),
        err(1, 1, misplaced("an instruction", "outside a `.body`"))
    );
    assert_eq!(
        assemble(".kernel \"k\" kind=vector ub=0\n  end"),
        err(2, 3, misplaced("an instruction", "outside a `.body`"))
    );
    assert_eq!(
        assemble(".label \"x\""),
        err(1, 1, misplaced(".label", "outside a `.body`"))
    );
    assert_eq!(
        assemble("  .word 0"),
        err(1, 3, misplaced(".word", "outside a `.body`"))
    );
    assert_eq!(
        assemble(".param \"x\" f32 in"),
        err(1, 1, misplaced(".param", "outside a kernel"))
    );
    assert_eq!(
        assemble(".body grid=1,1,1"),
        err(1, 1, misplaced(".body", "outside a kernel"))
    );
    assert_eq!(
        assemble(".end"),
        err(1, 1, misplaced(".end", "outside a kernel"))
    );
    assert_eq!(
        assemble(".kernel \"k\" kind=vector ub=0\n  .body grid=1,1,1\n  .param \"x\" f32 in"),
        err(
            3,
            3,
            misplaced(".param", "after the kernel's first `.body`")
        )
    );
    assert_eq!(
        assemble(".kernel \"a\" kind=vector ub=0\n.kernel \"b\" kind=vector ub=0"),
        err(
            2,
            1,
            misplaced(".kernel", "inside another kernel (close it with `.end`)")
        )
    );
    assert_eq!(
        assemble("; header below\n.kernel \"a\" kind=vector ub=0\n.end\n.module 1.0"),
        err(4, 1, misplaced(".module", "after the first statement"))
    );
    assert_eq!(
        assemble("\n.kernel \"a\" kind=vector ub=0\n  .body grid=1,1,1\n    end\n"),
        err(2, 1, AsmErrorKind::UnclosedKernel("a".into()))
    );
    assert_eq!(
        assemble("  .kernel \"b\" kind=vector ub=0"),
        err(1, 3, AsmErrorKind::UnclosedKernel("b".into()))
    );
}

#[test]
fn unknown_words() {
    assert_eq!(
        assemble(&in_body("    foo dt=f32")),
        err(3, 5, AsmErrorKind::UnknownMnemonic("foo".into()))
    );
    assert_eq!(
        assemble(".kernal \"k\""),
        err(1, 1, AsmErrorKind::UnknownDirective(".kernal".into()))
    );
    assert_eq!(
        assemble("= x"),
        err(
            1,
            1,
            expected("a directive or an instruction mnemonic", "`=`")
        )
    );
    assert_eq!(
        assemble("\"add\""),
        err(
            1,
            1,
            expected("a directive or an instruction mnemonic", "\"add\"")
        )
    );
}

#[test]
fn operand_errors() {
    let line = "    add dt=f32 dst=0 a=0 b=0";
    assert_eq!(
        assemble(&in_body(line)),
        err(
            3,
            29,
            AsmErrorKind::Operand {
                opcode: Opcode::Add,
                error: OperandError::Missing("n")
            }
        )
    );
    assert_eq!(
        assemble(&in_body("    add dt=f33 dst=0 a=0 b=0 n=1")),
        err(
            3,
            12,
            AsmErrorKind::Operand {
                opcode: Opcode::Add,
                error: OperandError::BadValue("dt")
            }
        )
    );
    // Values that overflow their field.
    assert_eq!(
        assemble(&in_body("    add dt=f32 dst=4294967296 a=0 b=0 n=1")),
        err(
            3,
            20,
            AsmErrorKind::Operand {
                opcode: Opcode::Add,
                error: OperandError::BadValue("dst")
            }
        )
    );
    assert_eq!(
        assemble(&in_body("    adds dt=i32 dst=0 a=0 n=1 imm=2147483648")),
        err(
            3,
            35,
            AsmErrorKind::Operand {
                opcode: Opcode::AddS,
                error: OperandError::BadValue("imm")
            }
        )
    );
    assert_eq!(
        assemble(&in_body("    add dt=f32 dst=0 a=0 b=0 n=1 q=1")),
        err(
            3,
            34,
            AsmErrorKind::UnknownOperand {
                opcode: Opcode::Add,
                name: "q".into()
            }
        )
    );
    assert_eq!(
        assemble(&in_body("    add dt=f32 dst=0 a=0 b=0 n=1 a=4")),
        err(
            3,
            34,
            AsmErrorKind::DuplicateOperand {
                opcode: Opcode::Add,
                name: "a".into()
            }
        )
    );
    assert_eq!(
        assemble(&in_body("    add dt f32")),
        err(3, 12, expected("`=`", "`f32`"))
    );
    assert_eq!(
        assemble(&in_body("    add dt=")),
        err(3, 12, expected("an operand value", "end of line"))
    );
    assert_eq!(
        assemble(&in_body("    add dt=\"f32\"")),
        err(3, 12, expected("an operand value", "\"f32\""))
    );
    // Unknown operands list what the opcode has.
    let e = assemble(&in_body("    end x=1")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 3, column 9: `end` has no operand `x` (operands: none)"
    );
}

#[test]
fn wait_flag_errors() {
    let base = "    exp dt=f32 dst=0 src=0 n=1";
    assert_eq!(
        assemble(&in_body(&format!("{base} @wait=control"))),
        err(
            3,
            38,
            bad(
                "wait pipes (load, vector, cube, store joined by `|`)",
                "control"
            )
        )
    );
    assert_eq!(
        assemble(&in_body(&format!("{base} @wait=load|"))),
        err(
            3,
            38,
            bad(
                "wait pipes (load, vector, cube, store joined by `|`)",
                "load|"
            )
        )
    );
    assert_eq!(
        assemble(&in_body(&format!("{base} @wait=load @wait=cube"))),
        err(
            3,
            43,
            AsmErrorKind::DuplicateOperand {
                opcode: Opcode::Exp,
                name: "@wait".into()
            }
        )
    );
    // The flags may stand anywhere among the operands.
    let a = assemble(&in_body("    exp @wait=cube|load dt=f32 dst=0 src=0 n=1")).unwrap();
    let b = assemble(&in_body(&format!("{base} @wait=load|cube"))).unwrap();
    assert_eq!(a, b);
}

#[test]
fn strings_and_escapes() {
    assert_eq!(
        assemble(".kernel \"abc kind=vector ub=0"),
        err(1, 9, AsmErrorKind::UnterminatedString)
    );
    assert_eq!(
        assemble(".kernel \"a\\qb\" kind=vector ub=0"),
        err(1, 11, AsmErrorKind::BadEscape("\\q".into()))
    );
    assert_eq!(
        assemble(".kernel \"a\\u{110000}\" kind=vector ub=0"),
        err(1, 11, AsmErrorKind::BadEscape("\\u{110000}".into()))
    );
    assert_eq!(
        assemble(".kernel \"a\\u{}\" kind=vector ub=0"),
        err(1, 11, AsmErrorKind::BadEscape("\\u{}".into()))
    );
    assert_eq!(
        assemble(".kernel \"a\\u{1234567}\" kind=vector ub=0"),
        err(1, 11, AsmErrorKind::BadEscape("\\u{1234567".into()))
    );
    assert_eq!(
        assemble(".kernel \"a\\"),
        err(1, 11, AsmErrorKind::BadEscape("\\".into()))
    );
    // Columns count characters, not bytes.
    assert_eq!(
        assemble(".kernel \"日本\" kind=vectr ub=0"),
        err(
            1,
            19,
            bad(
                "kernel kind (vector, cube, mix, parallel, sequence)",
                "vectr"
            )
        )
    );
    // Every escape reads back.
    let (bytes, _) = round_trip(".kernel \"\\\\ \\\" \\n \\t \\r \\0 \\u{1b} \\u{65e5} ; # = , [ ]\" kind=vector ub=0\n.end");
    let m = Module::parse(&bytes).unwrap();
    assert_eq!(
        m.meta().unwrap().kernels[0].name,
        "\\ \" \n \t \r \0 \u{1b} 日 ; # = , [ ]"
    );
}

#[test]
fn directive_errors() {
    assert_eq!(
        assemble(".module 2.0"),
        err(
            1,
            9,
            AsmErrorKind::UnsupportedVersion { major: 2, minor: 0 }
        )
    );
    assert_eq!(assemble(".module 1"), err(1, 9, bad("version", "1")));
    assert_eq!(
        assemble(".module"),
        err(1, 8, expected("a version `major.minor`", "end of line"))
    );
    assert_eq!(
        assemble(".module 1.0 features=f16|gpu"),
        err(1, 22, bad("feature list", "f16|gpu"))
    );
    assert_eq!(
        assemble(".module 1.0 features=none features=f16"),
        err(
            1,
            27,
            AsmErrorKind::DuplicateKey {
                directive: ".module",
                key: "features".into()
            }
        )
    );
    assert_eq!(
        assemble(".module 1.0 flags=none"),
        err(
            1,
            13,
            AsmErrorKind::UnknownKey {
                directive: ".module",
                key: "flags".into()
            }
        )
    );
    assert_eq!(
        assemble(".kernel \"k\" kind=vector"),
        err(
            1,
            24,
            AsmErrorKind::MissingKey {
                directive: ".kernel",
                key: "ub"
            }
        )
    );
    assert_eq!(
        assemble(".kernel \"k\" ub=4"),
        err(
            1,
            17,
            AsmErrorKind::MissingKey {
                directive: ".kernel",
                key: "kind"
            }
        )
    );
    assert_eq!(
        assemble(".kernel \"k\" kind=vector ub=1 kind=cube"),
        err(
            1,
            30,
            AsmErrorKind::DuplicateKey {
                directive: ".kernel",
                key: "kind".into()
            }
        )
    );
    assert_eq!(
        assemble(".kernel \"k\" colour=red"),
        err(
            1,
            13,
            AsmErrorKind::UnknownKey {
                directive: ".kernel",
                key: "colour".into()
            }
        )
    );
    assert_eq!(
        assemble(".kernel \"k\" kind=vector ub=4294967296"),
        err(1, 28, bad("UB bytes (a u32)", "4294967296"))
    );
    assert_eq!(
        assemble(".kernel \"k\" kind=vector ub=-1"),
        err(1, 28, bad("UB bytes (a u32)", "-1"))
    );
    assert_eq!(
        assemble(".kernel k kind=vector ub=0"),
        err(1, 9, expected("a quoted kernel name", "`k`"))
    );
    assert_eq!(
        assemble(".kernel \"k\" kind vector"),
        err(1, 18, expected("`=`", "`vector`"))
    );
    let k = ".kernel \"k\" kind=vector ub=0\n";
    assert_eq!(
        assemble(&format!("{k}  .body grid=1,1")),
        err(2, 17, expected("`,`", "end of line"))
    );
    assert_eq!(
        assemble(&format!("{k}  .body")),
        err(
            2,
            8,
            AsmErrorKind::MissingKey {
                directive: ".body",
                key: "grid"
            }
        )
    );
    assert_eq!(
        assemble(&format!("{k}  .body grid=1,x,1")),
        err(2, 16, bad("grid dimension 1 (a u32)", "x"))
    );
    assert_eq!(
        assemble(&format!("{k}  .param \"x\" f64 in")),
        err(2, 14, bad("dtype (f32, f16, bf16, i32, i8, bool)", "f64"))
    );
    assert_eq!(
        assemble(&format!("{k}  .param \"x\" f32 rw")),
        err(2, 18, bad("access (in, out, inout)", "rw"))
    );
    assert_eq!(
        assemble(&format!("{k}  .param \"x\" f32 in dims=[a,")),
        err(2, 29, expected("a dimension", "end of line"))
    );
    assert_eq!(
        assemble(&format!("{k}  .param \"x\" f32 in dims=[a b]")),
        err(2, 29, expected("`,` or `]`", "`b`"))
    );
    assert_eq!(
        assemble(&format!("{k}  .param \"x\" f32 in dims=a")),
        err(2, 26, expected("`[`", "`a`"))
    );
    assert_eq!(
        assemble(&format!("{k}  .body grid=1,1,1\n    .word")),
        err(3, 10, expected("a 64-bit word", "end of line"))
    );
    assert_eq!(
        assemble(&format!("{k}  .body grid=1,1,1\n    .word 0x1 0xg")),
        err(3, 15, bad("64-bit word", "0xg"))
    );
    assert_eq!(
        assemble(&format!("{k}  .body grid=1,1,1\n    .label x")),
        err(3, 12, expected("a quoted label text", "`x`"))
    );
    assert_eq!(
        assemble(&format!("{k}  .body grid=1,1,1\n    .label \"a\" \"b\"")),
        err(3, 16, expected("end of line", "\"b\""))
    );
    assert_eq!(
        assemble(&format!("{k}.end extra")),
        err(2, 6, expected("end of line", "`extra`"))
    );
}

#[test]
fn error_messages_read_well() {
    let e = assemble(&in_body("    add dt=f32 dst=0 a=0 b=0")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 3, column 29: `add`: missing operand `n`"
    );
    let e = assemble(".kernel \"k\" kind=vector ub=x").unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 1, column 28: bad UB bytes (a u32): `x`"
    );
}

// ---------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------

#[test]
fn every_opcode_round_trips_through_a_module() {
    let mut rng = common::Rng(7);
    for _ in 0..20 {
        let mut code = CodeWriter::new();
        for &op in Opcode::ALL {
            let instr = Instr::sample(op, &mut || rng.next());
            code.label(format!("{op:?}"));
            code.push(
                &instr,
                WaitMask::from_bits((rng.next() & 0xf) as u8).unwrap(),
            );
        }
        let mut b = ModuleBuilder::new();
        b.add_kernel(KernelDef {
            name: "all".into(),
            kind: KernelKind::Mix,
            ub_bytes: 196_608,
            params: vec![],
            bodies: vec![BodyDef {
                grid: [1, 1, 1],
                code,
            }],
        })
        .expect("unique kernel name");
        let bytes = b.finish();
        let text = disassemble(&Module::parse(&bytes).unwrap()).unwrap();
        assert_eq!(assemble(&text).unwrap(), bytes);
        assert!(!text.contains(".word"), "{text}");
    }
}

#[test]
fn scalars_keep_their_bits() {
    let cases: &[(&str, u32)] = &[
        ("f32", f32::NAN.to_bits()),
        ("f32", 0x7fc0_0001),
        ("f32", 0xffc0_0000),
        ("f32", 0x7f80_0001),
        ("f32", (-0.0f32).to_bits()),
        ("f32", f32::INFINITY.to_bits()),
        ("f32", f32::NEG_INFINITY.to_bits()),
        ("f32", 1),
        ("f32", f32::MAX.to_bits()),
        ("f32", f32::MIN_POSITIVE.to_bits()),
        ("f16", 0.1f32.to_bits()),
        ("bf16", (-3.0e38f32).to_bits()),
        ("i32", i32::MIN as u32),
        ("i8", 0xffff_ff80),
        ("bool", 1),
    ];
    for &(dt, bits) in cases {
        let dtype = DType::from_name(dt).unwrap();
        let instr = Instr::Fill {
            dt: dtype,
            dst: 0,
            n: 1,
            imm: Scalar(bits),
        };
        let line = format_instr(&instr, WaitMask::NONE);
        let text = format!(
            ".module 1.0 features=f16|bf16\n{}",
            in_body(&format!("    {line}"))
        );
        let (bytes, back) = round_trip(&text);
        let m = Module::parse(&bytes).unwrap();
        let (_, decoded) = Instr::decode(m.code()).unwrap();
        assert_eq!(decoded, instr, "{line}");
        assert!(back.contains(&line), "{back}");
    }
    // Hand-written forms.
    let text = in_body(
        "    fill dt=f32 dst=0 n=0x10 imm=bits:0x7fc00001\n    fill dt=f32 dst=0 n=1 imm=-inf",
    );
    let bytes = assemble(&text).unwrap();
    let m = Module::parse(&bytes).unwrap();
    let (_, first) = Instr::decode(m.code()).unwrap();
    assert_eq!(
        first,
        Instr::Fill {
            dt: DType::F32,
            dst: 0,
            n: 16,
            imm: Scalar(0x7fc0_0001)
        }
    );
}

#[test]
fn module_header_is_exact_or_derived() {
    let body = in_body("    exp dt=f16 dst=0 src=0 n=1\n    end");
    // Derived, as the builder does.
    let m_bytes = assemble(&body).unwrap();
    assert_eq!(Module::parse(&m_bytes).unwrap().features(), features::F16);
    // Exact: fewer bits than the code needs (the verifier will refuse it)…
    let none = assemble(&format!(".module 1.0 features=none\n{body}")).unwrap();
    assert_eq!(Module::parse(&none).unwrap().features(), 0);
    // …or more.
    let more = assemble(&format!(".module 1.0 features=cube|atomic_add|f16\n{body}")).unwrap();
    assert_eq!(
        Module::parse(&more).unwrap().features(),
        features::CUBE | features::ATOMIC_ADD | features::F16
    );
    // The minor version is kept.
    let (minor, text) = round_trip(&format!(".module 1.7 features=f16\n{body}"));
    assert_eq!(u16::from_le_bytes([minor[6], minor[7]]), 7);
    assert!(text.starts_with(".module 1.7 features=f16\n"));
    for bytes in [none, more] {
        let text = disassemble(&Module::parse(&bytes).unwrap()).unwrap();
        assert_eq!(assemble(&text).unwrap(), bytes);
    }
}

#[test]
fn params_dims_and_names() {
    let mut b = ModuleBuilder::new();
    b.declare_features(features::CUBE);
    let dims = |ds: &[&str]| ds.iter().map(|d| d.to_string()).collect::<Vec<_>>();
    b.add_kernel(KernelDef {
        name: "".into(),
        kind: KernelKind::Sequence,
        ub_bytes: u32::MAX,
        params: vec![
            ParamDef {
                name: "plain".into(),
                dtype: DType::BF16,
                access: ParamAccess::ReadWrite,
                dims: dims(&["S*4", "(B+1)/2", "768", "x.y%3"]),
            },
            ParamDef {
                name: "odd \"name\"".into(),
                dtype: DType::Bool,
                access: ParamAccess::Write,
                dims: dims(&["", "a b", "a,b", "[x]", "é", "#", ";"]),
            },
            ParamDef {
                name: "none".into(),
                dtype: DType::I8,
                access: ParamAccess::Read,
                dims: vec![],
            },
        ],
        bodies: vec![
            BodyDef {
                grid: [0, u32::MAX, 3],
                code: CodeWriter::new(),
            };
            3
        ],
    })
    .expect("unique kernel name");
    let bytes = b.finish();
    let text = disassemble(&Module::parse(&bytes).unwrap()).unwrap();
    assert_eq!(
        text,
        r##".module 1.0 features=cube|multi_body
.kernel "" kind=sequence ub=4294967295
  .param "plain" bf16 inout dims=[S*4,(B+1)/2,768,x.y%3]
  .param "odd \"name\"" bool out dims=["","a b","a,b","[x]","é","#",";"]
  .param "none" i8 in
  .body grid=0,4294967295,3
  .body grid=0,4294967295,3
  .body grid=0,4294967295,3
.end
"##
    );
    assert_eq!(assemble(&text).unwrap(), bytes);
    // Spaces are free around list punctuation in hand-written text.
    let spaced = text.replace(
        "dims=[S*4,(B+1)/2,768,x.y%3]",
        "dims=[ S*4 , \"(B+1)/2\",768 ,x.y%3 ]",
    );
    assert_eq!(assemble(&spaced).unwrap(), bytes);
}

// ---------------------------------------------------------------------------
// Code that does not decode, labels in odd places
// ---------------------------------------------------------------------------

/// Vector kernel `k` with one body of `code`.
fn one_body_kernel(code: CodeWriter) -> KernelDef {
    KernelDef {
        name: "k".into(),
        kind: KernelKind::Vector,
        ub_bytes: 64,
        params: vec![],
        bodies: vec![BodyDef {
            grid: [1, 1, 1],
            code,
        }],
    }
}

fn one_body_module(code: CodeWriter) -> Vec<u8> {
    let mut b = ModuleBuilder::new();
    b.add_kernel(one_body_kernel(code))
        .expect("unique kernel name");
    b.finish()
}

fn add_words() -> Vec<u64> {
    Instr::Add {
        dt: DType::F32,
        dst: 0,
        a: 16,
        b: 32,
        n: 4,
    }
    .encode(WaitMask::NONE.with(Pipe::Load))
    .words()
    .to_vec()
}

#[test]
fn undecodable_words_print_as_word_lines() {
    let add = add_words();
    let mut code = CodeWriter::new();
    // Unknown opcode claiming 2 words, a reserved bit in a 3-word add, a
    // word whose head is itself bad, then a good instruction.
    code.push_word(0x0001_0207);
    code.push_word(0xdead_beef);
    code.push_word(add[0] | 1 << 19);
    code.push_word(add[1]);
    code.push_word(add[2]);
    code.push_word(u64::MAX);
    for w in &add {
        code.push_word(*w);
    }
    code.push(&Instr::End {}, WaitMask::NONE);
    let bytes = one_body_module(code);
    let m = Module::parse(&bytes).unwrap();
    let text = disassemble(&m).unwrap();
    assert_eq!(assemble(&text).unwrap(), bytes);
    let body: Vec<&str> = text.lines().skip(3).collect();
    assert_eq!(
        body,
        [
            "    .word 0x0000000000010207 0x00000000deadbeef  ; does not decode: unknown opcode 0x07",
            &format!(
                "    .word {:#018x} {:#018x} {:#018x}  ; does not decode: reserved bits are set",
                add[0] | 1 << 19,
                add[1],
                add[2]
            ),
            "    .word 0xffffffffffffffff  ; does not decode: unknown pipe 7",
            "    add dt=f32 dst=0 a=16 b=32 n=4 @wait=load",
            "    end",
            ".end",
        ]
    );
    // With word offsets.
    let k = disassemble_kernel(&m, 0).unwrap();
    assert!(
        k.contains("  ; word 0: does not decode: unknown opcode 0x07\n"),
        "{k}"
    );
    assert!(
        k.contains("    add dt=f32 dst=0 a=16 b=32 n=4 @wait=load  ; word 6\n"),
        "{k}"
    );
    assert!(k.contains("    end  ; word 9\n"), "{k}");
    assert_eq!(assemble(&k).unwrap(), bytes);
    // The bare code listing of the body.
    let code = disassemble_code(m.kernel(0).unwrap().body_code(0).unwrap(), false);
    assert_eq!(code, body[..5].join("\n") + "\n");
}

#[test]
fn long_word_groups_wrap() {
    // A head claiming 9 words of an unknown opcode.
    let mut code = CodeWriter::new();
    code.push_word(0x0001_0907);
    for i in 1..9 {
        code.push_word(i);
    }
    let bytes = one_body_module(code);
    let text = disassemble(&Module::parse(&bytes).unwrap()).unwrap();
    let words: Vec<&str> = text.lines().filter(|l| l.contains(".word")).collect();
    assert_eq!(words.len(), 3);
    assert!(words[0].ends_with("; does not decode: unknown opcode 0x07"));
    assert!(!words[1].contains(';'));
    assert_eq!(assemble(&text).unwrap(), bytes);
}

#[test]
fn labels_inside_an_instruction_split_it() {
    let add = add_words();
    let mut code = CodeWriter::new();
    code.label("before");
    code.push_word(add[0]);
    code.label("inside");
    code.label("inside too");
    code.push_word(add[1]);
    code.push_word(add[2]);
    code.label("after");
    code.label("on end");
    code.push(&Instr::End {}, WaitMask::NONE);
    let bytes = one_body_module(code);
    let text = disassemble(&Module::parse(&bytes).unwrap()).unwrap();
    let body: Vec<&str> = text.lines().skip(3).collect();
    assert_eq!(
        body,
        [
            "    .label \"before\"",
            &format!("    .word {:#018x}  ; `add` cut by a label", add[0]),
            "    .label \"inside\"",
            "    .label \"inside too\"",
            &format!(
                "    .word {:#018x}  ; does not decode: instruction length is zero",
                add[1]
            ),
            &format!(
                "    .word {:#018x}  ; does not decode: instruction length is zero",
                add[2]
            ),
            "    .label \"after\"",
            "    .label \"on end\"",
            "    end",
            ".end",
        ]
    );
    assert_eq!(assemble(&text).unwrap(), bytes);
}

#[test]
fn parallel_bodies_keep_their_labels() {
    let text = r#".module 1.0 features=multi_body
.kernel "p" kind=parallel ub=64
  .body grid=2,1,1
    .label "b0"
    exp dt=f32 dst=0 src=0 n=4
    end
  .body grid=3,1,1
    .label "b1"
    exp dt=f32 dst=0 src=0 n=4
    .label "last"
    end
.end
"#;
    let (_, back) = round_trip(text);
    assert_eq!(back, text);
    let m_bytes = assemble(text).unwrap();
    let labels = Module::parse(&m_bytes).unwrap().meta().unwrap().kernels[0]
        .labels
        .clone();
    let got: Vec<(u32, u32, &str)> = labels
        .iter()
        .map(|l| (l.body, l.word, l.text.as_str()))
        .collect();
    assert_eq!(got, [(0, 0, "b0"), (1, 0, "b1"), (1, 3, "last")]);
}

#[test]
fn labels_past_the_end_of_their_body_are_refused() {
    let k = ".kernel \"k\" kind=parallel ub=64\n";
    let past = |label: &str, closer: &'static str, line: u32| AsmErrorKind::LabelPastEnd {
        label: label.into(),
        closer,
        line,
    };
    // After the body's last instruction (here `end`), before `.end`.
    assert_eq!(
        assemble(&format!(
            "{k}  .body grid=1,1,1\n    end\n    .label \"tail\"\n.end"
        )),
        err(4, 5, past("tail", ".end", 5))
    );
    // Before the next `.body`: the label does not move on to it.
    assert_eq!(
        assemble(&format!(
            "{k}  .body grid=1,1,1\n    end\n  .label \"next\"\n  .body grid=1,1,1\n    end\n.end"
        )),
        err(4, 3, past("next", ".body", 5))
    );
    // In a body without a word; comments and blank lines change nothing;
    // of several, the first is named.
    assert_eq!(
        assemble(&format!(
            "{k}  .body grid=1,1,1\n    .label \"a\"\n\n    .label \"b\" ; x\n# y\n  .end"
        )),
        err(3, 5, past("a", ".end", 7))
    );
    // Raw words count as code, and a label on `end` names `end`.
    let ok = format!(
        "{k}  .body grid=1,1,1\n    .label \"raw\"\n    .word 0x1\n    .label \"last\"\n    end\n.end\n"
    );
    assert!(assemble(&ok).is_ok());
    // The message names the label, its line and the statement that ends
    // the body.
    let e = assemble(&format!(
        "{k}  .body grid=1,1,1\n    end\n    .label \"x \\\"y\\\"\"\n.end"
    ))
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 4, column 5: label \"x \\\"y\\\"\" names no instruction: \
         no instruction or `.word` follows it in its body, which ends at `.end` on line 5"
    );
}

#[test]
fn builder_refuses_labels_past_the_end() {
    // A label names the word at its offset: the builder refuses one where
    // no word is (as the assembler refuses a `.label` no word follows, and
    // `Module::parse` a module that holds one), and is unchanged then.
    let kernel = one_body_kernel;
    let mut b = ModuleBuilder::new();
    let empty = b.finish();
    let mut at_end = CodeWriter::new();
    at_end.label("first");
    at_end.push(&Instr::End {}, WaitMask::NONE);
    at_end.label("at the end");
    let e = b.add_kernel(kernel(at_end)).unwrap_err();
    assert_eq!(
        e,
        BuildError::LabelPastEnd {
            kernel: "k".into(),
            body: 0,
            word: 1,
            words: 1,
            label: "at the end".into(),
        }
    );
    assert_eq!(
        e.to_string(),
        "kernel \"k\": label \"at the end\" is on word 1 of body 0, which has 1 word(s): \
         a label must name a word of its body"
    );
    let mut beyond = CodeWriter::new();
    beyond.push(&Instr::End {}, WaitMask::NONE);
    beyond.label_at(7, "beyond");
    assert!(matches!(
        b.add_kernel(kernel(beyond)),
        Err(BuildError::LabelPastEnd {
            word: 7,
            words: 1,
            ..
        })
    ));
    let mut no_code = CodeWriter::new();
    no_code.label("alone");
    assert!(matches!(
        b.add_kernel(kernel(no_code)),
        Err(BuildError::LabelPastEnd {
            word: 0,
            words: 0,
            ..
        })
    ));
    assert_eq!(b.kernel_names().count(), 0);
    assert_eq!(b.finish(), empty);
    // On the last word, and on a word inside an instruction, are labels.
    let mut ok = CodeWriter::new();
    ok.label_at(1, "inside add");
    for w in add_words() {
        ok.push_word(w);
    }
    ok.label("on end");
    ok.push(&Instr::End {}, WaitMask::NONE);
    b.add_kernel(kernel(ok)).unwrap();
    let bytes = b.finish();
    let labels = Module::parse(&bytes).unwrap().meta().unwrap().kernels[0]
        .labels
        .clone();
    let got: Vec<(u32, &str)> = labels.iter().map(|l| (l.word, l.text.as_str())).collect();
    assert_eq!(got, [(1, "inside add"), (3, "on end")]);
}

// ---------------------------------------------------------------------------
// What the exact disassembler refuses, and the lossy one prints
// ---------------------------------------------------------------------------

fn small() -> Vec<u8> {
    assemble(&in_body("    .label \"l\"\n    end")).unwrap()
}

#[test]
fn trailing_bytes_do_not_parse() {
    let mut bytes = small();
    let len = bytes.len() as u64;
    bytes.extend_from_slice(&[0; 8]);
    let e = Module::parse(&bytes).unwrap_err();
    assert_eq!(
        e,
        ParseError::TrailingBytes {
            count: 8,
            last: SectionKind::Meta,
            end: len
        }
    );
}

#[test]
fn reordered_sections_are_not_canonical() {
    // Swap the code and metadata sections in the file: they still tile it,
    // so the module parses, but the builder never writes this order.
    let bytes = small();
    let (coff, clen) = common::section(&bytes, 4);
    let (moff, mlen) = common::section(&bytes, 5);
    let mut out = bytes[..coff].to_vec();
    out.extend_from_slice(&bytes[moff..moff + mlen]);
    let new_coff = out.len().next_multiple_of(8);
    out.resize(new_coff, 0);
    out.extend_from_slice(&bytes[coff..coff + clen]);
    common::put_u64(&mut out, 32 + 24 * 3 + 8, new_coff as u64);
    common::put_u64(&mut out, 32 + 24 * 4 + 8, coff as u64);
    let m = Module::parse(&out).unwrap();
    assert_eq!(
        disassemble(&m),
        Err(DisasmError::NotCanonical {
            offset: 32 + 24 * 3 + 8
        })
    );
    // The lossy text is the canonical module's.
    assert_eq!(assemble(&disassemble_lossy(&m)).unwrap(), bytes);
    // Moving a section and leaving a hole where it was does not parse.
    let mut holed = bytes.clone();
    let end = holed.len();
    holed.extend_from_slice(&bytes[coff..coff + clen]);
    common::put_u64(&mut holed, 32 + 24 * 3 + 8, end as u64);
    assert!(matches!(
        Module::parse(&holed),
        Err(ParseError::SectionGap { .. })
    ));
}

#[test]
fn undecodable_metadata_does_not_parse() {
    let mut bytes = small();
    let (off, len) = common::section(&bytes, 5);
    for b in &mut bytes[off..off + len] {
        *b = 0xff;
    }
    let e = Module::parse(&bytes).unwrap_err();
    assert!(matches!(e, ParseError::BadMeta { .. }), "{e}");
    assert!(e.to_string().contains("metadata"), "{e}");
}

#[test]
fn kernel_selection() {
    let text = r#".module 1.0 features=none
.kernel "a" kind=vector ub=64
  .body grid=1,1,1
    end
.end
.kernel "b" kind=vector ub=128
  .param "x" f32 in
  .body grid=2,1,1
    exp dt=f32 dst=0 src=0 n=4
    end
.end
"#;
    let bytes = assemble(text).unwrap();
    let m = Module::parse(&bytes).unwrap();
    assert_eq!(
        disassemble_kernel(&m, 2),
        Err(DisasmError::NoSuchKernel { index: 2, count: 2 })
    );
    let one = disassemble_kernel(&m, 1).unwrap();
    assert_eq!(
        one,
        ".module 1.0 features=none\n.kernel \"b\" kind=vector ub=128\n  .param \"x\" f32 in\n  .body grid=2,1,1\n    \
         exp dt=f32 dst=0 src=0 n=4  ; word 0\n    end  ; word 3\n.end\n"
    );
    let single = assemble(&one).unwrap();
    let m1 = Module::parse(&single).unwrap();
    assert_eq!(m1.kernel_count(), 1);
    let plain = disassemble_with(
        &m,
        &DisasmOptions {
            kernel: Some(0),
            word_offsets: false,
        },
    )
    .unwrap();
    assert_eq!(plain, ".module 1.0 features=none\n.kernel \"a\" kind=vector ub=64\n  .body grid=1,1,1\n    end\n.end\n");
    assert_eq!(
        disassemble_with(&m, &DisasmOptions::default()).unwrap(),
        text
    );
}

#[test]
fn format_instr_prints_one_line() {
    let i = Instr::Matmul {
        dt: DType::F16,
        out: DType::F32,
        flags: dvm_isa::MmFlags {
            trans_a: false,
            trans_b: true,
            accumulate: true,
        },
        dst: 0,
        a: 64,
        b: 128,
        m: 1,
        n: 2,
        k: 3,
    };
    assert_eq!(
        format_instr(&i, WaitMask::NONE.with(Pipe::Store).with(Pipe::Load)),
        "matmul dt=f16 out=f32 flags=tb|acc dst=0 a=64 b=128 m=1 n=2 k=3 @wait=load|store"
    );
}
