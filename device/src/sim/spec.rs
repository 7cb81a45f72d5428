//! The device description the simulator times instructions with
//! ([`DeviceSpec`]), its checks and the built-in presets.

use core::fmt;

use dvm_isa::{DType, Opcode};

/// Most cores a spec may have (the simulator keeps one state per core).
pub const MAX_SIM_CORES: u32 = 64;
/// Most instructions a pipe's queue may hold ([`DeviceSpec::queue_depth`]).
pub const MAX_QUEUE_DEPTH: u32 = 32;

/// The vector unit's op classes, each with its own throughput
/// ([`DeviceSpec::vector_lanes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VectorClass {
    /// Element-wise arithmetic, comparisons, selects and casts.
    Simple = 0,
    /// Transcendentals, divisions, powers and roots (polynomial
    /// sequences on the device).
    Transcendental = 1,
    /// Row and column folds (`rsum`, `rmax`, `rmin`).
    Reduce = 2,
    /// Data movement inside UB: copies, fills, broadcasts, transposes.
    Move = 3,
}

impl VectorClass {
    /// Every class, in index order.
    pub const ALL: [VectorClass; 4] = [
        VectorClass::Simple,
        VectorClass::Transcendental,
        VectorClass::Reduce,
        VectorClass::Move,
    ];

    /// Lower-case name (the key in spec files).
    pub const fn name(self) -> &'static str {
        match self {
            VectorClass::Simple => "simple",
            VectorClass::Transcendental => "transcendental",
            VectorClass::Reduce => "reduce",
            VectorClass::Move => "move",
        }
    }

    /// The class of a vector-pipe opcode (any other opcode is `Simple`).
    pub const fn of(op: Opcode) -> VectorClass {
        use Opcode as O;
        match op {
            O::Exp
            | O::Log
            | O::Sqrt
            | O::Rsqrt
            | O::Recip
            | O::Tanh
            | O::Sigmoid
            | O::GeluTanh
            | O::GeluErf
            | O::Silu
            | O::Erf
            | O::Sin
            | O::Cos
            | O::Div
            | O::Pow
            | O::DivS
            | O::RDivS
            | O::PowS => VectorClass::Transcendental,
            O::ReduceSum | O::ReduceMax | O::ReduceMin => VectorClass::Reduce,
            O::Copy | O::Fill | O::Iota | O::BroadcastRow | O::BroadcastCol | O::Transpose => {
                VectorClass::Move
            }
            _ => VectorClass::Simple,
        }
    }
}

/// Element widths the vector throughput is given for: 1, 2 and 4 bytes.
pub const WIDTHS: [u32; 3] = [1, 2, 4];

/// The index into [`WIDTHS`] of `dt`'s element size (8-byte types, which
/// no instruction takes, count as 4).
pub const fn width_index(dt: DType) -> usize {
    match dt.size() {
        0 | 1 => 0,
        2 => 1,
        _ => 2,
    }
}

/// Cube input types the MAC rate is given for, in index order.
pub const CUBE_TYPES: [&str; 3] = ["f16", "f32", "i8"];

/// The index into [`CUBE_TYPES`] of a matmul's input type (bf16 runs at
/// the f16 rate).
pub const fn cube_index(dt: DType) -> usize {
    match dt {
        DType::F32 | DType::I32 | DType::I64 => 1,
        DType::I8 | DType::Bool => 2,
        DType::F16 | DType::BF16 => 0,
    }
}

/// A modelled device: what the simulator needs to time every instruction.
///
/// Times are in cycles of [`DeviceSpec::clock_hz`]; rates per cycle may be
/// fractional. [`DeviceSpec::check`] states the valid ranges.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceSpec {
    /// Cores a launch's tiles are split over.
    pub cores: u32,
    /// Clock, in Hz: converts cycles to seconds.
    pub clock_hz: f64,
    /// UB bytes per core: kernels declaring more are refused.
    pub ub_bytes: u32,
    /// Global-memory bandwidth shared by all cores, bytes per cycle.
    pub gm_bytes_per_cycle: f64,
    /// Most bytes per cycle one core's load or store pipe moves.
    pub core_gm_bytes_per_cycle: f64,
    /// Cycles from a transfer's last byte to its completion (the latency
    /// of global memory, paid by whoever waits on the transfer).
    pub gm_latency: u32,
    /// Cycles a load or store occupies its pipe before data moves.
    pub transfer_setup: u32,
    /// Cycles a load or store spends per row of its box (descriptor and
    /// burst overhead of strided boxes).
    pub transfer_row_cycles: f64,
    /// Vector throughput in elements per cycle, by [`VectorClass`] and
    /// element width ([`WIDTHS`]).
    pub vector_lanes: [[f64; 3]; 4],
    /// Fixed cycles of every vector instruction.
    pub vector_issue: u32,
    /// Cube multiply-accumulates per cycle by input type ([`CUBE_TYPES`]).
    pub cube_macs: [f64; 3],
    /// Fixed cycles of every cube instruction.
    pub cube_issue: u32,
    /// Cycles the scalar unit takes to dispatch one instruction to its
    /// pipe's queue.
    pub dispatch: u32,
    /// Instructions a pipe's queue holds before dispatch stalls.
    pub queue_depth: u32,
    /// One instruction at a time per core, each waiting for every earlier
    /// one whatever its wait mask (a CPU running the virtual machine);
    /// `false` for a device whose pipes overlap as the flags allow.
    pub serial: bool,
    /// Cycles from a launch to the first dispatch on every core.
    pub launch: u32,
    /// Cycles of a barrier: between the stages of a sequence kernel once
    /// the last core arrives, and of a `barrier` instruction once its
    /// core's pipes drained.
    pub barrier: u32,
}

/// Why a spec is not usable: the field and the rule it breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// The field's name, as in spec files.
    pub field: &'static str,
    /// The rule.
    pub rule: &'static str,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "spec field `{}`: {}", self.field, self.rule)
    }
}

impl core::error::Error for SpecError {}

/// `v` is finite and positive.
fn positive(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

impl DeviceSpec {
    /// An Ascend 910B-class NPU from public figures; `docs/simulator.md`
    /// lists each figure, its source, and which are estimates.
    pub const ASCEND_910B: DeviceSpec = DeviceSpec {
        cores: 24,
        clock_hz: 1.6e9,
        ub_bytes: 192 * 1024,
        // 1.6 TB/s of HBM at 1.6 GHz.
        gm_bytes_per_cycle: 1.6e12 / 1.6e9,
        core_gm_bytes_per_cycle: 128.0,
        gm_latency: 500,
        transfer_setup: 30,
        transfer_row_cycles: 1.0,
        // A 256-byte vector: 256 i8, 128 f16, 64 f32 lanes.
        vector_lanes: [
            [256.0, 128.0, 64.0],
            [32.0, 16.0, 8.0],
            [128.0, 64.0, 32.0],
            [256.0, 128.0, 64.0],
        ],
        vector_issue: 8,
        // A 16×16×16 f16 cube per cycle; i8 at twice the rate.
        cube_macs: [4096.0, 1024.0, 8192.0],
        cube_issue: 16,
        dispatch: 1,
        queue_depth: 8,
        serial: false,
        launch: 3600,
        barrier: 900,
    };

    /// A starting point for one core of a general-purpose CPU running the
    /// CPU device (one cycle is a nanosecond): `dvm calibrate` fits its
    /// rates to measurements of this machine.
    pub const GENERIC_CPU: DeviceSpec = DeviceSpec {
        cores: 1,
        clock_hz: 1.0e9,
        ub_bytes: 192 * 1024,
        gm_bytes_per_cycle: 16.0,
        core_gm_bytes_per_cycle: 8.0,
        gm_latency: 80,
        transfer_setup: 20,
        transfer_row_cycles: 2.0,
        vector_lanes: [
            [16.0, 4.0, 4.0],
            [1.0, 1.0, 1.0],
            [8.0, 2.0, 2.0],
            [16.0, 8.0, 4.0],
        ],
        vector_issue: 10,
        cube_macs: [4.0, 8.0, 8.0],
        cube_issue: 50,
        dispatch: 2,
        queue_depth: 1,
        serial: true,
        launch: 5000,
        barrier: 1000,
    };

    /// Checks every field's range.
    ///
    /// # Errors
    /// A [`SpecError`] naming the first field out of range.
    pub fn check(&self) -> Result<(), SpecError> {
        let err = |field, rule| Err(SpecError { field, rule });
        if self.cores == 0 || self.cores > MAX_SIM_CORES {
            return err("cores", "must be 1 to 64");
        }
        if !positive(self.clock_hz) {
            return err("clock_hz", "must be a positive number");
        }
        if self.ub_bytes < 64 || !self.ub_bytes.is_multiple_of(64) {
            return err("ub_bytes", "must be a positive multiple of 64");
        }
        if !positive(self.gm_bytes_per_cycle) {
            return err("gm_bytes_per_cycle", "must be a positive number");
        }
        if !positive(self.core_gm_bytes_per_cycle) {
            return err("core_gm_bytes_per_cycle", "must be a positive number");
        }
        if !(self.transfer_row_cycles.is_finite() && self.transfer_row_cycles >= 0.0) {
            return err("transfer_row_cycles", "must be a number at least 0");
        }
        if !self.vector_lanes.iter().flatten().all(|&v| positive(v)) {
            return err("vector_lanes", "every rate must be a positive number");
        }
        if !self.cube_macs.iter().all(|&v| positive(v)) {
            return err("cube_macs", "every rate must be a positive number");
        }
        if self.queue_depth == 0 || self.queue_depth > MAX_QUEUE_DEPTH {
            return err("queue_depth", "must be 1 to 32");
        }
        // Cycle counts are u32 fields; keep sums far from overflow.
        let big = [
            ("gm_latency", self.gm_latency),
            ("transfer_setup", self.transfer_setup),
            ("vector_issue", self.vector_issue),
            ("cube_issue", self.cube_issue),
            ("dispatch", self.dispatch),
            ("launch", self.launch),
            ("barrier", self.barrier),
        ];
        for (field, v) in big {
            if v > 1 << 30 {
                return err(field, "must be at most 2^30 cycles");
            }
        }
        Ok(())
    }

    /// Seconds of `cycles`.
    pub fn seconds(&self, cycles: u64) -> f64 {
        cycles as f64 / self.clock_hz
    }
}
