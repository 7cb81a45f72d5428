//! Error types of the instruction set crate. Each is small and says which
//! rule was broken; the verifier wraps them with the kernel and word offset.

use crate::instr::Opcode;
use crate::word::Pipe;

/// Why one instruction failed to decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// No words left where an instruction should start.
    #[error("code ends where an instruction should start")]
    Truncated,
    /// The opcode byte names no instruction.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// The length field disagrees with the opcode's layout.
    #[error("`{}` has length {len} words, its layout has {expected}", opcode.mnemonic())]
    BadLength {
        /// The opcode.
        opcode: Opcode,
        /// Length in the head word.
        len: u8,
        /// Length of the opcode's layout.
        expected: u8,
    },
    /// The head's length field is zero.
    #[error("instruction length is zero")]
    ZeroLength,
    /// The pipe field names no pipe.
    #[error("unknown pipe {0}")]
    BadPipe(u8),
    /// The pipe field is not the opcode's pipe.
    #[error("`{}` must issue on the {} pipe, not {pipe}", opcode.mnemonic(), opcode.pipe())]
    WrongPipe {
        /// The opcode.
        opcode: Opcode,
        /// The pipe in the head word.
        pipe: Pipe,
    },
    /// A reserved or padding bit is set.
    #[error("reserved bits are set")]
    ReservedBits,
    /// The operands run past the instruction's length.
    #[error("operands run past the instruction")]
    OperandsTruncated,
    /// A dtype field holds no dtype.
    #[error("unknown dtype {0}")]
    BadDType(u8),
    /// A field holds a value outside its domain.
    #[error("bad {field} {value}")]
    BadField {
        /// Field kind.
        field: &'static str,
        /// The value found.
        value: u64,
    },
}

/// Why the operand text of one instruction failed to parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OperandError {
    /// The line ended before the field.
    #[error("missing operand `{0}`")]
    Missing(&'static str),
    /// Another token stands where the field should.
    #[error("expected operand `{0}=…`")]
    Expected(&'static str),
    /// The field's value does not parse.
    #[error("bad value for operand `{0}`")]
    BadValue(&'static str),
    /// Tokens are left after the last field.
    #[error("extra tokens after the last operand")]
    Extra,
}

use crate::module::SectionKind;

/// Why a byte string is not a well-formed module container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The bytes end before a structure.
    #[error("module truncated: the {what} needs {need} bytes, the module has {have}")]
    Truncated {
        /// The structure.
        what: &'static str,
        /// Bytes needed.
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// The magic is not `DVMB`.
    #[error("not a dvm module: magic is {0:02x?}, expected \"DVMB\"")]
    BadMagic([u8; 4]),
    /// The major version is not this crate's.
    #[error("unsupported module version {major}.{minor} (this build reads 1.x)")]
    UnsupportedVersion {
        /// Major.
        major: u16,
        /// Minor.
        minor: u16,
    },
    /// Header size or reserved fields are wrong.
    #[error("malformed header: wrong header size or reserved bits set")]
    BadHeader,
    /// Feature bits this version does not know.
    #[error("module needs unknown features {0:#x}")]
    UnknownFeatures(u64),
    /// A section kind this version does not know.
    #[error("unknown section kind {0}")]
    UnknownSection(u32),
    /// A section kind appears twice.
    #[error("section {0:?} appears twice")]
    DuplicateSection(SectionKind),
    /// A required section is absent.
    #[error("section {0:?} is missing")]
    MissingSection(SectionKind),
    /// A section runs past the end of the module.
    #[error("section {section:?} at offset {offset} with length {len} runs past the end of the module ({file_len} bytes)")]
    SectionOutOfBounds {
        /// Section.
        section: SectionKind,
        /// Its offset.
        offset: u64,
        /// Its length.
        len: u64,
        /// Module length.
        file_len: u64,
    },
    /// A table's length is not a whole number of entries.
    #[error("section {0:?} is not a whole number of entries")]
    SectionSize(SectionKind),
    /// A kernel entry is malformed.
    #[error("kernel {kernel}: {what}")]
    BadKernel {
        /// Kernel index.
        kernel: u32,
        /// The rule broken.
        what: &'static str,
    },
    /// A body entry is malformed.
    #[error("body {body}: {what}")]
    BadBody {
        /// Body index.
        body: u32,
        /// The rule broken.
        what: &'static str,
    },
    /// A parameter entry holds an unknown dtype or access.
    #[error("parameter entry {param}: unknown dtype or access, or reserved bytes set")]
    BadParam {
        /// Entry index.
        param: u32,
    },
    /// Two sections overlap, or bytes lie between two sections (or
    /// between the section table and the first section) beyond the zero
    /// padding that aligns a section to 8 bytes: the sections do not tile
    /// the module.
    #[error("section {section:?} starts at offset {offset}, but {after} ends at offset {prev_end} (the next section must start at {expected}): {}", Gap(*offset, *prev_end))]
    SectionGap {
        /// The section.
        section: SectionKind,
        /// Where it starts.
        offset: u64,
        /// What comes before it: the section table or another section.
        after: SectionSite,
        /// Where that ends.
        prev_end: u64,
        /// Where the section should start (the end rounded up to 8).
        expected: u64,
    },
    /// A padding byte before a section is not zero.
    #[error(
        "padding byte at offset {offset} (before section {section:?}) is {value:#04x}, not zero"
    )]
    BadPadding {
        /// Offset of the byte.
        offset: u64,
        /// The section it pads.
        section: SectionKind,
        /// The byte.
        value: u8,
    },
    /// Bytes follow the last section.
    #[error("{count} trailing bytes after the module (its last section, {last:?}, ends at offset {end})")]
    TrailingBytes {
        /// How many.
        count: u64,
        /// The last section.
        last: SectionKind,
        /// Where it ends.
        end: u64,
    },
    /// The metadata section does not decode as a `ModuleMeta`.
    #[error("metadata section malformed at byte {at} of the section: {what}")]
    BadMeta {
        /// Offset within the metadata section.
        at: u64,
        /// What is wrong there.
        what: &'static str,
    },
    /// The metadata describes a different number of kernels than the kernel
    /// table holds.
    #[error("metadata describes {meta} kernel(s), the kernel table has {table}")]
    MetaKernelCount {
        /// Kernels in the metadata.
        meta: u64,
        /// Kernels in the table.
        table: u64,
    },
    /// The metadata names a different number of parameters for a kernel than
    /// its entry in the kernel table declares.
    #[error(
        "metadata names {meta} parameter(s) for kernel {kernel}, its kernel entry declares {table}"
    )]
    MetaParamCount {
        /// Kernel index.
        kernel: u32,
        /// Parameters in the metadata.
        meta: u64,
        /// Parameters in the kernel entry.
        table: u32,
    },
    /// A debug label of a kernel is on a body the kernel does not have.
    #[error(
        "metadata of kernel {kernel}: a label is on body {body}, the kernel has {bodies} body(ies)"
    )]
    MetaLabelBody {
        /// Kernel index.
        kernel: u32,
        /// Body named by the label.
        body: u32,
        /// The kernel's body count.
        bodies: u32,
    },
    /// A debug label of a kernel names no word of its body: its word
    /// offset is at or past the body's end (a label names the word at its
    /// offset; the builder and the assembler refuse such a label too).
    #[error(
        "metadata of kernel {kernel}: label \"{label}\" is on word {word} of body {body}, which has {words} word(s): a label must name a word of its body"
    )]
    MetaLabelWord {
        /// Kernel index.
        kernel: u32,
        /// Body named by the label (within the kernel).
        body: u32,
        /// Word offset named by the label.
        word: u32,
        /// The body's length in words.
        words: u32,
        /// The label's text (shortened when long).
        label: ShortName,
    },
    /// Two kernels have the same name.
    #[error("kernels {first} and {second} have the same name \"{name}\"")]
    DuplicateKernelName {
        /// The first kernel with the name.
        first: u32,
        /// The later one.
        second: u32,
        /// The name (shortened when long).
        name: ShortName,
    },
}

/// What precedes a section in the file, for [`ParseError::SectionGap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectionSite {
    /// The section table.
    Table,
    /// Another section.
    Section(SectionKind),
}

impl core::fmt::Display for SectionSite {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SectionSite::Table => f.write_str("the section table"),
            SectionSite::Section(k) => write!(f, "section {k:?}"),
        }
    }
}

/// How a section's start disagrees with the end of what precedes it.
struct Gap(u64, u64);

impl core::fmt::Display for Gap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let Gap(offset, prev_end) = *self;
        if offset < prev_end {
            write!(f, "they overlap by {} bytes", prev_end - offset)
        } else {
            write!(f, "{} bytes are unaccounted for", offset - prev_end)
        }
    }
}

/// A kernel name kept inline (no allocation), cut at a character boundary
/// after [`ShortName::CAP`] bytes; displayed escaped, with `…` when cut.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ShortName {
    len: u8,
    cut: bool,
    bytes: [u8; ShortName::CAP],
}

impl ShortName {
    /// Most bytes kept.
    pub const CAP: usize = 48;

    /// `name`, shortened to at most [`ShortName::CAP`] bytes.
    pub fn new(name: &str) -> ShortName {
        let mut len = name.len().min(ShortName::CAP);
        while !name.is_char_boundary(len) {
            len -= 1;
        }
        let mut bytes = [0; ShortName::CAP];
        bytes[..len].copy_from_slice(&name.as_bytes()[..len]);
        ShortName {
            len: len as u8,
            cut: len < name.len(),
            bytes,
        }
    }

    /// The kept part of the name.
    pub fn as_str(&self) -> &str {
        // Always whole characters of a `str` (see `new`); never fails.
        core::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }

    /// True when the name was longer than what is kept.
    pub fn is_cut(&self) -> bool {
        self.cut
    }
}

impl core::fmt::Display for ShortName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.as_str().escape_debug())?;
        if self.cut {
            f.write_str("…")?;
        }
        Ok(())
    }
}

impl core::fmt::Debug for ShortName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "\"{self}\"")
    }
}
