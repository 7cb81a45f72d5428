//! Reference evaluator against hand-computed results and direct f64
//! implementations of the composites.

use dvm_isa::{DType, Opcode};

use super::*;
use crate::{Graph, NodeId};
use dvm_sym::{Bindings, Dim};
use dvm_tensor::Tensor;

fn d(v: i64) -> Dim {
    Dim::val(v)
}

fn dims(shape: &[u64]) -> Vec<Dim> {
    shape.iter().map(|&v| d(v as i64)).collect()
}

/// Builds a graph with one input per tensor, applies `f`, runs, returns the
/// output's values.
fn eval1(inputs: &[Tensor], f: impl FnOnce(&mut Graph, &[NodeId]) -> NodeId) -> Tensor {
    let mut g = Graph::new();
    let names: Vec<String> = (0..inputs.len()).map(|i| format!("in{i}")).collect();
    let ids: Vec<NodeId> = inputs
        .iter()
        .zip(&names)
        .map(|(t, n)| g.input(n, t.dtype(), &dims(t.shape())).unwrap())
        .collect();
    let y = f(&mut g, &ids);
    g.output("y", y).unwrap();
    let feeds: Vec<(&str, &Tensor)> = names.iter().map(String::as_str).zip(inputs).collect();
    let mut out = run(&g, &feeds, &Bindings::new()).unwrap();
    assert_eq!(out[0].0, "y");
    let t = out.remove(0).1;
    assert_eq!(t.dtype(), g[y].dtype);
    t
}

fn f32t(shape: &[u64], v: &[f32]) -> Tensor {
    Tensor::from_f32(shape, v).unwrap()
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec()
}

fn close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()) || (x.is_nan() && y.is_nan()),
            "element {i}: {x} vs {y}"
        );
    }
}

#[test]
fn unary_float_ops() {
    let x = f32t(&[6], &[-2.0, -0.5, 0.0, 0.5, 1.0, 2.5]);
    let xs: Vec<f64> = vals(&x);
    let check = |code: Opcode, f: fn(f64) -> f64| {
        let y = eval1(std::slice::from_ref(&x), |g, i| {
            g.unary(code, i[0]).unwrap()
        });
        let want: Vec<f64> = xs.iter().map(|&v| f64::from(f(v) as f32)).collect();
        let got = vals(&y);
        for (g, w) in got.iter().zip(&want) {
            assert!(
                g == w || (g.is_nan() && w.is_nan()),
                "{code:?}: {got:?} vs {want:?}"
            );
        }
    };
    check(Opcode::Abs, f64::abs);
    check(Opcode::Neg, |v| -v);
    check(Opcode::Exp, f64::exp);
    check(Opcode::Log, f64::ln);
    check(Opcode::Sqrt, f64::sqrt);
    check(Opcode::Rsqrt, |v| 1.0 / v.sqrt());
    check(Opcode::Recip, |v| 1.0 / v);
    check(Opcode::Tanh, f64::tanh);
    check(Opcode::Sigmoid, |v| 1.0 / (1.0 + (-v).exp()));
    check(Opcode::Relu, |v| v.max(0.0));
    check(Opcode::Floor, f64::floor);
    check(Opcode::Ceil, f64::ceil);
    check(Opcode::Round, f64::round_ties_even);
    check(Opcode::Silu, |v| v / (1.0 + (-v).exp()));
    // Hand values.
    let y = eval1(std::slice::from_ref(&x), |g, i| g.gelu_tanh(i[0]).unwrap());
    close(
        &vals(&y),
        &[
            -0.045_402_306,
            -0.154_285_99,
            0.0,
            0.345_714_01,
            0.841_192,
            2.484_915_7,
        ],
        1e-6,
    );
    let y = eval1(std::slice::from_ref(&x), |g, i| g.gelu_erf(i[0]).unwrap());
    close(
        &vals(&y),
        &[
            -0.045_500_264,
            -0.154_268_77,
            0.0,
            0.345_731_23,
            0.841_344_75,
            2.484_475_8,
        ],
        1e-6,
    );
    let y = eval1(std::slice::from_ref(&x), |g, i| g.erf(i[0]).unwrap());
    close(
        &vals(&y),
        &[
            -0.995_322_27,
            -0.520_499_88,
            0.0,
            0.520_499_88,
            0.842_700_8,
            0.999_593_05,
        ],
        1e-6,
    );
    let y = eval1(&[f32t(&[4], &[0.5, 1.5, 2.5, -0.5])], |g, i| {
        g.round(i[0]).unwrap()
    });
    assert_eq!(vals(&y), vec![0.0, 2.0, 2.0, -0.0]);
    let y = eval1(&[f32t(&[3], &[1.0, f32::INFINITY, f32::NAN])], |g, i| {
        g.isfinite(i[0]).unwrap()
    });
    assert_eq!(y.dtype(), DType::Bool);
    assert_eq!(vals(&y), vec![1.0, 0.0, 0.0]);
    let y = eval1(&[f32t(&[2], &[f32::NAN, -1.0])], |g, i| {
        g.relu(i[0]).unwrap()
    });
    assert!(vals(&y)[0].is_nan());
}

#[test]
fn integer_and_bool_unary() {
    let i = Tensor::from_i8(&[4], &[-128, -3, 0, 7]).unwrap();
    assert_eq!(
        vals(&eval1(std::slice::from_ref(&i), |g, x| g
            .abs(x[0])
            .unwrap())),
        vec![-128.0, 3.0, 0.0, 7.0]
    );
    assert_eq!(
        vals(&eval1(std::slice::from_ref(&i), |g, x| g
            .neg(x[0])
            .unwrap())),
        vec![-128.0, 3.0, 0.0, -7.0]
    );
    assert_eq!(
        vals(&eval1(&[i], |g, x| g.relu(x[0]).unwrap())),
        vec![0.0, 0.0, 0.0, 7.0]
    );
    let b = Tensor::from_bool(&[2], &[true, false]).unwrap();
    assert_eq!(
        vals(&eval1(&[b], |g, x| g.not(x[0]).unwrap())),
        vec![0.0, 1.0]
    );
}

#[test]
fn binary_ops_broadcast_and_round() {
    let a = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f32t(&[3], &[10.0, 20.0, 30.0]);
    let y = eval1(&[a.clone(), b.clone()], |g, i| g.add(i[0], i[1]).unwrap());
    assert_eq!(y.shape(), &[2, 3]);
    assert_eq!(vals(&y), vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
    let c = f32t(&[2, 1], &[2.0, 4.0]);
    let y = eval1(&[a.clone(), c], |g, i| g.div(i[0], i[1]).unwrap());
    assert_eq!(vals(&y), vec![0.5, 1.0, 1.5, 1.0, 1.25, 1.5]);
    let y = eval1(&[b.clone(), a.clone()], |g, i| g.sub(i[0], i[1]).unwrap());
    assert_eq!(vals(&y), vec![9.0, 18.0, 27.0, 6.0, 15.0, 24.0]);
    let y = eval1(&[a.clone(), b.clone()], |g, i| g.pow(i[0], i[1]).unwrap());
    assert_eq!(vals(&y)[0], 1.0);
    assert_eq!(vals(&y)[1], f64::from(2f32.powf(20.0)));
    // 1/3 rounds to f32.
    let y = eval1(&[f32t(&[1], &[1.0]), f32t(&[1], &[3.0])], |g, i| {
        g.div(i[0], i[1]).unwrap()
    });
    assert_eq!(vals(&y), vec![f64::from(1.0f32 / 3.0)]);
    // max/min propagate NaN.
    let p = f32t(&[3], &[1.0, f32::NAN, -1.0]);
    let q = f32t(&[3], &[2.0, 0.0, -2.0]);
    let y = eval1(&[p.clone(), q.clone()], |g, i| g.max(i[0], i[1]).unwrap());
    let v = vals(&y);
    assert_eq!((v[0], v[2]), (2.0, -1.0));
    assert!(v[1].is_nan());
    let y = eval1(&[p, q], |g, i| g.min(i[0], i[1]).unwrap());
    assert_eq!(vals(&y)[2], -2.0);
    // Comparisons, and/or.
    let y = eval1(&[a.clone(), f32t(&[1], &[3.0])], |g, i| {
        g.ge(i[0], i[1]).unwrap()
    });
    assert_eq!(y.dtype(), DType::Bool);
    assert_eq!(vals(&y), vec![0.0, 0.0, 1.0, 1.0, 1.0, 1.0]);
    let t = Tensor::from_bool(&[4], &[true, true, false, false]).unwrap();
    let u = Tensor::from_bool(&[4], &[true, false, true, false]).unwrap();
    assert_eq!(
        vals(&eval1(&[t.clone(), u.clone()], |g, i| g
            .and(i[0], i[1])
            .unwrap())),
        vec![1.0, 0.0, 0.0, 0.0]
    );
    assert_eq!(
        vals(&eval1(&[t.clone(), u.clone()], |g, i| g
            .or(i[0], i[1])
            .unwrap())),
        vec![1.0, 1.0, 1.0, 0.0]
    );
    assert_eq!(
        vals(&eval1(&[t, u], |g, i| g.ne(i[0], i[1]).unwrap())),
        vec![0.0, 1.0, 1.0, 0.0]
    );
}

#[test]
fn integer_arithmetic_wraps_and_divides_safely() {
    let a = Tensor::from_i8(&[4], &[100, -100, 7, -7]).unwrap();
    let b = Tensor::from_i8(&[4], &[100, -100, 2, 2]).unwrap();
    assert_eq!(
        vals(&eval1(&[a.clone(), b.clone()], |g, i| g
            .add(i[0], i[1])
            .unwrap())),
        vec![-56.0, 56.0, 9.0, -5.0]
    );
    assert_eq!(
        vals(&eval1(&[a.clone(), b.clone()], |g, i| g
            .mul(i[0], i[1])
            .unwrap())),
        vec![16.0, 16.0, 14.0, -14.0]
    );
    assert_eq!(
        vals(&eval1(&[a.clone(), b], |g, i| g.div(i[0], i[1]).unwrap())),
        vec![1.0, 1.0, 3.0, -3.0]
    );
    let a = Tensor::from_i32(&[4], &[i32::MAX, i32::MIN, 5, -9]).unwrap();
    let b = Tensor::from_i32(&[4], &[1, -1, 0, 2]).unwrap();
    let y = eval1(&[a.clone(), b.clone()], |g, i| g.add(i[0], i[1]).unwrap());
    assert_eq!(y.as_i32_vec().unwrap(), vec![i32::MIN, i32::MAX, 5, -7]);
    let y = eval1(&[a.clone(), b.clone()], |g, i| g.div(i[0], i[1]).unwrap());
    assert_eq!(y.as_i32_vec().unwrap(), vec![i32::MAX, i32::MIN, 0, -4]);
    let y = eval1(&[a.clone(), a.clone()], |g, i| g.mul(i[0], i[1]).unwrap());
    assert_eq!(y.as_i32_vec().unwrap()[2], 25);
    assert_eq!(y.as_i32_vec().unwrap()[0], i32::MAX.wrapping_mul(i32::MAX));
    // Scalars are i32 immediates: 2.7 truncates to 2.
    let y = eval1(std::slice::from_ref(&a), |g, i| g.adds(i[0], 2.7).unwrap());
    assert_eq!(
        y.as_i32_vec().unwrap(),
        vec![i32::MIN + 1, i32::MIN + 2, 7, -7]
    );
    let y = eval1(std::slice::from_ref(&a), |g, i| {
        g.rdivs(i[0], 10.0).unwrap()
    });
    assert_eq!(y.as_i32_vec().unwrap(), vec![0, 0, 2, -1]);
    let y = eval1(&[a], |g, i| g.divs(i[0], 0.0).unwrap());
    assert_eq!(y.as_i32_vec().unwrap(), vec![0, 0, 0, 0]);
    // ... so `x < 0.5` on integers is `x < 0`.
    let y = eval1(&[b], |g, i| g.lts(i[0], 0.5).unwrap());
    assert_eq!(vals(&y), vec![0.0, 1.0, 0.0, 0.0]);
}

#[test]
fn scalar_float_ops() {
    let x = f32t(&[3], &[1.0, 2.0, 4.0]);
    let run1 = |code: Opcode, v: f64| {
        vals(&eval1(std::slice::from_ref(&x), |g, i| {
            g.scalar(code, i[0], v).unwrap()
        }))
    };
    assert_eq!(run1(Opcode::AddS, 0.5), vec![1.5, 2.5, 4.5]);
    assert_eq!(run1(Opcode::SubS, 1.0), vec![0.0, 1.0, 3.0]);
    assert_eq!(run1(Opcode::RSubS, 1.0), vec![0.0, -1.0, -3.0]);
    assert_eq!(run1(Opcode::MulS, 3.0), vec![3.0, 6.0, 12.0]);
    assert_eq!(run1(Opcode::DivS, 2.0), vec![0.5, 1.0, 2.0]);
    assert_eq!(run1(Opcode::RDivS, 2.0), vec![2.0, 1.0, 0.5]);
    assert_eq!(run1(Opcode::MaxS, 2.0), vec![2.0, 2.0, 4.0]);
    assert_eq!(run1(Opcode::MinS, 2.0), vec![1.0, 2.0, 2.0]);
    assert_eq!(run1(Opcode::PowS, 2.0), vec![1.0, 4.0, 16.0]);
    assert_eq!(run1(Opcode::EqS, 2.0), vec![0.0, 1.0, 0.0]);
    assert_eq!(run1(Opcode::NeS, 2.0), vec![1.0, 0.0, 1.0]);
    assert_eq!(run1(Opcode::LeS, 2.0), vec![1.0, 1.0, 0.0]);
    assert_eq!(run1(Opcode::GtS, 2.0), vec![0.0, 0.0, 1.0]);
    assert_eq!(run1(Opcode::GeS, 2.0), vec![0.0, 1.0, 1.0]);
    // The immediate is an f32: 0.1 is rounded before the add.
    assert_eq!(run1(Opcode::AddS, 0.1)[0], f64::from(1.0f32 + 0.1f32));
}

#[test]
fn f16_and_bf16_round_after_every_op() {
    let h = |v: &[f64]| Tensor::from_f64(DType::F16, &[v.len() as u64], v).unwrap();
    // 1 + 2^-11 is a tie: rounds to even (1.0); 1 + 3*2^-11 rounds up.
    let a = h(&[1.0, 1.0, 60000.0, 1.0]);
    let b = h(&[
        2f64.powi(-11),
        3.0 * 2f64.powi(-11),
        10000.0,
        2f64.powi(-12),
    ]);
    let y = eval1(&[a, b], |g, i| g.add(i[0], i[1]).unwrap());
    assert_eq!(y.dtype(), DType::F16);
    let v = vals(&y);
    assert_eq!(v[0], 1.0);
    assert_eq!(v[1], 1.0 + 2f64.powi(-9));
    assert_eq!(v[2], f64::INFINITY);
    assert_eq!(v[3], 1.0);
    // Rounding after every op: (1 + 2^-12) + 2^-12 in f16 stays 1.
    let one = h(&[1.0]);
    let tiny = h(&[2f64.powi(-12)]);
    let y = eval1(&[one, tiny], |g, i| {
        let s = g.add(i[0], i[1]).unwrap();
        g.add(s, i[1]).unwrap()
    });
    assert_eq!(vals(&y), vec![1.0]);
    // ... while a sum reduction accumulates in f64 and rounds once.
    let v = h(&[
        1.0,
        2f64.powi(-12),
        2f64.powi(-12),
        2f64.powi(-12),
        2f64.powi(-12),
    ]);
    let y = eval1(&[v], |g, i| g.sum(i[0], &[0], false).unwrap());
    assert_eq!(vals(&y), vec![1.0 + 2f64.powi(-10)]);
    // bf16: 1 + 2^-8 ties to 1.
    let bf = |v: &[f64]| Tensor::from_f64(DType::BF16, &[v.len() as u64], v).unwrap();
    let y = eval1(
        &[bf(&[1.0, 1.0]), bf(&[2f64.powi(-8), 3.0 * 2f64.powi(-8)])],
        |g, i| g.add(i[0], i[1]).unwrap(),
    );
    assert_eq!(vals(&y), vec![1.0, 1.0 + 2f64.powi(-6)]);
}

#[test]
fn casts() {
    let x = f32t(&[6], &[2.9, -2.9, 300.0, -300.0, f32::NAN, 0.0]);
    let y = eval1(std::slice::from_ref(&x), |g, i| {
        g.cast(i[0], DType::I8).unwrap()
    });
    assert_eq!(vals(&y), vec![2.0, -2.0, 127.0, -128.0, 0.0, 0.0]);
    let y = eval1(std::slice::from_ref(&x), |g, i| {
        g.cast(i[0], DType::Bool).unwrap()
    });
    assert_eq!(vals(&y), vec![1.0, 1.0, 1.0, 1.0, 1.0, 0.0]);
    let y = eval1(&[f32t(&[1], &[1e10])], |g, i| {
        g.cast(i[0], DType::I32).unwrap()
    });
    assert_eq!(y.as_i32_vec().unwrap(), vec![i32::MAX]);
    let i = Tensor::from_i32(&[3], &[300, -129, 70000]).unwrap();
    let y = eval1(std::slice::from_ref(&i), |g, x| {
        g.cast(x[0], DType::I8).unwrap()
    });
    assert_eq!(vals(&y), vec![44.0, 127.0, 112.0]);
    let y = eval1(&[i], |g, x| g.cast(x[0], DType::F16).unwrap());
    assert_eq!(vals(&y), vec![300.0, -129.0, f64::INFINITY]);
    let b = Tensor::from_bool(&[2], &[true, false]).unwrap();
    let y = eval1(&[b], |g, x| g.cast(x[0], DType::F32).unwrap());
    assert_eq!(vals(&y), vec![1.0, 0.0]);
    let y = eval1(&[f32t(&[1], &[1.0 + f32::EPSILON])], |g, x| {
        g.cast(x[0], DType::BF16).unwrap()
    });
    assert_eq!(vals(&y), vec![1.0]);
}

#[test]
fn where_constant_and_scalar_dim() {
    let c = Tensor::from_bool(&[2, 1], &[true, false]).unwrap();
    let a = f32t(&[3], &[1.0, 2.0, 3.0]);
    let y = eval1(&[c, a], |g, i| {
        let z = g.full(DType::F32, &[d(1)], -1.0).unwrap();
        g.where_(i[0], i[1], z).unwrap()
    });
    assert_eq!(y.shape(), &[2, 3]);
    assert_eq!(vals(&y), vec![1.0, 2.0, 3.0, -1.0, -1.0, -1.0]);
    let y = eval1(&[], |g, _| {
        g.constant(DType::I8, &[d(2), d(2)], &[1.0, 200.0, -1.5, 0.0])
            .unwrap()
    });
    assert_eq!(vals(&y), vec![1.0, 127.0, -1.0, 0.0]);
    // Symbolic scalar.
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 100).unwrap();
    let x = g.input("x", DType::F32, &[s.into()]).unwrap();
    let y = g.scalar_dim(Opcode::MulS, x, &(Dim::from(s) + 1)).unwrap();
    g.output("y", y).unwrap();
    let t = f32t(&[3], &[1.0, 2.0, 3.0]);
    let out = run(&g, &[("x", &t)], &Bindings::new()).unwrap();
    assert_eq!(vals(&out[0].1), vec![4.0, 8.0, 12.0]);
}

#[test]
fn reductions() {
    let x = f32t(&[2, 3], &[1.0, 5.0, 3.0, -4.0, 2.0, 6.0]);
    let y = eval1(std::slice::from_ref(&x), |g, i| {
        g.sum(i[0], &[1], false).unwrap()
    });
    assert_eq!((y.shape().to_vec(), vals(&y)), (vec![2], vec![9.0, 4.0]));
    let y = eval1(std::slice::from_ref(&x), |g, i| {
        g.sum(i[0], &[0], true).unwrap()
    });
    assert_eq!(
        (y.shape().to_vec(), vals(&y)),
        (vec![1, 3], vec![-3.0, 7.0, 9.0])
    );
    let y = eval1(std::slice::from_ref(&x), |g, i| {
        g.reduce_max(i[0], &[0, 1], false).unwrap()
    });
    assert_eq!((y.shape().to_vec(), vals(&y)), (vec![], vec![6.0]));
    let y = eval1(std::slice::from_ref(&x), |g, i| {
        g.reduce_min(i[0], &[-1], true).unwrap()
    });
    assert_eq!(vals(&y), vec![1.0, -4.0]);
    let y = eval1(&[x], |g, i| g.mean(i[0], &[1], false).unwrap());
    assert_eq!(vals(&y), vec![3.0, f64::from(4.0f32 / 3.0)]);
    // f64 accumulation: 1e8 + 1 - 1e8 is 1 (an f32 accumulator would give 0).
    let y = eval1(&[f32t(&[3], &[1e8, 1.0, -1e8])], |g, i| {
        g.sum(i[0], &[0], false).unwrap()
    });
    assert_eq!(vals(&y), vec![1.0]);
    // Integer sums wrap.
    let i = Tensor::from_i8(&[3], &[100, 100, 100]).unwrap();
    let y = eval1(&[i], |g, x| g.sum(x[0], &[0], false).unwrap());
    assert_eq!(vals(&y), vec![44.0]);
    // NaN propagates through max.
    let y = eval1(&[f32t(&[3], &[1.0, f32::NAN, 3.0])], |g, i| {
        g.reduce_max(i[0], &[0], false).unwrap()
    });
    assert!(vals(&y)[0].is_nan());
    // Middle axis of a 3-D tensor.
    let t = f32t(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let y = eval1(&[t], |g, i| g.sum(i[0], &[1], false).unwrap());
    assert_eq!(vals(&y), vec![4.0, 6.0, 12.0, 14.0]);
}

#[test]
fn empty_tensors() {
    let mut g = Graph::new();
    let s = g.symbol("S", 0, 10).unwrap();
    let x = g.input("x", DType::F32, &[s.into(), d(3)]).unwrap();
    let sum = g.sum(x, &[0], false).unwrap();
    let mx = g.reduce_max(x, &[0], false).unwrap();
    let e = g.exp(x).unwrap();
    g.output("sum", sum).unwrap();
    g.output("e", e).unwrap();
    let t = Tensor::zeros(DType::F32, &[0, 3]).unwrap();
    let out = run(&g, &[("x", &t)], &Bindings::new()).unwrap();
    assert_eq!(vals(&out[0].1), vec![0.0, 0.0, 0.0]);
    assert_eq!(out[1].1.shape(), &[0, 3]);
    g.output("mx", mx).unwrap();
    let err = run(&g, &[("x", &t)], &Bindings::new())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("reduce_max") && err.contains("zero elements"),
        "{err}"
    );
}

#[test]
fn matmuls() {
    let a = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f32t(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
    let y = eval1(&[a.clone(), b.clone()], |g, i| {
        g.matmul(i[0], i[1], false, false).unwrap()
    });
    assert_eq!(
        (y.shape().to_vec(), vals(&y)),
        (vec![2, 2], vec![58.0, 64.0, 139.0, 154.0])
    );
    // Transposes: aᵀ is 3×2, so (aᵀ)ᵀ·bᵀᵀ... use a·aᵀ and aᵀ·a.
    let y = eval1(std::slice::from_ref(&a), |g, i| {
        g.matmul(i[0], i[0], false, true).unwrap()
    });
    assert_eq!(vals(&y), vec![14.0, 32.0, 32.0, 77.0]);
    let y = eval1(std::slice::from_ref(&a), |g, i| {
        g.matmul(i[0], i[0], true, false).unwrap()
    });
    assert_eq!(y.shape(), &[3, 3]);
    assert_eq!(
        vals(&y),
        vec![17.0, 22.0, 27.0, 22.0, 29.0, 36.0, 27.0, 36.0, 45.0]
    );
    let y = eval1(&[b.clone(), a.clone()], |g, i| {
        g.matmul(i[0], i[1], true, true).unwrap()
    });
    // bᵀ·aᵀ = (a·b)ᵀ
    assert_eq!(vals(&y), vec![58.0, 139.0, 64.0, 154.0]);
    // Batch broadcasting: [2,1,2,3] · [3,3,2] → [2,3,2,2].
    let a4 = f32t(
        &[2, 1, 2, 3],
        &(0..12).map(|v| v as f32).collect::<Vec<_>>(),
    );
    let b3 = f32t(
        &[3, 3, 2],
        &(0..18).map(|v| (v % 5) as f32).collect::<Vec<_>>(),
    );
    let y = eval1(&[a4.clone(), b3.clone()], |g, i| {
        g.matmul(i[0], i[1], false, false).unwrap()
    });
    assert_eq!(y.shape(), &[2, 3, 2, 2]);
    let (av, bv, yv) = (vals(&a4), vals(&b3), vals(&y));
    for bi in 0..2 {
        for bj in 0..3 {
            for i in 0..2 {
                for j in 0..2 {
                    let want: f64 = (0..3)
                        .map(|p| av[bi * 6 + i * 3 + p] * bv[bj * 6 + p * 2 + j])
                        .sum();
                    assert_eq!(yv[((bi * 3 + bj) * 2 + i) * 2 + j], want);
                }
            }
        }
    }
    // i8 → i32, accumulation beyond i8.
    let ia = Tensor::from_i8(&[1, 3], &[127, 127, -128]).unwrap();
    let ib = Tensor::from_i8(&[3, 1], &[127, 127, -128]).unwrap();
    let y = eval1(&[ia, ib], |g, i| {
        g.matmul(i[0], i[1], false, false).unwrap()
    });
    assert_eq!(y.as_i32_vec().unwrap(), vec![127 * 127 * 2 + 128 * 128]);
    // f16: accumulated exactly, rounded once.
    let h = Tensor::from_f64(
        DType::F16,
        &[1, 4],
        &[1.0, 2f64.powi(-12), 2f64.powi(-12), 2f64.powi(-12)],
    )
    .unwrap();
    let ones = Tensor::from_f64(DType::F16, &[4, 1], &[1.0; 4]).unwrap();
    let y = eval1(&[h, ones], |g, i| {
        g.matmul(i[0], i[1], false, false).unwrap()
    });
    assert_eq!(
        vals(&y),
        vec![dvm_tensor::round_float(
            DType::F16,
            1.0 + 2f64.powi(-11) + 2f64.powi(-12)
        )]
    );
}

#[test]
fn large_matmul_is_parallel_and_correct() {
    let (m, k, n) = (96usize, 128usize, 112usize);
    let av: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
    let bv: Vec<f32> = (0..k * n).map(|i| ((i * 5) % 11) as f32 - 5.0).collect();
    let a = f32t(&[m as u64, k as u64], &av);
    let b = f32t(&[k as u64, n as u64], &bv);
    let y = eval1(&[a, b], |g, i| g.matmul(i[0], i[1], false, false).unwrap());
    let yv = vals(&y);
    for i in (0..m).step_by(7) {
        for j in (0..n).step_by(5) {
            let want: f64 = (0..k)
                .map(|p| f64::from(av[i * k + p]) * f64::from(bv[p * n + j]))
                .sum();
            assert_eq!(yv[i * n + j], want);
        }
    }
}

#[test]
fn data_movement() {
    let x = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let y = eval1(std::slice::from_ref(&x), |g, i| {
        g.transpose(i[0], &[1, 0]).unwrap()
    });
    assert_eq!(
        (y.shape().to_vec(), vals(&y)),
        (vec![3, 2], vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0])
    );
    let y = eval1(std::slice::from_ref(&x), |g, i| {
        g.reshape(i[0], &[d(3), d(-1)]).unwrap()
    });
    assert_eq!((y.shape().to_vec(), vals(&y)), (vec![3, 2], vals(&x)));
    let y = eval1(std::slice::from_ref(&x), |g, i| {
        g.slice(i[0], &[(1, -2, i64::MAX, 1)]).unwrap()
    });
    assert_eq!(
        (y.shape().to_vec(), vals(&y)),
        (vec![2, 2], vec![2.0, 3.0, 5.0, 6.0])
    );
    let y = eval1(std::slice::from_ref(&x), |g, i| {
        g.slice(i[0], &[(1, 0, 3, 2), (0, 1, 2, 1)]).unwrap()
    });
    assert_eq!((y.shape().to_vec(), vals(&y)), (vec![1, 2], vec![4.0, 6.0]));
    let y = eval1(std::slice::from_ref(&x), |g, i| {
        g.slice(i[0], &[(0, 5, 9, 1)]).unwrap()
    });
    assert_eq!(y.shape(), &[0, 3]);
    let z = f32t(&[2, 1], &[7.0, 8.0]);
    let y = eval1(&[x.clone(), z.clone()], |g, i| {
        g.concat(&[i[0], i[1], i[0]], 1).unwrap()
    });
    assert_eq!(y.shape(), &[2, 7]);
    assert_eq!(
        vals(&y),
        vec![1.0, 2.0, 3.0, 7.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 4.0, 5.0, 6.0]
    );
    let y = eval1(std::slice::from_ref(&x), |g, i| {
        g.concat(&[i[0], i[0]], 0).unwrap()
    });
    assert_eq!(vals(&y)[6..], vals(&x)[..]);
    let y = eval1(std::slice::from_ref(&z), |g, i| {
        g.expand(i[0], &[d(2), d(2), d(3)]).unwrap()
    });
    assert_eq!(y.shape(), &[2, 2, 3]);
    assert_eq!(vals(&y)[..6], [7.0, 7.0, 7.0, 8.0, 8.0, 8.0]);
    let y = eval1(std::slice::from_ref(&z), |g, i| {
        let u = g.unsqueeze(i[0], &[0]).unwrap();
        g.squeeze(u, &[0, -1]).unwrap()
    });
    assert_eq!((y.shape().to_vec(), vals(&y)), (vec![2], vec![7.0, 8.0]));
    // 4-D permutation against direct indexing.
    let t = f32t(
        &[2, 3, 4, 5],
        &(0..120).map(|v| v as f32).collect::<Vec<_>>(),
    );
    let y = eval1(&[t], |g, i| g.transpose(i[0], &[2, 0, 3, 1]).unwrap());
    assert_eq!(y.shape(), &[4, 2, 5, 3]);
    let yv = vals(&y);
    for a in 0..4 {
        for b in 0..2 {
            for c in 0..5 {
                for e in 0..3 {
                    let src = ((b * 3 + e) * 4 + a) * 5 + c;
                    assert_eq!(yv[((a * 2 + b) * 5 + c) * 3 + e], src as f64);
                }
            }
        }
    }
}

// ---- composites against direct f64 implementations ---------------------------

fn rows(x: &[f64], n: usize) -> impl Iterator<Item = &[f64]> {
    x.chunks(n)
}

fn softmax_direct(x: &[f64], n: usize) -> Vec<f64> {
    rows(x, n)
        .flat_map(|r| {
            let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = r.iter().map(|v| (v - m).exp()).sum();
            r.iter().map(move |v| (v - m).exp() / s).collect::<Vec<_>>()
        })
        .collect()
}

fn log_softmax_direct(x: &[f64], n: usize) -> Vec<f64> {
    rows(x, n)
        .flat_map(|r| {
            let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = r.iter().map(|v| (v - m).exp()).sum();
            r.iter().map(move |v| v - m - s.ln()).collect::<Vec<_>>()
        })
        .collect()
}

fn layer_norm_direct(x: &[f64], g: &[f64], b: &[f64], eps: f64) -> Vec<f64> {
    let n = g.len();
    rows(x, n)
        .flat_map(|r| {
            let mu = r.iter().sum::<f64>() / n as f64;
            let var = r.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / n as f64;
            r.iter()
                .enumerate()
                .map(move |(i, v)| (v - mu) / (var + eps).sqrt() * g[i] + b[i])
                .collect::<Vec<_>>()
        })
        .collect()
}

fn rms_norm_direct(x: &[f64], g: &[f64], eps: f64) -> Vec<f64> {
    let n = g.len();
    rows(x, n)
        .flat_map(|r| {
            let ms = r.iter().map(|v| v * v).sum::<f64>() / n as f64;
            r.iter()
                .enumerate()
                .map(move |(i, v)| v / (ms + eps).sqrt() * g[i])
                .collect::<Vec<_>>()
        })
        .collect()
}

fn pseudo(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f32 / (1u64 << 31) as f32) * 8.0 - 4.0
        })
        .collect()
}

#[test]
fn composites_match_direct_implementations() {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 64).unwrap();
    let x = g.input("x", DType::F32, &[s.into(), d(24)]).unwrap();
    let gamma = g.input("gamma", DType::F32, &[d(24)]).unwrap();
    let beta = g.input("beta", DType::F32, &[d(24)]).unwrap();
    let sm = g.softmax(x, -1).unwrap();
    let ls = g.log_softmax(x, 1).unwrap();
    let ln = g.layer_norm(x, gamma, beta, 1e-5).unwrap();
    let rn = g.rms_norm(x, gamma, 1e-6).unwrap();
    let mean0 = g.mean(x, &[0], false).unwrap();
    let sm0 = g.softmax(x, 0).unwrap();
    for (name, id) in [
        ("sm", sm),
        ("ls", ls),
        ("ln", ln),
        ("rn", rn),
        ("mean0", mean0),
        ("sm0", sm0),
    ] {
        g.output(name, id).unwrap();
    }
    for len in [1usize, 7, 33] {
        let xv = pseudo(len * 24, len as u64);
        let gv = pseudo(24, 99);
        let bv = pseudo(24, 7);
        let xt = f32t(&[len as u64, 24], &xv);
        let gt = f32t(&[24], &gv);
        let bt = f32t(&[24], &bv);
        let out = run(
            &g,
            &[("x", &xt), ("gamma", &gt), ("beta", &bt)],
            &Bindings::new(),
        )
        .unwrap();
        let get = |n: &str| vals(&out.iter().find(|(o, _)| o == n).unwrap().1);
        let x64: Vec<f64> = xv.iter().map(|&v| f64::from(v)).collect();
        let g64: Vec<f64> = gv.iter().map(|&v| f64::from(v)).collect();
        let b64: Vec<f64> = bv.iter().map(|&v| f64::from(v)).collect();
        // f32 rounding after each primitive: a few ulps of error.
        let tol = 2e-6;
        close(&get("sm"), &softmax_direct(&x64, 24), tol);
        close(&get("ls"), &log_softmax_direct(&x64, 24), tol);
        close(&get("ln"), &layer_norm_direct(&x64, &g64, &b64, 1e-5), 1e-5);
        close(&get("rn"), &rms_norm_direct(&x64, &g64, 1e-6), tol);
        let mean0: Vec<f64> = (0..24)
            .map(|j| (0..len).map(|i| x64[i * 24 + j]).sum::<f64>() / len as f64)
            .collect();
        close(&get("mean0"), &mean0, tol);
        // Softmax along axis 0: transpose, softmax rows, transpose back.
        let xt64: Vec<f64> = (0..24 * len)
            .map(|k| x64[(k % len) * 24 + k / len])
            .collect();
        let st = softmax_direct(&xt64, len);
        let sm0: Vec<f64> = (0..len * 24).map(|k| st[(k % 24) * len + k / 24]).collect();
        close(&get("sm0"), &sm0, tol);
    }
}

#[test]
fn softmax_is_stable_for_large_inputs() {
    let x = f32t(&[1, 3], &[1000.0, 1001.0, 1002.0]);
    let y = eval1(&[x], |g, i| g.softmax(i[0], -1).unwrap());
    close(&vals(&y), &softmax_direct(&[0.0, 1.0, 2.0], 3), 1e-6);
}

#[test]
fn run_reports_input_errors() {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 8).unwrap();
    let x = g.input("x", DType::F32, &[s.into()]).unwrap();
    let y = g.exp(x).unwrap();
    g.output("y", y).unwrap();
    let t = f32t(&[9], &[0.0; 9]);
    let e = run(&g, &[("x", &t)], &Bindings::new())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`S`") && e.contains("9") && e.contains("1..=8"),
        "{e}"
    );
    let e = run(&g, &[], &Bindings::new()).unwrap_err().to_string();
    assert!(e.contains("input `x` is missing"), "{e}");
    let i = Tensor::from_i32(&[2], &[1, 2]).unwrap();
    let e = run(&g, &[("x", &i)], &Bindings::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("input `x` has dtype i32"), "{e}");
    // evaluate_nodes refuses composites.
    let mut h = Graph::new();
    let a = h.input("a", DType::F32, &[d(2)]).unwrap();
    let sm = h.softmax(a, 0).unwrap();
    h.output("sm", sm).unwrap();
    let t2 = f32t(&[2], &[0.0, 1.0]);
    let b = h.bind_tensors(&[("a", &t2)], &Bindings::new()).unwrap();
    let e = evaluate_nodes(&h, &b, &[("a", &t2)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("decompose"), "{e}");
    let dh = crate::decompose(&h).unwrap();
    let all = evaluate_nodes(&dh, &b, &[("a", &t2)]).unwrap();
    assert_eq!(all.len(), dh.nodes().len());
}

#[test]
fn json_graph_runs() {
    let text = r#"{
      "symbols": {"S": {"min": 1, "max": 16}},
      "inputs": [{"name": "x", "dtype": "f32", "shape": ["S", 2]}],
      "nodes": [
        {"name": "w", "op": "constant", "dtype": "f32", "shape": [2, 2], "values": [1, 2, 3, 4]},
        {"name": "h", "op": "matmul", "inputs": ["x", "w"]},
        {"name": "y", "op": "reduce_mean", "inputs": ["h"], "axes": [0]}
      ],
      "outputs": ["y"]
    }"#;
    let g = Graph::from_json(text, std::path::Path::new(".")).unwrap();
    let x = f32t(&[3, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    let out = run(&g, &[("x", &x)], &Bindings::new()).unwrap();
    // h = [[1,2],[3,4],[4,6]], mean over rows = [8/3, 4].
    assert_eq!(vals(&out[0].1), vec![f64::from(8.0f32 / 3.0), 4.0]);
}

#[test]
fn evaluate_nodes_checks_bindings() {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 4).unwrap();
    let x = g.input("x", DType::F32, &[s.into()]).unwrap();
    let y = g.exp(x).unwrap();
    g.output("y", y).unwrap();
    let t = f32t(&[6], &[0.0; 6]);
    // Out of range.
    let e = evaluate_nodes(&g, &Bindings::new().with(s, 6), &[("x", &t)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("`S`") && e.contains("1..=4"), "{e}");
    // In range, but the tensor disagrees with the bindings.
    let e = evaluate_nodes(&g, &Bindings::new().with(s, 3), &[("x", &t)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("node `x`") && e.contains("bindings give"), "{e}");
}

#[test]
fn sin_cos_hand_values() {
    use std::f32::consts::{FRAC_PI_2, FRAC_PI_6, PI};
    let x = f32t(&[4], &[0.0, FRAC_PI_6, FRAC_PI_2, PI]);
    let s = eval1(std::slice::from_ref(&x), |g, i| g.sin(i[0]).unwrap());
    close(&vals(&s), &[0.0, 0.5, 1.0, 0.0], 1e-7);
    let c = eval1(&[x], |g, i| g.cos(i[0]).unwrap());
    close(&vals(&c), &[1.0, 0.866_025_4, 0.0, -1.0], 1e-7);
}

#[test]
fn iota_hand_values() {
    let mut g = Graph::new();
    let s = g.symbol("S", 1, 64).unwrap();
    let shape = [Dim::from(s), d(3)];
    let rows = g.iota(DType::I32, &shape, 0).unwrap();
    let cols = g.iota(DType::F32, &shape, -1).unwrap();
    g.output("rows", rows).unwrap();
    g.output("cols", cols).unwrap();
    let b = Bindings::new().with(s, 2);
    let out = run(&g, &[], &b).unwrap();
    assert_eq!(out[0].1.shape(), &[2, 3]);
    assert_eq!(vals(&out[0].1), [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    assert_eq!(out[1].1.dtype(), DType::F32);
    assert_eq!(vals(&out[1].1), [0.0, 1.0, 2.0, 0.0, 1.0, 2.0]);
}

#[test]
fn trilu_hand_values() {
    let x = f32t(&[3, 4], &(1..=12).map(|v| v as f32).collect::<Vec<_>>());
    let upper = eval1(std::slice::from_ref(&x), |g, i| {
        g.trilu(i[0], true, 0).unwrap()
    });
    #[rustfmt::skip]
    let want = [1.0, 2.0, 3.0, 4.0,
                0.0, 6.0, 7.0, 8.0,
                0.0, 0.0, 11.0, 12.0];
    assert_eq!(vals(&upper), want);
    let upper1 = eval1(std::slice::from_ref(&x), |g, i| {
        g.trilu(i[0], true, 1).unwrap()
    });
    #[rustfmt::skip]
    let want = [0.0, 2.0, 3.0, 4.0,
                0.0, 0.0, 7.0, 8.0,
                0.0, 0.0, 0.0, 12.0];
    assert_eq!(vals(&upper1), want);
    let lower = eval1(std::slice::from_ref(&x), |g, i| {
        g.trilu(i[0], false, -1).unwrap()
    });
    #[rustfmt::skip]
    let want = [0.0, 0.0, 0.0, 0.0,
                5.0, 0.0, 0.0, 0.0,
                9.0, 10.0, 0.0, 0.0];
    assert_eq!(vals(&lower), want);
}

#[test]
fn iota_and_trilu_errors_name_the_problem() {
    let mut g = Graph::new();
    let e = g.iota(DType::Bool, &[d(3)], 0).unwrap_err().to_string();
    assert!(e.contains("cannot hold indices"), "{e}");
    let e = g.iota(DType::I32, &[d(3)], 1).unwrap_err().to_string();
    assert!(e.contains("out of range"), "{e}");
    let x = g.input("x", DType::F32, &[d(3)]).unwrap();
    let e = g.trilu(x, true, 0).unwrap_err().to_string();
    assert!(e.contains("rank >= 2"), "{e}");
}

#[test]
fn i64_arithmetic_and_casts() {
    let big = (1i64 << 40) + 5;
    let x = Tensor::from_f64(DType::I64, &[3], &[big as f64, -3.0, 7.0]).unwrap();
    let y = eval1(std::slice::from_ref(&x), |g, i| {
        let d = g.add(i[0], i[0]).unwrap();
        g.scalar(Opcode::SubS, d, 1.0).unwrap()
    });
    assert_eq!(y.dtype(), DType::I64);
    assert_eq!(vals(&y), [(2 * big - 1) as f64, -7.0, 13.0]);
    let f = eval1(std::slice::from_ref(&x), |g, i| {
        g.cast(i[0], DType::F32).unwrap()
    });
    assert_eq!(vals(&f), [big as f32 as f64, -3.0, 7.0]);
    let back = eval1(&[f32t(&[2], &[-2.7, 3e12])], |g, i| {
        g.cast(i[0], DType::I64).unwrap()
    });
    assert_eq!(back.dtype(), DType::I64);
    assert_eq!(vals(&back), [-2.0, 3e12_f32 as f64]);
    let s = eval1(std::slice::from_ref(&x), |g, i| {
        g.sum(i[0], &[0], false).unwrap()
    });
    assert_eq!(vals(&s), [(big + 4) as f64]);
}

#[test]
fn gather_hand_values() {
    let x = f32t(&[2, 3, 2], &(0..12).map(|v| v as f32).collect::<Vec<_>>());
    let ids = Tensor::from_f64(DType::I32, &[2, 2], &[2.0, 0.0, -1.0, 1.0]).unwrap();
    let rows = eval1(&[x.clone(), ids.clone()], |g, i| {
        g.gather(i[0], i[1], 1).unwrap()
    });
    assert_eq!(rows.shape(), &[2, 2, 2, 2]);
    #[rustfmt::skip]
    let want = [4.0, 5.0, 0.0, 1.0, 4.0, 5.0, 2.0, 3.0,
                10.0, 11.0, 6.0, 7.0, 10.0, 11.0, 8.0, 9.0];
    assert_eq!(vals(&rows), want);
    // Rank-0 indices drop the axis; i64 indices work as i32 ones.
    let one = Tensor::from_f64(DType::I64, &[], &[-2.0]).unwrap();
    let last = eval1(&[x.clone(), one], |g, i| g.gather(i[0], i[1], -1).unwrap());
    assert_eq!(last.shape(), &[2, 3]);
    assert_eq!(vals(&last), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
}

#[test]
fn gather_out_of_range_names_the_index() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[d(3)]).unwrap();
    let i = g.input("i", DType::I32, &[d(2)]).unwrap();
    let y = g.gather(x, i, 0).unwrap();
    g.output("y", y).unwrap();
    let xt = f32t(&[3], &[1.0, 2.0, 3.0]);
    for bad in [3.0, -4.0] {
        let it = Tensor::from_f64(DType::I32, &[2], &[0.0, bad]).unwrap();
        let e = run(&g, &[("x", &xt), ("i", &it)], &Bindings::new())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("index {bad}")) && e.contains("extent 3"),
            "{e}"
        );
    }
}

/// `g`'s outputs computed by the reference (conv and pools by their
/// definitions) and by its decomposition (im2col, slices), evaluated node
/// by node: they must agree.
fn definition_vs_decomposition(g: &Graph, feeds: &[(&str, &Tensor)], tol: f64) -> Vec<f64> {
    let want = run(g, feeds, &Bindings::new()).unwrap();
    let dg = crate::decompose(g).unwrap();
    assert!(dg.nodes().iter().all(|n| !n.op.is_composite()));
    let b = g.bind_tensors(feeds, &Bindings::new()).unwrap();
    let all = evaluate_nodes(&dg, &b, feeds).unwrap();
    for ((name, w), (_, id)) in want.iter().zip(dg.outputs()) {
        let got = &all[id.0];
        assert_eq!(got.shape(), w.shape(), "{name}");
        close(&vals(got), &vals(w), tol);
    }
    vals(&want[0].1)
}

fn ramp(n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7 % 11) as f32 - 5.0) * scale)
        .collect()
}

#[test]
fn conv2d_hand_values() {
    // 1×1×3×3 input, 2×2 kernel of ones, no padding: window sums.
    let x = f32t(
        &[1, 1, 3, 3],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
    );
    let w = f32t(&[1, 1, 2, 2], &[1.0; 4]);
    let y = eval1(&[x.clone(), w.clone()], |g, i| {
        g.conv2d(i[0], i[1], None, &crate::Conv2d::default())
            .unwrap()
    });
    assert_eq!(y.shape(), &[1, 1, 2, 2]);
    assert_eq!(vals(&y), [12.0, 16.0, 24.0, 28.0]);
    // Padding 1, stride 2, bias 10: corners of the padded input.
    let b = f32t(&[1], &[10.0]);
    let attrs = crate::Conv2d {
        strides: [2, 2],
        pads: [1, 1, 1, 1],
        ..crate::Conv2d::default()
    };
    let y = eval1(&[x, w, b], |g, i| {
        g.conv2d(i[0], i[1], Some(i[2]), &attrs).unwrap()
    });
    assert_eq!(y.shape(), &[1, 1, 2, 2]);
    assert_eq!(vals(&y), [11.0, 15.0, 21.0, 38.0]);
}

#[test]
fn pool2d_hand_values() {
    let x = f32t(
        &[1, 1, 3, 3],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
    );
    let p = crate::Pool2d::new([2, 2]);
    let y = eval1(std::slice::from_ref(&x), |g, i| {
        g.max_pool2d(i[0], &p).unwrap()
    });
    assert_eq!(vals(&y), [5.0, 6.0, 8.0, 9.0]);
    let padded = crate::Pool2d {
        strides: [2, 2],
        pads: [1, 1, 1, 1],
        ..crate::Pool2d::new([2, 2])
    };
    let y = eval1(std::slice::from_ref(&x), |g, i| {
        g.max_pool2d(i[0], &padded).unwrap()
    });
    assert_eq!(vals(&y), [1.0, 3.0, 7.0, 9.0]);
    let y = eval1(std::slice::from_ref(&x), |g, i| {
        g.avg_pool2d(i[0], &padded, false).unwrap()
    });
    assert_eq!(vals(&y), [1.0, 2.5, 5.5, 7.0]);
    let y = eval1(std::slice::from_ref(&x), |g, i| {
        g.avg_pool2d(i[0], &padded, true).unwrap()
    });
    assert_eq!(vals(&y), [0.25, 1.25, 2.75, 7.0]);
}

#[test]
fn conv2d_decomposition_matches_definition() {
    // (C, O, groups, kernel, strides, pads, dilations, H, W)
    type Case = (
        u64,
        u64,
        usize,
        [u64; 2],
        [usize; 2],
        [usize; 4],
        [usize; 2],
        u64,
        u64,
    );
    let cases: [Case; 7] = [
        (3, 4, 1, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 6, 5),
        (2, 3, 1, [1, 1], [1, 1], [0; 4], [1, 1], 4, 4),
        (4, 6, 2, [3, 2], [2, 1], [1, 0, 2, 1], [1, 1], 7, 6),
        (4, 4, 4, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 5, 5),
        (3, 2, 1, [3, 3], [1, 2], [2, 2, 2, 2], [2, 2], 6, 7),
        (2, 2, 1, [2, 2], [3, 3], [0; 4], [1, 1], 8, 8),
        (1, 2, 1, [5, 5], [1, 1], [0, 0, 0, 0], [1, 1], 5, 5),
    ];
    for (c, o, groups, k, strides, pads, dilations, h, w) in cases {
        let n = 2;
        let cg = c / groups as u64;
        let xs = [n, c, h, w];
        let ws = [o, cg, k[0], k[1]];
        let x = f32t(&xs, &ramp((n * c * h * w) as usize, 0.25));
        let wt = f32t(&ws, &ramp((o * cg * k[0] * k[1]) as usize, 0.125));
        let bt = f32t(&[o], &ramp(o as usize, 0.5));
        let attrs = crate::Conv2d {
            strides,
            pads,
            dilations,
            groups,
        };
        for bias in [false, true] {
            let mut g = Graph::new();
            let xi = g.input("x", DType::F32, &dims(&xs)).unwrap();
            let wi = g.input("w", DType::F32, &dims(&ws)).unwrap();
            let bi = g.input("b", DType::F32, &[d(o as i64)]).unwrap();
            let y = g.conv2d(xi, wi, bias.then_some(bi), &attrs).unwrap();
            g.output("y", y).unwrap();
            let feeds = [("x", &x), ("w", &wt), ("b", &bt)];
            definition_vs_decomposition(&g, &feeds, 1e-6);
        }
    }
}

/// An activation and a scaling after a convolution move above its final
/// reshape (into the matmul's epilogue) and compute the same values; the
/// output keeps its name as a reshape. With dotted names (as ONNX models
/// have), a generated name that is taken gets a suffix.
#[test]
fn an_activation_after_conv2d_moves_above_its_reshape() {
    let xs = [2, 3, 6, 5];
    let ws = [4, 3, 3, 3];
    let x = f32t(&xs, &ramp(2 * 3 * 6 * 5, 0.25));
    let wt = f32t(&ws, &ramp(4 * 27, 0.125));
    let bt = f32t(&[4], &ramp(4, 0.5));
    let attrs = crate::Conv2d {
        pads: [1, 1, 1, 1],
        ..crate::Conv2d::default()
    };
    for dotted in [false, true] {
        let mut g = Graph::new();
        let xi = g.input("x", DType::F32, &dims(&xs)).unwrap();
        let wi = g.input("w", DType::F32, &dims(&ws)).unwrap();
        let bi = g.input("b", DType::F32, &[d(4)]).unwrap();
        let y = g.conv2d(xi, wi, Some(bi), &attrs).unwrap();
        let r = g.unary(Opcode::Relu, y).unwrap();
        let s = g.scalar(Opcode::MulS, r, 0.5).unwrap();
        if dotted {
            g.rename(y, "c.out").unwrap();
            g.rename(r, "c.out.act").unwrap();
        }
        g.output("y", s).unwrap();
        let feeds = [("x", &x), ("w", &wt), ("b", &bt)];
        let v = definition_vs_decomposition(&g, &feeds, 1e-6);
        assert!(v.iter().all(|&e| e >= 0.0) && v.iter().any(|&e| e > 0.0));
        let dg = crate::decompose(&g).unwrap();
        let (_, out) = &dg.outputs()[0];
        assert_eq!(dg[*out].op, Op::Reshape);
        assert_eq!(dg[*out].shape, g[s].shape);
        let moved = dg[*out].operands[0];
        assert_eq!(dg[moved].op, Op::Scalar(Opcode::MulS, 0.5));
        assert_eq!(dg[moved].shape.len(), 3, "over [N, O, OH·OW]");
        let relu = dg[moved].operands[0];
        assert_eq!(dg[relu].op, Op::Unary(Opcode::Relu));
        let mut names: Vec<&str> = dg.nodes().iter().map(|n| n.name.as_str()).collect();
        if dotted {
            assert_eq!(dg[relu].name, "c.out.act_1");
            assert_eq!(dg.find("c.out.act_1"), Some(relu));
        }
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "names stay unique");
    }
}

#[test]
fn pool2d_decomposition_matches_definition() {
    let pools = [
        crate::Pool2d::new([2, 2]),
        crate::Pool2d {
            strides: [2, 2],
            ..crate::Pool2d::new([2, 2])
        },
        crate::Pool2d {
            strides: [2, 1],
            pads: [1, 1, 1, 0],
            ..crate::Pool2d::new([3, 3])
        },
        crate::Pool2d {
            strides: [1, 2],
            pads: [1, 1, 1, 1],
            dilations: [2, 1],
            ..crate::Pool2d::new([2, 3])
        },
        crate::Pool2d::new([1, 1]),
    ];
    let x = f32t(&[2, 3, 7, 6], &ramp(2 * 3 * 7 * 6, 0.3));
    for p in &pools {
        for kind in 0..3 {
            let mut g = Graph::new();
            let xi = g.input("x", DType::F32, &dims(&[2, 3, 7, 6])).unwrap();
            let y = match kind {
                0 => g.max_pool2d(xi, p).unwrap(),
                k => g.avg_pool2d(xi, p, k == 2).unwrap(),
            };
            g.output("y", y).unwrap();
            definition_vs_decomposition(&g, &[("x", &x)], 1e-6);
        }
    }
}

#[test]
fn window_ops_refuse_bad_parameters() {
    let mut g = Graph::new();
    let s = g.symbol("N", 1, 64).unwrap();
    let x = g
        .input("x", DType::F32, &[s.into(), d(4), d(5), d(5)])
        .unwrap();
    let w = g.input("w", DType::F32, &dims(&[6, 2, 3, 3])).unwrap();
    let err = |r: Result<NodeId, GraphError>| r.unwrap_err().to_string();
    let conv = |strides, pads, dilations, groups| crate::Conv2d {
        strides,
        pads,
        dilations,
        groups,
    };
    // Two groups: C = 4 = 2·2, O = 6. Symbolic batch is fine.
    let y = g
        .conv2d(x, w, None, &conv([1, 1], [0; 4], [1, 1], 2))
        .unwrap();
    assert_eq!(g.shape_string(y), "[N, 6, 3, 3]");
    let e = err(g.conv2d(x, w, None, &conv([1, 1], [0; 4], [1, 1], 1)));
    assert!(e.contains("group"), "{e}");
    let e = err(g.conv2d(x, w, None, &conv([0, 1], [0; 4], [1, 1], 2)));
    assert!(e.contains("at least 1"), "{e}");
    let e = err(g.conv2d(x, w, None, &conv([1, 1], [0; 4], [3, 3], 2)));
    assert!(e.contains("padded input"), "{e}");
    let e = err(g.conv2d(x, w, None, &conv([1, 1], [0; 4], [1, 1], 0)));
    assert!(e.contains("groups"), "{e}");
    let b = g.input("b", DType::F32, &[d(5)]).unwrap();
    let e = err(g.conv2d(x, w, Some(b), &conv([1, 1], [0; 4], [1, 1], 2)));
    assert!(e.contains("bias"), "{e}");
    let t = g.symbol("H", 1, 64).unwrap();
    let xs = g
        .input("xs", DType::F32, &[d(1), d(4), t.into(), d(5)])
        .unwrap();
    let e = err(g.conv2d(xs, w, None, &conv([1, 1], [0; 4], [1, 1], 2)));
    assert!(e.contains("constant extent"), "{e}");
    let e = err(g.max_pool2d(xs, &crate::Pool2d::new([2, 2])));
    assert!(e.contains("constant extent"), "{e}");
    let e = err(g.max_pool2d(x, &crate::Pool2d::new([6, 2])));
    assert!(e.contains("padded input"), "{e}");
    let e = err(g.max_pool2d(x, &crate::Pool2d::new([0, 2])));
    assert!(e.contains("at least 1"), "{e}");
    let wide = crate::Pool2d {
        pads: [2, 0, 0, 0],
        ..crate::Pool2d::new([2, 2])
    };
    let e = err(g.avg_pool2d(x, &wide, false));
    assert!(e.contains("entirely in the padding"), "{e}");
    let e = err(g.max_pool2d(x, &crate::Pool2d::new([64, 64])));
    assert!(e.contains("taps"), "{e}");
    let i = g.input("i", DType::I32, &dims(&[1, 1, 4, 4])).unwrap();
    assert!(g.max_pool2d(i, &crate::Pool2d::new([2, 2])).is_err());
    let v = g.input("v", DType::F32, &dims(&[4, 4])).unwrap();
    let e = err(g.max_pool2d(v, &crate::Pool2d::new([2, 2])));
    assert!(e.contains("rank 4"), "{e}");
}
