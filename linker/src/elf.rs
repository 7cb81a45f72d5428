//! ELF relocatable objects that carry a module image.
//!
//! [`write_object`] writes an ELF64 little-endian relocatable object for
//! the chosen [`Arch`] with one section, [`IMAGE_SECTION`] (`.dvm.image`,
//! read-only allocated data, 8-byte aligned), holding the image, and
//! global data symbols into it:
//!
//! | symbol | value (section offset) | size |
//! |---|---|---|
//! | [`IMAGE_START`] `dvm_image` | 0 | image bytes |
//! | [`IMAGE_END`] `dvm_image_end` | image bytes | 0 |
//! | `dvm_kernel_<name>` (see [`kernel_symbols`]) | the kernel's [`KernelEntry`] in the kernel table | 24 |
//!
//! A host runtime links the object into its binary and finds kernel `i`
//! as `(dvm_kernel_x - dvm_image - kernel_table_offset) / 24`, or simply
//! hands `dvm_image..dvm_image_end` to [`dvm_isa::Module::parse`].
//!
//! [`read_object`] reads such an object back (or an executable it was
//! linked into: offsets are taken relative to the section's address),
//! parses and verifies the image and checks every `dvm_*` symbol.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use dvm_isa::meta::ModuleMeta;
use dvm_isa::module::{KernelEntry, SectionKind};
use dvm_isa::{verify_module, DeviceLimits, Module};
use object::write::{Object, Symbol, SymbolSection};
use object::{
    Architecture, BinaryFormat, Endianness, ObjectKind, SymbolFlags, SymbolKind, SymbolScope,
};
use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

use crate::error::ObjectError;

/// Name of the section holding the image.
pub const IMAGE_SECTION: &str = ".dvm.image";
/// Symbol at the start of the image.
pub const IMAGE_START: &str = "dvm_image";
/// Symbol just past the end of the image.
pub const IMAGE_END: &str = "dvm_image_end";
/// Prefix of the kernel symbols.
pub const KERNEL_PREFIX: &str = "dvm_kernel_";

const ENTRY_SIZE: u64 = core::mem::size_of::<KernelEntry>() as u64;

/// Target architecture of a written object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Arch {
    /// 64-bit ARM (the AI-CPU firmware).
    #[default]
    Aarch64,
    /// x86-64 (a host runtime on a PC).
    X86_64,
}

impl Arch {
    /// Every architecture the linker writes.
    pub const ALL: [Arch; 2] = [Arch::Aarch64, Arch::X86_64];

    /// The name used on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Arch::Aarch64 => "aarch64",
            Arch::X86_64 => "x86_64",
        }
    }

    fn object_arch(self) -> Architecture {
        match self {
            Arch::Aarch64 => Architecture::Aarch64,
            Arch::X86_64 => Architecture::X86_64,
        }
    }

    fn from_object(a: Architecture) -> Option<Arch> {
        Arch::ALL.into_iter().find(|x| x.object_arch() == a)
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Arch {
    type Err = ObjectError;

    fn from_str(s: &str) -> Result<Arch, ObjectError> {
        match s {
            "aarch64" | "arm64" => Ok(Arch::Aarch64),
            "x86_64" | "x86-64" | "amd64" => Ok(Arch::X86_64),
            _ => Err(ObjectError::UnknownArch(s.to_string())),
        }
    }
}

/// A kernel's symbol in an object read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSymbol {
    /// Index in the image's kernel table.
    pub index: u32,
    /// The kernel's name (from the image's metadata).
    pub name: String,
    /// The symbol's name.
    pub symbol: String,
    /// Offset of the kernel's entry within the image.
    pub offset: u64,
    /// The symbol's size (24, one kernel entry).
    pub size: u64,
}

/// An ELF object read back by [`read_object`]: the image (a view into the
/// object's bytes), its parsed and verified module, and the kernel symbols.
#[derive(Clone, Debug)]
pub struct LinkedObject<'a> {
    /// The architecture, when it is one the linker writes.
    pub arch: Option<Arch>,
    /// The architecture as `object` names it (for other ELF machines).
    pub machine: String,
    /// True for a relocatable object, false for an executable or library
    /// the object was linked into.
    pub relocatable: bool,
    /// Address of the `.dvm.image` section (0 in a relocatable object).
    pub address: u64,
    /// The image bytes.
    pub image: &'a [u8],
    /// The image, parsed; every kernel verified against
    /// [`DeviceLimits::DEFAULT`].
    pub module: Module<'a>,
    /// The image's metadata.
    pub meta: ModuleMeta,
    /// One symbol per kernel, in kernel-table order.
    pub kernels: Vec<KernelSymbol>,
}

/// The symbol name of each kernel, in order: `dvm_kernel_` followed by
/// the name with every character other than ASCII letters, digits and `_`
/// replaced by `_`. When two names sanitize to the same symbol, the later
/// kernel gets `_<n>` appended (the smallest `n` that makes it unique).
pub fn kernel_symbols<'n>(names: impl IntoIterator<Item = &'n str>) -> Vec<String> {
    let mut taken = HashSet::new();
    let mut out = Vec::new();
    for name in names {
        let base: String = KERNEL_PREFIX
            .chars()
            .chain(name.chars().map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            }))
            .collect();
        let mut sym = base.clone();
        let mut n = 1u64;
        while taken.contains(&sym) {
            sym = format!("{base}_{n}");
            n += 1;
        }
        taken.insert(sym.clone());
        out.push(sym);
    }
    out
}

fn check_image(image: &[u8]) -> Result<(Module<'_>, ModuleMeta), ObjectError> {
    let module = Module::parse(image).map_err(ObjectError::BadImage)?;
    let meta = module.meta().map_err(ObjectError::BadImage)?;
    verify_module(&module, &DeviceLimits::DEFAULT).map_err(|source| ObjectError::Verify {
        kernel: meta
            .kernels
            .get(source.kernel as usize)
            .map_or_else(|| source.kernel.to_string(), |k| format!("`{}`", k.name)),
        source,
    })?;
    Ok((module, meta))
}

/// Writes an ELF64 little-endian relocatable object for `arch` holding
/// `image` in `.dvm.image`, with the symbols described in the
/// [module docs](self).
///
/// # Errors
/// [`ObjectError::BadImage`] or [`ObjectError::Verify`] when `image` is
/// not a valid, verified module; [`ObjectError::Write`] if `object` fails.
pub fn write_object(image: &[u8], arch: Arch) -> Result<Vec<u8>, ObjectError> {
    let (module, meta) = check_image(image)?;
    let mut obj = Object::new(BinaryFormat::Elf, arch.object_arch(), Endianness::Little);
    let section = obj.add_section(
        Vec::new(),
        IMAGE_SECTION.as_bytes().to_vec(),
        object::SectionKind::ReadOnlyData,
    );
    obj.set_section_data(section, image.to_vec(), 8);
    let len = image.len() as u64;
    let mut symbol = |name: &str, value: u64, size: u64| {
        obj.add_symbol(Symbol {
            name: name.as_bytes().to_vec(),
            value,
            size,
            kind: SymbolKind::Data,
            scope: SymbolScope::Dynamic,
            weak: false,
            section: SymbolSection::Section(section),
            flags: SymbolFlags::None,
        });
    };
    symbol(IMAGE_START, 0, len);
    symbol(IMAGE_END, len, 0);
    let table = module.section_range(SectionKind::Kernels).start as u64;
    let names = kernel_symbols(meta.kernels.iter().map(|k| k.name.as_str()));
    for (i, name) in names.iter().enumerate() {
        symbol(name, table + i as u64 * ENTRY_SIZE, ENTRY_SIZE);
    }
    obj.write().map_err(|e| ObjectError::Write(e.to_string()))
}

/// Reads an ELF object written by [`write_object`] (or a binary it was
/// linked into): finds `.dvm.image`, parses and verifies the module in
/// it, and checks the `dvm_image`, `dvm_image_end` and `dvm_kernel_*`
/// symbols (each kernel has exactly one, pointing at its entry, with the
/// entry's size; `dvm_image` spans the image, `dvm_image_end` is empty).
///
/// # Errors
/// [`ObjectError::NotElf`] for anything `object` cannot parse as ELF,
/// [`ObjectError::NoImage`] without a `.dvm.image` section,
/// [`ObjectError::Corrupt`] when its data cannot be read,
/// [`ObjectError::BadImage`] / [`ObjectError::Verify`] for a bad image,
/// [`ObjectError::BadSymbol`] / [`ObjectError::MissingSymbol`] for
/// symbols that are missing or point elsewhere.
pub fn read_object(bytes: &[u8]) -> Result<LinkedObject<'_>, ObjectError> {
    let file = object::File::parse(bytes).map_err(|e| ObjectError::NotElf(e.to_string()))?;
    if file.format() != BinaryFormat::Elf {
        return Err(ObjectError::NotElf(format!("{:?} file", file.format())));
    }
    let section = file
        .section_by_name(IMAGE_SECTION)
        .ok_or(ObjectError::NoImage)?;
    let image = section
        .data()
        .map_err(|e| ObjectError::Corrupt(format!("section `{IMAGE_SECTION}`: {e}")))?;
    let (module, meta) = check_image(image)?;
    let base = section.address();
    let len = image.len() as u64;
    let table = module.section_range(SectionKind::Kernels);
    let names = kernel_symbols(meta.kernels.iter().map(|k| k.name.as_str()));
    let mut kernels: Vec<Option<KernelSymbol>> = vec![None; meta.kernels.len()];
    let (mut start, mut end) = (false, false);
    for sym in file.symbols() {
        let Ok(name) = sym.name() else { continue };
        if !name.starts_with("dvm_") || sym.section_index() != Some(section.index()) {
            continue;
        }
        let bad = |what: String| ObjectError::BadSymbol {
            symbol: name.to_string(),
            what,
        };
        let offset = sym
            .address()
            .checked_sub(base)
            .filter(|o| *o <= len)
            .ok_or_else(|| bad(format!("address {:#x} is outside the image", sym.address())))?;
        if name == IMAGE_START {
            if offset != 0 {
                return Err(bad(format!(
                    "at offset {offset:#x}, not at the image start"
                )));
            }
            if sym.size() != len {
                return Err(bad(format!(
                    "size {} does not match the image ({len} bytes)",
                    sym.size()
                )));
            }
            start = true;
        } else if name == IMAGE_END {
            if offset != len {
                return Err(bad(format!(
                    "at offset {offset:#x}, not at the image end {len:#x}"
                )));
            }
            if sym.size() != 0 {
                return Err(bad(format!("size {}, not 0", sym.size())));
            }
            end = true;
        } else if name.starts_with(KERNEL_PREFIX) {
            let rel = offset
                .checked_sub(table.start as u64)
                .filter(|r| *r < (table.end - table.start) as u64 && r % ENTRY_SIZE == 0)
                .ok_or_else(|| {
                    bad(format!(
                        "offset {offset:#x} is not a kernel entry (the kernel table is at \
                         {:#x}..{:#x})",
                        table.start, table.end
                    ))
                })?;
            let index = (rel / ENTRY_SIZE) as usize;
            let slot = kernels
                .get_mut(index)
                .ok_or_else(|| bad(format!("kernel {index} does not exist")))?;
            if let Some(other) = slot {
                return Err(bad(format!(
                    "kernel {index} already has the symbol `{}`",
                    other.symbol
                )));
            }
            if sym.size() != ENTRY_SIZE {
                return Err(bad(format!(
                    "size {} does not match the kernel table: kernel {index}'s entry is \
                     {ENTRY_SIZE} bytes",
                    sym.size()
                )));
            }
            if names.get(index).map(String::as_str) != Some(name) {
                return Err(bad(format!(
                    "points at kernel {index} `{}`, whose symbol is `{}`",
                    meta.kernels[index].name, names[index]
                )));
            }
            *slot = Some(KernelSymbol {
                index: index as u32,
                name: meta.kernels[index].name.clone(),
                symbol: name.to_string(),
                offset,
                size: sym.size(),
            });
        }
    }
    if !start {
        return Err(ObjectError::MissingSymbol(IMAGE_START.to_string()));
    }
    if !end {
        return Err(ObjectError::MissingSymbol(IMAGE_END.to_string()));
    }
    let kernels = kernels
        .into_iter()
        .zip(names)
        .map(|(k, name)| k.ok_or(ObjectError::MissingSymbol(name)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(LinkedObject {
        arch: Arch::from_object(file.architecture()),
        machine: format!("{:?}", file.architecture()),
        relocatable: file.kind() == ObjectKind::Relocatable,
        address: base,
        image,
        module,
        meta,
        kernels,
    })
}
