#!/usr/bin/env python3
"""Trains the shipped model's draft model (issue 42): a small Llama of the same tokenizer, at most
an eighth of the target's parameters, distilled from the target on its training books, for
`--speculative-config '{"model": DIR, "num_speculative_tokens": k}'`.

  * architecture: LlamaForCausalLM (transformers), the target's vocabulary, tokenizer and context,
    tied embeddings; the sizes in DRAFT below (2.69 M parameters against the target's 22.03 M);
  * data: the target's training books (its 8 validation books are never read), from the tokens
    file tools/train_eagle3_head.py --write-tokens writes, so that a GPU machine without the
    corpus trains from it;
  * loss: the KL divergence from the target's next-token distribution at every position (what a
    greedy verify accepts is the target's argmax, so the draft learns the target, not the text),
    plus `--ce-weight` of the ordinary next-token cross-entropy;
  * written as a Hugging Face checkpoint (config.json, BF16 model.safetensors, the target's
    tokenizer files and generation config), which transformers' Auto classes load.

  python3 tools/train_eagle3_head.py --write-tokens .eagle3/train_tokens.pt   # once, where the corpus is
  python3 tools/train_draft_model.py --device cuda --tokens-file .eagle3/train_tokens.pt
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import time

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..")

# The draft's sizes: head_dim and the GQA ratio as the target's family, everything smaller.
DRAFT = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=3, num_attention_heads=2,
             num_key_value_heads=1, head_dim=64)
# Files of the target the draft shares: it speaks the same tokens.
SHARED_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"]


def draft_config(target: LlamaConfig) -> LlamaConfig:
    rope_theta = getattr(target, "rope_theta", None) or target.rope_parameters["rope_theta"]
    return LlamaConfig(vocab_size=target.vocab_size, max_position_embeddings=target.max_position_embeddings,
                       rms_norm_eps=target.rms_norm_eps, rope_theta=rope_theta, tie_word_embeddings=True,
                       bos_token_id=target.bos_token_id, eos_token_id=target.eos_token_id,
                       pad_token_id=target.pad_token_id, hidden_act="silu", attention_bias=False, mlp_bias=False,
                       **DRAFT)


def parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def evaluate(draft, target, tokens: torch.Tensor, seq_len: int, windows: int, dev) -> dict:
    """On `windows` windows spread over `tokens` (pieces no training step sampled): how often the
    draft's argmax equals the target's (a greedy verify keeping one draft), and the KL divergence."""
    agree = kl = n = 0.0
    starts = torch.linspace(0, len(tokens) - seq_len - 1, windows).long().tolist()
    for s in starts:
        w = tokens[s:s + seq_len].unsqueeze(0).to(dev)
        t = target(w).logits.float()
        d = draft(w).logits.float()
        agree += float((t.argmax(-1) == d.argmax(-1)).float().sum())
        kl += float(F.kl_div(F.log_softmax(d, -1), F.log_softmax(t, -1), log_target=True, reduction="sum"))
        n += w.numel()
    return {"argmax_agreement": agree / n, "kl": kl / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=os.path.join(REPO, "models", "fp8lm-gutenberg-22m"))
    ap.add_argument("--tokens-file", required=True, help="training tokens (tools/train_eagle3_head.py --write-tokens)")
    ap.add_argument("--out", default=os.path.join(REPO, "models", "fp8lm-gutenberg-draft-3m"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tokens", type=int, default=12_000_000, help="training tokens (windows × length)")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=16, help="windows a step")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--ce-weight", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=0, help="stop training after this long (0: no limit)")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    dev = torch.device(args.device)
    t0 = time.time()

    tokens = torch.load(args.tokens_file).long() & 0xFFFF  # stored as int16
    # The last 2 % of the file for the agreement numbers: training books, but pieces no step samples.
    split = int(len(tokens) * 0.98)
    train, held = tokens[:split], tokens[split:]
    target = LlamaForCausalLM.from_pretrained(args.target, dtype=torch.float32).to(dev).eval()
    cfg = draft_config(target.config)
    draft = LlamaForCausalLM(cfg).to(dev)
    ratio = parameters(target) / parameters(draft)
    print(f"{len(train):,} training tokens; draft {parameters(draft):,} parameters, 1/{ratio:.2f} of the target's "
          f"{parameters(target):,}", flush=True)
    if ratio < 8:
        raise SystemExit(f"the draft is larger than an eighth of the target (1/{ratio:.2f}): shrink DRAFT")

    opt = torch.optim.AdamW(draft.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    steps = max(1, args.tokens // (args.seq_len * args.batch))
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    T = args.seq_len
    print(f"{steps} steps of {args.batch} × {T} tokens on {dev}", flush=True)
    draft.train()
    for step in range(steps):
        starts = torch.randint(0, len(train) - T - 1, (args.batch,))
        windows = torch.stack([train[s:s + T + 1] for s in starts.tolist()]).to(dev)
        x, y = windows[:, :-1], windows[:, 1:]
        with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            t_logp = F.log_softmax(target(x).logits.float(), -1)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            logits = draft(x).logits.float()
        d_logp = F.log_softmax(logits, -1)
        kl = F.kl_div(d_logp.flatten(0, 1), t_logp.flatten(0, 1), log_target=True, reduction="batchmean")
        ce = F.nll_loss(d_logp.flatten(0, 1), y.flatten())
        loss = kl + args.ce_weight * ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        sched.step()
        last_step = step == steps - 1 or (args.max_seconds > 0 and time.time() - t0 > args.max_seconds)
        if step % max(1, steps // 40) == 0 or last_step:
            agree = float((d_logp.argmax(-1) == t_logp.argmax(-1)).float().mean())
            print(f"step {step:5d}/{steps}  kl {float(kl):.3f}  ce {float(ce):.3f}  argmax = target's {agree:.3f}  "
                  f"{time.time() - t0:.0f} s", flush=True)
        if last_step:
            steps = step + 1
            break

    draft.eval()
    held_out = evaluate(draft, target, held, min(T, 512), 16, dev)
    print(f"unsampled pieces: argmax = target's {held_out['argmax_agreement']:.3f}, kl {held_out['kl']:.3f}", flush=True)
    shutil.rmtree(args.out, ignore_errors=True)
    draft.to(torch.bfloat16).save_pretrained(args.out, safe_serialization=True)
    for name in SHARED_FILES:
        if os.path.exists(os.path.join(args.target, name)):
            shutil.copy(os.path.join(args.target, name), os.path.join(args.out, name))
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump({"target": os.path.basename(os.path.normpath(args.target)), "parameters": parameters(draft),
                   "target_parameters": parameters(target), "tokens": steps * args.batch * T, "seq_len": T,
                   "batch": args.batch, "steps": steps, "lr": args.lr, "ce_weight": args.ce_weight,
                   "seed": args.seed, "device": str(dev), "seconds": round(time.time() - t0, 1),
                   "unsampled_pieces": held_out}, f, indent=1)
    print(f"wrote {args.out} in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
