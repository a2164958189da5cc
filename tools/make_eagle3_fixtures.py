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


def main() -> None:
    os.makedirs(ROOT, exist_ok=True)
    for i, (name, flags) in enumerate(CASES.items()):
        make_case(name, flags, 1000 + i)


if __name__ == "__main__":
    main()
