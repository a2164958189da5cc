#!/usr/bin/env python3
"""Make the FP8 numerics fixtures that fp8lm's C++ tests compare against.

Every expected byte here is produced by someone else's code:
  * PyTorch's own float8 casts (`.to(torch.float8_e4m3fn / float8_e5m2)`), plain
    and after `torch.clamp` (the saturating idiom every quantizer uses);
  * compressed-tensors (the library LLM Compressor writes checkpoints with):
    `calculate_qparams` for scales and `quantize` for codes, on BF16 and F32
    weights, for the tensor / channel / group / block strategies;
  * the formulas of vLLM's dynamic activation kernels (per-token with its
    1/(448*512) scale floor, per-token-group-128 with its 1e-10 amax floor),
    written here in PyTorch, because vLLM itself does not run on a CPU.

Output: tests/fixtures/numerics/ with raw little-endian arrays and
manifest.json describing each case. Deterministic (fixed seeds); run it again
and `git diff` shows nothing.

    python tools/make_numerics_fixtures.py [--out tests/fixtures/numerics]

Needs: torch, compressed-tensors (tools/requirements-fixtures.txt).
"""

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch
from compressed_tensors.quantization import QuantizationArgs
from compressed_tensors.quantization.lifecycle.forward import quantize as ct_quantize
from compressed_tensors.quantization.utils.helpers import calculate_qparams

from fixture_arrays import ArrayWriter

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FMT = {"e4m3": E4M3, "e5m2": E5M2}
FMAX = {"e4m3": 448.0, "e5m2": 57344.0}


class Writer(ArrayWriter):
    """The arrays plus manifest.json describing each case."""

    def __init__(self, out: Path):
        super().__init__(out)
        self.manifest = {"casts": [], "decodes": [], "quantized": []}

    def save(self):
        (self.out / "manifest.json").write_text(json.dumps(self.manifest, indent=1) + "\n")


# ---------------------------------------------------------------------------
# casts


def float32_inputs() -> torch.Tensor:
    """Float32 values that exercise every rounding and saturation rule."""
    g = torch.Generator().manual_seed(1234)
    vals = []
    special = [0.0, -0.0, math.inf, -math.inf, 448.0, -448.0, 464.0, -464.0, 480.0, 57344.0,
               61440.0, -61440.0, 65536.0, 3.4028234663852886e38, 1e-45, -1e-45, 1.17549435e-38,
               2.0**-9, 2.0**-10, 1.5 * 2.0**-10, 3 * 2.0**-10, 2.0**-16, 2.0**-17, 1.5 * 2.0**-17]
    vals.append(torch.tensor(special, dtype=torch.float32))
    # NaNs with both signs and several payloads
    nan_bits = torch.tensor([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF],
                            dtype=torch.int64).to(torch.int32)
    vals.append(nan_bits.view(torch.float32))
    for fmt in (E4M3, E5M2):
        # every representable value, the midpoints between neighbours (ties) and
        # the floats just either side of each midpoint
        codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(fmt).to(torch.float32)
        finite = codes[torch.isfinite(codes)]
        pos = torch.unique(finite[finite >= 0])
        mids = (pos[1:] + pos[:-1]) / 2
        beyond = pos[-1] + (pos[-1] - pos[-2]) / 2  # midpoint past the max
        mids = torch.cat([mids, beyond.reshape(1)])
        for base in (pos, mids):
            for t in (base, torch.nextafter(base, torch.tensor(math.inf)),
                      torch.nextafter(base, torch.tensor(-math.inf))):
                vals += [t, -t]
    # log-uniform magnitudes over the whole float range of interest, random signs
    e = torch.rand(100_000, generator=g, dtype=torch.float64) * 50 - 30  # 2^-30 .. 2^20
    sign = torch.where(torch.rand(100_000, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
    vals.append((sign * torch.exp2(e)).to(torch.float32))
    # uniformly random bit patterns (every class of float32, NaNs included)
    bits = torch.randint(0, 2**32, (100_000,), generator=g, dtype=torch.int64).to(torch.int32)
    vals.append(bits.view(torch.float32))
    return torch.cat([v.to(torch.float32) for v in vals])


def add_casts(w: Writer):
    inputs = {
        "bf16_all": torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16),
        "f32_set": float32_inputs(),
    }
    for src, x in inputs.items():
        in_file = w.array(f"cast_{src}_input", x)
        for fmt_name, fmt in FMT.items():
            m = FMAX[fmt_name]
            # Saturating reference: clamp in float32, then PyTorch's cast. (Clamping
            # the BF16 tensor directly is not usable as a reference for NaN:
            # PyTorch's vectorized BF16 clamp turns every NaN into 0xFFFF, a
            # negative NaN, while its float32 clamp keeps the sign.)
            for sat, y in (("torch_cast", x.to(fmt)),
                           ("sat_finite", torch.clamp(x.float(), -m, m).to(fmt))):
                w.manifest["casts"].append({
                    "input": in_file, "input_dtype": "bf16" if src == "bf16_all" else "f32",
                    "count": x.numel(), "format": fmt_name, "saturation": sat,
                    "expected": w.array(f"cast_{src}_{fmt_name}_{sat}", y),
                })
    for fmt_name, fmt in FMT.items():
        f = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(fmt).to(torch.float32)
        w.manifest["decodes"].append({"format": fmt_name, "expected": w.array(f"decode_{fmt_name}", f)})


# ---------------------------------------------------------------------------
# quantized tensors


def test_matrix(rows: int, cols: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
    """Weight-like data: gaussian with a few outliers, a zero row and a zero block."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * 0.02
    outliers = torch.randint(0, rows * cols, (max(1, rows * cols // 500),), generator=g)
    x.view(-1)[outliers] *= 40.0
    x[1] = 0.0                 # an all-zero row (channel/token scales)
    x[0:4, 0:4] = 0.0          # part of a zero group
    if rows > 130 and cols > 130:
        x[128:, 128:] = 0.0    # a whole zero block at the bottom-right edge
    x[2, 5] = -0.0
    x[3, 7] = 1e-30            # quotients in the FP8 subnormal range
    return x.to(dtype)


def block_view_reduce(x: torch.Tensor, bn: int, bk: int, fn) -> torch.Tensor:
    """Reduces each bn × bk block (partial at the edges) with fn -> [cdiv(N,bn), cdiv(K,bk)]."""
    n, k = x.shape
    out = torch.empty(math.ceil(n / bn), math.ceil(k / bk), dtype=x.dtype)
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = fn(x[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk])
    return out


def ct_case(x: torch.Tensor, strategy: str, group: int = 128, block=(128, 128)):
    """Weights quantized by compressed-tensors exactly as LLM Compressor does."""
    kw = dict(num_bits=8, type="float", symmetric=True, dynamic=False, strategy=strategy)
    if strategy == "group":
        kw["group_size"] = group
    if strategy == "block":
        kw["block_structure"] = list(block)
    args = QuantizationArgs(**kw)
    if strategy == "tensor":
        mn, mx = torch.aminmax(x)
    elif strategy == "channel":
        mn, mx = x.amin(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)
    elif strategy == "group":
        mn = block_view_reduce(x, 1, group, torch.min)
        mx = block_view_reduce(x, 1, group, torch.max)
    else:
        mn = block_view_reduce(x, block[0], block[1], torch.min)
        mx = block_view_reduce(x, block[0], block[1], torch.max)
    scale, zp = calculate_qparams(mn, mx, args)
    scale = scale.reshape(1, 1) if strategy == "tensor" else scale
    codes = ct_quantize(x, scale, zp.reshape(scale.shape), args, dtype=E4M3)
    return codes, scale


def vllm_rows(x: torch.Tensor, fmt: str, group: int | None):
    """vLLM dynamic activation quantization: per token (group=None) or per 1×group."""
    m = FMAX[fmt]
    xf = x.to(torch.float32)
    if group is None:
        amax = xf.abs().amax(dim=1, keepdim=True)
        scale = torch.clamp(amax / m, min=1.0 / (m * 512.0))  # vLLM's min_scaling_factor
        codes = torch.clamp(xf / scale, -m, m).to(FMT[fmt])
        return codes, scale
    amax = block_view_reduce(xf.abs(), 1, group, torch.max)
    scale = torch.clamp(amax, min=1e-10) / m  # vLLM per_token_group_quant_fp8
    full = scale.repeat_interleave(group, dim=1)[:, : x.shape[1]]
    return torch.clamp(xf / full, -m, m).to(FMT[fmt]), scale


def expand(scale: torch.Tensor, shape, bn: int, bk: int) -> torch.Tensor:
    return scale.repeat_interleave(bn, 0).repeat_interleave(bk, 1)[: shape[0], : shape[1]]


def add_quantized(w: Writer):
    cases = []
    # compressed-tensors weights: BF16 model (the usual case) and an F32 model
    for dtype_name, dtype in (("bf16", torch.bfloat16), ("f32", torch.float32)):
        x_all = test_matrix(200, 264, seed=7, dtype=dtype)
        for strategy, layout in (("tensor", {"granularity": "tensor"}),
                                 ("channel", {"granularity": "channel"}),
                                 ("group", {"granularity": "group", "group_cols": 128}),
                                 ("block", {"granularity": "block", "group_rows": 128, "group_cols": 128})):
            # compressed-tensors' group strategy needs K divisible by the group size
            x = x_all[:, :256].contiguous() if strategy == "group" else x_all
            codes, scale = ct_case(x, strategy)
            bn, bk = {"tensor": (200, 264), "channel": (1, 264), "group": (1, 128),
                      "block": (128, 128)}[strategy]
            cases.append((f"ct_{dtype_name}_{strategy}", x, "e4m3", layout,
                          {"preset": "compressed_tensors", "model_dtype": dtype_name},
                          codes, scale.to(torch.float32), bn, bk))
    # vLLM dynamic activations on BF16 and F32 activations
    for dtype_name, dtype in (("bf16", torch.bfloat16), ("f32", torch.float32)):
        x = test_matrix(19, 1000, seed=11, dtype=dtype)
        for fmt in ("e4m3", "e5m2"):
            codes, scale = vllm_rows(x, fmt, None)
            cases.append((f"vllm_token_{dtype_name}_{fmt}", x, fmt, {"granularity": "token"},
                          {"preset": "runtime"}, codes, scale, 1, 1000))
        codes, scale = vllm_rows(x, "e4m3", 128)
        cases.append((f"vllm_group128_{dtype_name}", x, "e4m3",
                      {"granularity": "group", "group_cols": 128}, {"preset": "vllm_group"},
                      codes, scale, 1, 128))
    # dynamic per-tensor with fp8lm's runtime rule (amax / 448 in float32)
    x = test_matrix(64, 384, seed=13, dtype=torch.bfloat16)
    scale = torch.clamp(x.float().abs().amax() / 448.0, min=1.0 / (448.0 * 512.0)).reshape(1, 1)
    cases.append(("runtime_tensor_bf16", x, "e4m3", {"granularity": "tensor"}, {"preset": "runtime"},
                  torch.clamp(x.float() / scale, -448, 448).to(E4M3), scale, 64, 384))
    # static per-tensor input scale (a calibrated activation scale)
    static = torch.tensor([[0.0123]], dtype=torch.float32)
    cases.append(("static_tensor_bf16", x, "e4m3", {"granularity": "tensor"},
                  {"preset": "static", "scales": "given"},
                  torch.clamp(x.float() / static, -448, 448).to(E4M3), static, 64, 384))
    # DeepSeek-style "ue8m0" block scales: 2^ceil(log2(amax/448)), computed exactly
    x = test_matrix(200, 300, seed=17, dtype=torch.bfloat16)
    amax = block_view_reduce(x.float().abs(), 128, 128, torch.max)
    s = torch.clamp(amax / 448.0, min=1.0 / (448.0 * 512.0))
    mant, ex = torch.frexp(s)
    s = torch.where(mant == 0.5, s, torch.ldexp(torch.ones_like(s), ex))
    codes = torch.clamp(x.float() / expand(s, x.shape, 128, 128), -448, 448).to(E4M3)
    cases.append(("pow2_block_bf16", x, "e4m3",
                  {"granularity": "block", "group_rows": 128, "group_cols": 128},
                  {"preset": "runtime", "power_of_two": True}, codes, s, 128, 128))

    # dequantization references for one case of each granularity and format
    with_dequant = {"ct_bf16_tensor", "ct_bf16_channel", "ct_bf16_group", "ct_bf16_block",
                    "vllm_token_bf16_e5m2", "pow2_block_bf16"}
    for name, x, fmt, layout, rule, codes, scale, bn, bk in cases:
        scale = scale.to(torch.float32)
        entry = {
            "name": name, "rows": x.shape[0], "cols": x.shape[1],
            "input_dtype": "bf16" if x.dtype == torch.bfloat16 else "f32",
            "input": w.array(f"q_{name}_input", x), "format": fmt, "layout": layout, "rule": rule,
            "scale_shape": list(scale.shape), "scales": w.array(f"q_{name}_scales", scale),
            "codes": w.array(f"q_{name}_codes", codes),
        }
        if name in with_dequant:
            full = expand(scale, x.shape, bn, bk) if scale.numel() > 1 else scale
            deq = codes.to(torch.float32) * full
            entry["dequant_f32"] = w.array(f"q_{name}_dequant_f32", deq)
            entry["dequant_bf16"] = w.array(f"q_{name}_dequant_bf16", deq.to(torch.bfloat16))
        w.manifest["quantized"].append(entry)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/numerics"))
    out = Path(ap.parse_args().out)
    torch.manual_seed(0)
    np.random.seed(0)
    w = Writer(out)
    add_casts(w)
    add_quantized(w)
    w.manifest["generated_by"] = {"torch": torch.__version__,
                                  "compressed_tensors": __import__("compressed_tensors").__version__}
    w.save()
    total = sum(p.stat().st_size for p in out.iterdir())
    print(f"wrote {len(list(out.iterdir()))} files, {total / 1e6:.1f} MB to {out}")


if __name__ == "__main__":
    main()
