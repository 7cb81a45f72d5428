//! End-to-end checks of the compiler: group → bytecode → verifier → device.

use dvm_device::exec::{run_all_blocks_sequentially, UbStorage};
use dvm_device::gm::{GmBuf, KernelArgs};
use dvm_device::predecode::Program;
use dvm_isa::builder::ModuleBuilder;
use dvm_isa::{verify_kernel, DType, DeviceLimits, Module, Opcode};

use super::*;

/// Compiles `group`, runs it on `blocks` blocks one after the other, returns
/// the output buffers as f32.
fn run(group: &Group, inputs: &[Vec<f32>], blocks: u32, target: &Target) -> Vec<Vec<f32>> {
    assert!(crate::kernel::paths_agree(group, "k", target));
    let compiled = compile(group, "k", target).expect("compiles");
    let mut b = ModuleBuilder::new();
    b.add_kernel(compiled.kernel).expect("unique kernel name");
    let bytes = b.finish();
    let module = Module::parse(&bytes).expect("parses");
    let limits = DeviceLimits::with_ub_bytes(target.ub_bytes);
    let kernel = verify_kernel(&module, 0, &limits).expect("verifies");
    let program: Program = Program::new(&kernel).expect("predecodes");
    let ins: Vec<Vec<u8>> = inputs
        .iter()
        .map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let mut outs: Vec<Vec<u8>> = group
        .outputs
        .iter()
        .map(|(_, v)| vec![0u8; (v.numel() * v.dtype.size() as u64) as usize])
        .collect();
    {
        let bufs = ins
            .iter()
            .map(|b| GmBuf::from_slice(b))
            .chain(outs.iter_mut().map(|b| GmBuf::from_mut_slice(b)));
        let launch = KernelArgs::new(&kernel, bufs).expect("binds");
        let mut ub: Box<UbStorage> = Box::default();
        run_all_blocks_sequentially(&program, &launch, blocks, ub.as_mut_slice()).expect("runs");
    }
    outs.iter()
        .map(|b| {
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
        .collect()
}

fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn f32v(shape: &[u64]) -> View {
    View::contiguous(DType::F32, shape)
}

/// `x + bias` over `rows × cols`, the bias a `[cols]` row broadcast.
fn bias_add(rows: u64, cols: u64) -> Group {
    let x = f32v(&[rows, cols]);
    let bias = f32v(&[cols]).broadcast_to(&[rows, cols]).unwrap();
    Group {
        kind: GroupKind::Elementwise {
            shape: vec![rows, cols],
        },
        inputs: vec![x.clone(), bias],
        nodes: vec![
            (TileOp::Input(0), DType::F32),
            (TileOp::Input(1), DType::F32),
            (TileOp::Binary(Opcode::Add, 0, 1), DType::F32),
        ],
        outputs: vec![(2, x)],
    }
}

#[test]
fn broadcast_add_with_tails() {
    for &(rows, cols) in &[(1u64, 1u64), (3, 5), (17, 768), (1000, 3), (2, 70_001)] {
        let group = bias_add(rows, cols);
        let a = data((rows * cols) as usize, 1);
        let b = data(cols as usize, 2);
        for blocks in [1, 3] {
            let out = run(
                &group,
                &[a.clone(), b.clone()],
                blocks,
                &Target {
                    cores: 2,
                    ..Target::default()
                },
            );
            for (i, v) in out[0].iter().enumerate() {
                assert_eq!(*v, a[i] + b[i % cols as usize], "{rows}x{cols} at {i}");
            }
        }
    }
}

/// A broadcast operand's bytes count once in a kernel's traffic, as a
/// copy of it would move them: a `[cols]` bias added to `rows × cols` rows
/// moves the rows twice (in, out) and the bias once, however many rows.
#[test]
fn broadcast_operands_count_once_in_bytes_moved() {
    for &(rows, cols) in &[(1u64, 768u64), (21, 768), (4096, 768), (3, 5)] {
        let group = bias_add(rows, cols);
        let bias = &group.inputs[1];
        assert_eq!(bias.distinct_numel(), cols);
        assert_eq!(bias.numel(), rows * cols);
        let compiled = compile(&group, "k", &Target::default()).expect("compiles");
        assert_eq!(
            compiled.bytes_moved,
            4 * (2 * rows * cols + cols),
            "{rows}x{cols}"
        );
    }
    // A view with an empty dimension addresses nothing, broadcast or not.
    let empty = f32v(&[0, 7]).broadcast_to(&[3, 0, 7]).unwrap();
    assert_eq!(empty.distinct_numel(), 0);
}

#[test]
fn transposed_input_is_a_strided_load() {
    let (r, c) = (37u64, 29u64);
    let xt = f32v(&[c, r]).permute(&[1, 0]);
    let out = f32v(&[r, c]);
    let group = Group {
        kind: GroupKind::Elementwise { shape: vec![r, c] },
        inputs: vec![xt],
        nodes: vec![
            (TileOp::Input(0), DType::F32),
            (TileOp::Unary(Opcode::Neg, 0), DType::F32),
        ],
        outputs: vec![(1, out)],
    };
    let x = data((r * c) as usize, 3);
    let y = run(&group, std::slice::from_ref(&x), 2, &Target::default());
    for i in 0..r as usize {
        for j in 0..c as usize {
            assert_eq!(y[0][i * c as usize + j], -x[j * r as usize + i]);
        }
    }
}

fn softmax_group(shape: &[u64], axis: usize) -> Group {
    let x = f32v(shape);
    let mut red = shape.to_vec();
    red[axis] = 1;
    let mut rv = f32v(&red);
    rv.shape = shape.to_vec();
    rv.strides[axis] = 0;
    let _ = rv;
    Group {
        kind: GroupKind::Reduce {
            shape: shape.to_vec(),
            axis,
        },
        inputs: vec![x.clone()],
        nodes: vec![
            (TileOp::Input(0), DType::F32),
            (TileOp::Reduce(Opcode::ReduceMax, 0), DType::F32),
            (TileOp::Binary(Opcode::Sub, 0, 1), DType::F32),
            (TileOp::Unary(Opcode::Exp, 2), DType::F32),
            (TileOp::Reduce(Opcode::ReduceSum, 3), DType::F32),
            (TileOp::Binary(Opcode::Div, 3, 4), DType::F32),
        ],
        outputs: vec![(5, x)],
    }
}

#[test]
fn softmax_along_last_and_middle_axes() {
    for (shape, axis) in [
        (vec![5u64, 7], 1usize),
        (vec![300, 768], 1),
        (vec![4, 9, 6], 1),
        (vec![3, 5], 0),
    ] {
        let group = softmax_group(&shape, axis);
        let n: u64 = shape.iter().product();
        let x = data(n as usize, 4);
        let y = run(
            &group,
            std::slice::from_ref(&x),
            2,
            &Target {
                cores: 2,
                ..Target::default()
            },
        );
        // Reference.
        let outer: u64 = shape[..axis].iter().product();
        let len = shape[axis];
        let inner: u64 = shape[axis + 1..].iter().product();
        for o in 0..outer {
            for i in 0..inner {
                let idx = |a: u64| (o * len * inner + a * inner + i) as usize;
                let m = (0..len).map(|a| x[idx(a)] as f64).fold(f64::MIN, f64::max);
                let s: f64 = (0..len).map(|a| (x[idx(a)] as f64 - m).exp()).sum();
                for a in 0..len {
                    let want = (x[idx(a)] as f64 - m).exp() / s;
                    let got = y[0][idx(a)] as f64;
                    assert!(
                        (want - got).abs() < 1e-6,
                        "{shape:?} axis {axis}: {got} vs {want}"
                    );
                }
            }
        }
    }
}

#[test]
fn row_sum_stores_reduced_output() {
    let (r, c) = (33u64, 100u64);
    let x = f32v(&[r, c]);
    let mut out = f32v(&[r, 1]);
    out.shape = vec![r, 1];
    let group = Group {
        kind: GroupKind::Reduce {
            shape: vec![r, c],
            axis: 1,
        },
        inputs: vec![x],
        nodes: vec![
            (TileOp::Input(0), DType::F32),
            (TileOp::Reduce(Opcode::ReduceSum, 0), DType::F32),
        ],
        outputs: vec![(1, out)],
    };
    let xs = data((r * c) as usize, 5);
    let y = run(&group, std::slice::from_ref(&xs), 3, &Target::default());
    for i in 0..r as usize {
        let want: f64 = xs[i * c as usize..(i + 1) * c as usize]
            .iter()
            .map(|v| *v as f64)
            .sum();
        assert!((y[0][i] as f64 - want).abs() < 1e-4);
    }
}

#[test]
fn matmul_with_bias_relu_and_transposes() {
    for &(m, n, k, ta, tb) in &[
        (1u64, 1u64, 1u64, false, false),
        (17, 33, 70, false, false),
        (64, 768, 768, false, false),
        (5, 300, 513, false, true),
        (130, 7, 40, true, false),
    ] {
        let a = if ta {
            f32v(&[k, m]).permute(&[1, 0])
        } else {
            f32v(&[m, k])
        };
        let b = if tb {
            f32v(&[n, k]).permute(&[1, 0])
        } else {
            f32v(&[k, n])
        };
        let bias = f32v(&[n]).broadcast_to(&[m, n]).unwrap();
        let group = Group {
            kind: GroupKind::Matmul {
                batch: vec![],
                m,
                n,
                k,
                acc: DType::F32,
            },
            inputs: vec![a, b, bias],
            nodes: vec![
                (TileOp::Matmul, DType::F32),
                (TileOp::Input(2), DType::F32),
                (TileOp::Binary(Opcode::Add, 0, 1), DType::F32),
                (TileOp::Unary(Opcode::Relu, 2), DType::F32),
            ],
            outputs: vec![(3, f32v(&[m, n]))],
        };
        let av = data((m * k) as usize, 6);
        let bv = data((k * n) as usize, 7);
        let cv = data(n as usize, 8);
        let y = run(
            &group,
            &[av.clone(), bv.clone(), cv.clone()],
            2,
            &Target {
                cores: 2,
                ..Target::default()
            },
        );
        for i in 0..m as usize {
            for j in 0..n as usize {
                let mut s = cv[j] as f64;
                for p in 0..k as usize {
                    let x = if ta {
                        av[p * m as usize + i]
                    } else {
                        av[i * k as usize + p]
                    };
                    let w = if tb {
                        bv[j * k as usize + p]
                    } else {
                        bv[p * n as usize + j]
                    };
                    s += x as f64 * w as f64;
                }
                let want = s.max(0.0);
                let got = y[0][i * n as usize + j] as f64;
                assert!(
                    (want - got).abs() < 1e-4 * (1.0 + want.abs()),
                    "{m}x{n}x{k} ta={ta} tb={tb} [{i},{j}]: {got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn batched_matmul_broadcasts_batch() {
    let (bt, m, n, k) = (3u64, 9u64, 11u64, 13u64);
    let a = f32v(&[bt, m, k]);
    let b = f32v(&[k, n]).broadcast_to(&[bt, k, n]).unwrap();
    let group = Group {
        kind: GroupKind::Matmul {
            batch: vec![bt],
            m,
            n,
            k,
            acc: DType::F32,
        },
        inputs: vec![a, b],
        nodes: vec![(TileOp::Matmul, DType::F32)],
        outputs: vec![(0, f32v(&[bt, m, n]))],
    };
    let av = data((bt * m * k) as usize, 9);
    let bv = data((k * n) as usize, 10);
    let y = run(&group, &[av.clone(), bv.clone()], 2, &Target::default());
    for q in 0..bt as usize {
        for i in 0..m as usize {
            for j in 0..n as usize {
                let s: f64 = (0..k as usize)
                    .map(|p| {
                        av[q * (m * k) as usize + i * k as usize + p] as f64
                            * bv[p * n as usize + j] as f64
                    })
                    .sum();
                let got = y[0][q * (m * n) as usize + i * n as usize + j] as f64;
                assert!((s - got).abs() < 1e-4);
            }
        }
    }
}

#[test]
fn six_dim_broadcast_uses_several_bodies() {
    let shape = [2u64, 3, 2, 3, 2, 5];
    let a = f32v(&shape);
    // Broadcast along alternating axes so nothing coalesces.
    let b = f32v(&[2, 1, 2, 1, 2, 1]).broadcast_to(&shape).unwrap();
    let group = Group {
        kind: GroupKind::Elementwise {
            shape: shape.to_vec(),
        },
        inputs: vec![a.clone(), b],
        nodes: vec![
            (TileOp::Input(0), DType::F32),
            (TileOp::Input(1), DType::F32),
            (TileOp::Binary(Opcode::Mul, 0, 1), DType::F32),
        ],
        outputs: vec![(2, a)],
    };
    let compiled = compile(&group, "k", &Target::default()).unwrap();
    assert!(compiled.kernel.bodies.len() > 1);
    let n: u64 = shape.iter().product();
    let av = data(n as usize, 11);
    let bv = data(8, 12);
    let y = run(&group, &[av.clone(), bv.clone()], 2, &Target::default());
    for (i, got) in y[0].iter().enumerate() {
        let mut rem = i as u64;
        let mut idx = [0u64; 6];
        for d in (0..6).rev() {
            idx[d] = rem % shape[d];
            rem /= shape[d];
        }
        let bi = idx[0] * 4 + idx[2] * 2 + idx[4];
        assert_eq!(*got, av[i] * bv[bi as usize]);
    }
}

/// `kernel::build` (scratch, module written directly) and `compile` +
/// `kernel::ready` (`KernelDef`, `ModuleBuilder`) give the same module.
#[test]
fn build_matches_compile_then_ready() {
    for cores in [1, 2, 8] {
        let target = Target {
            cores,
            ..Target::default()
        };
        for s in [1, 17, 128, 4096] {
            for (name, g) in crate::samples::groups(s) {
                assert!(
                    crate::kernel::paths_agree(&g, name, &target),
                    "{name} S={s}"
                );
            }
        }
    }
}

/// A plain `m × k` by `k × n` f32 matmul group.
fn matmul_group(m: u64, n: u64, k: u64) -> Group {
    Group {
        kind: GroupKind::Matmul {
            batch: vec![],
            m,
            n,
            k,
            acc: DType::F32,
        },
        inputs: vec![f32v(&[m, k]), f32v(&[k, n])],
        nodes: vec![(TileOp::Matmul, DType::F32)],
        outputs: vec![(0, f32v(&[m, n]))],
    }
}

#[test]
fn huge_matmuls_are_refused_not_panicked_on_or_emitted() {
    let t = Target::default();
    // A contraction whose chunks alone overflow the executor's program:
    // refused at once, before any of its code is emitted.
    let start = std::time::Instant::now();
    let e = compile(&matmul_group(64, 64, 1 << 32), "k", &t).unwrap_err();
    assert!(
        matches!(&e, CompileError::TooLarge(what) if what.starts_with("a contraction of length 4294967296 (")),
        "{e}"
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(2));
    // The longest contraction a program holds still compiles.
    compile(&matmul_group(4, 4, 256 * 85), "k", &t).unwrap();
    // A tile grid of more than 2^32-1 tiles (the verifier's limit) is the
    // compiler's refusal, not a kernel that "does not verify" (which
    // reads as a compiler bug).
    let e = compile(&matmul_group(1 << 30, 1 << 30, 1024), "k", &t).unwrap_err();
    assert!(
        matches!(&e, CompileError::TooLarge(what) if what.contains("more than 2^32-1 tiles")),
        "{e}"
    );
}
