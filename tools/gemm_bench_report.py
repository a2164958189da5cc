#!/usr/bin/env python3
"""Merges repeated runs of bench_cuda_gemm (--json) into one JSON and prints the
markdown tables of docs/benchmarks.md ("CUDA GEMMs on the H200").

    python3 tools/gemm_bench_report.py run1.json run2.json run3.json \
        --out docs/results/bench_cuda_gemm_h200.json > tables.md

Per configuration the reported time is the median of the runs' medians; the
derived figures (TFLOP/s, GB/s, % of roofline) are recomputed from it.
Standard library only.
"""
import argparse
import json
import statistics

FP8_PEAK, BF16_PEAK, BW = 1426e12, 794e12, 4.29e12
MODES = ["bf16", "fp8_tensor", "fp8_outer_vector", "fp8_block", "fp8_block_prescaled"]
SHORT = {"bf16": "BF16", "fp8_tensor": "FP8 tensor", "fp8_outer_vector": "FP8 outer-vector",
         "fp8_block": "FP8 block", "fp8_block_prescaled": "FP8 block*"}


def metrics(m, n, k, mode, t_us):
    t = t_us * 1e-6
    elem = 2 if mode == "bf16" else 1
    wbytes = n * k * elem
    kb, nb = -(-k // 128), -(-n // 128)
    if mode == "fp8_outer_vector":
        wbytes += 4 * n
    if mode.startswith("fp8_block"):
        wbytes += 4 * nb * kb
    total = wbytes + m * k * elem + m * n * 2
    flops = 2 * m * n * k
    peak = BF16_PEAK if mode == "bf16" else FP8_PEAK
    return {"tflops": round(flops / t / 1e12, 1), "weight_gbs": round(wbytes / t / 1e9),
            "pct_roofline": round(100 * max(flops / peak, total / BW) / t, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--out")
    a = ap.parse_args()
    runs = [json.load(open(p)) for p in a.runs]
    keyed = [{(r["model"], r["layer"], r["m"], r["mode"]): r for r in run["results"]} for run in runs]
    merged = []
    for key, r0 in keyed[0].items():
        model, layer, m, mode = key
        e = {"model": model, "layer": layer, "m": m, "n": r0["n"], "k": r0["k"], "mode": mode}
        rs = [kd[key] for kd in keyed]
        if not all(r["supported"] for r in rs):
            e["supported"] = False
            e["reason"] = next(r.get("reason", "") for r in rs if not r["supported"])
        else:
            e["supported"] = True
            e["median_us_per_run"] = [round(r["median_us"], 1) for r in rs]
            e["median_us"] = round(statistics.median(e["median_us_per_run"]), 1)
            e.update(metrics(m, r0["n"], r0["k"], mode, e["median_us"]))
        merged.append(e)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"benchmark": "bench_cuda_gemm", "device": runs[0]["device"], "runs": len(runs),
                       "ceilings": runs[0]["ceilings"], "results": merged}, f, separators=(",", ":"))
            f.write("\n")

    idx = {(e["model"], e["layer"], e["m"], e["mode"]): e for e in merged}
    models = sorted({e["model"] for e in merged}, key=lambda s: int(s.split("-")[-1][:-1]))
    for model in models:
        layers = list(dict.fromkeys(e["layer"] for e in merged if e["model"] == model))
        ms = sorted({e["m"] for e in merged if e["model"] == model})
        print(f"\n#### {model}: TFLOP/s (% of roofline) · weights read at GB/s\n")
        print("| layer (N×K) | M | " + " | ".join(SHORT[m] for m in MODES) + " |")
        print("|---|---|" + "---|" * len(MODES))
        for layer in layers:
            for m in ms:
                e0 = idx[(model, layer, m, "bf16")]
                cells = []
                for mode in MODES:
                    e = idx.get((model, layer, m, mode))
                    if e is None:
                        cells.append("–")
                    elif not e["supported"]:
                        cells.append("no algorithm")
                    else:
                        cells.append(f"{e['tflops']:.0f} ({e['pct_roofline']:.0f} %) · {e['weight_gbs']}")
                print(f"| {layer} ({e0['n']}×{e0['k']}) | {m} | " + " | ".join(cells) + " |")
        print(f"\n#### {model}: ratios at M ≥ 4096 (median time; in brackets the range over the {len(runs)} runs)\n")
        print("| layer | M | FP8 tensor / BF16 | FP8 outer-vector / BF16 | FP8 block / BF16 | FP8 block / FP8 tensor "
              "| FP8 block* / FP8 tensor |")
        print("|---|---|---|---|---|---|---|")
        for layer in layers:
            for m in ms:
                if m < 4096:
                    continue
                cells = []
                for num, den, pct in (("fp8_tensor", "bf16", False), ("fp8_outer_vector", "bf16", False),
                                      ("fp8_block", "bf16", False), ("fp8_block", "fp8_tensor", True),
                                      ("fp8_block_prescaled", "fp8_tensor", True)):
                    en, ed = idx[(model, layer, m, num)], idx[(model, layer, m, den)]
                    r = ed["median_us"] / en["median_us"]
                    per = [d / x for d, x in zip(ed["median_us_per_run"], en["median_us_per_run"])]
                    if pct:
                        cells.append(f"{100 * r:.0f} % [{100 * min(per):.0f}–{100 * max(per):.0f}]")
                    else:
                        cells.append(f"{r:.2f}× [{min(per):.2f}–{max(per):.2f}]")
                print(f"| {layer} | {m} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
