#!/usr/bin/env python3
"""Reference distributions for the sampler (src/engine/sampler.*).

transformers' logits processors (RepetitionPenalty, Temperature, TopK, TopP,
MinP; min_tokens_to_keep=1) and the OpenAI/vLLM presence/frequency formula in
torch, applied in vLLM's order, on logits that the C++ test regenerates from a
tiny integer recipe (so the fixture stays small JSON, even for a 151936-token
vocabulary). Writes tests/fixtures/sampler/cases.json.

Run:  .venv-tools/bin/python tools/make_sampler_fixtures.py
"""
import json
import math
import pathlib
import random

import numpy as np
import torch
import transformers
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/sampler/cases.json"
M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def splitmix(seed, n):
    """splitmix64 of states seed + (i+1)*GOLDEN, i < n (the C++ test does the same)."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def make_logits(spec):
    """Logits from a recipe: the sum of four 16-bit uniforms (near-normal, exact
    in float32) times a float32 scale; coarse rounding for ties; -inf at some ids."""
    n = spec["vocab"]
    z = splitmix(spec["seed"], 2 * n)
    a, b = z[0::2], z[1::2]
    s = np.zeros(n, dtype=np.int64)
    for shift in (0, 16, 32, 48):
        s += ((a >> np.uint64(shift)) & np.uint64(0xFFFF)).astype(np.int64)
    s -= 131072
    if spec["tie_shift"]:
        s = (s >> spec["tie_shift"]) << spec["tie_shift"]
    logits = s.astype(np.float32) * np.float32(spec["scale"])
    if spec["neg_inf_every"]:
        logits[(b % np.uint64(spec["neg_inf_every"])) == 0] = -np.inf
    top = logits[np.isfinite(logits)].max()
    for i in spec["copy_max_to"]:
        logits[i] = top
    return torch.from_numpy(logits)


def f32(x):
    """The float32 value of x, as a Python float: both sides then use the same parameter."""
    return float(np.float32(x))


def reference(logits, case):
    scores = logits.clone().unsqueeze(0)
    prompt, output = case["prompt"], case["output"]
    if case["repetition_penalty"] != 1.0 and (prompt or output):
        ids = torch.tensor([prompt + output], dtype=torch.long)
        scores = RepetitionPenaltyLogitsProcessor(case["repetition_penalty"])(ids, scores)
    if output and (case["presence_penalty"] or case["frequency_penalty"]):
        counts = torch.zeros_like(scores)
        for t in output:
            counts[0, t] += 1
        scores = scores - case["frequency_penalty"] * counts
        scores = scores - case["presence_penalty"] * (counts > 0).float()
    margins, tie_values = [], []
    scores = TemperatureLogitsWarper(case["temperature"])(None, scores)
    if case["top_k"] > 0:
        scores = TopKLogitsWarper(case["top_k"])(None, scores)
    if case["top_p"] < 1.0:
        margins.append(top_p_margin(scores, case["top_p"]))
        before = scores
        scores = TopPLogitsWarper(case["top_p"])(None, scores)
        tie_values = top_p_tie_split(before, scores, case["top_p"])
    if case["min_p"] > 0.0:
        probs = torch.softmax(scores, dim=-1)
        floor = case["min_p"] * probs.max()
        finite = torch.isfinite(scores)
        margins.append(float(((probs - floor).abs() / floor)[finite].min()))
        scores = MinPLogitsWarper(case["min_p"])(None, scores)
    return scores[0], margins, tie_values


def top_p_tie_split(before, after, top_p):
    """torch.sort is not stable on CPU, so when the top-p cut falls inside a
    group of equal logits, which of them HF keeps is arbitrary. fp8lm's rule is
    a stable sort (lower ids removed first). Returns the ids of the tie groups
    where the two differ (empty when they agree)."""
    order = torch.sort(before, stable=True).indices[0]
    cum = before[0, order].softmax(dim=-1).cumsum(dim=-1)
    remove = cum <= (1 - top_p)
    remove[-1] = False
    stable_kept = torch.ones_like(remove)
    stable_kept[order] = ~remove
    differ = stable_kept != torch.isfinite(after[0])
    if not bool(differ.any()):
        return []
    return torch.nonzero(torch.isin(before[0], before[0, differ])).flatten().tolist()


def top_p_margin(scores, top_p):
    """How far the cut is from flipping: the smallest distance between an
    ascending cumulative probability and 1 - top_p."""
    cum = torch.sort(scores, stable=True).values.softmax(dim=-1).cumsum(dim=-1)[0, :-1]
    return float((cum - (1 - top_p)).abs().min()) if cum.numel() else 1.0


def finite_or_none(x):
    """JSON has no -inf: None stands for it."""
    return float(x) if math.isfinite(float(x)) else None


def main():
    rng = random.Random(20240601)
    logit_specs = [
        {"seed": 1, "vocab": 1000, "scale": 0, "sigma": 2.0, "tie_shift": 0, "neg_inf_every": 0, "copy_max_to": []},
        {"seed": 2, "vocab": 1000, "scale": 0, "sigma": 3.0, "tie_shift": 13, "neg_inf_every": 7, "copy_max_to": [3, 500]},
        {"seed": 3, "vocab": 1000, "scale": 0, "sigma": 8.0, "tie_shift": 0, "neg_inf_every": 0, "copy_max_to": []},
        {"seed": 4, "vocab": 151936, "scale": 0, "sigma": 3.0, "tie_shift": 0, "neg_inf_every": 50, "copy_max_to": []},
        {"seed": 5, "vocab": 151936, "scale": 0, "sigma": 4.0, "tie_shift": 9, "neg_inf_every": 0, "copy_max_to": [7, 151935]},
    ]
    std_of_sum = 65536 * math.sqrt(4 / 12)
    for spec in logit_specs:
        spec["scale"] = f32(spec.pop("sigma") / std_of_sum)
    logit_sets = [make_logits(s) for s in logit_specs]

    temps = [1.0, 0.7, 1.5, 0.3]
    top_ks = [0, 1, 5, 50, 400]
    top_ps = [1.0, 0.9, 0.5, 0.95, 0.3]
    min_ps = [0.0, 0.05, 0.2, 0.01]
    reps = [1.0, 1.3, 0.8]
    pres_freq = [(0.0, 0.0), (0.5, 0.3), (-0.4, 1.2), (1.5, 0.0)]

    cases, skipped = [], 0
    for li, (spec, logits) in enumerate(zip(logit_specs, logit_sets)):
        vocab = spec["vocab"]
        want = 30 if vocab == 1000 else 16
        made = 0
        while made < want:
            pres, freq = rng.choice(pres_freq)
            case = {
                "logits": li,
                "temperature": f32(rng.choice(temps)),
                "top_k": rng.choice(top_ks),
                "top_p": f32(rng.choice(top_ps)),
                "min_p": f32(rng.choice(min_ps)),
                "repetition_penalty": f32(rng.choice(reps)),
                "presence_penalty": f32(pres),
                "frequency_penalty": f32(freq),
                # The most likely ids get penalized too, so penalties move the head.
                "prompt": [rng.randrange(vocab) for _ in range(20)] + [int(i) for i in torch.topk(logits, 3).indices],
                "output": [rng.randrange(vocab) for _ in range(12)] + [int(torch.argmax(logits))] * rng.randrange(1, 4),
            }
            scores, margins, tie_values = reference(logits, case)
            if any(m < 2e-5 for m in margins):
                skipped += 1  # too close to a boundary for float rounding to agree
                continue
            probs = torch.softmax(scores, dim=-1)
            kept = torch.nonzero(torch.isfinite(scores)).flatten().tolist()
            case["kept_count"] = len(kept)
            if tie_values:
                # Only the count and the tokens outside the split tie group
                # are comparable (the group's members all have one probability).
                case["top_p_tie_split"] = True
                group = set(tie_values)
                kept = [k for k in kept if k not in group]
            else:
                case["kept_id_sum"] = sum(kept)
                case["kept_id_sq_sum"] = sum(k * k for k in kept)
            order = sorted(kept, key=lambda k: -float(probs[k]))
            probe = order if len(order) <= 96 else order[:48] + rng.sample(order[48:], 48)
            case["probes"] = [[k, float(probs[k])] for k in sorted(probe)]
            cases.append(case)
            made += 1

    logprobs = []
    for li, logits in enumerate(logit_sets):
        lp = torch.log_softmax(logits.double(), dim=-1)
        top = torch.topk(logits, 5)
        logprobs.append({"logits": li, "top": [[int(i), float(lp[i])] for i in top.indices],
                         "at": [[i, finite_or_none(lp[i])] for i in (0, 17, logits.numel() - 1)]})

    OUT.parent.mkdir(parents=True, exist_ok=True)
    doc = {"generator": "tools/make_sampler_fixtures.py", "torch": torch.__version__,
           "transformers": transformers.__version__, "logit_sets": logit_specs,
           "cases": cases, "logprobs": logprobs}
    OUT.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"{len(cases)} cases ({skipped} skipped near a boundary) -> {OUT}")


if __name__ == "__main__":
    main()
