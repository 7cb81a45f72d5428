//! The text assembly format: [`disassemble`] and [`assemble`] round-trip
//! modules byte for byte, so tests and bug reports can be written by hand.
//!
//! # Syntax
//!
//! One statement per line. `;` or `#` outside a string starts a comment
//! that runs to the end of the line; blank lines are ignored. Strings are
//! double-quoted with the escapes `\\ \" \n \t \r \0 \u{…}`.
//!
//! | statement | meaning |
//! |---|---|
//! | `.module 1.0 features=f16\|cube` | header: version `major.minor` (major must be 1) and the exact feature bits (`none`, or names from [`crate::module::features::NAMES`] joined by `\|`). Optional; when absent the version is 1.0 and the features are derived from the code, as [`ModuleBuilder`](crate::builder::ModuleBuilder) does. If present it is the first statement. |
//! | `.kernel "name" kind=vector ub=196608` | opens a kernel: kind (`vector`, `cube`, `mix`, `parallel`, `sequence`) and UB bytes. Keys in any order. |
//! | `.param "x" f32 in dims=[S,768]` | a parameter: name, dtype, access (`in`, `out`, `inout`), and optional metadata dims, each bare (letters, digits, `_*+-/()%.`) or quoted. Before the kernel's first `.body`. |
//! | `.body grid=4,1,1` | opens a body (tile grid); the instructions that follow belong to it until the next `.body` or `.end`. |
//! | `.label "text"` | a debug label on the next word of the body: an instruction or `.word` must follow it before the next `.body` or `.end` (a label past the end of its body, e.g. after the final `end`, is an error). |
//! | `mnemonic name=value … @wait=load\|vector` | an instruction: every operand of the opcode once, as [`Instr::write_operands`](crate::Instr::write_operands) prints it (the disassembler uses table order; any order is accepted), then optionally the data pipes it waits for. Integers are decimal or `0x` hex. |
//! | `.word 0x… 0x…` | raw code words, as they are: how the disassembler prints code that does not decode. |
//! | `.end` | closes the kernel. |
//!
//! Everything is encoded as written and nothing is verified, so broken
//! modules can be written too; run [`crate::verify_module`] on the bytes.
//! The only rule beyond the syntax is the one for `.label` above: a label
//! must name a word of its own body.
//!
//! # What the disassembler prints
//!
//! Canonical text: one space between tokens, two spaces before `.param`
//! and `.body`, four before instructions, labels and `.word`. Decoded
//! instructions print as mnemonics when their text reads back to the same
//! words. Words that do not decode print as `.word` lines, grouped by the
//! length their head word claims (one word when the head itself is bad),
//! with a comment giving the decode error; an instruction that a label
//! falls inside prints as `.word` too, split at the label. Either way every
//! word and every label keeps its place. A label at or past the end of its
//! body names no word; the builder refuses one and [`crate::Module::parse`]
//! a module that holds one, so the disassembler never sees it (it would
//! print it as a comment, and [`disassemble`] would refuse the module as
//! lossy).
//!
//! [`disassemble`] guarantees `assemble(disassemble(m)?) == m.bytes()`: it
//! checks this itself and fails when the module holds something the text
//! cannot say (undecodable or inconsistent metadata) or is laid out unlike
//! the builder's output. [`disassemble_lossy`] prints any parsed module,
//! with comments for what it could not represent; [`disassemble_kernel`]
//! prints one kernel with word offsets (the `word` of a
//! [`VerifyError`](crate::VerifyError)).
//!
//! # Example
//!
//! A row softmax over `S×768` f32 with `S = 128`, 16 rows per tile:
//!
//! ```
//! use dvm_isa::asm::{assemble, disassemble};
//! use dvm_isa::{verify_module, DeviceLimits, Module};
//!
//! let text = r#".module 1.0 features=none
//! .kernel "softmax" kind=vector ub=98368
//!   .param "x" f32 in dims=[S,768]
//!   .param "y" f32 out dims=[S,768]
//!   .body grid=8,1,1
//!     .label "x tile, row max"
//!     load dt=f32 pad=fill buf=0 row_dim=0 col_dim=- ub=0 pitch=768 rows=16 cols=768 row_total=128 col_total=0 padv=0.0 base=0 step0=12288 step1=0 step2=0 row_stride=768 col_stride=1
//!     rmax dt=f32 axis=cols dst=49152 src=0 rows=16 cols=768 @wait=load
//!     brccol dt=f32 dst=49216 src=49152 rows=16 cols=768
//!     .label "exp(x - max)"
//!     sub dt=f32 dst=0 a=0 b=49216 n=12288
//!     exp dt=f32 dst=0 src=0 n=12288
//!     .label "normalise"
//!     rsum dt=f32 axis=cols dst=49152 src=0 rows=16 cols=768
//!     brccol dt=f32 dst=49216 src=49152 rows=16 cols=768
//!     div dt=f32 dst=0 a=0 b=49216 n=12288
//!     store dt=f32 buf=1 row_dim=0 col_dim=- ub=0 pitch=768 rows=16 cols=768 row_total=128 col_total=0 base=0 step0=12288 step1=0 step2=0 row_stride=768 col_stride=1 @wait=vector
//!     end
//! .end
//! "#;
//! let bytes = assemble(text)?;
//! let module = Module::parse(&bytes)?;
//! verify_module(&module, &DeviceLimits::DEFAULT)?;
//! assert_eq!(disassemble(&module)?, text);
//!
//! // Hand-written text may use comments, any operand order and hex.
//! let short = "
//!     .kernel \"k\" ub=0x40 kind=vector   ; no .module: features derived
//!       .body grid=1,1,1
//!         fill n=16 dst=0 dt=f32 imm=1.5 # operands in any order
//!         end
//!     .end";
//! assert!(assemble(short).is_ok());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod assemble;
mod disasm;
mod lex;

use alloc::string::String;

pub use assemble::assemble;
pub use disasm::{
    disassemble, disassemble_code, disassemble_kernel, disassemble_lossy, disassemble_with,
    format_instr, DisasmOptions,
};

use crate::error::OperandError;
use crate::instr::Opcode;

/// An assembly error: where, and what was wrong there.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {col}: {kind}")]
pub struct AsmError {
    /// Line number, from 1.
    pub line: u32,
    /// Column in characters, from 1.
    pub col: u32,
    /// What went wrong.
    pub kind: AsmErrorKind,
}

impl AsmError {
    /// An error at byte offset `at` of `line`.
    fn at(no: u32, line: &str, at: usize, kind: AsmErrorKind) -> AsmError {
        AsmError {
            line: no,
            col: column(line, at),
            kind,
        }
    }
}

/// The 1-based character column of byte offset `at` in `line`.
fn column(line: &str, at: usize) -> u32 {
    let chars = line
        .get(..at)
        .map_or(line.chars().count(), |s| s.chars().count());
    u32::try_from(chars + 1).unwrap_or(u32::MAX)
}

/// What an [`AsmError`] found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AsmErrorKind {
    /// Something else stands where `expected` should.
    #[error("expected {expected}, found {found}")]
    Expected {
        /// What the grammar wants here.
        expected: &'static str,
        /// The token found (quoted), or `end of line`.
        found: String,
    },
    /// A `.name` that is no directive.
    #[error("unknown directive `{0}`")]
    UnknownDirective(String),
    /// A word that is no mnemonic.
    #[error("unknown mnemonic `{0}`")]
    UnknownMnemonic(String),
    /// A `key=` the directive does not take.
    #[error("`{directive}` has no key `{key}`")]
    UnknownKey {
        /// Directive.
        directive: &'static str,
        /// Key found.
        key: String,
    },
    /// A key given twice.
    #[error("`{directive}` key `{key}` given twice")]
    DuplicateKey {
        /// Directive.
        directive: &'static str,
        /// Key.
        key: String,
    },
    /// A required key is absent.
    #[error("`{directive}` needs `{key}=`")]
    MissingKey {
        /// Directive.
        directive: &'static str,
        /// Key.
        key: &'static str,
    },
    /// A value that does not parse as `what`.
    #[error("bad {what}: `{found}`")]
    BadValue {
        /// What the value should be.
        what: &'static str,
        /// The text found.
        found: String,
    },
    /// An operand name the opcode does not have.
    #[error("`{}` has no operand `{name}` (operands: {})", opcode.mnemonic(), FieldList(opcode.fields()))]
    UnknownOperand {
        /// Opcode.
        opcode: Opcode,
        /// Name found.
        name: String,
    },
    /// An operand (or `@wait`) given twice.
    #[error("`{}` operand `{name}` given twice", opcode.mnemonic())]
    DuplicateOperand {
        /// Opcode.
        opcode: Opcode,
        /// Name.
        name: String,
    },
    /// An operand is missing or its value does not parse.
    #[error("`{}`: {error}", opcode.mnemonic())]
    Operand {
        /// Opcode.
        opcode: Opcode,
        /// The operand rule broken.
        error: OperandError,
    },
    /// A string without its closing quote.
    #[error("string has no closing `\"`")]
    UnterminatedString,
    /// An unknown escape in a string.
    #[error("unknown escape `{0}` (known: \\\\ \\\" \\n \\t \\r \\0 \\u{{…}})")]
    BadEscape(String),
    /// A statement where it may not stand.
    #[error("`{what}` {rule}")]
    Misplaced {
        /// The statement.
        what: &'static str,
        /// Where it may not stand.
        rule: &'static str,
    },
    /// The text ends inside a kernel (reported at its `.kernel` line).
    #[error("kernel \"{0}\" is not closed with `.end`")]
    UnclosedKernel(String),
    /// A `.label` that no word of its body follows: the body ends (at the
    /// next `.body` or `.end`) before an instruction or `.word` does.
    /// Reported at the `.label`.
    #[error("label \"{}\" names no instruction: no instruction or `.word` follows it in its body, which ends at `{closer}` on line {line}", label.escape_debug())]
    LabelPastEnd {
        /// The label's text.
        label: String,
        /// The statement that ends the body: `.body` or `.end`.
        closer: &'static str,
        /// Its line.
        line: u32,
    },
    /// A kernel name used before in the same module.
    #[error("kernel \"{}\" is defined twice (first as kernel {first})", name.escape_debug())]
    DuplicateKernel {
        /// The name.
        name: String,
        /// Index of the kernel that has it already.
        first: u32,
    },
    /// A major version other than this crate's.
    #[error("unsupported module version {major}.{minor} (this build writes 1.x)")]
    UnsupportedVersion {
        /// Major.
        major: u16,
        /// Minor.
        minor: u16,
    },
}

/// Comma-separated field names, for messages.
struct FieldList(&'static [&'static str]);

impl core::fmt::Display for FieldList {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        for (i, n) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(n)?;
        }
        Ok(())
    }
}

/// Why a module could not be disassembled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DisasmError {
    /// A kernel index outside the kernel table.
    #[error("kernel {index} does not exist (the module has {count})")]
    NoSuchKernel {
        /// Index asked for.
        index: usize,
        /// Kernels in the module.
        count: usize,
    },
    /// The module holds something the text cannot say; the message says
    /// what (use [`disassemble_lossy`] to print it anyway).
    #[error("the text cannot represent this module exactly: {0}")]
    Lossy(String),
    /// The text reassembles into different bytes: the module is not laid
    /// out the way the builder writes modules.
    #[error("module layout is not canonical: its text reassembles to bytes that differ at offset {offset}")]
    NotCanonical {
        /// First byte that differs (or the shorter length).
        offset: u64,
    },
    /// The printed text does not assemble (a bug in this crate).
    #[error("disassembly does not reassemble: {0}")]
    Reassemble(AsmError),
}
