//! Writes the seed corpora of the fuzz targets under the directory given
//! (one folder per target), from the repository at the second argument:
//! the compiler's modules for the benchmark workloads and generated graphs
//! (module targets), their disassembly (`asm`), jobs launching them
//! (`job`), the example and generated graphs as JSON (`graph`) and the
//! model zoo's `.npy` files (`npy`).
//!
//! Usage: `seeds CORPUS_DIR REPO_DIR`.

use std::path::{Path, PathBuf};

use dvm_isa::job::JobBuilder;
use dvm_isa::{verify_kernel, DeviceLimits, Module};

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let d = dir.join(target);
    std::fs::create_dir_all(&d)?;
    std::fs::write(d.join(name), bytes)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [corpus, repo] = args.as_slice() else {
        return Err("usage: seeds CORPUS_DIR REPO_DIR".into());
    };
    let modules = dvm_fuzz::seeds::compiled_modules(&[1, 17, 64]);
    for (i, m) in modules.iter().enumerate() {
        let name = format!("compiled-{i:03}");
        for t in ["parse", "verify", "execute"] {
            write(corpus, t, &name, m)?;
        }
        let parsed = Module::parse(m)?;
        if let Ok(text) = dvm_isa::asm::disassemble(&parsed) {
            write(corpus, "asm", &name, text.as_bytes())?;
        }
        let v = verify_kernel(&parsed, 0, &DeviceLimits::DEFAULT)?;
        let mut j = JobBuilder::new();
        let mi = j.module(m);
        let bufs: Vec<u32> = (0..v.param_count())
            .map(|p| j.buffer(vec![0x3c; v.required_bytes(p) as usize], p == 0))
            .collect();
        j.launch(mi, 0, &bufs, 1 + (i as u32 % 2));
        write(corpus, "job", &name, &j.finish())?;
    }
    for g in dvm_fuzz::seeds::graphs() {
        let text = g.to_json();
        let name = format!("generated-{:016x}", fnv(text.as_bytes()));
        write(corpus, "graph", &name, text.as_bytes())?;
    }
    for e in std::fs::read_dir(repo.join("examples"))? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "json") {
            let name = p
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            write(corpus, "graph", &name, &std::fs::read(&p)?)?;
        }
    }
    let mut npys = Vec::new();
    collect_npy(&repo.join("tests/models/data"), &mut npys)?;
    npys.sort();
    for p in npys
        .iter()
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() <= 64 << 10))
    {
        let name = format!("zoo-{:016x}", fnv(p.to_string_lossy().as_bytes()));
        write(corpus, "npy", &name, &std::fs::read(p)?)?;
    }
    std::fs::create_dir_all(corpus.join("mutate"))?;
    println!("seeds: {} modules, {} npy files", modules.len(), npys.len());
    Ok(())
}

fn collect_npy(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            collect_npy(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "npy") {
            out.push(p);
        }
    }
    Ok(())
}

/// A name for a seed from its bytes (FNV-1a).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}
