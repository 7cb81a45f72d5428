//! The `dvm` command line: happy paths and bad input (exit code 2, a message
//! naming the culprit, no output left behind).

mod common;

use std::process::Command;

use common::{attention_inputs, dvm, example_file, scratch};
use dvm_tensor::npy;
use dvm_tensor::sample_data as data;
use dvm_tensor::Tensor;
use std::path::{Path, PathBuf};

fn example() -> PathBuf {
    example_file("attention.json")
}

fn write_inputs(dir: &Path, s: u64) -> Vec<String> {
    attention_inputs(dir, s)
}

fn run_graph(dir: &Path, inputs: &[String], device: &str, out: &Path) -> std::process::Output {
    let mut c = dvm();
    c.arg("run").arg(example());
    for i in inputs {
        c.arg("--input").arg(i);
    }
    c.args(["--device", device, "--output-dir"]).arg(out);
    let _ = dir;
    c.output().unwrap()
}

#[test]
fn run_on_cpu_matches_reference() {
    let dir_tmp = scratch("ok");
    let dir = dir_tmp.path();
    let inputs = write_inputs(dir, 37);
    let cpu = dir.join("cpu");
    let refd = dir.join("ref");
    let a = run_graph(dir, &inputs, "cpu", &cpu);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    let b = run_graph(dir, &inputs, "reference", &refd);
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let x = npy::read(&cpu.join("o.npy")).unwrap();
    let y = npy::read(&refd.join("o.npy")).unwrap();
    assert_eq!(x.shape(), &[37, 64]);
    assert!(x.allclose(&y, 1e-5, 1e-5).unwrap());
}

fn assert_user_error(out: &std::process::Output, needle: &str, out_dir: &Path) {
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(needle),
        "stderr `{err}` does not name `{needle}`"
    );
    assert!(!out_dir.join("o.npy").exists(), "an output was left behind");
}

#[test]
fn bad_inputs_are_user_errors() {
    let dir_tmp = scratch("bad");
    let dir = dir_tmp.path();
    let mut inputs = write_inputs(dir, 5);
    let out = dir.join("out");
    // Missing input.
    let o = run_graph(dir, &inputs[..2], "cpu", &out);
    assert_user_error(&o, "v", &out);
    // Unknown input name.
    let mut extra = inputs.clone();
    extra.push(format!("w={}", dir.join("q.npy").display()));
    let o = run_graph(dir, &extra, "cpu", &out);
    assert_user_error(&o, "w", &out);
    // Wrong dtype.
    let t = Tensor::from_i32(&[5, 64], &vec![1; 320]).unwrap();
    npy::write(&dir.join("vi.npy"), &t).unwrap();
    inputs[2] = format!("v={}", dir.join("vi.npy").display());
    let o = run_graph(dir, &inputs, "cpu", &out);
    assert_user_error(&o, "v", &out);
    // Mismatched shapes: k has another length than q.
    let mut inputs = write_inputs(dir, 5);
    let k = Tensor::from_f32(&[6, 64], &data(384, 9)).unwrap();
    npy::write(&dir.join("k6.npy"), &k).unwrap();
    inputs[1] = format!("k={}", dir.join("k6.npy").display());
    let o = run_graph(dir, &inputs, "cpu", &out);
    assert_user_error(&o, "k", &out);
    // Not an npy file.
    std::fs::write(dir.join("junk.npy"), b"hello").unwrap();
    inputs[1] = format!("k={}", dir.join("junk.npy").display());
    let o = run_graph(dir, &inputs, "cpu", &out);
    assert_user_error(&o, "junk.npy", &out);
    // Unreadable graph.
    let o = dvm()
        .args(["run", "/nonexistent/g.json", "--output-dir"])
        .arg(&out)
        .output()
        .unwrap();
    assert_user_error(&o, "g.json", &out);
    // A graph without outputs: nothing to run, and no directory made.
    let empty = dir.join("no-outputs.json");
    std::fs::write(
        &empty,
        r#"{"inputs": [{"name": "x", "dtype": "f32", "shape": [4]}]}"#,
    )
    .unwrap();
    let o = dvm()
        .arg("run")
        .arg(&empty)
        .arg("--output-dir")
        .arg(&out)
        .output()
        .unwrap();
    assert_user_error(&o, "no outputs", &out);
    assert!(!out.exists(), "the output directory was made");
}

/// An `.npy` file of `t` whose header dict is `{dict}` (as written).
fn npy_with_dict(path: &Path, dict: &str, t: &Tensor) {
    let text = format!("{{{dict}}}\n");
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(text.len() as u16).to_le_bytes());
    bytes.extend_from_slice(text.as_bytes());
    bytes.extend_from_slice(t.bytes());
    std::fs::write(path, bytes).unwrap();
}

/// NumPy refuses a header whose keys are not exactly `descr`,
/// `fortran_order` and `shape`; so does `dvm run`, naming file and keys.
#[test]
fn npy_header_keys_are_checked() {
    let dir_tmp = scratch("npy-keys");
    let dir = dir_tmp.path();
    let mut inputs = write_inputs(dir, 5);
    let out = dir.join("out");
    let k = Tensor::from_f32(&[5, 64], &data(320, 2)).unwrap();
    let cases = [
        (
            "extra",
            "'descr': '<f4', 'fortran_order': False, 'shape': (5, 64), 'extra': 1, ",
            "unexpected key 'extra'",
        ),
        (
            "missing",
            "'descr': '<f4', 'shape': (5, 64), ",
            "missing key 'fortran_order'",
        ),
        (
            "twice",
            "'descr': '<f4', 'fortran_order': False, 'shape': (5, 64), 'shape': (5, 64)",
            "repeated key 'shape'",
        ),
    ];
    for (name, dict, needle) in cases {
        let file = dir.join(format!("k-{name}.npy"));
        npy_with_dict(&file, dict, &k);
        inputs[1] = format!("k={}", file.display());
        let o = run_graph(dir, &inputs, "cpu", &out);
        assert_user_error(&o, &format!("k-{name}.npy"), &out);
        assert_user_error(&o, needle, &out);
    }
    // The same file with exactly the three keys runs.
    let file = dir.join("k-ok.npy");
    npy_with_dict(
        &file,
        "'shape': (5, 64), 'fortran_order': False, 'descr': '<f4'",
        &k,
    );
    inputs[1] = format!("k={}", file.display());
    let o = run_graph(dir, &inputs, "cpu", &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn compile_disasm_verify_and_bad_bindings() {
    let dir_tmp = scratch("compile");
    let dir = dir_tmp.path();
    let m = dir.join("attn.dvmb");
    let o = dvm()
        .arg("compile")
        .arg(example())
        .args(["--bind", "S=100", "-o"])
        .arg(&m)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = dvm().arg("verify").arg(&m).output().unwrap();
    assert!(v.status.success());
    // The compiler's kernels may all run on several cores.
    assert!(!String::from_utf8_lossy(&v.stdout).contains("one core"));
    let d = dvm().arg("disasm").arg(&m).output().unwrap();
    assert!(d.status.success());
    let text = String::from_utf8_lossy(&d.stdout);
    assert!(text.contains(".kernel \"scores"), "{text}");
    // Reassembling gives the same bytes.
    std::fs::write(dir.join("attn.s"), text.as_bytes()).unwrap();
    let back = dir.join("back.dvmb");
    let a = dvm()
        .arg("asm")
        .arg(dir.join("attn.s"))
        .arg("-o")
        .arg(&back)
        .output()
        .unwrap();
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert_eq!(std::fs::read(&m).unwrap(), std::fs::read(&back).unwrap());

    // Out of range, unknown symbol, unbound symbol: exit 2, no module.
    let bad = dir.join("bad.dvmb");
    for args in [&["--bind", "S=5000"][..], &["--bind", "T=3"], &[]] {
        let o = dvm()
            .arg("compile")
            .arg(example())
            .args(args)
            .arg("-o")
            .arg(&bad)
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(String::from_utf8_lossy(&o.stderr).contains('S') || args.contains(&"T=3"));
        assert!(!bad.exists());
    }
    // A corrupt module is rejected by verify and disasm with exit 2.
    let mut bytes = std::fs::read(&m).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&bad, &bytes).unwrap();
    let o = dvm().arg("verify").arg(&bad).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// A `.label` with no word after it in its body is refused by `dvm asm`,
/// naming the file, the label and its line; no module is written.
#[test]
fn asm_refuses_a_label_past_the_end_of_its_body() {
    let dir_tmp = scratch("asm-label");
    let dir = dir_tmp.path();
    let src = dir.join("tail.s");
    std::fs::write(
        &src,
        ".kernel \"k\" kind=vector ub=64\n  .body grid=1,1,1\n    end\n    .label \"tail\"\n.end\n",
    )
    .unwrap();
    let m = dir.join("tail.dvmb");
    let o = dvm()
        .arg("asm")
        .arg(&src)
        .arg("-o")
        .arg(&m)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("tail.s: line 4, column 5: label \"tail\" names no instruction"),
        "{err}"
    );
    assert!(!m.exists());
}

#[test]
fn an_output_that_is_an_input_is_refused_and_the_input_kept() {
    let dir_tmp = scratch("in-is-out");
    let dir = dir_tmp.path();
    let src = dir.join("k.s");
    let text = ".kernel \"k\" kind=vector ub=64\n  .body grid=1,1,1\n    end\n.end\n";
    std::fs::write(&src, text).unwrap();
    let module = dir.join("k.dvmb");
    let ok = dvm()
        .arg("asm")
        .arg(&src)
        .arg("-o")
        .arg(&module)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let graph = dir.join("g.json");
    std::fs::copy(example(), &graph).unwrap();
    let before = std::fs::read(&graph).unwrap();
    // The same file under another name, through `..`.
    let src_again = dir.join("sub/../k.s");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let object = dir.join("k.o");
    let runs: [(&str, Vec<&std::ffi::OsStr>, &Path); 4] = [
        (
            "asm",
            vec![src.as_os_str(), "-o".as_ref(), src_again.as_os_str()],
            &src,
        ),
        (
            "compile",
            vec![
                graph.as_os_str(),
                "--bind".as_ref(),
                "S=4".as_ref(),
                "-o".as_ref(),
                graph.as_os_str(),
            ],
            &graph,
        ),
        (
            "link",
            vec![module.as_os_str(), "-o".as_ref(), module.as_os_str()],
            &module,
        ),
        (
            "link",
            vec![
                module.as_os_str(),
                "-o".as_ref(),
                object.as_os_str(),
                "--image".as_ref(),
                module.as_os_str(),
            ],
            &module,
        ),
    ];
    for (cmd, args, input) in runs {
        let kept = std::fs::read(input).unwrap();
        let o = dvm().arg(cmd).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {err}");
        assert!(err.contains("refusing to write over it"), "{cmd}: {err}");
        assert_eq!(
            std::fs::read(input).unwrap(),
            kept,
            "{cmd} changed its input"
        );
    }
    assert_eq!(std::fs::read(&graph).unwrap(), before);
    assert!(
        !dir.join("k.o").exists(),
        "link wrote its object beside a refused image"
    );
}

#[test]
fn explain_shows_groups_reasons_and_kernels() {
    let o = dvm()
        .arg("explain")
        .arg(example())
        .args(["--bind", "S=128", "--cores", "2"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    // The softmax and its scaling prologue form one reduce group; the two
    // matmuls stay apart, with the reason.
    assert!(
        text.contains(
            "reduce(axis 1)   [S, S]           scaled, p.max, p.sub, p.exp, p.sum, p.recip, p"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "scores / scaled [neighbours]: a matmul and a reduction cannot share a kernel"
        ),
        "{text}"
    );
    assert!(text.contains("total: 3 kernel(s)"), "{text}");
    assert!(
        text.contains("unfused: 9 kernel(s) in 9 launch(es)"),
        "{text}"
    );
    assert!(text.contains("bytes moved"), "{text}");

    let o = dvm()
        .arg("explain")
        .arg(example())
        .args(["--bind", "S=128", "--no-fuse"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("total: 9 kernel(s) in 9 launch(es)"));

    // An unbound or out-of-range symbol is a user error naming it.
    for args in [&[][..], &["--bind", "S=0"]] {
        let o = dvm()
            .arg("explain")
            .arg(example())
            .args(args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains('S'));
    }
}

#[test]
fn run_fused_and_unfused_give_the_same_outputs() {
    let dir_tmp = scratch("nofuse");
    let dir = dir_tmp.path();
    let inputs = write_inputs(dir, 29);
    let (a, b) = (dir.join("fused"), dir.join("unfused"));
    let o = run_graph(dir, &inputs, "cpu", &a);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut c = dvm();
    c.arg("run").arg(example());
    for i in &inputs {
        c.arg("--input").arg(i);
    }
    let o = c
        .args(["--no-fuse", "--output-dir"])
        .arg(&b)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let x = npy::read(&a.join("o.npy")).unwrap();
    let y = npy::read(&b.join("o.npy")).unwrap();
    assert!(x.allclose(&y, 1e-5, 1e-6).unwrap());
}

#[test]
fn qemu_device_needs_a_real_firmware() {
    let dir_tmp = scratch("qemu");
    let dir = dir_tmp.path();
    let inputs = write_inputs(dir, 5);
    let out = dir.join("out");
    // No --firmware (and no DVM_FIRMWARE).
    let mut c = dvm();
    c.env_remove("DVM_FIRMWARE").arg("run").arg(example());
    for i in &inputs {
        c.arg("--input").arg(i);
    }
    c.args(["--device", "qemu", "--output-dir"]).arg(&out);
    assert_user_error(&c.output().unwrap(), "--firmware", &out);
    // A file that is not a dvm firmware.
    let mut c = dvm();
    c.env_remove("DVM_FIRMWARE").arg("run").arg(example());
    for i in &inputs {
        c.arg("--input").arg(i);
    }
    c.args(["--device", "qemu", "--firmware"])
        .arg(example())
        .arg("--output-dir")
        .arg(&out);
    assert_user_error(&c.output().unwrap(), "not an ELF", &out);
}

#[test]
fn explain_the_demo_encoder_block() {
    // examples/encoder.json is the demo's encoder block (default sizes).
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/encoder.json");
    let file = dvm_graph::Graph::from_json_file(&path).unwrap();
    let built =
        dvm_graph::models::encoder_block(&dvm_graph::models::EncoderConfig::default()).unwrap();
    assert_eq!(
        file.to_json(),
        built.to_json(),
        "examples/encoder.json is stale"
    );
    let o = dvm()
        .arg("explain")
        .arg(&path)
        .args(["--bind", "S=128", "--cores", "2"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    // Softmax with its scaling, both layernorms with their residual adds,
    // the MLP's matmul with bias and GELU, q/k/v stacked.
    for want in [
        "reduce(axis 2)   [4, S, S]        muls_23, softmax_24.max",
        "reduce(axis 1)   [S, 256]         add_29, layer_norm_30.mean_sum",
        "reduce(axis 1)   [S, 256]         add_35, add_36, layer_norm_37.mean_sum",
        "matmul           [S, 1024]        matmul_31, add_32, gelu_tanh_33",
        "stack 0: parallel launch of g0 g1 g2",
        "total: 11 kernel(s)",
        "unfused: 43 kernel(s)",
    ] {
        assert!(text.contains(want), "missing `{want}` in\n{text}");
    }
}

/// `dvm verify` names a kernel whose tiles all store the same box: valid,
/// but a multi-core runtime keeps it on one core.
#[test]
fn verify_names_kernels_that_run_on_one_core() {
    let dir_tmp = scratch("one_core");
    let dir = dir_tmp.path();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/same_box.s");
    let m = dir.join("same_box.dvmb");
    assert!(dvm()
        .arg("asm")
        .arg(&src)
        .arg("-o")
        .arg(&m)
        .status()
        .unwrap()
        .success());
    let v = dvm().arg("verify").arg(&m).output().unwrap();
    assert!(v.status.success());
    let out = String::from_utf8_lossy(&v.stdout);
    assert!(
        out.contains(
            "kernel 0 \"same_box\": runs on one core (body 0: tiles of one access to parameter 1"
        ),
        "{out}"
    );
}

/// `--cores` takes 1 to 1024 on every subcommand; 0 and huge counts are
/// refused while parsing (exit 2), before any thread is spawned.
#[test]
fn cores_out_of_range_are_refused() {
    let dir_tmp = scratch("cores");
    let dir = dir_tmp.path();
    let out = dir.join("out");
    for cores in ["0", "1025", "18446744073709551615"] {
        let runs = [
            dvm()
                .arg("explain")
                .arg(example())
                .args(["--bind", "S=8", "--cores", cores])
                .output()
                .unwrap(),
            dvm()
                .arg("run")
                .arg(example())
                .args(["--cores", cores, "--output-dir"])
                .arg(&out)
                .output()
                .unwrap(),
            dvm().args(["demo", "--cores", cores]).output().unwrap(),
        ];
        for o in &runs {
            assert_user_error(o, "--cores", &out);
            assert!(String::from_utf8_lossy(&o.stderr).contains("1..=1024"));
        }
    }
    assert!(!out.exists());
}

/// A graph with two outputs, `a` and `b`, of `x: [S, 4]`.
fn two_outputs(dir: &Path) -> (PathBuf, String) {
    let g = dir.join("two.json");
    std::fs::write(
        &g,
        r#"{"inputs":[{"name":"x","dtype":"f32","shape":["S",4]}],
            "nodes":[{"name":"a","op":"neg","inputs":["x"]},
                     {"name":"b","op":"abs","inputs":["x"]}],
            "outputs":["a","b"]}"#,
    )
    .unwrap();
    let x = dir.join("x.npy");
    npy::write(&x, &Tensor::from_f32(&[2, 4], &data(8, 1)).unwrap()).unwrap();
    (g, format!("x={}", x.display()))
}

fn run_two(g: &Path, input: &str, out: &Path) -> Command {
    let mut c = dvm();
    c.arg("run")
        .arg(g)
        .args(["--input", input, "--output-dir"])
        .arg(out);
    c
}

/// Names of the files in `dir`.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `run` writes its outputs together: when `b.npy` cannot be written (it
/// is a directory), `a.npy` is not written either.
#[test]
fn run_writes_all_outputs_or_none() {
    let dir_tmp = scratch("two");
    let dir = dir_tmp.path();
    let (g, x) = two_outputs(dir);
    let out = dir.join("out");
    std::fs::create_dir_all(out.join("b.npy")).unwrap();
    let o = run_two(&g, &x, &out).output().unwrap();
    assert_user_error(&o, "b.npy", &out);
    assert!(String::from_utf8_lossy(&o.stderr).contains("is a directory"));
    assert_eq!(listing(&out), ["b.npy"]);
    // The same the other way round.
    let out2 = dir.join("out2");
    std::fs::create_dir_all(out2.join("a.npy")).unwrap();
    let o = run_two(&g, &x, &out2).output().unwrap();
    assert_user_error(&o, "a.npy", &out2);
    assert_eq!(listing(&out2), ["a.npy"]);
    // And both written when nothing is in the way.
    let ok = dir.join("ok");
    let o = run_two(&g, &x, &ok).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(listing(&ok), ["a.npy", "b.npy"]);
}

/// An `--output-dir` that is a regular file is named as not a directory.
#[test]
fn output_dir_that_is_a_file_is_not_a_directory() {
    let dir_tmp = scratch("odfile");
    let dir = dir_tmp.path();
    let (g, x) = two_outputs(dir);
    let file = dir.join("afile");
    std::fs::write(&file, b"keep").unwrap();
    let o = run_two(&g, &x, &file).output().unwrap();
    assert_user_error(&o, "not a directory", dir);
    assert!(String::from_utf8_lossy(&o.stderr).contains("afile"));
    assert_eq!(std::fs::read(&file).unwrap(), b"keep");
}

/// When `run` made the output directory and then cannot write into it (a
/// file size limit of 0), it removes the directories it made, and only
/// those.
#[test]
fn run_removes_the_output_directory_it_made() {
    let dir_tmp = scratch("made");
    let dir = dir_tmp.path();
    let (g, x) = two_outputs(dir);
    let out = dir.join("new").join("deeper");
    let cmd = run_two(&g, &x, &out);
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| format!("'{}'", a.to_string_lossy()))
        .collect();
    // SIGXFSZ ignored, so the write fails with EFBIG instead of killing.
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -f 0 && trap '' XFSZ && exec '{}' {}",
            env!("CARGO_BIN_EXE_dvm"),
            args.join(" ")
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot write"), "{err}");
    assert!(!dir.join("new").exists(), "the output directory was left");
    assert!(dir.join("two.json").exists());
}

/// A symbolic link to a regular file stays a link (its target is
/// replaced); a FIFO is written into, not replaced; a dangling link is
/// refused.
#[test]
fn outputs_through_links_and_fifos() {
    use std::os::unix::fs::FileTypeExt;
    let dir_tmp = scratch("links");
    let dir = dir_tmp.path();
    let compile = |out: &Path| {
        dvm()
            .arg("compile")
            .arg(example())
            .args(["--bind", "S=8", "-o"])
            .arg(out)
            .output()
            .unwrap()
    };
    let plain = dir.join("plain.dvmb");
    assert!(compile(&plain).status.success());
    let module = std::fs::read(&plain).unwrap();

    let target = dir.join("target.dvmb");
    std::fs::write(&target, b"old").unwrap();
    let link = dir.join("link.dvmb");
    std::os::unix::fs::symlink("target.dvmb", &link).unwrap();
    let o = compile(&link);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), module);

    let dangling = dir.join("dangling.dvmb");
    std::os::unix::fs::symlink("missing.dvmb", &dangling).unwrap();
    let o = compile(&dangling);
    assert_user_error(&o, "dangling.dvmb", dir);
    assert!(!dir.join("missing.dvmb").exists());

    let fifo = dir.join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("mkfifo unavailable: FIFO case skipped");
        return;
    }
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let o = compile(&fifo);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Checked before joining: a FIFO replaced by a file leaves the reader
    // blocked for good.
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(reader.join().unwrap(), module);
}

/// `--bind` of one symbol twice names it (exit 2), in `run` and `explain`.
#[test]
fn a_symbol_bound_twice_is_named() {
    let dir_tmp = scratch("twice");
    let dir = dir_tmp.path();
    let inputs = write_inputs(dir, 8);
    let out = dir.join("out");
    let mut c = dvm();
    c.arg("run").arg(example());
    for i in &inputs {
        c.arg("--input").arg(i);
    }
    let o = c
        .args(["--bind", "S=8", "--bind", "S=9", "--output-dir"])
        .arg(&out)
        .output()
        .unwrap();
    assert_user_error(&o, "`S` is bound twice", &out);
    let o = dvm()
        .arg("explain")
        .arg(example())
        .args(["--bind", "S=8", "--bind", "S=8"])
        .output()
        .unwrap();
    assert_user_error(&o, "`S` is bound twice", &out);
}

/// A graph beyond the instruction set's limits is the user's error (exit
/// 2) in `run`, `explain` and `compile` alike.
#[test]
fn graph_beyond_the_limits_is_a_user_error_everywhere() {
    let dir_tmp = scratch("limits");
    let dir = dir_tmp.path();
    let g = dir.join("big.json");
    std::fs::write(
        &g,
        r#"{"inputs":[{"name":"x","dtype":"f32","shape":[1]}],
            "nodes":[{"name":"y","op":"expand","inputs":["x"],"shape":[1073741824,16]}],
            "outputs":["y"]}"#,
    )
    .unwrap();
    let x = dir.join("x.npy");
    npy::write(&x, &Tensor::from_f32(&[1], &[1.0]).unwrap()).unwrap();
    let out = dir.join("out");
    let run = dvm()
        .arg("run")
        .arg(&g)
        .arg("--input")
        .arg(format!("x={}", x.display()))
        .arg("--output-dir")
        .arg(&out)
        .output()
        .unwrap();
    let explain = dvm().arg("explain").arg(&g).output().unwrap();
    let m = dir.join("big.dvmb");
    let compile = dvm()
        .arg("compile")
        .arg(&g)
        .arg("-o")
        .arg(&m)
        .output()
        .unwrap();
    for o in [&run, &explain, &compile] {
        assert_user_error(o, "exceeds the instruction set's limits", &out);
    }
    assert!(!out.exists() && !m.exists());
}

/// Inputs that never end (`/dev/zero`) are refused after a bounded read,
/// naming the file, by every command that reads a file: they were read
/// until memory ran out.
#[cfg(target_os = "linux")]
#[test]
fn endless_inputs_are_refused() {
    let dir_tmp = scratch("endless");
    let dir = dir_tmp.path();
    let out = dir.join("out");
    let m = dir.join("m.dvmb");
    let zero = "/dev/zero";
    for args in [
        &["verify", zero][..],
        &["disasm", zero],
        &["objdump", zero],
        &["explain", zero],
        &["asm", zero, "-o", m.to_str().unwrap()],
        &["link", zero, "-o", m.to_str().unwrap()],
    ] {
        let o = dvm().args(args).output().unwrap();
        assert_user_error(
            &o,
            "/dev/zero: the file is larger than 268435456 bytes",
            &out,
        );
        assert!(!m.exists(), "{args:?}");
    }
    let mut inputs = write_inputs(dir, 5);
    inputs[0] = format!("q={zero}");
    let o = run_graph(dir, &inputs, "cpu", &out);
    assert_user_error(&o, "--input `q`: /dev/zero: not a valid .npy file", &out);
    assert!(!out.exists());
}

/// Bindings too large for the executor are the user's errors (exit 2)
/// with a message saying why, found before any code is written; a value
/// beyond 64 bits is named as such.
#[test]
fn shapes_too_large_for_the_executor_are_user_errors() {
    let dir_tmp = scratch("too-large");
    let dir = dir_tmp.path();
    let out = dir.join("out");
    let explain = |graph: &str, bind: &str| {
        let g = dir.join("g.json");
        std::fs::write(&g, graph).unwrap();
        dvm()
            .arg("explain")
            .arg(&g)
            .args(["--bind", bind])
            .output()
            .unwrap()
    };
    // A contraction of 10^8: its chunks alone overflow a program.
    let start = std::time::Instant::now();
    let o = explain(
        r#"{"inputs":[{"name":"x","dtype":"f32","shape":["S","S"]}],
            "nodes":[{"name":"y","op":"matmul","inputs":["x","x"]}],"outputs":["y"]}"#,
        "S=100000000",
    );
    assert_user_error(&o, "a contraction of length 100000000 (", &out);
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    // More bodies than a program holds: the reason, not a Debug dump.
    let o = explain(
        r#"{"inputs":[{"name":"x","dtype":"f32","shape":["S",1,"S",1,64]},
                      {"name":"y","dtype":"f32","shape":[1,"S",1,"S",64]}],
            "nodes":[{"name":"z","op":"add","inputs":["x","y"]}],"outputs":["z"]}"#,
        "S=500",
    );
    assert_user_error(
        &o,
        "kernel does not fit the executor: the kernel has 500 bodies, the program holds at most",
        &out,
    );
    // A launch over the device's instruction budget (`DeviceLimits`).
    let o = explain(
        r#"{"inputs":[{"name":"x","dtype":"f32","shape":["S",1,"S",1,64]},
                      {"name":"y","dtype":"f32","shape":[1,"S",1,"S",64]}],
            "nodes":[{"name":"z","op":"add","inputs":["x","y"]}],"outputs":["z"]}"#,
        "S=1000",
    );
    assert_user_error(
        &o,
        "kernel exceeds the device's work limits: a launch would execute 4302000000 instructions",
        &out,
    );
    let o = explain(
        r#"{"inputs":[{"name":"x","dtype":"f32","shape":["S"]}],"outputs":["x"]}"#,
        "S=99999999999999999999",
    );
    assert_user_error(
        &o,
        "--bind `S=99999999999999999999`: `99999999999999999999` is beyond a 64-bit integer",
        &out,
    );
    let mut inputs = write_inputs(dir, 5);
    inputs[0] = "q=".into();
    let o = run_graph(dir, &inputs, "cpu", &out);
    assert_user_error(&o, "--input `q=`: expected NAME=FILE.npy", &out);
}

/// Demo lengths out of range are refused before anything is allocated:
/// `--lens 100000000` asked for 100 GB of inputs and aborted, and
/// `--op-lens 0` read as a tile that does not fit the UB.
#[test]
fn demo_lengths_out_of_range_are_refused() {
    for (args, needle) in [
        (
            &["--lens", "100000000", "--op-lens", "17"][..],
            "sequence length 100000000 is outside the encoder's range 1..=8192",
        ),
        (
            &["--lens", "1", "--op-lens", "0"],
            "sequence length 0 is outside the single-operator table's range 1..=16384",
        ),
        (
            &["--lens", "1", "--op-lens", "100000000"],
            "sequence length 100000000 is outside the single-operator table's range",
        ),
    ] {
        let o = dvm()
            .arg("demo")
            .args(args)
            .args(["--cores", "1"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// A reader that goes away (`dvm demo | head -1`) ends `dvm` quietly, as
/// it ends other Unix tools: no panic, no backtrace.
#[cfg(target_os = "linux")]
#[test]
fn a_closed_output_pipe_ends_quietly() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let mut child = dvm()
        .arg("demo")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("dvm demo"), "{first}");
    // The reader is dropped: the demo's next line meets a closed pipe.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(out.status.code(), Some(101), "{stderr}");
}

/// A full standard output or error is an error of the command (exit code
/// 1 or the command's own), named on standard error when it can be, never
/// a panic (exit code 101).
#[cfg(target_os = "linux")]
#[test]
fn a_full_output_stream_is_an_error_not_a_panic() {
    let full = || std::fs::OpenOptions::new().write(true).open("/dev/full");
    let Ok(out) = full() else {
        return; // no /dev/full in this sandbox
    };
    let explain = dvm()
        .args(["explain", example().to_str().unwrap(), "--bind", "S=17"])
        .stdout(out)
        .output()
        .unwrap();
    assert_eq!(explain.status.code(), Some(1), "{explain:?}");
    let err = String::from_utf8_lossy(&explain.stderr);
    assert!(err.contains("cannot write to standard output"), "{err}");
    // The error message itself cannot be written: the exit code says it.
    let verify = dvm()
        .args(["verify", "/dev/null"])
        .stderr(full().unwrap())
        .output()
        .unwrap();
    assert_eq!(verify.status.code(), Some(2), "{verify:?}");
}

/// A command whose report of the files it wrote cannot be printed fails,
/// and leaves none of those files (nor a directory it made) behind.
#[cfg(target_os = "linux")]
#[test]
fn an_unprintable_report_leaves_no_output_files() {
    let full = || std::fs::OpenOptions::new().write(true).open("/dev/full");
    if full().is_err() {
        return; // no /dev/full in this sandbox
    }
    let tmp = scratch("full-report");
    let module = tmp.path().join("m.dvmb");
    let compile = dvm()
        .arg("compile")
        .arg(example())
        .args(["--bind", "S=17", "-o"])
        .arg(&module)
        .stdout(full().unwrap())
        .output()
        .unwrap();
    assert_eq!(compile.status.code(), Some(1), "{compile:?}");
    assert!(!module.exists(), "compile left {}", module.display());
    let layout = tmp.path().join("layout");
    let memx = dvm()
        .args(["memory-x", "--cores", "2", "-o"])
        .arg(&layout)
        .stdout(full().unwrap())
        .output()
        .unwrap();
    assert_eq!(memx.status.code(), Some(1), "{memx:?}");
    assert!(!layout.exists(), "memory-x left {}", layout.display());
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
}
