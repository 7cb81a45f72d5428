"""Tests of the suite's Python side (`cargo ci bench` runs them before the suite):

    python -m unittest discover -s bench -p 'test_*.py'
"""

import json
import os
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import inputs  # noqa: E402
import orchestrate  # noqa: E402
import report  # noqa: E402

WORKLOADS = json.load(open(os.path.join(HERE, "workloads.json")))["workloads"]


class Inputs(unittest.TestCase):
    def test_same_bits_as_dvm_bench(self):
        # host/bench/src/inputs.rs, test `known_values`.
        bits = inputs.values(4, 7, 1, 0.5).view(np.uint32).tolist()
        self.assertEqual(bits, [0xBE955063, 0x3ED9402A, 0x3E838386, 0xBDD67751])

    def test_ints_same_as_dvm_bench(self):
        # host/bench/src/inputs.rs, test `known_ints`.
        self.assertEqual(inputs.ints(6, 7, 1, 96).tolist(), [20, 88, 72, 37, 46, 77])
        v = inputs.ints(10_000, 3, 0, 96)
        self.assertEqual((v.min(), v.max(), v.dtype), (0, 95, np.int64))
        self.assertLess(int(inputs.ints(1000, 3, 0, 2**32).max()), 2**32)
        with self.assertRaises(ValueError):
            inputs.ints(4, 0, 0, 0)

    def test_typed_inputs(self):
        spec = {"inputs": [{"name": "tokens", "shape": [1, "S"], "dtype": "int64", "high": 96},
                           {"name": "mask", "shape": ["S", "S"], "dtype": "bool"}]}
        (_, t), (_, mask) = inputs.make_inputs(spec, 3, 4)
        self.assertEqual((t.shape, t.dtype), ((1, 3), np.int64))
        self.assertEqual(t.ravel().tolist(), inputs.ints(3, 4, 0, 96).tolist())
        self.assertEqual(mask.tolist(), [[True, False, False], [True, True, False], [True, True, True]])
        for bad in ({"name": "t", "shape": ["S"], "dtype": "int64"},
                    {"name": "m", "shape": ["S"], "dtype": "bool"},
                    {"name": "u", "shape": ["S"], "dtype": "uint8"}):
            with self.assertRaises(ValueError):
                inputs.make_inputs({"inputs": [bad]}, 3, 0)

    def test_every_zoo_workload_has_inputs(self):
        zoo = [w for w in WORKLOADS if w.get("onnx")]
        self.assertGreaterEqual(len(zoo), 7)
        for w in zoo:
            self.assertTrue(os.path.exists(os.path.join(orchestrate.ROOT, w["onnx"])), w["onnx"])
            for s in (w["lens"] if isinstance(w["lens"], list) else [3]):
                self.assertTrue(inputs.make_inputs(w, s, 0))

    def test_shapes_and_symbols(self):
        spec = {"inputs": [{"name": "x", "shape": [2, "S"], "scale": 1.0}]}
        (name, x), = inputs.make_inputs(spec, 5, 0)
        self.assertEqual((name, x.shape, x.dtype), ("x", (2, 5), np.float32))
        with self.assertRaises(ValueError):
            inputs.shape_at(["B"], 3)


class Check(unittest.TestCase):
    def save(self, d, name, a):
        p = os.path.join(d, name)
        np.save(p, np.asarray(a, dtype=np.float32))
        return p

    def test_tolerance(self):
        with tempfile.TemporaryDirectory() as d:
            ref = self.save(d, "r.npy", [1.0, 100.0])
            near = self.save(d, "a.npy", [1.0015, 100.09])
            far = self.save(d, "b.npy", [1.0, 100.2])
            short = self.save(d, "c.npy", [1.0])
            nan = self.save(d, "e.npy", [np.nan, 100.0])
            self.assertTrue(orchestrate.check(near, ref)["ok"])
            self.assertFalse(orchestrate.check(far, ref)["ok"])
            self.assertIn("shape", orchestrate.check(short, ref)["error"])
            self.assertIn("non-finite", orchestrate.check(nan, ref)["error"])


class Systems(unittest.TestCase):
    def test_missing_binary_is_reported(self):
        with tempfile.TemporaryDirectory() as d:
            s = orchestrate.System("dvm", [os.path.join(d, "nope")], d)
            self.assertFalse(s.alive)
            self.assertIn("could not start", s.ask({"cmd": "hello"})["error"])
            s.close()

    def test_dying_process_is_reported(self):
        with tempfile.TemporaryDirectory() as d:
            s = orchestrate.System("x", [sys.executable, "-c", "pass"], d)
            ans = s.ask({"cmd": "hello"}, timeout=60)
            self.assertFalse(ans["ok"])
            self.assertIn("exited", ans["error"])
            self.assertFalse(s.alive)
            s.close()

    def test_peer_without_its_package_answers_errors(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "onnxruntime.py"), "w") as f:
                f.write("raise ImportError('no onnxruntime here')\n")
            env = dict(os.environ, PYTHONPATH=d)
            s = orchestrate.System("ort", [sys.executable, os.path.join(HERE, "peers.py"), "ort"], d, env)
            hello = s.ask({"cmd": "hello"}, timeout=120)
            run = s.ask({"cmd": "run", "calls": 1}, timeout=120)
            s.close()
        self.assertFalse(hello["ok"])
        self.assertIn("ort unavailable: ImportError: no onnxruntime here", hello["error"])
        self.assertIn("ort unavailable", run["error"])


class Report(unittest.TestCase):
    def test_markdown_and_plots(self):
        case = {"workload": "softmax", "s": 17, "threads": 1,
                "systems": {"dvm": {"median": 2e-5, "min": 1e-5, "max": 3e-5, "calls": 3, "first": 1e-4},
                            "ort": {"median": 4e-5, "min": 3e-5, "max": 5e-5, "calls": 3, "first": 1e-3}},
                "ratio": {"median": 0.5, "min": 0.4, "max": 0.6},
                "check": {"reference": "ort", "dvm": {"ok": True, "max_abs": 1e-9}}}
        res = {"date": "2000-01-01", "mode": "smoke", "machine": orchestrate.machine(),
               "versions": {"dvm": "0"}, "skipped": {"eager": "torch missing"},
               "tolerance": {"atol": 1e-3, "rtol": 1e-3, "rule": "r"},
               "rooflines": {"copy_gbps": [10.0], "gemm_gflops": {"1": {"ort": {"128": 50.0}}}},
               "cases": [case], "sequences": [], "errors": ["x failed"], "duration_s": 1.0,
               "settings": {"seq_calls": 5, "seq_max": 32}, "command": "cargo ci bench --smoke"}
        md = report.markdown(res)
        self.assertIn("| softmax | 17 | 1 | 0.02 (0.01–0.03) | 0.04 (0.03–0.05) | **0.50** (0.40–0.60) |", md)
        self.assertIn("eager: torch missing", md)
        self.assertIn("- x failed", md)
        with tempfile.TemporaryDirectory() as d:
            report.write(res, d, "t")
            self.assertTrue(os.path.exists(os.path.join(d, "plots", "smoke", "softmax.png")))
        self.assertNotIn("## Model zoo", md)
        zoo = dict(case, workload="zoo gpt", s=16, onnx=True)
        md = report.markdown(dict(res, cases=[case, zoo]))
        self.assertIn("## Model zoo", md)
        self.assertIn("| gpt | 16 | 1 | 0.1 | 0.02 | 1 | 0.04 | 0.50 |", md)


class Models(unittest.TestCase):
    """The ONNX and PyTorch definitions of every builtin workload agree."""

    def test_onnx_matches_torch(self):
        try:
            import onnxruntime
            import torch

            import onnx_models
            import torch_models
        except ImportError as e:
            self.skipTest(f"peers not installed: {e}")
        for spec in WORKLOADS:
            if "builder" not in spec:
                continue
            with self.subTest(workload=spec["name"]):
                feeds = dict(inputs.make_inputs(spec, 5, 1))
                sess = onnxruntime.InferenceSession(onnx_models.model_bytes(spec, HERE),
                                                    providers=["CPUExecutionProvider"])
                got = sess.run(None, feeds)[0]
                with torch.inference_mode():
                    want = torch_models.function(spec)(
                        **{k: torch.from_numpy(v) for k, v in feeds.items()}).numpy()
                np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)

    def test_onnx_file_workload(self):
        try:
            import onnx_models
            import peers
        except ImportError as e:
            self.skipTest(f"peers not installed: {e}")
        spec = dict(WORKLOADS[2])
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.onnx")
            with open(path, "wb") as f:
                f.write(onnx_models.model_bytes(spec, HERE))
            file_spec = {"name": "file", "onnx": path, "inputs": spec["inputs"]}
            server = peers.Server(peers.Ort())
            server.handle({"cmd": "load", "workload": file_spec})
            server.handle({"cmd": "inputs", "s": 4, "seed": 2})
            out = os.path.join(d, "y.npy")
            self.assertEqual(server.handle({"cmd": "dump", "path": out})["shape"], [4, 768])
            with self.assertRaisesRegex(ValueError, "ONNX file"):
                peers.Server(peers.Eager()).handle({"cmd": "load", "workload": file_spec})


if __name__ == "__main__":
    unittest.main()
