#!/usr/bin/env python3
"""The markdown table of a serving benchmark run (scripts/gpu_serve.sh): one row per
configuration and concurrency from its `fp8lm bench serve --json` files, with each
configuration's output throughput as a ratio of BF16's at the same concurrency.

    python3 tools/serve_results_table.py DIR [--configs bf16 fp8 fp8_kv]
"""
import argparse
import json
import sys
from pathlib import Path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--configs", nargs="+", default=["bf16", "fp8", "fp8_kv"])
    args = ap.parse_args()
    runs = {}
    for path in sorted(args.dir.glob("serve_*_c*.json")):
        name, c = path.stem[len("serve_"):].rsplit("_c", 1)
        runs[(name, int(c))] = json.loads(path.read_text())["results"]
    if not runs:
        sys.exit(f"{args.dir}: no serve_<config>_c<concurrency>.json files")
    print("| weights / KV | concurrency | completed | failed | output tok/s | vs BF16 | total tok/s "
          "| TTFT median / p99 ms | TPOT median / p99 ms | ITL median ms | e2e median s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for cfg in args.configs:
        for c in sorted(k[1] for k in runs if k[0] == cfg):
            r = runs[(cfg, c)]
            base = runs.get(("bf16", c))
            ratio = f"{r['output_tok_s'] / base['output_tok_s']:.2f}×" if base else "-"
            print(f"| {cfg} | {c} | {r['completed']} | {r['failed']} | {r['output_tok_s']:.1f} | {ratio} "
                  f"| {r['total_tok_s']:.0f} | {r['ttft']['median_ms']:.0f} / {r['ttft']['p99_ms']:.0f} "
                  f"| {r['tpot']['median_ms']:.1f} / {r['tpot']['p99_ms']:.1f} | {r['itl']['median_ms']:.1f} "
                  f"| {r['e2e']['median_ms'] / 1000:.2f} |")


if __name__ == "__main__":
    main()
