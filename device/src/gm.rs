//! Global memory: the parameter buffers bound to a launch, and the handlers
//! that move a tile's box between them and the unified buffer (UB).
//!
//! A [`GmBuf`] describes one buffer by pointer, length and a writable flag.
//! A [`KernelArgs`] binds a kernel's parameters to buffers; it exists only once
//! the launch check has passed ([`VerifiedKernel::check_launch`] plus the
//! alignment rule below), so every access of a verified kernel stays inside
//! its buffer: the verifier computed each parameter's furthest element over
//! the whole grid.
//!
//! The handlers ([`load_tile`], [`store_tile`], [`store_add_tile`]) still
//! check each tile's box against the buffer and the UB before touching
//! memory (a handful of integer operations per instruction and tile), so a
//! bug in the verifier becomes a [`GmFault`], never an access outside the
//! buffers.
//!
//! Elements are little-endian. Every buffer's address must be aligned to
//! its parameter's element size (atomic adds need it).

use core::fmt;
use core::marker::PhantomData;
use core::ptr;
use core::sync::atomic::{AtomicI32, AtomicI8, AtomicU16, AtomicU32, Ordering};

use dvm_isa::verify::{LaunchError, MAX_PARAMS};
use dvm_isa::{DType, GmPattern, Scalar, VerifiedKernel};

pub use crate::mem::PrefetchRun;
use crate::mem::{prefetch, scale_run, stream_scaled};

/// One global-memory buffer bound to a kernel parameter: a pointer, a length
/// in bytes and whether the launch may write it.
///
/// Built from a slice for single-threaded use ([`GmBuf::from_slice`],
/// [`GmBuf::from_mut_slice`]) or from raw parts for blocks that run
/// concurrently on several cores ([`GmBuf::from_raw_parts`]); each core then
/// builds its own [`GmBuf`]s and [`KernelArgs`] over the same memory.
///
/// `GmBuf` is `Send` but not `Sync` and not `Clone`: a buffer built from a
/// `&mut [u8]` stays usable by one thread at a time.
pub struct GmBuf<'a> {
    ptr: *mut u8,
    len: usize,
    writable: bool,
    _life: PhantomData<&'a mut [u8]>,
}

// SAFETY: a `GmBuf` is an exclusive (`&mut`-like) or shared-read (`&`-like)
// view of memory that is valid for its lifetime; moving it to another thread
// is as sound as moving the slice it came from. Buffers built from raw parts
// carry the caller's promise (see `from_raw_parts`) that any thread may use
// them. It is deliberately not `Sync`.
unsafe impl Send for GmBuf<'_> {}

impl<'a> GmBuf<'a> {
    /// A buffer over `len` bytes at `ptr`.
    ///
    /// # Safety
    /// For as long as the `GmBuf` (or a [`KernelArgs`] holding it) is used:
    /// - `ptr` is valid for reads of `len` bytes and, if `writable`, valid
    ///   for writes of `len` bytes (it need not be aligned here; binding
    ///   checks alignment);
    /// - the memory is accessed by nothing else (no live Rust references, no
    ///   other threads, no DMA) except other blocks of the same launch,
    ///   which access it through their own `GmBuf`s, and it does not overlap
    ///   the UB of any block;
    /// - blocks running concurrently do not race: an element that one block
    ///   writes with `store` is neither read nor written by another block
    ///   during the launch (tiles of different blocks write disjoint
    ///   elements), and an element updated with `store_add` (atomic per
    ///   element) is only updated with `store_add` by every block while they
    ///   run ([`VerifiedKernel::tiles_independent`] proves this of a
    ///   kernel for any split of its tiles; a kernel it refuses must run
    ///   as one block). Several buffers of one launch may alias each other;
    ///   a single block then sees its own loads and stores in program order.
    pub unsafe fn from_raw_parts(ptr: *mut u8, len: usize, writable: bool) -> GmBuf<'a> {
        GmBuf {
            ptr,
            len,
            writable,
            _life: PhantomData,
        }
    }

    /// A read-only buffer over `bytes`.
    pub fn from_slice(bytes: &'a [u8]) -> GmBuf<'a> {
        GmBuf {
            // Never written through: `writable` is false and every store
            // checks it.
            ptr: bytes.as_ptr().cast_mut(),
            len: bytes.len(),
            writable: false,
            _life: PhantomData,
        }
    }

    /// A writable buffer over `bytes`.
    pub fn from_mut_slice(bytes: &'a mut [u8]) -> GmBuf<'a> {
        GmBuf {
            ptr: bytes.as_mut_ptr(),
            len: bytes.len(),
            writable: true,
            _life: PhantomData,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the launch may write the buffer.
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// The base address.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// Whether the two buffers share a byte (empty ones share none).
    pub fn overlaps(&self, other: &GmBuf<'_>) -> bool {
        let span = |b: &GmBuf<'_>| {
            let s = b.ptr as usize;
            (s, s.saturating_add(b.len))
        };
        let ((s, e), (os, oe)) = (span(self), span(other));
        s < e && os < oe && s < oe && os < e
    }
}

impl fmt::Debug for GmBuf<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GmBuf")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("writable", &self.writable)
            .finish()
    }
}

impl<'a> From<&'a [u8]> for GmBuf<'a> {
    fn from(bytes: &'a [u8]) -> GmBuf<'a> {
        GmBuf::from_slice(bytes)
    }
}

impl<'a> From<&'a mut [u8]> for GmBuf<'a> {
    fn from(bytes: &'a mut [u8]) -> GmBuf<'a> {
        GmBuf::from_mut_slice(bytes)
    }
}

/// Why buffers could not be bound to a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// The launch check failed: wrong count, a buffer too small, or a
    /// read-only buffer for a written parameter.
    #[error("{0}")]
    Launch(#[from] LaunchError),
    /// A buffer's address is not aligned to its parameter's element size.
    #[error("buffer {param} at address {addr:#x} is not aligned to {align} bytes")]
    Misaligned {
        /// Parameter.
        param: usize,
        /// The buffer's address.
        addr: usize,
        /// Required alignment (the element size).
        align: u32,
    },
}

#[cfg(feature = "defmt")]
impl defmt::Format for BindError {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "{}", defmt::Display2Format(self))
    }
}

/// What a kernel needs from its buffers: the launch check in a form that
/// outlives the module bytes (kept by [`crate::predecode::Program`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamSig {
    count: usize,
    need: [u64; MAX_PARAMS],
    writable: u32,
    align: [u8; MAX_PARAMS],
}

impl ParamSig {
    /// A signature with no parameters.
    pub const EMPTY: ParamSig = ParamSig {
        count: 0,
        need: [0; MAX_PARAMS],
        writable: 0,
        align: [1; MAX_PARAMS],
    };

    /// The signature of `kernel`.
    pub fn of(kernel: &VerifiedKernel<'_>) -> ParamSig {
        let mut sig = ParamSig::EMPTY;
        sig.count = kernel.param_count().min(MAX_PARAMS);
        for i in 0..sig.count {
            sig.need[i] = kernel.required_bytes(i);
            if let Some(p) = kernel.param(i) {
                if p.access.writable() {
                    sig.writable |= 1 << i;
                }
                sig.align[i] = p.dtype.size() as u8;
            }
        }
        sig
    }

    /// Number of parameters.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Bytes parameter `i` must have (0 when it does not exist).
    pub fn required_bytes(&self, i: usize) -> u64 {
        self.need.get(i).copied().unwrap_or(0)
    }

    /// Whether the kernel may write parameter `i`.
    pub fn writes(&self, i: usize) -> bool {
        i < MAX_PARAMS && self.writable & (1 << i) != 0
    }

    /// Checks `bufs` against the signature: count, sizes, access, alignment.
    ///
    /// # Errors
    /// A [`BindError`] naming the first parameter at fault.
    pub fn check(&self, bufs: &[GmBuf<'_>]) -> Result<(), BindError> {
        if bufs.len() != self.count {
            return Err(LaunchError::BufferCount {
                expected: self.count,
                got: bufs.len(),
            }
            .into());
        }
        for (i, b) in bufs.iter().enumerate() {
            let need = self.need[i];
            if (b.len as u64) < need {
                return Err(LaunchError::BufferTooSmall {
                    param: i,
                    need,
                    have: b.len as u64,
                }
                .into());
            }
            if self.writes(i) && !b.writable {
                return Err(LaunchError::ReadOnly { param: i }.into());
            }
            self.check_align(i, b)?;
        }
        Ok(())
    }

    fn check_align(&self, i: usize, b: &GmBuf<'_>) -> Result<(), BindError> {
        let align = self.align[i].max(1) as usize;
        let addr = b.ptr as usize;
        if addr & (align - 1) != 0 {
            return Err(BindError::Misaligned {
                param: i,
                addr,
                align: align as u32,
            });
        }
        Ok(())
    }
}

/// A kernel's parameters bound to buffers, after the launch check.
///
/// Built once per launch (per core when blocks run concurrently); the
/// executor re-checks it against the program in O(parameters) before
/// running, so a `KernelArgs` can never be used with a kernel it does not fit.
#[derive(Debug)]
pub struct KernelArgs<'b> {
    bufs: heapless::Vec<GmBuf<'b>, MAX_PARAMS>,
}

impl<'b> KernelArgs<'b> {
    /// Binds `bufs` (one per parameter, in order) to `kernel`.
    ///
    /// # Errors
    /// [`BindError::Launch`] when [`VerifiedKernel::check_launch`] fails
    /// (buffer count, a buffer smaller than the kernel's furthest access, a
    /// read-only buffer for a written parameter); [`BindError::Misaligned`]
    /// when a buffer is not aligned to its element size.
    pub fn new(
        kernel: &VerifiedKernel<'_>,
        bufs: impl IntoIterator<Item = GmBuf<'b>>,
    ) -> Result<KernelArgs<'b>, BindError> {
        let bufs = collect(kernel.param_count(), bufs)?;
        let mut lens = [0u64; MAX_PARAMS];
        let mut writable = [false; MAX_PARAMS];
        for (i, b) in bufs.iter().enumerate() {
            lens[i] = b.len as u64;
            writable[i] = b.writable;
        }
        let n = bufs.len();
        kernel.check_launch(&lens[..n], &writable[..n])?;
        let sig = ParamSig::of(kernel);
        for (i, b) in bufs.iter().enumerate() {
            sig.check_align(i, b)?;
        }
        Ok(KernelArgs { bufs })
    }

    /// Binds `bufs` to the kernel `sig` describes (for callers that keep only
    /// the predecoded program, see [`crate::predecode::Program::params`]).
    ///
    /// # Errors
    /// As [`KernelArgs::new`].
    pub fn with_signature(
        sig: &ParamSig,
        bufs: impl IntoIterator<Item = GmBuf<'b>>,
    ) -> Result<KernelArgs<'b>, BindError> {
        let bufs = collect(sig.count(), bufs)?;
        sig.check(&bufs)?;
        Ok(KernelArgs { bufs })
    }

    /// The bound buffers.
    pub fn bufs(&self) -> &[GmBuf<'b>] {
        &self.bufs
    }
}

fn collect<'b>(
    expected: usize,
    bufs: impl IntoIterator<Item = GmBuf<'b>>,
) -> Result<heapless::Vec<GmBuf<'b>, MAX_PARAMS>, BindError> {
    let mut out = heapless::Vec::new();
    let mut got = 0usize;
    for b in bufs {
        got += 1;
        // Past capacity: keep counting for the error, drop the buffer.
        let _ = out.push(b);
    }
    if got != expected || got > MAX_PARAMS {
        return Err(LaunchError::BufferCount { expected, got }.into());
    }
    Ok(out)
}

/// A tile's box failed the per-tile bounds check. Unreachable for verified
/// kernels with a checked launch; reported instead of touching memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GmFault {
    /// The box leaves its global-memory buffer.
    #[error("the tile's box leaves its global-memory buffer")]
    Gm,
    /// The box leaves the UB.
    #[error("the tile's box leaves the UB")]
    Ub,
    /// A store into a read-only buffer.
    #[error("store into a read-only buffer")]
    ReadOnly,
    /// The buffer index or dtype is not valid for the operation.
    #[error("bad buffer index or dtype")]
    Operand,
}

#[cfg(feature = "defmt")]
impl defmt::Format for GmFault {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "{}", defmt::Display2Format(self))
    }
}

/// The value a `pad=fill` load writes, as the element's little-endian bits
/// in the low bytes: the scalar's f32 bits converted to the dtype for float
/// types, its i32 bits for integers (saturated to i8), `x != 0` for bool.
pub fn pad_bits(dtype: DType, padv: Scalar) -> u32 {
    match dtype {
        DType::F32 => padv.0,
        DType::F16 => half::f16::from_f32(padv.as_f32()).to_bits() as u32,
        DType::BF16 => half::bf16::from_f32(padv.as_f32()).to_bits() as u32,
        DType::I32 => padv.0,
        DType::I8 => padv.as_i32().clamp(i8::MIN as i32, i8::MAX as i32) as i8 as u8 as u32,
        DType::Bool => (padv.0 != 0) as u32,
        // Refused by the verifier in every instruction.
        DType::I64 => 0,
    }
}

/// The box of one tile, checked against the buffer and the UB (only
/// [`Geom::new`] builds one).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geom {
    /// Valid rows and columns.
    re: usize,
    ce: usize,
    /// Full rows of the UB box.
    rows: usize,
    /// UB elements per row.
    pitch: usize,
    /// UB byte offset of the box.
    ub: usize,
    /// GM element offset of the origin, and strides in elements.
    origin: usize,
    rs: usize,
    cs: usize,
}

impl Geom {
    /// The box of `p` at tile `coord`, checked against a buffer of `gm_len`
    /// bytes and a UB of `ub_len` bytes.
    #[inline]
    pub(crate) fn new(
        p: &GmPattern,
        coord: [u32; 3],
        gm_len: usize,
        ub_len: usize,
    ) -> Result<Geom, GmFault> {
        let size = p.dtype.size() as u64;
        let (re, ce) = p.extent(coord);
        let (re, ce) = (re as u64, ce as u64);
        let origin = p.origin(coord);
        // UB: the whole `rows × pitch` box, and no row longer than the pitch.
        let ub_end = (p.rows as u64 * p.pitch as u64)
            .checked_mul(size)
            .and_then(|b| b.checked_add(p.ub as u64));
        if ub_end.is_none_or(|e| e > ub_len as u64) || ce > p.pitch as u64 || re > p.rows as u64 {
            return Err(GmFault::Ub);
        }
        // GM: strides are non-negative, so the furthest element is the
        // box's last one.
        if re > 0 && ce > 0 {
            let last = (re - 1)
                .checked_mul(p.row_stride)
                .and_then(|r| Some((r, (ce - 1).checked_mul(p.col_stride)?)))
                .and_then(|(r, c)| origin.checked_add(r)?.checked_add(c))
                .and_then(|l| l.checked_add(1)?.checked_mul(size));
            if last.is_none_or(|e| e > gm_len as u64) {
                return Err(GmFault::Gm);
            }
        }
        // Every offset below is at most the last element's (all fit in usize
        // because they are below `gm_len`); strides are only multiplied by
        // indices that keep them in range, or are irrelevant (one row or
        // column), so truncating unused strides is harmless.
        Ok(Geom {
            re: re as usize,
            ce: ce as usize,
            rows: p.rows as usize,
            pitch: p.pitch as usize,
            ub: p.ub as usize,
            origin: origin as usize,
            rs: if re > 1 { p.row_stride as usize } else { 0 },
            cs: if ce > 1 { p.col_stride as usize } else { 1 },
        })
    }

    /// GM element offset of row `r`.
    #[inline(always)]
    fn row(&self, r: usize) -> usize {
        self.origin + r * self.rs
    }

    /// True when non-temporal stores of `size`-byte elements suit the
    /// valid box: contiguous columns, runs of at least [`STREAM_MIN_RUN`]
    /// bytes, and rows apart in GM (rows that overlap, a row stride below
    /// the width, keep plain stores, which keep their program order).
    #[inline(always)]
    fn streams(&self, size: usize) -> bool {
        let overlapping = self.re > 1 && self.rs < self.ce;
        self.re > 0
            && self.ce > 0
            && self.cs == 1
            && !overlapping
            && self.run_bytes(size) >= STREAM_MIN_RUN
    }

    /// Bytes of the longest run a store writes at once: the whole valid
    /// box when it is contiguous, one row otherwise.
    #[inline(always)]
    fn run_bytes(&self, size: usize) -> usize {
        if self.contiguous() {
            self.re * self.ce * size
        } else {
            self.ce * size
        }
    }

    /// True when the valid box is one run of elements on both sides.
    #[inline(always)]
    fn contiguous(&self) -> bool {
        self.cs == 1 && (self.re == 1 || (self.rs == self.ce && self.pitch == self.ce))
    }

    /// True when the box is `n` valid elements in one run on both sides:
    /// no tail, no padding.
    #[inline(always)]
    pub(crate) fn full_run(&self, n: usize) -> bool {
        self.contiguous() && self.re * self.ce == n && self.rows * self.pitch == n
    }

    /// The bytes of a [`Geom::full_run`] box (elements of `size` bytes) in
    /// `buf`, or `None` for another box.
    #[inline(always)]
    pub(crate) fn gm_run<'b>(&self, buf: &'b GmBuf<'_>, size: usize) -> Option<&'b [u8]> {
        if !self.full_run(self.re * self.ce) {
            return None;
        }
        // SAFETY: `Geom::new` checked that the box's elements (one run of
        // `re·ce` from the origin) lie inside `buf`, which is valid for
        // reads for its lifetime (`GmBuf` contract); nothing writes them
        // while the slice lives (the caller's exclusivity of `buf`'s writes).
        Some(unsafe {
            core::slice::from_raw_parts(buf.ptr.add(self.origin * size), self.re * self.ce * size)
        })
    }

    /// [`Geom::gm_run`], writable; `None` for a read-only buffer.
    ///
    /// # Safety
    /// While the slice lives, nothing else reads or writes its bytes: no
    /// other slice from this or another buffer overlaps it (buffers may
    /// alias), and other blocks do not touch them (the `GmBuf` contract).
    // A `GmBuf` is a raw-pointer handle (writes go through its pointer,
    // never through a Rust borrow of it), so the slice borrows the handle
    // only for its lifetime; exclusivity is the caller's promise above.
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    pub(crate) unsafe fn gm_run_mut<'b>(
        &self,
        buf: &'b GmBuf<'_>,
        size: usize,
    ) -> Option<&'b mut [u8]> {
        if !buf.writable || !self.full_run(self.re * self.ce) {
            return None;
        }
        // SAFETY: inside `buf` as for `gm_run`; `buf` is writable, so valid
        // for writes; the caller guarantees exclusivity.
        Some(unsafe {
            core::slice::from_raw_parts_mut(
                buf.ptr.add(self.origin * size),
                self.re * self.ce * size,
            )
        })
    }
}

/// An element type moved by loads and stores: plain bits.
trait Bits: Copy {
    fn from_u32(v: u32) -> Self;
}
impl Bits for u32 {
    fn from_u32(v: u32) -> Self {
        v
    }
}
impl Bits for u16 {
    fn from_u32(v: u32) -> Self {
        v as u16
    }
}
impl Bits for u8 {
    fn from_u32(v: u32) -> Self {
        v as u8
    }
}

/// Loads the box of tile `coord` through `p` from `buf` into `ub`; with
/// `pad = Some(bits)` (see [`pad_bits`]) fills the rest of the
/// `rows × pitch` UB box.
///
/// # Errors
/// A [`GmFault`] if the box leaves `buf` or `ub` (never for a verified
/// kernel under a checked [`KernelArgs`]); nothing is written then.
#[inline]
pub fn load_tile(
    p: &GmPattern,
    pad: Option<u32>,
    coord: [u32; 3],
    buf: &GmBuf<'_>,
    ub: &mut [u8],
) -> Result<(), GmFault> {
    let g = Geom::new(p, coord, buf.len, ub.len())?;
    match p.dtype.size() {
        4 => load_t::<u32>(&g, buf, ub, pad),
        2 => load_t::<u16>(&g, buf, ub, pad),
        1 => load_t::<u8>(&g, buf, ub, pad),
        _ => return Err(GmFault::Operand),
    }
    Ok(())
}

#[inline(always)]
fn load_t<T: Bits>(g: &Geom, buf: &GmBuf<'_>, ub: &mut [u8], pad: Option<u32>) {
    let gm = buf.ptr.cast_const().cast::<T>();
    // SAFETY: `Geom::new` checked the UB box lies inside `ub`.
    let box_ptr = unsafe { ub.as_mut_ptr().add(g.ub) }.cast::<T>();
    // In every branch below, GM offsets are `origin + r·rs + k·cs` with
    // `r < re`, `k < ce`: at most the last element, which `Geom::new` checked
    // is inside `buf` (valid for reads by `GmBuf`'s contract). UB offsets are
    // `r·pitch + k` with `k < ce ≤ pitch`, `r < rows`: inside the checked UB
    // box. GM and UB do not overlap (`ub` is an exclusive borrow and the GM
    // contract excludes the UB). Accesses are unaligned reads and writes.
    if g.re > 0 && g.ce > 0 {
        if g.contiguous() {
            // SAFETY: see above; `re·ce` elements from the origin on both sides.
            unsafe { ptr::copy_nonoverlapping(gm.add(g.origin), box_ptr, g.re * g.ce) };
        } else if g.cs == 1 {
            for r in 0..g.re {
                // SAFETY: see above.
                unsafe {
                    ptr::copy_nonoverlapping(gm.add(g.row(r)), box_ptr.add(r * g.pitch), g.ce)
                };
            }
        } else if g.cs == 0 {
            for r in 0..g.re {
                // SAFETY: see above.
                unsafe {
                    let v = gm.add(g.row(r)).read_unaligned();
                    let dst = box_ptr.add(r * g.pitch);
                    for k in 0..g.ce {
                        dst.add(k).write_unaligned(v);
                    }
                }
            }
        } else {
            for r in 0..g.re {
                // SAFETY: see above.
                unsafe {
                    let src = gm.add(g.row(r));
                    let dst = box_ptr.add(r * g.pitch);
                    for k in 0..g.ce {
                        dst.add(k)
                            .write_unaligned(src.add(k * g.cs).read_unaligned());
                    }
                }
            }
        }
    }
    if let Some(bits) = pad {
        let v = T::from_u32(bits);
        let fill = |from: usize, to: usize| {
            for i in from..to {
                // SAFETY: `from..to` lies inside the checked `rows × pitch` box.
                unsafe { box_ptr.add(i).write_unaligned(v) };
            }
        };
        if g.ce < g.pitch {
            for r in 0..g.re {
                fill(r * g.pitch + g.ce, (r + 1) * g.pitch);
            }
        }
        fill(g.re * g.pitch, g.rows * g.pitch);
    }
}

/// Gathers tile `coord`'s rows from `buf` through `p`, the `gather`
/// instruction's access (`p.rows` is the table's row count `extent`, the
/// pattern's `ub` and `pitch` the UB box's): UB row `r` of `rows`, at
/// `p.ub + r·p.pitch` elements, becomes table row `i`, where `i` is the
/// i32 at UB byte `idx + 4r`, plus `extent` when negative, clamped to
/// `0 ..= extent − 1`. Only the tile's valid columns are written.
///
/// # Errors
/// A [`GmFault`] if the table leaves `buf`, or the indices or the box
/// leave `ub` (never for a verified kernel under a checked
/// [`KernelArgs`]); nothing is written then.
#[inline]
pub fn gather_tile(
    p: &GmPattern,
    idx: u32,
    rows: u32,
    coord: [u32; 3],
    buf: &GmBuf<'_>,
    ub: &mut [u8],
) -> Result<(), GmFault> {
    let size = p.dtype.size() as u64;
    let (_, ce) = p.extent(coord);
    let (extent, ce) = (p.rows as u64, ce as u64);
    if extent == 0 || ce == 0 || rows == 0 {
        return Ok(());
    }
    // UB: the indices and the whole `rows × pitch` box, no row longer than
    // the pitch.
    let ub_len = ub.len() as u64;
    let idx_end = idx as u64 + rows as u64 * 4;
    let box_end = (rows as u64 * p.pitch as u64)
        .checked_mul(size)
        .and_then(|b| b.checked_add(p.ub as u64));
    if idx_end > ub_len || box_end.is_none_or(|e| e > ub_len) || ce > p.pitch as u64 {
        return Err(GmFault::Ub);
    }
    // GM: the whole table, whose last element is the furthest any clamped
    // index reaches (strides are non-negative).
    let origin = p.origin(coord);
    let last = (extent - 1)
        .checked_mul(p.row_stride)
        .and_then(|r| Some((r, (ce - 1).checked_mul(p.col_stride)?)))
        .and_then(|(r, c)| origin.checked_add(r)?.checked_add(c))
        .and_then(|l| l.checked_add(1)?.checked_mul(size));
    if last.is_none_or(|e| e > buf.len as u64) {
        return Err(GmFault::Gm);
    }
    // Every offset below is at most the table's last element, which fits
    // in `usize` because it is below `buf.len`.
    let g = Gather {
        idx: idx as usize,
        rows: rows as usize,
        ub: p.ub as usize,
        pitch: p.pitch as usize,
        extent: extent as i64,
        origin: origin as usize,
        rs: p.row_stride as usize,
        cs: if ce > 1 { p.col_stride as usize } else { 1 },
        ce: ce as usize,
    };
    match size {
        4 => gather_t::<u32>(&g, buf, ub),
        2 => gather_t::<u16>(&g, buf, ub),
        1 => gather_t::<u8>(&g, buf, ub),
        _ => return Err(GmFault::Operand),
    }
    Ok(())
}

/// A gather's geometry, checked by [`gather_tile`].
struct Gather {
    idx: usize,
    rows: usize,
    ub: usize,
    pitch: usize,
    extent: i64,
    origin: usize,
    rs: usize,
    cs: usize,
    ce: usize,
}

#[inline(always)]
fn gather_t<T: Bits>(g: &Gather, buf: &GmBuf<'_>, ub: &mut [u8]) {
    let gm = buf.ptr.cast_const().cast::<T>();
    let base = ub.as_mut_ptr();
    for r in 0..g.rows {
        // SAFETY: `gather_tile` checked that the `rows` indices lie inside
        // `ub`; the read is unaligned.
        let i = unsafe { base.add(g.idx + 4 * r).cast::<i32>().read_unaligned() } as i64;
        let i = if i < 0 { i + g.extent } else { i }.clamp(0, g.extent - 1) as usize;
        let src = g.origin + i * g.rs;
        // SAFETY: `i < extent` and `k < ce`, so `src + k·cs` is at most the
        // table's last element, which `gather_tile` checked lies inside
        // `buf` (valid for reads by `GmBuf`'s contract). The UB offsets
        // `r·pitch + k` with `k < ce ≤ pitch` and `r < rows` lie inside the
        // checked box. GM and UB do not overlap (`ub` is an exclusive
        // borrow and the GM contract excludes the UB); the indices may only
        // overlap the box in an unverified kernel, which then reads indices
        // it wrote, still clamped. Accesses are unaligned.
        unsafe {
            let dst = base.add(g.ub).cast::<T>().add(r * g.pitch);
            if g.cs == 1 {
                let bytes = g.ce * core::mem::size_of::<T>();
                ptr::copy_nonoverlapping(gm.add(src).cast::<u8>(), dst.cast::<u8>(), bytes);
            } else {
                for k in 0..g.ce {
                    dst.add(k)
                        .write_unaligned(gm.add(src + k * g.cs).read_unaligned());
                }
            }
        }
    }
}

/// Loads the box of tile `coord` through `p` from `buf` by running
/// `handler(ub, box, &[], args)` on its global-memory bytes, a load fused
/// with the instruction after it ([`crate::loadfold`]), when the tile is
/// full (no tail, no padding) and one contiguous, element-aligned run;
/// returns `false`, having done nothing, otherwise.
///
/// # Errors
/// A [`GmFault`] if the box leaves `buf` or `ub`; nothing is written then.
#[inline]
pub fn load_tile_fused(
    p: &GmPattern,
    coord: [u32; 3],
    buf: &GmBuf<'_>,
    ub: &mut [u8],
    handler: crate::ops::GmHandler,
    args: &crate::ops::UbArgs,
) -> Result<bool, GmFault> {
    let Some(src) = full_run(p, coord, buf, ub.len())? else {
        return Ok(false);
    };
    handler(ub, src, &[], args);
    Ok(true)
}

/// The global-memory bytes of tile `coord` through `p` in `buf` when the
/// tile is full (no tail, no padding) and one contiguous, element-aligned
/// run: what the fused loads read in place of a copy into UB.
///
/// # Errors
/// A [`GmFault`] if the box leaves `buf` or a UB of `ub_len` bytes.
pub fn full_run<'b>(
    p: &GmPattern,
    coord: [u32; 3],
    buf: &'b GmBuf<'_>,
    ub_len: usize,
) -> Result<Option<&'b [u8]>, GmFault> {
    let size = p.dtype.size() as usize;
    let g = Geom::new(p, coord, buf.len, ub_len)?;
    Ok(g.gm_run(buf, size)
        .filter(|s| (s.as_ptr() as usize).is_multiple_of(size)))
}

/// The fold after a load and the instruction after the fold, both reading
/// tile `coord` of `buf` through `p` in global memory
/// ([`crate::loadfold::plan_map`]): `fold` (a fold along the columns'
/// [`GmHandler`](crate::ops::GmHandler), its results into UB at
/// `fold.1.dst`), then `map` (`handler(ub, box, _, args)`), when the tile
/// is one contiguous, aligned run of the buffer; returns `false`, having
/// done nothing, otherwise.
///
/// # Errors
/// A [`GmFault`] if the box leaves `buf` or `ub`; nothing is written then.
#[inline]
pub fn load_tile_map(
    p: &GmPattern,
    coord: [u32; 3],
    buf: &GmBuf<'_>,
    ub: &mut [u8],
    fold: (crate::ops::GmHandler, &crate::ops::UbArgs),
    map: (crate::ops::GmHandler, &crate::ops::UbArgs),
) -> Result<bool, GmFault> {
    let Some(src) = full_run(p, coord, buf, ub.len())? else {
        return Ok(false);
    };
    let size = p.dtype.size() as usize;
    let at = fold.1.dst as usize;
    let Some(out) = ub.get_mut(at..at + fold.1.n as usize * size) else {
        return Ok(false);
    };
    (fold.0)(out, src, &[], fold.1);
    (map.0)(ub, src, &[], map.1);
    Ok(true)
}

/// The share of the next tile's prefetches that [`load_tile_map_rows`]
/// issues over its fold (a softmax's row maxima), a row's part before each
/// row, when it streams; the rest go out with the rows' stores. A fifth
/// measured best among none, an eighth, a fifth and a third.
const FOLD_SHARE: (usize, usize) = (1, 5);

/// [`load_tile_map`] followed by `unary` on the map's row folds and the
/// scaled store of the map's box through `sp` into `out` (with the factors
/// `unary` writes), run a row at a time ([`crate::loadfold::plan_rows`]):
/// the same bytes in UB and global memory as the three over the whole
/// tile. `map` is the map's handler over whole rows, `row_map` its
/// [`crate::ops::RowHandler`]. With plain stores, `row_map` computes row
/// `r` while it stores row `r − 1`, the stores overlapping the arithmetic;
/// with `prefetch` (long rows go out with non-temporal stores, prefetching
/// it on the way, as in [`store_tile_scaled`]), each row is stored right
/// after `map` computes it, and the fold runs a row at a time with a share
/// of the prefetches (`FOLD_SHARE`). Runs when the loaded tile is one contiguous,
/// aligned run and the stored box is the whole tile with rows apart and
/// aligned; returns `false`, having done nothing, otherwise, or when the
/// store would fault (the instructions one by one then report it).
///
/// # Errors
/// A [`GmFault`] if the loaded box leaves `buf` or `ub`; nothing is
/// written then.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn load_tile_map_rows(
    p: &GmPattern,
    coord: [u32; 3],
    buf: &GmBuf<'_>,
    ub: &mut [u8],
    fold: (crate::ops::GmHandler, &crate::ops::UbArgs),
    (map, row_map): (
        (crate::ops::GmHandler, &crate::ops::UbArgs),
        crate::ops::RowHandler,
    ),
    unary: (crate::ops::Handler, &crate::ops::UbArgs),
    (sp, out, prefetch): (&GmPattern, &GmBuf<'_>, Option<&Prefetch>),
) -> Result<bool, GmFault> {
    let Some(src) = full_run(p, coord, buf, ub.len())? else {
        return Ok(false);
    };
    let (m, u) = (map.1, unary.1);
    let (rows, cols) = (m.n as usize, m.cols as usize);
    let Ok(g) = Geom::new(sp, coord, out.len, ub.len()) else {
        return Ok(false);
    };
    let row_bytes = cols * 4;
    let factors_end = (u.dst as usize).checked_add(rows * 4);
    let fits = out.writable
        && (out.ptr as usize).is_multiple_of(4)
        && sp.dtype == DType::F32
        && p.dtype == DType::F32
        && g.re == rows
        && g.ce == cols
        && g.cs == 1
        && (rows <= 1 || g.rs >= cols)
        && src.len() == rows * row_bytes
        && g.ub == m.dst as usize
        && g.pitch == cols
        && u.dst.is_multiple_of(4)
        && factors_end.is_some_and(|e| e <= ub.len());
    if !fits || rows == 0 || cols == 0 {
        return Ok(false);
    }
    let at = fold.1.dst as usize;
    let Some(folds) = ub.get_mut(at..at + fold.1.n as usize * 4) else {
        return Ok(false);
    };
    let stream = prefetch.filter(|_| g.streams(4));
    // Streamed, the fold runs a row at a time with a share of the next
    // tile's prefetches before each row ([`FOLD_SHARE`]); the rest go out
    // with the rows' stores.
    let (early, rest) = stream.map_or((Prefetch::NONE, Prefetch::NONE), |pf| pf.split(FOLD_SHARE));
    if stream.is_some() {
        let mut step = early.spread(rows);
        let one = crate::ops::UbArgs { n: 1, ..*fold.1 };
        let rows_of = folds.chunks_exact_mut(4).zip(src.chunks_exact(row_bytes));
        for (f, x) in rows_of {
            step();
            (fold.0)(f, x, &[], &one);
        }
    } else {
        (fold.0)(folds, src, &[], fold.1);
    }
    let mut cur = Cursor::new(&rest, rows * row_bytes);
    let gm = out.ptr.cast::<f32>();
    let factor = |ub: &[u8], r: usize| {
        let at = u.dst as usize + 4 * r;
        ub.get(at..at + 4)
            .map_or(0.0, |b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    };
    // Row `r` of the map's and the unary's operands: sub-ranges of those
    // the whole-tile instructions were checked against (no overflow).
    let row_args = |r: usize| {
        let (rb, fb) = ((r * row_bytes) as u32, (r * 4) as u32);
        let ma = crate::ops::UbArgs {
            n: 1,
            dst: m.dst + rb,
            a: m.a.wrapping_add(rb),
            b: m.b + fb,
            c: m.c + fb,
            ..*m
        };
        let ua = crate::ops::UbArgs {
            n: 1,
            dst: u.dst + fb,
            a: u.a + fb,
            ..*u
        };
        (ma, ua)
    };
    let row = |r: usize| &src[r * row_bytes..(r + 1) * row_bytes];
    // SAFETY: `Geom::new` checked that the UB box
    // (`rows × pitch` from `g.ub`) lies inside `ub` and row `r < re` of
    // `cols` elements at `row(r)` inside the writable `out`; the factors
    // were checked above; UB and GM do not overlap.
    let store_row = |ub: &[u8], r: usize, cur: &mut Cursor<'_>| unsafe {
        let f = factor(ub, r);
        let x = ub.as_ptr().add(g.ub + r * row_bytes).cast::<f32>();
        let dst = gm.add(g.row(r));
        if stream.is_some() {
            stream_scaled(dst, x, cols, f, || cur.step());
        } else {
            scale_run(dst, x, cols, f);
        }
    };
    // Each row's store is woven into the next row's loop, a block after
    // each block of its `exp` (`crate::ops::rowpipe`), and, when streamed,
    // the next tile's prefetches with it, so that the memory traffic keeps
    // pace with the arithmetic instead of coming in bursts between rows.
    let row_lines = row_bytes.div_ceil(64);
    for r in 0..rows {
        let (ma, ua) = row_args(r);
        let store = r.checked_sub(1).map(|q| crate::ops::ScaledRow {
            // SAFETY: as for `store_row`; rows are apart (`rs ≥ cols`)
            // and `out` is 4-aligned (checked above), and only this
            // slice touches these bytes while it lives (other blocks
            // write other tiles).
            dst: unsafe { core::slice::from_raw_parts_mut(gm.add(g.row(q)), cols) },
            src: ma.dst - row_bytes as u32,
            f: factor(ub, q),
            stream: stream.is_some(),
            prefetch: cur.take(row_lines),
        });
        row_map(ub, row(r), &ma, store);
        (unary.0)(ub, &ua);
    }
    store_row(ub, rows - 1, &mut cur);
    if stream.is_some() {
        stream_fence();
    }
    Ok(true)
}

/// Stores the valid box of tile `coord` from `ub` through `p` into `buf`.
/// Where several elements of the box map to one address (stride 0), the
/// last in row-major order wins.
///
/// # Errors
/// A [`GmFault`] if the box leaves `buf` or `ub`, or `buf` is read-only
/// (never for a verified kernel under a checked [`KernelArgs`]); nothing is
/// written then.
#[inline]
pub fn store_tile(
    p: &GmPattern,
    coord: [u32; 3],
    buf: &GmBuf<'_>,
    ub: &[u8],
) -> Result<(), GmFault> {
    if !buf.writable {
        return Err(GmFault::ReadOnly);
    }
    let g = Geom::new(p, coord, buf.len, ub.len())?;
    match p.dtype.size() {
        4 => store_t::<u32>(&g, buf, ub),
        2 => store_t::<u16>(&g, buf, ub),
        1 => store_t::<u8>(&g, buf, ub),
        _ => return Err(GmFault::Operand),
    }
    Ok(())
}

#[inline(always)]
fn store_t<T: Bits>(g: &Geom, buf: &GmBuf<'_>, ub: &[u8]) {
    if g.re == 0 || g.ce == 0 {
        return;
    }
    let gm = buf.ptr.cast::<T>();
    // SAFETY: `Geom::new` checked the UB box lies inside `ub`.
    let box_ptr = unsafe { ub.as_ptr().add(g.ub) }.cast::<T>();
    // Offsets as in `load_t`; `buf` is writable (checked by the caller) so
    // valid for writes by `GmBuf`'s contract.
    if g.contiguous() {
        // SAFETY: see above.
        unsafe { ptr::copy_nonoverlapping(box_ptr, gm.add(g.origin), g.re * g.ce) };
    } else if g.cs == 1 {
        for r in 0..g.re {
            // SAFETY: see above. Rows may overlap in GM (row stride below
            // the width); `copy_nonoverlapping` only needs source and
            // destination of one call to be disjoint, which they are.
            unsafe { ptr::copy_nonoverlapping(box_ptr.add(r * g.pitch), gm.add(g.row(r)), g.ce) };
        }
    } else if g.cs == 0 {
        for r in 0..g.re {
            // SAFETY: see above; the row's last element wins.
            unsafe {
                let v = box_ptr.add(r * g.pitch + g.ce - 1).read_unaligned();
                gm.add(g.row(r)).write_unaligned(v);
            }
        }
    } else {
        for r in 0..g.re {
            // SAFETY: see above.
            unsafe {
                let src = box_ptr.add(r * g.pitch);
                let dst = gm.add(g.row(r));
                for k in 0..g.ce {
                    dst.add(k * g.cs)
                        .write_unaligned(src.add(k).read_unaligned());
                }
            }
        }
    }
}

/// Stores into a parameter whose accesses span at least this many bytes
/// may bypass the caches (non-temporal stores): an output that large does
/// not stay in cache for its consumer anyway, and streaming it saves the
/// read-for-ownership of every destination line. Below this size an
/// output may still be in cache when its consumer reads it, and streaming
/// it measured slower.
pub const STREAM_MIN_BYTES: u64 = 8 << 20;

/// Contiguous runs shorter than this are stored normally even when
/// streaming (partial write-combining lines are slow).
const STREAM_MIN_RUN: usize = 4096;

/// Most read regions one streaming store prefetches.
const MAX_PREFETCH: usize = 4;

/// Global-memory byte ranges to prefetch while a streaming store runs
/// (the next tile's loads), so that reads and writes overlap as the load
/// and store pipes do on the device. Only hints: the addresses are never
/// dereferenced, and a prefetch does not fault.
#[derive(Clone, Copy, Debug, Default)]
pub struct Prefetch {
    regions: [(usize, usize); MAX_PREFETCH],
    n: usize,
}

impl Prefetch {
    /// No prefetch.
    pub const NONE: Prefetch = Prefetch {
        regions: [(0, 0); MAX_PREFETCH],
        n: 0,
    };

    /// Adds the box that `p` loads from `buf` at tile `coord`, if it is one
    /// contiguous run inside `buf` (other boxes are left to the hardware
    /// prefetcher) and there is room.
    pub fn add_load(&mut self, p: &GmPattern, coord: [u32; 3], buf: &GmBuf<'_>) {
        if self.n >= MAX_PREFETCH {
            return;
        }
        let Ok(g) = Geom::new(p, coord, buf.len, usize::MAX) else {
            return;
        };
        if g.re == 0 || g.ce == 0 || !g.contiguous() {
            return;
        }
        let size = p.dtype.size() as usize;
        let addr = (buf.ptr as usize).wrapping_add(g.origin * size);
        self.regions[self.n] = (addr, g.re * g.ce * size);
        self.n += 1;
    }

    fn bytes(&self) -> usize {
        self.regions[..self.n].iter().map(|r| r.1).sum()
    }

    /// The first `num / den` of the bytes (whole lines), and the rest.
    pub fn split(&self, (num, den): (usize, usize)) -> (Prefetch, Prefetch) {
        let cut = (self.bytes() * num / den.max(1)) / 64 * 64;
        let (mut head, mut tail) = (Prefetch::NONE, Prefetch::NONE);
        let mut seen = 0;
        for &(addr, len) in &self.regions[..self.n] {
            let h = cut.saturating_sub(seen).min(len);
            if h > 0 {
                head.regions[head.n] = (addr, h);
                head.n += 1;
            }
            if h < len {
                tail.regions[tail.n] = (addr.wrapping_add(h), len - h);
                tail.n += 1;
            }
            seen += len;
        }
        (head, tail)
    }

    /// A step that prefetches the next share of these lines, `steps` calls
    /// of it covering them once (rounded up per call).
    pub fn spread(&self, steps: usize) -> impl FnMut() + '_ {
        let mut cur = Cursor::new(self, steps.saturating_mul(64));
        move || cur.step()
    }
}

/// Walks the prefetch regions a few cache lines per stored line.
struct Cursor<'a> {
    pf: &'a Prefetch,
    region: usize,
    off: usize,
    per_line: usize,
}

impl<'a> Cursor<'a> {
    fn new(pf: &'a Prefetch, store_bytes: usize) -> Cursor<'a> {
        let total = pf.bytes();
        let per_line = if total == 0 {
            0
        } else {
            total.div_ceil(store_bytes.max(1)).max(1)
        };
        Cursor {
            pf,
            region: 0,
            off: 0,
            per_line,
        }
    }

    /// The prefetches due over a store of `stored_lines` lines, as one
    /// contiguous run to spread over that store ([`PrefetchRun::share`]);
    /// when a region ends inside it, the rest of the share waits for the
    /// next call.
    fn take(&mut self, stored_lines: usize) -> PrefetchRun {
        let Some(&(addr, len)) = self.pf.regions[..self.pf.n].get(self.region) else {
            return PrefetchRun::NONE;
        };
        let bytes = (self.per_line * stored_lines * 64).min(len - self.off);
        let run = PrefetchRun {
            addr: addr.wrapping_add(self.off),
            bytes,
        };
        self.off += bytes;
        if self.off >= len {
            self.region += 1;
            self.off = 0;
        }
        run
    }

    /// Prefetches the next `per_line` lines.
    #[inline(always)]
    fn step(&mut self) {
        for _ in 0..self.per_line {
            let Some(&(addr, len)) = self.pf.regions[..self.pf.n].get(self.region) else {
                return;
            };
            prefetch(addr.wrapping_add(self.off));
            self.off += 64;
            if self.off >= len {
                self.region += 1;
                self.off = 0;
            }
        }
    }
}

/// Copies `n` bytes to `dst`, bypassing the caches where the target has
/// non-temporal stores (x86-64), and prefetching through `cur` as it goes.
///
/// # Safety
/// `src` valid for reads and `dst` for writes of `n` bytes; no overlap.
#[inline(always)]
unsafe fn stream_copy(dst: *mut u8, src: *const u8, n: usize, cur: &mut Cursor<'_>) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let head = ((16 - (dst as usize & 15)) & 15).min(n);
        // SAFETY: the head, 64-byte blocks and tail below partition `0..n`;
        // the blocks' destinations are 16-byte aligned.
        unsafe {
            ptr::copy_nonoverlapping(src, dst, head);
            let mut i = head;
            while i + 64 <= n {
                cur.step();
                let s = src.add(i).cast::<__m128i>();
                let d = dst.add(i).cast::<__m128i>();
                let v0 = _mm_loadu_si128(s);
                let v1 = _mm_loadu_si128(s.add(1));
                let v2 = _mm_loadu_si128(s.add(2));
                let v3 = _mm_loadu_si128(s.add(3));
                _mm_stream_si128(d, v0);
                _mm_stream_si128(d.add(1), v1);
                _mm_stream_si128(d.add(2), v2);
                _mm_stream_si128(d.add(3), v3);
                i += 64;
            }
            ptr::copy_nonoverlapping(src.add(i), dst.add(i), n - i);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut i = 0;
        while i < n {
            let len = (n - i).min(4096);
            for _ in 0..len.div_ceil(64) {
                cur.step();
            }
            // SAFETY: `i..i + len` lies inside `0..n`.
            unsafe { ptr::copy_nonoverlapping(src.add(i), dst.add(i), len) };
            i += len;
        }
    }
}

/// Orders this core's non-temporal stores before whatever follows (other
/// blocks may read the data after a barrier).
#[inline(always)]
fn stream_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no memory-safety preconditions.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
}

/// [`store_tile`] with non-temporal stores for long contiguous runs,
/// prefetching `prefetch` (the next tile's loads) while it writes. Same
/// result as [`store_tile`].
///
/// # Errors
/// As [`store_tile`].
#[inline]
pub fn store_tile_streaming(
    p: &GmPattern,
    coord: [u32; 3],
    buf: &GmBuf<'_>,
    ub: &[u8],
    prefetch: &Prefetch,
) -> Result<(), GmFault> {
    if !buf.writable {
        return Err(GmFault::ReadOnly);
    }
    let g = Geom::new(p, coord, buf.len, ub.len())?;
    let size = p.dtype.size() as usize;
    if !(1..=4).contains(&size) {
        return Err(GmFault::Operand);
    }
    let run = g.run_bytes(size);
    if !g.streams(size) {
        match size {
            4 => store_t::<u32>(&g, buf, ub),
            2 => store_t::<u16>(&g, buf, ub),
            _ => store_t::<u8>(&g, buf, ub),
        }
        return Ok(());
    }
    let mut cur = Cursor::new(prefetch, g.re * g.ce * size);
    // SAFETY: `Geom::new` checked the UB box lies inside `ub`.
    let box_ptr = unsafe { ub.as_ptr().add(g.ub) };
    let gm = buf.ptr;
    // SAFETY: offsets as in `store_t` (in bytes here): every run lies inside
    // the checked GM box and UB box; `buf` is writable; UB and GM do not
    // overlap.
    unsafe {
        if g.contiguous() {
            stream_copy(gm.add(g.origin * size), box_ptr, run, &mut cur);
        } else {
            for r in 0..g.re {
                stream_copy(
                    gm.add(g.row(r) * size),
                    box_ptr.add(r * g.pitch * size),
                    run,
                    &mut cur,
                );
            }
        }
    }
    stream_fence();
    Ok(())
}

/// The box of a store that maps its rows on their way out
/// ([`StoreMap`]): writable, `f32`, contiguous columns.
///
/// # Errors
/// [`GmFault::ReadOnly`], [`GmFault::Operand`] for another box, or
/// [`Geom::new`]'s.
fn mapped_box(
    p: &GmPattern,
    coord: [u32; 3],
    buf: &GmBuf<'_>,
    ub_len: usize,
) -> Result<Geom, GmFault> {
    if !buf.writable {
        return Err(GmFault::ReadOnly);
    }
    if p.dtype != DType::F32 || p.col_stride != 1 {
        return Err(GmFault::Operand);
    }
    Geom::new(p, coord, buf.len, ub_len)
}

/// [`store_tile`] of an `f32` box whose row `r` is multiplied by the `f32`
/// at UB byte offset `scale + 4r` on its way out: a row scale (`brccol`
/// then `mul`, as a softmax ends) fused with the store of its result by
/// `crate::peephole`, the same products as the two instructions leave in
/// global memory, without the scaled tile's pass through UB. With
/// `prefetch`, long runs go out with non-temporal stores as in
/// [`store_tile_streaming`], prefetching it on the way.
///
/// # Errors
/// As [`store_tile`]; [`GmFault::Operand`] for a box that is not `f32`
/// with contiguous columns, and [`GmFault::Ub`] for factors outside `ub`
/// or off the element alignment; nothing is written then.
#[inline]
pub fn store_tile_scaled(
    p: &GmPattern,
    coord: [u32; 3],
    buf: &GmBuf<'_>,
    ub: &[u8],
    scale: u32,
    prefetch: Option<&Prefetch>,
) -> Result<(), GmFault> {
    let g = mapped_box(p, coord, buf, ub.len())?;
    let factors_end = g
        .rows
        .checked_mul(4)
        .and_then(|b| b.checked_add(scale as usize));
    if !scale.is_multiple_of(4) || factors_end.is_none_or(|e| e > ub.len()) {
        return Err(GmFault::Ub);
    }
    if g.re == 0 || g.ce == 0 {
        return Ok(());
    }
    let stream = prefetch.filter(|_| g.streams(4));
    let mut cur = Cursor::new(stream.unwrap_or(&Prefetch::NONE), g.re * g.ce * 4);
    // SAFETY: `Geom::new` checked the UB box lies inside `ub`, and the
    // factors were checked above; `ub` is not written here.
    let (box_ptr, factors) = unsafe {
        (
            ub.as_ptr().add(g.ub).cast::<f32>(),
            ub.as_ptr().add(scale as usize).cast::<f32>(),
        )
    };
    let gm = buf.ptr.cast::<f32>();
    for r in 0..g.re {
        // SAFETY: row `r < re ≤ rows` has its factor inside the checked
        // range and its `ce ≤ pitch` elements inside the UB box and, at
        // `row(r)`, inside the checked GM box of the writable `buf`; UB
        // and GM do not overlap.
        unsafe {
            let f = factors.add(r).read_unaligned();
            let (dst, src) = (gm.add(g.row(r)), box_ptr.add(r * g.pitch));
            if stream.is_some() {
                stream_scaled(dst, src, g.ce, f, || cur.step());
            } else {
                scale_run(dst, src, g.ce, f);
            }
        }
    }
    if stream.is_some() {
        stream_fence();
    }
    Ok(())
}

/// What a store does to the elements of its box on their way out. Besides
/// a plain copy, the superinstruction of an `f32` op over the stored tile
/// and the store of its result (`crate::peephole`): the op's results go
/// straight to global memory, and the tile is never written in UB.
#[derive(Clone, Copy, Debug)]
pub enum StoreMap {
    /// None: the box as UB holds it (the decoder's store).
    Copy,
    /// Row `r` multiplied by the `f32` at UB byte offset `v + 4r`: a row
    /// scale (`brccol` then `mul`, as a softmax ends), [`store_tile_scaled`].
    Scale(u32),
    /// A norm's tail, [`store_tile_affine`].
    Affine(AffineStore),
}

impl StoreMap {
    /// The UB byte ranges the map reads besides the box, for a box of
    /// `rows` rows and `cols` columns (empty ranges where it reads none).
    pub fn operands(&self, rows: u32, cols: u32) -> [(u32, u32); 3] {
        let span = |at: u32, n: u32| (at, at.saturating_add(n.saturating_mul(4)));
        match self {
            StoreMap::Copy => [(0, 0); 3],
            StoreMap::Scale(v) => [span(*v, rows), (0, 0), (0, 0)],
            StoreMap::Affine(m) => [
                span(m.scale, rows),
                span(m.weight, cols),
                if m.has_bias() {
                    span(m.bias, cols)
                } else {
                    (0, 0)
                },
            ],
        }
    }
}

/// A norm's tail applied as an `f32` box is stored: row `r` of the box
/// `x` leaves as `((x · s[r]) · g) + b`, `s` the row scales, `g` the
/// weight row and `b` the bias row (if any), all in UB; the products and
/// the sum round as the instructions it replaces (`brccol; mul`, `brcrow;
/// mul`, `brcrow; add`) did.
#[derive(Clone, Copy, Debug)]
pub struct AffineStore {
    /// UB byte offset of the row scales (one `f32` per row of the box).
    pub scale: u32,
    /// UB byte offset of the weight row (one `f32` per column).
    pub weight: u32,
    /// UB byte offset of the bias row, read only when the flags have a
    /// bias.
    pub bias: u32,
    /// Whether there is a bias, as the norm's tail superinstruction's
    /// flags say.
    pub flags: u32,
    /// The row map, for this CPU's vector extensions.
    pub row: crate::ops::AffineRow,
}

impl AffineStore {
    /// Whether a bias row is added.
    pub fn has_bias(&self) -> bool {
        self.flags & crate::ops::AFFINE_BIAS != 0
    }
}

/// Elements of a row mapped at a time by [`store_tile_affine`] before they
/// are stored: 4 KiB (a 768-column row in one), which stays in L1 between
/// the two.
const AFFINE_CHUNK: usize = 1024;

/// [`store_tile`] of an `f32` box through a norm's tail ([`AffineStore`]):
/// each row is mapped a chunk at a time into a buffer in L1 and the chunk
/// stored from there, so the stores go out while the next chunk computes.
/// With `prefetch`, long runs go out with non-temporal stores as in
/// [`store_tile_streaming`], prefetching it on the way.
///
/// # Errors
/// As [`store_tile`]; [`GmFault::Operand`] for a box that is not `f32`
/// with contiguous columns, and [`GmFault::Ub`] for a scale, weight or
/// bias vector outside `ub` or off the element alignment, or a box off it;
/// nothing is written then.
#[inline]
pub fn store_tile_affine(
    p: &GmPattern,
    coord: [u32; 3],
    buf: &GmBuf<'_>,
    ub: &[u8],
    map: &AffineStore,
    prefetch: Option<&Prefetch>,
) -> Result<(), GmFault> {
    let g = mapped_box(p, coord, buf, ub.len())?;
    let vector = |at: u32, n: usize| {
        let r = crate::ops::range_of::<f32>(at, n)?;
        crate::ops::view::<f32>(ub.get(r)?)
    };
    let bias_at = if map.has_bias() { map.bias } else { map.weight };
    let (Some(s), Some(w), Some(b)) = (
        vector(map.scale, g.rows),
        vector(map.weight, g.ce),
        vector(bias_at, g.ce),
    ) else {
        return Err(GmFault::Ub);
    };
    // The box's rows, as `f32` slices: `Geom::new` checked the box lies
    // inside `ub`; its alignment is checked here.
    let row = |r: usize| {
        let at = g.ub + r * g.pitch * 4;
        crate::ops::view::<f32>(ub.get(at..at + g.ce * 4)?)
    };
    if g.re == 0 || g.ce == 0 {
        return Ok(());
    }
    if row(0).is_none() {
        return Err(GmFault::Ub);
    }
    let stream = prefetch.filter(|_| g.streams(4));
    let mut cur = Cursor::new(stream.unwrap_or(&Prefetch::NONE), g.re * g.ce * 4);
    let mut chunk = [0f32; AFFINE_CHUNK];
    for (r, &f) in s.iter().enumerate().take(g.re) {
        let Some(x) = row(r) else {
            // Cannot happen: every row has the first one's alignment and
            // lies inside the checked box.
            return Err(GmFault::Ub);
        };
        // (Slicing, not `chunks`: three zipped `Chunks` cost six integer
        // divisions per row, as much as a 768-column row's arithmetic.)
        let mut c0 = 0;
        while c0 < g.ce {
            let c1 = (c0 + AFFINE_CHUNK).min(g.ce);
            let out = &mut chunk[..c1 - c0];
            (map.row)(out, &x[c0..c1], f, &w[c0..c1], &b[c0..c1], map.flags);
            let src = out.as_ptr().cast::<u8>();
            // SAFETY: columns `c0..c1` lie inside row `r` of the GM box
            // that `Geom::new` checked against the writable `buf` (columns
            // contiguous: `col_stride == 1`); `chunk` is a local array,
            // apart from global memory.
            unsafe {
                let dst = buf.ptr.add((g.row(r) + c0) * 4);
                if stream.is_some() {
                    stream_copy(dst, src, (c1 - c0) * 4, &mut cur);
                } else {
                    ptr::copy_nonoverlapping(src, dst, (c1 - c0) * 4);
                }
            }
            c0 = c1;
        }
    }
    if stream.is_some() {
        stream_fence();
    }
    Ok(())
}

/// Adds the valid box of tile `coord` from `ub` into `buf` through `p`,
/// atomically per element: correct when several blocks add into the same
/// elements concurrently. Floats add in `f32` and round to the element
/// type; integers wrap.
///
/// # Errors
/// A [`GmFault`] if the box leaves `buf` or `ub`, `buf` is read-only or
/// misaligned, or the dtype is bool (never for a verified kernel under a
/// checked [`KernelArgs`]); nothing is written then.
#[inline]
pub fn store_add_tile(
    p: &GmPattern,
    coord: [u32; 3],
    buf: &GmBuf<'_>,
    ub: &[u8],
) -> Result<(), GmFault> {
    if !buf.writable {
        return Err(GmFault::ReadOnly);
    }
    if (buf.ptr as usize) & (p.dtype.size() as usize - 1) != 0 {
        return Err(GmFault::Operand);
    }
    let g = Geom::new(p, coord, buf.len, ub.len())?;
    match p.dtype {
        DType::F32 => add_t::<AddF32>(&g, buf, ub),
        DType::F16 => add_t::<AddF16>(&g, buf, ub),
        DType::BF16 => add_t::<AddBf16>(&g, buf, ub),
        DType::I32 => add_t::<AddI32>(&g, buf, ub),
        DType::I8 => add_t::<AddI8>(&g, buf, ub),
        DType::Bool | DType::I64 => return Err(GmFault::Operand),
    }
    Ok(())
}

/// Atomic read-modify-write add of one element type.
trait AtomicAdd {
    type Bits: Bits;
    /// Adds `v` into the element at `p`.
    ///
    /// # Safety
    /// `p` is valid for reads and writes, aligned to the element size, and only
    /// accessed atomically by other threads while this runs.
    unsafe fn add(p: *mut Self::Bits, v: Self::Bits);
}

/// f32 bits: CAS loop.
struct AddF32;
impl AtomicAdd for AddF32 {
    type Bits = u32;
    #[inline(always)]
    unsafe fn add(p: *mut u32, v: u32) {
        // SAFETY: the caller guarantees validity, alignment and atomic-only
        // concurrent access.
        let a = unsafe { AtomicU32::from_ptr(p) };
        let v = f32::from_bits(v);
        let _ = a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
            Some((f32::from_bits(old) + v).to_bits())
        });
    }
}

/// f16 bits: CAS loop, sum in f32.
struct AddF16;
impl AtomicAdd for AddF16 {
    type Bits = u16;
    #[inline(always)]
    unsafe fn add(p: *mut u16, v: u16) {
        // SAFETY: as for `AddF32`.
        let a = unsafe { AtomicU16::from_ptr(p) };
        let v = half::f16::from_bits(v).to_f32();
        let _ = a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
            Some(half::f16::from_f32(half::f16::from_bits(old).to_f32() + v).to_bits())
        });
    }
}

/// bf16 bits: CAS loop, sum in f32.
struct AddBf16;
impl AtomicAdd for AddBf16 {
    type Bits = u16;
    #[inline(always)]
    unsafe fn add(p: *mut u16, v: u16) {
        // SAFETY: as for `AddF32`.
        let a = unsafe { AtomicU16::from_ptr(p) };
        let v = half::bf16::from_bits(v).to_f32();
        let _ = a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
            Some(half::bf16::from_f32(half::bf16::from_bits(old).to_f32() + v).to_bits())
        });
    }
}

/// i32: wrapping `fetch_add`.
struct AddI32;
impl AtomicAdd for AddI32 {
    type Bits = u32;
    #[inline(always)]
    unsafe fn add(p: *mut u32, v: u32) {
        // SAFETY: as for `AddF32`.
        let a = unsafe { AtomicI32::from_ptr(p.cast::<i32>()) };
        a.fetch_add(v as i32, Ordering::Relaxed);
    }
}

/// i8: wrapping `fetch_add`.
struct AddI8;
impl AtomicAdd for AddI8 {
    type Bits = u8;
    #[inline(always)]
    unsafe fn add(p: *mut u8, v: u8) {
        // SAFETY: as for `AddF32`.
        let a = unsafe { AtomicI8::from_ptr(p.cast::<i8>()) };
        a.fetch_add(v as i8, Ordering::Relaxed);
    }
}

#[inline(always)]
fn add_t<A: AtomicAdd>(g: &Geom, buf: &GmBuf<'_>, ub: &[u8]) {
    let gm = buf.ptr.cast::<A::Bits>();
    // SAFETY: `Geom::new` checked the UB box lies inside `ub`.
    let box_ptr = unsafe { ub.as_ptr().add(g.ub) }.cast::<A::Bits>();
    for r in 0..g.re {
        for k in 0..g.ce {
            // SAFETY: offsets as in `load_t`; `buf` is writable and its base
            // aligned to the element size (checked by the caller), and every
            // offset is a whole number of elements, so the element is
            // aligned; other blocks touch it only atomically (contract of
            // `GmBuf::from_raw_parts`; slices are exclusive).
            unsafe {
                let v = box_ptr.add(r * g.pitch + k).read_unaligned();
                A::add(gm.add(g.row(r) + k * g.cs), v);
            }
        }
    }
}
