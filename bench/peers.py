"""A peer of the side-by-side suite: one long-lived process per system, driven
by orchestrate.py over the line protocol of dvm-bench (host/bench/src/protocol.rs):
one JSON request a line on stdin, one JSON answer a line on stdout, times in
seconds, weights passed per call.

    python peers.py ort|eager|inductor

A system whose packages fail to import answers every request with the import
error, so the orchestrator reports it and carries on without it."""

import contextlib
import json
import os
import sys
import tempfile
import time
import traceback

import numpy as np

from inputs import make_inputs, values

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Ort:
    """ONNX Runtime, CPU execution provider, all graph optimisations."""

    name = "ort"

    def __init__(self):
        import onnxruntime

        from onnx_models import gemm_bytes, model_bytes

        self.ort, self.model_bytes, self.gemm_bytes = onnxruntime, model_bytes, gemm_bytes
        self.threads = 1
        self.version = onnxruntime.__version__

    def _session(self, data):
        so = self.ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.execution_mode = self.ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = self.ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        return self.ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])

    def cold(self):
        """A context in which a fresh model state starts from empty caches."""
        return contextlib.nullcontext()

    def build(self, spec):
        """What `fresh` needs, built untimed: the model's bytes, or for a
        workload defined by an .onnx file its path (session creation, timed
        in a first call, reads the file as dvm's import does)."""
        if spec.get("onnx"):
            path = spec["onnx"]
            return path if os.path.isabs(path) else os.path.join(ROOT, path)
        return self.model_bytes(spec, ROOT)

    def fresh(self, built):
        sess = self._session(built)
        return lambda feeds: sess.run(None, feeds)[0]

    def convert(self, inputs):
        return dict(inputs)

    def to_numpy(self, out):
        return out

    def gemm(self, n):
        sess = self._session(self.gemm_bytes(n))
        a = values(n * n, 0, 0, 1.0).reshape(n, n)
        return lambda: sess.run(None, {"a": a, "b": a})[0]


class Eager:
    """PyTorch eager, inference mode."""

    name = "eager"

    def __init__(self):
        import torch

        import torch_models

        self.torch, self.models = torch, torch_models
        self.threads = 1
        self.version = torch.__version__
        torch.set_grad_enabled(False)

    def set_threads(self, n):
        self.torch.set_num_threads(n)

    def cold(self):
        return contextlib.nullcontext()

    def build(self, spec):
        return self.models.function(spec)

    def compile(self, f):
        return f

    def fresh(self, built):
        f = self.compile(built)
        torch = self.torch

        def call(feeds):
            with torch.inference_mode():
                return f(**feeds)

        return call

    def convert(self, inputs):
        return {n: self.torch.from_numpy(a) for n, a in inputs}

    def to_numpy(self, out):
        return out.numpy()

    def gemm(self, n):
        a = self.torch.from_numpy(values(n * n, 0, 0, 1.0).reshape(n, n))
        f = self.compile(lambda a, b: a @ b)

        def call():
            with self.torch.inference_mode():
                return f(a, a)

        return call


class Inductor(Eager):
    """torch.compile (Inductor, dynamic shapes); a fresh model state resets
    dynamo, so its first call compiles, and cold measurements run in a fresh
    Inductor cache (in memory and on disk), so that compile starts from
    nothing."""

    name = "inductor"

    def __init__(self):
        super().__init__()
        self.torch._dynamo.config.cache_size_limit = 64
        from torch._inductor.utils import fresh_cache

        self.fresh_cache = fresh_cache

    def cold(self):
        return self.fresh_cache()

    def compile(self, f):
        self.torch._dynamo.reset()
        return self.torch.compile(f, dynamic=True)


SYSTEMS = {"ort": Ort, "eager": Eager, "inductor": Inductor}


class Server:
    def __init__(self, system):
        self.sys = system
        self.spec = self.built = self.model = None
        self.feeds = None

    def handle(self, req):
        cmd = req.get("cmd")
        s = self.sys
        if cmd == "hello":
            return {"system": s.name, "version": s.version}
        if cmd == "threads":
            n = int(req["n"])
            if n < 1:
                raise ValueError("threads: `n` must be at least 1")
            s.threads = n
            if hasattr(s, "set_threads"):
                s.set_threads(n)
            if self.spec is not None:
                self.model = s.fresh(self.built)
            return {"threads": n}
        if cmd == "load":
            self.spec = self.built = self.model = self.feeds = None
            spec = req["workload"]
            self.built = s.build(spec)
            self.model = s.fresh(self.built)
            self.spec = spec
            return {}
        if cmd == "inputs":
            if self.spec is None:
                raise ValueError("no workload loaded (send `load` first)")
            self.feeds = s.convert(make_inputs(self.spec, int(req["s"]), int(req["seed"])))
            return {}
        if cmd == "quit":
            return {}
        if cmd == "gemm":
            f = s.gemm(int(req["n"]))
            f()
            best = float("inf")
            for _ in range(int(req["calls"])):
                t = time.perf_counter()
                f()
                best = min(best, time.perf_counter() - t)
            return {"gflops": 2.0 * int(req["n"]) ** 3 / best / 1e9, "best": best}
        if self.spec is None:
            raise ValueError("no workload loaded (send `load` first)")
        if cmd == "sequence":
            passes = [[], []]
            with s.cold():
                t = time.perf_counter()
                model = s.fresh(self.built)
                prepare = time.perf_counter() - t
                for times in passes:
                    for i, n in enumerate(req["lens"]):
                        feeds = s.convert(make_inputs(self.spec, int(n), int(req["seed"]) + i))
                        t = time.perf_counter()
                        out = model(feeds)
                        times.append(time.perf_counter() - t)
                        del out
            passes[0][0] += prepare
            return {"cold": passes[0], "warm": passes[1]}
        if self.feeds is None:
            raise ValueError("no inputs (send `inputs` first)")
        if cmd == "run":
            times = []
            for _ in range(int(req["calls"])):
                t = time.perf_counter()
                out = self.model(self.feeds)
                times.append(time.perf_counter() - t)
                del out
            return {"times": times}
        if cmd == "first":
            with s.cold():
                t = time.perf_counter()
                model = s.fresh(self.built)
                out = model(self.feeds)
                elapsed = time.perf_counter() - t
                del out
            return {"time": elapsed}
        if cmd == "dump":
            out = s.to_numpy(self.model(self.feeds))
            np.save(req["path"], np.ascontiguousarray(out, dtype=np.float32))
            return {"shape": list(out.shape)}
        raise ValueError(f"bad request: unknown cmd {cmd!r}")


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in SYSTEMS:
        print(f"usage: peers.py {'|'.join(SYSTEMS)}", file=sys.stderr)
        return 2
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="dvm-inductor-"))
    try:
        server, broken = Server(SYSTEMS[sys.argv[1]]()), None
    except Exception as e:  # a missing package: report, do not crash
        server, broken = None, f"{sys.argv[1]} unavailable: {type(e).__name__}: {e}"
    for line in sys.stdin:
        if not line.strip():
            continue
        req = None
        try:
            req = json.loads(line)
            if broken:
                raise RuntimeError(broken)
            ans = server.handle(req)
            ans["ok"] = True
        except Exception as e:
            ans = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            print(traceback.format_exc(), file=sys.stderr)
        sys.stdout.write(json.dumps(ans) + "\n")
        sys.stdout.flush()
        if isinstance(req, dict) and req.get("cmd") == "quit":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
