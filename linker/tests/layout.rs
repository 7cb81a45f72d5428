//! The firmware memory layout: memory.x / link.x text, validation, and a
//! real link with `aarch64-linux-gnu-ld` when it is installed.

mod common;

use std::path::Path;
use std::process::Command;

use dvm_isa::Module;
use dvm_linker::{link, link_x, memory_x, parse_size, read_object, write_object, Arch};
use dvm_linker::{DeviceDesc, LayoutError};
use object::{Object as _, ObjectSegment as _, ObjectSymbol as _};

#[test]
fn default_is_qemu_virt() {
    let d = DeviceDesc::default();
    assert_eq!(d.ram_base, 0x4008_0000);
    assert_eq!(d.ram_size, 16 * 1024 * 1024 - 0x8_0000);
    assert_eq!(d.ub_size, 192 * 1024);
    assert_eq!(d.stack_size, 64 * 1024);
    assert_eq!(d.cores, 2);
    d.validate().unwrap();
}

#[test]
fn memory_x_holds_the_region_and_sizes() {
    let text = memory_x(&DeviceDesc::default());
    assert!(
        text.contains("MEMORY\n{\n  RAM : ORIGIN = 0x40080000, LENGTH = 0xf80000\n}\n"),
        "{text}"
    );
    assert!(text.contains("_dvm_stack_size = 0x10000;\n"), "{text}");
    assert!(text.contains("_dvm_ub_size = 0x30000;\n"), "{text}");
    assert!(text.contains("_dvm_cores = 2;\n"), "{text}");
}

#[test]
fn link_x_follows_the_contract() {
    let text = link_x();
    assert!(text.contains("INCLUDE memory.x"));
    assert!(text.contains("ENTRY(_start)"));
    assert!(text.contains("_dvm_stack_stride = 4096 + ALIGN(_dvm_stack_size, 4096);"));
    assert!(text.contains("text PT_LOAD FLAGS(5);"));
    assert!(text.contains("data PT_LOAD FLAGS(6);"));
    // Output sections in order.
    let order = [
        ".text ORIGIN(RAM) :",
        "KEEP(*(.text.boot))",
        "*(.text .text.*)",
        ".rodata : ALIGN(8)",
        "*(.rodata .rodata.*)",
        ".data : ALIGN(4096)",
        "*(.data .data.*)",
        ".bss (NOLOAD) : ALIGN(8)",
        "__bss_start = .;",
        "__bss_end = .;",
        ".ub (NOLOAD) : ALIGN(64)",
        "_dvm_ub_start = .;",
        "_dvm_ub_end = _dvm_ub_start + _dvm_ub_size * _dvm_cores;",
        ".stack (NOLOAD) : ALIGN(4096)",
        "_dvm_stack_guard = .;",
        "_dvm_stack_bottom = .;",
        "_dvm_stack_top = .;",
        "_dvm_stacks_end = .;",
        "_dvm_ram_end = ORIGIN(RAM) + LENGTH(RAM);",
        "_dvm_job_base = ALIGN(_dvm_stacks_end, 4096);",
        "dvm: _dvm_cores must be 1 to 8",
        "dvm: firmware RAM too small",
    ];
    let mut at = 0;
    for needle in order {
        let pos = text[at..]
            .find(needle)
            .unwrap_or_else(|| panic!("`{needle}` missing or out of order in\n{text}"));
        at += pos + needle.len();
    }
}

#[test]
fn validation_names_what_is_wrong() {
    let ok = DeviceDesc::default();
    let cases = [
        (
            DeviceDesc {
                ram_base: 0x4008_0100,
                ..ok
            },
            LayoutError::RamBaseAlign(0x4008_0100),
        ),
        (
            DeviceDesc {
                ram_base: u64::MAX - 4095,
                ..ok
            },
            LayoutError::RamWraps {
                base: u64::MAX - 4095,
                size: ok.ram_size,
            },
        ),
        (DeviceDesc { ub_size: 0, ..ok }, LayoutError::UbSize(0)),
        (DeviceDesc { ub_size: 100, ..ok }, LayoutError::UbSize(100)),
        (
            DeviceDesc {
                ub_size: 1 << 32,
                ..ok
            },
            LayoutError::UbSize(1 << 32),
        ),
        (
            DeviceDesc {
                stack_size: 4088,
                ..ok
            },
            LayoutError::StackSize(4088),
        ),
        (
            DeviceDesc {
                stack_size: 8200,
                ..ok
            },
            LayoutError::StackSize(8200),
        ),
        (
            DeviceDesc {
                ram_size: 0x40000,
                ..ok
            },
            LayoutError::DoesNotFit {
                ram: 0x40000,
                ub: ok.ub_size,
                stack: ok.stack_size,
                cores: ok.cores,
            },
        ),
        (
            // One core fits, eight do not.
            DeviceDesc {
                ram_size: 0x80000,
                cores: 8,
                ..ok
            },
            LayoutError::DoesNotFit {
                ram: 0x80000,
                ub: ok.ub_size,
                stack: ok.stack_size,
                cores: 8,
            },
        ),
        (DeviceDesc { cores: 0, ..ok }, LayoutError::Cores(0)),
        (DeviceDesc { cores: 9, ..ok }, LayoutError::Cores(9)),
        (
            DeviceDesc {
                stack_size: u64::MAX - 15,
                ..ok
            },
            LayoutError::DoesNotFit {
                ram: ok.ram_size,
                ub: ok.ub_size,
                stack: u64::MAX - 15,
                cores: ok.cores,
            },
        ),
    ];
    for (desc, want) in cases {
        assert_eq!(desc.validate(), Err(want.clone()), "{desc:?}");
        assert!(!want.to_string().is_empty());
    }
}

#[test]
fn sizes_parse() {
    assert_eq!(parse_size("4096"), Ok(4096));
    assert_eq!(parse_size("0x4008_0000"), Ok(0x4008_0000));
    assert_eq!(parse_size("192K"), Ok(192 * 1024));
    assert_eq!(parse_size("192KiB"), Ok(192 * 1024));
    assert_eq!(parse_size("15872KiB"), Ok(15872 * 1024));
    assert_eq!(parse_size("16M"), Ok(16 << 20));
    assert_eq!(parse_size("1GiB"), Ok(1 << 30));
    for bad in ["", "x", "-1", "0x", "12Q", "1.5M"] {
        assert_eq!(
            parse_size(bad),
            Err(LayoutError::BadNumber(bad.into())),
            "{bad}"
        );
    }
    // Numbers, but too large: said so, not "not a size".
    for big in [
        "99999999999999999999",
        "0x1_0000_0000_0000_0000",
        "17179869184G",
    ] {
        assert_eq!(
            parse_size(big),
            Err(LayoutError::TooLarge(big.into())),
            "{big}"
        );
    }
    assert_eq!(
        LayoutError::TooLarge("17179869184G".into()).to_string(),
        "`17179869184G` is more than a 64-bit size or address can hold (2^64-1)"
    );
}

// ---------------------------------------------------------------------------
// A real link with GNU ld.
// ---------------------------------------------------------------------------

const LD: &str = "aarch64-linux-gnu-ld";

fn have_ld() -> bool {
    let found = Command::new(LD)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        println!("note: {LD} not found; skipping the real link test");
    }
    found
}

/// A fresh directory for one test, removed when the test ends (also
/// when it fails).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("dvm-linker-{name}-"))
        .tempdir()
        .unwrap()
}

/// A tiny firmware object: `_start` in `.text.boot` (a branch to itself),
/// more code, read-only and read-write data, and `.bss`.
fn boot_object() -> Vec<u8> {
    use object::write::{Object, Symbol, SymbolSection};
    use object::{SectionKind, SymbolFlags, SymbolKind, SymbolScope};
    let mut o = Object::new(
        object::BinaryFormat::Elf,
        object::Architecture::Aarch64,
        object::Endianness::Little,
    );
    let boot = o.add_section(Vec::new(), b".text.boot".to_vec(), SectionKind::Text);
    o.set_section_data(boot, 0x1400_0000u32.to_le_bytes().to_vec(), 4);
    let text = o.add_section(Vec::new(), b".text.main".to_vec(), SectionKind::Text);
    o.set_section_data(text, [0xd503_201fu32.to_le_bytes(); 8].concat(), 4);
    let ro = o.add_section(Vec::new(), b".rodata.x".to_vec(), SectionKind::ReadOnlyData);
    o.set_section_data(ro, vec![1; 100], 8);
    let data = o.add_section(Vec::new(), b".data".to_vec(), SectionKind::Data);
    o.set_section_data(data, vec![2; 24], 8);
    let bss = o.add_section(Vec::new(), b".bss".to_vec(), SectionKind::UninitializedData);
    o.append_section_bss(bss, 1000, 8);
    o.add_symbol(Symbol {
        name: b"_start".to_vec(),
        value: 0,
        size: 4,
        kind: SymbolKind::Text,
        scope: SymbolScope::Dynamic,
        weak: false,
        section: SymbolSection::Section(boot),
        flags: SymbolFlags::None,
    });
    o.write().unwrap()
}

fn ld(dir: &Path, desc: &DeviceDesc, objects: &[&Path]) -> std::process::Output {
    std::fs::write(dir.join("memory.x"), memory_x(desc)).unwrap();
    std::fs::write(dir.join("link.x"), link_x()).unwrap();
    Command::new(LD)
        .arg("-L")
        .arg(dir)
        .arg("-T")
        .arg(dir.join("link.x"))
        .args(objects)
        .arg("-o")
        .arg(dir.join("fw.elf"))
        .output()
        .unwrap()
}

#[test]
fn gnu_ld_accepts_the_script_and_its_asserts_fire() {
    if !have_ld() {
        return;
    }
    let dir_tmp = scratch("ld");
    let dir = dir_tmp.path();
    let boot = dir.join("boot.o");
    std::fs::write(&boot, boot_object()).unwrap();
    let kernels = dir.join("kernels.o");
    let m = common::negs(&["a", "b"]);
    let image = link(&[Module::parse(&m).unwrap()]).unwrap();
    std::fs::write(&kernels, write_object(&image, Arch::Aarch64).unwrap()).unwrap();

    let desc = DeviceDesc::default();
    let out = ld(dir, &desc, &[&boot, &kernels]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fw = std::fs::read(dir.join("fw.elf")).unwrap();
    let f = object::File::parse(&*fw).unwrap();
    let sym = |n: &str| {
        f.symbols()
            .find(|s| s.name() == Ok(n))
            .unwrap_or_else(|| panic!("no symbol {n}"))
            .address()
    };
    assert_eq!(f.entry(), desc.ram_base);
    assert_eq!(sym("_start"), desc.ram_base);
    let (bss0, bss1) = (sym("__bss_start"), sym("__bss_end"));
    assert!(bss0 % 8 == 0 && bss1 % 8 == 0 && bss1 - bss0 >= 1000);
    let (ub0, ub1) = (sym("_dvm_ub_start"), sym("_dvm_ub_end"));
    assert!(ub0 % 64 == 0 && ub0 >= bss1);
    let cores = u64::from(desc.cores);
    assert_eq!(ub1 - ub0, desc.ub_size * cores);
    let guard = sym("_dvm_stack_guard");
    assert!(guard % 4096 == 0 && guard >= ub1);
    assert_eq!(sym("_dvm_stack_bottom"), guard + 4096);
    let top = sym("_dvm_stack_top");
    assert_eq!(top, guard + 4096 + desc.stack_size);
    assert_eq!(top % 16, 0);
    let stride = sym("_dvm_stack_stride");
    assert_eq!(Some(stride), desc.stack_stride());
    assert_eq!(sym("_dvm_stacks_end"), guard + cores * stride);
    assert_eq!(sym("_dvm_ram_end"), desc.ram_base + desc.ram_size);
    assert_eq!(sym("_dvm_job_base"), sym("_dvm_stacks_end"));
    assert_eq!(sym("_dvm_stack_size"), desc.stack_size);
    assert_eq!(sym("_dvm_ub_size"), desc.ub_size);
    assert_eq!(sym("_dvm_cores"), cores);
    // Two loadable segments: R X then R W, on different pages.
    let segs: Vec<_> = f.segments().collect();
    assert_eq!(segs.len(), 2, "{segs:?}");
    let flags: Vec<u32> = segs
        .iter()
        .map(|s| match s.flags() {
            object::SegmentFlags::Elf { p_flags } => p_flags,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(flags, [5, 6]);
    assert!(
        segs[1].address() % 4096 == 0 && segs[0].address() + segs[0].size() <= segs[1].address()
    );
    // The kernels linked into the firmware read back, at their address.
    let obj = read_object(&fw).unwrap();
    assert!(!obj.relocatable);
    assert_eq!(obj.image, &image[..]);
    assert!(obj.address > desc.ram_base && obj.address < segs[1].address());
    assert_eq!(sym("dvm_kernel_b"), obj.address + obj.kernels[1].offset);

    // Too big a stack: ld fails with the ASSERT's message.
    let big = DeviceDesc {
        stack_size: desc.ram_size,
        ..desc
    };
    let out = ld(dir, &big, &[&boot]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("dvm: firmware RAM too small"), "{err}");
    // A UB size that is not a multiple of 64.
    let odd = DeviceDesc {
        ub_size: 1000,
        ..desc
    };
    let out = ld(dir, &odd, &[&boot]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("_dvm_ub_size must be a non-zero multiple of 64"),
        "{err}"
    );
    // A small stack.
    let small = DeviceDesc {
        stack_size: 1024,
        ..desc
    };
    let err = String::from_utf8_lossy(&ld(dir, &small, &[&boot]).stderr).into_owned();
    assert!(err.contains("_dvm_stack_size must be"), "{err}");
    // Too many cores.
    let many = DeviceDesc { cores: 9, ..desc };
    let err = String::from_utf8_lossy(&ld(dir, &many, &[&boot]).stderr).into_owned();
    assert!(err.contains("_dvm_cores must be 1 to 8"), "{err}");
    // A misaligned RAM origin.
    let odd = DeviceDesc {
        ram_base: desc.ram_base + 16,
        ..desc
    };
    let err = String::from_utf8_lossy(&ld(dir, &odd, &[&boot]).stderr).into_owned();
    assert!(err.contains("RAM origin is not 4 KiB aligned"), "{err}");
}
