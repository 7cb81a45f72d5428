//! Model graphs built with the builder API (the demo's encoder block, and
//! test workloads).

use dvm_isa::{DType, Opcode};

use crate::{Graph, GraphError, NodeId};
use dvm_sym::Dim;

/// Sizes of a transformer encoder block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncoderConfig {
    /// Model width.
    pub hidden: u64,
    /// Attention heads (`hidden` must be a multiple).
    pub heads: u64,
    /// MLP width.
    pub ffn: u64,
    /// Largest sequence length the symbol `S` may take.
    pub max_len: i64,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        EncoderConfig {
            hidden: 256,
            heads: 4,
            ffn: 1024,
            max_len: 8192,
        }
    }
}

/// A post-norm transformer encoder block over `x: [S, hidden]` with a
/// symbolic sequence length `S`:
/// `h = LN(x + Attn(x))`, `y = LN(h + W2·gelu(W1·h + b1) + b2)`, with
/// multi-head attention `softmax(q·kᵀ/√d)·v`. Weights are graph inputs
/// (`wq`, `wk`, `wv`, `wo`, `w1`, `b1`, `w2`, `b2`, `g1`, `be1`, `g2`, `be2`).
///
/// # Errors
/// [`GraphError`] only if the configuration is inconsistent (e.g. `hidden`
/// not a multiple of `heads`).
pub fn encoder_block(cfg: &EncoderConfig) -> Result<Graph, GraphError> {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, cfg.max_len)?;
    let (h, nh, f) = (cfg.hidden as i64, cfg.heads as i64, cfg.ffn as i64);
    let d = h / nh.max(1);
    let sd = Dim::from(s);
    let c = |v: i64| Dim::from(v);
    let f32 = DType::F32;
    let x = g.input("x", f32, &[sd.clone(), c(h)])?;
    let wq = g.input("wq", f32, &[c(h), c(h)])?;
    let wk = g.input("wk", f32, &[c(h), c(h)])?;
    let wv = g.input("wv", f32, &[c(h), c(h)])?;
    let wo = g.input("wo", f32, &[c(h), c(h)])?;
    let w1 = g.input("w1", f32, &[c(h), c(f)])?;
    let b1 = g.input("b1", f32, &[c(f)])?;
    let w2 = g.input("w2", f32, &[c(f), c(h)])?;
    let b2 = g.input("b2", f32, &[c(h)])?;
    let g1 = g.input("g1", f32, &[c(h)])?;
    let be1 = g.input("be1", f32, &[c(h)])?;
    let g2 = g.input("g2", f32, &[c(h)])?;
    let be2 = g.input("be2", f32, &[c(h)])?;

    // Attention: [S, h] → [heads, S, d].
    let heads = |g: &mut Graph, t| -> Result<_, GraphError> {
        let r = g.reshape(t, &[sd.clone(), c(nh), c(d)])?;
        g.transpose(r, &[1, 0, 2])
    };
    let q = g.matmul(x, wq, false, false)?;
    let k = g.matmul(x, wk, false, false)?;
    let v = g.matmul(x, wv, false, false)?;
    let (q, k, v) = (heads(&mut g, q)?, heads(&mut g, k)?, heads(&mut g, v)?);
    let scores = g.matmul(q, k, false, true)?;
    let scaled = g.scalar(Opcode::MulS, scores, 1.0 / (d as f64).sqrt())?;
    let p = g.softmax(scaled, -1)?;
    let ctx = g.matmul(p, v, false, false)?;
    let ctx = g.transpose(ctx, &[1, 0, 2])?;
    let ctx = g.reshape(ctx, &[sd.clone(), c(h)])?;
    let attn = g.matmul(ctx, wo, false, false)?;
    let r1 = g.binary(Opcode::Add, x, attn)?;
    let h1 = g.layer_norm(r1, g1, be1, 1e-5)?;

    // MLP.
    let m1 = g.matmul(h1, w1, false, false)?;
    let m1 = g.binary(Opcode::Add, m1, b1)?;
    let a1 = g.unary(Opcode::GeluTanh, m1)?;
    let m2 = g.matmul(a1, w2, false, false)?;
    let m2 = g.binary(Opcode::Add, m2, b2)?;
    let r2 = g.binary(Opcode::Add, h1, m2)?;
    let y = g.layer_norm(r2, g2, be2, 1e-5)?;
    g.output("y", y)?;
    Ok(g)
}

/// Thirty operations as an eager program records them, with concrete
/// shapes: a ten-operation cycle (matmul, bias, GELU, residual,
/// layernorm, scaling, softmax, product, tanh, rmsnorm) three times over,
/// started at operation `shift` (shifts 0 to 9 are ten structures of the
/// same operations). The fusion benchmark decides it; the fuser's tests
/// compare the two passes on it.
///
/// # Errors
/// None in practice (the shapes agree); a builder's [`GraphError`] would
/// be passed on.
pub fn mixed_window(shift: usize) -> Result<Graph, GraphError> {
    let c = Dim::from;
    let mut g = Graph::new();
    let x = g.input("v0", DType::F32, &[c(64), c(256)])?;
    let w = g.input("v1", DType::F32, &[c(256), c(256)])?;
    let b = g.input("v2", DType::F32, &[c(256)])?;
    let gm = g.input("v3", DType::F32, &[c(256)])?;
    let mut cur = x;
    for i in 0..30 {
        cur = match (i + shift) % 10 {
            0 => g.matmul(cur, w, false, false),
            1 => g.binary(Opcode::Add, cur, b),
            2 => g.unary(Opcode::GeluTanh, cur),
            3 => g.binary(Opcode::Add, cur, x),
            4 => g.layer_norm(cur, gm, b, 1e-5),
            5 => g.scalar(Opcode::MulS, cur, 0.5),
            6 => g.softmax(cur, -1),
            7 => g.binary(Opcode::Mul, cur, x),
            8 => g.unary(Opcode::Tanh, cur),
            _ => g.rms_norm(cur, gm, 1e-6),
        }?;
    }
    g.output("t", cur)?;
    Ok(g)
}

/// A generated graph with every composite the decomposition knows, for
/// property tests and for comparing fusion plans across changes: `seed`
/// drives a small LCG; `rows`, when given, fixes the row count (a concrete
/// window, as the eager API records), else the seed picks a symbolic `S` or
/// 16 rows.
pub fn generated_graph(seed: u64, rows: Option<i64>) -> Graph {
    let mut r = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let mut next = |m: u64| {
        r = r
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (r >> 33) % m
    };
    let symbolic = next(2) == 0;
    let mut g = Graph::new();
    let rows: Dim = match rows {
        Some(rows) => Dim::from(rows),
        None if symbolic => g.symbol("S", 1, 4096).expect("fixed, valid inputs").into(),
        None => Dim::from(16),
    };
    let x = g
        .input("x", DType::F32, &[rows.clone(), Dim::from(8)])
        .expect("fixed, valid inputs");
    let y = g
        .input("y", DType::F32, &[Dim::from(8)])
        .expect("fixed, valid inputs");
    let w = g
        .input("w", DType::F32, &[Dim::from(8), Dim::from(8)])
        .expect("fixed, valid inputs");
    let z = g
        .input("z", DType::F32, &[rows, Dim::from(8)])
        .expect("fixed, valid inputs");
    let mut pool = vec![x, y, w, z];
    let len = 1 + next(40);
    for i in 0..len {
        let pick = |k: u64| pool[pool.len() - 1 - (k as usize % pool.len().min(6))];
        let (a, b) = (pick(next(6)), pick(next(6)));
        let res = match next(16) {
            0 => g.unary(Opcode::Exp, a),
            1 => g.unary(Opcode::Tanh, a),
            2 | 3 => g.binary(Opcode::Add, a, b),
            4 => g.binary(Opcode::Mul, a, b),
            5 => g.sum(a, &[-1], next(2) == 0),
            6 => g.softmax(a, -1),
            7 => g.log_softmax(a, if next(2) == 0 { -1 } else { 0 }),
            8 => g.layer_norm(a, y, y, 1e-5),
            9 => g.rms_norm(a, y, 1e-6),
            10 => g.mean(a, &[-1], true),
            11 => g.matmul(a, b, false, false),
            12 => g.transpose(a, &[1, 0]),
            13 => g.softmax(a, 0),
            14 => g.reduce_max(a, &[0], true),
            _ => g.scalar(Opcode::MulS, a, 0.5),
        };
        if let Ok(n) = res {
            pool.push(n);
            if next(5) == 0 {
                let _ = g.output(&format!("o{i}"), n);
            }
        }
    }
    let last = *pool.last().expect("the inputs are in the pool");
    g.output("out", last).expect("a fresh output name");
    g
}

/// An attention-like stack for fusion tests: `layers` layers over `x: [S, 64]`, each `softmax(x·w · 0.125 + mask)`
/// with one `w` and one `mask` for all (output `y`), and `x` and `mask`.
pub fn masked_layers(layers: usize) -> (Graph, NodeId, NodeId) {
    let mut g = Graph::new();
    let s = Dim::from(g.symbol("S", 1, 4096).expect("fixed, valid inputs"));
    let x = g
        .input("x", DType::F32, &[s, Dim::from(64)])
        .expect("fixed, valid inputs");
    let mask = g
        .input("mask", DType::F32, &[Dim::from(64)])
        .expect("fixed, valid inputs");
    let w = g
        .input("w", DType::F32, &[Dim::from(64), Dim::from(64)])
        .expect("fixed, valid inputs");
    let mut h = x;
    for _ in 0..layers {
        let m = g.matmul(h, w, false, false).expect("fixed, valid inputs");
        let sc = g
            .scalar(Opcode::MulS, m, 0.125)
            .expect("fixed, valid inputs");
        let a = g
            .binary(Opcode::Add, sc, mask)
            .expect("fixed, valid inputs");
        h = g.softmax(a, -1).expect("fixed, valid inputs");
    }
    g.output("y", h).expect("fixed, valid inputs");
    (g, x, mask)
}

/// Adds the symbol `S` (1 to `max_len`) and an input `name: [S, width]`.
fn rows_input(g: &mut Graph, name: &str, width: i64, max_len: i64) -> Result<NodeId, GraphError> {
    let s = match g.scope().lookup("S") {
        Some(s) => s,
        None => g.symbol("S", 1, max_len)?,
    };
    g.input(name, DType::F32, &[s.into(), Dim::from(width)])
}

/// `y = gelu_tanh(x·w + b)` over `x: [S, hidden]`, `w: [hidden, hidden]`,
/// `b: [hidden]`; `S` runs from 1 to `max_len`.
///
/// # Errors
/// [`GraphError`] for a width or `max_len` the builder refuses (below 1).
pub fn gelu_linear(hidden: i64, max_len: i64) -> Result<Graph, GraphError> {
    linear_then(hidden, max_len, Opcode::GeluTanh)
}

/// `y = relu(x·w + b)`, with the inputs of [`gelu_linear`].
///
/// # Errors
/// As [`gelu_linear`].
pub fn matmul_bias_relu(hidden: i64, max_len: i64) -> Result<Graph, GraphError> {
    linear_then(hidden, max_len, Opcode::Relu)
}

fn linear_then(hidden: i64, max_len: i64, act: Opcode) -> Result<Graph, GraphError> {
    let mut g = Graph::new();
    let x = rows_input(&mut g, "x", hidden, max_len)?;
    let w = g.input("w", DType::F32, &[Dim::from(hidden), Dim::from(hidden)])?;
    let b = g.input("b", DType::F32, &[Dim::from(hidden)])?;
    let m = g.matmul(x, w, false, false)?;
    let a = g.binary(Opcode::Add, m, b)?;
    let y = g.unary(act, a)?;
    g.output("y", y)?;
    Ok(g)
}

/// `y = softmax(x)` over the last axis of `x: [S, hidden]`.
///
/// # Errors
/// As [`gelu_linear`].
pub fn softmax_rows(hidden: i64, max_len: i64) -> Result<Graph, GraphError> {
    let mut g = Graph::new();
    let x = rows_input(&mut g, "x", hidden, max_len)?;
    let y = g.softmax(x, -1)?;
    g.output("y", y)?;
    Ok(g)
}

/// `y = layer_norm(x) · g + b` (ε = 1e-5) over the rows of `x: [S, hidden]`.
///
/// # Errors
/// As [`gelu_linear`].
pub fn layer_norm_rows(hidden: i64, max_len: i64) -> Result<Graph, GraphError> {
    let mut g = Graph::new();
    let x = rows_input(&mut g, "x", hidden, max_len)?;
    let gm = g.input("g", DType::F32, &[Dim::from(hidden)])?;
    let bt = g.input("b", DType::F32, &[Dim::from(hidden)])?;
    let y = g.layer_norm(x, gm, bt, 1e-5)?;
    g.output("y", y)?;
    Ok(g)
}

/// `y = layer_norm(x + r) · g + b` (ε = 1e-5), a residual add and its norm,
/// over `x, r: [S, hidden]`.
///
/// # Errors
/// As [`gelu_linear`].
pub fn add_layer_norm(hidden: i64, max_len: i64) -> Result<Graph, GraphError> {
    let mut g = Graph::new();
    let x = rows_input(&mut g, "x", hidden, max_len)?;
    let r = rows_input(&mut g, "r", hidden, max_len)?;
    let gm = g.input("g", DType::F32, &[Dim::from(hidden)])?;
    let bt = g.input("b", DType::F32, &[Dim::from(hidden)])?;
    let a = g.binary(Opcode::Add, x, r)?;
    let y = g.layer_norm(a, gm, bt, 1e-5)?;
    g.output("y", y)?;
    Ok(g)
}

/// `y = Σ x` over the last axis of `x: [S, hidden]` (`y: [S]`).
///
/// # Errors
/// As [`gelu_linear`].
pub fn row_sum(hidden: i64, max_len: i64) -> Result<Graph, GraphError> {
    let mut g = Graph::new();
    let x = rows_input(&mut g, "x", hidden, max_len)?;
    let y = g.sum(x, &[-1], false)?;
    g.output("y", y)?;
    Ok(g)
}

/// Attention `o = softmax(q·kᵀ / √head_dim)·v` over `q, k, v: [heads, S,
/// head_dim]`.
///
/// # Errors
/// As [`gelu_linear`].
pub fn attention(heads: i64, head_dim: i64, max_len: i64) -> Result<Graph, GraphError> {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, max_len)?;
    let mut qkv = Vec::with_capacity(3);
    for name in ["q", "k", "v"] {
        qkv.push(g.input(
            name,
            DType::F32,
            &[Dim::from(heads), s.into(), Dim::from(head_dim)],
        )?);
    }
    let sc = g.matmul(qkv[0], qkv[1], false, true)?;
    let sc = g.scalar(Opcode::MulS, sc, 1.0 / (head_dim as f64).sqrt())?;
    let p = g.softmax(sc, -1)?;
    let o = g.matmul(p, qkv[2], false, false)?;
    g.output("o", o)?;
    Ok(g)
}
