//! The 64-bit word encoding: head words, pipes, synchronisation flags and
//! the bit packer that lays operand fields out after the head.
//!
//! Every instruction starts with a head word:
//!
//! | bits   | field                                            |
//! |--------|--------------------------------------------------|
//! | 0..8   | opcode                                           |
//! | 8..16  | length of the instruction in words, head included|
//! | 16..19 | pipe the instruction issues on                   |
//! | 19..20 | reserved, zero                                   |
//! | 20..24 | wait mask: one bit per pipe this instruction waits for |
//! | 24..32 | reserved, zero                                   |
//! | 32..64 | the first operand fields                         |
//!
//! Operand fields are packed little-endian-first after bit 32 of the head, each
//! aligned to its own width (8, 16, 32 or 64 bits), continuing into the
//! following words. Unused bits are zero; the decoder rejects anything else.

use core::fmt;

use crate::error::DecodeError;

/// Maximum length of one instruction in words.
pub const MAX_INSTR_WORDS: usize = 16;

/// Bit offset of the first operand field in the head word.
pub const OPERAND_BIT0: u32 = 32;

/// The hardware pipe an instruction issues on.
///
/// Instructions on one pipe execute in order; instructions on different pipes
/// may overlap unless a wait flag orders them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Pipe {
    /// Global memory → UB transfers (MTE2 on Ascend).
    Load = 0,
    /// The vector unit.
    Vector = 1,
    /// The matrix (cube) unit.
    Cube = 2,
    /// UB → global memory transfers (MTE3 on Ascend).
    Store = 3,
    /// Scalar control: barriers and the end marker.
    Control = 4,
}

impl Pipe {
    /// The four data pipes, in wait-mask bit order.
    pub const DATA: [Pipe; 4] = [Pipe::Load, Pipe::Vector, Pipe::Cube, Pipe::Store];

    /// Decodes the 3-bit pipe field.
    pub const fn from_bits(v: u8) -> Option<Pipe> {
        match v {
            0 => Some(Pipe::Load),
            1 => Some(Pipe::Vector),
            2 => Some(Pipe::Cube),
            3 => Some(Pipe::Store),
            4 => Some(Pipe::Control),
            _ => None,
        }
    }

    /// Lower-case name used by the assembler.
    pub const fn name(self) -> &'static str {
        match self {
            Pipe::Load => "load",
            Pipe::Vector => "vector",
            Pipe::Cube => "cube",
            Pipe::Store => "store",
            Pipe::Control => "control",
        }
    }

    /// Parses a name produced by [`Pipe::name`].
    pub fn from_name(s: &str) -> Option<Pipe> {
        [
            Pipe::Load,
            Pipe::Vector,
            Pipe::Cube,
            Pipe::Store,
            Pipe::Control,
        ]
        .into_iter()
        .find(|p| p.name() == s)
    }
}

impl fmt::Display for Pipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which pipes an instruction waits for before it starts: bit `p` set means
/// "wait until every earlier instruction on data pipe `p` has completed".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WaitMask(u8);

impl WaitMask {
    /// Waits for nothing.
    pub const NONE: WaitMask = WaitMask(0);

    /// Builds a mask from its four-bit encoding.
    pub const fn from_bits(bits: u8) -> Option<WaitMask> {
        if bits < 16 {
            Some(WaitMask(bits))
        } else {
            None
        }
    }

    /// The four-bit encoding.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// This mask plus a wait on `pipe` (ignored for [`Pipe::Control`]).
    #[must_use]
    pub const fn with(self, pipe: Pipe) -> WaitMask {
        match pipe {
            Pipe::Control => self,
            p => WaitMask(self.0 | 1 << p as u8),
        }
    }

    /// True when the mask waits for `pipe`.
    pub const fn waits_for(self, pipe: Pipe) -> bool {
        match pipe {
            Pipe::Control => false,
            p => self.0 & (1 << p as u8) != 0,
        }
    }

    /// True when no pipe is waited for.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The pipes waited for, in bit order.
    pub fn iter(self) -> impl Iterator<Item = Pipe> {
        Pipe::DATA.into_iter().filter(move |p| self.waits_for(*p))
    }
}

/// A decoded head word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// Raw opcode byte.
    pub opcode: u8,
    /// Length in words, head included.
    pub len: u8,
    /// Pipe field.
    pub pipe: Pipe,
    /// Synchronisation flags.
    pub wait: WaitMask,
}

impl Head {
    /// Splits a head word into its fields.
    ///
    /// # Errors
    /// [`DecodeError::BadPipe`] for an unknown pipe, [`DecodeError::ReservedBits`]
    /// when a reserved bit is set, [`DecodeError::ZeroLength`] for a zero length.
    pub fn decode(word: u64) -> Result<Head, DecodeError> {
        let opcode = word as u8;
        let len = (word >> 8) as u8;
        let pipe_bits = ((word >> 16) & 0x7) as u8;
        let pipe = Pipe::from_bits(pipe_bits).ok_or(DecodeError::BadPipe(pipe_bits))?;
        if word & (1 << 19) != 0 || (word >> 24) & 0xff != 0 {
            return Err(DecodeError::ReservedBits);
        }
        if len == 0 {
            return Err(DecodeError::ZeroLength);
        }
        let wait = WaitMask(((word >> 20) & 0xf) as u8);
        Ok(Head {
            opcode,
            len,
            pipe,
            wait,
        })
    }

    /// The low 32 bits of the head word (operands occupy the high half).
    pub const fn encode_low(self) -> u64 {
        self.opcode as u64
            | (self.len as u64) << 8
            | (self.pipe as u64) << 16
            | (self.wait.0 as u64) << 20
    }
}

/// Packs operand fields into words, each field aligned to its width.
#[derive(Debug)]
pub struct Packer {
    words: [u64; MAX_INSTR_WORDS],
    bit: u32,
}

impl Default for Packer {
    fn default() -> Self {
        Packer::new()
    }
}

impl Packer {
    /// A packer positioned after the head's own fields.
    pub const fn new() -> Packer {
        Packer {
            words: [0; MAX_INSTR_WORDS],
            bit: OPERAND_BIT0,
        }
    }

    #[inline(always)]
    fn put(&mut self, value: u64, width: u32) {
        self.bit = self.bit.next_multiple_of(width);
        let word = (self.bit / 64) as usize;
        let shift = self.bit % 64;
        // The instruction table bounds every layout far below MAX_INSTR_WORDS
        // (checked by a test), so `word` is always in range.
        self.words[word] |= if width == 64 { value } else { value << shift };
        self.bit += width;
    }

    /// Appends an 8-bit field.
    #[inline(always)]
    pub fn put_u8(&mut self, v: u8) {
        self.put(v as u64, 8);
    }
    /// Appends a 16-bit field.
    #[inline(always)]
    pub fn put_u16(&mut self, v: u16) {
        self.put(v as u64, 16);
    }
    /// Appends a 32-bit field.
    #[inline(always)]
    pub fn put_u32(&mut self, v: u32) {
        self.put(v as u64, 32);
    }
    /// Appends a 64-bit field.
    #[inline(always)]
    pub fn put_u64(&mut self, v: u64) {
        self.put(v, 64);
    }

    /// Number of words used so far (at least one: the head).
    pub const fn len_words(&self) -> usize {
        self.bit.div_ceil(64) as usize
    }

    /// Writes the head's own fields into the low half of word 0.
    pub fn set_head(&mut self, head: Head) {
        self.words[0] = (self.words[0] & !0xffff_ffff) | head.encode_low();
    }

    /// The packed words (head first).
    pub fn words(&self) -> &[u64] {
        &self.words[..self.len_words()]
    }
}

/// Reads operand fields back in the order a [`Packer`] wrote them.
#[derive(Debug)]
pub struct Unpacker<'a> {
    words: &'a [zerocopy::little_endian::U64],
    bit: u32,
}

impl<'a> Unpacker<'a> {
    /// Reads the operands of the instruction whose words are `words`
    /// (head included, exactly the instruction's length).
    pub const fn new(words: &'a [zerocopy::little_endian::U64]) -> Unpacker<'a> {
        Unpacker {
            words,
            bit: OPERAND_BIT0,
        }
    }

    #[inline(always)]
    fn get(&mut self, width: u32) -> Result<u64, DecodeError> {
        let aligned = self.bit.next_multiple_of(width);
        if aligned != self.bit {
            // Alignment gaps never cross a word boundary: check they are zero.
            let gap_word = (self.bit / 64) as usize;
            let lo = self.bit % 64;
            let hi = match aligned % 64 {
                0 => 64,
                r => r,
            };
            let w = self
                .words
                .get(gap_word)
                .ok_or(DecodeError::OperandsTruncated)?
                .get();
            let mask = if hi == 64 {
                !0u64 << lo
            } else {
                ((1u64 << hi) - 1) & (!0u64 << lo)
            };
            if w & mask != 0 {
                return Err(DecodeError::ReservedBits);
            }
        }
        self.bit = aligned;
        let word = (self.bit / 64) as usize;
        let shift = self.bit % 64;
        let w = self
            .words
            .get(word)
            .ok_or(DecodeError::OperandsTruncated)?
            .get();
        self.bit += width;
        Ok(if width == 64 {
            w
        } else {
            (w >> shift) & ((1u64 << width) - 1)
        })
    }

    /// Reads an 8-bit field.
    ///
    /// # Errors
    /// [`DecodeError::OperandsTruncated`] past the instruction's end.
    #[inline(always)]
    pub fn get_u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.get(8)? as u8)
    }
    /// Reads a 16-bit field.
    ///
    /// # Errors
    /// [`DecodeError::OperandsTruncated`] past the instruction's end.
    #[inline(always)]
    pub fn get_u16(&mut self) -> Result<u16, DecodeError> {
        Ok(self.get(16)? as u16)
    }
    /// Reads a 32-bit field.
    ///
    /// # Errors
    /// [`DecodeError::OperandsTruncated`] past the instruction's end.
    #[inline(always)]
    pub fn get_u32(&mut self) -> Result<u32, DecodeError> {
        Ok(self.get(32)? as u32)
    }
    /// Reads a 64-bit field.
    ///
    /// # Errors
    /// [`DecodeError::OperandsTruncated`] past the instruction's end.
    #[inline(always)]
    pub fn get_u64(&mut self) -> Result<u64, DecodeError> {
        self.get(64)
    }

    /// Checks that every bit after the last field is zero.
    ///
    /// # Errors
    /// [`DecodeError::ReservedBits`] when padding bits are set.
    pub fn finish(self) -> Result<(), DecodeError> {
        let used_words = self.bit.div_ceil(64) as usize;
        if used_words != self.words.len() {
            return Err(DecodeError::ReservedBits);
        }
        let tail = self.bit % 64;
        if tail != 0 {
            if let Some(last) = self.words.last() {
                if last.get() >> tail != 0 {
                    return Err(DecodeError::ReservedBits);
                }
            }
        }
        Ok(())
    }
}
