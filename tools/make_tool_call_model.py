"""A tiny model whose greedy output is a tool call, for the server's --tool-call-parser tests.

Real chat models that write tool calls are far too large for the tests, so this script builds
one whose next token depends on its current token alone, along chains chosen here: a prompt
ending in a trigger word (an added token, e.g. HERMES_CALL) continues with a fixed output — a
Hermes call (over several tokens), a Llama 3 JSON call, a Qwen3-Coder XML call, a malformed
call, or plain text — then EOS. Mechanism: one decoder layer whose attention and MLP outputs
are zero (o_proj and down_proj are zero), so the final norm sees the current token's embedding;
embeddings are one-hot in a "slot" per chain token, and lm_head row `next` reads `current`'s
slot. The shipped model's tokenizer, with the chain strings as added (non-special) tokens, and a
chat template that renders the tools and ends with the last message's text (so the trigger is
the last prompt token).

The expected outputs come from transformers: the model generates greedily through
`apply_chat_template` (with tools) + `generate`, and expected.json records the text per trigger.

    .venv-tools/bin/python tools/make_tool_call_model.py   # writes tests/fixtures/models/tool_calls
"""
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "models" / "fp8lm-gutenberg-22m"
OUT = REPO / "tests" / "fixtures" / "models" / "tool_calls"
HIDDEN = 32

HERMES_JSON = '\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n'
QWEN_XML = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
            "</parameter>\n</function>\n</tool_call>")
LLAMA_JSON = '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}'
BROKEN = '<tool_call>{"name": get_weather}</tool_call>'
# trigger -> the output's tokens (each an added token), EOS after the last.
CHAINS = {
    "HERMES_CALL": ["<tool_call>", HERMES_JSON, "</tool_call>"],
    "HERMES_TEXT": ["Let me check the weather.", "<tool_call>"],  # then as HERMES_CALL: <tool_call> leads on
    "LLAMA_CALL": [LLAMA_JSON],
    "QWEN_CALL": [QWEN_XML],
    "BROKEN_CALL": [BROKEN],
    "PLAIN": ["No tools are needed here."],
}
TEMPLATE = ("{% if tools %}Tools: {{ tools | tojson }}\n{% endif %}"
            "{% for m in messages[:-1] %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{{ messages[-1]['content'] }}")
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather forecast of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}]


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    tok = Tokenizer.from_file(str(SHIPPED / "tokenizer.json"))
    strings = []
    for trigger, chain in CHAINS.items():
        for s in [trigger, *chain]:
            if s not in strings:
                strings.append(s)
    tok.add_tokens([AddedToken(s, normalized=False, special=False) for s in strings])
    tok.save(str(OUT / "tokenizer.json"))
    ids = {s: tok.token_to_id(s) for s in strings}
    shipped_config = json.loads((SHIPPED / "config.json").read_text())
    eos = shipped_config["eos_token_id"]
    vocab = tok.get_vocab_size(with_added_tokens=True)
    vocab = (vocab + 15) // 16 * 16

    # Edges: current token -> next token; slot 0 is every other token, which goes to EOS.
    edges = {}
    for trigger, chain in CHAINS.items():
        seq = [trigger, *chain]
        for a, b in zip(seq, seq[1:]):
            assert edges.get(ids[a], ids[b]) == ids[b], (a, b)  # one successor per token
            edges[ids[a]] = ids[b]
        edges.setdefault(ids[seq[-1]], eos)
    slots = {t: i + 1 for i, t in enumerate(sorted(edges))}
    assert len(slots) < HIDDEN
    embed = torch.zeros(vocab, HIDDEN)
    embed[:, 0] = 1.0
    lm_head = torch.zeros(vocab, HIDDEN)
    lm_head[eos, 0] = 8.0
    for t, slot in slots.items():
        embed[t, 0] = 0.0
        embed[t, slot] = 1.0
        lm_head[edges[t], slot] = 8.0
    zeros = lambda *shape: torch.zeros(*shape)
    p = "model.layers.0."
    tensors = {
        "model.embed_tokens.weight": embed, "lm_head.weight": lm_head, "model.norm.weight": torch.ones(HIDDEN),
        p + "input_layernorm.weight": torch.ones(HIDDEN), p + "post_attention_layernorm.weight": torch.ones(HIDDEN),
        p + "self_attn.q_proj.weight": zeros(HIDDEN, HIDDEN), p + "self_attn.k_proj.weight": zeros(HIDDEN, HIDDEN),
        p + "self_attn.v_proj.weight": zeros(HIDDEN, HIDDEN), p + "self_attn.o_proj.weight": zeros(HIDDEN, HIDDEN),
        p + "mlp.gate_proj.weight": zeros(HIDDEN, HIDDEN), p + "mlp.up_proj.weight": zeros(HIDDEN, HIDDEN),
        p + "mlp.down_proj.weight": zeros(HIDDEN, HIDDEN),
    }
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in tensors.items()}, str(OUT / "model.safetensors"),
              metadata={"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
        "intermediate_size": HIDDEN, "num_hidden_layers": 1, "num_attention_heads": 1, "num_key_value_heads": 1,
        "head_dim": HIDDEN, "hidden_act": "silu", "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "vocab_size": vocab, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "bos_token_id": shipped_config.get("bos_token_id", eos), "eos_token_id": eos,
    }
    (OUT / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tc = json.loads((SHIPPED / "tokenizer_config.json").read_text())
    tc["chat_template"] = TEMPLATE
    (OUT / "tokenizer_config.json").write_text(json.dumps(tc, indent=2) + "\n")
    shutil.copy(SHIPPED / "special_tokens_map.json", OUT / "special_tokens_map.json")

    # The reference: transformers' greedy output for a chat ending in each trigger.
    hf_tok = AutoTokenizer.from_pretrained(OUT)
    model = AutoModelForCausalLM.from_pretrained(OUT, torch_dtype=torch.float32)
    expected = {"tools": TOOLS, "outputs": {}}
    for trigger in CHAINS:
        messages = [{"role": "user", "content": "What is the weather in Paris? " + trigger}]
        prompt = hf_tok.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=True,
                                            return_tensors="pt", return_dict=True)
        assert int(prompt["input_ids"][0, -1]) == ids[trigger], trigger
        out = model.generate(**prompt, max_new_tokens=16, do_sample=False)
        new = out[0, prompt["input_ids"].shape[1]:].tolist()
        assert new[-1] == eos, (trigger, new)
        expected["outputs"][trigger] = {"messages": messages, "token_ids": new,
                                        "text": hf_tok.decode(new, skip_special_tokens=True)}
    (OUT / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    print({t: o["text"] for t, o in expected["outputs"].items()})


if __name__ == "__main__":
    main()
