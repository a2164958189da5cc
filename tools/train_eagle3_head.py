#!/usr/bin/env python3
"""Trains an EAGLE-3 head for the shipped model (issue 42) with the published recipe, through the
reference others wrote: `speculators`' Eagle3DraftModel and its training loss.

  * features: the target's residual stream entering its low, middle and high layers (vLLM's
    default 2, L/2, L − 3), taken from transformers' hidden states as the target reads the
    training books (the shipped model's training split: its 8 validation books are never read);
  * training-time test: `--ttt-steps` steps a row, each next step fed the head's own hidden state
    (speculators' forward), the loss of step s against the target's own distribution at that
    position (distillation from the target's logits over the draft vocabulary), decayed by
    `--ttt-decay` a step;
  * a reduced draft vocabulary: the `--draft-vocab` most frequent target tokens of the training
    text (d2t / t2d), the embedding the target's (frozen), lm_head started from the target's rows.

The head is written in speculators' layout (config.json, model.safetensors with embed_tokens,
d2t, t2d), which fp8lm reads with --speculative-config '{"method": "eagle3", "model": DIR, ...}'.

  python3 -m venv .venv-eagle3 && .venv-eagle3/bin/pip install -r tools/requirements-eagle3.txt
  .venv-eagle3/bin/pip install --no-deps speculators==0.9.0
  .venv-eagle3/bin/python tools/train_eagle3_head.py --device cuda      # minutes on a GPU
  .venv-eagle3/bin/python tools/train_eagle3_head.py --tokens 400000     # a smaller run on the CPU
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
from tokenizers import Tokenizer
from transformers import LlamaConfig, LlamaForCausalLM

from speculators.config import SpeculatorsConfig, VerifierConfig
from speculators.losses.utils import resolve_loss_config
from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
from speculators.proposals.greedy import GreedyTokenProposalConfig

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..")
# The shipped model's validation books (models/fp8lm-gutenberg-22m/README.md): held out here too.
VALIDATION_BOOKS = {
    "baum__the_lost_princess_of_oz.txt", "doyle__the_hound_of_the_baskervilles.txt",
    "hardy__far_from_the_madding_crowd.txt", "hardy__the_mayor_of_casterbridge.txt",
    "montgomery__the_story_girl.txt", "potter__the_tale_of_mr_tod.txt",
    "potter__the_tale_of_mrs_tiggy_winkle.txt", "twain__the_prince_and_the_pauper.txt",
}


def training_tokens(corpus: str, tokenizer: Tokenizer) -> torch.Tensor:
    """The training books, each after <|endoftext|>, as the shipped model was trained."""
    eot = tokenizer.token_to_id("<|endoftext|>")
    ids: list[int] = []
    for name in sorted(os.listdir(corpus)):
        if not name.endswith(".txt") or name in VALIDATION_BOOKS:
            continue
        with open(os.path.join(corpus, name), encoding="utf-8") as f:
            ids.append(eot)
            ids.extend(tokenizer.encode(f.read(), add_special_tokens=False).ids)
    return torch.tensor(ids, dtype=torch.long)


def head_config(target: LlamaConfig, draft_vocab: int, aux: list[int], ttt_steps: int) -> Eagle3SpeculatorConfig:
    layer = LlamaConfig(
        vocab_size=target.vocab_size,
        hidden_size=target.hidden_size,
        intermediate_size=target.intermediate_size,
        num_hidden_layers=1,
        num_attention_heads=target.num_attention_heads,
        num_key_value_heads=target.num_key_value_heads,
        head_dim=target.head_dim,
        rms_norm_eps=target.rms_norm_eps,
        rope_theta=getattr(target, "rope_theta", None) or target.rope_parameters["rope_theta"],
        max_position_embeddings=target.max_position_embeddings,
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
    )
    layer._attn_implementation = "eager"
    return Eagle3SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=draft_vocab,
        eagle_aux_hidden_state_layer_ids=aux,
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=ttt_steps)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=["LlamaForCausalLM"]),
        ),
        norm_before_residual=False,
        norm_output=False,
        fc_norm=False,
    )


class Features:
    """The target's residual streams entering the aux layers, and its last layer's output before
    the final norm (what its logits are made of), for a batch of windows."""

    def __init__(self, target: LlamaForCausalLM, aux: list[int]):
        self.target, self.aux = target, aux
        self.last = None
        target.model.layers[-1].register_forward_hook(self._hook)

    def _hook(self, _module, _inputs, output):
        self.last = output[0] if isinstance(output, tuple) else output

    @torch.no_grad()
    def __call__(self, windows: torch.Tensor):
        out = self.target(windows, output_hidden_states=True)
        aux = torch.cat([out.hidden_states[i] for i in self.aux], dim=-1)
        return aux.float(), self.last.float()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=os.path.join(REPO, "models", "fp8lm-gutenberg-22m"))
    ap.add_argument("--corpus", default=os.path.join(REPO, "..", "shared", "data", "corpus", "gutenberg"))
    ap.add_argument("--out", default=os.path.join(REPO, "models", "fp8lm-gutenberg-22m-eagle3"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tokens", type=int, default=4_000_000, help="training tokens (windows × length)")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8, help="windows a step, packed as documents of one row")
    ap.add_argument("--ttt-steps", type=int, default=3)
    ap.add_argument("--ttt-decay", type=float, default=0.8)
    ap.add_argument("--draft-vocab", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    dev = torch.device(args.device)
    t0 = time.time()

    tokenizer = Tokenizer.from_file(os.path.join(args.target, "tokenizer.json"))
    tokens = training_tokens(args.corpus, tokenizer)
    target = LlamaForCausalLM.from_pretrained(args.target, dtype=torch.float32).to(dev).eval()
    tc = target.config
    L = tc.num_hidden_layers
    aux = [2, L // 2, L - 3]
    # The draft vocabulary: the most frequent tokens of the training text, in id order.
    counts = torch.bincount(tokens, minlength=tc.vocab_size)
    kept = torch.sort(torch.topk(counts, args.draft_vocab).indices).values
    coverage = float(counts[kept].sum()) / float(counts.sum())
    print(f"{len(tokens):,} training tokens; draft vocabulary {args.draft_vocab} covers {coverage:.1%} of them; "
          f"aux layers {aux}", flush=True)

    config = head_config(tc, args.draft_vocab, aux, args.ttt_steps)
    head = Eagle3DraftModel(config).to(dev)
    with torch.no_grad():
        head.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
        head.embed_tokens.weight.requires_grad_(False)
        rows = target.lm_head.weight[kept.to(dev)]
        head.verifier_lm_head.weight.copy_(rows)
        head.verifier_norm.weight.copy_(target.model.norm.weight)
        head.lm_head.weight.copy_(rows)
        head.d2t.copy_((kept - torch.arange(args.draft_vocab)).to(dev))
        head.t2d.zero_()
        head.t2d[kept.to(dev)] = True
    features = Features(target, aux)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    steps = max(1, args.tokens // (args.seq_len * args.batch))
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    T = args.seq_len
    # KL divergence to the target's distribution, speculators' default loss, in its eager form
    # (the fused one needs Triton on a GPU).
    loss_config = resolve_loss_config("kl_div", "eager")
    print(f"{steps} steps of {args.batch} × {T} tokens on {dev}", flush=True)
    head.train()
    for step in range(steps):
        starts = torch.randint(0, len(tokens) - T - 1, (args.batch,))
        windows = torch.stack([tokens[s:s + T] for s in starts.tolist()]).to(dev)
        aux_h, last = features(windows)
        # speculators' alignment (its shift_batch): row j pairs the states at j with the token at
        # j + 1 and learns the target's distribution of the token after it; positions start at 1.
        input_ids = windows[:, 1:].reshape(1, -1)
        hidden = aux_h[:, :-1].reshape(1, -1, aux_h.shape[-1])
        verifier_last = last[:, 1:].reshape(1, -1, last.shape[-1])
        doc = torch.arange(args.batch, device=dev).repeat_interleave(T - 1).unsqueeze(0)
        pos = torch.arange(1, T, device=dev).repeat(args.batch).unsqueeze(0)
        _, loss, metrics = head(hidden_states=hidden, input_ids=input_ids, document_ids=doc, position_ids=pos,
                                verifier_last_hidden_states=verifier_last, ttt_steps=args.ttt_steps,
                                ttt_step_loss_decay=args.ttt_decay, loss_config=loss_config)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        if step % max(1, steps // 40) == 0 or step == steps - 1:
            # speculators' metrics: full_acc_s = rows whose step-s draft is the target's argmax.
            acc = " ".join(f"{float(metrics[f'full_acc_{s}_sum']) / max(float(metrics[f'full_acc_{s}_total']), 1):.3f}"
                           for s in range(args.ttt_steps))
            print(f"step {step:5d}/{steps}  loss {float(loss):.3f}  draft accuracy by step {acc}  "
                  f"{time.time() - t0:.0f} s", flush=True)

    shutil.rmtree(args.out, ignore_errors=True)
    head.eval().to(torch.bfloat16).save_pretrained(args.out)
    os.remove(os.path.join(args.out, "config.py"))  # speculators' own class file: not ours to ship
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump({"target": os.path.basename(os.path.normpath(args.target)), "aux_layers": aux,
                   "draft_vocab": args.draft_vocab, "draft_vocab_coverage": round(coverage, 4),
                   "tokens": steps * args.batch * T, "seq_len": T, "batch": args.batch, "steps": steps,
                   "ttt_steps": args.ttt_steps, "ttt_decay": args.ttt_decay, "lr": args.lr, "seed": args.seed,
                   "device": str(dev), "seconds": round(time.time() - t0, 1),
                   "held_out_books": sorted(VALIDATION_BOOKS)}, f, indent=1)
    print(f"wrote {args.out} in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
