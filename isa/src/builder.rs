//! Building modules: the encoder side of [`crate::module`].

use alloc::string::String;
use alloc::vec::Vec;

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::IntoBytes;

use crate::dtype::DType;
use crate::instr::Instr;
use crate::meta::{KernelMeta, Label, ModuleMeta, ParamMeta};
use crate::module::{
    features, instr_features, BodyEntry, Header, KernelEntry, KernelKind, ParamAccess, ParamEntry,
    SectionEntry, SectionKind, HEADER_SIZE, MAGIC, VERSION_MAJOR, VERSION_MINOR,
};
use crate::word::WaitMask;

/// Emits the instruction words of one body.
#[derive(Clone, Debug, Default)]
pub struct CodeWriter {
    words: Vec<u64>,
    labels: Vec<(u32, String)>,
    /// Feature bits of the instructions pushed with [`CodeWriter::push`].
    features: u64,
    /// Some words were pushed raw: their features are unknown until decoded.
    raw: bool,
}

impl CodeWriter {
    /// An empty body.
    pub fn new() -> CodeWriter {
        CodeWriter::default()
    }

    /// An empty body with room for `words` words.
    pub fn with_capacity(words: usize) -> CodeWriter {
        CodeWriter {
            words: Vec::with_capacity(words),
            ..CodeWriter::default()
        }
    }

    /// Clears the writer and writes its whole capacity once, so the memory
    /// is faulted in now rather than page by page as code is first written
    /// (for scratch writers that compile-time-critical code reuses).
    pub fn clear_touched(&mut self) {
        self.clear();
        self.words.resize(self.words.capacity(), 0);
        self.words.clear();
    }

    /// Clears the writer for reuse, keeping its allocation.
    pub fn clear(&mut self) {
        self.words.clear();
        self.labels.clear();
        self.features = 0;
        self.raw = false;
    }

    /// Appends `instr` with wait flags `wait`; returns its word offset.
    pub fn push(&mut self, instr: &Instr, wait: WaitMask) -> u32 {
        let at = self.words.len() as u32;
        self.words.extend_from_slice(instr.encode(wait).words());
        self.features |= instr_features(instr);
        at
    }

    /// Appends one raw word (for the assembler's `.word`, and for tests
    /// that need code which does not decode); returns its word offset.
    pub fn push_word(&mut self, word: u64) -> u32 {
        let at = self.words.len() as u32;
        self.words.push(word);
        self.raw = true;
        at
    }

    /// Attaches a debug label to the next instruction (one must follow:
    /// [`ModuleBuilder::add_kernel`] refuses a label past the body's end).
    pub fn label(&mut self, text: impl Into<String>) {
        self.labels.push((self.words.len() as u32, text.into()));
    }

    /// Attaches a debug label to the instruction at word offset `word`
    /// (which need not be written yet, but must be by the time the kernel
    /// is added: [`ModuleBuilder::add_kernel`] refuses a label at or past
    /// the body's end). Labels keep the order they are
    /// added in. For copying a body together with its labels, e.g. when the
    /// linker rebuilds a kernel from a parsed module's code and metadata.
    pub fn label_at(&mut self, word: u32, text: impl Into<String>) {
        self.labels.push((word, text.into()));
    }

    /// The words so far.
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// Feature bits of the instructions pushed with [`CodeWriter::push`]
    /// (words pushed raw are not included: see [`CodeWriter::has_raw`]).
    pub fn features(&self) -> u64 {
        self.features
    }

    /// Whether some words were pushed raw with [`CodeWriter::push_word`].
    pub fn has_raw(&self) -> bool {
        self.raw
    }
}

/// A parameter declaration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamDef {
    /// Name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Read, write or both.
    pub access: ParamAccess,
    /// Dimensions as text (metadata only).
    pub dims: Vec<String>,
}

/// One body: grid plus code.
#[derive(Clone, Debug)]
pub struct BodyDef {
    /// Tile grid.
    pub grid: [u32; 3],
    /// The body's instructions.
    pub code: CodeWriter,
}

/// A kernel to add to a module.
#[derive(Clone, Debug)]
pub struct KernelDef {
    /// Unique name.
    pub name: String,
    /// Kind.
    pub kind: KernelKind,
    /// UB bytes needed.
    pub ub_bytes: u32,
    /// Parameters.
    pub params: Vec<ParamDef>,
    /// Bodies (one, except for parallel and sequence kernels).
    pub bodies: Vec<BodyDef>,
}

/// Why [`ModuleBuilder`] refused a kernel.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// A kernel of this name is in the module already.
    #[error("kernel \"{}\" is already in the module (kernel {first}); kernel names must be unique", name.escape_debug())]
    DuplicateKernel {
        /// The name.
        name: String,
        /// Index of the kernel that has it.
        first: u32,
    },
    /// A debug label names no word of its body: its word offset is at or
    /// past the body's end (e.g. [`CodeWriter::label`] with no instruction
    /// after it, or [`CodeWriter::label_at`] beyond the code).
    /// [`Module::parse`](crate::Module::parse) refuses such a label, and
    /// the assembler refuses a `.label` that no word follows.
    #[error("kernel \"{}\": label \"{}\" is on word {word} of body {body}, which has {words} word(s): a label must name a word of its body", kernel.escape_debug(), label.escape_debug())]
    LabelPastEnd {
        /// The kernel's name.
        kernel: String,
        /// The body (index within the kernel).
        body: u32,
        /// The label's word offset.
        word: u32,
        /// The body's length in words.
        words: u32,
        /// The label's text.
        label: String,
    },
}

/// Collects kernels and writes a module.
#[derive(Clone, Debug, Default)]
pub struct ModuleBuilder {
    kernels: Vec<KernelEntry>,
    bodies: Vec<BodyEntry>,
    params: Vec<ParamEntry>,
    code: Vec<u64>,
    meta: ModuleMeta,
    features: u64,
}

impl ModuleBuilder {
    /// An empty module.
    pub fn new() -> ModuleBuilder {
        ModuleBuilder::default()
    }

    /// Names of the kernels added so far.
    pub fn kernel_names(&self) -> impl Iterator<Item = &str> {
        self.meta.kernels.iter().map(|k| k.name.as_str())
    }

    /// Declares extra feature bits (the builder derives the rest from the
    /// instructions it is given).
    pub fn declare_features(&mut self, bits: u64) {
        self.features |= bits;
    }

    /// Adds a kernel; returns its index. Features are derived from the
    /// instructions; words that do not decode are kept as they are (the
    /// verifier rejects them later).
    ///
    /// # Errors
    /// [`BuildError::DuplicateKernel`] when a kernel of the same name was
    /// added before (names are unique within a module; [`Module::parse`]
    /// rejects duplicates); [`BuildError::LabelPastEnd`] when a label's
    /// word offset is at or past the end of its body (a label names a word
    /// of its body; [`Module::parse`] rejects such labels). The builder is
    /// unchanged then.
    ///
    /// [`Module::parse`]: crate::Module::parse
    pub fn add_kernel(&mut self, k: KernelDef) -> Result<u32, BuildError> {
        if let Some(first) = self.kernel_names().position(|n| n == k.name) {
            return Err(BuildError::DuplicateKernel {
                name: k.name,
                first: first as u32,
            });
        }
        for (b, body) in k.bodies.iter().enumerate() {
            let words = body.code.words.len();
            if let Some((word, text)) = body.code.labels.iter().find(|l| l.0 as usize >= words) {
                return Err(BuildError::LabelPastEnd {
                    kernel: k.name,
                    body: b as u32,
                    word: *word,
                    words: u32::try_from(words).unwrap_or(u32::MAX),
                    label: text.clone(),
                });
            }
        }
        let index = self.kernels.len() as u32;
        let body_start = self.bodies.len() as u32;
        let param_start = self.params.len() as u32;
        let mut labels = Vec::new();
        if k.bodies.len() > 1 {
            self.features |= features::MULTI_BODY;
        }
        for (b, body) in k.bodies.iter().enumerate() {
            let code_start = self.code.len() as u32;
            self.features |= body.code.features;
            if body.code.raw {
                // Raw words: decode what decodes to find the features.
                let words: Vec<U64> = body.code.words.iter().map(|w| U64::new(*w)).collect();
                let mut at = 0;
                while at < words.len() {
                    match Instr::decode(&words[at..]) {
                        Ok((head, instr)) => {
                            self.features |= instr_features(&instr);
                            at += head.len as usize;
                        }
                        Err(_) => break,
                    }
                }
            }
            self.code.extend_from_slice(&body.code.words);
            self.bodies.push(BodyEntry {
                grid: body.grid.map(U32::new),
                reserved: U32::new(0),
                code_start: U32::new(code_start),
                code_len: U32::new(body.code.words.len() as u32),
            });
            labels.extend(body.code.labels.iter().map(|(word, text)| Label {
                body: b as u32,
                word: *word,
                text: text.clone(),
            }));
        }
        for p in &k.params {
            self.params.push(ParamEntry {
                dtype: p.dtype as u8,
                access: p.access as u8,
                reserved: [0; 2],
            });
        }
        self.kernels.push(KernelEntry {
            kind: k.kind as u8,
            reserved: [0; 3],
            ub_bytes: U32::new(k.ub_bytes),
            param_start: U32::new(param_start),
            param_count: U32::new(k.params.len() as u32),
            body_start: U32::new(body_start),
            body_count: U32::new(k.bodies.len() as u32),
        });
        self.meta.kernels.push(KernelMeta {
            name: k.name,
            params: k
                .params
                .into_iter()
                .map(|p| ParamMeta {
                    name: p.name,
                    dims: p.dims,
                })
                .collect(),
            labels,
        });
        Ok(index)
    }

    /// Writes the module bytes.
    pub fn finish(&self) -> Vec<u8> {
        let meta = postcard::to_allocvec(&self.meta).unwrap_or_default();
        let mut out = Vec::new();
        write_module(
            &mut out,
            &ModuleParts {
                features: self.features,
                kernels: &self.kernels,
                bodies: &self.bodies,
                params: &self.params,
                code: &[&self.code],
                meta: &meta,
            },
        );
        out
    }
}

/// The tables of a module, borrowed, for [`write_module`]: what
/// [`ModuleBuilder`] collects, for callers that keep their own (reused)
/// tables and write the module without building a [`KernelDef`].
#[derive(Clone, Copy, Debug)]
pub struct ModuleParts<'a> {
    /// Feature bits for the header (every feature the code uses).
    pub features: u64,
    /// The kernel table.
    pub kernels: &'a [KernelEntry],
    /// The body table (`code_start` counts words from the start of the
    /// code section, i.e. across every slice of `code`).
    pub bodies: &'a [BodyEntry],
    /// The parameter table.
    pub params: &'a [ParamEntry],
    /// The code section: these slices of words, concatenated.
    pub code: &'a [&'a [u64]],
    /// The metadata section: a postcard-encoded [`ModuleMeta`] (see
    /// [`crate::meta::MetaWriter`]).
    pub meta: &'a [u8],
}

/// Appends the module made of `parts` to `out`, reserving exactly the
/// module's size first (an empty `out` is allocated once, at its final
/// size). The bytes are those [`ModuleBuilder::finish`] writes for the same
/// tables. Nothing is checked here (unlike [`ModuleBuilder::add_kernel`],
/// which refuses a second kernel of one name): [`crate::Module::parse`]
/// rejects tables and metadata that disagree, and duplicate names.
pub fn write_module(out: &mut Vec<u8>, parts: &ModuleParts<'_>) {
    let code_len: usize = parts.code.iter().map(|c| c.len() * 8).sum();
    let lens = [
        parts.kernels.as_bytes().len(),
        parts.bodies.as_bytes().len(),
        parts.params.as_bytes().len(),
        code_len,
        parts.meta.len(),
    ];
    let kinds = [
        SectionKind::Kernels,
        SectionKind::Bodies,
        SectionKind::Params,
        SectionKind::Code,
        SectionKind::Meta,
    ];
    let table_len = kinds.len() * core::mem::size_of::<SectionEntry>();
    let start = out.len();
    // Offsets are relative to the module's first byte.
    let mut offset = (HEADER_SIZE + table_len) as u64;
    let mut end = offset;
    for len in lens {
        end = end.next_multiple_of(8) + len as u64;
    }
    out.reserve_exact(end as usize);
    let header = Header {
        magic: MAGIC,
        version_major: U16::new(VERSION_MAJOR),
        version_minor: U16::new(VERSION_MINOR),
        features: U64::new(parts.features),
        section_count: U32::new(kinds.len() as u32),
        header_size: U32::new(HEADER_SIZE as u32),
        reserved: U64::new(0),
    };
    out.extend_from_slice(header.as_bytes());
    for (kind, len) in kinds.iter().zip(lens) {
        // Sections start on 8-byte boundaries so code words are aligned
        // when the module itself is.
        offset = offset.next_multiple_of(8);
        out.extend_from_slice(
            SectionEntry {
                kind: U32::new(*kind as u32),
                reserved: U32::new(0),
                offset: U64::new(offset),
                len: U64::new(len as u64),
            }
            .as_bytes(),
        );
        offset += len as u64;
    }
    let pad = |out: &mut Vec<u8>| {
        let to = start + (out.len() - start).next_multiple_of(8);
        out.resize(to, 0);
    };
    pad(out);
    out.extend_from_slice(parts.kernels.as_bytes());
    pad(out);
    out.extend_from_slice(parts.bodies.as_bytes());
    pad(out);
    out.extend_from_slice(parts.params.as_bytes());
    pad(out);
    for c in parts.code {
        out.extend_from_slice(c.as_bytes());
    }
    pad(out);
    out.extend_from_slice(parts.meta);
}
