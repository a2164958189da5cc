#!/usr/bin/env python3
"""Encode throughput of Hugging Face `tokenizers`, measured as bench/bench_tokenizer.cpp
measures fp8lm: single thread, wikitext-2's test split encoded one non-empty line at a
time without special tokens; MB/s of UTF-8 input (1 MB = 10^6 bytes), best of N runs.

    RAYON_NUM_THREADS=1 .venv-tools/bin/python tools/bench_hf_tokenizer.py
"""
import argparse
import os
import pathlib
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import tokenizers  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOKENIZERS = {
    "gpt2": ROOT.parent / "shared/data/hf/openai-community__gpt2",
    "qwen3": ROOT.parent / "shared/data/hf/Qwen__Qwen3-4B",
    "tinyllama": ROOT.parent / "shared/data/hf/TinyLlama__TinyLlama_v1.1",
    "gutenberg": ROOT / "models/fp8lm-gutenberg-22m",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", default=str(ROOT.parent / "shared/data/wikitext-2-raw/wiki.test.raw"))
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    docs = [l + "\n" for l in pathlib.Path(args.text).read_text(encoding="utf-8").split("\n") if l]
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    print(f"tokenizers {tokenizers.__version__}, {len(docs)} documents, {nbytes} bytes")
    # Wall-clock and CPU-time rates: on a shared machine the CPU-time one is the
    # steadier (Google Benchmark reports CPU time by default too).
    print(f"{'tokenizer':<12} {'MB/s wall':>10} {'MB/s cpu':>9} {'tokens':>9}")
    for name, d in TOKENIZERS.items():
        tok = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
        best, best_cpu = float("inf"), float("inf")
        ntok = 0
        for _ in range(args.runs):
            t0, c0 = time.perf_counter(), time.process_time()
            ntok = sum(len(tok.encode(doc, add_special_tokens=False).ids) for doc in docs)
            best = min(best, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.process_time() - c0)
        print(f"{name:<12} {nbytes / best / 1e6:10.2f} {nbytes / best_cpu / 1e6:9.2f} {ntok:9d}")


if __name__ == "__main__":
    main()
