#!/usr/bin/env python3
"""How accurate FP8 prefill attention can be (issue 44): candidate numerics against float64.

Issue 44 asks for FP8 prefill attention on an FP8 KV cache (QKᵀ and PV on FP8 tensor cores, as
FlashAttention-3 does on Hopper) with "the accumulation precision that keeps long contexts
accurate", and for its error against a float64 reference at 4k-32k contexts on realistic
activations, within a bound stated beforehand. This script emulates each candidate's roundings in
PyTorch, so that the bound the kernel is held to comes from the numerics it implements, not from
what it happens to reach:

  bf16          Q, K, V rounded to BF16; QKᵀ and PV accumulated in float32; P rounded to BF16
                before PV (the BF16 flash kernels' numerics).
  fp8_tensor    Q, K, V in E4M3 under one scale each (amax / 448: the FP8 KV cache's per-layer
                scale; Q's per tensor); P = exp(S - m) · 256 in E4M3 (the power of two keeps the
                small weights out of E4M3's subnormals), divided back after PV.
  fp8_head      as fp8_tensor, Q's scale per query head (what the issue names).
  fp8_head_1acc as fp8_head with Hopper's FP8 tensor-core accumulation emulated: the products of
                one 32-key MMA step summed exactly, the running accumulator kept to 13 mantissa bits
                (truncated, DeepSeek-V3's report measures ~14), one accumulator over all keys.
  fp8_head_2acc as fp8_head_1acc, accumulated per 128-key tile in the tensor core and added into a
                float32 accumulator after each tile (the two-level accumulation vLLM added after
                FP8 attention lost long-context retrieval; flash-attention #104).
  fp8_head_2acc_had  as fp8_head_2acc on Q and K rotated by one Hadamard matrix with random signs
                (FlashAttention-3's incoherent processing: QKᵀ unchanged, outlier channels spread
                over all of head_dim before they are quantized; K would be rotated where the cache
                stores it, Q where attention reads it).

Inputs, two distributions: `fa3` — per head, Q, K, V of N(0, 1) with 0.1 % of entries replaced by
N(0, 10²) (FlashAttention-3's outlier test); `channels` — the same with two of K's channels ×20 (as
real keys have). Causal; the float64 reference is exact softmax attention of the same (unrounded)
inputs. Errors are over 256 query rows spread over the sequence (the last one included): the
output's RMSE (absolute, as FlashAttention-3's paper reports it, and divided by the reference
output's RMS), and the largest absolute error; the worst head of --heads. Deterministic (seeded).

    python3 tools/fp8_attention_error.py [--lengths 4096 8192 16384 32768] [--heads 2]
        [--head-dim 128] [--json docs/results/issue44/fp8_attention_error.json]

Needs torch (tools/requirements-fixtures.txt).
"""
import argparse
import json
import math

import torch

E4M3_MAX = 448.0
P_SCALE = 256.0
MMA_K = 32      # keys per FP8 MMA step (k of wgmma m64nNk32)
TILE = 128      # keys per tile of a flash kernel
ACC_BITS = 13   # mantissa bits the emulated tensor-core accumulator keeps


def e4m3(x, scale):
    """x quantized to E4M3 under `scale` (x / scale saturated at ±448), as values times scale."""
    return (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float64) * scale


def truncate(x, bits):
    """x (float64) truncated toward zero to `bits` mantissa bits."""
    m, e = torch.frexp(x)
    return torch.ldexp(torch.trunc(m * 2.0**bits) / 2.0**bits, e)


def hadamard(n, seed):
    """An n × n orthonormal Hadamard matrix (n a power of two) with random column signs."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    signs = torch.randint(0, 2, (n,), generator=torch.Generator().manual_seed(seed)).to(torch.float64) * 2 - 1
    return h * signs / math.sqrt(n)


def inputs(length, head_dim, seed, channels):
    g = torch.Generator().manual_seed(seed)
    def one():
        x = torch.randn(length, head_dim, generator=g, dtype=torch.float64)
        outliers = torch.rand(length, head_dim, generator=g, dtype=torch.float64) < 1e-3
        return torch.where(outliers, 10.0 * torch.randn(length, head_dim, generator=g, dtype=torch.float64), x)
    q, k, v = one(), one(), one()
    if channels:
        k[:, :2] *= 20.0  # two outlier channels, as real keys have
    return q, k, v


def reference(q, k, v, rows):
    scale = 1.0 / math.sqrt(q.shape[1])
    out = torch.empty(len(rows), v.shape[1], dtype=torch.float64)
    for i, r in enumerate(rows):
        s = (k[: r + 1] @ q[r]) * scale
        p = torch.softmax(s, dim=0)
        out[i] = p @ v[: r + 1]
    return out


def flash(q, k, v, rows, variant, q_scale, kv_scales):
    """The candidate's output for query rows `rows` (float64 holding the candidate's roundings)."""
    scale = 1.0 / math.sqrt(q.shape[1])
    if variant == "bf16":
        rq, rk, rv = (t.to(torch.bfloat16).to(torch.float64) for t in (q, k, v))
    else:
        rq = e4m3(q, q_scale)
        rk, rv = e4m3(k, kv_scales[0]), e4m3(v, kv_scales[1])
    limited = variant.endswith("acc")
    out = torch.empty(len(rows), v.shape[1], dtype=torch.float64)
    for i, r in enumerate(rows):
        n = r + 1
        # Scores: exact products, float32 accumulation (head_dim 128 = 4 MMA steps: the limited
        # accumulator changes little here; it is kept for PV, where the sum runs over the keys).
        s = (rk[:n] @ rq[r]).to(torch.float32).to(torch.float64) * scale
        m_all = s.max()
        if variant == "bf16":
            p = torch.exp(s - m_all).to(torch.float32).to(torch.bfloat16).to(torch.float64)
            l = torch.exp(s - m_all).to(torch.float32).sum(dtype=torch.float64)
            o = (p @ rv[:n]).to(torch.float32).to(torch.float64)
            out[i] = o / l
            continue
        # P against the row's final maximum: a kernel's online softmax rounds P against its running
        # maximum and rescales the accumulator per tile, so its roundings fall elsewhere — an
        # approximation of the kernel's order, not its bits; the accumulation order is kept by tile.
        p32 = torch.exp(s - m_all).to(torch.float32).to(torch.float64)
        l = p32.sum()
        p8 = e4m3(p32 * P_SCALE, 1.0)
        if not limited:
            o = (p8 @ rv[:n]).to(torch.float32).to(torch.float64)
        else:
            two_level = variant.endswith("2acc")
            o = torch.zeros(v.shape[1], dtype=torch.float64)
            acc = torch.zeros(v.shape[1], dtype=torch.float64)
            for c0 in range(0, n, MMA_K):
                c1 = min(c0 + MMA_K, n)
                step = p8[c0:c1] @ rv[c0:c1]  # one MMA step's products, summed exactly
                acc = truncate(acc + step, ACC_BITS)
                if two_level and ((c0 + MMA_K) % TILE == 0 or c0 + MMA_K >= n):
                    o = (o + acc).to(torch.float32).to(torch.float64)
                    acc = torch.zeros_like(acc)
            if not two_level:
                o = acc
        out[i] = o / P_SCALE / l
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192, 16384, 32768])
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    variants = ["bf16", "fp8_tensor", "fp8_head", "fp8_head_1acc", "fp8_head_2acc", "fp8_head_2acc_had"]
    results = []
    rot = hadamard(a.head_dim, seed=7)
    print(f"{'inputs':<9} {'length':>7} {'variant':<18} {'RMSE':>10} {'rel RMSE':>10} {'max abs':>10}")
    for dist, length in [(d, n) for d in ("fa3", "channels") for n in a.lengths]:
        rows = sorted(set(torch.linspace(0, length - 1, a.rows).round().long().tolist()))
        per = {v: [[], [], []] for v in variants}
        heads = [inputs(length, a.head_dim, seed=1000 * length + h, channels=dist == "channels") for h in range(a.heads)]
        # Per tensor: one scale over every head (the FP8 KV cache's per-layer K and V scales, Q's
        # for fp8_tensor); fp8_head* scale each query head by its own amax.
        q_tensor = max(q.abs().max() for q, _, _ in heads) / E4M3_MAX
        kv_scales = (max(k.abs().max() for _, k, _ in heads) / E4M3_MAX,
                     max(v.abs().max() for _, _, v in heads) / E4M3_MAX)
        kr_scale = max((k @ rot).abs().max() for _, k, _ in heads) / E4M3_MAX
        for q, k, v in heads:
            ref = reference(q, k, v, rows)
            ref_rms = ref.pow(2).mean().sqrt().item()
            for var in variants:
                if var.endswith("_had"):
                    qr, kr = q @ rot, k @ rot
                    out = flash(qr, kr, v, rows, var[:-4], qr.abs().max() / E4M3_MAX, (kr_scale, kv_scales[1]))
                else:
                    q_scale = q_tensor if var == "fp8_tensor" else q.abs().max() / E4M3_MAX
                    out = flash(q, k, v, rows, var, q_scale, kv_scales)
                err = out - ref
                rmse = err.pow(2).mean().sqrt().item()
                per[var][0].append(rmse)
                per[var][1].append(rmse / ref_rms)
                per[var][2].append(err.abs().max().item())
        for var in variants:
            rmse, rel, mx = (max(x) for x in per[var])
            print(f"{dist:<9} {length:>7} {var:<18} {rmse:>10.3e} {rel:>10.3e} {mx:>10.3e}")
            results.append({"inputs": dist, "length": length, "variant": var, "rmse": rmse, "rel_rmse": rel,
                            "max_abs": mx})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": {"lengths": a.lengths, "heads": a.heads, "head_dim": a.head_dim, "rows": a.rows,
                                  "p_scale": P_SCALE, "mma_k": MMA_K, "tile": TILE, "acc_bits": ACC_BITS},
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
