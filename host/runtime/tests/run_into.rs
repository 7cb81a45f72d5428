//! Repeated calls: `Runtime::run_into` writes into the caller's tensors the
//! bytes `Runtime::run` returns, call after call, and refuses tensors that
//! do not fit the graph's outputs by name before anything runs; the plans a
//! prepared graph keeps are the ones a fresh runtime lowers.

use dvm_graph::Graph;
use dvm_isa::{DType, Opcode};
use dvm_runtime::{Prepared, RunError, Runtime};
use dvm_sym::{Bindings, Dim};
use dvm_tensor::sample_data as data;
use dvm_tensor::Tensor;

fn tensor(shape: &[u64], seed: u32) -> Tensor {
    let n: u64 = shape.iter().product();
    Tensor::from_f32(shape, &data(n as usize, seed)).unwrap()
}

/// `p = softmax(x + b)`, `s = x + b`, and `x` itself (an input as output),
/// over `[S, 64]`.
fn graph() -> Graph {
    let mut g = Graph::new();
    let s = Dim::from(g.symbol("S", 1, 1 << 20).unwrap());
    let x = g.input("x", DType::F32, &[s, Dim::from(64)]).unwrap();
    let b = g.input("b", DType::F32, &[Dim::from(64)]).unwrap();
    let y = g.binary(Opcode::Add, x, b).unwrap();
    let p = g.softmax(y, -1).unwrap();
    g.output("p", p).unwrap();
    g.output("s", y).unwrap();
    g.output("x", x).unwrap();
    g
}

#[test]
fn run_into_writes_what_run_returns() {
    let g = graph();
    let rt = Runtime::new(2, 16);
    let prepared = Prepared::new(&g).unwrap();
    let b = tensor(&[64], 2);
    for rows in [1u64, 17, 300] {
        let x = tensor(&[rows, 64], rows as u32);
        let inputs = [("x", &x), ("b", &b)];
        let want = rt.run(&prepared, &inputs).unwrap();
        let mut p = Tensor::full(DType::F32, &[rows, 64], 7.0).unwrap();
        let mut s = Tensor::full(DType::F32, &[rows, 64], 7.0).unwrap();
        let mut xo = Tensor::full(DType::F32, &[rows, 64], 7.0).unwrap();
        // Twice into the same tensors: the second call overwrites the first.
        for _ in 0..2 {
            let mut outs = [("s", &mut s), ("x", &mut xo), ("p", &mut p)];
            rt.run_into(&prepared, &inputs, &Bindings::new(), &mut outs)
                .unwrap();
        }
        for (name, t) in &want {
            let got = match name {
                "p" => &p,
                "s" => &s,
                _ => &xo,
            };
            assert_eq!(t.bytes(), got.bytes(), "S={rows} {name}");
        }
    }
}

#[test]
fn tensors_that_do_not_fit_are_refused_by_name() {
    let g = graph();
    let rt = Runtime::new(1, 16);
    let prepared = Prepared::new(&g).unwrap();
    let (x, b) = (tensor(&[5, 64], 1), tensor(&[64], 2));
    let inputs = [("x", &x), ("b", &b)];
    let ok = || Tensor::full(DType::F32, &[5, 64], 3.0).unwrap();
    let (mut p, mut s, mut xo) = (ok(), ok(), ok());
    let mut wrong_shape = Tensor::full(DType::F32, &[6, 64], 3.0).unwrap();
    let mut wrong_dtype = Tensor::full(DType::I32, &[5, 64], 3.0).unwrap();
    let mut extra = ok();
    let refused = |outs: &mut [(&str, &mut Tensor)]| {
        rt.run_into(&prepared, &inputs, &Bindings::new(), outs)
            .unwrap_err()
    };
    let e = refused(&mut [("p", &mut p), ("s", &mut s)]);
    assert!(
        matches!(&e, RunError::Output { name, .. } if name == "x"),
        "{e}"
    );
    let e = refused(&mut [("p", &mut wrong_shape), ("s", &mut s), ("x", &mut xo)]);
    assert!(
        matches!(&e, RunError::Output { name, .. } if name == "p"),
        "{e}"
    );
    let mut twice = ok();
    let e = refused(&mut [
        ("p", &mut p),
        ("s", &mut s),
        ("x", &mut xo),
        ("s", &mut twice),
    ]);
    assert!(e.to_string().contains("given twice"), "{e}");
    let e = refused(&mut [("p", &mut p), ("s", &mut wrong_dtype), ("x", &mut xo)]);
    assert!(
        e.to_string().contains("output `s`") && e.to_string().contains("I32"),
        "{e}"
    );
    let e = refused(&mut [
        ("p", &mut p),
        ("s", &mut s),
        ("x", &mut xo),
        ("q", &mut extra),
    ]);
    assert!(
        matches!(&e, RunError::Output { name, .. } if name == "q"),
        "{e}"
    );
    // Nothing was written by the refused calls.
    for t in [&p, &s, &xo, &extra, &twice] {
        assert!(t.to_f32_vec().iter().all(|&v| v == 3.0));
    }
}

/// A prepared graph keeps its recent plans: calls that cycle through more
/// shapes than it keeps, on two runtimes, get the plan a fresh runtime
/// lowers and the bytes of a fresh run every time.
#[test]
fn recent_plans_are_reused_and_stay_right() {
    let g = graph();
    let prepared = Prepared::new(&g).unwrap();
    let (a, b) = (Runtime::new(1, 64), Runtime::new(2, 64));
    let bias = tensor(&[64], 2);
    for (k, rows) in [5u64, 9, 5, 9, 1, 2, 3, 4, 6, 7, 8, 10, 11, 5, 9]
        .into_iter()
        .enumerate()
    {
        let x = tensor(&[rows, 64], k as u32);
        let inputs = [("x", &x), ("b", &bias)];
        let bindings = prepared
            .graph()
            .bind_tensors(&inputs, &Bindings::new())
            .unwrap();
        for rt in [&a, &b] {
            let fresh = Runtime::new(rt.pool().cores(), 64);
            let other = Prepared::new(&g).unwrap();
            let (want, _) = fresh.plan(&other, &bindings).unwrap();
            let (got, _) = rt.plan(&prepared, &bindings).unwrap();
            assert_eq!(got, want, "S={rows} on {} cores", rt.pool().cores());
            let want = fresh.run(&other, &inputs).unwrap();
            let got = rt.run(&prepared, &inputs).unwrap();
            for ((n, w), (_, t)) in want.iter().zip(&got) {
                assert_eq!(w.bytes(), t.bytes(), "S={rows} {n}");
            }
        }
    }
}

/// Two outputs of one node share a buffer: the first is written in place,
/// the second gets a copy.
#[test]
fn one_node_as_two_outputs() {
    let mut g = Graph::new();
    let x = g
        .input("x", DType::F32, &[Dim::from(3), Dim::from(64)])
        .unwrap();
    let y = g.softmax(x, -1).unwrap();
    g.output("a", y).unwrap();
    g.output("b", y).unwrap();
    let rt = Runtime::new(1, 16);
    let prepared = Prepared::new(&g).unwrap();
    let x = tensor(&[3, 64], 4);
    let want = rt.run(&prepared, &[("x", &x)]).unwrap();
    let mut a = Tensor::zeros(DType::F32, &[3, 64]).unwrap();
    let mut b = Tensor::zeros(DType::F32, &[3, 64]).unwrap();
    rt.run_into(
        &prepared,
        &[("x", &x)],
        &Bindings::new(),
        &mut [("b", &mut b), ("a", &mut a)],
    )
    .unwrap();
    assert_eq!(want["a"].bytes(), a.bytes());
    assert_eq!(want[1].bytes(), b.bytes());
}

#[test]
fn outputs_too_large_for_memory_are_an_error_not_an_abort() {
    // `x` broadcast to 128 × (2^32-1) × 128 f32: 2^48 bytes less 64 KiB,
    // inside an address space (so the graph takes it) but beyond any
    // machine's memory, and beyond a 47-bit user address space, so no
    // allocator gives it whatever its overcommit policy. The runtime
    // allocated it with `vec!`, which aborts the process.
    let mut g = Graph::new();
    let x = g
        .input(
            "x",
            DType::F32,
            &[Dim::from(128), Dim::from(1), Dim::from(128)],
        )
        .unwrap();
    let shape = [Dim::from(128), Dim::from(u32::MAX as i64), Dim::from(128)];
    let y = g.expand(x, &shape).unwrap();
    g.output("y", y).unwrap();
    let rt = Runtime::new(1, 16);
    let prepared = Prepared::new(&g).unwrap();
    let x = tensor(&[128, 1, 128], 3);
    // Refused either for the memory or, first, for its copy kernel's
    // work (2^32 instructions and more: over the device's instruction
    // budget); never an abort.
    let e = rt.run(&prepared, &[("x", &x)]).unwrap_err();
    let bytes = 128 * 128 * 4 * u64::from(u32::MAX);
    let msg = e.to_string();
    match &e {
        RunError::Alloc { what, bytes: b } => {
            assert!(what == "output `y`" && *b == bytes, "{e}");
            assert_eq!(msg, format!("cannot allocate {bytes} bytes for output `y`"));
        }
        _ => assert!(
            msg.contains("exceeds the device's work limits"),
            "neither an allocation nor a work-limit error: {msg}"
        ),
    }
}
