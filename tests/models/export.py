#!/usr/bin/env python3
"""Exports dvm's ONNX model zoo and the reference inputs and outputs.

Every model gets random weights from a fixed seed and dynamic axes, and is
exported twice: with the TorchScript exporter at opset 17
(`NAME.ts17.onnx`; the encoder also at opset 14, `encoder.ts14.onnx`) and with the dynamo exporter at opset 18
(`NAME.dynamo18.onnx`). The reference inputs and PyTorch's outputs at
several shapes go to `data/NAME/CASE/{in,out}_*.npy`; `manifest.json` lists
them (the integration test `host/dvm/tests/onnx_zoo.rs` reads it).

Usage: python3 tests/models/export.py
The script runs itself inside a virtual environment with torch, onnx,
onnxscript and numpy from PyPI: `$DVM_PY_VENV` if set, otherwise
`${XDG_CACHE_HOME:-$HOME/.cache}/dvm/py-venv`, created on first use.
"""

import json
import math
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGES = ["torch", "onnx", "onnxscript", "numpy"]


def venv_dir() -> Path:
    if os.environ.get("DVM_PY_VENV"):
        return Path(os.environ["DVM_PY_VENV"])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(cache) / "dvm" / "py-venv"


def ensure_venv() -> None:
    """Re-executes this script in the venv unless it already runs there."""
    target = venv_dir()
    if Path(sys.prefix).resolve() == target.resolve():
        return
    python = target / "bin" / "python"
    if not python.exists():
        print(f"creating {target}", file=sys.stderr)
        venv.create(target, with_pip=True)
    probe = subprocess.run(
        [str(python), "-c", "import torch, onnx, onnxscript, numpy"],
        capture_output=True,
    )
    if probe.returncode != 0:
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", *PACKAGES], check=True
        )
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


ensure_venv()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

SEED = 1234


class Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.o = nn.Linear(hidden, hidden)

    def split(self, t):
        b, s, h = t.shape
        return t.reshape(b, s, self.heads, h // self.heads).transpose(1, 2)

    def forward(self, x, mask=None, rotary=None):
        b, s, h = x.shape
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        if rotary is not None:
            q, k = rotary(q), rotary(k)
        scores = q @ k.transpose(-1, -2) / math.sqrt(h // self.heads)
        if mask is not None:
            scores = scores + mask
        p = torch.softmax(scores, dim=-1)
        out = (p @ v).transpose(1, 2).reshape(b, s, h)
        return self.o(out)


class EncoderLayer(nn.Module):
    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.attn = Attention(hidden, heads)
        self.ln1 = nn.LayerNorm(hidden)
        self.ff1 = nn.Linear(hidden, ffn)
        self.ff2 = nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden)

    def forward(self, x):
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


class Encoder(nn.Module):
    """BERT-style: two post-norm layers, erf GELU."""

    def __init__(self, hidden=64, heads=4, ffn=128, layers=2):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def causal_mask(s, like):
    full = torch.full((s, s), float("-inf"), dtype=like.dtype, device=like.device)
    return torch.triu(full, diagonal=1)


class Gpt(nn.Module):
    """GPT-style: token embedding, causal mask, pre-norm, tanh GELU."""

    def __init__(self, vocab=96, hidden=64, heads=4, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(
                nn.ModuleDict(
                    {
                        "ln1": nn.LayerNorm(hidden),
                        "attn": Attention(hidden, heads),
                        "ln2": nn.LayerNorm(hidden),
                        "ff1": nn.Linear(hidden, 2 * hidden),
                        "ff2": nn.Linear(2 * hidden, hidden),
                    }
                )
            )
        self.ln = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        mask = causal_mask(tokens.shape[1], x)
        for blk in self.blocks:
            x = x + blk["attn"](blk["ln1"](x), mask)
            h = nn.functional.gelu(blk["ff1"](blk["ln2"](x)), approximate="tanh")
            x = x + blk["ff2"](h)
        return self.head(self.ln(x))


class RmsNorm(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Llama(nn.Module):
    """A LLaMA-style block: RMSNorm, rotary attention with a causal mask, SwiGLU."""

    def __init__(self, hidden=64, heads=4, ffn=172):
        super().__init__()
        self.head_dim = hidden // heads
        self.norm1 = RmsNorm(hidden)
        self.attn = Attention(hidden, heads)
        self.norm2 = RmsNorm(hidden)
        self.gate = nn.Linear(hidden, ffn, bias=False)
        self.up = nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def rotary(self, t):
        s = t.shape[2]
        pos = torch.arange(s, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos(), emb.sin()
        half = t.shape[-1] // 2
        rot = torch.cat([-t[..., half:], t[..., :half]], dim=-1)
        return t * cos + rot * sin

    def forward(self, x):
        mask = causal_mask(x.shape[1], x)
        x = x + self.attn(self.norm1(x), mask, self.rotary)
        h = self.norm2(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class LlamaMlp(nn.Module):
    """The LLaMA block's norm and feed-forward half: RMSNorm, SwiGLU, residual."""

    def __init__(self, hidden=64, ffn=172):
        super().__init__()
        self.norm = RmsNorm(hidden)
        self.gate = nn.Linear(hidden, ffn, bias=False)
        self.up = nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        h = self.norm(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class MaskedDecoder(nn.Module):
    """A GPT-style pre-norm block whose attention mask is an input (bool,
    true where a position may attend), applied with `masked_fill`."""

    def __init__(self, hidden=64, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.o = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.ff1 = nn.Linear(hidden, 2 * hidden)
        self.ff2 = nn.Linear(2 * hidden, hidden)

    def forward(self, x, mask):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        q, k, v = (t.reshape(b, s, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(h // self.heads))
        scores = scores.masked_fill(~mask, float("-inf"))
        a = torch.softmax(scores, dim=-1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(b, s, h))
        f = nn.functional.gelu(self.ff1(self.ln2(x)), approximate="tanh")
        return x + self.ff2(f)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(32, 64)
        self.l2 = nn.Linear(64, 64)
        self.l3 = nn.Linear(64, 10)

    def forward(self, x):
        h = nn.functional.gelu(self.l1(x))
        h = torch.relu(self.l2(h))
        return torch.log_softmax(self.l3(h), dim=-1)


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.c1(x)))
        x = torch.relu(self.c2(x))
        x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


# name, module, inputs as (name, dtype, example shape, dynamic axes),
# reference shapes (one per input, per case)
MODELS = [
    ("encoder", Encoder, [("x", "f32", (2, 5, 64), {0: "batch", 1: "seq"})],
     [[(1, 1, 64)], [(1, 7, 64)], [(3, 33, 64)]]),
    ("gpt", Gpt, [("tokens", "i64", (2, 5), {0: "batch", 1: "seq"})],
     [[(1, 1)], [(1, 7)], [(3, 33)]]),
    ("llama", Llama, [("x", "f32", (2, 5, 64), {0: "batch", 1: "seq"})],
     [[(1, 1, 64)], [(1, 7, 64)], [(3, 33, 64)]]),
    ("llama_mlp", LlamaMlp, [("x", "f32", (2, 5, 64), {0: "batch", 1: "seq"})],
     [[(1, 1, 64)], [(1, 7, 64)], [(3, 33, 64)]]),
    ("decoder_masked", MaskedDecoder,
     [("x", "f32", (2, 5, 64), {0: "batch", 1: "seq"}),
      ("mask", "causal", (5, 5), {0: "seq", 1: "seq"})],
     [[(1, 1, 64), (1, 1)], [(1, 7, 64), (7, 7)], [(3, 33, 64), (33, 33)]]),
    ("mlp", Mlp, [("x", "f32", (4, 32), {0: "batch"})], [[(1, 32)], [(3, 32)], [(17, 32)]]),
    ("cnn", Cnn, [("x", "f32", (2, 3, 16, 16), {0: "batch"})],
     [[(1, 3, 16, 16)], [(3, 3, 16, 16)]]),
]


# Models also exported by the TorchScript exporter at an older opset.
OLD_OPSET = {"encoder": 14}


def make_input(dtype, shape, gen):
    if dtype == "causal":
        return torch.ones(shape, dtype=torch.bool).tril()
    if dtype == "i64":
        return torch.randint(0, 96, shape, generator=gen, dtype=torch.int64)
    return torch.randn(shape, generator=gen)


def export_both(name, model, examples, inputs):
    files = []
    names = [i[0] for i in inputs]
    ts = HERE / f"{name}.ts17.onnx"
    axes = {n: a for n, _, _, a in inputs}
    torch.onnx.export(
        model, tuple(examples), str(ts), dynamo=False, opset_version=17,
        input_names=names, output_names=["y"],
        dynamic_axes={**axes, "y": {0: inputs[0][3][0]}},
    )
    files.append(ts.name)
    if name in OLD_OPSET:
        # Before opset 17 LayerNormalization is written as primitives.
        old = HERE / f"{name}.ts{OLD_OPSET[name]}.onnx"
        torch.onnx.export(
            model, tuple(examples), str(old), dynamo=False, opset_version=OLD_OPSET[name],
            input_names=names, output_names=["y"],
            dynamic_axes={**axes, "y": {0: inputs[0][3][0]}},
        )
        files.append(old.name)
    dyn = HERE / f"{name}.dynamo18.onnx"
    dims = {}
    shapes = []
    for _, _, _, a in inputs:
        spec = {}
        for i, n in a.items():
            dims.setdefault(n, torch.export.Dim(n, min=1, max=4096))
            spec[i] = dims[n]
        shapes.append(spec)
    program = torch.onnx.export(
        model, tuple(examples), dynamo=True, opset_version=18,
        input_names=names, output_names=["y"],
        dynamic_shapes=tuple(shapes),
        external_data=False,
    )
    program.save(str(dyn), external_data=False)
    files.append(dyn.name)
    return files


def main():
    data = HERE / "data"
    if data.exists():
        shutil.rmtree(data)
    manifest = {"seed": SEED, "models": []}
    for name, cls, inputs, cases_shapes in MODELS:
        torch.manual_seed(SEED)
        model = cls().eval()
        gen = torch.Generator().manual_seed(SEED)
        examples = [make_input(dt, shape, gen) for _, dt, shape, _ in inputs]
        with torch.no_grad():
            files = export_both(name, model, examples, inputs)
        cases = []
        for shapes in cases_shapes:
            xs = [make_input(i[1], s, gen) for i, s in zip(inputs, shapes)]
            with torch.no_grad():
                y = model(*xs)
            case = "x".join(str(d) for d in shapes[0])
            folder = data / name / case
            folder.mkdir(parents=True)
            for (n, *_), x in zip(inputs, xs):
                np.save(folder / f"in_{n}.npy", x.numpy())
            np.save(folder / "out_y.npy", y.numpy())
            cases.append({
                "dir": f"data/{name}/{case}",
                "inputs": {n: f"in_{n}.npy" for n, *_ in inputs},
                "outputs": {"y": "out_y.npy"},
            })
        manifest["models"].append({"name": name, "files": files, "cases": cases})
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
