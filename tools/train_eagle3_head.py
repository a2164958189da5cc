#!/usr/bin/env python3
"""Trains an EAGLE-3 head for the shipped model (issue 42) with the published recipe: the forward
of speculators' Eagle3DraftModel (tools/eagle3_torch.py writes it in plain PyTorch, so that a GPU
machine with torch alone can train; --check compares the two on random weights) and its default
loss, KL divergence to the target's own distribution.

  * features: the target's residual stream entering its low, middle and high layers (vLLM's
    default 2, L/2, L − 3), taken from transformers' hidden states as the target reads the
    training books (the shipped model's training split: its 8 validation books are never read);
  * training-time test: `--ttt-steps` steps a row, each next step fed the head's own hidden state,
    the loss of step s against the target's own distribution at that position (distillation from
    the target's logits over the draft vocabulary), weighted `--ttt-decay`^s;
  * a reduced draft vocabulary: the `--draft-vocab` most frequent target tokens of the training
    text (d2t / t2d), the embedding the target's (frozen), lm_head started from the target's rows.

The head is written in speculators' layout (config.json, model.safetensors with d2t and t2d; no
embed_tokens: it is the target's, which fp8lm then embeds with), which fp8lm reads with --speculative-config '{"method": "eagle3", "model": DIR, ...}'.

  python3 tools/train_eagle3_head.py --device cuda                      # torch, transformers, tokenizers
  python3 -m venv .venv-eagle3 && .venv-eagle3/bin/pip install -r tools/requirements-eagle3.txt
  .venv-eagle3/bin/pip install --no-deps speculators==0.9.0
  .venv-eagle3/bin/python tools/train_eagle3_head.py --check            # against speculators' class
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
from safetensors.torch import load_file
from tokenizers import Tokenizer
from transformers import LlamaConfig, LlamaForCausalLM

from eagle3_torch import Eagle3Head

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


def check() -> None:
    """eagle3_torch.Eagle3Head against speculators' Eagle3DraftModel (the reference others wrote):
    the same random weights, every training-time-test step's logits; and a head it saved, read
    back by speculators, the same logits again. Needs speculators (tools/requirements-eagle3.txt)."""
    import tempfile

    from make_eagle3_fixtures import layer_config
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig

    torch.manual_seed(7)
    tl = layer_config()
    tl._attn_implementation = "eager"
    steps, T, aux, dv = 3, 20, [1, 4, 7], 48
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=tl, draft_vocab_size=dv, eagle_aux_hidden_state_layer_ids=aux,
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3", proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=steps)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=["LlamaForCausalLM"])))
    ref = Eagle3DraftModel(config).eval()
    ours = Eagle3Head(tl.hidden_size, tl.intermediate_size, tl.num_attention_heads, tl.num_key_value_heads,
                      tl.head_dim, tl.vocab_size, dv, aux, tl.rms_norm_eps, 10000.0, tl.max_position_embeddings)
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if p.dim() == 1 else torch.randn_like(p) / p.shape[-1] ** 0.5)
        kept = torch.sort(torch.randperm(tl.vocab_size)[:dv]).values
        ref.d2t.copy_(kept - torch.arange(dv))
        ref.t2d.zero_()
        ref.t2d[kept] = True
        state = ref.state_dict()
        for name, attr in Eagle3Head.TENSORS.items():
            getattr(ours, attr).copy_(state[name])

    hidden = torch.randn(T, len(aux) * tl.hidden_size) * 2.0
    ids = torch.randint(0, tl.vocab_size, (T,))
    positions = torch.arange(1, T + 1)

    def reference(model):
        captured = []
        hook = model.lm_head.register_forward_hook(lambda _m, _i, o: captured.append(o[0].detach().clone()))
        with torch.no_grad():
            model(hidden_states=hidden[None], input_ids=ids[None], document_ids=torch.zeros_like(ids)[None],
                  position_ids=positions[None], ttt_steps=steps)
        hook.remove()
        return captured

    with torch.no_grad():
        mine = ours.step_logits(hidden, ids, positions, steps)
    worst = 0.0
    for s, (a, b) in enumerate(zip(mine, reference(ref))):
        # Rows past T − s read padding tokens and positions: speculators' own and ours alike.
        worst = max(worst, float((a[: T - s] - b[: T - s]).abs().max()))
    with tempfile.TemporaryDirectory() as d:
        ours.save(d, dtype=torch.float32, embedding=True)
        # speculators' own config class reads the config.json, and its model takes every tensor
        # (from_pretrained would also fetch the verifier, which a head names none of here).
        back_config = Eagle3SpeculatorConfig.from_pretrained(d)
        back_config.transformer_layer_config._attn_implementation = "eager"
        back = Eagle3DraftModel(back_config).eval()
        missing, unexpected = back.load_state_dict(load_file(os.path.join(d, "model.safetensors")), strict=False)
        if unexpected or set(missing) - {"verifier_lm_head.weight", "verifier_norm.weight"}:
            raise SystemExit(f"speculators reads the saved head with missing {missing}, unexpected {unexpected}")
        again = max(float((a[: T - s] - b[: T - s]).abs().max())
                    for s, (a, b) in enumerate(zip(mine, reference(back))))
    print(f"eagle3_torch against speculators: max |Δlogit| {worst:.2e}; read back from its save: {again:.2e}")
    if worst > 1e-4 or again > 1e-4:
        raise SystemExit("eagle3_torch.Eagle3Head differs from speculators' Eagle3DraftModel")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=os.path.join(REPO, "models", "fp8lm-gutenberg-22m"))
    ap.add_argument("--corpus", default=os.path.join(REPO, "..", "shared", "data", "corpus", "gutenberg"))
    ap.add_argument("--out", default=os.path.join(REPO, "models", "fp8lm-gutenberg-22m-eagle3"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tokens", type=int, default=4_000_000, help="training tokens (windows × length)")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8, help="windows a step")
    ap.add_argument("--ttt-steps", type=int, default=3)
    ap.add_argument("--ttt-decay", type=float, default=0.8)
    ap.add_argument("--draft-vocab", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true", help="compare the head with speculators' class, and stop")
    ap.add_argument("--tokens-file", default=None,
                    help="the training tokens, saved by --write-tokens (for a machine without the corpus)")
    ap.add_argument("--write-tokens", default=None, metavar="FILE",
                    help="write --tokens-cap training tokens (64 Ki-token pieces spread over the books) and stop")
    ap.add_argument("--tokens-cap", type=int, default=6_000_000)
    ap.add_argument("--max-seconds", type=float, default=0, help="stop training after this long (0: no limit)")
    args = ap.parse_args()
    if args.check:
        check()
        return
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    dev = torch.device(args.device)
    t0 = time.time()

    if args.tokens_file:
        tokens = torch.load(args.tokens_file).long()
    else:
        tokens = training_tokens(args.corpus, Tokenizer.from_file(os.path.join(args.target, "tokenizer.json")))
    if args.write_tokens:
        piece = 1 << 16
        n = min(len(tokens) // piece, args.tokens_cap // piece)
        starts = torch.linspace(0, len(tokens) - piece, n).long().tolist()
        torch.save(torch.cat([tokens[s:s + piece] for s in starts]).to(torch.int16), args.write_tokens)
        print(f"wrote {n * piece:,} of {len(tokens):,} training tokens to {args.write_tokens}")
        return
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

    rope_theta = getattr(tc, "rope_theta", None) or tc.rope_parameters["rope_theta"]
    head = Eagle3Head(tc.hidden_size, tc.intermediate_size, tc.num_attention_heads, tc.num_key_value_heads,
                      tc.head_dim, tc.vocab_size, args.draft_vocab, aux, tc.rms_norm_eps, rope_theta,
                      tc.max_position_embeddings).to(dev)
    with torch.no_grad():
        rows = target.lm_head.weight[kept.to(dev)]
        head.embed_tokens.copy_(target.model.embed_tokens.weight)
        head.verifier_lm_head.copy_(rows)
        head.verifier_norm.copy_(target.model.norm.weight)
        head.lm_head.copy_(rows)
        head.d2t.copy_((kept - torch.arange(args.draft_vocab)).to(dev))
        head.t2d[kept.to(dev)] = True
    features = Features(target, aux)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    steps = max(1, args.tokens // (args.seq_len * args.batch))
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    T = args.seq_len
    positions = torch.arange(1, T, device=dev)
    print(f"{steps} steps of {args.batch} × {T} tokens on {dev}", flush=True)
    head.train()
    for step in range(steps):
        starts = torch.randint(0, len(tokens) - T - 1, (args.batch,))
        windows = torch.stack([tokens[s:s + T] for s in starts.tolist()]).to(dev)
        aux_h, last = features(windows)
        opt.zero_grad(set_to_none=True)
        total, accs = 0.0, [0.0] * args.ttt_steps
        for b in range(args.batch):
            # speculators' alignment (its shift_batch): row j pairs the states at j with the token
            # at j + 1 and learns the target's distribution of the token after it; positions from 1.
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                loss, acc = head.loss(aux_h[b, :-1], windows[b, 1:], positions, last[b, 1:], args.ttt_steps,
                                      args.ttt_decay)
            (loss / args.batch).backward()
            total += float(loss.detach()) / args.batch
            accs = [x + a / args.batch for x, a in zip(accs, acc)]
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        last_step = step == steps - 1 or (args.max_seconds > 0 and time.time() - t0 > args.max_seconds)
        if step % max(1, steps // 40) == 0 or last_step:
            print(f"step {step:5d}/{steps}  loss {total:.3f}  draft = target's argmax by step "
                  f"{' '.join(f'{a:.3f}' for a in accs)}  {time.time() - t0:.0f} s", flush=True)
        if last_step:
            steps = step + 1
            break

    shutil.rmtree(args.out, ignore_errors=True)
    head.save(args.out)
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
