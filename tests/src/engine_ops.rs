//! Cases for the operators real models need: trigonometry (rotary
//! embeddings), `iota` and `trilu` (positions, causal masks), `gather`
//! (embedding lookups), …

use dvm_isa::DType;
use dvm_sym::Dim;

use super::{Builder, Case, Domain, F32, R};

/// Every case of this module.
pub(super) fn cases(out: &mut Vec<Case>) -> R<()> {
    trig(out)?;
    iota_trilu(out)?;
    gather(out)?;
    windows(out)?;
    Ok(())
}

/// `sin`/`cos` at half precision, and a rotary embedding: the angles
/// `pos · freq`, their sine and cosine, and the rotation of the two halves
/// of `x`, all element-wise and fused.
fn trig(out: &mut Vec<Case>) -> R<()> {
    for dt in [DType::F16, DType::BF16] {
        let mut b = Builder::new(format!("trig/{}-sin-cos", dt.name())).tol(1e-2, 1e-2);
        let x = b.input("x", dt, &[4, 65], Domain::Any)?;
        let s = b.g.sin(x)?;
        let c = b.g.cos(x)?;
        out.push(b.output(&[s, c])?);
    }
    for s in [1u64, 37] {
        let mut b = Builder::new(format!("trig/rotary-S={s}")).tol(1e-5, 1e-5);
        let sym = b.g.symbol("S", 1, 4096)?;
        let sd = Dim::from(sym);
        let h = 16i64;
        let x = b.input_dims(
            "x",
            F32,
            &[sd.clone(), Dim::from(2 * h)],
            &[s, 32],
            Domain::Any,
        )?;
        let pos = b.input_dims("pos", F32, &[sd, Dim::from(1)], &[s, 1], Domain::Positive)?;
        let freq: Vec<f64> = (0..h)
            .map(|i| 10000f64.powf(-(i as f64) / h as f64))
            .collect();
        let f = b.g.constant(F32, &[Dim::from(h)], &freq)?;
        let ang = b.g.mul(pos, f)?;
        let (sn, cs) = (b.g.sin(ang)?, b.g.cos(ang)?);
        let x1 = b.g.slice(x, &[(1, 0, h, 1)])?;
        let x2 = b.g.slice(x, &[(1, h, 2 * h, 1)])?;
        let a = b.g.mul(x1, cs)?;
        let bb = b.g.mul(x2, sn)?;
        let lo = b.g.sub(a, bb)?;
        let c = b.g.mul(x1, sn)?;
        let d = b.g.mul(x2, cs)?;
        let hi = b.g.add(c, d)?;
        let y = b.g.concat(&[lo, hi], 1)?;
        out.push(b.output(&[y])?);
    }
    Ok(())
}

/// `iota` at symbolic lengths (rotary positions computed in the graph),
/// `trilu` both ways with offsets, and causal masks (from `trilu` and from
/// two `iota`s and a comparison) feeding a softmax.
fn iota_trilu(out: &mut Vec<Case>) -> R<()> {
    for s in [1u64, 7, 130] {
        let mut b = Builder::new(format!("iota/positions-S={s}")).tol(1e-5, 1e-5);
        let sym = b.g.symbol("S", 1, 4096)?;
        let sd = Dim::from(sym);
        let x = b.input_dims("x", F32, &[sd.clone(), Dim::from(8)], &[s, 8], Domain::Any)?;
        let pos = b.g.iota(F32, &[sd.clone(), Dim::from(1)], 0)?;
        let ipos = b.g.iota(DType::I32, &[sd], 0)?;
        let freq: Vec<f64> = (0..8).map(|i| 10000f64.powf(-(i as f64) / 8.0)).collect();
        let f = b.g.constant(F32, &[Dim::from(8)], &freq)?;
        let ang = b.g.mul(pos, f)?;
        let c = b.g.cos(ang)?;
        let y = b.g.mul(x, c)?;
        out.push(b.output(&[y, ipos])?);
    }
    for (upper, k) in [(true, 0i64), (true, 2), (false, 0), (false, -1)] {
        let name = format!("trilu/{}-k={k}", if upper { "upper" } else { "lower" });
        let mut b = Builder::new(name).tol(0.0, 0.0);
        let x = b.input("x", F32, &[2, 5, 7], Domain::Any)?;
        let y = b.g.trilu(x, upper, k)?;
        out.push(b.output(&[y])?);
    }
    for s in [1u64, 33] {
        let mut b = Builder::new(format!("causal/trilu-softmax-S={s}")).tol(1e-5, 1e-6);
        let sym = b.g.symbol("S", 1, 4096)?;
        let sd = Dim::from(sym);
        let x = b.input_dims("x", F32, &[sd.clone(), sd.clone()], &[s, s], Domain::Any)?;
        let ones = b.g.full(F32, &[sd.clone(), sd.clone()], 1.0)?;
        let keep = b.g.trilu(ones, false, 0)?;
        let keep = b.g.scalar(dvm_isa::Opcode::NeS, keep, 0.0)?;
        let ninf = b.g.full(F32, &[], f64::NEG_INFINITY)?;
        let masked = b.g.where_(keep, x, ninf)?;
        let p = b.g.softmax(masked, -1)?;
        out.push(b.output(&[p])?);

        let mut b = Builder::new(format!("causal/iota-softmax-S={s}")).tol(1e-5, 1e-6);
        let sym = b.g.symbol("S", 1, 4096)?;
        let sd = Dim::from(sym);
        let x = b.input_dims("x", F32, &[sd.clone(), sd.clone()], &[s, s], Domain::Any)?;
        let i = b.g.iota(DType::I32, &[sd.clone(), Dim::from(1)], 0)?;
        let j = b.g.iota(DType::I32, &[Dim::from(1), sd], 1)?;
        let keep = b.g.binary(dvm_isa::Opcode::Le, j, i)?;
        let ninf = b.g.full(F32, &[], f64::NEG_INFINITY)?;
        let masked = b.g.where_(keep, x, ninf)?;
        let p = b.g.softmax(masked, -1)?;
        out.push(b.output(&[p])?);
    }
    Ok(())
}

/// An input of `dims` fed `vals` as a tensor of `shape` (indices the
/// generated values would put out of range).
fn input_with(
    b: &mut Builder,
    name: &str,
    dtype: DType,
    dims: &[Dim],
    shape: &[u64],
    vals: &[f64],
) -> R<dvm_graph::NodeId> {
    let id = b.g.input(name, dtype, dims)?;
    let t =
        dvm_tensor::Tensor::from_f64(dtype, shape, vals).map_err(|e| super::invalid(name, e))?;
    b.inputs.push((name.to_string(), t));
    Ok(id)
}

/// `n` indices into an axis of `extent`, negative ones (from the end)
/// among them, all in range.
fn indices(n: usize, extent: i64, seed: u32) -> Vec<f64> {
    super::values(n, seed, Domain::Any, DType::I32)
        .into_iter()
        .map(|v| (v as i64).rem_euclid(2 * extent) as f64 - extent as f64)
        .collect()
}

/// `gather`: embedding lookups of every element size, other axes, rows
/// wider than a tile and more indices than a tile, a transposed table,
/// strided and broadcast indices, and a GPT-style token plus position
/// embedding at symbolic lengths (positions from an `iota`).
fn gather(out: &mut Vec<Case>) -> R<()> {
    let d = |v: u64| Dim::from(v as i64);
    for dt in [
        F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I8,
        DType::Bool,
    ] {
        let mut b = Builder::new(format!("gather/embedding-{}", dt.name())).tol(0.0, 0.0);
        let w = b.input("w", dt, &[50, 67], Domain::Any)?;
        let ids = input_with(
            &mut b,
            "ids",
            DType::I32,
            &[d(2), d(9)],
            &[2, 9],
            &indices(18, 50, 3),
        )?;
        let y = b.g.gather(w, ids, 0)?;
        out.push(b.output(&[y])?);
    }
    // (table shape, index shape, axis)
    let shapes: [(&[u64], &[u64], i64); 5] = [
        (&[3, 11, 5], &[4], 1),
        (&[6, 13], &[2, 3], -1),
        (&[3, 5000], &[4], 0),
        (&[20], &[9000], 0),
        (&[7, 3], &[], 0),
    ];
    for (i, (xs, is, axis)) in shapes.iter().enumerate() {
        let mut b = Builder::new(format!("gather/shape-{i}")).tol(0.0, 0.0);
        let x = b.input("x", F32, xs, Domain::Any)?;
        let extent = xs[axis.rem_euclid(xs.len() as i64) as usize] as i64;
        let n = is.iter().product::<u64>() as usize;
        let dims: Vec<Dim> = is.iter().map(|&v| d(v)).collect();
        let ids = input_with(&mut b, "ids", DType::I32, &dims, is, &indices(n, extent, 5))?;
        let y = b.g.gather(x, ids, *axis)?;
        out.push(b.output(&[y])?);
    }
    // Views: a transposed table; every other index of a longer vector; a
    // row of indices broadcast down two rows; a consumer fused after.
    let mut b = Builder::new("gather/views").tol(1e-6, 1e-6);
    let x = b.input("x", F32, &[16, 40], Domain::Any)?;
    let xt = b.g.transpose(x, &[1, 0])?;
    let ids = input_with(
        &mut b,
        "ids",
        DType::I32,
        &[d(10)],
        &[10],
        &indices(10, 16, 7),
    )?;
    let every_other = b.g.slice(ids, &[(0, 0, 10, 2)])?;
    let y1 = b.g.gather(xt, every_other, 1)?;
    let row = b.g.reshape(ids, &[d(1), d(10)])?;
    let both = b.g.expand(row, &[d(2), d(10)])?;
    let y2 = b.g.gather(x, both, 0)?;
    let y3 = b.g.scalar(dvm_isa::Opcode::MulS, y2, 3.0)?;
    out.push(b.output(&[y1, y3])?);
    // Token and position embeddings, as a GPT's first layer computes them.
    for (batch, s) in [(1u64, 1u64), (1, 7), (3, 33)] {
        let mut b = Builder::new(format!("gather/gpt-embed-{batch}x{s}")).tol(1e-6, 1e-6);
        let bsym = b.g.symbol("B", 1, 64)?;
        let ssym = b.g.symbol("S", 1, 64)?;
        let (bd, sd) = (Dim::from(bsym), Dim::from(ssym));
        let wte = b.input("wte", F32, &[97, 24], Domain::Any)?;
        let wpe = b.input("wpe", F32, &[64, 24], Domain::Any)?;
        let n = (batch * s) as usize;
        let vals: Vec<f64> = indices(n, 97, 11)
            .iter()
            .map(|v| v.rem_euclid(97.0))
            .collect();
        let tokens = input_with(
            &mut b,
            "tokens",
            DType::I32,
            &[bd, sd.clone()],
            &[batch, s],
            &vals,
        )?;
        let tok = b.g.gather(wte, tokens, 0)?;
        let pos = b.g.iota(DType::I32, &[sd], 0)?;
        let pe = b.g.gather(wpe, pos, 0)?;
        let h = b.g.add(tok, pe)?;
        out.push(b.output(&[h])?);
    }
    Ok(())
}

/// `conv2d` with strides, padding, dilations, groups and a bias, at a
/// symbolic batch; max and average pooling (padding counted and not);
/// and a small CNN (conv, ReLU, max pool, conv, ReLU, global mean,
/// linear), against the reference's direct definitions.
fn windows(out: &mut Vec<Case>) -> R<()> {
    use dvm_graph::{Conv2d, Pool2d};
    // (name, C, O, groups, kernel, strides, pads, dilations, H, W, bias)
    type Conv = (
        &'static str,
        u64,
        u64,
        usize,
        [u64; 2],
        [usize; 2],
        [usize; 4],
        [usize; 2],
        u64,
        u64,
        bool,
    );
    let convs: [Conv; 7] = [
        (
            "3x3-pad1-bias",
            3,
            8,
            1,
            [3, 3],
            [1, 1],
            [1, 1, 1, 1],
            [1, 1],
            16,
            16,
            true,
        ),
        ("1x1", 8, 4, 1, [1, 1], [1, 1], [0; 4], [1, 1], 5, 7, false),
        (
            "stride2-asym-pad",
            4,
            6,
            1,
            [3, 2],
            [2, 1],
            [1, 0, 2, 1],
            [1, 1],
            9,
            8,
            true,
        ),
        (
            "dilation2",
            3,
            5,
            1,
            [3, 3],
            [1, 1],
            [2, 2, 2, 2],
            [2, 2],
            10,
            9,
            true,
        ),
        (
            "groups2",
            4,
            6,
            2,
            [3, 3],
            [1, 2],
            [1, 1, 1, 1],
            [1, 1],
            7,
            7,
            true,
        ),
        (
            "depthwise",
            6,
            6,
            6,
            [3, 3],
            [1, 1],
            [1, 1, 1, 1],
            [1, 1],
            8,
            8,
            false,
        ),
        (
            "kernel-covers-input",
            2,
            3,
            1,
            [4, 4],
            [1, 1],
            [0; 4],
            [1, 1],
            4,
            4,
            true,
        ),
    ];
    for (name, c, o, groups, k, strides, pads, dilations, h, w, bias) in convs {
        for n in [1u64, 3] {
            let mut b = Builder::new(format!("conv2d/{name}-N={n}")).tol(1e-5, 1e-4);
            let sym = b.g.symbol("N", 1, 64)?;
            let xd = [
                Dim::from(sym),
                Dim::from(c as i64),
                Dim::from(h as i64),
                Dim::from(w as i64),
            ];
            let x = b.input_dims("x", F32, &xd, &[n, c, h, w], Domain::Any)?;
            let wt = b.input("w", F32, &[o, c / groups as u64, k[0], k[1]], Domain::Any)?;
            let bi = if bias {
                Some(b.input("b", F32, &[o], Domain::Any)?)
            } else {
                None
            };
            let attrs = Conv2d {
                strides,
                pads,
                dilations,
                groups,
            };
            let y = b.g.conv2d(x, wt, bi, &attrs)?;
            let y = b.g.relu(y)?;
            out.push(b.output(&[y])?);
        }
    }
    let pools = [
        ("2x2", Pool2d::new([2, 2]), [2, 2]),
        ("3x3-s2-pad1", Pool2d::new([3, 3]), [2, 2]),
        ("2x3-dilated", Pool2d::new([2, 3]), [1, 2]),
    ];
    for (name, p, strides) in pools {
        let mut p = Pool2d { strides, ..p };
        if name.contains("pad1") {
            p.pads = [1, 1, 1, 1];
        }
        if name.contains("dilated") {
            p.dilations = [2, 1];
            p.pads = [1, 1, 0, 1];
        }
        for kind in ["max", "avg", "avg-include-pad"] {
            let mut b = Builder::new(format!("pool2d/{kind}-{name}")).tol(1e-5, 1e-6);
            let x = b.input("x", F32, &[2, 3, 9, 8], Domain::Any)?;
            let y = match kind {
                "max" => b.g.max_pool2d(x, &p)?,
                k => b.g.avg_pool2d(x, &p, k.ends_with("pad"))?,
            };
            out.push(b.output(&[y])?);
        }
    }
    for n in [1u64, 4] {
        let mut b = Builder::new(format!("cnn/small-N={n}")).tol(1e-5, 1e-4);
        let sym = b.g.symbol("N", 1, 64)?;
        let xd = [Dim::from(sym), Dim::from(3), Dim::from(16), Dim::from(16)];
        let x = b.input_dims("x", F32, &xd, &[n, 3, 16, 16], Domain::Any)?;
        let consts = |b: &mut Builder, shape: &[i64], scale: f64| -> R<_> {
            let count = shape.iter().product::<i64>() as usize;
            let v: Vec<f64> = super::values(count, count as u32, Domain::Any, F32)
                .into_iter()
                .map(|v| v * scale)
                .collect();
            let dims: Vec<Dim> = shape.iter().map(|&d| Dim::from(d)).collect();
            Ok(b.g.constant(F32, &dims, &v)?)
        };
        let pad1 = Conv2d {
            pads: [1, 1, 1, 1],
            ..Conv2d::default()
        };
        let w1 = consts(&mut b, &[8, 3, 3, 3], 0.2)?;
        let b1 = consts(&mut b, &[8], 0.1)?;
        let h = b.g.conv2d(x, w1, Some(b1), &pad1)?;
        let h = b.g.relu(h)?;
        let pool = Pool2d {
            strides: [2, 2],
            ..Pool2d::new([2, 2])
        };
        let h = b.g.max_pool2d(h, &pool)?;
        let w2 = consts(&mut b, &[16, 8, 3, 3], 0.1)?;
        let b2 = consts(&mut b, &[16], 0.1)?;
        let h = b.g.conv2d(h, w2, Some(b2), &pad1)?;
        let h = b.g.relu(h)?;
        let h = b.g.mean(h, &[2, 3], false)?;
        let wf = consts(&mut b, &[16, 10], 0.3)?;
        let y = b.g.matmul(h, wf, false, false)?;
        out.push(b.output(&[y])?);
    }
    Ok(())
}
