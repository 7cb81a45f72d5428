//! `dvm link`, `dvm objdump`, `dvm memory-x`: happy paths and bad input
//! (exit code 2, a message naming the culprit, no output left behind).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn dvm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dvm"))
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/attention.json")
}

/// A fresh directory for one test, removed when the test ends (also
/// when it fails).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("dvm-link-cli-{name}-"))
        .tempdir()
        .unwrap()
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn user_error(o: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    for n in needles {
        assert!(err.contains(n), "stderr `{err}` does not name `{n}`");
    }
}

fn compile(dir: &Path, s: u32) -> PathBuf {
    let m = dir.join(format!("attn{s}.dvmb"));
    let o = dvm()
        .arg("compile")
        .arg(example())
        .args(["--bind", &format!("S={s}"), "-o"])
        .arg(&m)
        .output()
        .unwrap();
    ok(&o);
    m
}

/// A module with one small vector kernel named `name`.
fn small(dir: &Path, name: &str) -> PathBuf {
    let text = format!(
        ".kernel \"{name}\" kind=vector ub=4096
  .param \"x\" f32 in dims=[1000]
  .param \"y\" f32 out dims=[1000]
  .body grid=1,1,4
    load dt=f32 pad=fill buf=0 row_dim=- col_dim=2 ub=0 pitch=256 rows=1 cols=256 row_total=1 col_total=1000 padv=0.0 base=0 step0=0 step1=0 step2=256 row_stride=0 col_stride=1
    neg dt=f32 dst=0 src=0 n=256 @wait=load
    store dt=f32 buf=1 row_dim=- col_dim=2 ub=0 pitch=256 rows=1 cols=256 row_total=1 col_total=1000 base=0 step0=0 step1=0 step2=256 row_stride=0 col_stride=1 @wait=vector
    end
.end
"
    );
    let p = dir.join(format!("{name}.dvmb"));
    std::fs::write(&p, dvm_isa::asm::assemble(&text).unwrap()).unwrap();
    p
}

/// The name of the first kernel of the module at `path` (the compiler
/// names kernels after the graph nodes it fused).
fn first_kernel(path: &Path) -> String {
    let text = ok(&dvm().arg("disasm").arg(path).output().unwrap());
    let at = text.find(".kernel \"").expect("a kernel") + ".kernel \"".len();
    text[at..].split('"').next().unwrap().to_string()
}

#[test]
fn link_then_objdump() {
    let dir_tmp = scratch("ok");
    let dir = dir_tmp.path();
    let attn = compile(dir, 100);
    let first = first_kernel(&attn);
    let symbol: String = first
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let neg = small(dir, "neg");
    let obj = dir.join("kernels.o");
    let image = dir.join("kernels.dvmb");
    let out = ok(&dvm()
        .arg("link")
        .args([&attn, &neg, &attn])
        .arg("-o")
        .arg(&obj)
        .arg("--image")
        .arg(&image)
        .output()
        .unwrap());
    assert!(
        out.contains("kernels.o") && out.contains("aarch64"),
        "{out}"
    );
    // The image is a module that verifies, with every kernel once.
    ok(&dvm().arg("verify").arg(&image).output().unwrap());
    let text = ok(&dvm().arg("disasm").arg(&image).output().unwrap());
    assert_eq!(
        text.matches(&format!(".kernel \"{first}\"")).count(),
        1,
        "{text}"
    );
    assert_eq!(text.matches(".kernel \"neg\"").count(), 1, "{text}");
    // objdump lists kernels, symbols, kinds, params and sizes.
    let dump = ok(&dvm().arg("objdump").arg(&obj).output().unwrap());
    assert!(
        dump.starts_with("aarch64 relocatable, section .dvm.image"),
        "{dump}"
    );
    assert!(dump.contains("symbol dvm_image offset 0x0"), "{dump}");
    assert!(
        dump.contains(&format!(
            "kernel 0 \"{first}\": symbol dvm_kernel_{symbol} offset"
        )),
        "{dump}"
    );
    assert!(dump.contains("symbol dvm_kernel_neg"), "{dump}");
    assert!(
        ["kind cube", "kind mix", "kind sequence"]
            .iter()
            .any(|k| dump.contains(k)),
        "{dump}"
    );
    assert!(dump.contains("param 0 \"x\": f32 in dims [1000]"), "{dump}");
    assert!(!dump.contains(".kernel"), "{dump}");
    let dis = ok(&dvm()
        .args(["objdump", "--disasm"])
        .arg(&obj)
        .output()
        .unwrap());
    assert!(
        dis.contains(".kernel \"neg\"") && dis.contains("neg dt=f32"),
        "{dis}"
    );
    // x86_64 objects too.
    let x86 = dir.join("host.o");
    ok(&dvm()
        .arg("link")
        .arg(&neg)
        .args(["--arch", "x86_64", "-o"])
        .arg(&x86)
        .output()
        .unwrap());
    let dump = ok(&dvm().arg("objdump").arg(&x86).output().unwrap());
    assert!(dump.starts_with("x86_64 relocatable"), "{dump}");
}

#[test]
fn bad_link_input_is_a_user_error() {
    let dir_tmp = scratch("bad");
    let dir = dir_tmp.path();
    let a100 = compile(dir, 100);
    let a64 = compile(dir, 64);
    let out = dir.join("out.o");
    let link = |inputs: &[&Path]| {
        let o = dvm()
            .arg("link")
            .args(inputs)
            .arg("-o")
            .arg(&out)
            .arg("--image")
            .arg(dir.join("out.dvmb"))
            .output()
            .unwrap();
        assert!(
            !out.exists() && !dir.join("out.dvmb").exists(),
            "output left behind"
        );
        o
    };
    // Missing file.
    let missing = dir.join("missing.dvmb");
    user_error(&link(&[&a100, &missing]), &["missing.dvmb"]);
    // Corrupt module.
    let cut = dir.join("cut.dvmb");
    let bytes = std::fs::read(&a100).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    user_error(&link(&[&cut]), &["cut.dvmb"]);
    // Name clash: the same graph at two lengths has kernels with the same
    // names and different code.
    let clash = format!("`{}`", first_kernel(&a100));
    user_error(
        &link(&[&a100, &a64]),
        &[&clash, "attn100.dvmb", "attn64.dvmb", "defined differently"],
    );
    // Unknown architecture (clap's usage error, also exit code 2).
    let o = dvm()
        .arg("link")
        .arg(&a100)
        .args(["--arch", "mips", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    user_error(&o, &["mips"]);
    assert!(!out.exists());
}

#[test]
fn bad_objdump_input_is_a_user_error() {
    let dir_tmp = scratch("objdump");
    let dir = dir_tmp.path();
    let neg = small(dir, "neg");
    // A module is not an ELF object.
    user_error(
        &dvm().arg("objdump").arg(&neg).output().unwrap(),
        &["neg.dvmb", "not an ELF"],
    );
    // An ELF without dvm sections: the dvm binary itself.
    let exe = env!("CARGO_BIN_EXE_dvm");
    user_error(
        &dvm().arg("objdump").arg(exe).output().unwrap(),
        &[".dvm.image"],
    );
    // Missing file.
    user_error(
        &dvm()
            .arg("objdump")
            .arg(dir.join("nope.o"))
            .output()
            .unwrap(),
        &["nope.o"],
    );
    // A corrupt image inside a good ELF.
    let obj = dir.join("k.o");
    ok(&dvm()
        .arg("link")
        .arg(&neg)
        .arg("-o")
        .arg(&obj)
        .output()
        .unwrap());
    let mut bytes = std::fs::read(&obj).unwrap();
    let at = bytes.windows(4).position(|w| w == b"DVMB").unwrap();
    bytes[at + 4] = 9; // version major 9
    std::fs::write(&obj, &bytes).unwrap();
    user_error(
        &dvm().arg("objdump").arg(&obj).output().unwrap(),
        &["k.o", "module"],
    );
}

#[test]
fn memory_x_writes_both_files_or_nothing() {
    let dir_tmp = scratch("memx");
    let dir = dir_tmp.path();
    let out = dir.join("layout");
    ok(&dvm()
        .args([
            "memory-x",
            "--ram-size",
            "32M",
            "--stack-size",
            "0x8000",
            "-o",
        ])
        .arg(&out)
        .output()
        .unwrap());
    let mem = std::fs::read_to_string(out.join("memory.x")).unwrap();
    assert!(
        mem.contains("RAM : ORIGIN = 0x40080000, LENGTH = 0x2000000"),
        "{mem}"
    );
    assert!(mem.contains("_dvm_stack_size = 0x8000;"), "{mem}");
    assert!(mem.contains("_dvm_ub_size = 0x30000;"), "{mem}");
    assert!(mem.contains("_dvm_cores = 2;"), "{mem}");
    let link = std::fs::read_to_string(out.join("link.x")).unwrap();
    assert!(link.contains("INCLUDE memory.x"), "{link}");

    let bad = dir.join("bad");
    for (args, culprit) in [
        (&["--ub-size", "100"][..], "ub_size"),
        (&["--stack-size", "1K"], "stack_size"),
        (&["--ram-base", "0x40080010"], "ram_base"),
        (&["--ram-size", "64K"], "ram_size"),
        (&["--ub-size", "lots"], "lots"),
        (&["--cores", "9"], "cores"),
    ] {
        let o = dvm()
            .arg("memory-x")
            .args(args)
            .arg("-o")
            .arg(&bad)
            .output()
            .unwrap();
        user_error(&o, &[culprit]);
        assert!(!bad.join("memory.x").exists() && !bad.join("link.x").exists());
    }
}

#[test]
fn a_failed_second_output_leaves_no_first_output() {
    let dir_tmp = scratch("two-outputs");
    let dir = dir_tmp.path();
    let neg = small(dir, "neg");
    let obj = dir.join("kernels.o");
    let image = dir.join("missing-dir").join("kernels.dvmb");
    let o = link_with_image(&neg, &obj, &image);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("kernels.dvmb"), "{err}");
    assert!(!obj.exists(), "the object was left behind");
    assert!(temporaries(dir).is_empty(), "{:?}", temporaries(dir));
}

/// `dvm link MODULE -o OBJ --image IMAGE`, run.
fn link_with_image(module: &Path, obj: &Path, image: impl AsRef<std::ffi::OsStr>) -> Output {
    dvm()
        .arg("link")
        .arg(module)
        .arg("-o")
        .arg(obj)
        .arg("--image")
        .arg(image)
        .output()
        .unwrap()
}

/// Names of the temporary files `dvm` leaves in `dir` (none, it should).
fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect()
}

/// An output path that is a directory is found before anything is
/// renamed into place: exit 2, and the other output is not written.
#[test]
fn an_output_that_is_a_directory_leaves_the_other_unwritten() {
    let dir_tmp = scratch("dir-output");
    let dir = dir_tmp.path();
    let neg = small(dir, "neg");
    let obj = dir.join("kernels.o");
    let image = dir.join("image-dir");
    std::fs::create_dir(&image).unwrap();
    let o = link_with_image(&neg, &obj, &image);
    user_error(&o, &["image-dir", "is a directory"]);
    assert!(!obj.exists(), "the object was left behind");
    assert!(temporaries(dir).is_empty(), "{:?}", temporaries(dir));

    // memory-x: `link.x` is a directory, so `memory.x` is not written.
    let mx = dir.join("mx");
    std::fs::create_dir_all(mx.join("link.x")).unwrap();
    let o = dvm().arg("memory-x").arg("-o").arg(&mx).output().unwrap();
    user_error(&o, &["link.x", "is a directory"]);
    assert!(!mx.join("memory.x").exists(), "memory.x was left behind");
    assert!(temporaries(&mx).is_empty(), "{:?}", temporaries(&mx));

    // memory-x into a regular file: it is not a directory.
    let file = dir.join("afile");
    std::fs::write(&file, b"x").unwrap();
    let o = dvm().arg("memory-x").arg("-o").arg(&file).output().unwrap();
    user_error(&o, &["afile", "not a directory"]);
    assert_eq!(std::fs::read(&file).unwrap(), b"x");

    // The object and the image onto one file (two spellings of it).
    let o = link_with_image(&neg, &obj, dir.join(".").join("kernels.o"));
    user_error(&o, &["kernels.o", "same file"]);
    assert!(!obj.exists(), "an output was written");
}
