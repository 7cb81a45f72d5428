"""The builtin workloads as ONNX models built with the onnx helper API
(opset 20), mirroring dvm_graph::models operation for operation. Every input
shape keeps S as the dynamic dimension "S", so one session serves every
length. A workload with an "onnx" file is loaded from that file instead."""

import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 20


class _G:
    """A small graph builder: nodes get fresh value names."""

    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def op(self, kind, *inputs, **attrs):
        self.n += 1
        out = f"t{self.n}"
        self.nodes.append(helper.make_node(kind, list(inputs), [out], **attrs))
        return out

    def const(self, value, dtype=np.float32):
        self.n += 1
        name = f"c{self.n}"
        self.inits.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
        return name

    def ln(self, x, g, b):
        return self.op("LayerNormalization", x, g, b, axis=-1, epsilon=1e-5)


def _linear_then(g, p, act, x, w, b):
    y = g.op("Add", g.op("MatMul", x, w), b)
    return g.op("Gelu", y, approximate="tanh") if act == "gelu" else g.op("Relu", y)


def gelu_linear(g, p, x, w, b):
    return _linear_then(g, p, "gelu", x, w, b)


def matmul_bias_relu(g, p, x, w, b):
    return _linear_then(g, p, "relu", x, w, b)


def softmax_rows(g, p, x):
    return g.op("Softmax", x, axis=-1)


def layer_norm_rows(g, p, x, gm, b):
    return g.ln(x, gm, b)


def add_layer_norm(g, p, x, r, gm, b):
    return g.ln(g.op("Add", x, r), gm, b)


def row_sum(g, p, x):
    return g.op("ReduceSum", x, g.const([-1], np.int64), keepdims=0)


def _attention(g, q, k, v, d):
    kt = g.op("Transpose", k, perm=[0, 2, 1])
    sc = g.op("Mul", g.op("MatMul", q, kt), g.const(1.0 / math.sqrt(d)))
    return g.op("MatMul", g.op("Softmax", sc, axis=-1), v)


def attention(g, p, q, k, v):
    return _attention(g, q, k, v, p["head_dim"])


def encoder_block(g, p, x, wq, wk, wv, wo, w1, b1, w2, b2, g1, be1, g2, be2):
    h, nh = p["hidden"], p["heads"]
    d = h // nh
    split = g.const([-1, nh, d], np.int64)
    merge = g.const([-1, h], np.int64)

    def heads(t):
        return g.op("Transpose", g.op("Reshape", t, split), perm=[1, 0, 2])

    q, k, v = (heads(g.op("MatMul", x, w)) for w in (wq, wk, wv))
    ctx = g.op("Reshape", g.op("Transpose", _attention(g, q, k, v, d), perm=[1, 0, 2]), merge)
    h1 = g.ln(g.op("Add", x, g.op("MatMul", ctx, wo)), g1, be1)
    m = g.op("Gelu", g.op("Add", g.op("MatMul", h1, w1), b1), approximate="tanh")
    m = g.op("Add", g.op("MatMul", m, w2), b2)
    return g.ln(g.op("Add", h1, m), g2, be2)


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


def model_bytes(spec, root):
    """The serialized ONNX model of a workload; `root` resolves relative .onnx paths."""
    if spec.get("onnx"):
        path = spec["onnx"]
        path = path if os.path.isabs(path) else os.path.join(root, path)
        with open(path, "rb") as f:
            return f.read()
    builder = spec.get("builder")
    if builder not in BUILDERS:
        raise ValueError(f"workload {spec['name']!r}: no ONNX definition for builder {builder!r}")
    g = _G()
    names = [i["name"] for i in spec["inputs"]]
    out = BUILDERS[builder](g, spec.get("params", {}), *names)
    g.nodes.append(helper.make_node("Identity", [out], ["y"]))
    inputs = [
        helper.make_tensor_value_info(i["name"], TensorProto.FLOAT, i["shape"]) for i in spec["inputs"]
    ]
    probe = helper.make_graph(g.nodes, spec["name"], inputs, [], g.inits)
    probe = helper.make_model(probe, opset_imports=[helper.make_opsetid("", OPSET)])
    inferred = onnx.shape_inference.infer_shapes(probe, strict_mode=True).graph.value_info
    output = next((v for v in inferred if v.name == "y"), None)
    if output is None:
        raise ValueError(f"workload {spec['name']!r}: ONNX shape inference gave no output shape")
    graph = helper.make_graph(g.nodes, spec["name"], inputs, [output], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def gemm_bytes(n):
    """An n × n by n × n MatMul model."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [n, n])
    c = helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "gemm", [a, b], [c])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    return model.SerializeToString()
