"""An EAGLE-3 head in plain PyTorch for tools/train_eagle3_head.py: the forward of speculators'
Eagle3DraftModel (PyPI `speculators`, vLLM's library) at training time — one Llama decoder layer
over [norm(embedding), norm(fc(aux))], training-time test (step s of row j attends to step 0's
keys of rows ≤ j and to row j's own keys of steps 1 … s, fed its previous hidden state and the
token s positions on) — written out so that training needs only torch (a GPU machine's image has
no speculators). `python3 tools/train_eagle3_head.py --check` compares it with speculators' class,
logits of every step, on random weights, and reads a saved head back through speculators.

Saved in speculators' layout (config.json + model.safetensors: fc, layers.0.*, norm, lm_head,
d2t, t2d; embed_tokens on request), which fp8lm reads (--speculative-config '{"method": "eagle3", ...}').
"""

from __future__ import annotations

import json
import math
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """x: [T, heads, d], rotate-half layout; positions: [T]."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = positions.float()[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Eagle3Head(torch.nn.Module):
    def __init__(self, hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int, vocab: int,
                 draft_vocab: int, aux: list[int], eps: float, theta: float, max_positions: int):
        super().__init__()
        self.hidden, self.heads, self.kv_heads, self.head_dim = hidden, heads, kv_heads, head_dim
        self.vocab, self.draft_vocab, self.aux = vocab, draft_vocab, list(aux)
        self.eps, self.theta, self.max_positions, self.intermediate = eps, theta, max_positions, intermediate
        P = torch.nn.Parameter
        H, q, kv = hidden, heads * head_dim, kv_heads * head_dim
        self.fc = P(torch.empty(H, len(aux) * H))
        self.input_layernorm, self.hidden_norm = P(torch.ones(H)), P(torch.ones(H))
        self.q_proj, self.k_proj, self.v_proj = P(torch.empty(q, 2 * H)), P(torch.empty(kv, 2 * H)), P(torch.empty(kv, 2 * H))
        self.o_proj = P(torch.empty(H, q))
        self.post_attention_layernorm = P(torch.ones(H))
        self.gate_proj, self.up_proj = P(torch.empty(intermediate, H)), P(torch.empty(intermediate, H))
        self.down_proj = P(torch.empty(H, intermediate))
        self.norm = P(torch.ones(H))
        self.lm_head = P(torch.empty(draft_vocab, H))
        # Frozen: the target's embedding, and its final norm and lm_head rows of the draft vocabulary
        # (the targets of the distillation).
        self.register_buffer("embed_tokens", torch.empty(vocab, H))
        self.register_buffer("verifier_norm", torch.ones(H))
        self.register_buffer("verifier_lm_head", torch.empty(draft_vocab, H))
        self.register_buffer("d2t", torch.zeros(draft_vocab, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(vocab, dtype=torch.bool))
        for w in (self.fc, self.q_proj, self.k_proj, self.v_proj, self.o_proj, self.gate_proj, self.up_proj,
                  self.down_proj, self.lm_head):
            torch.nn.init.normal_(w, std=1.0 / math.sqrt(w.shape[1]))

    # ---- the layer names of speculators' checkpoints
    TENSORS = {
        "fc.weight": "fc", "layers.0.input_layernorm.weight": "input_layernorm",
        "layers.0.hidden_norm.weight": "hidden_norm", "layers.0.self_attn.q_proj.weight": "q_proj",
        "layers.0.self_attn.k_proj.weight": "k_proj", "layers.0.self_attn.v_proj.weight": "v_proj",
        "layers.0.self_attn.o_proj.weight": "o_proj",
        "layers.0.post_attention_layernorm.weight": "post_attention_layernorm",
        "layers.0.mlp.gate_proj.weight": "gate_proj", "layers.0.mlp.up_proj.weight": "up_proj",
        "layers.0.mlp.down_proj.weight": "down_proj", "norm.weight": "norm", "lm_head.weight": "lm_head",
        "embed_tokens.weight": "embed_tokens", "d2t": "d2t", "t2d": "t2d",
    }

    def step_logits(self, aux: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor, steps: int):
        """Training-time test over one window: aux [T, n·H] (the target's states at 0 … T − 1),
        ids [T] (the tokens at 1 … T), positions [T] (1 … T). Returns each step's logits [T, Vd]:
        step s at row j read the token at j + 1 + s (teacher forcing; 0 past the window)."""
        T, H = aux.shape[0], self.hidden
        nh, nkv, d = self.heads, self.kv_heads, self.head_dim
        h = aux @ self.fc.t()
        keys, values, out = [], [], []
        causal = torch.ones(T, T, dtype=torch.bool, device=aux.device).tril()
        for s in range(steps):
            ids_s = torch.cat([ids[s:], ids.new_zeros(s)])
            e = rms_norm(F.embedding(ids_s, self.embed_tokens), self.input_layernorm, self.eps)
            hn = rms_norm(h, self.hidden_norm, self.eps)
            x = torch.cat([e, hn], -1)
            pos = positions + s
            q = rope((x @ self.q_proj.t()).view(T, nh, d), pos, self.theta)
            k = rope((x @ self.k_proj.t()).view(T, nkv, d), pos, self.theta)
            v = (x @ self.v_proj.t()).view(T, nkv, d)
            keys.append(k.repeat_interleave(nh // nkv, 1))
            values.append(v.repeat_interleave(nh // nkv, 1))
            scale = 1.0 / math.sqrt(d)
            # Step 0's keys of rows ≤ j, and row j's own keys of steps 1 … s.
            s0 = torch.einsum("thd,uhd->htu", q, keys[0]) * scale
            s0 = s0.masked_fill(~causal, float("-inf"))
            diag = [torch.einsum("thd,thd->ht", q, keys[t])[..., None] * scale for t in range(1, s + 1)]
            p = torch.softmax(torch.cat([s0] + diag, -1).float(), -1).to(q.dtype)
            a = torch.einsum("htu,uhd->thd", p[..., :T], values[0])
            for t in range(1, s + 1):
                a = a + p[..., T + t - 1].transpose(0, 1)[..., None] * values[t]
            h1 = h + a.reshape(T, nh * d) @ self.o_proj.t()
            m = rms_norm(h1, self.post_attention_layernorm, self.eps)
            h = h1 + (F.silu(m @ self.gate_proj.t()) * (m @ self.up_proj.t())) @ self.down_proj.t()
            out.append(rms_norm(h, self.norm, self.eps) @ self.lm_head.t())
        return out

    def loss(self, aux, ids, positions, last, steps: int, decay: float):
        """KL(target ‖ draft) over the draft vocabulary, every step, step s weighted decay^s; the
        target at step s of row j: its own distribution at row j + s (last: [T, H], the target's
        last layer output before its final norm, aligned with ids). Returns the loss and each
        step's share of rows whose draft is the target's argmax."""
        T = aux.shape[0]
        with torch.no_grad():
            target = rms_norm(last, self.verifier_norm, self.eps) @ self.verifier_lm_head.t()
        total, acc = 0.0, []
        for s, logits in enumerate(self.step_logits(aux, ids, positions, steps)):
            lg, tg = logits[: T - s].float(), target[s:].float()
            kl = F.kl_div(F.log_softmax(lg, -1), F.log_softmax(tg, -1), log_target=True, reduction="none").sum(-1)
            total = total + (decay ** s) * kl.mean()
            acc.append(float((lg.argmax(-1) == tg.argmax(-1)).float().mean()))
        return total, acc

    def save(self, out: str, dtype=torch.bfloat16, embedding: bool = False) -> None:
        """Without `embedding`, the table (the target's own, frozen in training) is left out: a
        reader embeds with the target's, as for the EAGLE authors' heads."""
        os.makedirs(out, exist_ok=True)
        tensors = {}
        for name, attr in self.TENSORS.items():
            if name == "embed_tokens.weight" and not embedding:
                continue
            t = getattr(self, attr).detach()
            tensors[name] = (t if t.dtype in (torch.long, torch.bool) else t.to(dtype)).contiguous().cpu()
        save_file(tensors, os.path.join(out, "model.safetensors"))
        layer = {
            "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": self.vocab,
            "hidden_size": self.hidden, "intermediate_size": self.intermediate, "num_hidden_layers": 1,
            "num_attention_heads": self.heads, "num_key_value_heads": self.kv_heads, "head_dim": self.head_dim,
            "hidden_act": "silu", "rms_norm_eps": self.eps, "max_position_embeddings": self.max_positions,
            "rope_parameters": {"rope_theta": self.theta, "rope_type": "default"}, "attention_bias": False,
            "mlp_bias": False, "tie_word_embeddings": False,
        }
        config = {
            "architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3", "speculators_version": "0.9.0",
            "draft_vocab_size": self.draft_vocab, "eagle_aux_hidden_state_layer_ids": self.aux,
            "norm_before_residual": False, "norm_before_fc": False, "fc_norm": False, "norm_output": False,
            "embed_requires_grad": False, "target_hidden_size": None, "tie_word_embeddings": False,
            "dtype": "bfloat16", "transformer_layer_config": layer,
            "speculators_config": {
                "algorithm": "eagle3", "default_proposal_method": "greedy",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3, "verifier_accept_k": 1,
                                      "accept_tolerance": 0.0}],
                "verifier": {"architectures": ["LlamaForCausalLM"], "name_or_path": None},
            },
        }
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
