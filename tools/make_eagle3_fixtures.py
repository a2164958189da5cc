#!/usr/bin/env python3
"""Tiny random EAGLE-3 heads in the `speculators` format, and their draft logits from the
reference others wrote: `speculators`' own model class (Eagle3DraftModel, PyPI `speculators`,
vLLM's library), for tests/cpp/test_eagle3_head.cpp.

Each case writes tests/fixtures/eagle3/<case>/:
  config.json, model.safetensors   the head as `save_pretrained` writes it, in BF16 (fc,
                                   layers.0.*, norm, lm_head, d2t, t2d, embed_tokens)
  inputs.safetensors               hidden_states [T, 3·H] (the target's auxiliary hidden states,
                                   float32), input_ids [T + steps − 1] (int64), positions [T]
  logits.safetensors               logits [steps, T, draft_vocab] float32: the reference's
                                   lm_head output at every training-time-test step

and llama_target_speculators/, llama_target_release/: one head for the fixture target
tests/fixtures/models/llama in both layouts, with drafts.json — prompts, the target's next token
(transformers) and the 4 drafts the reference chain makes from the target's own hidden states.

The reference's forward is its training-time test (ttt_steps): step s at row j reads the token
input_ids[j + s] (teacher forcing), its own previous step's hidden state at row j, position
positions[j] + s, and attends to step 0's keys of rows ≤ j and to row j's keys of steps 1 … s —
what an inference-time draft chain that starts at row j computes.

  python3 -m venv .venv-eagle3 && .venv-eagle3/bin/pip install -r tools/requirements-eagle3.txt
  .venv-eagle3/bin/pip install --no-deps speculators==0.9.0
  .venv-eagle3/bin/python tools/make_eagle3_fixtures.py
"""

from __future__ import annotations

import json
import os
import shutil

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig

from speculators.config import SpeculatorsConfig, VerifierConfig
from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
from speculators.proposals.greedy import GreedyTokenProposalConfig

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "eagle3")
STEPS = 3
ROWS = 12

CASES = {
    # The common head: norms as EAGLE-3's Llama-3.1-8B release, residual from the raw fused hidden.
    "llama_basic": dict(norm_before_residual=False, norm_output=False, fc_norm=False),
    # norm_before_residual (the residual is the normed hidden, as several speculators releases).
    "llama_norm_before_residual": dict(norm_before_residual=True, norm_output=False, fc_norm=False),
    # Eagle 3.1's norm_output (the post-norm hidden fed back across steps) and fc_norm.
    "llama_norm_output_fc_norm": dict(norm_before_residual=False, norm_output=True, fc_norm=True),
}


def layer_config() -> LlamaConfig:
    return LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        max_position_embeddings=256,
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
    )


def make_case(name: str, flags: dict, seed: int) -> None:
    torch.manual_seed(seed)
    tl = layer_config()
    tl._attn_implementation = "eager"
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=tl,
        draft_vocab_size=48,
        eagle_aux_hidden_state_layer_ids=[1, 4, 7],
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=STEPS)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=["LlamaForCausalLM"]),
        ),
        **flags,
    )
    model = Eagle3DraftModel(config).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 1:  # norms: around 1, as trained ones are
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
            p.copy_(p.bfloat16().float())  # the values a BF16 checkpoint holds
        # A random subset of the target vocabulary, in order, as EAGLE-3's most frequent tokens:
        # the draft id d stands for the target id d + d2t[d]; t2d marks the target ids kept.
        kept = torch.sort(torch.randperm(tl.vocab_size)[: config.draft_vocab_size]).values
        model.d2t.copy_(kept - torch.arange(config.draft_vocab_size))
        model.t2d.zero_()
        model.t2d[kept] = True
    out = os.path.join(ROOT, name)
    shutil.rmtree(out, ignore_errors=True)
    # BF16 weights as published heads store them (d2t / t2d stay integer and boolean), exactly the
    # values the float32 reference below computes with. save_pretrained also copies speculators'
    # own config.py beside them (the auto_map's class): not ours to ship, removed.
    model.to(torch.bfloat16).save_pretrained(out)
    model.float()
    os.remove(os.path.join(out, "config.py"))

    hidden = torch.randn(1, ROWS, 3 * tl.hidden_size) * 2.0
    input_ids = torch.randint(0, tl.vocab_size, (1, ROWS + STEPS - 1))
    positions = torch.arange(1, ROWS + 1).unsqueeze(0)
    captured = []
    hook = model.lm_head.register_forward_hook(lambda _m, _i, o: captured.append(o.detach().clone()))
    # The reference's steps read input_ids[:, s : s + ROWS] at step s (its teacher forcing shifts
    # the full sequence left by one a step): give it the first ROWS ids and the rest through the
    # shift, by running it on the padded sequence and keeping the first ROWS rows of each step.
    with torch.no_grad():
        model(
            hidden_states=torch.cat([hidden, torch.zeros(1, STEPS - 1, hidden.shape[-1])], dim=1),
            input_ids=input_ids,
            document_ids=torch.zeros_like(input_ids),
            position_ids=torch.cat([positions, positions[:, -1:] + torch.arange(1, STEPS)], dim=1),
            ttt_steps=STEPS,
        )
    hook.remove()
    logits = torch.stack([c[0, :ROWS].float() for c in captured])
    save_file(
        {
            "hidden_states": hidden[0].float().contiguous(),
            "input_ids": input_ids[0].contiguous(),
            "positions": positions[0].contiguous(),
        },
        os.path.join(out, "inputs.safetensors"),
    )
    save_file({"logits": logits.contiguous()}, os.path.join(out, "logits.safetensors"))
    with open(os.path.join(out, "case.json"), "w") as f:
        json.dump({"steps": STEPS, "rows": ROWS, "seed": seed, **flags}, f, indent=1)
    print(name, "logits", tuple(logits.shape))


# A head for the fixture target tests/fixtures/models/llama (2 layers, hidden 128, vocabulary 256),
# and the drafts it makes from the target's own hidden states: what engine/eagle3_drafter.h must
# give (tests/cpp/test_eagle3_drafter.cpp). Written twice: speculators' layout (its embed_tokens
# the target's table, as speculators trains with the verifier's embedding) and the EAGLE release
# layout (midlayer.*, no embedding: the drafter then embeds with the target's table).
TARGET = os.path.join(ROOT, "..", "models", "llama")
TARGET_AUX = [0, 1, 1]  # the target has two layers: the stream entering layer 0 (embeddings) and 1 twice
TARGET_DRAFTS = 4
TARGET_PROMPTS = 12


def target_head_config(target) -> Eagle3SpeculatorConfig:
    tc = target.config
    tl = LlamaConfig(
        vocab_size=tc.vocab_size,
        hidden_size=tc.hidden_size,
        intermediate_size=192,
        num_hidden_layers=1,
        num_attention_heads=tc.num_attention_heads,
        num_key_value_heads=tc.num_key_value_heads,
        head_dim=tc.head_dim,
        rms_norm_eps=tc.rms_norm_eps,
        rope_theta=10000.0,
        max_position_embeddings=tc.max_position_embeddings,
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
    )
    tl._attn_implementation = "eager"
    return Eagle3SpeculatorConfig(
        transformer_layer_config=tl,
        draft_vocab_size=64,
        eagle_aux_hidden_state_layer_ids=TARGET_AUX,
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=TARGET_DRAFTS)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=["LlamaForCausalLM"]),
        ),
        norm_before_residual=False,
        norm_output=False,
        fc_norm=False,
    )


def chain(model, aux: torch.Tensor, ids: list[int], k: int):
    """Greedy drafts from the last row as an inference chain makes them: the reference's
    training-time test with the drafts themselves as its teacher-forced tokens, one step more a
    round. aux: [n, 3·H] the target's states at positions 0 … n − 1; ids: the tokens at 1 … n.
    Returns the drafts (target ids) and each step's gap between its two best logits over the
    largest |logit| (how far the argmax is from a tie)."""
    n = aux.shape[0]
    drafts, gaps = [], []
    for s in range(k):
        steps = s + 1
        input_ids = torch.tensor([ids + drafts])
        captured = []
        hook = model.lm_head.register_forward_hook(lambda _m, _i, o: captured.append(o.detach().clone()))
        positions = torch.arange(1, n + 1).unsqueeze(0)
        with torch.no_grad():
            model(
                hidden_states=torch.cat([aux, torch.zeros(steps - 1, aux.shape[-1])]).unsqueeze(0),
                input_ids=input_ids,
                document_ids=torch.zeros_like(input_ids),
                position_ids=torch.cat([positions, positions[:, -1:] + torch.arange(1, steps)], dim=1),
                ttt_steps=steps,
            )
        hook.remove()
        row = captured[s][0, n - 1].float()
        top = torch.topk(row, 2).values
        gaps.append(float((top[0] - top[1]) / row.abs().max()))
        drafts.append(int(row.argmax()) + int(model.d2t[int(row.argmax())]))
    return drafts, gaps


def make_target_case(seed: int) -> None:
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    target = LlamaForCausalLM.from_pretrained(TARGET, dtype=torch.float32).eval()
    config = target_head_config(target)
    model = Eagle3DraftModel(config).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.startswith("embed_tokens"):
                p.copy_(target.model.embed_tokens.weight)
            elif p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
            p.copy_(p.bfloat16().float())
        vocab, dv = config.transformer_layer_config.vocab_size, config.draft_vocab_size
        kept = torch.sort(torch.randperm(vocab)[:dv]).values
        model.d2t.copy_(kept - torch.arange(dv))
        model.t2d.zero_()
        model.t2d[kept] = True

    # Prompts whose every draft is clear of a tie (2 % of the largest logit: the served model's
    # BF16 rounding moves logits by ~0.05 %), so that the drafter must give exactly these.
    cases = []
    g = torch.Generator().manual_seed(seed + 1)
    while len(cases) < TARGET_PROMPTS:
        n = int(torch.randint(3, 40, (1,), generator=g))
        prompt = torch.randint(0, vocab, (n,), generator=g).tolist()
        with torch.no_grad():
            out = target(torch.tensor([prompt]), output_hidden_states=True)
        logits = out.logits[0, -1]
        top = torch.topk(logits, 2).values
        if float((top[0] - top[1]) / logits.abs().max()) < 0.02:
            continue
        nxt = int(logits.argmax())
        aux = torch.cat([out.hidden_states[layer][0] for layer in TARGET_AUX], dim=-1)
        drafts, gaps = chain(model, aux, prompt[1:] + [nxt], TARGET_DRAFTS)
        if min(gaps) < 0.02:
            continue
        cases.append({"prompt": prompt, "next": nxt, "drafts": drafts, "gaps": [round(x, 4) for x in gaps]})

    spec_dir = os.path.join(ROOT, "llama_target_speculators")
    shutil.rmtree(spec_dir, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(spec_dir)
    os.remove(os.path.join(spec_dir, "config.py"))
    # The release layout: a flat Llama config, the layer's tensors as midlayer.*, no embedding.
    rel_dir = os.path.join(ROOT, "llama_target_release")
    shutil.rmtree(rel_dir, ignore_errors=True)
    os.makedirs(rel_dir)
    tensors = {}
    for name, t in model.state_dict().items():
        if name.startswith("embed_tokens") or name.startswith("verifier"):
            continue
        tensors[name.replace("layers.0.", "midlayer.")] = t.contiguous()
    save_file(tensors, os.path.join(rel_dir, "model.safetensors"))
    tl = config.transformer_layer_config.to_dict()
    flat = {k: tl[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                               "head_dim", "rms_norm_eps", "max_position_embeddings", "vocab_size",
                               "hidden_act", "attention_bias", "mlp_bias", "tie_word_embeddings")}
    flat.update({"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
                 "rope_theta": 10000.0, "torch_dtype": "bfloat16", "draft_vocab_size": config.draft_vocab_size,
                 "eagle_aux_hidden_state_layer_ids": TARGET_AUX})
    with open(os.path.join(rel_dir, "config.json"), "w") as f:
        json.dump(flat, f, indent=1)
    for d in (spec_dir, rel_dir):
        with open(os.path.join(d, "drafts.json"), "w") as f:
            json.dump({"seed": seed, "aux_layers": TARGET_AUX, "k": TARGET_DRAFTS, "cases": cases}, f, indent=1)
    print("llama_target", len(cases), "prompts, drafts", [c["drafts"] for c in cases[:3]], "...")


def main() -> None:
    os.makedirs(ROOT, exist_ok=True)
    for i, (name, flags) in enumerate(CASES.items()):
        make_case(name, flags, 1000 + i)
    make_target_case(2000)


if __name__ == "__main__":
    main()
