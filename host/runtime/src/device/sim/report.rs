//! The simulator's text report: per launch its cycles and time, each
//! pipe's busy cycles and utilisation, bytes moved and bandwidth, the
//! critical pipe, stalls by cause and its tiles; then the totals.

use std::fmt::Write as _;

use dvm_device::sim::{SimStats, PIPES};

use super::{LaunchReport, SimSpec};

/// `bytes` with a binary unit.
fn bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// `s` seconds with a unit.
fn time(s: f64) -> String {
    if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.2} µs", s * 1e6)
    }
}

/// One launch's lines.
fn launch(out: &mut String, spec: &SimSpec, i: usize, r: &LaunchReport) {
    let s = &r.stats;
    let secs = spec.spec.seconds(s.cycles);
    let _ = writeln!(
        out,
        "launch {i} `{}` ({:?}, tile {}x{}, {} tiles on {} core(s)): {} cycles, {}",
        r.kernel,
        r.kind,
        r.tile.0,
        r.tile.1,
        s.tiles,
        s.cores,
        s.cycles,
        time(secs)
    );
    pipes(out, s);
    let moved = s.bytes_loaded + s.bytes_stored;
    let _ = writeln!(
        out,
        "  bytes: {} loaded, {} stored, {:.1} GB/s",
        bytes(s.bytes_loaded),
        bytes(s.bytes_stored),
        if secs > 0.0 {
            moved as f64 / secs / 1e9
        } else {
            0.0
        }
    );
    let _ = writeln!(
        out,
        "  stalls (cycles over all cores): flag wait {}, bandwidth {}, barrier {}, full queue {}",
        s.stalls.flag, s.stalls.bandwidth, s.stalls.barrier, s.stalls.queue
    );
    let _ = writeln!(
        out,
        "  tiles: {:.0} core-cycles each on average, one tile's span {}..{} cycles; {} instructions",
        per_tile(s),
        s.tile_cycles.0,
        s.tile_cycles.1,
        s.instrs
    );
}

/// Mean cycles of a tile on its core: the launch's core-cycles over tiles.
fn per_tile(s: &SimStats) -> f64 {
    s.cycles as f64 * s.cores as f64 / s.tiles.max(1) as f64
}

/// The per-pipe line and the critical pipe.
fn pipes(out: &mut String, s: &SimStats) {
    let mut line = String::from("  pipes (busy cycles, utilisation):");
    for p in PIPES {
        let _ = write!(
            line,
            " {} {} {:.0}%,",
            p.name(),
            s.busy[p as usize],
            s.utilisation(p) * 100.0
        );
    }
    line.pop();
    let _ = writeln!(out, "{line}");
    let c = s.critical_pipe();
    let _ = writeln!(
        out,
        "  critical pipe: {} ({:.0}% busy)",
        c.name(),
        s.utilisation(c) * 100.0
    );
}

/// The report of `reports`, simulated on `spec`.
pub fn text(spec: &SimSpec, reports: &[LaunchReport]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "simulated on {}", spec.summary());
    let mut total = 0u64;
    let mut instrs = 0u64;
    let mut moved = 0u64;
    for (i, r) in reports.iter().enumerate() {
        launch(&mut out, spec, i, r);
        total += r.stats.cycles;
        instrs += r.stats.instrs;
        moved += r.stats.bytes_loaded + r.stats.bytes_stored;
    }
    let _ = writeln!(
        out,
        "total: {} launch(es), {} cycles, {}, {} moved, {} instructions",
        reports.len(),
        total,
        time(spec.spec.seconds(total)),
        bytes(moved),
        instrs
    );
    out
}
