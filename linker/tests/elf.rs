//! ELF objects: write → read round trips, symbols, and bad input that
//! must give typed errors, never a panic.

mod common;

use common::{module, neg_kernel, negs, seq_kernel};
use dvm_isa::module::SectionKind;
use dvm_isa::Module;
use dvm_linker::{kernel_symbols, link, read_object, write_object, Arch, ObjectError};
use object::{Object as _, ObjectSection as _, ObjectSymbol as _};
use proptest::prelude::*;

fn image() -> Vec<u8> {
    // "neg" twice: identical kernels of two modules are kept once.
    let a = negs(&["neg", "bias add"]);
    let b = module(
        None,
        &[
            neg_kernel("neg", 4096, "1000", None),
            seq_kernel("stages"),
            neg_kernel("neg2", 8192, "S", None),
        ],
    );
    link(&[Module::parse(&a).unwrap(), Module::parse(&b).unwrap()]).unwrap()
}

#[test]
fn write_then_read_gives_the_image_and_its_symbols() {
    let image = image();
    for arch in Arch::ALL {
        let elf = write_object(&image, arch).unwrap();
        let obj = read_object(&elf).unwrap();
        assert_eq!(obj.arch, Some(arch));
        assert!(obj.relocatable);
        assert_eq!(obj.address, 0);
        assert_eq!(obj.image, &image[..]);
        assert_eq!(obj.module.kernel_count(), 4);
        let syms: Vec<&str> = obj.kernels.iter().map(|k| k.symbol.as_str()).collect();
        assert_eq!(
            syms,
            [
                "dvm_kernel_neg",
                "dvm_kernel_bias_add",
                "dvm_kernel_stages",
                "dvm_kernel_neg2"
            ]
        );
        let names: Vec<&str> = obj.kernels.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["neg", "bias add", "stages", "neg2"]);
        // Each kernel symbol points at its entry in the kernel table.
        let table = obj.module.section_range(SectionKind::Kernels).start as u64;
        for (i, k) in obj.kernels.iter().enumerate() {
            assert_eq!(k.index as usize, i);
            assert_eq!(k.offset, table + 24 * i as u64);
            assert_eq!(k.size, 24);
            let entry = &image[k.offset as usize..][..24];
            let kr = obj.module.kernel(i).unwrap();
            assert_eq!(entry[0], kr.kind as u8);
            assert_eq!(entry[4..8], kr.ub_bytes.to_le_bytes());
        }
    }
}

#[test]
fn the_elf_file_is_what_the_docs_say() {
    let image = image();
    let elf = write_object(&image, Arch::Aarch64).unwrap();
    let f = object::File::parse(&*elf).unwrap();
    assert_eq!(f.architecture(), object::Architecture::Aarch64);
    assert!(f.is_little_endian() && f.is_64());
    assert_eq!(f.kind(), object::ObjectKind::Relocatable);
    let s = f.section_by_name(".dvm.image").unwrap();
    assert_eq!(s.align(), 8);
    assert_eq!(s.kind(), object::SectionKind::ReadOnlyData);
    assert_eq!(s.data().unwrap(), &image[..]);
    let sym = |n: &str| f.symbols().find(|s| s.name() == Ok(n)).unwrap();
    let start = sym("dvm_image");
    assert_eq!((start.address(), start.size()), (0, image.len() as u64));
    assert!(start.is_global() && start.section_index() == Some(s.index()));
    assert_eq!(sym("dvm_image_end").address(), image.len() as u64);
    assert_eq!(sym("dvm_kernel_neg2").size(), 24);
    let x86 = write_object(&image, Arch::X86_64).unwrap();
    assert_eq!(
        object::File::parse(&*x86).unwrap().architecture(),
        object::Architecture::X86_64
    );
}

#[test]
fn symbol_names_are_sanitized_and_unique() {
    assert_eq!(
        kernel_symbols(["a.b", "a_b", "a-b", "a_b_1", "", "é"]),
        [
            "dvm_kernel_a_b",
            "dvm_kernel_a_b_1",
            "dvm_kernel_a_b_2",
            "dvm_kernel_a_b_1_1",
            "dvm_kernel_",
            "dvm_kernel__"
        ]
    );
    let m = negs(&["a.b", "a_b"]);
    let obj_bytes = write_object(&m, Arch::X86_64).unwrap();
    let obj = read_object(&obj_bytes).unwrap();
    assert_eq!(obj.kernels[1].symbol, "dvm_kernel_a_b_1");
    assert_eq!(obj.kernels[1].name, "a_b");
}

#[test]
fn arch_names_parse() {
    assert_eq!("aarch64".parse::<Arch>().unwrap(), Arch::Aarch64);
    assert_eq!("x86_64".parse::<Arch>().unwrap(), Arch::X86_64);
    let e = "mips".parse::<Arch>().unwrap_err();
    assert!(e.to_string().contains("mips"));
}

/// An ELF object with the given sections (name, data) and symbols (name,
/// section index into `sections`, value), each with the size
/// `write_object` gives it (the section's for `dvm_image`, an entry's for a
/// kernel, 0 otherwise).
fn custom_elf(sections: &[(&str, &[u8])], symbols: &[(&str, usize, u64)]) -> Vec<u8> {
    let sized: Vec<(&str, usize, u64, u64)> = symbols
        .iter()
        .map(|&(name, sec, value)| {
            let size = if name == "dvm_image" {
                sections[sec].1.len() as u64
            } else if name.starts_with("dvm_kernel_") {
                24
            } else {
                0
            };
            (name, sec, value, size)
        })
        .collect();
    custom_elf_sized(sections, &sized)
}

/// [`custom_elf`] with explicit symbol sizes (the fourth field).
fn custom_elf_sized(sections: &[(&str, &[u8])], symbols: &[(&str, usize, u64, u64)]) -> Vec<u8> {
    use object::write::{Object, Symbol, SymbolSection};
    let mut o = Object::new(
        object::BinaryFormat::Elf,
        object::Architecture::Aarch64,
        object::Endianness::Little,
    );
    let ids: Vec<_> = sections
        .iter()
        .map(|(name, data)| {
            let id = o.add_section(
                Vec::new(),
                name.as_bytes().to_vec(),
                object::SectionKind::ReadOnlyData,
            );
            o.set_section_data(id, data.to_vec(), 8);
            id
        })
        .collect();
    for (name, sec, value, size) in symbols {
        o.add_symbol(Symbol {
            name: name.as_bytes().to_vec(),
            value: *value,
            size: *size,
            kind: object::SymbolKind::Data,
            scope: object::SymbolScope::Dynamic,
            weak: false,
            section: SymbolSection::Section(ids[*sec]),
            flags: object::SymbolFlags::None,
        });
    }
    o.write().unwrap()
}

#[test]
fn bad_objects_give_typed_errors() {
    let image = image();
    let len = image.len() as u64;
    assert!(matches!(read_object(b""), Err(ObjectError::NotElf(_))));
    assert!(matches!(
        read_object(b"hello, world"),
        Err(ObjectError::NotElf(_))
    ));
    // A dvm module is not an ELF object.
    assert!(matches!(read_object(&image), Err(ObjectError::NotElf(_))));
    // An ELF object without `.dvm.image`.
    let e = read_object(&custom_elf(&[(".rodata", b"abc")], &[])).unwrap_err();
    assert!(matches!(e, ObjectError::NoImage), "{e}");
    assert!(e.to_string().contains(".dvm.image"));
    // A corrupt image.
    let e = read_object(&custom_elf(&[(".dvm.image", b"DVMBjunk")], &[])).unwrap_err();
    assert!(matches!(e, ObjectError::BadImage(_)), "{e}");
    assert!(matches!(
        write_object(b"DVMBjunk", Arch::Aarch64),
        Err(ObjectError::BadImage(_))
    ));
    // An image that parses but does not verify: the end of the last
    // kernel's code overwritten.
    let m = Module::parse(&image).unwrap();
    let code = m.section_range(SectionKind::Code);
    let mut broken = image.clone();
    broken[code.end - 8..code.end].copy_from_slice(&[0xEE; 8]);
    let e = read_object(&custom_elf(&[(".dvm.image", &broken)], &[])).unwrap_err();
    assert!(matches!(e, ObjectError::Verify { .. }), "{e}");
    assert!(e.to_string().contains("neg2"), "{e}");
    assert!(matches!(
        write_object(&broken, Arch::Aarch64),
        Err(ObjectError::Verify { .. })
    ));
    // Missing symbols.
    let img: &[u8] = &image;
    let e = read_object(&custom_elf(&[(".dvm.image", img)], &[])).unwrap_err();
    assert!(
        matches!(&e, ObjectError::MissingSymbol(s) if s == "dvm_image"),
        "{e}"
    );
    let e = read_object(&custom_elf(
        &[(".dvm.image", img)],
        &[("dvm_image", 0, 0), ("dvm_image_end", 0, len)],
    ))
    .unwrap_err();
    assert!(
        matches!(&e, ObjectError::MissingSymbol(s) if s == "dvm_kernel_neg"),
        "{e}"
    );
    // Symbols that point elsewhere.
    let table = m.section_range(SectionKind::Kernels).start as u64;
    for (syms, culprit) in [
        (vec![("dvm_image", 0, 8)], "dvm_image"),
        (vec![("dvm_image_end", 0, 0)], "dvm_image_end"),
        (vec![("dvm_kernel_neg", 0, table + 1)], "dvm_kernel_neg"),
        (vec![("dvm_kernel_neg", 0, 0)], "dvm_kernel_neg"),
        (vec![("dvm_kernel_neg", 0, len + 24)], "dvm_kernel_neg"),
        (vec![("dvm_kernel_oops", 0, table)], "dvm_kernel_oops"),
        (
            vec![("dvm_kernel_neg", 0, table), ("dvm_kernel_neg", 0, table)],
            "dvm_kernel_neg",
        ),
    ] {
        let e = read_object(&custom_elf(&[(".dvm.image", img)], &syms)).unwrap_err();
        assert!(
            matches!(&e, ObjectError::BadSymbol { symbol, .. } if symbol == culprit),
            "{syms:?}: {e}"
        );
    }
    // Symbols whose sizes disagree with the image's kernel table (the
    // probe's `1760_ff.o`: a kernel symbol's size byte flipped to 255) or
    // with the image.
    let good_syms = |k_size: u64, start_size: u64, end_size: u64| {
        let mut syms = vec![
            ("dvm_image", 0, 0, start_size),
            ("dvm_image_end", 0, len, end_size),
        ];
        for (i, name) in [
            "dvm_kernel_neg",
            "dvm_kernel_bias_add",
            "dvm_kernel_stages",
            "dvm_kernel_neg2",
        ]
        .into_iter()
        .enumerate()
        {
            let size = if i == 1 { k_size } else { 24 };
            syms.push((name, 0, table + 24 * i as u64, size));
        }
        syms
    };
    assert!(read_object(&custom_elf_sized(
        &[(".dvm.image", img)],
        &good_syms(24, len, 0)
    ))
    .is_ok());
    for (sizes, culprit, what) in [
        ((255, len, 0), "dvm_kernel_bias_add", "size 255"),
        ((0, len, 0), "dvm_kernel_bias_add", "size 0"),
        ((24, 8, 0), "dvm_image", "size 8"),
        ((24, len, 3), "dvm_image_end", "size 3"),
    ] {
        let syms = good_syms(sizes.0, sizes.1, sizes.2);
        let e = read_object(&custom_elf_sized(&[(".dvm.image", img)], &syms)).unwrap_err();
        assert!(
            matches!(&e, ObjectError::BadSymbol { symbol, .. } if symbol == culprit),
            "{sizes:?}: {e}"
        );
        assert!(e.to_string().contains(what), "{e}");
    }
    // Symbols in other sections and non-dvm symbols are ignored.
    let good = write_object(&image, Arch::Aarch64).unwrap();
    assert!(read_object(&good).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Mutated and truncated objects never panic the reader.
    #[test]
    fn mutated_objects_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let elf = OBJECT.with(|o| o.clone());
        let mut bytes = elf;
        for (at, v) in edits {
            let i = at.index(bytes.len());
            bytes[i] = v;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        let _ = read_object(&bytes);
    }
}

thread_local! {
    static OBJECT: Vec<u8> = write_object(&image(), Arch::Aarch64).unwrap();
}
