//! The dvm conformance suite: one list of cases (graphs with their inputs),
//! run against every device.
//!
//! `tests/conformance.rs` makes one test per case per device: `cpu::NAME`
//! (the CPU device against the f64 reference device, within each case's
//! tolerance), `qemu::NAME` (the QEMU device, the aarch64 firmware,
//! against the CPU device bit for bit; run by `cargo ci qemu`) and
//! `sim::NAME` (the simulator device against the CPU device bit for bit).
//! `cargo test -p dvm-tests -- NAME` runs one case; `tests/qemu.rs` checks
//! the firmware's answers to bad jobs.
//!
//! Cases cover every element-wise operator with broadcasting, the
//! with-scalar forms, comparisons and `where`, reductions over inner,
//! outer and several axes, the composites (softmax, log-softmax, layernorm,
//! rmsnorm), matmul with transposes and batch broadcasting, every view,
//! casts between dtypes, integer and half-precision arithmetic, symbolic
//! shapes at several bindings (1-sized and prime extents included), the
//! operators real models need (`engine_ops`: sin/cos in a rotary pattern,
//! …), a transformer encoder block, and differential cases drawn from a
//! seeded random-graph generator (`generated/SEED/…`).
#![forbid(unsafe_code)]

mod engine_ops;
mod generated;

use dvm_graph::models::{encoder_block, EncoderConfig};
use dvm_graph::{Graph, GraphError, NodeId};
use dvm_isa::{DType, Opcode};
use dvm_sym::Dim;
use dvm_tensor::Tensor;

/// One conformance case.
pub struct Case {
    /// Unique name (`family/detail`).
    pub name: String,
    /// The graph.
    pub graph: Graph,
    /// Named inputs.
    pub inputs: Vec<(String, Tensor)>,
    /// Relative tolerance against the reference device.
    pub rtol: f64,
    /// Absolute tolerance against the reference device.
    pub atol: f64,
}

impl Case {
    /// The inputs as the runtime API takes them.
    pub fn named(&self) -> Vec<(&str, &Tensor)> {
        self.inputs.iter().map(|(n, t)| (n.as_str(), t)).collect()
    }
}

/// Value ranges for generated inputs.
#[derive(Clone, Copy, Debug)]
pub enum Domain {
    /// Uniform in `[-2, 2)`.
    Any,
    /// Uniform in `[0.25, 4.25)`.
    Positive,
    /// Integers in `[-50, 50)` (for integer dtypes) or in `{-2, …, 2}` as floats.
    Small,
    /// As [`Domain::Any`], with about a third of the floats `-inf` (an
    /// attention mask).
    Masked,
}

/// Deterministic values for `dtype` in `domain`, seeded per input (the
/// demo's generator, [`dvm_tensor::sample_data`], mapped to the domain).
pub fn values(n: usize, seed: u32, domain: Domain, dtype: DType) -> Vec<f64> {
    dvm_tensor::sample_data(n, seed)
        .into_iter()
        .map(|x| {
            // `data` is uniform in [-1, 1) on a 2^-23 grid: exact in f64.
            let u = (f64::from(x) + 1.0) / 2.0;
            match (domain, dtype) {
                (_, DType::Bool) => f64::from(u8::from(u < 0.5)),
                (_, DType::I8) => (u * 100.0).floor() - 50.0,
                (_, DType::I32) => (u * 2000.0).floor() - 1000.0,
                (Domain::Any, _) => u * 4.0 - 2.0,
                (Domain::Masked, _) if u < 1.0 / 3.0 => f64::NEG_INFINITY,
                (Domain::Masked, _) => u * 4.0 - 2.0,
                (Domain::Positive, _) => u * 4.0 + 0.25,
                (Domain::Small, _) => (u * 5.0).floor() - 2.0,
            }
        })
        .collect()
}

/// Builds one case: a graph plus generated inputs.
struct Builder {
    name: String,
    g: Graph,
    inputs: Vec<(String, Tensor)>,
    rtol: f64,
    atol: f64,
}

/// Graph errors are boxed: they are large and only ever a suite bug.
type R<T> = Result<T, Box<GraphError>>;
type Built = R<Case>;

/// A generated input that does not fit its declaration (a suite bug).
fn invalid(name: &str, e: impl std::fmt::Display) -> GraphError {
    GraphError::Invalid {
        node: name.to_string(),
        op: "input",
        msg: e.to_string(),
    }
}

impl Builder {
    fn new(name: impl Into<String>) -> Builder {
        Builder {
            name: name.into(),
            g: Graph::new(),
            inputs: Vec::new(),
            rtol: 1e-5,
            atol: 1e-6,
        }
    }

    fn tol(mut self, rtol: f64, atol: f64) -> Builder {
        self.rtol = rtol;
        self.atol = atol;
        self
    }

    /// An input with symbolic `dims` fed a tensor of `shape`.
    fn input_dims(
        &mut self,
        name: &str,
        dtype: DType,
        dims: &[Dim],
        shape: &[u64],
        domain: Domain,
    ) -> R<NodeId> {
        let id = self.g.input(name, dtype, dims)?;
        let n = shape.iter().product::<u64>() as usize;
        let seed = self.inputs.len() as u32 * 7919 + self.name.len() as u32;
        let t = Tensor::from_f64(dtype, shape, &values(n, seed + 1, domain, dtype))
            .map_err(|e| invalid(name, e))?;
        self.inputs.push((name.to_string(), t));
        Ok(id)
    }

    /// An input of static `shape`.
    fn input(&mut self, name: &str, dtype: DType, shape: &[u64], domain: Domain) -> R<NodeId> {
        let dims: Vec<Dim> = shape.iter().map(|&d| Dim::from(d as i64)).collect();
        self.input_dims(name, dtype, &dims, shape, domain)
    }

    fn output(mut self, out: &[NodeId]) -> Built {
        for (i, &o) in out.iter().enumerate() {
            self.g.output(&format!("out{i}"), o)?;
        }
        Ok(Case {
            name: self.name,
            graph: self.g,
            inputs: self.inputs,
            rtol: self.rtol,
            atol: self.atol,
        })
    }
}

const F32: DType = DType::F32;

/// Every case of the suite.
///
/// # Errors
/// [`GraphError`] (boxed) if a case's graph is ill-formed (a bug in the suite).
pub fn cases() -> R<Vec<Case>> {
    let mut out = Vec::new();
    unary(&mut out)?;
    binary(&mut out)?;
    scalar_and_select(&mut out)?;
    reductions(&mut out)?;
    composites(&mut out)?;
    matmuls(&mut out)?;
    views(&mut out)?;
    dtypes(&mut out)?;
    symbolic(&mut out)?;
    empty(&mut out)?;
    engine_ops::cases(&mut out)?;
    generated::cases(&mut out)?;
    out.push(encoder()?);
    Ok(out)
}

fn unary(out: &mut Vec<Case>) -> R<()> {
    use Opcode::*;
    let ops = [
        (Abs, Domain::Any),
        (Neg, Domain::Any),
        (Exp, Domain::Any),
        (Log, Domain::Positive),
        (Sqrt, Domain::Positive),
        (Rsqrt, Domain::Positive),
        (Recip, Domain::Positive),
        (Tanh, Domain::Any),
        (Sigmoid, Domain::Any),
        (Relu, Domain::Any),
        (GeluTanh, Domain::Any),
        (GeluErf, Domain::Any),
        (Silu, Domain::Any),
        (Floor, Domain::Any),
        (Ceil, Domain::Any),
        (Round, Domain::Any),
        (Erf, Domain::Any),
        (Sin, Domain::Any),
        (Cos, Domain::Any),
        (IsFinite, Domain::Any),
    ];
    for (op, domain) in ops {
        let mut b = Builder::new(format!("unary/{}", op.mnemonic())).tol(1e-5, 1e-6);
        let x = b.input("x", F32, &[3, 1031], domain)?;
        let y = b.g.unary(op, x)?;
        out.push(b.output(&[y])?);
    }
    let mut b = Builder::new("unary/not");
    let x = b.input("x", DType::Bool, &[257], Domain::Any)?;
    let y = b.g.not(x)?;
    out.push(b.output(&[y])?);
    Ok(())
}

fn binary(out: &mut Vec<Case>) -> R<()> {
    use Opcode::*;
    // (a shape, b shape): same, row and column broadcast, both ways, scalar-like.
    let shapes: [(&[u64], &[u64]); 4] = [
        (&[7, 129], &[7, 129]),
        (&[7, 129], &[129]),
        (&[7, 1], &[1, 129]),
        (&[2, 5, 33], &[5, 1]),
    ];
    for op in [Add, Sub, Mul, Div, Max, Min] {
        for (i, (sa, sb)) in shapes.iter().enumerate() {
            let mut b = Builder::new(format!("binary/{}/{i}", op.mnemonic()));
            let dom_b = if op == Div {
                Domain::Positive
            } else {
                Domain::Any
            };
            let x = b.input("a", F32, sa, Domain::Any)?;
            let y = b.input("b", F32, sb, dom_b)?;
            let z = b.g.binary(op, x, y)?;
            out.push(b.output(&[z])?);
        }
    }
    let mut b = Builder::new("binary/pow").tol(1e-5, 1e-6);
    let x = b.input("a", F32, &[5, 67], Domain::Positive)?;
    let y = b.input("b", F32, &[67], Domain::Small)?;
    let z = b.g.pow(x, y)?;
    out.push(b.output(&[z])?);
    for op in [Eq, Ne, Lt, Le, Gt, Ge] {
        let mut b = Builder::new(format!("compare/{}", op.mnemonic()));
        let x = b.input("a", F32, &[9, 31], Domain::Small)?;
        let y = b.input("b", F32, &[31], Domain::Small)?;
        let z = b.g.binary(op, x, y)?;
        out.push(b.output(&[z])?);
    }
    for op in [And, Or] {
        let mut b = Builder::new(format!("logical/{}", op.mnemonic()));
        let x = b.input("a", DType::Bool, &[4, 65], Domain::Any)?;
        let y = b.input("b", DType::Bool, &[4, 65], Domain::Any)?;
        let z = b.g.binary(op, x, y)?;
        out.push(b.output(&[z])?);
    }
    Ok(())
}

fn scalar_and_select(out: &mut Vec<Case>) -> R<()> {
    use Opcode::*;
    for (op, v) in [
        (AddS, 1.5),
        (SubS, -0.25),
        (RSubS, 3.0),
        (MulS, 0.125),
        (DivS, 7.0),
        (RDivS, 2.0),
        (MaxS, 0.5),
        (MinS, -0.5),
        (PowS, 3.0),
        (LtS, 0.0),
        (GeS, 1.0),
    ] {
        let mut b = Builder::new(format!("scalar/{}", op.mnemonic()));
        let dom = if matches!(op, RDivS | PowS) {
            Domain::Positive
        } else {
            Domain::Any
        };
        let x = b.input("x", F32, &[3, 100], dom)?;
        let y = b.g.scalar(op, x, v)?;
        out.push(b.output(&[y])?);
    }
    let mut b = Builder::new("select/where-broadcast");
    let a = b.input("a", F32, &[6, 50], Domain::Any)?;
    let c = b.input("c", F32, &[50], Domain::Any)?;
    let cond = b.g.gt(a, c)?;
    let z = b.g.where_(cond, a, c)?;
    out.push(b.output(&[z])?);
    Ok(())
}

fn reductions(out: &mut Vec<Case>) -> R<()> {
    let shape: &[u64] = &[5, 37, 129];
    let axes: [&[i64]; 5] = [&[-1], &[1], &[0], &[0, 2], &[0, 1, 2]];
    for (i, ax) in axes.iter().enumerate() {
        for keep in [false, true] {
            for kind in ["sum", "mean", "max", "min"] {
                if keep && kind != "sum" {
                    continue;
                }
                let mut b = Builder::new(format!("reduce/{kind}/{i}/keep{}", u8::from(keep)))
                    .tol(1e-5, 1e-5);
                let x = b.input("x", F32, shape, Domain::Any)?;
                let y = match kind {
                    "sum" => b.g.sum(x, ax, keep)?,
                    "mean" => b.g.mean(x, ax, keep)?,
                    "max" => b.g.reduce_max(x, ax, keep)?,
                    _ => b.g.reduce_min(x, ax, keep)?,
                };
                out.push(b.output(&[y])?);
            }
        }
    }
    // Reduced extents too long for one pass through the UB: two stages
    // (a multiple of the chunk, with a tail, along the rows and the columns).
    for (kind, shape, axis) in [
        ("sum", [2u64, 100_003], -1i64),
        ("max", [2, 65_536], -1),
        ("min", [70_001, 3], 0),
        ("mean", [40_000, 5], 0),
    ] {
        let mut b = Builder::new(format!("reduce/two-stage/{kind}/{}x{}", shape[0], shape[1]))
            .tol(1e-5, 1e-4);
        let x = b.input("x", F32, &shape, Domain::Any)?;
        let y = match kind {
            "sum" => b.g.sum(x, &[axis], false)?,
            "max" => b.g.reduce_max(x, &[axis], false)?,
            "min" => b.g.reduce_min(x, &[axis], false)?,
            _ => b.g.mean(x, &[axis], true)?,
        };
        out.push(b.output(&[y])?);
    }
    // A long reduced axis and a 1-sized one.
    for (name, shape) in [("long", [2u64, 20_000]), ("unit", [301, 1])] {
        let mut b = Builder::new(format!("reduce/sum/{name}")).tol(1e-5, 1e-4);
        let x = b.input("x", F32, &shape, Domain::Any)?;
        let y = b.g.sum(x, &[-1], false)?;
        out.push(b.output(&[y])?);
    }
    Ok(())
}

fn composites(out: &mut Vec<Case>) -> R<()> {
    for (rows, cols) in [(1u64, 768u64), (17, 768), (5, 3001)] {
        let mut b = Builder::new(format!("softmax/{rows}x{cols}")).tol(1e-5, 1e-6);
        let x = b.input("x", F32, &[rows, cols], Domain::Any)?;
        let y = b.g.softmax(x, -1)?;
        out.push(b.output(&[y])?);
    }
    // Masked positions (`-inf`): their `exp` blocks leave the fast range.
    let mut b = Builder::new("softmax/masked-17x768").tol(1e-5, 1e-6);
    let x = b.input("x", F32, &[17, 768], Domain::Masked)?;
    let y = b.g.softmax(x, -1)?;
    out.push(b.output(&[y])?);
    // A vocabulary-sized softmax (GPT-2's 50257): too long for one fused pass.
    let mut b = Builder::new("softmax/vocab-50257").tol(1e-5, 1e-7);
    let x = b.input("x", F32, &[2, 50_257], Domain::Any)?;
    let y = b.g.softmax(x, -1)?;
    out.push(b.output(&[y])?);
    let mut b = Builder::new("softmax/axis0").tol(1e-5, 1e-6);
    let x = b.input("x", F32, &[33, 40], Domain::Any)?;
    let y = b.g.softmax(x, 0)?;
    out.push(b.output(&[y])?);
    let mut b = Builder::new("log_softmax").tol(1e-5, 1e-5);
    let x = b.input("x", F32, &[9, 257], Domain::Any)?;
    let y = b.g.log_softmax(x, -1)?;
    out.push(b.output(&[y])?);
    for rows in [1u64, 31] {
        let mut b = Builder::new(format!("layer_norm/{rows}")).tol(1e-4, 1e-5);
        let x = b.input("x", F32, &[rows, 768], Domain::Any)?;
        let gm = b.input("gamma", F32, &[768], Domain::Any)?;
        let be = b.input("beta", F32, &[768], Domain::Any)?;
        let y = b.g.layer_norm(x, gm, be, 1e-5)?;
        out.push(b.output(&[y])?);
    }
    let mut b = Builder::new("rms_norm").tol(1e-4, 1e-5);
    let x = b.input("x", F32, &[13, 512], Domain::Any)?;
    let gm = b.input("gamma", F32, &[512], Domain::Any)?;
    let y = b.g.rms_norm(x, gm, 1e-6)?;
    out.push(b.output(&[y])?);
    Ok(())
}

fn matmuls(out: &mut Vec<Case>) -> R<()> {
    type Shapes = (&'static [u64], &'static [u64], bool, bool);
    let cases: [(&str, Shapes); 7] = [
        ("square", (&[64, 64], &[64, 64], false, false)),
        ("odd", (&[17, 33], &[33, 65], false, false)),
        ("vector-row", (&[1, 300], &[300, 7], false, false)),
        ("trans_a", (&[40, 9], &[40, 21], true, false)),
        ("trans_b", (&[9, 40], &[21, 40], false, true)),
        ("batched", (&[3, 17, 32], &[3, 32, 19], false, false)),
        (
            "batch-broadcast",
            (&[2, 1, 8, 16], &[3, 16, 5], false, false),
        ),
    ];
    for (name, (sa, sb, ta, tb)) in cases {
        let mut b = Builder::new(format!("matmul/{name}")).tol(1e-4, 1e-5);
        let x = b.input("a", F32, sa, Domain::Any)?;
        let y = b.input("b", F32, sb, Domain::Any)?;
        let z = b.g.matmul(x, y, ta, tb)?;
        out.push(b.output(&[z])?);
    }
    // A mix kernel whose epilogue reads the matmul's own operand again (a
    // residual of the input): one buffer bound through two views.
    let mut b = Builder::new("matmul/residual-of-operand").tol(1e-4, 1e-5);
    let x = b.input("x", F32, &[17, 33], Domain::Any)?;
    let w = b.input("w", F32, &[33, 33], Domain::Any)?;
    let bias = b.input("bias", F32, &[33], Domain::Any)?;
    let m = b.g.matmul(x, w, false, false)?;
    let a = b.g.binary(Opcode::Add, m, bias)?;
    let r = b.g.binary(Opcode::Add, a, x)?;
    out.push(b.output(&[r])?);
    Ok(())
}

fn views(out: &mut Vec<Case>) -> R<()> {
    let c = |v: i64| Dim::from(v);
    let mut b = Builder::new("view/transpose-add");
    let x = b.input("x", F32, &[4, 6, 10], Domain::Any)?;
    let t = b.g.transpose(x, &[2, 0, 1])?;
    let y = b.g.adds(t, 1.0)?;
    out.push(b.output(&[y])?);

    let mut b = Builder::new("view/slice-step");
    let x = b.input("x", F32, &[20, 30], Domain::Any)?;
    let s = b.g.slice(x, &[(0, 1, -2, 3), (1, 5, i64::MAX, 2)])?;
    let y = b.g.exp(s)?;
    out.push(b.output(&[y])?);

    let mut b = Builder::new("view/concat");
    let x = b.input("x", F32, &[3, 7], Domain::Any)?;
    let z = b.input("z", F32, &[3, 11], Domain::Any)?;
    let y = b.g.concat(&[x, z, x], 1)?;
    out.push(b.output(&[y])?);

    let mut b = Builder::new("view/reshape-expand-squeeze");
    let x = b.input("x", F32, &[6, 4], Domain::Any)?;
    let r = b.g.reshape(x, &[c(2), c(3), c(4)])?;
    let u = b.g.unsqueeze(r, &[1])?;
    let e = b.g.expand(u, &[c(2), c(5), c(3), c(4)])?;
    let s = b.g.sum(e, &[1], true)?;
    let q = b.g.squeeze(s, &[1])?;
    out.push(b.output(&[q])?);
    Ok(())
}

fn dtypes(out: &mut Vec<Case>) -> R<()> {
    let targets = [DType::F16, DType::BF16, DType::I32, DType::I8, DType::Bool];
    for to in targets {
        let mut b = Builder::new(format!("cast/f32-{}", to.name())).tol(0.0, 0.0);
        let x = b.input("x", F32, &[3, 77], Domain::Small)?;
        let y = b.g.cast(x, to)?;
        out.push(b.output(&[y])?);
    }
    for from in [DType::F16, DType::BF16, DType::I32, DType::I8] {
        let mut b = Builder::new(format!("cast/{}-f32", from.name())).tol(0.0, 0.0);
        let x = b.input("x", from, &[3, 77], Domain::Small)?;
        let y = b.g.cast(x, F32)?;
        out.push(b.output(&[y])?);
    }
    for dt in [DType::F16, DType::BF16] {
        let mut b = Builder::new(format!("half/{}-mul-add-exp", dt.name())).tol(1e-2, 1e-2);
        let x = b.input("x", dt, &[5, 130], Domain::Any)?;
        let y = b.input("y", dt, &[130], Domain::Any)?;
        let m = b.g.mul(x, y)?;
        let a = b.g.add(m, x)?;
        let e = b.g.exp(a)?;
        out.push(b.output(&[e])?);
    }
    let mut b = Builder::new("int/i32-arith").tol(0.0, 0.0);
    let x = b.input("x", DType::I32, &[4, 99], Domain::Any)?;
    let y = b.input("y", DType::I32, &[99], Domain::Any)?;
    let s = b.g.add(x, y)?;
    let m = b.g.max(s, y)?;
    let r = b.g.sum(m, &[0], false)?;
    out.push(b.output(&[m, r])?);
    Ok(())
}

fn symbolic(out: &mut Vec<Case>) -> R<()> {
    for s in [1u64, 2, 97, 1024] {
        let mut b = Builder::new(format!("symbolic/S={s}")).tol(1e-5, 1e-5);
        let sym = b.g.symbol("S", 1, 4096)?;
        let sd = Dim::from(sym);
        let x = b.input_dims(
            "x",
            F32,
            &[sd.clone(), Dim::from(96)],
            &[s, 96],
            Domain::Any,
        )?;
        let w = b.input("w", F32, &[96], Domain::Any)?;
        let t = b.g.mul(x, w)?;
        let y = b.g.silu(t)?;
        let m = b.g.mean(y, &[0], false)?;
        out.push(b.output(&[y, m])?);
    }
    Ok(())
}

/// Zero-size tensors: a cache of `S` rows, empty at the first step,
/// concatenated with new rows, reduced over and contracted along its
/// empty axis (sums and products of nothing: 0).
fn empty(out: &mut Vec<Case>) -> R<()> {
    for s in [0u64, 5] {
        let mut b = Builder::new(format!("empty/S={s}")).tol(1e-5, 1e-5);
        let sym = b.g.symbol("S", 0, 4096)?;
        let sd = Dim::from(sym);
        let past = b.input_dims("past", F32, &[sd, Dim::from(16)], &[s, 16], Domain::Any)?;
        let new = b.input("new", F32, &[3, 16], Domain::Any)?;
        let cache = b.g.concat(&[past, new], 0)?;
        let p = b.g.softmax(cache, -1)?;
        let e = b.g.unary(Opcode::Exp, past)?;
        let t = b.g.sum(past, &[0], true)?;
        let t = b.g.scalar(Opcode::AddS, t, 1.0)?;
        let pt = b.g.transpose(past, &[1, 0])?;
        let gram = b.g.matmul(pt, past, false, false)?;
        out.push(b.output(&[p, e, t, gram])?);
    }
    Ok(())
}

fn encoder() -> Built {
    let cfg = EncoderConfig {
        hidden: 64,
        heads: 4,
        ffn: 128,
        max_len: 512,
    };
    let mut b = Builder::new("model/encoder-block").tol(1e-4, 1e-4);
    b.g = encoder_block(&cfg)?;
    let (h, f, s) = (cfg.hidden, cfg.ffn, 19u64);
    let shapes: [(&str, Vec<u64>); 13] = [
        ("x", vec![s, h]),
        ("wq", vec![h, h]),
        ("wk", vec![h, h]),
        ("wv", vec![h, h]),
        ("wo", vec![h, h]),
        ("w1", vec![h, f]),
        ("b1", vec![f]),
        ("w2", vec![f, h]),
        ("b2", vec![h]),
        ("g1", vec![h]),
        ("be1", vec![h]),
        ("g2", vec![h]),
        ("be2", vec![h]),
    ];
    for (i, (name, shape)) in shapes.iter().enumerate() {
        let n = shape.iter().product::<u64>() as usize;
        // Weights scaled by 1/sqrt(fan-in) keep activations O(1).
        let k = if name.starts_with('w') {
            1.0 / (shape[0] as f64).sqrt()
        } else {
            1.0
        };
        let v: Vec<f64> = values(n, 100 + i as u32, Domain::Any, F32)
            .iter()
            .map(|x| x * k * 0.5)
            .collect();
        let t = Tensor::from_f64(F32, shape, &v).map_err(|e| invalid(name, e))?;
        b.inputs.push((name.to_string(), t));
    }
    Ok(Case {
        name: b.name,
        graph: b.g,
        inputs: b.inputs,
        rtol: b.rtol,
        atol: b.atol,
    })
}

/// Checks `got` against `want` output by output within `rtol`/`atol`.
///
/// # Errors
/// A message naming the first output that differs (name, shape or dtype,
/// or the largest difference).
pub fn within(
    want: &[(String, Tensor)],
    got: &[(String, Tensor)],
    rtol: f64,
    atol: f64,
) -> Result<(), String> {
    if want.len() != got.len() {
        return Err(format!("{} outputs, expected {}", got.len(), want.len()));
    }
    for ((wn, w), (gn, g)) in want.iter().zip(got) {
        if wn != gn || w.shape() != g.shape() || w.dtype() != g.dtype() {
            return Err(format!(
                "output {gn} {:?} {:?}, expected {wn} {:?} {:?}",
                g.dtype(),
                g.shape(),
                w.dtype(),
                w.shape()
            ));
        }
        let close = w.allclose(g, rtol, atol).map_err(|e| e.to_string())?;
        if !close {
            let d = w.max_abs_diff(g).map_err(|e| e.to_string())?;
            return Err(format!(
                "output {wn}: max abs diff {d:e} (rtol {rtol}, atol {atol})"
            ));
        }
    }
    Ok(())
}

/// Checks that `a` and `b` hold the same bits.
///
/// # Errors
/// A message naming the first output and byte offset that differ.
pub fn bitwise(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> Result<(), String> {
    if a.len() != b.len() {
        return Err(format!("{} outputs against {}", a.len(), b.len()));
    }
    for ((an, at), (bn, bt)) in a.iter().zip(b) {
        if an != bn || at.shape() != bt.shape() || at.dtype() != bt.dtype() {
            return Err(format!(
                "output {an} and {bn} differ in name, shape or dtype"
            ));
        }
        if let Some(i) = at.bytes().iter().zip(bt.bytes()).position(|(x, y)| x != y) {
            return Err(format!("output {an}: first differing byte at offset {i}"));
        }
    }
    Ok(())
}
