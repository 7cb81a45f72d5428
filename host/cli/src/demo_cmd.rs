//! `dvm demo`: the encoder block over a sweep of sequence lengths, then
//! single operators, on the CPU device, checked against f64.

use dvm_graph::models::EncoderConfig;
use dvm_runtime::{demo, Runtime};

use crate::say::{out, outln};
use crate::{all_cores, fuse_options, Failure};

/// Runs `dvm demo` at `lens` (the encoder sweep) and `op_lens` (the
/// single-operator table), each defaulting when empty; fails (exit 1)
/// when a result exceeds its tolerance.
pub fn cmd_demo(
    lens: Vec<u64>,
    op_lens: Vec<u64>,
    cores: Option<usize>,
    no_fuse: bool,
) -> Result<(), Failure> {
    let lens = if lens.is_empty() {
        vec![1, 17, 64, 128, 257, 512]
    } else {
        lens
    };
    let op_lens = if op_lens.is_empty() {
        vec![17, 64, 128, 384, 1000, 2048, 4096]
    } else {
        op_lens
    };
    let rt = Runtime::new(cores.unwrap_or_else(all_cores), 1024);
    let cfg = EncoderConfig::default();
    outln!(
        "dvm demo 1/2: transformer encoder block (hidden {}, {} heads, ffn {}), symbolic length S, {} core(s), fusion {}",
        cfg.hidden,
        cfg.heads,
        cfg.ffn,
        rt.pool().cores(),
        if no_fuse { "off" } else { "on" }
    )?;
    let enc = demo::run_encoder_with(&cfg, &lens, &rt, &fuse_options(no_fuse))
        .map_err(|e| Failure(e, 1))?;
    out!("{}", demo::encoder_table(&enc))?;
    outln!(
        "\ndvm demo 2/2: single operators at hidden {}, one kernel per shape",
        demo::HIDDEN
    )?;
    let rows = demo::run(&op_lens, rt.pool()).map_err(|e| Failure(e, 1))?;
    out!("{}", demo::table(&rows))?;
    if rows.iter().any(|r| r.max_err > r.tol) || enc.iter().any(|r| r.max_err > demo::ENCODER_TOL) {
        return Err(Failure("some results exceed the tolerance".into(), 1));
    }
    Ok(())
}
