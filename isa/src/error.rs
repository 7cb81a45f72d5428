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
