#!/usr/bin/env python3
"""Prints the docs/quality.md table from the JSON files scripts/quality_eval.sh writes.

    python3 tools/quality_table.py quality-results
"""
import json
import sys
from pathlib import Path

ROWS = [  # file stem, what it is
    ("bf16", "BF16 (the base)"),
    ("online_fp8_tensor", "online `--quantization fp8:tensor` (per-tensor W, dynamic per-tensor A)"),
    ("online_fp8_channel", "online `--quantization fp8` (per-channel W, dynamic per-token A)"),
    ("online_fp8_block", "online `--quantization fp8:block` (128×128 W, 1×128 A)"),
    ("online_fp8_weight_only", "online `--quantization fp8:weight-only` (per-channel W, A in high precision)"),
    ("online_fp8_channel_fp8_embeddings", "online `fp8` + `--fp8-embeddings` (embedding/lm_head FP8 per row)"),
    ("ckpt_FP8_DYNAMIC", "`fp8lm quantize --scheme FP8_DYNAMIC` checkpoint"),
    ("ckpt_FP8", "`fp8lm quantize --scheme FP8` checkpoint (static A scales from wiki.valid)"),
    ("ckpt_FP8_BLOCK", "`fp8lm quantize --scheme FP8_BLOCK` checkpoint"),
    ("kv_fp8_scale_one", "BF16 weights, FP8 E4M3 KV cache, scales 1.0 (`--no-kv-calibration`)"),
    ("kv_fp8_calibrated_at_load", "BF16 weights, FP8 E4M3 KV cache, scales calibrated at load (built-in text)"),
    ("ckpt_FP8_DYNAMIC_kv_calibrated", "FP8_DYNAMIC checkpoint + KV scales from wiki.valid"),
    ("kv_fp8_e5m2", "BF16 weights, FP8 E5M2 KV cache (scale 1.0)"),
    ("kv_fp8_fp8_attention", "BF16 weights, FP8 E4M3 KV cache (calibrated) + `--fp8-attention`"),
    ("kv_fp8_fp8_attention_vs_kv_fp8", "the same, against the FP8 E4M3 KV cache with float attention (base `--base-kv-cache-dtype fp8`)"),
]


def main():
    folder = Path(sys.argv[1])
    print("| configuration | PPL | ΔPPL % | mean KLD | p99 KLD | top-1 agreement |")
    print("|---|---|---|---|---|---|")
    for stem, what in ROWS:
        f = folder / f"{stem}.json"
        if not f.exists():
            print(f"| {what} | (not run) | | | | |")
            continue
        r = json.loads(f.read_text())
        print(f"| {what} | {r['ppl']:.2f} | {r['delta_ppl_percent']:+.3f} | {r['kld_mean']:.5f} | "
              f"{r['kld_p99']:.4f} | {100 * r['top1_agreement']:.2f} % |")
    any_r = next((json.loads((folder / f"{s}.json").read_text()) for s, _ in ROWS if (folder / f"{s}.json").exists()), None)
    if any_r:
        print(f"\n{any_r['windows']} windows of {any_r['ctx']} tokens, {any_r['tokens_scored']} tokens scored, "
              f"protocol `{any_r['protocol']}`.")


if __name__ == "__main__":
    main()
