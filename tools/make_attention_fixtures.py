#!/usr/bin/env python3
"""Make the fixtures of the CPU paged attention's tests (tests/cpp/test_cpu_attention.cpp).

Each case is one batch of sequences, as the engine schedules it: a prefill from
position 0, decodes over existing context, a prefill chunk after earlier
chunks. For every sequence the script draws float32 K and V for all its
positions [0, start + n) (the context already cached plus the n new tokens,
with a few outliers so that FP8 saturates) and float32 queries for the new
tokens, then for each KV-cache element format:
  * rounds K and V as the cache stores them: F32 as is; BF16 `.to(bfloat16)`
    (round to nearest even); FP8 E4M3 / E5M2 codes = clamp(x / scale, ±max)
    .to(fp8) in float32 (one division, docs/numerics.md), dequantized
    codes.float() * scale, with scale 1.0 and 0.0173;
  * computes each new token's attention in float64 with
    torch.nn.functional.scaled_dot_product_attention and an explicit boolean
    mask: position j is visible from position p when j <= p and, with a
    sliding window W, j > p - W (transformers' sliding_window_overlay:
    `kv_idx > q_idx - sliding_window`); GQA by repeating each kv head over its
    num_heads / num_kv_heads query heads.

Output: tests/fixtures/attention/ (raw little-endian arrays + manifest.json):
per case q [rows, heads*head_dim] f32, k / v [all positions, kv_heads*head_dim]
f32 (sequences' positions one after another), and per element format the
stored K / V codes (BF16 bits or FP8 bytes; none for F32) and the reference
out [rows, heads*head_dim] f64. Deterministic: run it again and `git diff`
shows nothing.

    /tmp/torchvenv/bin/python tools/make_attention_fixtures.py [--out tests/fixtures/attention]
"""

import argparse
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from fixture_arrays import ArrayWriter

FP8 = {"e4m3": (torch.float8_e4m3fn, 448.0), "e5m2": (torch.float8_e5m2, 57344.0)}


def f32(x: float) -> float:
    """x rounded to float32, as a Python float (exact in JSON and in C++'s float)."""
    return torch.tensor(x, dtype=torch.float32).item()


def cache_round(t: torch.Tensor, element: str, scale: float):
    """(stored codes or None, dequantized float32) of a float32 tensor, as the cache stores it."""
    if element == "f32":
        return None, t
    if element == "bf16":
        codes = t.to(torch.bfloat16)
        return codes, codes.float()
    dtype, fmax = FP8[element]
    s = torch.tensor(scale, dtype=torch.float32)
    codes = torch.clamp(t / s, -fmax, fmax).to(dtype)
    return codes, codes.float() * s


# name, heads, kv heads, head_dim, block size, window, sequences (start, new tokens), formats
FORMATS_ALL = [("f32", 1.0), ("bf16", 1.0), ("e4m3", 1.0), ("e4m3", 0.0173), ("e5m2", 1.0), ("e5m2", 0.0173)]
CASES = [
    ("gqa_h4_kv2_d32", 4, 2, 32, 16, None, [(0, 37), (20, 1), (50, 5), (0, 1)], FORMATS_ALL),
    ("gqa_h4_kv2_d64", 4, 2, 64, 16, None, [(0, 5), (33, 1), (19, 3)],
     [("f32", 1.0), ("bf16", 1.0), ("e4m3", 0.0173), ("e5m2", 0.0173)]),
    ("mha_h4_d32", 4, 4, 32, 16, None, [(0, 12), (40, 1)], [("f32", 1.0), ("e4m3", 0.0173), ("e5m2", 1.0)]),
    ("window8_gqa_h4_kv2_d32", 4, 2, 32, 16, 8, [(0, 20), (20, 1), (10, 5)],
     [("f32", 1.0), ("bf16", 1.0), ("e4m3", 0.0173)]),
]


def reference(q, kd, vd, seqs, heads, kv_heads, hd, scale, window):
    """float64 attention of every new token over the rounded K/V of its sequence."""
    group = heads // kv_heads
    outs = []
    row = ctx = 0
    for start, n in seqs:
        total = start + n
        qs = q[row:row + n].double().reshape(n, heads, hd).transpose(0, 1)[None]       # [1, H, n, hd]
        ks = kd[ctx:ctx + total].double().reshape(total, kv_heads, hd).transpose(0, 1)  # [KV, L, hd]
        vs = vd[ctx:ctx + total].double().reshape(total, kv_heads, hd).transpose(0, 1)
        ks = ks.repeat_interleave(group, dim=0)[None]  # head h reads kv head h // group
        vs = vs.repeat_interleave(group, dim=0)[None]
        p = torch.arange(start, total)[:, None]
        j = torch.arange(total)[None, :]
        mask = j <= p
        if window is not None:
            mask &= j > p - window
        o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=scale)  # [1, H, n, hd]
        outs.append(o[0].transpose(0, 1).reshape(n, heads * hd))
        row += n
        ctx += total
    return torch.cat(outs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/attention"))
    args = ap.parse_args()
    w_out = ArrayWriter(Path(args.out))
    torch.manual_seed(11)
    cases = []
    for name, heads, kv_heads, hd, block_size, window, seqs, formats in CASES:
        rows = sum(n for _, n in seqs)
        positions = sum(s + n for s, n in seqs)
        q = torch.randn(rows, heads * hd, dtype=torch.float32)
        k = torch.randn(positions, kv_heads * hd, dtype=torch.float32) * 2.0
        v = torch.randn(positions, kv_heads * hd, dtype=torch.float32)
        for t in (k, v):  # a few outliers: E4M3 with scale 0.0173 saturates at ±7.75
            t[torch.rand(t.shape) < 0.01] *= 8.0
        scale = f32(1.0 / math.sqrt(hd))
        case = {"name": name, "num_heads": heads, "num_kv_heads": kv_heads, "head_dim": hd,
                "block_size": block_size, "sliding_window": window, "scale": scale,
                "sequences": [{"start_position": s, "num_tokens": n} for s, n in seqs],
                "q": w_out.array(f"q_{name}", q), "k": w_out.array(f"k_{name}", k),
                "v": w_out.array(f"v_{name}", v), "formats": []}
        for element, kv_scale in formats:
            kv_scale = f32(kv_scale)
            tag = f"{name}_{element}_s{kv_scale:g}"
            kc, kd = cache_round(k, element, kv_scale)
            vc, vd = cache_round(v, element, kv_scale)
            fmt = {"element": element, "kv_scale": kv_scale,
                   "out": w_out.array(f"out_{tag}", reference(q, kd, vd, seqs, heads, kv_heads, hd, scale, window))}
            if kc is not None:
                fmt["k_codes"] = w_out.array(f"kcodes_{tag}", kc)
                fmt["v_codes"] = w_out.array(f"vcodes_{tag}", vc)
            case["formats"].append(fmt)
        cases.append(case)
    (Path(args.out) / "manifest.json").write_text(json.dumps({"cases": cases}, indent=1) + "\n")
    total = sum(p.stat().st_size for p in Path(args.out).iterdir())
    print(f"{len(cases)} cases, {sum(len(c['formats']) for c in cases)} formats, {total} bytes in {args.out}")


if __name__ == "__main__":
    main()
