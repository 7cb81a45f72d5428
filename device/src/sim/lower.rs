//! A verified kernel lowered for timing ([`SimProgram`]): every
//! instruction of every body with its pipe, its wait mask and the work it
//! costs, in the order the pipes receive them.
//!
//! The executor's predecoder fuses instruction pairs into
//! superinstructions and runs some bodies straight over global memory;
//! those are host-CPU shortcuts. The pipes of the modelled device see the
//! verified stream itself, so the simulator times that.

use core::fmt;

use dvm_isa::{
    DType, GmKind, GmPattern, Instr, KernelKind, Opcode, Pipe, VerifiedKernel, WaitMask,
};

use super::spec::{cube_index, width_index, VectorClass};

/// The work one instruction costs.
#[derive(Clone, Copy, Debug)]
pub enum SimOp {
    /// Global memory → UB: the tile's valid box of `pattern`.
    Load(GmPattern),
    /// Global memory → UB by index: `rows` rows of the table `pattern`.
    Gather {
        /// The table access (its column extent gives the row length).
        pattern: GmPattern,
        /// Rows gathered.
        rows: u32,
    },
    /// UB → global memory (`add`: adding into the destination).
    Store {
        /// The tile's box.
        pattern: GmPattern,
        /// `store_add`.
        add: bool,
    },
    /// A vector instruction over `elems` elements.
    Vector {
        /// Its throughput class.
        class: VectorClass,
        /// Index of its widest element type in [`super::spec::WIDTHS`].
        width: u8,
        /// Elements it processes (the largest of its UB operands).
        elems: u64,
    },
    /// A matmul of `macs` multiply-accumulates.
    Cube {
        /// `m·n·k`.
        macs: u64,
        /// Index of the input type in [`super::spec::CUBE_TYPES`].
        dt: u8,
    },
    /// Waits for every pipe of its core.
    Barrier,
}

/// One instruction as the pipes see it.
#[derive(Clone, Copy, Debug)]
pub struct SimInstr {
    /// Its opcode.
    pub opcode: Opcode,
    /// The pipe it issues on.
    pub pipe: Pipe,
    /// The pipes it waits for.
    pub wait: WaitMask,
    /// Its word offset in the body.
    pub word: u32,
    /// Its cost.
    pub op: SimOp,
}

impl SimInstr {
    /// Bytes it moves between global memory and UB for the tile at
    /// `coord` (0 for UB-only instructions), and the rows of that box.
    pub fn transfer(&self, coord: [u32; 3]) -> (u64, u32) {
        let boxed = |p: &GmPattern, rows: Option<u32>| {
            let (r, c) = p.extent(coord);
            let r = rows.unwrap_or(r);
            (r as u64 * c as u64 * p.dtype.size() as u64, r)
        };
        match &self.op {
            SimOp::Load(p) | SimOp::Store { pattern: p, .. } => boxed(p, None),
            SimOp::Gather { pattern, rows } => boxed(pattern, Some(*rows)),
            _ => (0, 0),
        }
    }
}

/// One body: its grid and its instructions' range.
#[derive(Clone, Copy, Debug)]
pub struct SimBody {
    /// Tile grid (row-major, dimension 2 fastest).
    pub grid: [u32; 3],
    /// Tiles.
    pub tiles: u32,
    start: u32,
    len: u32,
}

impl SimBody {
    /// The coordinate of tile `t` (as the executor numbers tiles).
    pub fn coord(&self, t: u32) -> [u32; 3] {
        let [_, g1, g2] = self.grid;
        let (g1, g2) = (g1.max(1), g2.max(1));
        [t / (g1 * g2), (t / g2) % g1, t % g2]
    }
}

/// Why a kernel could not be lowered for timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimLowerError {
    /// More instructions than the program holds.
    TooManyInstrs {
        /// Capacity.
        cap: usize,
    },
    /// More bodies than the program holds.
    TooManyBodies {
        /// Bodies in the kernel.
        count: usize,
        /// Capacity.
        cap: usize,
    },
}

impl fmt::Display for SimLowerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimLowerError::TooManyInstrs { cap } => {
                write!(f, "the kernel has more than {cap} instructions")
            }
            SimLowerError::TooManyBodies { count, cap } => {
                write!(
                    f,
                    "the kernel has {count} bodies, at most {cap} are simulated"
                )
            }
        }
    }
}

impl core::error::Error for SimLowerError {}

/// A verified kernel lowered for timing: at most `N` instructions over at
/// most `B` bodies (`end` dropped).
#[derive(Clone, Debug)]
pub struct SimProgram<const N: usize = 512, const B: usize = 16> {
    kind: KernelKind,
    ub_bytes: u32,
    independent: bool,
    bodies: heapless::Vec<SimBody, B>,
    code: heapless::Vec<SimInstr, N>,
}

impl<const N: usize, const B: usize> SimProgram<N, B> {
    /// Lowers `kernel`.
    ///
    /// # Errors
    /// [`SimLowerError`] when the kernel exceeds the capacity.
    pub fn new(kernel: &VerifiedKernel<'_>) -> Result<SimProgram<N, B>, SimLowerError> {
        let count = kernel.body_count();
        if count > B {
            return Err(SimLowerError::TooManyBodies { count, cap: B });
        }
        let mut p = SimProgram {
            kind: kernel.kind(),
            ub_bytes: kernel.ub_bytes(),
            independent: kernel.tiles_independent().is_ok(),
            bodies: heapless::Vec::new(),
            code: heapless::Vec::new(),
        };
        for b in 0..count {
            let start = p.code.len() as u32;
            for (word, head, instr) in kernel.instrs(b) {
                let Some(op) = cost(&instr) else { continue };
                let si = SimInstr {
                    opcode: instr.opcode(),
                    pipe: head.pipe,
                    wait: head.wait,
                    word,
                    op,
                };
                p.code
                    .push(si)
                    .map_err(|_| SimLowerError::TooManyInstrs { cap: N })?;
            }
            let body = SimBody {
                grid: kernel.grid(b),
                tiles: kernel.tiles(b),
                start,
                len: p.code.len() as u32 - start,
            };
            // Cannot fail: `count <= B`.
            let _ = p.bodies.push(body);
        }
        Ok(p)
    }

    /// Kernel kind.
    pub fn kind(&self) -> KernelKind {
        self.kind
    }

    /// UB bytes the kernel declares.
    pub fn ub_bytes(&self) -> u32 {
        self.ub_bytes
    }

    /// Whether the verifier proved the tiles independent (else one core
    /// runs them all, as on every executor).
    pub fn tiles_independent(&self) -> bool {
        self.independent
    }

    /// The bodies.
    pub fn bodies(&self) -> &[SimBody] {
        &self.bodies
    }

    /// Body `b`'s instructions (empty when it does not exist).
    pub fn body(&self, b: usize) -> &[SimInstr] {
        self.bodies
            .get(b)
            .and_then(|i| self.code.get(i.start as usize..(i.start + i.len) as usize))
            .unwrap_or(&[])
    }

    /// Tiles over all bodies.
    pub fn total_tiles(&self) -> u64 {
        self.bodies.iter().map(|b| b.tiles as u64).sum()
    }
}

/// The cost of `instr`; `None` for `end`, which takes no pipe time.
fn cost(instr: &Instr) -> Option<SimOp> {
    if let Some(gm) = instr.gm() {
        return Some(match gm.kind {
            GmKind::Load => SimOp::Load(gm.pattern),
            GmKind::Gather => SimOp::Gather {
                pattern: gm.pattern,
                rows: match instr {
                    Instr::Gather { rows, .. } => *rows,
                    _ => gm.pattern.rows,
                },
            },
            GmKind::Store => SimOp::Store {
                pattern: gm.pattern,
                add: false,
            },
            GmKind::StoreAdd => SimOp::Store {
                pattern: gm.pattern,
                add: true,
            },
        });
    }
    match instr {
        Instr::End {} => None,
        Instr::Barrier {} => Some(SimOp::Barrier),
        Instr::Matmul { dt, m, n, k, .. } => Some(SimOp::Cube {
            macs: *m as u64 * *n as u64 * *k as u64,
            dt: cube_index(*dt) as u8,
        }),
        _ => {
            let acc = instr.ub_accesses();
            let elems = acc.as_slice().iter().map(|a| a.elems).max().unwrap_or(0);
            let width = acc
                .as_slice()
                .iter()
                .map(|a| width_index(a.dtype))
                .max()
                .unwrap_or(width_index(DType::F32));
            Some(SimOp::Vector {
                class: VectorClass::of(instr.opcode()),
                width: width as u8,
                elems,
            })
        }
    }
}
