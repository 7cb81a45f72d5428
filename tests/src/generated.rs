//! Differential cases: random graphs drawn from a seeded generator, the
//! same on every run. Each mixes element-wise ops with a broadcast input,
//! reductions and softmax along any axis, layer norms, matmuls, transposes,
//! slices with steps, concatenations and reshapes, over `x: [S, b, c]` with
//! `S` symbolic and `S`, `b`, `c` drawn from 0-sized, 1-sized, prime and
//! just-past-a-power-of-two extents. Like every case, they run on the CPU
//! device against the reference and on QEMU and the simulator bit for bit
//! against the CPU.

use dvm_graph::NodeId;
use dvm_isa::Opcode;
use dvm_sym::Dim;

use crate::{Builder, Case, Domain, F32, R};

/// Cases generated (seeds `0..COUNT`).
pub const COUNT: u64 = 24;

/// Extents of `S`, `b` and `c`.
const EXTENTS: [u64; 9] = [0, 1, 2, 3, 5, 13, 17, 33, 129];

/// A small LCG: the same stream for a seed on every machine.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, m: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % m.max(1)
    }
}

pub(crate) fn cases(out: &mut Vec<Case>) -> R<()> {
    for seed in 0..COUNT {
        out.push(case(seed)?);
    }
    Ok(())
}

fn case(seed: u64) -> R<Case> {
    let mut r = Lcg(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let pick = |r: &mut Lcg| EXTENTS[r.next(EXTENTS.len() as u64) as usize];
    let (s, b, c) = (pick(&mut r), pick(&mut r).max(1), pick(&mut r).max(1));
    let (b, c) = (b.min(33), c.min(33));
    // Layer norms of nearly constant rows amplify f32 rounding by up to
    // 1/sqrt(eps): eps 1e-2 and a tolerance of 1e-3 compare the
    // kernels, not f32's conditioning.
    let mut bl = Builder::new(format!("generated/{seed}/S={s},b={b},c={c}")).tol(1e-3, 1e-3);
    let sym = bl.g.symbol("S", 0, 4096)?;
    let dims = [Dim::from(sym), Dim::from(b as i64), Dim::from(c as i64)];
    let x = bl.input_dims("x", F32, &dims, &[s, b, c], Domain::Any)?;
    let ymask = r.next(8);
    let (ydims, yshape): (Vec<Dim>, Vec<u64>) = dims
        .iter()
        .zip([s, b, c])
        .enumerate()
        .map(|(i, (d, e))| {
            if ymask >> i & 1 == 1 {
                (Dim::from(1), 1)
            } else {
                (d.clone(), e)
            }
        })
        .unzip();
    let y = bl.input_dims("y", F32, &ydims, &yshape, Domain::Any)?;
    let gamma = bl.input("gamma", F32, &[c], Domain::Any)?;
    let w = bl.input("w", F32, &[c, c], Domain::Any)?;
    let mut pool: Vec<NodeId> = vec![x];
    let steps = 2 + r.next(8);
    for _ in 0..steps {
        let a = pool[pool.len() - 1 - r.next(pool.len().min(4) as u64) as usize];
        let rank = bl.g[a].shape.len();
        let axis = r.next(rank.max(1) as u64) as i64;
        let made = match r.next(13) {
            0 => bl.g.unary(Opcode::Tanh, a),
            1 => bl.g.unary(Opcode::Sigmoid, a),
            2 => bl.g.binary(Opcode::Add, a, y),
            3 => {
                bl.g.binary(Opcode::Mul, a, pool[r.next(pool.len() as u64) as usize])
            }
            4 => bl.g.scalar(Opcode::MulS, a, 0.75),
            5 if rank > 0 => bl.g.sum(a, &[axis], r.next(2) == 0),
            // The maximum of nothing has no value, and softmax takes one
            // (so a softmax along an empty axis is refused, where PyTorch
            // returns the empty tensor): neither with S = 0.
            6 if rank > 0 && s > 0 => bl.g.reduce_max(a, &[axis], true),
            7 if rank > 0 && s > 0 => bl.g.softmax(a, axis),
            8 if bl.g[a].shape.last() == Some(&Dim::from(c as i64)) => {
                let z = bl.g.full(F32, &[Dim::from(c as i64)], 0.25)?;
                bl.g.layer_norm(a, gamma, z, 1e-2)
            }
            9 if rank >= 2 && bl.g[a].shape.last() == Some(&Dim::from(c as i64)) => {
                bl.g.matmul(a, w, false, false)
            }
            10 if rank >= 2 => {
                let mut perm: Vec<i64> = (0..rank as i64).collect();
                perm.swap(axis as usize, (axis as usize + 1) % rank);
                bl.g.transpose(a, &perm)
            }
            11 if rank > 0 => {
                let start = r.next(3) as i64 - 1;
                bl.g.slice(a, &[(axis, start, i64::MAX, 1 + r.next(2) as i64)])
            }
            12 if rank > 0 => bl.g.concat(&[a, a], axis),
            _ => continue,
        };
        if let Ok(n) = made {
            pool.push(n);
        }
    }
    let last = *pool.last().unwrap_or(&x);
    let outs: Vec<NodeId> = if last == x {
        vec![bl.g.unary(Opcode::Neg, x)?]
    } else {
        vec![last]
    };
    bl.output(&outs)
}
