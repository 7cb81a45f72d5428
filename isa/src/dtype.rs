//! Element types and sets of element types.

use core::fmt;

/// The element type of a tensor or UB tile.
///
/// Encoded as one byte in instruction operands and parameter tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DType {
    /// IEEE 754 binary32.
    F32 = 0,
    /// IEEE 754 binary16.
    F16 = 1,
    /// bfloat16 (the upper half of a binary32).
    BF16 = 2,
    /// Two's complement 32-bit integer.
    I32 = 3,
    /// Two's complement 8-bit integer.
    I8 = 4,
    /// Boolean, one byte per element, 0 or 1.
    Bool = 5,
    /// Two's complement 64-bit integer: a graph and tensor type only. No
    /// instruction accepts it (no [`DTypeSet`] constant holds it, so the
    /// verifier refuses it in every dtype field); graphs compute it as
    /// [`DType::I32`], checking at the inputs and constants that every
    /// value fits.
    I64 = 6,
}

impl DType {
    /// Every element type, in encoding order.
    pub const ALL: [DType; 7] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I8,
        DType::Bool,
        DType::I64,
    ];

    /// The types instructions and kernel parameters handle: all but
    /// [`DType::I64`], in encoding order.
    pub const INSTR: [DType; 6] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I8,
        DType::Bool,
    ];

    /// Decodes the one-byte encoding.
    pub const fn from_u8(v: u8) -> Option<DType> {
        match v {
            0 => Some(DType::F32),
            1 => Some(DType::F16),
            2 => Some(DType::BF16),
            3 => Some(DType::I32),
            4 => Some(DType::I8),
            5 => Some(DType::Bool),
            6 => Some(DType::I64),
            _ => None,
        }
    }

    /// Size of one element in bytes.
    pub const fn size(self) -> u32 {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I8 | DType::Bool => 1,
            DType::I64 => 8,
        }
    }

    /// The lower-case name used by the assembler (`f32`, `bf16`, …).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::I8 => "i8",
            DType::Bool => "bool",
            DType::I64 => "i64",
        }
    }

    /// Parses a name produced by [`DType::name`].
    pub fn from_name(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }

    /// True for the floating-point types.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// The singleton set of this type.
    pub const fn set(self) -> DTypeSet {
        DTypeSet(1 << self as u8)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of element types: which types an opcode accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DTypeSet(u8);

impl DTypeSet {
    /// f32, f16, bf16.
    pub const FLOAT: DTypeSet = DTypeSet(0b0_0111);
    /// f32, f16, bf16, i32, i8.
    pub const NUM: DTypeSet = DTypeSet(0b1_1111);
    /// f32, f16, bf16, i32, i8 — the signed types (all numeric types are signed).
    pub const SIGNED: DTypeSet = DTypeSet::NUM;
    /// i32, i8.
    pub const INT: DTypeSet = DTypeSet(0b1_1000);
    /// bool.
    pub const BOOL: DTypeSet = DTypeSet(0b10_0000);
    /// Every type an instruction handles (all but [`DType::I64`]).
    pub const ANY: DTypeSet = DTypeSet(0b11_1111);
    /// Types a matmul may read: f32, f16, bf16, i8.
    pub const MM_IN: DTypeSet = DTypeSet(0b1_0111);
    /// Types a matmul may write: f32, f16, bf16, i32.
    pub const MM_OUT: DTypeSet = DTypeSet(0b0_1111);

    /// True when `d` is in the set.
    pub const fn contains(self, d: DType) -> bool {
        self.0 & (1 << d as u8) != 0
    }

    /// The members, in encoding order.
    pub fn iter(self) -> impl Iterator<Item = DType> {
        DType::ALL.into_iter().filter(move |d| self.contains(*d))
    }
}

impl fmt::Display for DTypeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for d in self.iter() {
            if !first {
                f.write_str("|")?;
            }
            first = false;
            f.write_str(d.name())?;
        }
        Ok(())
    }
}
