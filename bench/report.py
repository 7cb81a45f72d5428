"""The side-by-side suite's report: a Markdown table and one plot per workload
from a results JSON of orchestrate.py.

    python report.py results/<date>.json     # rewrites its .md and plots
"""

import json
import os
import re
import sys

SYSTEMS = ["dvm", "ort", "eager", "inductor"]
LABELS = {"dvm": "dvm", "ort": "ONNX Runtime", "eager": "PyTorch eager", "inductor": "Inductor"}


def ms(t):
    if t is None:
        return "—"
    v = t * 1e3
    return f"{v:.3g}" if v >= 0.01 else f"{v:.2g}"


def slug(name):
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def present(results):
    seen = {n for c in results["cases"] for n in c["systems"]}
    return [s for s in SYSTEMS if s in seen]


def table(results):
    systems = present(results)
    out = []
    head = ["workload", "S", "threads"] + [f"{LABELS[s]} ms" for s in systems] + ["dvm / fastest peer"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    for c in results["cases"]:
        row = [c["workload"], str(c["s"]), str(c["threads"])]
        for s in systems:
            m = c["systems"].get(s)
            row.append(f"{ms(m['median'])} ({ms(m['min'])}–{ms(m['max'])})" if m else "—")
        r = c.get("ratio")
        row.append(f"**{r['median']:.2f}** ({r['min']:.2f}–{r['max']:.2f})" if r else "—")
        out.append("| " + " | ".join(row) + " |")
    return out


def first_table(results):
    systems = present(results)
    out = ["| workload | S | threads | " + " | ".join(f"{LABELS[s]} ms" for s in systems) + " |",
           "|" + "---|" * (3 + len(systems))]
    for c in results["cases"]:
        cells = [ms(c["systems"].get(s, {}).get("first")) for s in systems]
        out.append(f"| {c['workload']} | {c['s']} | {c['threads']} | " + " | ".join(cells) + " |")
    return out


def sequence_table(results):
    systems = present(results)
    out = ["| workload | threads | " + " | ".join(f"{LABELS[s]} cold / warm ms" for s in systems)
           + " | dvm / fastest peer cold · warm |", "|" + "---|" * (3 + len(systems))]
    for q in results["sequences"]:
        cells = []
        for s in systems:
            m = q["systems"].get(s)
            cells.append(f"{ms(m['cold'])} / {ms(m['warm'])}" if m else "—")
        ratio = (f"{q['ratio_cold']:.2f} · {q['ratio_warm']:.2f}" if "ratio_cold" in q else "—")
        out.append(f"| {q['workload']} | {q['threads']} | " + " | ".join(cells) + f" | {ratio} |")
    return out


def zoo_table(results):
    """The ONNX workloads, dvm beside ONNX Runtime: first call and steady-state median, ms."""
    out = ["| model | S | threads | dvm first | dvm steady | ONNX Runtime first | ONNX Runtime steady "
           "| dvm / ORT steady |", "|" + "---|" * 8]
    for c in results["cases"]:
        if not c.get("onnx"):
            continue
        d, o = c["systems"].get("dvm", {}), c["systems"].get("ort", {})
        ratio = f"{d['median'] / o['median']:.2f}" if d.get("median") and o.get("median") else "—"
        name = c["workload"].removeprefix("zoo ")
        out.append(f"| {name} | {c['s']} | {c['threads']} | {ms(d.get('first'))} | {ms(d.get('median'))} "
                   f"| {ms(o.get('first'))} | {ms(o.get('median'))} | {ratio} |")
    return out if len(out) > 2 else []


def check_lines(results):
    out = []
    for c in results["cases"]:
        chk = c.get("check")
        if not chk:
            continue
        parts = []
        for s, v in chk.items():
            if s == "reference":
                continue
            parts.append(f"{s} {'ok' if v['ok'] else 'FAILED'}"
                         + (f" (max abs {v['max_abs']:.2g})" if "max_abs" in v else f" ({v.get('error')})"))
        out.append(f"- {c['workload']} S={c['s']}: against {chk['reference']}: " + ", ".join(parts))
    return out


def markdown(results):
    m = results["machine"]
    tol = results["tolerance"]
    roof = results["rooflines"]
    lines = [
        f"# Side by side: {results['date']} ({results['mode']})",
        "",
        f"Command: `{results['command']}`. Machine: {m['cpu']}, {m['cores']} cores, {m['platform']}. "
        f"Versions: " + ", ".join(f"{k} {v}" for k, v in results["versions"].items()) + ". "
        f"Duration: {results['duration_s'] / 60:.1f} min.",
        "",
    ]
    if results["skipped"]:
        lines += ["Skipped: " + "; ".join(f"{k}: {v}" for k, v in results["skipped"].items()), ""]
    gemm = {t: per for t, per in roof["gemm_gflops"].items() if any(per.values())}
    lines += [
        "Rooflines: copy bandwidth (NumPy, bytes read + written) "
        + ", ".join(f"{v:.1f}" for v in roof["copy_gbps"]) + " GB/s"
        + ("; best GEMM GFLOP/s:" if gemm else "."),
        "",
    ]
    for t, per in gemm.items():
        cells = [f"{LABELS.get(s, s)} {max(v.values()):.0f}" for s, v in per.items() if v]
        lines.append(f"- {t} thread(s): " + ", ".join(cells))
    lines += [
        "",
        "## Steady state",
        "",
        "Median (min–max) over every call of every round, ms, each call returning fresh outputs "
        "with every weight passed; the ratio is dvm's median over the fastest peer's, "
        "taken within each round (median, min–max over rounds).",
        "",
    ] + table(results) + [
        "",
        "## First call at a new shape",
        "",
        "From a fresh model state: dvm `Prepared::new` and an empty kernel cache (and the "
        "import of an .onnx workload's file); ONNX Runtime session creation (from the file for an "
        ".onnx workload); Inductor `torch._dynamo.reset()` and `torch.compile`; PyTorch eager "
        "nothing.",
        "",
    ] + first_table(results)
    zoo = zoo_table(results)
    if zoo:
        lines += [
            "",
            "## Model zoo",
            "",
            "The workloads defined by .onnx files, ms: dvm's first call (import, prepare, compile, "
            "run) and ONNX Runtime's (session creation from the file, run), and each one's "
            "steady-state median. For the CNN, S is the batch.",
            "",
        ] + zoo
    if results["sequences"]:
        lines += [
            "",
            "## Sequences of random lengths",
            "",
            f"{results['settings']['seq_calls']} calls at lengths drawn in 1…{results['settings']['seq_max']} "
            "(the same for every system); cold from a fresh model state, warm the same calls again.",
            "",
        ] + sequence_table(results)
    lines += [
        "",
        "## Output checks",
        "",
        f"Rule: {tol['rule']}, atol = {tol['atol']}, rtol = {tol['rtol']}.",
        "",
    ] + check_lines(results)
    if results["errors"]:
        lines += ["", "## Problems", ""] + [f"- {e}" for e in results["errors"]]
    return "\n".join(lines) + "\n"


def plots(results, plot_dir):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"no plots: {e}", file=sys.stderr)
        return []
    os.makedirs(plot_dir, exist_ok=True)
    written = []
    for w in dict.fromkeys(c["workload"] for c in results["cases"]):
        cases = [c for c in results["cases"] if c["workload"] == w]
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for t in sorted({c["threads"] for c in cases}):
            for s in SYSTEMS:
                pts = [(c["s"], c["systems"][s]["median"] * 1e3) for c in cases
                       if c["threads"] == t and s in c["systems"]]
                if pts:
                    xs, ys = zip(*pts)
                    ax.plot(xs, ys, marker="o", linestyle="-" if t == 1 else "--",
                            label=f"{LABELS[s]}, {t} thr")
        ax.set_xscale("log", base=2)
        lens = sorted({c["s"] for c in cases})
        ax.set_xticks(lens, [str(s) for s in lens])
        ax.minorticks_off()
        ax.set_yscale("log")
        ax.set_xlabel("S")
        ax.set_ylabel("ms per call (median)")
        ax.set_title(f"{w} ({results['date']}, {results['mode']})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        path = os.path.join(plot_dir, f"{slug(w)}.png")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def write(results, out_dir, stem):
    """Writes <out_dir>/<stem>.md and the plots; returns the Markdown's path."""
    md = os.path.join(out_dir, f"{stem}.md")
    with open(md, "w") as f:
        f.write(markdown(results))
    sub = "plots" if results["mode"] == "full" else os.path.join("plots", results["mode"])
    plots(results, os.path.join(out_dir, sub))
    return md


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    path = sys.argv[1]
    with open(path) as f:
        res = json.load(f)
    print(write(res, os.path.dirname(path) or ".", os.path.splitext(os.path.basename(path))[0]))
