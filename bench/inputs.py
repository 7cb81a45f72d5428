"""Deterministic input values, bit for bit those of dvm-bench (host/bench/src/inputs.rs).

Element i of input number k (its position in the workload's input list) for
call seed `seed` is a 32-bit integer hash of i, seed and k mapped to [-1, 1),
multiplied by the input's scale in float64, then rounded to float32.
"""

import numpy as np

_M = np.uint64(0xFFFFFFFF)


def values(n, seed, k, scale):
    """n float32 values of input k at call seed `seed`, uniform in [-scale, scale)."""
    stream = np.uint64((((seed * 1000 + k) % 2**64) * 0x85EBCA77) % 2**64)
    u = ((np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B1)) ^ stream) & _M
    u ^= u >> np.uint64(16)
    u = (u * np.uint64(0x7FEB352D)) & _M
    u ^= u >> np.uint64(15)
    u = (u * np.uint64(0x846CA68B)) & _M
    u ^= u >> np.uint64(16)
    return ((u.astype(np.float64) / 4294967296.0 * 2.0 - 1.0) * scale).astype(np.float32)


def shape_at(shape, s):
    """A workload input's shape with the symbol S bound to s."""
    out = []
    for d in shape:
        if isinstance(d, int):
            out.append(d)
        elif d == "S":
            out.append(s)
        else:
            raise ValueError(f"unknown symbol {d!r} in shape {shape} (only 'S')")
    return out


def make_inputs(spec, s, seed):
    """The workload's inputs at length s for call seed `seed`: a list of (name, array)."""
    out = []
    for k, inp in enumerate(spec["inputs"]):
        shape = shape_at(inp["shape"], s)
        n = int(np.prod(shape, dtype=np.int64))
        out.append((inp["name"], values(n, seed, k, inp["scale"]).reshape(shape)))
    return out
