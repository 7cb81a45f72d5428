//! Host tensors: a dtype, a concrete shape and little-endian element bytes.
//!
//! [`Tensor`] is the currency between the runtime, the devices, the reference
//! evaluator and `.npy` files. Elements are stored row-major (C order) in the
//! dtype's little-endian encoding: `f32`/`i32` in 4 bytes, `f16`/`bf16` in 2
//! (IEEE binary16 and the upper half of a binary32), `i8` and `bool` in 1
//! (`bool` is 0 or 1).
//!
//! The value helpers here ([`round_float`], [`convert`], [`wrap_int`]) define
//! how the reference evaluator turns an `f64` result into a value of a dtype;
//! they follow the instruction set's documentation (round to nearest, ties to
//! even, for floats; truncation with saturation and NaN → 0 for float → int
//! conversions; two's complement wrap-around for integer arithmetic).

use crate::recycle::Home;
use dvm_isa::DType;
use half::{bf16, f16};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

/// Errors from constructing or comparing tensors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TensorError {
    /// The number of values or bytes does not match the shape.
    #[error("a {dtype} tensor of shape {shape:?} needs {expected} {unit}, got {got}")]
    Length {
        /// Element type.
        dtype: DType,
        /// Shape.
        shape: Vec<u64>,
        /// Values or bytes needed.
        expected: u64,
        /// Values or bytes given.
        got: u64,
        /// `values` or `bytes`.
        unit: &'static str,
    },
    /// The element count of a shape does not fit in memory.
    #[error("shape {shape:?} has too many elements")]
    TooLarge {
        /// The shape.
        shape: Vec<u64>,
    },
    /// A `bool` element byte is neither 0 nor 1.
    #[error("bool element {index} has byte value {value} (must be 0 or 1)")]
    BadBool {
        /// Element index.
        index: u64,
        /// The byte.
        value: u8,
    },
    /// Two tensors compared element-wise have different shapes.
    #[error("cannot compare a tensor of shape {lhs:?} with one of shape {rhs:?}")]
    ShapeMismatch {
        /// First shape.
        lhs: Vec<u64>,
        /// Second shape.
        rhs: Vec<u64>,
    },
    /// A typed accessor was used on a tensor of another dtype.
    #[error("expected a {expected} tensor, found {found}")]
    WrongDType {
        /// The dtype the accessor reads.
        expected: DType,
        /// The tensor's dtype.
        found: DType,
    },
}

/// A dense host tensor: a dtype, a concrete shape and row-major, little-endian
/// element bytes (`bool` as 0 or 1).
///
/// Its bytes are stored 8-byte aligned, so that [`Tensor::as_slice`] views
/// them as elements without a copy.
#[derive(Clone, PartialEq, Eq)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<u64>,
    data: Storage,
}

/// Element bytes in 8-byte aligned memory: `len` bytes at the start of
/// `words`, the bytes after them zero; memory from a
/// [`crate::BufferPool`] goes back to it (`home`) when dropped.
pub(crate) struct Storage {
    words: Vec<u64>,
    len: usize,
    home: Option<Home>,
}

impl Clone for Storage {
    /// A copy in memory of its own (not the pool's).
    fn clone(&self) -> Storage {
        Storage {
            words: self.words.clone(),
            len: self.len,
            home: None,
        }
    }
}

impl PartialEq for Storage {
    fn eq(&self, other: &Storage) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for Storage {}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Some(pool) = self.home.take().and_then(|h| h.upgrade()) {
            pool.give(std::mem::take(&mut self.words));
        }
    }
}

impl Storage {
    /// `words` holding `len` bytes, given back to `home` when dropped.
    pub(crate) fn pooled(words: Vec<u64>, len: usize, home: Home) -> Storage {
        Storage {
            words,
            len,
            home: Some(home),
        }
    }

    /// `len` zero bytes (zeroed memory straight from the allocator), or
    /// [`TensorError::TooLarge`] if they cannot be allocated.
    fn zeroed(shape: &[u64], len: usize) -> Result<Storage, TensorError> {
        let words = <u64 as FromZeros>::new_vec_zeroed(len.div_ceil(8)).map_err(|_| {
            TensorError::TooLarge {
                shape: shape.to_vec(),
            }
        })?;
        Ok(Storage {
            words,
            len,
            home: None,
        })
    }

    fn bytes(&self) -> &[u8] {
        &self.words.as_bytes()[..self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.words.as_mut_bytes()[..self.len]
    }

    /// A copy of `bytes` in aligned memory.
    fn copy_of(shape: &[u64], bytes: &[u8]) -> Result<Storage, TensorError> {
        let mut s = Storage::zeroed(shape, bytes.len())?;
        s.bytes_mut().copy_from_slice(bytes);
        Ok(s)
    }
}

/// Element types a tensor's bytes can be viewed as in place
/// ([`Tensor::as_slice`]): `f32`, `i32`, `i8`, [`half::f16`] and
/// [`half::bf16`]. `bool` tensors are read through [`Tensor::bytes`] (0 or
/// 1 per element), as a `&mut [bool]` could store other bytes.
pub trait Element: FromBytes + IntoBytes + Immutable + KnownLayout + Copy + sealed::Sealed {
    /// The dtype whose elements this type holds.
    const DTYPE: DType;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! elements {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
        }
    )*};
}

elements!(f32 => F32, i32 => I32, i8 => I8, f16 => F16, bf16 => BF16);

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const SHOWN: usize = 16;
        let vals = self.to_f64_vec();
        let head: Vec<f64> = vals.iter().copied().take(SHOWN).collect();
        write!(f, "Tensor({} {:?} {:?}", self.dtype, self.shape, head)?;
        if vals.len() > SHOWN {
            write!(f, " … {} more", vals.len() - SHOWN)?;
        }
        f.write_str(")")
    }
}

/// Number of elements of `shape`, if it fits in `usize`.
pub fn numel(shape: &[u64]) -> Option<usize> {
    shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .and_then(|n| usize::try_from(n).ok())
}

/// Elements and bytes of a `dtype` tensor of `shape`, if its bytes fit
/// an address space (at most `isize::MAX`).
pub fn byte_size(dtype: DType, shape: &[u64]) -> Option<(usize, usize)> {
    let n = numel(shape)?;
    let bytes = n.checked_mul(dtype.size() as usize)?;
    (bytes <= isize::MAX as usize).then_some((n, bytes))
}

pub(crate) fn byte_len(dtype: DType, shape: &[u64]) -> Result<(usize, usize), TensorError> {
    byte_size(dtype, shape).ok_or_else(|| TensorError::TooLarge {
        shape: shape.to_vec(),
    })
}

impl Tensor {
    /// A tensor over `data`, which holds exactly the bytes of `shape`.
    pub(crate) fn from_storage(dtype: DType, shape: Vec<u64>, data: Storage) -> Tensor {
        Tensor { dtype, shape, data }
    }

    /// A tensor from its little-endian element bytes (copied into aligned
    /// memory; [`Tensor::zeros`] and [`Tensor::bytes_mut`] fill a tensor
    /// without the copy).
    ///
    /// # Errors
    ///
    /// [`TensorError::Length`] if `data` is not exactly the shape's byte size,
    /// [`TensorError::TooLarge`] if the shape's size overflows,
    /// [`TensorError::BadBool`] for a `bool` byte other than 0 or 1.
    pub fn new(dtype: DType, shape: Vec<u64>, data: Vec<u8>) -> Result<Tensor, TensorError> {
        let (_, bytes) = byte_len(dtype, &shape)?;
        if data.len() != bytes {
            return Err(TensorError::Length {
                dtype,
                shape,
                expected: bytes as u64,
                got: data.len() as u64,
                unit: "bytes",
            });
        }
        if dtype == DType::Bool {
            if let Some((i, &b)) = data.iter().enumerate().find(|(_, &b)| b > 1) {
                return Err(TensorError::BadBool {
                    index: i as u64,
                    value: b,
                });
            }
        }
        let data = Storage::copy_of(&shape, &data)?;
        Ok(Tensor { dtype, shape, data })
    }

    /// A tensor of zeros (`false` for `bool`).
    ///
    /// # Errors
    ///
    /// [`TensorError::TooLarge`] if the shape's byte size overflows or cannot
    /// be allocated.
    pub fn zeros(dtype: DType, shape: &[u64]) -> Result<Tensor, TensorError> {
        let (_, bytes) = byte_len(dtype, shape)?;
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            data: Storage::zeroed(shape, bytes)?,
        })
    }

    fn check_len(dtype: DType, shape: &[u64], got: usize) -> Result<(), TensorError> {
        let (n, _) = byte_len(dtype, shape)?;
        if n != got {
            return Err(TensorError::Length {
                dtype,
                shape: shape.to_vec(),
                expected: n as u64,
                got: got as u64,
                unit: "values",
            });
        }
        Ok(())
    }

    /// An `f32` tensor from row-major values.
    ///
    /// # Errors
    ///
    /// [`TensorError::Length`] if `values.len()` is not the shape's element count.
    pub fn from_f32(shape: &[u64], values: &[f32]) -> Result<Tensor, TensorError> {
        Tensor::from_elements(shape, values)
    }

    /// An `i32` tensor from row-major values.
    ///
    /// # Errors
    ///
    /// [`TensorError::Length`] if `values.len()` is not the shape's element count.
    pub fn from_i32(shape: &[u64], values: &[i32]) -> Result<Tensor, TensorError> {
        Tensor::from_elements(shape, values)
    }

    /// An `i8` tensor from row-major values.
    ///
    /// # Errors
    ///
    /// [`TensorError::Length`] if `values.len()` is not the shape's element count.
    pub fn from_i8(shape: &[u64], values: &[i8]) -> Result<Tensor, TensorError> {
        Tensor::from_elements(shape, values)
    }

    /// A `bool` tensor from row-major values.
    ///
    /// # Errors
    ///
    /// [`TensorError::Length`] if `values.len()` is not the shape's element count.
    pub fn from_bool(shape: &[u64], values: &[bool]) -> Result<Tensor, TensorError> {
        Tensor::check_len(DType::Bool, shape, values.len())?;
        let mut t = Tensor::zeros(DType::Bool, shape)?;
        for (b, &v) in t.bytes_mut().iter_mut().zip(values) {
            *b = u8::from(v);
        }
        Ok(t)
    }

    /// A tensor of `T`'s dtype from row-major values (`f32`, `i32`, `i8`,
    /// `f16`, `bf16`).
    ///
    /// # Errors
    ///
    /// [`TensorError::Length`] if `values.len()` is not the shape's element
    /// count, [`TensorError::TooLarge`] if it cannot be allocated.
    pub fn from_elements<T: Element>(shape: &[u64], values: &[T]) -> Result<Tensor, TensorError> {
        Tensor::check_len(T::DTYPE, shape, values.len())?;
        let mut t = Tensor::zeros(T::DTYPE, shape)?;
        let size = std::mem::size_of::<T>();
        for (dst, v) in t.bytes_mut().chunks_exact_mut(size).zip(values) {
            dst.copy_from_slice(v.as_bytes());
            if cfg!(target_endian = "big") {
                dst.reverse();
            }
        }
        Ok(t)
    }

    /// A tensor of `dtype` from row-major `f64` values, each converted with
    /// [`convert`] (floats round to nearest even; ints truncate and saturate,
    /// NaN → 0; bool is `x != 0`).
    ///
    /// # Errors
    ///
    /// [`TensorError::Length`] if `values.len()` is not the shape's element count.
    pub fn from_f64(dtype: DType, shape: &[u64], values: &[f64]) -> Result<Tensor, TensorError> {
        Tensor::check_len(dtype, shape, values.len())?;
        let mut data = Vec::with_capacity(values.len() * dtype.size() as usize);
        for &v in values {
            encode(dtype, convert(dtype, v), &mut data);
        }
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            data: Storage::copy_of(shape, &data)?,
        })
    }

    /// A tensor with every element `value` (converted as by [`Tensor::from_f64`]).
    ///
    /// # Errors
    ///
    /// [`TensorError::TooLarge`] if the shape's byte size overflows or cannot
    /// be allocated.
    pub fn full(dtype: DType, shape: &[u64], value: f64) -> Result<Tensor, TensorError> {
        let mut one = Vec::new();
        encode(dtype, convert(dtype, value), &mut one);
        let mut t = Tensor::zeros(dtype, shape)?;
        for dst in t.bytes_mut().chunks_exact_mut(one.len()) {
            dst.copy_from_slice(&one);
        }
        Ok(t)
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.data.len / self.dtype.size() as usize
    }

    /// The little-endian element bytes (8-byte aligned).
    pub fn bytes(&self) -> &[u8] {
        self.data.bytes()
    }

    /// The element bytes, mutable (the length cannot change; a `bool`
    /// tensor's bytes must stay 0 or 1).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.data.bytes_mut()
    }

    /// Consumes the tensor, returning a copy of its element bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.data.bytes().to_vec()
    }

    /// The elements in place, without a copy: `T` must be the dtype's
    /// element type (`f32` for [`DType::F32`], [`half::f16`] for
    /// [`DType::F16`], …).
    ///
    /// ```
    /// use dvm_tensor::Tensor;
    ///
    /// let t = Tensor::from_f32(&[2, 2], &[1.0, 2.0, 3.0, 4.0])?;
    /// assert_eq!(t.as_slice::<f32>()?, &[1.0, 2.0, 3.0, 4.0]);
    /// assert!(t.as_slice::<i32>().is_err());
    /// # Ok::<(), dvm_tensor::TensorError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`TensorError::WrongDType`] if `T` is not the tensor's element type.
    pub fn as_slice<T: Element>(&self) -> Result<&[T], TensorError> {
        self.expect(T::DTYPE)?;
        Ok(elements(self.data.bytes()))
    }

    /// The elements in place, mutable (see [`Tensor::as_slice`]).
    ///
    /// # Errors
    ///
    /// [`TensorError::WrongDType`] if `T` is not the tensor's element type.
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T], TensorError> {
        self.expect(T::DTYPE)?;
        Ok(elements_mut(self.data.bytes_mut()))
    }

    /// The same elements under another shape with the same element count.
    ///
    /// # Errors
    ///
    /// [`TensorError::Length`] if the element counts differ.
    pub fn reshaped(mut self, shape: &[u64]) -> Result<Tensor, TensorError> {
        Tensor::check_len(self.dtype, shape, self.numel())?;
        self.shape = shape.to_vec();
        Ok(self)
    }

    /// Element `i` as `f64` (exact for every dtype). `None` past the end.
    pub fn get_f64(&self, i: usize) -> Option<f64> {
        let size = self.dtype.size() as usize;
        let start = i.checked_mul(size)?;
        let bytes = self.bytes().get(start..start.checked_add(size)?)?;
        Some(decode(self.dtype, bytes))
    }

    /// Every element as `f64`, row-major (exact for every dtype; bool is 0 or 1).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.bytes()
            .chunks_exact(self.dtype.size() as usize)
            .map(|b| decode(self.dtype, b))
            .collect()
    }

    /// Every element as `f32` (exact for the float types and `i8`; `i32`
    /// rounds to nearest).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        self.to_f64_vec().into_iter().map(|v| v as f32).collect()
    }

    /// A copy of the elements of an `f32` tensor ([`Tensor::as_slice`]
    /// borrows them without copying).
    ///
    /// # Errors
    ///
    /// [`TensorError::WrongDType`] for another dtype.
    pub fn as_f32_vec(&self) -> Result<Vec<f32>, TensorError> {
        self.expect(DType::F32)?;
        Ok(self.to_f32_vec())
    }

    /// A copy of the elements of an `i32` tensor ([`Tensor::as_slice`]
    /// borrows them without copying).
    ///
    /// # Errors
    ///
    /// [`TensorError::WrongDType`] for another dtype.
    pub fn as_i32_vec(&self) -> Result<Vec<i32>, TensorError> {
        self.expect(DType::I32)?;
        Ok(self
            .bytes()
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    fn expect(&self, dtype: DType) -> Result<(), TensorError> {
        if self.dtype == dtype {
            Ok(())
        } else {
            Err(TensorError::WrongDType {
                expected: dtype,
                found: self.dtype,
            })
        }
    }

    /// The largest `|a - b|` over all elements (compared as `f64`). Two NaNs
    /// (or two equal infinities) count as equal; NaN against a number, or
    /// different infinities, give `+inf`. 0 for empty tensors.
    ///
    /// # Errors
    ///
    /// [`TensorError::ShapeMismatch`] if the shapes differ (dtypes may differ).
    pub fn max_abs_diff(&self, other: &Tensor) -> Result<f64, TensorError> {
        self.same_shape(other)?;
        let mut worst = 0.0f64;
        for i in 0..self.numel() {
            let (a, b) = (self.value(i), other.value(i));
            let d = if a == b || (a.is_nan() && b.is_nan()) {
                0.0
            } else if a.is_nan() || b.is_nan() {
                f64::INFINITY
            } else {
                (a - b).abs()
            };
            worst = worst.max(d);
        }
        Ok(worst)
    }

    /// True if every element satisfies `|a - b| <= atol + rtol * |b|`
    /// (`self` is `a`, `other` is `b`, as in NumPy). NaNs match NaNs and
    /// infinities match equal infinities.
    ///
    /// # Errors
    ///
    /// [`TensorError::ShapeMismatch`] if the shapes differ.
    pub fn allclose(&self, other: &Tensor, rtol: f64, atol: f64) -> Result<bool, TensorError> {
        self.same_shape(other)?;
        Ok((0..self.numel()).all(|i| {
            let (a, b) = (self.value(i), other.value(i));
            a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= atol + rtol * b.abs()
        }))
    }

    fn value(&self, i: usize) -> f64 {
        self.get_f64(i).unwrap_or(f64::NAN)
    }

    fn same_shape(&self, other: &Tensor) -> Result<(), TensorError> {
        if self.shape == other.shape {
            Ok(())
        } else {
            Err(TensorError::ShapeMismatch {
                lhs: self.shape.clone(),
                rhs: other.shape.clone(),
            })
        }
    }
}

/// `bytes`, whose start is 8-byte aligned and whose length is a multiple of
/// `T`'s size, as elements.
fn elements<T: Element>(bytes: &[u8]) -> &[T] {
    match <[T]>::ref_from_bytes(bytes) {
        Ok(v) => v,
        Err(_) => unreachable!("tensor storage is aligned and sized for its dtype"),
    }
}

/// [`elements`], mutable.
fn elements_mut<T: Element>(bytes: &mut [u8]) -> &mut [T] {
    match <[T]>::mut_from_bytes(bytes) {
        Ok(v) => v,
        Err(_) => unreachable!("tensor storage is aligned and sized for its dtype"),
    }
}

/// Decodes one element (the slice has the dtype's size).
fn decode(dtype: DType, b: &[u8]) -> f64 {
    match dtype {
        DType::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DType::F16 => f16::from_le_bytes([b[0], b[1]]).to_f64(),
        DType::BF16 => bf16::from_le_bytes([b[0], b[1]]).to_f64(),
        DType::I32 => f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DType::I8 => f64::from(b[0] as i8),
        DType::Bool => f64::from(u8::from(b[0] != 0)),
        DType::I64 => i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f64,
    }
}

/// Appends the encoding of `v`, which must already be a value of `dtype`
/// (see [`convert`]).
pub(crate) fn encode(dtype: DType, v: f64, out: &mut Vec<u8>) {
    match dtype {
        DType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
        DType::F16 => out.extend_from_slice(&f16_bits(v).to_le_bytes()),
        DType::BF16 => out.extend_from_slice(&bf16_bits(v).to_le_bytes()),
        DType::I32 => out.extend_from_slice(&(v as i32).to_le_bytes()),
        DType::I8 => out.push((v as i8).to_le_bytes()[0]),
        DType::Bool => out.push(u8::from(v != 0.0)),
        DType::I64 => out.extend_from_slice(&(v as i64).to_le_bytes()),
    }
}

/// Bits of the binary16 nearest to `v` (ties to even).
pub fn f16_bits(v: f64) -> u16 {
    // The rounded value is exactly representable, so any conversion is exact.
    f16::from_f32(round_format(v, F16_FORMAT) as f32).to_bits()
}

/// Bits of the bfloat16 nearest to `v` (ties to even).
pub fn bf16_bits(v: f64) -> u16 {
    bf16::from_f32(round_format(v, BF16_FORMAT) as f32).to_bits()
}

/// A binary floating-point format: explicit mantissa bits, the exponent of
/// its smallest normal number, its largest finite value.
#[derive(Clone, Copy)]
struct Format {
    mantissa: i32,
    min_exp: i32,
    max: f64,
}

const F16_FORMAT: Format = Format {
    mantissa: 10,
    min_exp: -14,
    max: 65504.0,
};

const BF16_FORMAT: Format = Format {
    mantissa: 7,
    min_exp: -126,
    // (2 - 2^-7) * 2^127
    max: 3.389_531_389_251_535_5e38,
};

/// `v` rounded to the nearest value of `fmt`, ties to even, overflowing to
/// ±inf; NaN stays NaN. Correct for every `f64` (no double rounding).
fn round_format(v: f64, fmt: Format) -> f64 {
    if !v.is_finite() || v == 0.0 {
        return v;
    }
    // Exponent of v: floor(log2|v|), from the bits (f64 subnormals are far
    // below every format's subnormal range, so clamping covers them).
    let biased = ((v.to_bits() >> 52) & 0x7ff) as i32;
    let exp = (biased - 1023).max(fmt.min_exp);
    let quantum = pow2(exp - fmt.mantissa);
    // v / quantum and the product below are exact: scaling by powers of two.
    let r = (v / quantum).round_ties_even() * quantum;
    if r.abs() > fmt.max {
        f64::INFINITY.copysign(v)
    } else {
        r
    }
}

/// `2^e` for `-1022 <= e <= 1023`.
fn pow2(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// `v` rounded to the float dtype `dtype` (nearest, ties to even; overflow
/// gives ±inf; NaN stays NaN). Non-float dtypes return `v` unchanged.
pub fn round_float(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::F32 => f64::from(v as f32),
        DType::F16 => round_format(v, F16_FORMAT),
        DType::BF16 => round_format(v, BF16_FORMAT),
        DType::I32 | DType::I8 | DType::Bool | DType::I64 => v,
    }
}

/// Conversion of any `f64` to a value of `dtype`, as the `cast` instruction
/// converts: floats round to nearest even; to an integer type the value is
/// truncated toward zero and saturated at the type's bounds, NaN gives 0; to
/// bool it is `v != 0` (NaN gives true).
pub fn convert(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => round_float(dtype, v),
        // `as` truncates toward zero, saturates and maps NaN to 0.
        DType::I32 => f64::from(v as i32),
        DType::I8 => f64::from(v as i8),
        DType::Bool => f64::from(u8::from(v != 0.0)),
        DType::I64 => (v as i64) as f64,
    }
}

/// An integer result wrapped to `dtype`'s width (two's complement); for float
/// dtypes the value rounded to the format, for bool `v != 0`.
pub fn wrap_int(dtype: DType, v: i64) -> f64 {
    match dtype {
        DType::I32 => f64::from(v as i32),
        DType::I8 => f64::from(v as i8),
        DType::Bool => f64::from(u8::from(v != 0)),
        DType::I64 => v as f64,
        DType::F32 | DType::F16 | DType::BF16 => round_float(dtype, v as f64),
    }
}

/// Deterministic pseudo-random data in [-1, 1).
pub fn sample_data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_check_lengths() {
        let t = Tensor::from_f32(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        assert_eq!(t.shape(), &[2, 3]);
        assert_eq!(t.bytes().len(), 24);
        assert_eq!(t.to_f64_vec()[5], 6.0);
        let e = Tensor::from_f32(&[2, 3], &[1.0]).unwrap_err();
        assert!(e.to_string().contains("needs 6 values, got 1"), "{e}");
        assert!(Tensor::new(DType::I32, vec![2], vec![0; 7]).is_err());
        assert!(matches!(
            Tensor::new(DType::Bool, vec![2], vec![0, 2]),
            Err(TensorError::BadBool { index: 1, value: 2 })
        ));
        assert!(matches!(
            Tensor::zeros(DType::F32, &[u64::MAX, 4]),
            Err(TensorError::TooLarge { .. })
        ));
        let z = Tensor::zeros(DType::F16, &[0, 5]).unwrap();
        assert_eq!(z.numel(), 0);
        let s = Tensor::from_f32(&[], &[7.0]).unwrap();
        assert_eq!(s.numel(), 1);
    }

    #[test]
    fn typed_views_are_in_place_and_checked() {
        let mut t = Tensor::from_f64(DType::F16, &[3], &[1.0, -2.0, 0.5]).unwrap();
        assert_eq!(t.bytes().as_ptr().align_offset(8), 0);
        assert_eq!(t.as_slice::<f16>().unwrap()[1], f16::from_f32(-2.0));
        t.as_mut_slice::<f16>().unwrap()[2] = f16::from_f32(4.0);
        assert_eq!(t.to_f64_vec(), vec![1.0, -2.0, 4.0]);
        assert!(matches!(
            t.as_slice::<f32>(),
            Err(TensorError::WrongDType { .. })
        ));
        let i = Tensor::from_elements(&[2], &[7i8, -7]).unwrap();
        assert_eq!(i.dtype(), DType::I8);
        assert_eq!(i.as_slice::<i8>().unwrap(), &[7, -7]);
        let b = Tensor::new(DType::BF16, vec![1], vec![0x80, 0x3f]).unwrap();
        assert_eq!(b.as_slice::<bf16>().unwrap(), &[bf16::ONE]);
        assert_eq!(b.clone().into_bytes(), vec![0x80, 0x3f]);
        assert!(Tensor::zeros(DType::F32, &[0])
            .unwrap()
            .as_slice::<f32>()
            .unwrap()
            .is_empty());
    }

    #[test]
    fn from_f64_converts_like_cast() {
        let t = Tensor::from_f64(DType::I8, &[5], &[300.0, -300.0, 2.9, -2.9, f64::NAN]).unwrap();
        assert_eq!(t.to_f64_vec(), vec![127.0, -128.0, 2.0, -2.0, 0.0]);
        let t = Tensor::from_f64(DType::I32, &[2], &[1e12, -1e12]).unwrap();
        assert_eq!(t.as_i32_vec().unwrap(), vec![i32::MAX, i32::MIN]);
        let t = Tensor::from_f64(DType::Bool, &[3], &[0.0, -0.5, f64::NAN]).unwrap();
        assert_eq!(t.to_f64_vec(), vec![0.0, 1.0, 1.0]);
        let t = Tensor::from_f64(DType::F16, &[2], &[1.0, 65520.0]).unwrap();
        assert_eq!(t.to_f64_vec(), vec![1.0, f64::INFINITY]);
    }

    #[test]
    fn f16_rounding_is_nearest_even_without_double_rounding() {
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even → 1.
        assert_eq!(round_float(DType::F16, 1.0 + pow2(-11)), 1.0);
        // 1 + 3*2^-11 is halfway between 1+2^-10 and 1+2^-9 → even is 1+2^-9.
        assert_eq!(
            round_float(DType::F16, 1.0 + 3.0 * pow2(-11)),
            1.0 + pow2(-9)
        );
        // Just above halfway (by 2^-40, below f32 precision) rounds up.
        assert_eq!(
            round_float(DType::F16, 1.0 + pow2(-11) + pow2(-40)),
            1.0 + pow2(-10)
        );
        // Largest finite, overflow threshold.
        assert_eq!(round_float(DType::F16, 65519.99), 65504.0);
        assert_eq!(round_float(DType::F16, 65520.0), f64::INFINITY);
        assert_eq!(round_float(DType::F16, -1e9), f64::NEG_INFINITY);
        // Subnormals: smallest is 2^-24; half of it ties to 0, above rounds up.
        assert_eq!(round_float(DType::F16, pow2(-25)), 0.0);
        assert_eq!(round_float(DType::F16, pow2(-25) * 1.5), pow2(-24));
        assert_eq!(round_float(DType::F16, 3.0 * pow2(-25)), 2.0 * pow2(-24));
        assert!(round_float(DType::F16, f64::NAN).is_nan());
        // Agrees with `half` on exactly representable inputs.
        for bits in [0x3c00u16, 0x7bff, 0x0001, 0x8400, 0x3555] {
            let v = f16::from_bits(bits).to_f64();
            assert_eq!(f16_bits(v), bits);
        }
    }

    #[test]
    fn bf16_rounding() {
        assert_eq!(round_float(DType::BF16, 1.0 + pow2(-8)), 1.0);
        assert_eq!(
            round_float(DType::BF16, 1.0 + 3.0 * pow2(-8)),
            1.0 + pow2(-6)
        );
        assert_eq!(
            round_float(DType::BF16, 1.0 + pow2(-8) + pow2(-30)),
            1.0 + pow2(-7)
        );
        assert_eq!(round_float(DType::BF16, 3.4e38), f64::INFINITY);
        assert_eq!(bf16_bits(1.0), 0x3f80);
        let t = Tensor::from_f64(DType::BF16, &[1], &[-2.0]).unwrap();
        assert_eq!(t.bytes(), &[0x00, 0xc0]);
    }

    #[test]
    fn wrap_and_compare() {
        assert_eq!(wrap_int(DType::I8, 200), -56.0);
        assert_eq!(
            wrap_int(DType::I32, i64::from(i32::MAX) + 1),
            f64::from(i32::MIN)
        );
        let a = Tensor::from_f32(&[3], &[1.0, f32::NAN, 3.0]).unwrap();
        let b = Tensor::from_f32(&[3], &[1.5, f32::NAN, 3.0]).unwrap();
        assert_eq!(a.max_abs_diff(&b).unwrap(), 0.5);
        assert!(a.allclose(&b, 0.0, 0.5).unwrap());
        assert!(!a.allclose(&b, 0.0, 0.4).unwrap());
        let c = Tensor::from_f32(&[3], &[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(a.max_abs_diff(&c).unwrap(), f64::INFINITY);
        let d = Tensor::from_f32(&[1, 3], &[1.0, 2.0, 3.0]).unwrap();
        assert!(a.max_abs_diff(&d).is_err());
        assert!(format!("{a:?}").starts_with("Tensor(f32 [3]"));
    }
}
