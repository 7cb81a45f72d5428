//! The module container: a fixed header, a section table, and the sections
//! (kernel table, body table, parameter table, code, metadata).
//!
//! ```text
//! Header (32 bytes)      magic "DVMB", version major.minor, feature bits,
//!                        section count, header size
//! SectionEntry × count   kind, offset, length (24 bytes each)
//! KERNELS                KernelEntry × n (24 bytes each)
//! BODIES                 BodyEntry × n   (24 bytes each)
//! PARAMS                 ParamEntry × n  (4 bytes each)
//! CODE                   little-endian u64 words
//! META                   postcard-encoded `ModuleMeta` (names, signatures, labels)
//! ```
//!
//! All multi-byte fields are little-endian and every table type has alignment
//! one, so [`Module::parse`] views the bytes in place: nothing is copied.

use core::fmt;

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::dtype::{DType, DTypeSet};
use crate::error::{ParseError, SectionSite, ShortName};

/// The four magic bytes a module starts with.
pub const MAGIC: [u8; 4] = *b"DVMB";
/// Major version this crate reads and writes; other majors are rejected.
pub const VERSION_MAJOR: u16 = 1;
/// Minor version this crate writes; readers accept any minor of their major.
pub const VERSION_MINOR: u16 = 0;

/// Feature bits a module declares; a reader rejects bits it does not know,
/// and the verifier rejects instructions that need an undeclared feature.
pub mod features {
    /// Some instruction touches f16 data.
    pub const F16: u64 = 1 << 0;
    /// Some instruction touches bf16 data.
    pub const BF16: u64 = 1 << 1;
    /// Some kernel uses the cube unit (matmul).
    pub const CUBE: u64 = 1 << 2;
    /// Some kernel stores with atomic add.
    pub const ATOMIC_ADD: u64 = 1 << 3;
    /// Some kernel has several bodies (parallel or sequence kinds).
    pub const MULTI_BODY: u64 = 1 << 4;
    /// Every feature this version knows.
    pub const KNOWN: u64 = F16 | BF16 | CUBE | ATOMIC_ADD | MULTI_BODY;

    /// Names, for the disassembler, in bit order.
    pub const NAMES: [(&str, u64); 5] = [
        ("f16", F16),
        ("bf16", BF16),
        ("cube", CUBE),
        ("atomic_add", ATOMIC_ADD),
        ("multi_body", MULTI_BODY),
    ];
}

/// The feature bits an instruction needs.
pub fn instr_features(instr: &crate::instr::Instr) -> u64 {
    let mut f = opcode_features(instr.opcode());
    instr.dtype_rules(|_, d, _| f |= dtype_features(d));
    f
}

/// The feature bits an instruction needs for one of its dtype fields (the
/// part of [`instr_features`] that depends on the dtypes).
#[inline]
pub const fn dtype_features(d: DType) -> u64 {
    match d {
        DType::F16 => features::F16,
        DType::BF16 => features::BF16,
        _ => 0,
    }
}

/// The feature bits an opcode needs whatever its dtypes (the rest of
/// [`instr_features`]).
#[inline]
pub const fn opcode_features(op: crate::instr::Opcode) -> u64 {
    use crate::instr::Opcode;
    match op {
        Opcode::Matmul => features::CUBE,
        Opcode::StoreAdd => features::ATOMIC_ADD,
        _ => 0,
    }
}

/// The fixed module header.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct Header {
    /// [`MAGIC`].
    pub magic: [u8; 4],
    /// Major version.
    pub version_major: U16,
    /// Minor version.
    pub version_minor: U16,
    /// Feature bits (see [`features`]).
    pub features: U64,
    /// Number of section entries following the header.
    pub section_count: U32,
    /// Size of this header in bytes (32).
    pub header_size: U32,
    /// Reserved, zero.
    pub reserved: U64,
}

/// Size of [`Header`] in bytes.
pub const HEADER_SIZE: usize = core::mem::size_of::<Header>();

/// Section kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum SectionKind {
    /// [`KernelEntry`] table.
    Kernels = 1,
    /// [`BodyEntry`] table.
    Bodies = 2,
    /// [`ParamEntry`] table.
    Params = 3,
    /// Instruction words.
    Code = 4,
    /// postcard-encoded metadata.
    Meta = 5,
}

impl SectionKind {
    const ALL: [SectionKind; 5] = [
        SectionKind::Kernels,
        SectionKind::Bodies,
        SectionKind::Params,
        SectionKind::Code,
        SectionKind::Meta,
    ];
}

/// One entry of the section table.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct SectionEntry {
    /// A [`SectionKind`] value.
    pub kind: U32,
    /// Reserved, zero.
    pub reserved: U32,
    /// Byte offset from the start of the module.
    pub offset: U64,
    /// Length in bytes.
    pub len: U64,
}

/// What a kernel does and how its bodies run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum KernelKind {
    /// Vector unit only; one body.
    Vector = 0,
    /// Cube unit (matmul) with loads and stores; one body.
    Cube = 1,
    /// Matmul plus a vector epilogue; one body.
    Mix = 2,
    /// Several independent bodies in one launch: their tile ranges are
    /// concatenated and split across blocks, so different cores run
    /// different bodies.
    Parallel = 3,
    /// Several dependent bodies run in order, every block finishing one
    /// before any starts the next (a barrier between stages).
    Sequence = 4,
}

impl KernelKind {
    /// All kinds.
    pub const ALL: [KernelKind; 5] = [
        KernelKind::Vector,
        KernelKind::Cube,
        KernelKind::Mix,
        KernelKind::Parallel,
        KernelKind::Sequence,
    ];

    /// Decodes the one-byte encoding.
    pub const fn from_u8(v: u8) -> Option<KernelKind> {
        match v {
            0 => Some(KernelKind::Vector),
            1 => Some(KernelKind::Cube),
            2 => Some(KernelKind::Mix),
            3 => Some(KernelKind::Parallel),
            4 => Some(KernelKind::Sequence),
            _ => None,
        }
    }

    /// Lower-case name used by the assembler.
    pub const fn name(self) -> &'static str {
        match self {
            KernelKind::Vector => "vector",
            KernelKind::Cube => "cube",
            KernelKind::Mix => "mix",
            KernelKind::Parallel => "parallel",
            KernelKind::Sequence => "sequence",
        }
    }

    /// Parses a name produced by [`KernelKind::name`].
    pub fn from_name(s: &str) -> Option<KernelKind> {
        KernelKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// True for the kinds that carry exactly one body.
    pub const fn single_body(self) -> bool {
        matches!(
            self,
            KernelKind::Vector | KernelKind::Cube | KernelKind::Mix
        )
    }
}

impl fmt::Display for KernelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One entry of the kernel table.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct KernelEntry {
    /// A [`KernelKind`] value.
    pub kind: u8,
    /// Reserved, zero.
    pub reserved: [u8; 3],
    /// UB bytes the kernel needs (every UB access lies below this).
    pub ub_bytes: U32,
    /// First entry of the kernel's parameters in the parameter table.
    pub param_start: U32,
    /// Number of parameters.
    pub param_count: U32,
    /// First entry of the kernel's bodies in the body table.
    pub body_start: U32,
    /// Number of bodies.
    pub body_count: U32,
}

/// One body: a tile grid and the code run once per tile.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct BodyEntry {
    /// Tile grid; tiles are numbered row-major, dimension 2 fastest.
    pub grid: [U32; 3],
    /// Reserved, zero.
    pub reserved: U32,
    /// First word of the body in the code section.
    pub code_start: U32,
    /// Length of the body in words.
    pub code_len: U32,
}

impl BodyEntry {
    /// The grid as plain integers.
    pub fn grid(&self) -> [u32; 3] {
        [self.grid[0].get(), self.grid[1].get(), self.grid[2].get()]
    }
}

/// How a kernel uses a parameter buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ParamAccess {
    /// Loaded only.
    Read = 1,
    /// Stored only.
    Write = 2,
    /// Loaded and stored.
    ReadWrite = 3,
}

impl ParamAccess {
    /// Decodes the one-byte encoding.
    pub const fn from_u8(v: u8) -> Option<ParamAccess> {
        match v {
            1 => Some(ParamAccess::Read),
            2 => Some(ParamAccess::Write),
            3 => Some(ParamAccess::ReadWrite),
            _ => None,
        }
    }
    /// True when loads may read the buffer.
    pub const fn readable(self) -> bool {
        matches!(self, ParamAccess::Read | ParamAccess::ReadWrite)
    }
    /// True when stores may write the buffer.
    pub const fn writable(self) -> bool {
        matches!(self, ParamAccess::Write | ParamAccess::ReadWrite)
    }
    /// Lower-case name used by the assembler.
    pub const fn name(self) -> &'static str {
        match self {
            ParamAccess::Read => "in",
            ParamAccess::Write => "out",
            ParamAccess::ReadWrite => "inout",
        }
    }
    /// Parses a name produced by [`ParamAccess::name`].
    pub fn from_name(s: &str) -> Option<ParamAccess> {
        [
            ParamAccess::Read,
            ParamAccess::Write,
            ParamAccess::ReadWrite,
        ]
        .into_iter()
        .find(|a| a.name() == s)
    }
}

/// One entry of the parameter table.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct ParamEntry {
    /// A [`DType`] value.
    pub dtype: u8,
    /// A [`ParamAccess`] value.
    pub access: u8,
    /// Reserved, zero.
    pub reserved: [u8; 2],
}

/// A parsed module: typed views into the caller's bytes.
#[derive(Clone, Copy, Debug)]
pub struct Module<'a> {
    bytes: &'a [u8],
    header: &'a Header,
    kernels: &'a [KernelEntry],
    bodies: &'a [BodyEntry],
    params: &'a [ParamEntry],
    code: &'a [U64],
    meta: &'a [u8],
}

/// A parameter of a kernel, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    /// Element type.
    pub dtype: DType,
    /// How the kernel uses it.
    pub access: ParamAccess,
}

/// One kernel of a parsed module.
#[derive(Clone, Copy, Debug)]
pub struct KernelRef<'a> {
    /// Index in the module's kernel table.
    pub index: u32,
    /// Kind.
    pub kind: KernelKind,
    /// UB bytes needed.
    pub ub_bytes: u32,
    /// The kernel's bodies.
    pub bodies: &'a [BodyEntry],
    /// The kernel's parameters (validated by [`Module::parse`]).
    params: &'a [ParamEntry],
    /// The whole code section (bodies index into it).
    pub code: &'a [U64],
}

impl<'a> KernelRef<'a> {
    /// Number of parameters.
    pub fn param_count(&self) -> usize {
        self.params.len()
    }

    /// Parameter `i`, if it exists.
    pub fn param(&self, i: usize) -> Option<Param> {
        let e = self.params.get(i)?;
        Some(Param {
            dtype: DType::from_u8(e.dtype)?,
            access: ParamAccess::from_u8(e.access)?,
        })
    }

    /// The parameters, in order.
    pub fn params(&self) -> impl Iterator<Item = Param> + '_ {
        (0..self.params.len()).filter_map(|i| self.param(i))
    }

    /// The code words of body `b`.
    pub fn body_code(&self, b: usize) -> Option<&'a [U64]> {
        let body = self.bodies.get(b)?;
        let start = body.code_start.get() as usize;
        self.code
            .get(start..start.checked_add(body.code_len.get() as usize)?)
    }
}

fn view<T: FromBytes + KnownLayout + Immutable + Unaligned>(
    bytes: &[u8],
    what: SectionKind,
) -> Result<&[T], ParseError> {
    <[T]>::ref_from_bytes(bytes).map_err(|_| ParseError::SectionSize(what))
}

impl<'a> Module<'a> {
    /// Parses a module, viewing `bytes` in place.
    ///
    /// Checks the header (magic, version, known features), the section table
    /// (every section present once, inside the buffer, sized to whole
    /// entries), that the sections tile the module (each starts where the
    /// section table or the section before it ends, rounded up to 8 bytes
    /// with zero padding, and the last ends at the end of `bytes`), every
    /// table index (kernel → parameters and bodies, body → code), and the
    /// metadata: it decodes as exactly one canonical postcard `ModuleMeta`
    /// with an entry per kernel, as many parameter names as the kernel
    /// entry declares, labels on existing bodies and on a word of their
    /// body (a label names the word at its offset, so one at or past the
    /// body's end names nothing: the builder and the assembler refuse it
    /// too), and kernel names unique within the module. Instructions are checked later, by
    /// [`crate::verify`].
    ///
    /// # Errors
    /// A [`ParseError`] naming the first rule broken.
    pub fn parse(bytes: &'a [u8]) -> Result<Module<'a>, ParseError> {
        let (header, rest) = Header::ref_from_prefix(bytes).map_err(|_| ParseError::Truncated {
            what: "header",
            need: HEADER_SIZE as u64,
            have: bytes.len() as u64,
        })?;
        if header.magic != MAGIC {
            return Err(ParseError::BadMagic(header.magic));
        }
        let major = header.version_major.get();
        if major != VERSION_MAJOR {
            return Err(ParseError::UnsupportedVersion {
                major,
                minor: header.version_minor.get(),
            });
        }
        if header.header_size.get() as usize != HEADER_SIZE || header.reserved.get() != 0 {
            return Err(ParseError::BadHeader);
        }
        let unknown = header.features.get() & !features::KNOWN;
        if unknown != 0 {
            return Err(ParseError::UnknownFeatures(unknown));
        }
        let count = header.section_count.get() as usize;
        let (sections, _) =
            <[SectionEntry]>::ref_from_prefix_with_elems(rest, count).map_err(|_| {
                ParseError::Truncated {
                    what: "section table",
                    need: (HEADER_SIZE as u64).saturating_add((count as u64).saturating_mul(24)),
                    have: bytes.len() as u64,
                }
            })?;

        let mut found: [Option<&'a [u8]>; 5] = [None; 5];
        for s in sections {
            let kind = SectionKind::ALL
                .into_iter()
                .find(|k| *k as u32 == s.kind.get())
                .ok_or(ParseError::UnknownSection(s.kind.get()))?;
            if s.reserved.get() != 0 {
                return Err(ParseError::BadHeader);
            }
            let slot = &mut found[kind as usize - 1];
            if slot.is_some() {
                return Err(ParseError::DuplicateSection(kind));
            }
            let start = s.offset.get();
            let end = start
                .checked_add(s.len.get())
                .filter(|e| *e <= bytes.len() as u64)
                .ok_or(ParseError::SectionOutOfBounds {
                    section: kind,
                    offset: start,
                    len: s.len.get(),
                    file_len: bytes.len() as u64,
                })?;
            *slot = Some(&bytes[start as usize..end as usize]);
        }
        let get = |k: SectionKind| found[k as usize - 1].ok_or(ParseError::MissingSection(k));
        for k in SectionKind::ALL {
            get(k)?;
        }
        check_tiling(bytes, sections)?;
        let kernels: &[KernelEntry] = view(get(SectionKind::Kernels)?, SectionKind::Kernels)?;
        let bodies: &[BodyEntry] = view(get(SectionKind::Bodies)?, SectionKind::Bodies)?;
        let params: &[ParamEntry] = view(get(SectionKind::Params)?, SectionKind::Params)?;
        let code: &[U64] = view(get(SectionKind::Code)?, SectionKind::Code)?;
        let meta = get(SectionKind::Meta)?;

        for (i, k) in kernels.iter().enumerate() {
            let i = i as u32;
            KernelKind::from_u8(k.kind).ok_or(ParseError::BadKernel {
                kernel: i,
                what: "unknown kernel kind",
            })?;
            if k.reserved != [0; 3] {
                return Err(ParseError::BadKernel {
                    kernel: i,
                    what: "reserved bytes set",
                });
            }
            range(k.param_start.get(), k.param_count.get(), params.len()).ok_or(
                ParseError::BadKernel {
                    kernel: i,
                    what: "parameter range outside the parameter table",
                },
            )?;
            range(k.body_start.get(), k.body_count.get(), bodies.len()).ok_or(
                ParseError::BadKernel {
                    kernel: i,
                    what: "body range outside the body table",
                },
            )?;
        }
        for (i, b) in bodies.iter().enumerate() {
            range(b.code_start.get(), b.code_len.get(), code.len()).ok_or(ParseError::BadBody {
                body: i as u32,
                what: "code range outside the code section",
            })?;
            if b.reserved.get() != 0 {
                return Err(ParseError::BadBody {
                    body: i as u32,
                    what: "reserved field set",
                });
            }
        }
        for (i, p) in params.iter().enumerate() {
            // Kernel parameters have instruction types (not i64).
            if !DType::from_u8(p.dtype).is_some_and(|d| DTypeSet::ANY.contains(d))
                || ParamAccess::from_u8(p.access).is_none()
                || p.reserved != [0; 2]
            {
                return Err(ParseError::BadParam { param: i as u32 });
            }
        }
        check_meta(meta, kernels, bodies)?;
        Ok(Module {
            bytes,
            header,
            kernels,
            bodies,
            params,
            code,
            meta,
        })
    }

    /// The whole module, as given to [`Module::parse`].
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The header.
    pub fn header(&self) -> &'a Header {
        self.header
    }

    /// Declared feature bits.
    pub fn features(&self) -> u64 {
        self.header.features.get()
    }

    /// Number of kernels.
    pub fn kernel_count(&self) -> usize {
        self.kernels.len()
    }

    /// Kernel `i`, if it exists.
    pub fn kernel(&self, i: usize) -> Option<KernelRef<'a>> {
        let k = self.kernels.get(i)?;
        let ps = k.param_start.get() as usize;
        let bs = k.body_start.get() as usize;
        Some(KernelRef {
            index: i as u32,
            kind: KernelKind::from_u8(k.kind)?,
            ub_bytes: k.ub_bytes.get(),
            bodies: self
                .bodies
                .get(bs..bs.checked_add(k.body_count.get() as usize)?)?,
            params: self
                .params
                .get(ps..ps.checked_add(k.param_count.get() as usize)?)?,
            code: self.code,
        })
    }

    /// The kernels, in order.
    pub fn kernels(&self) -> impl Iterator<Item = KernelRef<'a>> + '_ {
        (0..self.kernels.len()).filter_map(|i| self.kernel(i))
    }

    /// The code section.
    pub fn code(&self) -> &'a [U64] {
        self.code
    }

    /// The raw metadata section.
    pub fn meta_bytes(&self) -> &'a [u8] {
        self.meta
    }

    /// Kernel `k`'s name, read in place from the metadata (no
    /// allocation; `None` for a kernel the module does not hold).
    pub fn kernel_name(&self, k: u32) -> Option<&'a str> {
        let mut found = None;
        // `parse` checked the metadata: the walk does not fail.
        let _ = walk_meta(self.meta, self.kernels, self.bodies, |i, n| {
            if i == k {
                found = Some(n);
            }
            Ok(())
        });
        found
    }

    /// Byte range of section `kind` within [`Module::bytes`].
    ///
    /// For tools that point into a module image, e.g. the linker's ELF
    /// symbols: kernel `i`'s [`KernelEntry`] lies at
    /// `section_range(SectionKind::Kernels).start + i * size_of::<KernelEntry>()`.
    pub fn section_range(&self, kind: SectionKind) -> core::ops::Range<usize> {
        let section: &[u8] = match kind {
            SectionKind::Kernels => self.kernels.as_bytes(),
            SectionKind::Bodies => self.bodies.as_bytes(),
            SectionKind::Params => self.params.as_bytes(),
            SectionKind::Code => self.code.as_bytes(),
            SectionKind::Meta => self.meta,
        };
        // Every section is a sub-slice of `bytes` (see `parse`), so the
        // address difference is its offset.
        let start = (section.as_ptr() as usize).wrapping_sub(self.bytes.as_ptr() as usize);
        start..start + section.len()
    }

    /// Decodes the metadata section.
    ///
    /// # Errors
    /// [`ParseError::BadMeta`] when it is not a valid postcard `ModuleMeta`
    /// whose kernel count matches the kernel table.
    #[cfg(feature = "alloc")]
    pub fn meta(&self) -> Result<crate::meta::ModuleMeta, ParseError> {
        // `parse` checked the section already; this cannot fail for a
        // parsed module, but says why if it ever did.
        let (meta, rest): (crate::meta::ModuleMeta, &[u8]) = postcard::take_from_bytes(self.meta)
            .map_err(|_| ParseError::BadMeta {
            at: 0,
            what: "does not decode",
        })?;
        if !rest.is_empty() {
            return Err(ParseError::BadMeta {
                at: (self.meta.len() - rest.len()) as u64,
                what: "bytes after the metadata",
            });
        }
        if meta.kernels.len() != self.kernels.len() {
            return Err(ParseError::MetaKernelCount {
                meta: meta.kernels.len() as u64,
                table: self.kernels.len() as u64,
            });
        }
        Ok(meta)
    }
}

/// Checks that the sections tile `bytes`: sorted by offset, each starts
/// at the end of what precedes it (the section table, then the previous
/// section) rounded up to 8, the padding is zero, and the last section
/// ends at the end of `bytes`. Every section lies inside `bytes` (checked
/// before).
fn check_tiling(bytes: &[u8], sections: &[SectionEntry]) -> Result<(), ParseError> {
    // Exactly the five kinds, once each (checked before).
    let mut order = [(0u64, 0u64, SectionKind::Kernels); 5];
    for (slot, s) in order.iter_mut().zip(sections) {
        let kind = SectionKind::ALL
            .into_iter()
            .find(|k| *k as u32 == s.kind.get())
            .ok_or(ParseError::UnknownSection(s.kind.get()))?;
        *slot = (s.offset.get(), s.offset.get() + s.len.get(), kind);
    }
    // Stable: equal offsets (empty sections) keep table order.
    for i in 1..order.len() {
        let mut j = i;
        while j > 0 && order[j - 1].0 > order[j].0 {
            order.swap(j - 1, j);
            j -= 1;
        }
    }
    let mut prev_end = (HEADER_SIZE + core::mem::size_of_val(sections)) as u64;
    let mut after = SectionSite::Table;
    for (offset, end, kind) in order {
        let expected = prev_end.next_multiple_of(8);
        if offset != expected {
            return Err(ParseError::SectionGap {
                section: kind,
                offset,
                after,
                prev_end,
                expected,
            });
        }
        // In bounds: `offset <= bytes.len()` was checked.
        if let Some(at) = bytes[prev_end as usize..offset as usize]
            .iter()
            .position(|b| *b != 0)
        {
            let at = prev_end as usize + at;
            return Err(ParseError::BadPadding {
                offset: at as u64,
                section: kind,
                value: bytes[at],
            });
        }
        prev_end = end;
        after = SectionSite::Section(kind);
    }
    let len = bytes.len() as u64;
    if len > prev_end {
        return Err(ParseError::TrailingBytes {
            count: len - prev_end,
            last: order[order.len() - 1].2,
            end: prev_end,
        });
    }
    Ok(())
}

/// Reads postcard's wire format (what [`crate::meta::ModuleMeta`] is
/// encoded in) without allocating, accepting only the canonical encoding
/// the encoder writes: varints in their shortest form, UTF-8 strings.
struct MetaReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> MetaReader<'a> {
    fn err(&self, what: &'static str) -> ParseError {
        ParseError::BadMeta {
            at: self.at as u64,
            what,
        }
    }

    fn varint(&mut self) -> Result<u64, ParseError> {
        let start = self.at;
        let mut v: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.bytes.get(self.at) else {
                return Err(self.err("ends inside a number"));
            };
            self.at += 1;
            if i == 9 && b > 1 {
                self.at = start;
                return Err(self.err("number overflows 64 bits"));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                if b == 0 && i > 0 {
                    self.at = start;
                    return Err(self.err("number not in its shortest encoding"));
                }
                return Ok(v);
            }
        }
        self.at = start;
        Err(self.err("number longer than 10 bytes"))
    }

    fn u32(&mut self) -> Result<u32, ParseError> {
        let start = self.at;
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| {
            self.at = start;
            self.err("number overflows 32 bits")
        })
    }

    /// A sequence length; every element takes at least one byte, so a
    /// length beyond the bytes left is malformed.
    fn len(&mut self) -> Result<u64, ParseError> {
        let start = self.at;
        let n = self.varint()?;
        if n > (self.bytes.len() - self.at) as u64 {
            self.at = start;
            return Err(self.err("sequence longer than the bytes left"));
        }
        Ok(n)
    }

    fn str(&mut self) -> Result<&'a str, ParseError> {
        let start = self.at;
        let n = self.varint()?;
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| self.at.checked_add(n))
            .filter(|e| *e <= self.bytes.len())
            .ok_or_else(|| {
                self.at = start;
                self.err("string runs past the end of the section")
            })?;
        let s = core::str::from_utf8(&self.bytes[self.at..end]).map_err(|_| {
            self.at = start;
            self.err("string is not UTF-8")
        })?;
        self.at = end;
        Ok(s)
    }
}

/// Walks the metadata section, checking it against the tables (see
/// [`Module::parse`]; the kernels' body ranges lie inside `bodies`, which
/// was checked before); calls `name(i, name)` for each kernel.
fn walk_meta<'a>(
    meta: &'a [u8],
    kernels: &[KernelEntry],
    bodies: &[BodyEntry],
    mut name: impl FnMut(u32, &'a str) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    let mut r = MetaReader { bytes: meta, at: 0 };
    let n = r.len()?;
    if n != kernels.len() as u64 {
        return Err(ParseError::MetaKernelCount {
            meta: n,
            table: kernels.len() as u64,
        });
    }
    for (i, k) in kernels.iter().enumerate() {
        let i = i as u32;
        name(i, r.str()?)?;
        let np = r.len()?;
        if np != u64::from(k.param_count.get()) {
            return Err(ParseError::MetaParamCount {
                kernel: i,
                meta: np,
                table: k.param_count.get(),
            });
        }
        for _ in 0..np {
            r.str()?;
            for _ in 0..r.len()? {
                r.str()?;
            }
        }
        for _ in 0..r.len()? {
            let body = r.u32()?;
            if body >= k.body_count.get() {
                return Err(ParseError::MetaLabelBody {
                    kernel: i,
                    body,
                    bodies: k.body_count.get(),
                });
            }
            let word = r.u32()?;
            let text = r.str()?;
            // In range: `body < body_count` and the kernel's body range
            // lies inside the body table.
            let words = bodies
                .get(k.body_start.get() as usize + body as usize)
                .map_or(0, |b| b.code_len.get());
            if word >= words {
                return Err(ParseError::MetaLabelWord {
                    kernel: i,
                    body,
                    word,
                    words,
                    label: ShortName::new(text),
                });
            }
        }
    }
    if r.at != meta.len() {
        return Err(r.err("bytes after the metadata"));
    }
    Ok(())
}

/// Checks the metadata section and that kernel names are unique.
fn check_meta(
    meta: &[u8],
    kernels: &[KernelEntry],
    bodies: &[BodyEntry],
) -> Result<(), ParseError> {
    let dup = |first: u32, second: u32, name: &str| ParseError::DuplicateKernelName {
        first,
        second,
        name: ShortName::new(name),
    };
    #[cfg(feature = "alloc")]
    if kernels.len() > SMALL_MODULE {
        let mut names = alloc::vec::Vec::with_capacity(kernels.len());
        walk_meta(meta, kernels, bodies, |i, n| {
            names.push((n, i));
            Ok(())
        })?;
        names.sort_unstable();
        return match names.windows(2).find(|w| w[0].0 == w[1].0) {
            Some(w) => Err(dup(w[0].1, w[1].1, w[0].0)),
            None => Ok(()),
        };
    }
    // Few kernels (or no allocator): compare each name with those before.
    walk_meta(meta, kernels, bodies, |_, _| Ok(()))?;
    if kernels.len() < 2 {
        return Ok(());
    }
    walk_meta(meta, kernels, bodies, |i, n| {
        walk_meta(meta, kernels, bodies, |j, m| {
            if j < i && m == n {
                Err(dup(j, i, n))
            } else {
                Ok(())
            }
        })
    })
}

/// Up to this many kernels, names are compared pairwise.
#[cfg(feature = "alloc")]
const SMALL_MODULE: usize = 8;

fn range(start: u32, len: u32, total: usize) -> Option<()> {
    let end = (start as u64).checked_add(len as u64)?;
    (end <= total as u64).then_some(())
}
