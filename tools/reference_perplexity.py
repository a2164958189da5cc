#!/usr/bin/env python3
"""Perplexity of a model under `fp8lm eval perplexity`'s protocol, computed with transformers.

The protocol (src/eval/perplexity.h):
  * the whole file is tokenized as the tokenizer does by default (AutoTokenizer, text → ids with
    its default special tokens);
  * the ids are cut into consecutive windows of CTX tokens from the start; a remainder shorter
    than CTX is dropped;
  * each window runs alone, from position 0; the logits at position i predict token i + 1;
  * scored tokens: `all` — every token of a window but its first (positions 1 .. CTX−1);
    `second-half` — llama.cpp's: positions CTX/2 + 1 .. CTX−1;
  * NLL of a token = −log_softmax(logits)[token], computed here in float64 from the model's
    float32 logits (not transformers' `labels=` loss, which shifts and averages for you);
    PPL = exp(mean NLL over every scored token of every window).

The model runs in float32 (`model.float()`: BF16 weights widen exactly), eager attention, on
the CPU. It prints the result and writes it as JSON:

    /tmp/torchvenv/bin/python tools/reference_perplexity.py models/fp8lm-gutenberg-22m \
        ../shared/data/wikitext-2-raw/wiki.test.raw --ctx 1024 [--protocol all|second-half] \
        [--limit-windows N] [--out result.json]

Several protocols at once: `--protocol all --protocol second-half` writes one JSON object per
protocol under "results" (the per-window NLL sums are there too, to find where two runs differ).
"""
import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def first_target(ctx: int, protocol: str) -> int:
    if protocol == "all":
        return 1
    if protocol == "second-half":
        return ctx // 2 + 1
    raise SystemExit(f"unknown protocol {protocol!r} (all, second-half)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("data")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--protocol", action="append", choices=["all", "second-half"])
    ap.add_argument("--limit-windows", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    protocols = args.protocol or ["all"]
    if args.threads:
        torch.set_num_threads(args.threads)

    text = Path(args.data).read_text(encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(args.model)
    ids = tok(text)["input_ids"]  # the tokenizer's default: add_special_tokens=True
    n = len(ids)
    ctx = args.ctx
    windows = n // ctx
    if args.limit_windows:
        windows = min(windows, args.limit_windows)
    if windows == 0:
        raise SystemExit(f"{args.data}: {n} tokens, fewer than one window of {ctx}")

    model = AutoModelForCausalLM.from_pretrained(args.model, attn_implementation="eager")
    model = model.float().eval()
    if ctx > model.config.max_position_embeddings:
        raise SystemExit(f"ctx {ctx} exceeds the model's context of {model.config.max_position_embeddings}")

    sums = {p: [] for p in protocols}
    counts = {p: 0 for p in protocols}
    t0 = time.time()
    with torch.inference_mode():
        for w in range(windows):
            window = torch.tensor(ids[w * ctx:(w + 1) * ctx], dtype=torch.long)[None]
            logits = model(window).logits[0]  # [ctx, vocab] float32
            logp = torch.log_softmax(logits.double(), dim=-1)
            # logits at position i predict the token at i + 1
            nll = -logp[:-1].gather(1, window[0, 1:, None]).squeeze(1)  # nll[j] = target position j + 1
            for p in protocols:
                first = first_target(ctx, p)
                part = nll[first - 1:]
                sums[p].append(float(part.sum()))
                counts[p] += part.numel()
            if (w + 1) % 10 == 0 or w + 1 == windows:
                p = protocols[0]
                print(f"[{w + 1}/{windows}] ppl {math.exp(sum(sums[p]) / counts[p]):.4f} "
                      f"({time.time() - t0:.0f} s)", file=sys.stderr)

    results = {}
    for p in protocols:
        nll_mean = math.fsum(sums[p]) / counts[p]
        results[p] = {"ppl": math.exp(nll_mean), "nll_mean": nll_mean, "tokens_scored": counts[p],
                      "windows": windows, "ctx": ctx, "protocol": p, "window_nll_sums": sums[p]}
        print(f"{p}: ppl {results[p]['ppl']:.6f}, nll {nll_mean:.8f} over {counts[p]} tokens, "
              f"{windows} windows of {ctx}")
    out = {
        "tool": "tools/reference_perplexity.py",
        "model": Path(args.model).name,
        "data": Path(args.data).name,
        "file_tokens": n,
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "dtype": "float32",
        "results": results,
    }
    print(f"{time.time() - t0:.1f} s", file=sys.stderr)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
