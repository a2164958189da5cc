#!/usr/bin/env python3
"""Mean accepted length of fp8lm's speculative decoding on held-out text (issue 42).

Prompts are the first sentences of WikiText-2's test paragraphs (text the shipped model and its
drafters never trained on); each is continued greedily with `fp8lm generate --json` at every k of
--k for every method, and the verify steps' counts are summed. Prints a table and writes JSON.

  python3 tools/speculative_acceptance.py --bin build/src/fp8lm --model models/fp8lm-gutenberg-22m \
      --wikitext ../shared/data/wikitext-2-raw/wiki.test.raw --prompts 16 --tokens 128 --json out.json
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys


def prompts_of(path: str, n: int) -> list[str]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line or line.startswith("="):
                continue
            first = re.split(r"(?<=\.) ", line)[0]
            if 60 <= len(first) <= 300:
                out.append(first.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", "."))
            if len(out) == n:
                break
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--wikitext", required=True)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--k", default="2,4,6")
    ap.add_argument("--draft-model", default=None, help="a draft model directory (method 'draft')")
    ap.add_argument("--draft-quantization", default="fp8")
    ap.add_argument("--eagle3", default=None, help="an EAGLE-3 head directory (method 'eagle3')")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--methods", default=None, help="comma-separated subset of ngram, draft, eagle3")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    prompts = prompts_of(args.wikitext, args.prompts)
    methods = {"ngram": lambda k: {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 1,
                                   "prompt_lookup_max": 3}}
    if args.draft_model:
        methods["draft"] = lambda k: {"model": args.draft_model, "num_speculative_tokens": k,
                                      "quantization": args.draft_quantization}
    if args.eagle3:
        methods["eagle3"] = lambda k: {"method": "eagle3", "model": args.eagle3, "num_speculative_tokens": k}
    if args.methods:
        methods = {m: methods[m] for m in args.methods.split(",")}
    rows = []
    for name, config in methods.items():
        for k in (int(x) for x in args.k.split(",")):
            steps = drafted = accepted = tokens = 0
            for p in prompts:
                cmd = [args.bin, "generate", args.model, "--prompt", p, "--temperature", "0", "--ignore-eos",
                       "--max-tokens", str(args.tokens), "--threads", str(args.threads), "--device", args.device, "--json",
                       "--speculative-config", json.dumps(config(k))]
                r = subprocess.run(cmd, capture_output=True, text=True, check=True)
                j = json.loads(r.stdout)
                s = j["speculative"]
                steps += s["verify_steps"]
                drafted += s["drafted_tokens"]
                accepted += s["accepted_tokens"]
                tokens += len(j["token_ids"])
            row = {"method": name, "k": k, "prompts": len(prompts), "tokens": tokens, "verify_steps": steps,
                   "drafted": drafted, "accepted": accepted,
                   "mean_accepted_length": (accepted + steps) / steps if steps else None,
                   "acceptance_rate": accepted / drafted if drafted else None}
            rows.append(row)
            mal = f"{row['mean_accepted_length']:.2f}" if steps else "—"
            rate = f"{row['acceptance_rate']:.3f}" if drafted else "—"
            print(f"{name:6} k={k}  mean accepted length {mal}  acceptance {rate}  "
                  f"({steps} verify steps, {accepted} of {drafted} drafts, {tokens} tokens)", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"model": args.model, "draft_model": args.draft_model, "eagle3": args.eagle3,
                       "device": args.device, "tokens": args.tokens,
                       "prompts": prompts, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
