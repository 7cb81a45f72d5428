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
    /// The metadata section does not decode.
    #[error("metadata section is malformed or does not match the kernel table")]
    BadMeta,
}
