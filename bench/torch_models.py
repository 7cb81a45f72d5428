"""The builtin workloads as PyTorch functions (eager and Inductor), mirroring
dvm_graph::models operation for operation. Each takes the workload's inputs as
keyword arguments, in workloads.json's order."""

import math

import torch
import torch.nn.functional as F


def _gelu(x):
    return F.gelu(x, approximate="tanh")


def _ln(x, g, b):
    return F.layer_norm(x, (x.shape[-1],), g, b, 1e-5)


def gelu_linear(p, x, w, b):
    return _gelu(x @ w + b)


def matmul_bias_relu(p, x, w, b):
    return torch.relu(x @ w + b)


def softmax_rows(p, x):
    return torch.softmax(x, -1)


def layer_norm_rows(p, x, g, b):
    return _ln(x, g, b)


def add_layer_norm(p, x, r, g, b):
    return _ln(x + r, g, b)


def row_sum(p, x):
    return x.sum(-1)


def attention(p, q, k, v):
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(p["head_dim"]))
    return torch.softmax(scores, -1) @ v


def encoder_block(p, x, wq, wk, wv, wo, w1, b1, w2, b2, g1, be1, g2, be2):
    h, nh = p["hidden"], p["heads"]
    d = h // nh
    s = x.shape[0]

    def heads(t):
        return t.reshape(s, nh, d).transpose(0, 1)

    q, k, v = heads(x @ wq), heads(x @ wk), heads(x @ wv)
    pr = torch.softmax((q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d)), -1)
    ctx = (pr @ v).transpose(0, 1).reshape(s, h)
    h1 = _ln(x + ctx @ wo, g1, be1)
    m = _gelu(h1 @ w1 + b1) @ w2 + b2
    return _ln(h1 + m, g2, be2)


BUILDERS = {
    f.__name__: f
    for f in [
        gelu_linear,
        matmul_bias_relu,
        softmax_rows,
        layer_norm_rows,
        add_layer_norm,
        row_sum,
        attention,
        encoder_block,
    ]
}


def function(spec):
    """The workload's function of its inputs (by name), or a ValueError."""
    builder = spec.get("builder")
    if spec.get("onnx"):
        raise ValueError(f"workload {spec['name']!r} is an ONNX file: dvm and ONNX Runtime run it")
    if builder not in BUILDERS:
        raise ValueError(f"workload {spec['name']!r}: no PyTorch definition for builder {builder!r}")
    f, p = BUILDERS[builder], spec.get("params", {})

    def call(**inputs):
        return f(p, **inputs)

    return call
