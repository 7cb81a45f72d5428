//! Modules for the linker tests, written as text assembly.

#![allow(dead_code)]

use dvm_isa::asm::assemble;

/// A one-body vector kernel `y = -x` over 1000 f32 in four tiles; `ub`
/// and `dims` vary it, `label` adds a debug label.
pub fn neg_kernel(name: &str, ub: u32, dims: &str, label: Option<&str>) -> String {
    let label = label.map_or(String::new(), |l| format!("    .label \"{l}\"\n"));
    format!(
        ".kernel \"{name}\" kind=vector ub={ub}
  .param \"x\" f32 in dims=[{dims}]
  .param \"y\" f32 out dims=[{dims}]
  .body grid=1,1,4
{label}    load dt=f32 pad=fill buf=0 row_dim=- col_dim=2 ub=0 pitch=256 rows=1 cols=256 row_total=1 col_total=1000 padv=0.0 base=0 step0=0 step1=0 step2=256 row_stride=0 col_stride=1
    neg dt=f32 dst=0 src=0 n=256 @wait=load
    store dt=f32 buf=1 row_dim=- col_dim=2 ub=0 pitch=256 rows=1 cols=256 row_total=1 col_total=1000 base=0 step0=0 step1=0 step2=256 row_stride=0 col_stride=1 @wait=vector
    end
.end
"
    )
}

/// A module of the given kernel texts, optionally with a `.module` line.
pub fn module(header: Option<&str>, kernels: &[String]) -> Vec<u8> {
    let mut text = header.map_or(String::new(), |h| format!("{h}\n"));
    for k in kernels {
        text.push_str(k);
    }
    assemble(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// A module of plain `neg` kernels with these names.
pub fn negs(names: &[&str]) -> Vec<u8> {
    let ks: Vec<String> = names
        .iter()
        .map(|n| neg_kernel(n, 4096, "1000", None))
        .collect();
    module(None, &ks)
}

/// A two-body sequence kernel (multi_body feature).
pub fn seq_kernel(name: &str) -> String {
    let body = "  .body grid=1,1,4
    load dt=f32 pad=fill buf=0 row_dim=- col_dim=2 ub=0 pitch=256 rows=1 cols=256 row_total=1 col_total=1000 padv=0.0 base=0 step0=0 step1=0 step2=256 row_stride=0 col_stride=1
    neg dt=f32 dst=0 src=0 n=256 @wait=load
    store dt=f32 buf=1 row_dim=- col_dim=2 ub=0 pitch=256 rows=1 cols=256 row_total=1 col_total=1000 base=0 step0=0 step1=0 step2=256 row_stride=0 col_stride=1 @wait=vector
    end
";
    let second = body.replacen("\n", "\n    .label \"second stage\"\n", 1);
    format!(
        ".kernel \"{name}\" kind=sequence ub=4096
  .param \"x\" f32 in dims=[1000]
  .param \"y\" f32 inout dims=[1000]
{body}{second}.end
"
    )
}
