//! Linking modules: round trips, dedupe, clashes, features, bad input.

mod common;

use common::{module, neg_kernel, negs, seq_kernel};
use dvm_isa::module::features;
use dvm_isa::{verify_module, DeviceLimits, Module};
use dvm_linker::{link, LinkError, Linker};

fn parse(bytes: &[u8]) -> Module<'_> {
    Module::parse(bytes).unwrap()
}

fn names(image: &[u8]) -> Vec<String> {
    parse(image)
        .meta()
        .unwrap()
        .kernels
        .into_iter()
        .map(|k| k.name)
        .collect()
}

fn verified(image: &[u8]) {
    verify_module(&parse(image), &DeviceLimits::DEFAULT).unwrap();
}

#[test]
fn one_module_links_to_itself() {
    let a = module(
        None,
        &[
            neg_kernel("a", 4096, "S", Some("first load")),
            seq_kernel("s"),
            neg_kernel("b", 8192, "1000", None),
        ],
    );
    let image = link(&[parse(&a)]).unwrap();
    assert_eq!(image, a, "the builder's layout is reproduced byte for byte");
    verified(&image);
}

#[test]
fn kernels_are_merged_in_order_of_first_appearance() {
    let a = negs(&["a", "b"]);
    let b = negs(&["c"]);
    let c = module(None, &[seq_kernel("d")]);
    let image = link(&[parse(&a), parse(&b), parse(&c)]).unwrap();
    verified(&image);
    assert_eq!(names(&image), ["a", "b", "c", "d"]);
    let m = parse(&image);
    // Every kernel keeps its code, tables and metadata.
    for (src, idx) in [(&a, 0usize), (&a, 1), (&b, 0), (&c, 0)] {
        let sm = parse(src);
        let sk = sm.kernel(idx).unwrap();
        let name = &sm.meta().unwrap().kernels[idx];
        let pos = m
            .meta()
            .unwrap()
            .kernels
            .iter()
            .position(|k| k == name)
            .unwrap();
        let k = m.kernel(pos).unwrap();
        assert_eq!(k.kind, sk.kind);
        assert_eq!(k.ub_bytes, sk.ub_bytes);
        assert_eq!(
            k.params().collect::<Vec<_>>(),
            sk.params().collect::<Vec<_>>()
        );
        assert_eq!(k.bodies.len(), sk.bodies.len());
        for b in 0..k.bodies.len() {
            assert_eq!(k.bodies[b].grid(), sk.bodies[b].grid());
            assert_eq!(k.body_code(b), sk.body_code(b));
        }
    }
    // The text of the linked image is the texts of the inputs, joined.
    let text = dvm_isa::asm::disassemble(&m).unwrap();
    assert!(text.contains(".label \"second stage\""), "{text}");
}

#[test]
fn identical_kernels_are_kept_once() {
    let a = negs(&["a", "shared"]);
    let b = negs(&["shared", "b"]);
    let image = link(&[parse(&a), parse(&b)]).unwrap();
    verified(&image);
    assert_eq!(names(&image), ["a", "shared", "b"]);
    // Linking a module with itself changes nothing.
    assert_eq!(link(&[parse(&a), parse(&a)]).unwrap(), a);
    // Two kernels of one name inside one module are refused when parsed
    // (the assembler and builder refuse to write them).
    let xy = negs(&["x", "y"]);
    let mut meta = parse(&xy).meta().unwrap();
    meta.kernels[1].name = "x".into();
    let e = Linker::new()
        .add_bytes("twice.dvmb", &relabel(&xy, &meta))
        .unwrap_err();
    assert!(matches!(e, LinkError::Parse { .. }), "{e}");
    assert!(
        e.to_string().contains("twice.dvmb") && e.to_string().contains("\"x\""),
        "{e}"
    );
    let mut l = Linker::new();
    assert_eq!(l.add_bytes("a", &a).unwrap(), 2);
    assert_eq!(l.add_bytes("b", &b).unwrap(), 1);
    assert_eq!(l.kernel_count(), 3);
    assert_eq!(l.kernel_names().collect::<Vec<_>>(), ["a", "shared", "b"]);
}

fn clash(a: &[u8], b: &[u8]) -> LinkError {
    let mut l = Linker::new();
    l.add_bytes("one.dvmb", a).unwrap();
    let before = l.finish().unwrap();
    let e = l.add_bytes("two.dvmb", b).unwrap_err();
    // A failed add changes nothing.
    assert_eq!(l.finish().unwrap(), before);
    e
}

#[test]
fn different_kernels_with_one_name_clash() {
    let a = negs(&["k"]);
    let variants = [
        neg_kernel("k", 8192, "1000", None),            // UB bytes
        neg_kernel("k", 4096, "S", None),               // metadata dims
        neg_kernel("k", 4096, "1000", Some("a label")), // labels
        seq_kernel("k"),                                // kind, bodies
    ];
    for v in variants {
        let b = module(None, &[neg_kernel("fresh", 4096, "1000", None), v.clone()]);
        let e = clash(&a, &b);
        let msg = e.to_string();
        assert!(
            matches!(&e, LinkError::NameClash { kernel, first, second }
                if kernel == "k" && first == "one.dvmb" && second == "two.dvmb"),
            "{msg}"
        );
        assert!(msg.contains("`k`") && msg.contains("one.dvmb") && msg.contains("two.dvmb"));
    }
    // Code words differ: 2 tiles of 500 instead of 4 of 256 would need new
    // operands; a different wait flag is enough.
    let other = neg_kernel("k", 4096, "1000", None).replace(" @wait=vector", " @wait=vector|load");
    let b = module(None, &[other]);
    assert!(matches!(clash(&a, &b), LinkError::NameClash { .. }));
    // A clash within one module is refused when the module is parsed.
    let both = module(
        None,
        &[
            neg_kernel("k", 4096, "1000", None),
            neg_kernel("other", 8192, "1000", None),
        ],
    );
    let mut meta = parse(&both).meta().unwrap();
    meta.kernels[1].name = "k".into();
    let e = Linker::new()
        .add_bytes("m.dvmb", &relabel(&both, &meta))
        .unwrap_err();
    assert!(
        matches!(&e, LinkError::Parse { input, .. } if input == "m.dvmb"),
        "{e}"
    );
    // `link` names inputs by position.
    let b = negs(&["z"]);
    let c = module(None, &[neg_kernel("k", 8192, "1000", None)]);
    let e = link(&[parse(&a), parse(&b), parse(&c)]).unwrap_err();
    assert!(
        e.to_string().contains("module 0") && e.to_string().contains("module 2"),
        "{e}"
    );
}

#[test]
fn features_are_the_union() {
    let a = module(
        Some(".module 1.0 features=f16"),
        &[neg_kernel("a", 4096, "1", None)],
    );
    let b = module(None, &[seq_kernel("s")]);
    let image = link(&[parse(&a), parse(&b)]).unwrap();
    verified(&image);
    assert_eq!(
        parse(&image).features(),
        features::F16 | features::MULTI_BODY
    );
    // No inputs: an empty, valid module.
    let empty = link(&[]).unwrap();
    assert_eq!(parse(&empty).kernel_count(), 0);
}

#[test]
fn bad_inputs_are_named() {
    let a = negs(&["a"]);
    let mut l = Linker::new();
    // Not a module.
    let e = l.add_bytes("junk.dvmb", b"hello").unwrap_err();
    assert!(
        matches!(e, LinkError::Parse { .. }) && e.to_string().contains("junk.dvmb"),
        "{e}"
    );
    // Truncated.
    let e = l.add_bytes("cut.dvmb", &a[..a.len() / 2]).unwrap_err();
    assert!(e.to_string().starts_with("cut.dvmb: "), "{e}");
    // A kernel that does not verify (UB larger than the device's).
    let big = module(None, &[neg_kernel("big", 1 << 20, "1", None)]);
    let e = l.add_bytes("big.dvmb", &big).unwrap_err();
    assert!(
        matches!(&e, LinkError::Verify { input, kernel, .. } if input == "big.dvmb" && kernel == "big"),
        "{e}"
    );
    // ...which a device with a larger UB accepts.
    let mut roomy = Linker::with_limits(DeviceLimits::with_ub_bytes(1 << 20));
    roomy.add_bytes("big.dvmb", &big).unwrap();
    assert_eq!(roomy.finish().unwrap(), big);
    assert_eq!(l.kernel_count(), 0);
}

#[test]
fn metadata_that_disagrees_with_the_tables_is_rejected() {
    use dvm_isa::builder::{BodyDef, CodeWriter, KernelDef, ModuleBuilder, ParamDef};
    use dvm_isa::{DType, Instr, KernelKind, ParamAccess, WaitMask};
    // A label on a body that does not exist survives the builder (labels
    // are not verified) but would be lost by the linker: rejected.
    let mut code = CodeWriter::new();
    code.push(&Instr::End {}, WaitMask::NONE);
    code.label_at(0, "ok");
    let def = KernelDef {
        name: "k".into(),
        kind: KernelKind::Vector,
        ub_bytes: 64,
        params: vec![ParamDef {
            name: "x".into(),
            dtype: DType::F32,
            access: ParamAccess::Read,
            dims: vec![],
        }],
        bodies: vec![BodyDef {
            grid: [1, 1, 1],
            code,
        }],
    };
    let mut b = ModuleBuilder::new();
    b.add_kernel(def.clone()).expect("unique kernel name");
    let good = b.finish();
    Linker::new().add_bytes("good", &good).unwrap();
    let m = parse(&good);
    let mut meta = m.meta().unwrap();
    meta.kernels[0].labels[0].body = 3;
    let e = relabel(&good, &meta);
    let err = Linker::new().add_bytes("bad", &e).unwrap_err();
    // `Module::parse` itself rejects it, naming the metadata.
    assert!(matches!(err, LinkError::Parse { .. }), "{err}");
    assert!(err.to_string().contains("metadata"), "{err}");
    assert!(err.to_string().contains("body 3"), "{err}");
    // A label past the end of its body (the body is one `end`): the
    // builder would refuse it when writing the image; rejected on input.
    let mut meta = m.meta().unwrap();
    meta.kernels[0].labels[0].word = 1;
    let err = Linker::new()
        .add_bytes("bad", &relabel(&good, &meta))
        .unwrap_err();
    assert!(matches!(err, LinkError::Parse { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("label \"ok\" is on word 1 of body 0, which has 1 word(s)"),
        "{err}"
    );
    let mut meta = m.meta().unwrap();
    meta.kernels[0].params.clear();
    let err = Linker::new()
        .add_bytes("bad", &relabel(&good, &meta))
        .unwrap_err();
    assert!(err.to_string().contains("parameter"), "{err}");
}

/// `bytes` with its metadata section replaced (the builder's layout puts
/// metadata last).
fn relabel(bytes: &[u8], meta: &dvm_isa::meta::ModuleMeta) -> Vec<u8> {
    let m = parse(bytes);
    let r = m.section_range(dvm_isa::module::SectionKind::Meta);
    assert_eq!(r.end, bytes.len());
    let new = postcard::to_allocvec(meta).unwrap();
    let mut out = bytes[..r.start].to_vec();
    out.extend_from_slice(&new);
    // Patch the META section length in the section table (entry 5 of 5).
    let entry = dvm_isa::module::HEADER_SIZE + 4 * 24;
    out[entry + 16..entry + 24].copy_from_slice(&(new.len() as u64).to_le_bytes());
    out
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Mutated modules never panic the linker; whatever it accepts
        /// links into an image that verifies.
        #[test]
        fn mutated_modules_never_panic(
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        ) {
            let mut bytes = module(None, &[neg_kernel("a", 4096, "S", Some("l")), seq_kernel("s")]);
            for (at, v) in edits {
                let i = at.index(bytes.len());
                bytes[i] = v;
            }
            let mut l = Linker::new();
            if l.add_bytes("m", &bytes).is_ok() {
                let image = l.finish().unwrap();
                verified(&image);
            }
        }
    }
}
