"""Deterministic input values, bit for bit those of dvm-bench (host/bench/src/inputs.rs).

Element i of input number k (its position in the workload's input list) for
call seed `seed` is a 32-bit integer hash of i, seed and k mapped to [-1, 1),
multiplied by the input's scale in float64, then rounded to float32.
An `int64` input (token ids) takes the same hash u into [0, high) as
(u * high) >> 32; a `bool` input is the lower triangle (diagonal included)
of its last two axes, a causal mask.
"""

import numpy as np

_M = np.uint64(0xFFFFFFFF)


def _hash(n, seed, k):
    """The 32-bit hashes of elements 0..n of input k at call seed `seed`, as uint64."""
    stream = np.uint64((((seed * 1000 + k) % 2**64) * 0x85EBCA77) % 2**64)
    u = ((np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B1)) ^ stream) & _M
    u ^= u >> np.uint64(16)
    u = (u * np.uint64(0x7FEB352D)) & _M
    u ^= u >> np.uint64(15)
    u = (u * np.uint64(0x846CA68B)) & _M
    u ^= u >> np.uint64(16)
    return u


def values(n, seed, k, scale):
    """n float32 values of input k at call seed `seed`, uniform in [-scale, scale)."""
    u = _hash(n, seed, k)
    return ((u.astype(np.float64) / 4294967296.0 * 2.0 - 1.0) * scale).astype(np.float32)


MAX_HIGH = 2**32


def ints(n, seed, k, high):
    """n int64 values of input k at call seed `seed`, uniform in [0, high)."""
    if not 1 <= high <= MAX_HIGH:
        raise ValueError(f"high {high} not in 1..=2^32")
    return ((_hash(n, seed, k) * np.uint64(high)) >> np.uint64(32)).astype(np.int64)


def causal_mask(shape):
    """A bool array of `shape` (rank >= 2) true on and below the diagonal of its last two axes."""
    if len(shape) < 2:
        raise ValueError(f"a bool mask needs two axes or more, not shape {shape}")
    tri = np.tri(shape[-2], shape[-1], dtype=bool)
    return np.ascontiguousarray(np.broadcast_to(tri, shape))


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
        dtype = inp.get("dtype", "float32")
        if dtype == "float32":
            a = values(n, seed, k, inp.get("scale", 1.0)).reshape(shape)
        elif dtype == "int64":
            if "high" not in inp:
                raise ValueError(f"input {inp['name']!r}: an int64 input needs `high`")
            a = ints(n, seed, k, int(inp["high"])).reshape(shape)
        elif dtype == "bool":
            a = causal_mask(shape)
        else:
            raise ValueError(f"input {inp['name']!r}: unknown dtype {dtype!r} (float32, int64, bool)")
        out.append((inp["name"], a))
    return out
