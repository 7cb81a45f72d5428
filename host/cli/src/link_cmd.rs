//! The linker's subcommands of the `dvm` CLI: `dvm link`, `dvm objdump`,
//! `dvm memory-x`. The work is done by `dvm-linker`; this file maps
//! arguments and errors (bad input: exit code 2, nothing written).

use std::path::{Path, PathBuf};

use clap::{Subcommand, ValueEnum};
use dvm_linker::{layout, objdump, Arch, DeviceDesc, LinkError, Linker};

use crate::out_files::{write_all_atomic, MadeDir};
use crate::say::{out, outln};
use crate::{read, Failure};

/// Architecture of the ELF object `dvm link` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ArchArg {
    /// 64-bit ARM (the AI-CPU firmware).
    Aarch64,
    /// x86-64 (a host runtime).
    #[value(name = "x86_64")]
    X86_64,
}

impl From<ArchArg> for Arch {
    fn from(a: ArchArg) -> Arch {
        match a {
            ArchArg::Aarch64 => Arch::Aarch64,
            ArchArg::X86_64 => Arch::X86_64,
        }
    }
}

#[derive(Subcommand)]
pub enum LinkCommand {
    /// Link modules into one image (identical kernels kept once, name
    /// clashes rejected) and write it as an ELF relocatable object whose
    /// `.dvm.image` section holds it, with a `dvm_kernel_<name>` symbol per
    /// kernel.
    Link {
        /// Input modules (`.dvmb`).
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        /// Output ELF object.
        #[arg(short, long)]
        output: PathBuf,
        /// Architecture of the object.
        #[arg(long, value_enum, default_value_t = ArchArg::Aarch64)]
        arch: ArchArg,
        /// Also write the linked image as a module (`.dvmb`).
        #[arg(long)]
        image: Option<PathBuf>,
    },
    /// Describe an ELF object written by `dvm link` (or a binary it was
    /// linked into): its kernels, symbols, kinds, parameters and sizes.
    Objdump {
        /// ELF object or binary.
        object: PathBuf,
        /// Also disassemble every kernel.
        #[arg(long)]
        disasm: bool,
    },
    /// Write the firmware's memory layout, `memory.x` and `link.x`, into a
    /// directory. Sizes take `0x` hex and K/M/G suffixes; the defaults are
    /// QEMU virt's.
    #[command(name = "memory-x")]
    MemoryX {
        /// First byte of the firmware's RAM [default: 0x40080000].
        #[arg(long, value_parser = layout::parse_size)]
        ram_base: Option<u64>,
        /// Bytes of RAM [default: 0xf80000].
        #[arg(long, value_parser = layout::parse_size)]
        ram_size: Option<u64>,
        /// Bytes of each core's unified buffer [default: 192K].
        #[arg(long, value_parser = layout::parse_size)]
        ub_size: Option<u64>,
        /// Bytes of each core's stack [default: 64K].
        #[arg(long, value_parser = layout::parse_size)]
        stack_size: Option<u64>,
        /// Cores, each with its own UB and stack, 1 to 8 [default: 2].
        #[arg(long)]
        cores: Option<u32>,
        /// Output directory (created if missing).
        #[arg(short, long)]
        output: PathBuf,
    },
}

impl LinkCommand {
    pub fn run(self) -> Result<(), Failure> {
        match self {
            LinkCommand::Link {
                inputs,
                output,
                arch,
                image,
            } => link(&inputs, &output, arch.into(), image.as_deref()),
            LinkCommand::Objdump { object, disasm } => {
                let bytes = read(&object)?;
                let obj = dvm_linker::read_object(&bytes)
                    .map_err(|e| Failure(format!("{}: {e}", object.display()), 2))?;
                out!("{}", objdump::describe(&obj, disasm))?;
                Ok(())
            }
            LinkCommand::MemoryX {
                ram_base,
                ram_size,
                ub_size,
                stack_size,
                cores,
                output,
            } => {
                let d = DeviceDesc::default();
                let desc = DeviceDesc {
                    ram_base: ram_base.unwrap_or(d.ram_base),
                    ram_size: ram_size.unwrap_or(d.ram_size),
                    ub_size: ub_size.unwrap_or(d.ub_size),
                    stack_size: stack_size.unwrap_or(d.stack_size),
                    cores: cores.unwrap_or(d.cores),
                };
                memory_x(&desc, &output)
            }
        }
    }
}

fn link(
    inputs: &[PathBuf],
    output: &Path,
    arch: Arch,
    image: Option<&Path>,
) -> Result<(), Failure> {
    let mut linker = Linker::new();
    for path in inputs {
        let bytes = read(path)?;
        linker
            .add_bytes(&path.display().to_string(), &bytes)
            .map_err(|e| Failure(e.to_string(), 2))?;
    }
    let linked = linker.finish().map_err(|e| {
        let code = if matches!(e, LinkError::Internal(_)) {
            1
        } else {
            2
        };
        Failure(e.to_string(), code)
    })?;
    let elf = dvm_linker::write_object(&linked, arch).map_err(|e| Failure(e.to_string(), 1))?;
    let mut files: Vec<(&Path, &[u8])> = vec![(output, &elf)];
    if let Some(path) = image {
        files.push((path, &linked));
    }
    let ins: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    write_all_atomic(&files, &ins, || {
        outln!(
            "{}: {} kernel(s) from {} module(s), image {} bytes, {arch}",
            output.display(),
            linker.kernel_count(),
            inputs.len(),
            linked.len()
        )
    })
}

fn memory_x(desc: &DeviceDesc, dir: &Path) -> Result<(), Failure> {
    desc.validate().map_err(|e| Failure(e.to_string(), 2))?;
    let made = MadeDir::create(dir)?;
    let memory = dir.join("memory.x");
    let link = dir.join("link.x");
    let (memory_text, link_text) = (layout::memory_x(desc), layout::link_x());
    write_all_atomic(
        &[
            (&memory, memory_text.as_bytes()),
            (&link, link_text.as_bytes()),
        ],
        &[],
        || outln!("{}\n{}", memory.display(), link.display()),
    )
    .inspect_err(|_| made.undo())
}
