//! Every simulated instruction as a slice of one track per core and pipe,
//! written as a Chrome trace ([`chrome_trace`]: Perfetto and
//! `chrome://tracing` load it) or as a self-contained SVG picture
//! ([`svg`]).

use std::fmt::Write as _;

use dvm_device::sim::{InstrEvent, SimSink, Stalls, TileEvent, PIPES};
use dvm_isa::{Instr, Pipe, VerifiedKernel};
use serde_json::{json, Value};

use super::{SimSpec, TIMELINE_CAP};

/// One instruction on its pipe.
#[derive(Clone, Copy, Debug)]
pub struct Slice {
    /// Launch index in the timeline.
    pub launch: u32,
    /// Core.
    pub core: u32,
    /// Pipe.
    pub pipe: Pipe,
    /// Body.
    pub body: u32,
    /// Tile in the body.
    pub tile: u32,
    /// Instruction index in the body.
    pub index: u32,
    /// First cycle on its pipe (from the timeline's start).
    pub start: u64,
    /// Cycle its pipe was free again.
    pub end: u64,
    /// Bytes moved to or from global memory.
    pub bytes: u64,
    /// What delayed it.
    pub stall: Stalls,
}

/// One tile's span on its core.
#[derive(Clone, Copy, Debug)]
pub struct TileSpan {
    /// Launch index in the timeline.
    pub launch: u32,
    /// Core.
    pub core: u32,
    /// Body.
    pub body: u32,
    /// Tile in the body.
    pub tile: u32,
    /// Its first instruction's start (from the timeline's start).
    pub start: u64,
    /// Its last instruction's completion.
    pub end: u64,
}

/// One launch's span and its instructions' text.
#[derive(Clone, Debug)]
pub struct LaunchSpan {
    /// Kernel name.
    pub name: String,
    /// First cycle (launches follow each other).
    pub start: u64,
    /// Cycles.
    pub cycles: u64,
    /// Each body's instructions as assembly text, by index.
    pub texts: Vec<Vec<String>>,
}

/// Launches and their instructions' slices, in simulated time.
#[derive(Clone, Debug)]
pub struct Timeline {
    /// The modelled device.
    pub spec: SimSpec,
    /// Launches in order.
    pub launches: Vec<LaunchSpan>,
    /// Slices, at most [`TIMELINE_CAP`].
    pub slices: Vec<Slice>,
    /// Tiles, at most [`TIMELINE_CAP`].
    pub tiles: Vec<TileSpan>,
    /// Slices not kept past the cap.
    pub dropped: u64,
    now: u64,
}

/// The sink recording one launch's slices ([`Timeline::begin_launch`]).
pub struct Recorder {
    slices: Vec<Slice>,
    tiles: Vec<TileSpan>,
    dropped: u64,
    launch: u32,
    offset: u64,
}

impl SimSink for Recorder {
    fn instr(&mut self, e: &InstrEvent<'_>) {
        if self.slices.len() >= TIMELINE_CAP {
            self.dropped += 1;
            return;
        }
        self.slices.push(Slice {
            launch: self.launch,
            core: e.core,
            pipe: e.instr.pipe,
            body: e.body,
            tile: e.tile,
            index: e.index,
            start: self.offset + e.start,
            end: self.offset + e.end,
            bytes: e.bytes,
            stall: e.stall,
        });
    }

    fn tile(&mut self, e: &TileEvent) {
        if self.tiles.len() < TIMELINE_CAP {
            self.tiles.push(TileSpan {
                launch: self.launch,
                core: e.core,
                body: e.body,
                tile: e.tile,
                start: self.offset + e.start,
                end: self.offset + e.end,
            });
        }
    }
}

impl Timeline {
    /// An empty timeline of `spec`.
    pub fn new(spec: SimSpec) -> Timeline {
        Timeline {
            spec,
            launches: Vec::new(),
            slices: Vec::new(),
            tiles: Vec::new(),
            dropped: 0,
            now: 0,
        }
    }

    /// Starts a launch of `kernel` named `name` after the ones before.
    pub fn begin_launch(&mut self, name: &str, kernel: &VerifiedKernel<'_>) -> Recorder {
        let texts = (0..kernel.body_count())
            .map(|b| {
                kernel
                    .instrs(b)
                    .filter(|(_, _, i)| !matches!(i, Instr::End {}))
                    .map(|(_, head, i)| dvm_isa::asm::format_instr(&i, head.wait))
                    .collect()
            })
            .collect();
        self.launches.push(LaunchSpan {
            name: name.to_string(),
            start: self.now,
            cycles: 0,
            texts,
        });
        Recorder {
            slices: std::mem::take(&mut self.slices),
            tiles: std::mem::take(&mut self.tiles),
            dropped: self.dropped,
            launch: self.launches.len() as u32 - 1,
            offset: self.now,
        }
    }

    /// Ends the launch `rec` recorded, `cycles` long.
    pub fn end_launch(&mut self, rec: Recorder, cycles: u64) {
        self.slices = rec.slices;
        self.tiles = rec.tiles;
        self.dropped = rec.dropped;
        if let Some(l) = self.launches.last_mut() {
            l.cycles = cycles;
        }
        self.now += cycles;
    }

    /// Cycles of all launches.
    pub fn cycles(&self) -> u64 {
        self.now
    }

    /// Cores with at least one slice, ascending.
    fn cores(&self) -> Vec<u32> {
        let mut c: Vec<u32> = self.slices.iter().map(|s| s.core).collect();
        c.sort_unstable();
        c.dedup();
        c
    }

    fn text(&self, s: &Slice) -> &str {
        self.launches
            .get(s.launch as usize)
            .and_then(|l| l.texts.get(s.body as usize))
            .and_then(|t| t.get(s.index as usize))
            .map_or("", String::as_str)
    }
}

/// The thread id of each core's `tiles` track (after the pipes).
const TILES_TID: u32 = 5;

/// Microseconds of `cycles` on `spec`.
fn micros(tl: &Timeline, cycles: u64) -> f64 {
    tl.spec.spec.seconds(cycles) * 1e6
}

/// The timeline as a Chrome trace (JSON object format): process `core N`
/// per core, one thread per pipe, each instruction an `X` event named by
/// its mnemonic with its assembly text, kernel, tile, bytes and stalls as
/// arguments, and a `tiles` thread with one event per tile (its first
/// start to its last completion); a `launches` process holds one event
/// per launch.
pub fn chrome_trace(tl: &Timeline) -> String {
    let mut events: Vec<Value> = Vec::new();
    let launch_pid = 1_000_000u32;
    for core in tl.cores() {
        events.push(
            json!({"ph": "M", "name": "process_name", "pid": core, "tid": 0,
            "args": {"name": format!("core {core}")}}),
        );
        events.push(
            json!({"ph": "M", "name": "process_sort_index", "pid": core, "tid": 0,
            "args": {"sort_index": core}}),
        );
        for p in PIPES {
            events.push(
                json!({"ph": "M", "name": "thread_name", "pid": core, "tid": p as u32,
                "args": {"name": p.name()}}),
            );
            events.push(
                json!({"ph": "M", "name": "thread_sort_index", "pid": core, "tid": p as u32,
                "args": {"sort_index": p as u32}}),
            );
        }
        events.push(
            json!({"ph": "M", "name": "thread_name", "pid": core, "tid": TILES_TID,
            "args": {"name": "tiles"}}),
        );
    }
    for t in &tl.tiles {
        let kernel = tl
            .launches
            .get(t.launch as usize)
            .map_or("", |l| l.name.as_str());
        let cycles = t.end.saturating_sub(t.start);
        events.push(
            json!({"ph": "X", "name": format!("tile {}", t.tile), "cat": "tile",
            "pid": t.core, "tid": TILES_TID,
            "ts": micros(tl, t.start), "dur": micros(tl, cycles),
            "args": {"kernel": kernel, "body": t.body, "tile": t.tile, "cycles": cycles}}),
        );
    }
    events.push(
        json!({"ph": "M", "name": "process_name", "pid": launch_pid, "tid": 0,
        "args": {"name": "launches"}}),
    );
    for l in &tl.launches {
        events.push(
            json!({"ph": "X", "name": l.name, "cat": "launch", "pid": launch_pid, "tid": 0,
            "ts": micros(tl, l.start), "dur": micros(tl, l.cycles),
            "args": {"cycles": l.cycles}}),
        );
    }
    for s in &tl.slices {
        let text = tl.text(s);
        let name = text.split_whitespace().next().unwrap_or("?");
        let kernel = tl
            .launches
            .get(s.launch as usize)
            .map_or("", |l| l.name.as_str());
        events.push(json!({
            "ph": "X", "name": name, "cat": s.pipe.name(), "pid": s.core, "tid": s.pipe as u32,
            "ts": micros(tl, s.start), "dur": micros(tl, s.end - s.start),
            "args": {
                "instr": text, "kernel": kernel, "body": s.body, "tile": s.tile,
                "cycles": s.end - s.start, "bytes": s.bytes,
                "stall_flag": s.stall.flag, "stall_bandwidth": s.stall.bandwidth,
                "stall_barrier": s.stall.barrier, "stall_queue": s.stall.queue,
            }
        }));
    }
    let v = json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "spec": tl.spec.summary(),
            "cycles": tl.cycles(),
            "dropped_slices": tl.dropped,
        }
    });
    serde_json::to_string(&v).unwrap_or_default()
}

/// Fill colour of each pipe.
fn colour(p: Pipe) -> &'static str {
    match p {
        Pipe::Load => "#4e79a7",
        Pipe::Vector => "#59a14f",
        Pipe::Cube => "#e15759",
        Pipe::Store => "#f28e2b",
        Pipe::Control => "#9c9c9c",
    }
}

/// `s` with XML's special characters escaped.
fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Most cores drawn in the picture.
pub const SVG_CORES: usize = 16;

/// The timeline as a self-contained SVG picture: one row per core and
/// pipe (the first [`SVG_CORES`] cores), time to the right, a band per
/// launch on top; slices closer than a pixel merge, and hovering a bar
/// shows what it holds.
pub fn svg(tl: &Timeline) -> String {
    let (left, width, row, top) = (120.0, 1400.0, 14.0, 70.0);
    let cores: Vec<u32> = tl.cores().into_iter().take(SVG_CORES).collect();
    let total = tl.cycles().max(1) as f64;
    let x = |c: u64| left + c as f64 / total * width;
    let rows = cores.len() * PIPES.len();
    let height = top + rows as f64 * row + 40.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" font-family="monospace" font-size="11">"#,
        left + width + 20.0
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="10" y="16" font-size="13">{} — {} launch(es), {} cycles, {:.2} µs{}</text>"#,
        xml(&tl.spec.summary()),
        tl.launches.len(),
        tl.cycles(),
        micros(tl, tl.cycles()),
        if tl.dropped > 0 {
            format!(
                " ({} instructions past the first {TIMELINE_CAP} not drawn)",
                tl.dropped
            )
        } else {
            String::new()
        }
    );
    // Launch bands.
    for (i, l) in tl.launches.iter().enumerate() {
        let (x0, x1) = (x(l.start), x(l.start + l.cycles));
        let fill = if i % 2 == 0 { "#eeeeee" } else { "#dddddd" };
        let _ = writeln!(
            out,
            r#"<rect x="{x0:.2}" y="26" width="{:.2}" height="{}" fill="{fill}"><title>{} — {} cycles</title></rect>"#,
            (x1 - x0).max(0.5),
            height - 26.0 - 30.0,
            xml(&l.name),
            l.cycles
        );
        if x1 - x0 > 40.0 {
            let _ = writeln!(
                out,
                r#"<text x="{:.2}" y="38">{}</text>"#,
                x0 + 2.0,
                xml(&l
                    .name
                    .chars()
                    .take(((x1 - x0) / 7.0) as usize)
                    .collect::<String>())
            );
        }
    }
    // Rows.
    let mut merged: Vec<Vec<(f64, f64, u32)>> = vec![Vec::new(); rows];
    for s in &tl.slices {
        let Some(ci) = cores.iter().position(|&c| c == s.core) else {
            continue;
        };
        let r = ci * PIPES.len() + s.pipe as usize;
        let (x0, x1) = (x(s.start), x(s.end).max(x(s.start) + 0.5));
        let bars = &mut merged[r];
        match bars.last_mut() {
            Some(last) if x0 <= last.1 + 0.5 => {
                last.1 = last.1.max(x1);
                last.2 += 1;
            }
            _ => bars.push((x0, x1, 1)),
        }
    }
    for (r, bars) in merged.iter().enumerate() {
        let (core, pipe) = (cores[r / PIPES.len()], PIPES[r % PIPES.len()]);
        let y = top + r as f64 * row;
        if r % PIPES.len() == 0 {
            let _ = writeln!(
                out,
                r##"<line x1="0" x2="{}" y1="{y}" y2="{y}" stroke="#bbbbbb"/>"##,
                left + width
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="4" y="{:.1}">core {core} {}</text>"#,
            y + row - 3.0,
            pipe.name()
        );
        for &(x0, x1, n) in bars {
            let _ = writeln!(
                out,
                r#"<rect x="{x0:.2}" y="{:.1}" width="{:.2}" height="{:.1}" fill="{}"><title>{} instruction(s)</title></rect>"#,
                y + 1.0,
                x1 - x0,
                row - 2.0,
                colour(pipe),
                n
            );
        }
    }
    // Time axis.
    let y = top + rows as f64 * row + 14.0;
    for i in 0..=10 {
        let c = (total * i as f64 / 10.0) as u64;
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{y}" text-anchor="middle">{:.2} µs</text>"#,
            x(c),
            micros(tl, c)
        );
    }
    out.push_str("</svg>\n");
    out
}
