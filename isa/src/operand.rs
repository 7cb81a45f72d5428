//! Operand field types: how each field packs into words and reads as text.

use core::fmt;

use crate::dtype::{DType, DTypeSet};
use crate::error::DecodeError;
use crate::word::{Packer, Unpacker};

/// A field of an instruction: packs into words and prints as assembler text.
///
/// `ctx` is the instruction's first element type; a [`Scalar`] prints as a
/// value of that type.
pub trait Operand: Sized + Copy + PartialEq + fmt::Debug {
    /// Width of the packed field in bits: 8, 16, 32 or 64.
    const BITS: u32;
    /// Appends the field to `p`.
    fn pack(&self, p: &mut Packer);
    /// Reads the field back.
    ///
    /// # Errors
    /// A [`DecodeError`] when the bits are not a valid value of the field.
    fn unpack(u: &mut Unpacker<'_>) -> Result<Self, DecodeError>;
    /// Writes the assembler text of the value.
    ///
    /// # Errors
    /// Only those of the formatter.
    fn write_text(&self, ctx: Option<DType>, f: &mut dyn fmt::Write) -> fmt::Result;
    /// Parses the assembler text of the value.
    fn parse_text(s: &str, ctx: Option<DType>) -> Option<Self>;
    /// The value from its raw field bits (as [`Operand::pack`] writes them);
    /// `None` when the bits are not a valid value.
    #[inline]
    fn from_raw(bits: u64) -> Option<Self> {
        // Fields start at bit 32 of the head; a 64-bit field in the next word.
        let mut words = [zerocopy::little_endian::U64::new(0); 2];
        if Self::BITS == 64 {
            words[1] = zerocopy::little_endian::U64::new(bits);
        } else {
            if Self::BITS < 64 && bits >> Self::BITS != 0 {
                return None;
            }
            words[0] = zerocopy::little_endian::U64::new(bits << 32);
        }
        let len = if Self::BITS == 64 { 2 } else { 1 };
        let mut u = Unpacker::new(&words[..len]);
        Self::unpack(&mut u).ok()
    }
    /// A valid value chosen by the random `bits` (for generated tests: every
    /// field of every opcode can be sampled without knowing its type).
    fn sample(bits: u64) -> Self;
    /// The value as a dtype, for fields that are one (used to find `ctx`).
    fn as_dtype(&self) -> Option<DType> {
        None
    }
}

macro_rules! int_operand {
    ($t:ty, $put:ident, $get:ident) => {
        impl Operand for $t {
            const BITS: u32 = <$t>::BITS;
            #[inline(always)]
            fn pack(&self, p: &mut Packer) {
                p.$put(*self);
            }
            #[inline(always)]
            fn unpack(u: &mut Unpacker<'_>) -> Result<Self, DecodeError> {
                u.$get()
            }
            fn write_text(&self, _: Option<DType>, f: &mut dyn fmt::Write) -> fmt::Result {
                write!(f, "{}", self)
            }
            /// Decimal, or hexadecimal with a `0x` prefix (hand-written
            /// assembly); the disassembler writes decimal.
            fn parse_text(s: &str, _: Option<DType>) -> Option<Self> {
                match s.strip_prefix("0x") {
                    Some(hex) => <$t>::from_str_radix(hex, 16).ok(),
                    None => s.parse().ok(),
                }
            }
            fn sample(bits: u64) -> Self {
                bits as $t
            }
        }
    };
}
int_operand!(u8, put_u8, get_u8);
int_operand!(u16, put_u16, get_u16);
int_operand!(u32, put_u32, get_u32);
int_operand!(u64, put_u64, get_u64);

impl Operand for DType {
    const BITS: u32 = 8;
    fn sample(bits: u64) -> Self {
        DType::INSTR[(bits % 6) as usize]
    }
    #[inline(always)]
    fn pack(&self, p: &mut Packer) {
        p.put_u8(*self as u8);
    }
    #[inline(always)]
    fn unpack(u: &mut Unpacker<'_>) -> Result<Self, DecodeError> {
        let v = u.get_u8()?;
        // i64 is a graph and tensor type: no instruction has it.
        DType::from_u8(v)
            .filter(|d| DTypeSet::ANY.contains(*d))
            .ok_or(DecodeError::BadDType(v))
    }
    fn write_text(&self, _: Option<DType>, f: &mut dyn fmt::Write) -> fmt::Result {
        f.write_str(self.name())
    }
    fn parse_text(s: &str, _: Option<DType>) -> Option<Self> {
        DType::from_name(s)
    }
    fn as_dtype(&self) -> Option<DType> {
        Some(*self)
    }
}

/// A scalar immediate: the raw 32 bits of an `f32` (for float instructions,
/// whose arithmetic runs in `f32`) or of an `i32` (for integer and bool ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Scalar(pub u32);

impl Scalar {
    /// An `f32` immediate.
    pub const fn f32(v: f32) -> Scalar {
        Scalar(v.to_bits())
    }
    /// An `i32` immediate.
    pub const fn i32(v: i32) -> Scalar {
        Scalar(v as u32)
    }
    /// The bits read as `f32`.
    pub const fn as_f32(self) -> f32 {
        f32::from_bits(self.0)
    }
    /// The bits read as `i32`.
    pub const fn as_i32(self) -> i32 {
        self.0 as i32
    }
}

impl Operand for Scalar {
    const BITS: u32 = 32;
    fn sample(bits: u64) -> Self {
        Scalar(bits as u32)
    }
    #[inline(always)]
    fn pack(&self, p: &mut Packer) {
        p.put_u32(self.0);
    }
    #[inline(always)]
    fn unpack(u: &mut Unpacker<'_>) -> Result<Self, DecodeError> {
        Ok(Scalar(u.get_u32()?))
    }
    fn write_text(&self, ctx: Option<DType>, f: &mut dyn fmt::Write) -> fmt::Result {
        match ctx {
            Some(d) if d.is_float() => {
                let v = self.as_f32();
                // `{:?}` prints the shortest text that parses back to the same
                // bits; NaN payloads and the sign of NaN are not kept by it.
                if v.is_nan() && self.0 != f32::NAN.to_bits() {
                    write!(f, "bits:{:#010x}", self.0)
                } else {
                    write!(f, "{:?}", v)
                }
            }
            _ => write!(f, "{}", self.as_i32()),
        }
    }
    fn parse_text(s: &str, ctx: Option<DType>) -> Option<Self> {
        if let Some(hex) = s.strip_prefix("bits:") {
            let hex = hex.strip_prefix("0x").unwrap_or(hex);
            return u32::from_str_radix(hex, 16).ok().map(Scalar);
        }
        match ctx {
            Some(d) if d.is_float() => match s {
                "inf" => Some(Scalar::f32(f32::INFINITY)),
                "-inf" => Some(Scalar::f32(f32::NEG_INFINITY)),
                _ => s.parse::<f32>().ok().map(Scalar::f32),
            },
            _ => s.parse::<i32>().ok().map(Scalar::i32),
        }
    }
}

/// Which tile-grid dimension drives a GM access's row or column tail, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum GridDim {
    /// The extent does not depend on the tile: every tile has the full extent.
    #[default]
    None,
    /// Grid dimension 0, 1 or 2.
    Dim(u8),
}

impl GridDim {
    /// The dimension index, if any.
    pub const fn index(self) -> Option<usize> {
        match self {
            GridDim::None => None,
            GridDim::Dim(d) => Some(d as usize),
        }
    }
}

impl Operand for GridDim {
    const BITS: u32 = 8;
    fn sample(bits: u64) -> Self {
        match bits % 4 {
            3 => GridDim::None,
            d => GridDim::Dim(d as u8),
        }
    }
    #[inline(always)]
    fn pack(&self, p: &mut Packer) {
        p.put_u8(match self {
            GridDim::None => 0xff,
            GridDim::Dim(d) => *d,
        });
    }
    #[inline(always)]
    fn unpack(u: &mut Unpacker<'_>) -> Result<Self, DecodeError> {
        match u.get_u8()? {
            0xff => Ok(GridDim::None),
            d @ 0..=2 => Ok(GridDim::Dim(d)),
            d => Err(DecodeError::BadField {
                field: "grid dimension",
                value: d as u64,
            }),
        }
    }
    fn write_text(&self, _: Option<DType>, f: &mut dyn fmt::Write) -> fmt::Result {
        match self {
            GridDim::None => f.write_str("-"),
            GridDim::Dim(d) => write!(f, "{d}"),
        }
    }
    fn parse_text(s: &str, _: Option<DType>) -> Option<Self> {
        match s {
            "-" => Some(GridDim::None),
            "0" => Some(GridDim::Dim(0)),
            "1" => Some(GridDim::Dim(1)),
            "2" => Some(GridDim::Dim(2)),
            _ => None,
        }
    }
}

/// The axis a 2-D reduction folds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Axis {
    /// Fold the rows: a `rows × cols` tile becomes `1 × cols`.
    Rows,
    /// Fold the columns: a `rows × cols` tile becomes `rows × 1`.
    Cols,
}

impl Operand for Axis {
    const BITS: u32 = 8;
    fn sample(bits: u64) -> Self {
        if bits & 1 == 0 {
            Axis::Rows
        } else {
            Axis::Cols
        }
    }
    #[inline(always)]
    fn pack(&self, p: &mut Packer) {
        p.put_u8(*self as u8);
    }
    #[inline(always)]
    fn unpack(u: &mut Unpacker<'_>) -> Result<Self, DecodeError> {
        match u.get_u8()? {
            0 => Ok(Axis::Rows),
            1 => Ok(Axis::Cols),
            v => Err(DecodeError::BadField {
                field: "axis",
                value: v as u64,
            }),
        }
    }
    fn write_text(&self, _: Option<DType>, f: &mut dyn fmt::Write) -> fmt::Result {
        f.write_str(match self {
            Axis::Rows => "rows",
            Axis::Cols => "cols",
        })
    }
    fn parse_text(s: &str, _: Option<DType>) -> Option<Self> {
        match s {
            "rows" => Some(Axis::Rows),
            "cols" => Some(Axis::Cols),
            _ => None,
        }
    }
}

/// Whether a load fills the part of its UB box outside the valid region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PadMode {
    /// Leave UB outside the valid region untouched.
    Keep,
    /// Fill every element of the `rows × pitch` box outside the valid region
    /// with the instruction's pad scalar.
    Fill,
}

impl Operand for PadMode {
    const BITS: u32 = 8;
    fn sample(bits: u64) -> Self {
        if bits & 1 == 0 {
            PadMode::Keep
        } else {
            PadMode::Fill
        }
    }
    #[inline(always)]
    fn pack(&self, p: &mut Packer) {
        p.put_u8(*self as u8);
    }
    #[inline(always)]
    fn unpack(u: &mut Unpacker<'_>) -> Result<Self, DecodeError> {
        match u.get_u8()? {
            0 => Ok(PadMode::Keep),
            1 => Ok(PadMode::Fill),
            v => Err(DecodeError::BadField {
                field: "pad mode",
                value: v as u64,
            }),
        }
    }
    fn write_text(&self, _: Option<DType>, f: &mut dyn fmt::Write) -> fmt::Result {
        f.write_str(match self {
            PadMode::Keep => "keep",
            PadMode::Fill => "fill",
        })
    }
    fn parse_text(s: &str, _: Option<DType>) -> Option<Self> {
        match s {
            "keep" => Some(PadMode::Keep),
            "fill" => Some(PadMode::Fill),
            _ => None,
        }
    }
}

/// Matmul options: transposes and accumulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct MmFlags {
    /// `a` is stored `k × m` (read transposed).
    pub trans_a: bool,
    /// `b` is stored `n × k` (read transposed).
    pub trans_b: bool,
    /// Add into `dst` instead of overwriting it.
    pub accumulate: bool,
}

impl MmFlags {
    const NAMES: [&'static str; 3] = ["ta", "tb", "acc"];

    const fn bits(self) -> u8 {
        self.trans_a as u8 | (self.trans_b as u8) << 1 | (self.accumulate as u8) << 2
    }
}

impl Operand for MmFlags {
    const BITS: u32 = 8;
    fn sample(bits: u64) -> Self {
        MmFlags {
            trans_a: bits & 1 != 0,
            trans_b: bits & 2 != 0,
            accumulate: bits & 4 != 0,
        }
    }
    #[inline(always)]
    fn pack(&self, p: &mut Packer) {
        p.put_u8(self.bits());
    }
    #[inline(always)]
    fn unpack(u: &mut Unpacker<'_>) -> Result<Self, DecodeError> {
        let v = u.get_u8()?;
        if v > 0b111 {
            return Err(DecodeError::BadField {
                field: "matmul flags",
                value: v as u64,
            });
        }
        Ok(MmFlags {
            trans_a: v & 1 != 0,
            trans_b: v & 2 != 0,
            accumulate: v & 4 != 0,
        })
    }
    fn write_text(&self, _: Option<DType>, f: &mut dyn fmt::Write) -> fmt::Result {
        let bits = self.bits();
        if bits == 0 {
            return f.write_str("none");
        }
        let mut first = true;
        for (i, name) in MmFlags::NAMES.iter().enumerate() {
            if bits & (1 << i) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                first = false;
                f.write_str(name)?;
            }
        }
        Ok(())
    }
    fn parse_text(s: &str, _: Option<DType>) -> Option<Self> {
        let mut flags = MmFlags::default();
        if s == "none" {
            return Some(flags);
        }
        for part in s.split('|') {
            match part {
                "ta" => flags.trans_a = true,
                "tb" => flags.trans_b = true,
                "acc" => flags.accumulate = true,
                _ => return None,
            }
        }
        Some(flags)
    }
}
