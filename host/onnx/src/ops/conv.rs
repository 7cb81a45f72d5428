//! `Conv`, `MaxPool`, `AveragePool` and `GlobalAveragePool` (2-D, NCHW).

use dvm_graph::{window_extent, Conv2d, Pool2d, ReduceOp, ShapeDisplay};

use super::NodeCx;
use crate::error::OnnxError;
use crate::import::Importer;
use crate::value::Value;

type R = Result<Vec<Value>, OnnxError>;

/// Integer-list attribute `name` of `n` values, each at least `min`, or
/// `default` when absent.
fn ints<const N: usize>(
    cx: &NodeCx<'_>,
    name: &str,
    default: Option<[usize; N]>,
    min: i64,
) -> Result<[usize; N], OnnxError> {
    let Some(v) = cx.attr_ints(name) else {
        return default.ok_or_else(|| cx.err(format!("attribute `{name}` is required")));
    };
    let bad = || {
        cx.err(format!(
            "attribute `{name}` is {v:?}: expected {N} integers of at least {min} (2-D)"
        ))
    };
    if v.len() != N || v.iter().any(|&x| x < min) {
        return Err(bad());
    }
    let mut out = [0usize; N];
    for (o, &x) in out.iter_mut().zip(&v) {
        *o = usize::try_from(x).map_err(|_| bad())?;
    }
    Ok(out)
}

/// The spatial extents `[H, W]` of input 0, which must be `[N, C, H, W]`
/// with H and W constants.
fn spatial(imp: &Importer<'_>, cx: &NodeCx<'_>, x: &Value) -> Result<[usize; 2], OnnxError> {
    let s = imp.shape_of(x);
    if s.len() != 4 {
        return Err(cx.unsupported(format!(
            "a rank-{} input (only 2-D windows over [N, C, H, W] are supported)",
            s.len()
        )));
    }
    let mut hw = [0usize; 2];
    for (i, e) in hw.iter_mut().enumerate() {
        *e = s[i + 2]
            .as_const()
            .and_then(|c| usize::try_from(c).ok())
            .ok_or_else(|| {
                cx.unsupported(format!(
                    "input 0 has a symbolic spatial extent {} (only the batch and channel axes \
                     may be symbolic)",
                    s[i + 2]
                ))
            })?;
        if *e == 0 {
            return Err(cx.err(format!(
                "input 0 has shape {}: an empty spatial axis",
                ShapeDisplay(&s)
            )));
        }
    }
    Ok(hw)
}

/// The window of `kernel` over `hw`: strides, pads (top, left, bottom,
/// right) and dilations from `strides`, `dilations`, `pads` and
/// `auto_pad`.
fn window(cx: &NodeCx<'_>, hw: [usize; 2], kernel: [usize; 2]) -> Result<Pool2d, OnnxError> {
    let strides = ints(cx, "strides", Some([1, 1]), 1)?;
    let dilations = ints(cx, "dilations", Some([1, 1]), 1)?;
    let auto = cx.attr_s("auto_pad").unwrap_or_else(|| "NOTSET".to_owned());
    let pads = match auto.as_str() {
        "NOTSET" => ints(cx, "pads", Some([0; 4]), 0)?,
        "VALID" | "SAME_UPPER" | "SAME_LOWER" if cx.has_attr("pads") => {
            return Err(cx.err(format!(
                "attributes `pads` and auto_pad `{auto}` are exclusive"
            )))
        }
        "VALID" => [0; 4],
        "SAME_UPPER" | "SAME_LOWER" => {
            let mut pads = [0usize; 4];
            for i in 0..2 {
                // Output ⌈H / stride⌉; the padding that gives it.
                let out = hw[i].div_ceil(strides[i]);
                let span = dilations[i]
                    .checked_mul(kernel[i] - 1)
                    .and_then(|s| s.checked_add(1))
                    .ok_or_else(|| cx.err("window arithmetic overflows"))?;
                let need = (out - 1)
                    .checked_mul(strides[i])
                    .and_then(|s| s.checked_add(span))
                    .ok_or_else(|| cx.err("window arithmetic overflows"))?;
                let total = need.saturating_sub(hw[i]);
                let small = total / 2;
                let (lo, hi) = if auto == "SAME_UPPER" {
                    (small, total - small)
                } else {
                    (total - small, small)
                };
                pads[i] = lo;
                pads[i + 2] = hi;
            }
            pads
        }
        other => return Err(cx.err(format!("auto_pad `{other}` is not an ONNX value"))),
    };
    for i in 0..2 {
        // A pad beyond both the window's span and the input's extent only
        // adds outputs that see padding alone: refused, before the padded
        // input is built.
        let span = dilations[i].saturating_mul(kernel[i] - 1).saturating_add(1);
        let cap = span.max(hw[i]);
        for p in [pads[i], pads[i + 2]] {
            if p > cap {
                return Err(cx.err(format!(
                    "attribute `pads` is {pads:?}: a pad of {p} along {} exceeds both the \
                     window's span {span} and the input's extent {}",
                    ["H", "W"][i],
                    hw[i]
                )));
            }
        }
        window_extent(
            hw[i],
            pads[i],
            pads[i + 2],
            kernel[i],
            strides[i],
            dilations[i],
        )
        .map_err(|m| cx.err(format!("along {}: {m}", ["H", "W"][i])))?;
    }
    Ok(Pool2d {
        kernel,
        strides,
        pads,
        dilations,
    })
}

/// `Conv`: `X [N, C, H, W]`, `W [O, C/group, KH, KW]`, optional `B [O]`.
pub(super) fn conv(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let xv = imp.req(cx, 0)?;
    let wv = imp.req(cx, 1)?;
    let hw = spatial(imp, cx, &xv)?;
    let ws = imp.shape_of(&wv);
    let wk: Option<Vec<usize>> = (ws.len() == 4)
        .then(|| {
            ws[2..]
                .iter()
                .map(|d| d.as_const().and_then(|c| usize::try_from(c).ok()))
                .collect()
        })
        .flatten();
    let Some(wk) = wk else {
        return Err(cx.err(format!(
            "input 1 (the weight) has shape {}: expected [O, C/group, KH, KW] with \
             constant extents",
            ShapeDisplay(&ws)
        )));
    };
    let kernel = [wk[0], wk[1]];
    if kernel.contains(&0) {
        return Err(cx.err(format!(
            "input 1 (the weight) has shape {}: an empty kernel",
            ShapeDisplay(&ws)
        )));
    }
    if let Some(k) = cx.attr_ints("kernel_shape") {
        if k.len() != 2 || k[0] != kernel[0] as i64 || k[1] != kernel[1] as i64 {
            return Err(cx.err(format!(
                "attribute `kernel_shape` is {k:?}, but the weight's kernel is {kernel:?}"
            )));
        }
    }
    let group = cx.attr_i("group", 1);
    let groups = usize::try_from(group)
        .ok()
        .filter(|&g| g >= 1)
        .ok_or_else(|| cx.err(format!("attribute `group` is {group}: expected at least 1")))?;
    let Pool2d {
        strides,
        pads,
        dilations,
        ..
    } = window(cx, hw, kernel)?;
    let x = imp.tensor(cx, 0)?;
    let w = imp.tensor(cx, 1)?;
    let b = match imp.value(cx, 2)? {
        Some(_) => Some(imp.tensor(cx, 2)?),
        None => None,
    };
    let attrs = Conv2d {
        strides,
        pads,
        dilations,
        groups,
    };
    let y = imp.g.conv2d(x, w, b, &attrs).map_err(|e| cx.graph_err(e))?;
    Ok(vec![Value::Runtime {
        id: y,
        elem: xv.elem(),
    }])
}

/// The window of `MaxPool` or `AveragePool`, `ceil_mode` refused unless
/// it gives the floor's extents.
fn pool_window(imp: &Importer<'_>, cx: &NodeCx<'_>, x: &Value) -> Result<Pool2d, OnnxError> {
    let hw = spatial(imp, cx, x)?;
    let kernel = ints(cx, "kernel_shape", None, 1)?;
    let p = window(cx, hw, kernel)?;
    if cx.attr_i("ceil_mode", 0) != 0 {
        // ⌈·⌉ and ⌊·⌋ agree when the stride divides what the kernel leaves.
        let exact = (0..2).all(|i| {
            let span = p.dilations[i] * (kernel[i] - 1) + 1;
            (hw[i] + p.pads[i] + p.pads[i + 2] - span) % p.strides[i] == 0
        });
        if !exact {
            return Err(cx.unsupported(
                "ceil_mode = 1 where it adds a partial window (only floor rounding is supported)",
            ));
        }
    }
    Ok(p)
}

/// `MaxPool` without the `Indices` output.
pub(super) fn max_pool(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    if cx.node.output.iter().skip(1).any(|o| !o.is_empty()) {
        return Err(cx.unsupported("the Indices output"));
    }
    let order = cx.attr_i("storage_order", 0);
    if order != 0 {
        return Err(cx.unsupported(format!(
            "storage_order = {order} (only 0, row major, is supported)"
        )));
    }
    let xv = imp.req(cx, 0)?;
    let p = pool_window(imp, cx, &xv)?;
    let x = imp.tensor(cx, 0)?;
    let y = imp.g.max_pool2d(x, &p).map_err(|e| cx.graph_err(e))?;
    Ok(vec![Value::Runtime {
        id: y,
        elem: xv.elem(),
    }])
}

/// `AveragePool`, with `count_include_pad`.
pub(super) fn average_pool(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let xv = imp.req(cx, 0)?;
    let p = pool_window(imp, cx, &xv)?;
    let include = cx.attr_i("count_include_pad", 0) != 0;
    let x = imp.tensor(cx, 0)?;
    let y = imp
        .g
        .avg_pool2d(x, &p, include)
        .map_err(|e| cx.graph_err(e))?;
    Ok(vec![Value::Runtime {
        id: y,
        elem: xv.elem(),
    }])
}

/// `GlobalAveragePool`: the mean over every axis after the channels,
/// kept as extent 1.
pub(super) fn global_average_pool(imp: &mut Importer<'_>, cx: &NodeCx<'_>) -> R {
    let xv = imp.req(cx, 0)?;
    let rank = imp.shape_of(&xv).len();
    if rank < 3 {
        return Err(cx.err(format!(
            "input 0 has rank {rank}: expected [N, C, spatial…] (rank at least 3)"
        )));
    }
    let axes: Vec<i64> = (2..rank as i64).collect();
    let x = imp.tensor(cx, 0)?;
    let y = imp
        .g
        .reduce(x, ReduceOp::Mean, &axes, true)
        .map_err(|e| cx.graph_err(e))?;
    Ok(vec![Value::Runtime {
        id: y,
        elem: xv.elem(),
    }])
}
