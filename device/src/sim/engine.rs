//! The timing engine: a launch of a [`SimProgram`] on the cores of a
//! [`DeviceSpec`], instruction by instruction.
//!
//! Per core, a scalar unit dispatches the body's instructions in order,
//! one every [`DeviceSpec::dispatch`] cycles, into one in-order queue per
//! pipe ([`DeviceSpec::queue_depth`] deep; dispatch waits while the queue
//! is full). An instruction starts when its pipe is free and every pipe its
//! wait mask names has completed what was dispatched to it before; it
//! occupies its pipe for its cost and completes (loads and stores after
//! the global-memory latency). Loads and stores share the global-memory
//! bandwidth of all cores ([`super::channel`]). A `barrier` instruction
//! waits for all pipes of its core.
//!
//! Tiles are split across cores as the executor splits them
//! ([`crate::exec`]): one contiguous run per core of a launch's tiles
//! (parallel kernels: of their bodies' tiles concatenated; sequence
//! kernels: of each stage's, with a barrier across cores between stages);
//! a kernel whose tiles the verifier did not prove independent runs on one
//! core. Cores advance together, the one furthest behind first, so their
//! transfers meet in the channel in time order. Everything is integer
//! cycles and deterministic.

use core::fmt;

use dvm_isa::{KernelKind, Opcode, Pipe};

use super::channel::{ceil, Channel};
use super::lower::{SimInstr, SimOp, SimProgram};
use super::spec::{DeviceSpec, SpecError, MAX_QUEUE_DEPTH, MAX_SIM_CORES};
use crate::exec::block_range;

/// Pipes, in [`Pipe`] order (the four data pipes, then control).
pub const PIPES: [Pipe; 5] = [
    Pipe::Load,
    Pipe::Vector,
    Pipe::Cube,
    Pipe::Store,
    Pipe::Control,
];

/// Cycles lost, by cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stalls {
    /// Ready with its pipe free, waiting for a pipe its wait mask names.
    pub flag: u64,
    /// Transfers slowed by other cores' use of the shared bandwidth.
    pub bandwidth: u64,
    /// Waiting at a barrier (stage barrier or `barrier` instruction).
    pub barrier: u64,
    /// Dispatch held because a pipe's queue was full.
    pub queue: u64,
}

impl core::ops::AddAssign for Stalls {
    fn add_assign(&mut self, o: Stalls) {
        self.flag += o.flag;
        self.bandwidth += o.bandwidth;
        self.barrier += o.barrier;
        self.queue += o.queue;
    }
}

/// One instruction's timing.
#[derive(Clone, Copy, Debug)]
pub struct InstrEvent<'a> {
    /// Core.
    pub core: u32,
    /// Body.
    pub body: u32,
    /// Tile in the body.
    pub tile: u32,
    /// Index of the instruction in the body.
    pub index: u32,
    /// The instruction.
    pub instr: &'a SimInstr,
    /// Cycle it was dispatched to its queue.
    pub dispatch: u64,
    /// Cycle it started on its pipe.
    pub start: u64,
    /// Cycle its pipe was free again.
    pub end: u64,
    /// Cycle it completed (what waiting instructions wait for).
    pub done: u64,
    /// Bytes moved to or from global memory.
    pub bytes: u64,
    /// What delayed it.
    pub stall: Stalls,
}

/// One tile's timing on its core.
#[derive(Clone, Copy, Debug)]
pub struct TileEvent {
    /// Core.
    pub core: u32,
    /// Body.
    pub body: u32,
    /// Tile in the body.
    pub tile: u32,
    /// Cycle its first instruction started.
    pub start: u64,
    /// Cycle its last instruction completed.
    pub end: u64,
}

/// What the engine reports as it goes; every method defaults to nothing.
pub trait SimSink {
    /// An instruction was timed.
    fn instr(&mut self, _event: &InstrEvent<'_>) {}
    /// A tile's instructions were all timed.
    fn tile(&mut self, _event: &TileEvent) {}
}

/// A sink that keeps nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoSink;

impl SimSink for NoSink {}

/// A launch's totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Cycles from the launch to the last completion.
    pub cycles: u64,
    /// Cores the tiles were split over.
    pub cores: u32,
    /// Cycles each pipe was occupied, summed over cores ([`PIPES`] order).
    pub busy: [u64; 5],
    /// Stalls summed over instructions and cores.
    pub stalls: Stalls,
    /// Bytes loaded from global memory.
    pub bytes_loaded: u64,
    /// Bytes stored to global memory.
    pub bytes_stored: u64,
    /// Instructions timed (summed over tiles).
    pub instrs: u64,
    /// Tiles.
    pub tiles: u64,
    /// Multiply-accumulates of the cube pipe.
    pub macs: u64,
    /// Elements through the vector pipe.
    pub vector_elems: u64,
    /// The shortest and longest tile, first start to last completion.
    pub tile_cycles: (u64, u64),
}

impl SimStats {
    /// The pipe with the most busy cycles (control when nothing ran).
    pub fn critical_pipe(&self) -> Pipe {
        let mut best = (Pipe::Control, 0);
        for (i, &b) in self.busy[..4].iter().enumerate() {
            if b > best.1 {
                best = (PIPES[i], b);
            }
        }
        best.0
    }

    /// Pipe `p`'s busy cycles over the cycles of the cores used, 0 to 1.
    pub fn utilisation(&self, p: Pipe) -> f64 {
        let span = self.cycles as f64 * self.cores.max(1) as f64;
        if span == 0.0 {
            0.0
        } else {
            self.busy[p as usize] as f64 / span
        }
    }
}

/// Why a launch could not be simulated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimError {
    /// The spec is out of range.
    Spec(SpecError),
    /// The kernel declares more UB than a core of the spec has.
    Ub {
        /// Bytes the kernel declares.
        need: u32,
        /// Bytes per core of the spec.
        have: u32,
    },
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::Spec(e) => write!(f, "{e}"),
            SimError::Ub { need, have } => write!(
                f,
                "the kernel declares {need} bytes of UB, a core of the spec has {have}"
            ),
        }
    }
}

impl core::error::Error for SimError {}

impl From<SpecError> for SimError {
    fn from(e: SpecError) -> Self {
        SimError::Spec(e)
    }
}

/// One core's pipes and its place in its tiles.
#[derive(Clone, Copy, Debug)]
struct Core {
    /// Next cycle the scalar unit dispatches.
    dispatch: u64,
    /// Cycle each pipe is free.
    free: [u64; 5],
    /// Completion of the last instruction dispatched to each pipe.
    done: [u64; 5],
    /// Start cycles of each pipe's last instructions (a ring).
    queue: [[u64; MAX_QUEUE_DEPTH as usize]; 5],
    /// Instructions dispatched to each pipe.
    count: [u64; 5],
    /// Completion of the last instruction of any pipe (for serial specs).
    last: u64,
    busy: [u64; 5],
    stalls: Stalls,
    /// Cursor: body, tile, tiles left, instruction.
    body: usize,
    tile: u32,
    left: u64,
    pc: usize,
    tile_start: u64,
    tile_end: u64,
}

impl Core {
    const IDLE: Core = Core {
        dispatch: 0,
        free: [0; 5],
        done: [0; 5],
        queue: [[0; MAX_QUEUE_DEPTH as usize]; 5],
        count: [0; 5],
        last: 0,
        busy: [0; 5],
        stalls: Stalls {
            flag: 0,
            bandwidth: 0,
            barrier: 0,
            queue: 0,
        },
        body: 0,
        tile: 0,
        left: 0,
        pc: 0,
        tile_start: 0,
        tile_end: 0,
    };

    /// Every pipe drained.
    fn drained(&self) -> u64 {
        let f = self
            .free
            .iter()
            .chain(&self.done)
            .copied()
            .max()
            .unwrap_or(0);
        f.max(self.last)
    }

    /// Restarts the pipes at cycle `t` with empty queues.
    fn restart(&mut self, t: u64) {
        self.dispatch = t;
        self.free = [t; 5];
        self.done = [t; 5];
        self.count = [0; 5];
        self.last = t;
    }
}

/// The simulator's state: every core and the shared channel (about
/// 100 KiB; box it where the stack is small).
pub struct Simulator {
    cores: [Core; MAX_SIM_CORES as usize],
    channel: Channel,
}

impl Default for Simulator {
    fn default() -> Self {
        Simulator::new()
    }
}

impl fmt::Debug for Simulator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Simulator")
    }
}

impl Simulator {
    /// A simulator with idle cores.
    pub fn new() -> Simulator {
        Simulator {
            cores: [Core::IDLE; MAX_SIM_CORES as usize],
            channel: Channel::new(1.0),
        }
    }

    /// Times one launch of `program` on `spec`, reporting every
    /// instruction and tile to `sink`.
    ///
    /// # Errors
    /// [`SimError::Spec`] for a spec out of range, [`SimError::Ub`] for a
    /// kernel declaring more UB than the spec's cores have.
    pub fn launch<const N: usize, const B: usize, S: SimSink>(
        &mut self,
        spec: &DeviceSpec,
        program: &SimProgram<N, B>,
        sink: &mut S,
    ) -> Result<SimStats, SimError> {
        spec.check()?;
        if program.ub_bytes() > spec.ub_bytes {
            return Err(SimError::Ub {
                need: program.ub_bytes(),
                have: spec.ub_bytes,
            });
        }
        let total = program.total_tiles();
        let blocks = if program.tiles_independent() {
            (spec.cores as u64).min(total.max(1)) as u32
        } else {
            1
        };
        self.channel.reset(spec.gm_bytes_per_cycle);
        let start = spec.launch as u64;
        for c in &mut self.cores[..blocks as usize] {
            *c = Core::IDLE;
            c.restart(start);
        }
        let mut stats = SimStats {
            cores: blocks,
            tile_cycles: (u64::MAX, 0),
            ..SimStats::default()
        };
        // Stages: the bodies each runs, as a range.
        let count = program.bodies().len();
        let stages = if program.kind() == KernelKind::Sequence {
            count
        } else {
            count.min(1)
        };
        let mut end = start;
        for s in 0..stages {
            let bodies = if program.kind() == KernelKind::Sequence {
                s..s + 1
            } else if program.kind() == KernelKind::Parallel {
                0..count
            } else {
                0..1
            };
            let tiles: u64 = program.bodies()[bodies.clone()]
                .iter()
                .map(|b| b.tiles as u64)
                .sum();
            for (i, c) in self.cores[..blocks as usize].iter_mut().enumerate() {
                let (lo, hi) = block_range(tiles, i as u32, blocks);
                // Flat index `lo` as (body, tile).
                let (mut body, mut at) = (bodies.start, lo);
                while body + 1 < bodies.end && at >= program.bodies()[body].tiles as u64 {
                    at -= program.bodies()[body].tiles as u64;
                    body += 1;
                }
                c.body = body;
                c.tile = at as u32;
                c.left = hi - lo;
                c.pc = 0;
            }
            self.run_stage(spec, program, blocks, &mut stats, sink);
            end = self.cores[..blocks as usize]
                .iter()
                .map(Core::drained)
                .max()
                .unwrap_or(end);
            if s + 1 < stages {
                let t = end + spec.barrier as u64;
                for c in &mut self.cores[..blocks as usize] {
                    c.stalls.barrier += t - c.drained();
                    c.restart(t);
                }
            }
        }
        stats.cycles = end;
        for c in &self.cores[..blocks as usize] {
            for p in 0..5 {
                stats.busy[p] += c.busy[p];
            }
            stats.stalls += c.stalls;
        }
        if stats.tiles == 0 {
            stats.tile_cycles = (0, 0);
        }
        Ok(stats)
    }

    /// Runs every core's tiles of the current stage, the core with the
    /// earliest dispatch first.
    fn run_stage<const N: usize, const B: usize, S: SimSink>(
        &mut self,
        spec: &DeviceSpec,
        program: &SimProgram<N, B>,
        blocks: u32,
        stats: &mut SimStats,
        sink: &mut S,
    ) {
        loop {
            let mut pick: Option<usize> = None;
            for (i, c) in self.cores[..blocks as usize].iter().enumerate() {
                if c.left > 0 && pick.is_none_or(|p| c.dispatch < self.cores[p].dispatch) {
                    pick = Some(i);
                }
            }
            let Some(i) = pick else { return };
            let (body, tile, pc) = {
                let c = &self.cores[i];
                (c.body, c.tile, c.pc)
            };
            let code = program.body(body);
            let info = program.bodies()[body];
            if let Some(si) = code.get(pc) {
                let coord = info.coord(tile);
                let ev = step(
                    &mut self.cores[i],
                    &mut self.channel,
                    spec,
                    si,
                    coord,
                    stats,
                );
                let c = &mut self.cores[i];
                if pc == 0 {
                    c.tile_start = ev.start;
                    c.tile_end = ev.done;
                }
                c.tile_end = c.tile_end.max(ev.done);
                stats.instrs += 1;
                sink.instr(&InstrEvent {
                    core: i as u32,
                    body: body as u32,
                    tile,
                    index: pc as u32,
                    instr: si,
                    dispatch: ev.dispatch,
                    start: ev.start,
                    end: ev.end,
                    done: ev.done,
                    bytes: ev.bytes,
                    stall: ev.stall,
                });
            }
            let c = &mut self.cores[i];
            c.pc += 1;
            if c.pc >= code.len() {
                if code.is_empty() {
                    c.tile_start = c.dispatch;
                    c.tile_end = c.dispatch;
                }
                let t = c.tile_end.saturating_sub(c.tile_start);
                stats.tiles += 1;
                stats.tile_cycles = (stats.tile_cycles.0.min(t), stats.tile_cycles.1.max(t));
                sink.tile(&TileEvent {
                    core: i as u32,
                    body: body as u32,
                    tile,
                    start: c.tile_start,
                    end: c.tile_end,
                });
                c.pc = 0;
                c.left -= 1;
                c.tile += 1;
                if c.tile >= info.tiles && c.body + 1 < program.bodies().len() {
                    c.body += 1;
                    c.tile = 0;
                }
            }
        }
    }
}

/// One instruction's times.
struct Step {
    dispatch: u64,
    start: u64,
    end: u64,
    done: u64,
    bytes: u64,
    stall: Stalls,
}

/// Dispatches and times `si` on core `c`.
fn step(
    c: &mut Core,
    channel: &mut Channel,
    spec: &DeviceSpec,
    si: &SimInstr,
    coord: [u32; 3],
    stats: &mut SimStats,
) -> Step {
    let p = si.pipe as usize;
    let mut stall = Stalls::default();
    let depth = spec.queue_depth as u64;
    let mut d = c.dispatch;
    if c.count[p] >= depth {
        let slot = ((c.count[p] - depth) % MAX_QUEUE_DEPTH as u64) as usize;
        let freed = c.queue[p][slot];
        if freed > d {
            stall.queue = freed - d;
            d = freed;
        }
    }
    let (start, end, done, bytes) = match si.op {
        SimOp::Barrier => {
            let t = c.drained().max(d);
            stall.barrier = t - d;
            let e = t + spec.barrier as u64;
            c.free = [e; 5];
            c.done = [e; 5];
            (t, e, e, 0)
        }
        op => {
            let ready = d.max(c.free[p]);
            let mut deps = si
                .wait
                .iter()
                .map(|q| c.done[q as usize])
                .max()
                .unwrap_or(0);
            if spec.serial {
                deps = deps.max(c.last);
            }
            let start = ready.max(deps);
            if deps > ready && !spec.serial {
                stall.flag = deps - ready;
            }
            let (end, done, bytes) = match op {
                SimOp::Load(_) | SimOp::Gather { .. } | SimOp::Store { .. } => {
                    let (bytes, rows) = si.transfer(coord);
                    let setup =
                        spec.transfer_setup as u64 + ceil(rows as f64 * spec.transfer_row_cycles);
                    let (moved, lost) =
                        channel.transfer(start + setup, bytes, spec.core_gm_bytes_per_cycle);
                    stall.bandwidth = lost;
                    if matches!(op, SimOp::Store { .. }) {
                        stats.bytes_stored += bytes;
                    } else {
                        stats.bytes_loaded += bytes;
                    }
                    (moved, moved + spec.gm_latency as u64, bytes)
                }
                SimOp::Vector {
                    class,
                    width,
                    elems,
                } => {
                    let lanes = spec.vector_lanes[class as usize][width as usize];
                    stats.vector_elems += elems;
                    let e = start + spec.vector_issue as u64 + ceil(elems as f64 / lanes);
                    (e, e, 0)
                }
                SimOp::Cube { macs, dt } => {
                    stats.macs += macs;
                    let e = start
                        + spec.cube_issue as u64
                        + ceil(macs as f64 / spec.cube_macs[dt as usize]);
                    (e, e, 0)
                }
                SimOp::Barrier => (start, start, 0),
            };
            c.free[p] = end;
            (start, end, done, bytes)
        }
    };
    c.done[p] = c.done[p].max(done);
    c.last = c.last.max(done);
    c.busy[p] += end - start;
    c.queue[p][(c.count[p] % MAX_QUEUE_DEPTH as u64) as usize] = start;
    c.count[p] += 1;
    c.stalls += stall;
    c.dispatch = if si.opcode == Opcode::Barrier {
        end
    } else {
        d + spec.dispatch as u64
    };
    Step {
        dispatch: d,
        start,
        end,
        done,
        bytes,
        stall,
    }
}
