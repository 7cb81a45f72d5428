//! The CPU device against the f64 reference device on whole graphs.

use dvm_graph::models::{encoder_block, EncoderConfig};
use dvm_graph::reference;
use dvm_graph::Graph;
use dvm_isa::{DType, Opcode};
use dvm_runtime::{Prepared, Runtime};
use dvm_sym::{Bindings, Dim};
use dvm_tensor::sample_data as data;
use dvm_tensor::Tensor;

fn tensor(shape: &[u64], seed: u32) -> Tensor {
    let n: u64 = shape.iter().product();
    Tensor::from_f32(shape, &data(n as usize, seed)).unwrap()
}

/// Runs `g` on both devices and compares every output.
fn check(g: &Graph, inputs: &[(&str, Tensor)], rtol: f64, atol: f64) {
    let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
    let want = reference::run(g, &named, &Bindings::new()).expect("reference runs");
    let rt = Runtime::new(2, 64);
    let prepared = Prepared::new(g).expect("decomposes");
    let got = rt.run(&prepared, &named).expect("cpu runs");
    assert_eq!(want.len(), got.len());
    for ((wn, w), (gn, t)) in want.iter().zip(&got) {
        assert_eq!(wn, gn);
        assert_eq!(w.shape(), t.shape(), "{wn}");
        assert_eq!(w.dtype(), t.dtype(), "{wn}");
        let diff = w.max_abs_diff(t).unwrap();
        assert!(
            w.allclose(t, rtol, atol).unwrap(),
            "{wn}: max abs diff {diff}"
        );
    }
}

fn c(v: i64) -> Dim {
    Dim::from(v)
}

#[test]
fn encoder_block_matches_reference_across_lengths() {
    let cfg = EncoderConfig {
        hidden: 64,
        heads: 4,
        ffn: 128,
        max_len: 512,
    };
    let g = encoder_block(&cfg).unwrap();
    let (h, f) = (cfg.hidden, cfg.ffn);
    for s in [1u64, 7, 33] {
        let scale = |t: Tensor, k: f32| {
            let v: Vec<f32> = t.to_f32_vec().iter().map(|x| x * k).collect();
            Tensor::from_f32(t.shape(), &v).unwrap()
        };
        let w = 1.0 / (h as f32).sqrt();
        let inputs = vec![
            ("x", tensor(&[s, h], 1)),
            ("wq", scale(tensor(&[h, h], 2), w)),
            ("wk", scale(tensor(&[h, h], 3), w)),
            ("wv", scale(tensor(&[h, h], 4), w)),
            ("wo", scale(tensor(&[h, h], 5), w)),
            ("w1", scale(tensor(&[h, f], 6), w)),
            ("b1", tensor(&[f], 7)),
            ("w2", scale(tensor(&[f, h], 8), 1.0 / (f as f32).sqrt())),
            ("b2", tensor(&[h], 9)),
            ("g1", tensor(&[h], 10)),
            ("be1", tensor(&[h], 11)),
            ("g2", tensor(&[h], 12)),
            ("be2", tensor(&[h], 13)),
        ];
        check(&g, &inputs, 1e-4, 1e-4);
    }
}

#[test]
fn views_reductions_and_concat() {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 64).unwrap();
    let x = g
        .input("x", DType::F32, &[Dim::from(s), c(6), c(5)])
        .unwrap();
    let t = g.transpose(x, &[2, 0, 1]).unwrap(); // [5, S, 6]
    let sl = g.slice(t, &[(2, 1, 6, 2)]).unwrap(); // [5, S, 3]
    let r = g.sum(sl, &[0, 2], false).unwrap(); // [S]
    let m = g.reduce_max(x, &[1], true).unwrap(); // [S,1,5]
    let e = g.binary(Opcode::Sub, x, m).unwrap();
    let cat = g.concat(&[x, e], 1).unwrap(); // [S, 12, 5]
    let sm = g.softmax(cat, 1).unwrap();
    g.output("r", r).unwrap();
    g.output("sm", sm).unwrap();
    g.output("t", t).unwrap();
    for s in [1u64, 4, 13] {
        check(&g, &[("x", tensor(&[s, 6, 5], 20 + s as u32))], 1e-5, 1e-6);
    }
}

#[test]
fn batched_matmul_with_broadcast_and_transposes() {
    let mut g = Graph::new();
    let b = g.symbol("B", 1, 8).unwrap();
    let a = g
        .input("a", DType::F32, &[Dim::from(b), c(3), c(17), c(9)])
        .unwrap();
    let w = g.input("w", DType::F32, &[c(3), c(11), c(9)]).unwrap();
    let y = g.matmul(a, w, false, true).unwrap(); // [B,3,17,11]
    let y2 = g.unary(Opcode::Tanh, y).unwrap();
    g.output("y", y2).unwrap();
    for bv in [1u64, 2] {
        check(
            &g,
            &[
                ("a", tensor(&[bv, 3, 17, 9], 30)),
                ("w", tensor(&[3, 11, 9], 31)),
            ],
            1e-5,
            1e-5,
        );
    }
}

#[test]
fn casts_compares_and_where() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[c(10), c(7)]).unwrap();
    let y = g.input("y", DType::F32, &[c(7)]).unwrap();
    let lt = g.binary(Opcode::Lt, x, y).unwrap();
    let w = g.where_(lt, x, y).unwrap();
    let h = g.cast(w, DType::F16).unwrap();
    let e = g.unary(Opcode::Exp, h).unwrap();
    let back = g.cast(e, DType::F32).unwrap();
    let i = g.cast(x, DType::I32).unwrap();
    g.output("back", back).unwrap();
    g.output("lt", lt).unwrap();
    g.output("i", i).unwrap();
    check(
        &g,
        &[("x", tensor(&[10, 7], 40)), ("y", tensor(&[7], 41))],
        2e-3,
        1e-3,
    );
}

/// Zero-size tensors (an empty KV cache at step 0): the CPU device gives
/// the reference's results, at 0 and at other lengths, fused or not; a
/// maximum over nothing is refused by both.
#[test]
fn zero_size_tensors_match_the_reference() {
    let mut g = Graph::new();
    let s = g.symbol("S", 0, 64).unwrap();
    let past = g.input("past", DType::F32, &[Dim::from(s), c(4)]).unwrap();
    let new = g.input("new", DType::F32, &[c(2), c(4)]).unwrap();
    let gamma = g.input("g", DType::F32, &[c(4)]).unwrap();
    let cache = g.concat(&[past, new], 0).unwrap();
    let probs = g.softmax(cache, -1).unwrap();
    g.output("probs", probs).unwrap();
    let e = g.unary(Opcode::Exp, past).unwrap();
    let e = g.layer_norm(e, gamma, gamma, 1e-5).unwrap();
    g.output("normed", e).unwrap();
    let total = g.sum(past, &[0], false).unwrap();
    let total = g.scalar(Opcode::AddS, total, 1.0).unwrap();
    g.output("total", total).unwrap();
    let pt = g.transpose(past, &[1, 0]).unwrap();
    let gram = g.matmul(pt, past, false, false).unwrap();
    g.output("gram", gram).unwrap();
    for rows in [0u64, 3] {
        let inputs = [
            ("past", tensor(&[rows, 4], 1)),
            ("new", tensor(&[2, 4], 2)),
            ("g", tensor(&[4], 3)),
        ];
        check(&g, &inputs, 1e-5, 1e-5);
    }

    let mut g = Graph::new();
    let s = g.symbol("S", 0, 64).unwrap();
    let x = g.input("x", DType::F32, &[Dim::from(s), c(4)]).unwrap();
    let m = g.reduce(x, dvm_graph::ReduceOp::Max, &[0], false).unwrap();
    g.output("m", m).unwrap();
    let empty = Tensor::from_f32(&[0, 4], &[]).unwrap();
    let rt = Runtime::new(1, 8);
    let prepared = Prepared::new(&g).expect("prepares");
    let e = rt.run(&prepared, &[("x", &empty)]).unwrap_err().to_string();
    assert!(e.contains("zero elements"), "{e}");
    assert!(reference::run(&g, &[("x", &empty)], &Bindings::new()).is_err());
}

#[test]
fn i64_graphs_are_refused_by_compiled_devices_by_name() {
    let mut g = Graph::new();
    let x = g.input("ids", DType::I64, &[c(4)]).unwrap();
    let y = g.adds(x, 1.0).unwrap();
    g.output("y", y).unwrap();
    let t = Tensor::from_f64(DType::I64, &[4], &[0.0, 1.0, 2.0, 3.0]).unwrap();
    let named = [("ids", &t)];
    let want = reference::run(&g, &named, &Bindings::new()).unwrap();
    assert_eq!(want[0].1.to_f64_vec(), [1.0, 2.0, 3.0, 4.0]);
    let rt = Runtime::new(1, 64);
    let prepared = Prepared::new(&g).unwrap();
    let e = rt.run(&prepared, &named).unwrap_err().to_string();
    assert!(e.contains("ids") && e.contains("i64"), "{e}");
}

#[test]
fn gather_by_positions_and_tokens_matches_the_reference() {
    for (with_tok, with_pos) in [(true, false), (false, true), (true, true)] {
        let mut g = Graph::new();
        let s = g.symbol("S", 1, 64).unwrap();
        let wte = g.input("wte", DType::F32, &[c(97), c(24)]).unwrap();
        let wpe = g.input("wpe", DType::F32, &[c(64), c(24)]).unwrap();
        let tokens = g
            .input("tokens", DType::I32, &[c(1), Dim::from(s)])
            .unwrap();
        let tok = g.gather(wte, tokens, 0).unwrap();
        let pos = g.iota(DType::I32, &[Dim::from(s)], 0).unwrap();
        let pe = g.gather(wpe, pos, 0).unwrap();
        let y = match (with_tok, with_pos) {
            (true, false) => tok,
            (false, true) => pe,
            _ => g.add(tok, pe).unwrap(),
        };
        g.output("y", y).unwrap();
        let ids: Vec<f64> = (0..7).map(|i| ((i * 37) % 97) as f64).collect();
        let inputs = vec![
            ("wte", tensor(&[97, 24], 1)),
            ("wpe", tensor(&[64, 24], 2)),
            (
                "tokens",
                Tensor::from_f64(DType::I32, &[1, 7], &ids).unwrap(),
            ),
        ];
        check(&g, &inputs, 1e-6, 1e-6);
    }
}

#[test]
fn gather_out_of_range_is_an_error_on_the_reference_and_clamped_on_the_cpu() {
    let mut g = Graph::new();
    let w = g.input("w", DType::F32, &[c(4), c(3)]).unwrap();
    let ids = g.input("ids", DType::I32, &[c(6)]).unwrap();
    let y = g.gather(w, ids, 0).unwrap();
    g.output("y", y).unwrap();
    let table: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let w_t = Tensor::from_f32(&[4, 3], &table).unwrap();
    let ids_t = Tensor::from_f64(DType::I32, &[6], &[1.0, -1.0, 4.0, -5.0, 99.0, -99.0]).unwrap();
    let named = [("w", &w_t), ("ids", &ids_t)];
    let e = reference::run(&g, &named, &Bindings::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("index 4") && e.contains("extent 4"), "{e}");
    let rt = Runtime::new(2, 64);
    let out = rt.run(&Prepared::new(&g).unwrap(), &named).unwrap();
    // 1, the last row, then 4 and 99 clamped to the last row, -5 (−1
    // after adding the extent) and -99 to the first.
    let rows = [1usize, 3, 3, 0, 3, 0];
    let want: Vec<f32> = rows
        .iter()
        .flat_map(|&r| table[r * 3..r * 3 + 3].to_vec())
        .collect();
    assert_eq!(out["y"].to_f32_vec(), want);
    // i64 indices run on the reference; the compiled devices refuse them
    // by name.
    let mut g = Graph::new();
    let w = g.input("w", DType::F32, &[c(4), c(3)]).unwrap();
    let ids = g.input("ids", DType::I64, &[c(2)]).unwrap();
    let y = g.gather(w, ids, 0).unwrap();
    g.output("y", y).unwrap();
    let ids_t = Tensor::from_f64(DType::I64, &[2], &[3.0, -4.0]).unwrap();
    let named = [("w", &w_t), ("ids", &ids_t)];
    let want = reference::run(&g, &named, &Bindings::new()).unwrap();
    assert_eq!(want[0].1.to_f32_vec(), [9.0, 10.0, 11.0, 0.0, 1.0, 2.0]);
    let e = rt
        .run(&Prepared::new(&g).unwrap(), &named)
        .unwrap_err()
        .to_string();
    assert!(e.contains("ids") && e.contains("i64"), "{e}");
}
