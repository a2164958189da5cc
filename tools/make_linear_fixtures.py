#!/usr/bin/env python3
"""Make the fixtures of the CPU linear layer's tests (tests/cpp/test_cpu_linear.cpp).

For random inputs x (float32, with a few outliers) and random BF16 weights W of
a few shapes (K and N not multiples of 128 among them), PyTorch computes:
  * the FP8 E4M3 weight codes and float32 scales, per tensor / channel /
    128x128 block: scale = amax / 448 in float32, codes = clamp(W / scale).to(e4m3);
  * the activation codes and scales of each W8A8 scheme, with vLLM's formulas:
    per token (scale floored at 1/(448*512), optionally with FBGEMM's amax upper
    bound), per 1x128 group (amax floored at 1e-10), per tensor, static;
  * y in float64 from the dequantized values (W8A8: dequantized x and W; W8A16:
    x and dequantized W; BF16: x and W), plus bias, and for each output the sum
    of |terms| the C++ test derives its float32 tolerance from.

Output: tests/fixtures/linear/ (raw little-endian arrays + manifest.json).
Deterministic: run it again and `git diff` shows nothing.

    .venv-tools/bin/python tools/make_linear_fixtures.py [--out tests/fixtures/linear]
"""

import argparse
import json
from pathlib import Path

import torch

from fixture_arrays import ArrayWriter

E4M3 = torch.float8_e4m3fn
FMAX = 448.0


def fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """codes = saturate(x / scale) in float32, one division, as docs/numerics.md says."""
    return torch.clamp(x.float() / scale, -FMAX, FMAX).to(E4M3)


def quantize_weight(w: torch.Tensor, layout: str):
    """Returns (codes [N,K], scale grid, dequantized float64 W) for a weight layout."""
    n, k = w.shape
    wf = w.float()
    if layout == "tensor":
        s = (wf.abs().amax() / FMAX).reshape(1, 1)
        full = s.expand(n, k)
    elif layout == "channel":
        s = (wf.abs().amax(dim=1, keepdim=True) / FMAX)
        full = s.expand(n, k)
    else:  # block128
        bn = bk = 128
        sr, sc = -(-n // bn), -(-k // bk)
        s = torch.empty(sr, sc, dtype=torch.float32)
        for i in range(sr):
            for j in range(sc):
                s[i, j] = wf[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk].abs().amax() / FMAX
        full = s.repeat_interleave(bn, 0)[:n].repeat_interleave(bk, 1)[:, :k]
    codes = fp8(wf, full)
    deq = codes.double() * full.double()
    return codes, s, deq


def quantize_activation(x: torch.Tensor, mode: str, static_scale: float, ub: float):
    """vLLM's activation quantizers (float32): returns (codes, scale grid, full scale map)."""
    m, k = x.shape
    if mode == "dynamic_tensor":
        s = torch.clamp(x.abs().amax() / FMAX, min=1.0 / (FMAX * 512)).reshape(1, 1)
        full = s.expand(m, k)
    elif mode == "dynamic_token":
        amax = x.abs().amax(dim=1, keepdim=True)
        if ub > 0:
            amax = torch.clamp(amax, max=ub)
        s = torch.clamp(amax / FMAX, min=1.0 / (FMAX * 512))
        full = s.expand(m, k)
    elif mode == "dynamic_group":
        g = 128
        cols = -(-k // g)
        s = torch.empty(m, cols, dtype=torch.float32)
        for j in range(cols):
            s[:, j] = torch.clamp(x[:, j * g:(j + 1) * g].abs().amax(dim=1), min=1e-10) / FMAX
        full = s.repeat_interleave(g, 1)[:, :k]
    else:  # static_tensor
        s = torch.tensor([[static_scale]], dtype=torch.float32)
        full = s.expand(m, k)
    return fp8(x, full), s, full


SCHEMES = [
    # name, weight layout (None = BF16), activation
    ("bf16", None, "none"),
    ("w8a16_tensor", "tensor", "none"),
    ("w8a16_channel", "channel", "none"),
    ("w8a16_block", "block128", "none"),
    ("w8a8_tensor_tensor", "tensor", "dynamic_tensor"),
    ("w8a8_channel_token", "channel", "dynamic_token"),
    ("w8a8_channel_token_ub", "channel", "dynamic_token"),
    ("w8a8_block_group", "block128", "dynamic_group"),
    ("w8a8_tensor_static", "tensor", "static_tensor"),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/linear"))
    args = ap.parse_args()
    w_out = ArrayWriter(Path(args.out))
    torch.manual_seed(6)
    cases = []
    weights = {}  # one W and bias per (N, K): M = 1 and M = 7 share them
    # (M, N, K): K and N not multiples of 128, M = 1 (decode) and M > 1 (prefill).
    for m, n, k in [(1, 160, 320), (7, 160, 320), (5, 72, 200), (3, 128, 256)]:
        tag = f"m{m}_n{n}_k{k}"
        x = torch.randn(m, k, dtype=torch.float32)
        x[torch.rand(m, k) < 0.01] *= 30.0  # a few outliers, as real activations have
        if (n, k) not in weights:
            weights[(n, k)] = ((torch.randn(n, k) * 0.05).to(torch.bfloat16),
                               torch.randn(n, dtype=torch.float32) * 0.1)
        w, bias = weights[(n, k)]
        xf = w_out.array(f"x_{tag}", x)
        wf = w_out.array(f"w_{n}x{k}", w)
        bf = w_out.array(f"bias_{n}x{k}", bias)
        for name, layout, act in SCHEMES:
            case = {"name": f"{name}_{tag}", "m": m, "n": n, "k": k, "x": xf, "w_bf16": wf,
                    "bias": bf, "weight_layout": layout or "bf16", "activation": act}
            if layout is None:
                wd = w.double()
            else:
                codes, s, wd = quantize_weight(w, layout)
                case["w_codes"] = w_out.array(f"wcodes_{layout}_{n}x{k}", codes)
                case["w_scales"] = w_out.array(f"wscales_{layout}_{n}x{k}", s)
            if act == "none":
                xd = x.double()
            else:
                static_scale = float(x.abs().amax() / FMAX) * 0.5  # half the range: outliers saturate
                ub = float(x.abs().amax(dim=1).median()) if name.endswith("_ub") else 0.0
                xc, xs, full = quantize_activation(x, act, static_scale, ub)
                xd = xc.double() * full.double()
                case["x_codes"] = w_out.array(f"xcodes_{name}_{tag}", xc)
                case["x_scales"] = w_out.array(f"xscales_{name}_{tag}", xs)
                case["input_scale"] = static_scale
                case["scale_upper_bound"] = ub
            terms = xd[:, None, :] * wd[None, :, :]  # [M, N, K]
            y = terms.sum(dim=2) + bias.double()
            abs_sum = terms.abs().sum(dim=2) + bias.double().abs()
            case["y"] = w_out.array(f"y_{name}_{tag}", y)
            case["abs_sum"] = w_out.array(f"abssum_{name}_{tag}", abs_sum)
            cases.append(case)
    (Path(args.out) / "manifest.json").write_text(json.dumps({"cases": cases}, indent=1) + "\n")
    total = sum(p.stat().st_size for p in Path(args.out).iterdir())
    print(f"{len(cases)} cases, {total} bytes in {args.out}")


if __name__ == "__main__":
    main()
