//! Helpers shared by the integration tests: a seeded generator of random
//! (well-formed, not necessarily verifiable) modules, and byte patching.
#![allow(dead_code)]

use dvm_isa::builder::{BodyDef, CodeWriter, KernelDef, ModuleBuilder, ParamDef};
use dvm_isa::module::features;
use dvm_isa::{DType, Instr, KernelKind, Opcode, ParamAccess, WaitMask};

/// splitmix64.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Characters that stress quoting: quotes, escapes, comment starters,
/// punctuation of the syntax, control characters and non-ASCII.
const PALETTE: &[char] = &[
    'a', 'b', 'S', 'x', '0', '7', '_', '*', '+', '-', '/', '(', ')', '.', '%', ' ', '"', '\\',
    '\n', '\t', '\r', '\0', ';', '#', '=', ',', '[', ']', '{', '}', 'é', '日', '\u{7f}', '\u{85}',
    '\u{2028}', '\u{1b}',
];

pub fn string(rng: &mut Rng, max: u64) -> String {
    let n = rng.below(max + 1);
    (0..n).map(|_| rng.pick(PALETTE)).collect()
}

/// A random instruction of any opcode with any wait mask (own pipe
/// included: the text must carry whatever the words hold).
pub fn instr(rng: &mut Rng) -> (Instr, WaitMask) {
    let op = rng.pick(Opcode::ALL);
    let instr = Instr::sample(op, &mut || rng.next());
    let wait = WaitMask::from_bits((rng.next() & 0xf) as u8).unwrap_or(WaitMask::NONE);
    (instr, wait)
}

/// A random body: instructions, labels anywhere, sometimes raw words.
pub fn body(rng: &mut Rng) -> BodyDef {
    let mut code = CodeWriter::new();
    let n = rng.below(8);
    for _ in 0..n {
        if rng.chance(20) {
            let text = string(rng, 6);
            code.label(text);
        }
        match rng.below(10) {
            0 => {
                code.push_word(rng.next());
            }
            1 => {
                // A valid head with bad operands, or a word that looks like
                // a head of a different length.
                let (i, w) = instr(rng);
                let words = i.encode(w).words().to_vec();
                let flip = rng.below(64 * words.len() as u64);
                for (j, word) in words.iter().enumerate() {
                    let x = if j as u64 == flip / 64 {
                        word ^ (1 << (flip % 64))
                    } else {
                        *word
                    };
                    code.push_word(x);
                }
            }
            _ => {
                let (i, w) = instr(rng);
                code.push(&i, w);
            }
        }
    }
    if rng.chance(70) {
        // A label names the word after it: never one past the end of the
        // body (the assembler refuses it, so the text could not say it).
        if rng.chance(15) {
            code.label(string(rng, 4));
        }
        code.push(&Instr::End {}, WaitMask::NONE);
    }
    let dim = |rng: &mut Rng| {
        if rng.chance(80) {
            rng.below(5) as u32
        } else {
            rng.next() as u32
        }
    };
    BodyDef {
        grid: [dim(rng), dim(rng), dim(rng)],
        code,
    }
}

pub fn kernel(rng: &mut Rng) -> KernelDef {
    let np = rng.below(5);
    let params = (0..np)
        .map(|_| ParamDef {
            name: string(rng, 6),
            dtype: rng.pick(&DType::INSTR),
            access: rng.pick(&[
                ParamAccess::Read,
                ParamAccess::Write,
                ParamAccess::ReadWrite,
            ]),
            dims: (0..rng.below(4)).map(|_| string(rng, 4)).collect(),
        })
        .collect();
    let nb = rng.below(4);
    KernelDef {
        name: string(rng, 8),
        kind: rng.pick(&KernelKind::ALL),
        ub_bytes: if rng.chance(50) {
            196_608
        } else {
            rng.next() as u32
        },
        params,
        bodies: (0..nb).map(|_| body(rng)).collect(),
    }
}

/// A random module as the builder writes it.
pub fn module(seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed);
    let mut b = ModuleBuilder::new();
    if rng.chance(50) {
        b.declare_features(rng.next() & features::KNOWN);
    }
    for _ in 0..rng.below(4) {
        b.add_kernel(kernel(&mut rng)).ok();
    }
    b.finish()
}

/// `(kind, offset, len)` of each section-table entry.
pub fn sections(bytes: &[u8]) -> Vec<(u32, usize, usize)> {
    let count = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    (0..count)
        .map(|i| {
            let e = 32 + 24 * i;
            (
                u32::from_le_bytes(bytes[e..e + 4].try_into().unwrap()),
                u64::from_le_bytes(bytes[e + 8..e + 16].try_into().unwrap()) as usize,
                u64::from_le_bytes(bytes[e + 16..e + 24].try_into().unwrap()) as usize,
            )
        })
        .collect()
}

/// Byte offset of section `kind`'s data.
pub fn section(bytes: &[u8], kind: u32) -> (usize, usize) {
    let s = sections(bytes).into_iter().find(|s| s.0 == kind).unwrap();
    (s.1, s.2)
}

pub fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A random module whose every kernel verifies against
/// `DeviceLimits::DEFAULT`: instructions are drawn from small field values
/// and kept only when a one-instruction kernel with the same parameters,
/// grid and UB verifies (rejection sampling), so loads, stores and
/// matmuls with consistent patterns appear too.
pub fn verifiable_module(seed: u64) -> Vec<u8> {
    use dvm_isa::{verify_module, DeviceLimits, Module, Pipe};
    let mut rng = Rng(seed);
    let mut b = ModuleBuilder::new();
    for k in 0..1 + rng.below(2) {
        let params: Vec<ParamDef> = (0..1 + rng.below(4))
            .map(|i| ParamDef {
                name: format!("p{i}"),
                dtype: rng.pick(&[DType::F32, DType::F32, DType::F16, DType::I8, DType::Bool]),
                access: rng.pick(&[
                    ParamAccess::Read,
                    ParamAccess::Write,
                    ParamAccess::ReadWrite,
                ]),
                dims: vec![],
            })
            .collect();
        let grid = [
            1 + rng.below(4) as u32,
            1 + rng.below(3) as u32,
            1 + rng.below(2) as u32,
        ];
        let ub_bytes = 4096;
        let try_kernel = |code: CodeWriter| -> bool {
            let mut t = ModuleBuilder::new();
            t.declare_features(features::KNOWN);
            t.add_kernel(KernelDef {
                name: String::new(),
                kind: KernelKind::Parallel,
                ub_bytes,
                params: params.clone(),
                bodies: vec![BodyDef { grid, code }],
            })
            .expect("unique kernel name");
            let bytes = t.finish();
            Module::parse(&bytes).is_ok_and(|m| verify_module(&m, &DeviceLimits::DEFAULT).is_ok())
        };
        let palette = [0u64, 1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 0xff];
        let mut code = CodeWriter::new();
        for _ in 0..rng.below(10) {
            for _attempt in 0..200 {
                let op = if rng.chance(30) {
                    rng.pick(&[
                        Opcode::Load,
                        Opcode::Store,
                        Opcode::StoreAdd,
                        Opcode::Matmul,
                    ])
                } else {
                    rng.pick(Opcode::ALL)
                };
                if op == Opcode::End {
                    continue;
                }
                let mut instr = Instr::sample(op, &mut || rng.pick(&palette));
                fix(&mut instr, &params, grid, &mut rng);
                let mut wait = WaitMask::NONE;
                for p in Pipe::DATA {
                    if p != op.pipe() && op.pipe() != Pipe::Control && rng.chance(30) {
                        wait = wait.with(p);
                    }
                }
                let mut one = CodeWriter::new();
                one.push(&instr, wait);
                one.push(&Instr::End {}, WaitMask::NONE);
                if try_kernel(one) {
                    if rng.chance(20) {
                        code.label(format!("{op:?}"));
                    }
                    code.push(&instr, wait);
                    break;
                }
            }
        }
        code.push(&Instr::End {}, WaitMask::NONE);
        b.add_kernel(KernelDef {
            name: format!("k{k}"),
            kind: KernelKind::Parallel,
            ub_bytes,
            params,
            bodies: vec![BodyDef { grid, code }],
        })
        .expect("unique kernel name");
    }
    b.finish()
}

/// Nudges a sampled load, store or matmul towards validity: an existing
/// parameter of its dtype, tails consistent with the grid, small shapes.
fn fix(instr: &mut Instr, params: &[ParamDef], grid: [u32; 3], rng: &mut Rng) {
    use dvm_isa::GridDim;
    let gm = |dt: &mut DType,
              buf: &mut u8,
              dims: [&mut GridDim; 2],
              shape: [&mut u32; 3],
              totals: [&mut u32; 2],
              rng: &mut Rng| {
        *buf = rng.below(params.len() as u64) as u8;
        *dt = params[*buf as usize].dtype;
        let [rows, cols, pitch] = shape;
        *rows = 1 + rng.below(6) as u32;
        *cols = 1 + rng.below(6) as u32;
        *pitch = *cols + rng.below(3) as u32;
        let [row_dim, col_dim] = dims;
        if *row_dim == *col_dim {
            *col_dim = GridDim::None;
        }
        let [row_total, col_total] = totals;
        for (dim, full, total) in [(&*row_dim, *rows, row_total), (&*col_dim, *cols, col_total)] {
            if let Some(d) = dim.index() {
                *total = (grid[d] - 1) * full + 1 + rng.below(full as u64) as u32;
            }
        }
    };
    match instr {
        Instr::Load {
            dt,
            buf,
            row_dim,
            col_dim,
            rows,
            cols,
            pitch,
            row_total,
            col_total,
            ..
        }
        | Instr::Store {
            dt,
            buf,
            row_dim,
            col_dim,
            rows,
            cols,
            pitch,
            row_total,
            col_total,
            ..
        }
        | Instr::StoreAdd {
            dt,
            buf,
            row_dim,
            col_dim,
            rows,
            cols,
            pitch,
            row_total,
            col_total,
            ..
        } => gm(
            dt,
            buf,
            [row_dim, col_dim],
            [rows, cols, pitch],
            [row_total, col_total],
            rng,
        ),
        Instr::Matmul {
            dt,
            out,
            dst,
            a,
            b,
            m,
            n,
            k,
            ..
        } => {
            (*dt, *out) = rng.pick(&[
                (DType::F32, DType::F32),
                (DType::F16, DType::F32),
                (DType::BF16, DType::BF16),
                (DType::I8, DType::I32),
            ]);
            for x in [m, n, k] {
                *x = rng.pick(&[1, 2, 3, 4, 8]);
            }
            *a = 0;
            *b = 1024;
            *dst = 2048;
        }
        _ => {}
    }
}
