//! `conv2d`, `max_pool2d` and `avg_pool2d` by their definitions: nested
//! loops over the output and the window, independent of the im2col
//! decomposition the compiled path runs. Sums accumulate in `f64` and are
//! rounded once to the result dtype.

use dvm_isa::DType;
use dvm_tensor::round_float;

use super::{nan_max, Value};
use crate::op::{Conv2d, Pool2d};

/// The input coordinate of output position `o`'s tap `k` along one axis
/// (padding `pad` before it), or `None` when it falls in the padding.
fn tap(o: usize, k: usize, stride: usize, dilation: usize, pad: usize, n: usize) -> Option<usize> {
    (o * stride + k * dilation)
        .checked_sub(pad)
        .filter(|&i| i < n)
}

/// `conv2d` of `x` `[N, C, H, W]` by `w` `[O, C/groups, KH, KW]` plus an
/// optional bias `[O]`, into `shape` `[N, O, OH, OW]`; `None` if the
/// shapes do not fit together.
pub(super) fn conv2d(
    x: &Value,
    w: &Value,
    bias: Option<&Value>,
    a: &Conv2d,
    shape: &[usize],
    out: DType,
) -> Option<Vec<f64>> {
    let (&[n, c, h, wd], &[o, cg, kh, kw], &[n2, o2, oh, ow]) = (&x.shape[..], &w.shape[..], shape)
    else {
        return None;
    };
    let g = a.groups;
    if n != n2 || o != o2 || g == 0 || cg * g != c || o % g != 0 {
        return None;
    }
    let og = o / g;
    let mut y = Vec::with_capacity(n * o * oh * ow);
    for ni in 0..n {
        for oc in 0..o {
            let gi = oc / og;
            let b = bias.map_or(0.0, |b| b.data[oc]);
            for i in 0..oh {
                for j in 0..ow {
                    let mut acc = b;
                    for ci in 0..cg {
                        let cx = gi * cg + ci;
                        for p in 0..kh {
                            let Some(hi) = tap(i, p, a.strides[0], a.dilations[0], a.pads[0], h)
                            else {
                                continue;
                            };
                            for q in 0..kw {
                                let Some(wi) =
                                    tap(j, q, a.strides[1], a.dilations[1], a.pads[1], wd)
                                else {
                                    continue;
                                };
                                let xv = x.data[((ni * c + cx) * h + hi) * wd + wi];
                                let wv = w.data[((oc * cg + ci) * kh + p) * kw + q];
                                acc += xv * wv;
                            }
                        }
                    }
                    y.push(round_float(out, acc));
                }
            }
        }
    }
    Some(y)
}

/// `max_pool2d` (`avg: None`) or `avg_pool2d` (`avg: Some(count_include_pad)`)
/// of `x` `[N, C, H, W]` into `shape` `[N, C, OH, OW]`; `None` if the
/// shapes do not fit together.
pub(super) fn pool2d(
    x: &Value,
    p: &Pool2d,
    avg: Option<bool>,
    shape: &[usize],
    out: DType,
) -> Option<Vec<f64>> {
    let (&[n, c, h, wd], &[n2, c2, oh, ow]) = (&x.shape[..], shape) else {
        return None;
    };
    if n != n2 || c != c2 {
        return None;
    }
    let [kh, kw] = p.kernel;
    let mut y = Vec::with_capacity(n * c * oh * ow);
    for plane in 0..n * c {
        let src = &x.data[plane * h * wd..(plane + 1) * h * wd];
        for i in 0..oh {
            for j in 0..ow {
                let mut max = f64::NEG_INFINITY;
                let (mut sum, mut count) = (0.0, 0usize);
                for a in 0..kh {
                    let Some(hi) = tap(i, a, p.strides[0], p.dilations[0], p.pads[0], h) else {
                        continue;
                    };
                    for b in 0..kw {
                        let Some(wi) = tap(j, b, p.strides[1], p.dilations[1], p.pads[1], wd)
                        else {
                            continue;
                        };
                        let v = src[hi * wd + wi];
                        max = nan_max(max, v);
                        sum += v;
                        count += 1;
                    }
                }
                y.push(match avg {
                    None => max,
                    Some(true) => round_float(out, sum / (kh * kw) as f64),
                    Some(false) => round_float(out, sum / count as f64),
                });
            }
        }
    }
    Some(y)
}
