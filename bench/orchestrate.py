"""The side-by-side benchmark suite's orchestrator (`cargo ci bench` runs it).

Starts dvm-bench and one peer process per Python system (peers.py: ONNX
Runtime, PyTorch eager, Inductor), drives them all in one interleaved run over
the JSON-lines protocol, and writes bench/results/<date>.json, the Markdown
table and the plots (report.py).

    python orchestrate.py --dvm PATH [--quick | --smoke | --zoo] [--workloads a,b]
        [--systems dvm,ort,...] [--lengths 16,128] [--threads 1,2]

--zoo runs every workload defined by an .onnx file (the model zoo) on dvm
and ONNX Runtime at S = 16, 128, 512, 2048 on one thread, without the
random-length sequences and GEMM rooflines, and adds the zoo table (first
call and steady state side by side) to the report. A workload whose `lens`
is a list (the CNN's batch sizes) runs at those values in every mode.

Per workload, S and thread count: warm-up calls, an output check of every
system against the reference (PyTorch eager, else the first that ran), the
first call from a fresh model state, then rounds in which every system makes a
batch of calls, the system order rotated each round; the ratio dvm / fastest
peer is taken within each round. Per workload and thread count: a sequence of
random lengths (one seed for every system), cold and warm. Rooflines in the
same run: the copy bandwidth (NumPy, buffers beyond the last-level cache) and
each system's best GEMM.
"""

import argparse
import datetime
import json
import os
import platform
import random
import select
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS = ["ort", "eager", "inductor"]
ONNX_SYSTEMS = ["dvm", "ort"]
# Outputs are checked against the first of these that ran.
REFERENCES = ["eager", "ort", "inductor", "dvm"]

# An output passes when |out - ref| <= ATOL + RTOL * |ref| everywhere.
ATOL = 1e-3
RTOL = 1e-3

MODES = {
    "full": dict(lens=[17, 128, 1024, 4096], long=[32768], threads=[1, 2], rounds=7,
                 batch_s=0.25, max_calls=50, seq_calls=50, seq_max=1024,
                 gemm=[512, 1024, 2048], copy_mib=512, check_max_s=4096),
    "quick": dict(lens=[17, 128, 1024], long=[], threads=None, rounds=3,
                  batch_s=0.04, max_calls=10, seq_calls=50, seq_max=256,
                  gemm=[1024], copy_mib=256, check_max_s=1024),
    "smoke": dict(lens=[17], long=[], threads=[1], rounds=3, batch_s=0.0, max_calls=1,
                  seq_calls=5, seq_max=32, gemm=[128], copy_mib=64, check_max_s=17),
    "zoo": dict(lens=[16, 128, 512, 2048], long=[], threads=[1], rounds=7, batch_s=0.25,
                max_calls=50, seq_calls=0, seq_max=0, gemm=[], copy_mib=256, check_max_s=2048),
}
# The systems a mode runs unless --systems says otherwise.
DEFAULT_SYSTEMS = {"zoo": ONNX_SYSTEMS}


class System:
    """One long-lived process speaking the line protocol."""

    def __init__(self, name, argv, log_dir, env=None):
        self.name, self.error, self.version = name, None, None
        self.log = open(os.path.join(log_dir, f"{name}.log"), "w")
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self.log, text=True, cwd=HERE, env=env, bufsize=1)
        except OSError as e:
            self.proc, self.error = None, f"could not start {argv[0]}: {e}"

    @property
    def alive(self):
        return self.error is None

    def ask(self, req, timeout=3600):
        """The answer to `req`, or {"ok": False, "error": ...}; a dead or hung
        process marks the system failed for the rest of the run."""
        if not self.alive:
            return {"ok": False, "error": self.error}
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            line = self.proc.stdout.readline() if ready else None
        except (BrokenPipeError, OSError) as e:
            line, why = None, str(e)
        else:
            why = "no answer within %d s" % timeout if not ready else "the process exited"
        if not line:
            code = self.proc.poll()
            self.error = f"{self.name}: {why} (exit code {code}; see {self.log.name})"
            self.proc.kill()
            return {"ok": False, "error": self.error}
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            return {"ok": False, "error": f"{self.name}: unreadable answer {line[:200]!r}"}

    def close(self):
        """Ends the process: `quit`, then end of input, then a kill after 30 s."""
        if self.proc:
            if self.alive and self.proc.poll() is None:
                self.ask({"cmd": "quit"}, timeout=30)
            for pipe in (self.proc.stdin, self.proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def copy_bandwidth(mib, reps=5):
    """Best NumPy copy rate in GB/s (bytes read + written) over buffers of `mib` MiB."""
    a = np.ones(mib * (1 << 20) // 4, dtype=np.float32)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best / 1e9


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version()}


def check(path, ref_path):
    """Max abs error, whether it passes the tolerance, for one output against the reference."""
    a, r = np.load(path).astype(np.float64), np.load(ref_path).astype(np.float64)
    if a.shape != r.shape:
        return {"ok": False, "error": f"shape {list(a.shape)} against {list(r.shape)}"}
    if not np.all(np.isfinite(a)):
        return {"ok": False, "error": "non-finite values"}
    err = np.abs(a - r)
    return {"ok": bool(np.all(err <= ATOL + RTOL * np.abs(r))), "max_abs": float(err.max(initial=0.0))}


def rotated(items, k):
    k %= max(len(items), 1)
    return items[k:] + items[:k]


class Suite:
    def __init__(self, args, mode, systems):
        self.args, self.m, self.systems = args, mode, systems
        self.cases, self.sequences, self.errors = [], [], []
        self.tmp = tempfile.mkdtemp(prefix="dvm-bench-check-")
        self.turn = 0

    def live(self):
        return [s for s in self.systems if s.alive]

    def note(self, where, system, ans):
        msg = f"{where}: {system.name}: {ans.get('error')}"
        self.errors.append(msg)
        print("  ! " + msg, file=sys.stderr)

    def each(self, req, systems, where, timeout=3600):
        """Sends `req` to every system in rotated order; returns {name: answer} of those that succeeded."""
        out = {}
        self.turn += 1
        for s in rotated(systems, self.turn):
            ans = s.ask(req, timeout)
            if ans.get("ok"):
                out[s.name] = ans
            else:
                self.note(where, s, ans)
        return out

    def case(self, spec, s, threads, systems):
        where = f"{spec['name']} S={s} threads={threads}"
        print(f"- {where}", file=sys.stderr)
        started = time.time()
        case = {"workload": spec["name"], "s": s, "threads": threads, "systems": {},
                "onnx": bool(spec.get("onnx"))}
        ok = self.each({"cmd": "inputs", "s": s, "seed": s}, systems, where)
        systems = [x for x in systems if x.name in ok]
        warm = self.each({"cmd": "run", "calls": 2}, systems, where)
        systems = [x for x in systems if x.name in warm]
        calls = {n: max(1, min(self.m["max_calls"], int(self.m["batch_s"] / max(min(a["times"]), 1e-7))))
                 for n, a in warm.items()}
        if threads == self.m["threads_list"][0] and s <= self.m["check_max_s"]:
            case["check"] = self.check(systems, where)
        first = self.each({"cmd": "first"}, systems, where)
        per_round = {x.name: [] for x in systems}
        times = {x.name: [] for x in systems}
        ratios = []
        for r in range(self.m["rounds"]):
            meds = {}
            for x in rotated(systems, r):
                if not x.alive:
                    continue
                ans = x.ask({"cmd": "run", "calls": calls[x.name]})
                if not ans.get("ok"):
                    self.note(where, x, ans)
                    continue
                times[x.name] += ans["times"]
                meds[x.name] = statistics.median(ans["times"])
                per_round[x.name].append(meds[x.name])
            peers = [v for k, v in meds.items() if k != "dvm"]
            if "dvm" in meds and peers:
                ratios.append(meds["dvm"] / min(peers))
        for n, t in times.items():
            if t:
                case["systems"][n] = {"median": statistics.median(t), "min": min(t), "max": max(t),
                                      "calls": len(t), "first": first.get(n, {}).get("time")}
        if ratios:
            case["ratio"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
        case["wall_s"] = time.time() - started
        self.cases.append(case)

    def check(self, systems, where):
        paths = {}
        for x in systems:
            path = os.path.join(self.tmp, f"{x.name}.npy")
            ans = x.ask({"cmd": "dump", "path": path})
            if ans.get("ok"):
                paths[x.name] = path
            else:
                self.note(where + " (output)", x, ans)
        if not paths:
            return {}
        ref = next(r for r in REFERENCES if r in paths)
        result = {"reference": ref}
        for n, p in paths.items():
            if n != ref:
                result[n] = check(p, paths[ref])
                if not result[n]["ok"]:
                    self.errors.append(f"{where}: {n} differs from {ref}: {result[n]}")
                    print(f"  ! {where}: {n} differs from {ref}: {result[n]}", file=sys.stderr)
        for p in paths.values():
            os.remove(p)
        return result

    def sequence(self, spec, threads, systems):
        where = f"{spec['name']} sequence threads={threads}"
        print(f"- {where}", file=sys.stderr)
        started = time.time()
        rng = random.Random(f"{spec['name']}/{threads}")
        lens = [rng.randint(1, self.m["seq_max"]) for _ in range(self.m["seq_calls"])]
        got = self.each({"cmd": "sequence", "lens": lens, "seed": 1000}, systems, where)
        seq = {"workload": spec["name"], "threads": threads, "lens": lens, "systems": {}}
        for n, a in got.items():
            seq["systems"][n] = {"cold": sum(a["cold"]), "warm": sum(a["warm"]),
                                 "cold_max": max(a["cold"]), "first": a["cold"][0]}
        peers = [v for k, v in seq["systems"].items() if k != "dvm"]
        if "dvm" in seq["systems"] and peers:
            for kind in ("cold", "warm"):
                seq[f"ratio_{kind}"] = seq["systems"]["dvm"][kind] / min(p[kind] for p in peers)
        seq["wall_s"] = time.time() - started
        self.sequences.append(seq)


def passed_args():
    """The orchestrator's arguments as `cargo ci bench` takes them (without --dvm)."""
    out, skip = [], False
    for a in sys.argv[1:]:
        if skip:
            skip = False
        elif a == "--dvm":
            skip = True
        elif not a.startswith("--dvm="):
            out.append(a)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dvm", required=True, help="the dvm-bench binary")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="fewer S, reps and one thread count (< 10 min)")
    g.add_argument("--smoke", action="store_true", help="S = 17 only, 3 single-call rounds: checks the suite runs")
    g.add_argument("--zoo", action="store_true",
                   help="the ONNX model zoo on dvm and ONNX Runtime at S = 16, 128, 512, 2048")
    ap.add_argument("--spec", default=os.path.join(HERE, "workloads.json"),
                    help="the workload list (default: bench/workloads.json)")
    ap.add_argument("--workloads", help="comma-separated workload names (default: all of --spec)")
    ap.add_argument("--systems", help="comma-separated systems (default: dvm and every peer; "
                    "--zoo: dvm,ort)")
    ap.add_argument("--lengths", help="comma-separated S values replacing the mode's")
    ap.add_argument("--threads", help="comma-separated thread counts replacing the mode's")
    ap.add_argument("--out", default=os.path.join(HERE, "results"), help="results directory")
    args = ap.parse_args()

    mode_name = "smoke" if args.smoke else "quick" if args.quick else "zoo" if args.zoo else "full"
    m = dict(MODES[mode_name])

    def counts(text, flag):
        try:
            vals = [int(v) for v in text.split(",")]
        except ValueError:
            vals = []
        if not vals or min(vals) < 1:
            ap.error(f"{flag}: comma-separated positive integers, not {text!r}")
        return vals

    if args.lengths:
        m["lens"], m["long"] = counts(args.lengths, "--lengths"), []
        m["check_max_s"] = max(m["check_max_s"], max(m["lens"]))
    if args.threads:
        m["threads"] = counts(args.threads, "--threads")
    m["threads_list"] = m["threads"] or [min(2, os.cpu_count() or 1)]
    with open(args.spec) as f:
        workloads = json.load(f)["workloads"]
    for w in workloads:  # .onnx paths are relative to the repository
        if w.get("onnx"):
            w["onnx"] = os.path.join(ROOT, w["onnx"])
    if args.workloads:
        wanted = args.workloads.split(",")
        unknown = [w for w in wanted if w not in {x["name"] for x in workloads}]
        if unknown:
            ap.error(f"unknown workloads {unknown}; known: {[x['name'] for x in workloads]}")
        workloads = [w for w in workloads if w["name"] in wanted]
    elif mode_name == "zoo":
        workloads = [w for w in workloads if w.get("onnx")]
    names = (args.systems or ",".join(DEFAULT_SYSTEMS.get(mode_name, ["dvm"] + PEERS))).split(",")
    unknown = [n for n in names if n not in ["dvm"] + PEERS]
    if unknown:
        ap.error(f"unknown systems {unknown}; known: dvm, {', '.join(PEERS)}")

    start = time.time()
    date = datetime.date.today().isoformat()
    stem = date if mode_name == "full" else f"{date}-{mode_name}"
    os.makedirs(args.out, exist_ok=True)
    log_dir = tempfile.mkdtemp(prefix="dvm-bench-logs-")
    print(f"mode {mode_name}; logs in {log_dir}", file=sys.stderr)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    systems = []
    for n in names:
        argv = [args.dvm] if n == "dvm" else [sys.executable, os.path.join(HERE, "peers.py"), n]
        systems.append(System(n, argv, log_dir, env))
    skipped, versions = {}, {}
    for s in systems:
        ans = s.ask({"cmd": "hello"}, timeout=600)
        if ans.get("ok"):
            versions[s.name] = ans.get("version")
        else:
            skipped[s.name] = ans.get("error")
            s.error = s.error or ans.get("error")
            print(f"skipping {s.name}: {ans.get('error')}", file=sys.stderr)

    suite = Suite(args, m, systems)
    rooflines = {"copy_gbps": [], "gemm_gflops": {}}
    try:
        for threads in m["threads_list"]:
            rooflines["copy_gbps"].append(copy_bandwidth(m["copy_mib"]))
            for s in suite.live():
                ans = s.ask({"cmd": "threads", "n": threads})
                if not ans.get("ok"):
                    suite.note(f"threads={threads}", s, ans)
            gem = rooflines["gemm_gflops"].setdefault(str(threads), {})
            for n in m["gemm"]:
                for name, a in suite.each({"cmd": "gemm", "n": n, "calls": 3}, suite.live(),
                                          f"gemm n={n} threads={threads}").items():
                    gem.setdefault(name, {})[str(n)] = a["gflops"]
            for spec in workloads:
                # A workload defined by an .onnx file runs on dvm and ONNX Runtime only.
                runs = [s for s in suite.live() if not spec.get("onnx") or s.name in ONNX_SYSTEMS]
                loaded = suite.each({"cmd": "load", "workload": spec}, runs,
                                    f"{spec['name']} load threads={threads}")
                systems_w = [s for s in suite.live() if s.name in loaded]
                if not systems_w:
                    continue
                if isinstance(spec.get("lens"), list):  # the workload's own values (CNN batch)
                    lens = spec["lens"]
                else:
                    lens = m["lens"] + (m["long"] if spec.get("lens") == "memory" else [])
                for s_len in lens:
                    suite.case(spec, s_len, threads, [s for s in systems_w if s.alive])
                if m["seq_calls"]:
                    suite.sequence(spec, threads, [s for s in systems_w if s.alive])
        rooflines["copy_gbps"].append(copy_bandwidth(m["copy_mib"]))
    finally:
        for s in systems:
            s.close()

    results = {
        "date": date, "mode": mode_name, "settings": m, "machine": machine(),
        "versions": versions, "skipped": skipped,
        "tolerance": {"atol": ATOL, "rtol": RTOL, "rule": "|out - ref| <= atol + rtol * |ref|"},
        "rooflines": rooflines, "cases": suite.cases, "sequences": suite.sequences,
        "errors": suite.errors, "duration_s": time.time() - start,
        "command": " ".join(["cargo ci bench"] + passed_args()),
    }
    json_path = os.path.join(args.out, f"{stem}.json")
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1)
    md = report.write(results, args.out, stem)
    print(f"wrote {json_path}, {md} and plots ({results['duration_s']:.0f} s)", file=sys.stderr)
    if suite.errors:
        print(f"{len(suite.errors)} problems, listed in the table's notes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
