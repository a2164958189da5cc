#!/usr/bin/env python3
"""Token masks of structured outputs as xgrammar's Python package computes them, for
tests/cpp/test_structured.cpp: for each tokenizer and grammar, a text in the grammar's language is
tokenized, and before each of its tokens (and the EOS id after them) the mask of allowed tokens
is recorded — its count and the 64-bit FNV-1a hash of its 32-bit little-endian words (a digest
both sides compute in a few lines) — then the token is
accepted. Specs xgrammar refuses are recorded as refused. Run with a Python that has
xgrammar==0.2.9 (the version scripts/build.sh builds) and transformers:

    python tools/make_grammar_fixtures.py    # writes tests/fixtures/grammar/masks.json

Tokenizers: the shipped model's, and those in ../shared/data/hf (read from there, not copied).
"""
import json
import pathlib

import numpy as np
import torch
import xgrammar as xgr
from transformers import PreTrainedTokenizerFast

REPO = pathlib.Path(__file__).resolve().parent.parent
HF = REPO.parent / "shared" / "data" / "hf"
OUT = REPO / "tests" / "fixtures" / "grammar" / "masks.json"
XGRAMMAR_VERSION = "0.2.9"

# (name, "repo:<dir>" or "hf:<dir>", model vocabulary size or None (the tokenizer's), EOS ids)
TOKENIZERS = [
    ("gutenberg", "repo:models/fp8lm-gutenberg-22m", 16384, [0]),
    ("qwen3", "hf:Qwen__Qwen3-4B", 151936, [151645, 151643]),
    ("deepseek_v3", "hf:deepseek-ai__DeepSeek-V3", 129280, [1]),
    ("tinyllama", "hf:TinyLlama__TinyLlama_v1.1", 32000, [2]),
]

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["name", "age"],
}
TREE = {
    "$defs": {"node": {"type": "object", "properties": {
        "value": {"anyOf": [{"type": "integer"}, {"type": "string", "enum": ["leaf", "root"]}]},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["value"]}},
    "$ref": "#/$defs/node",
}
PATTERNED = {
    "type": "object",
    "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
                   "score": {"type": "number", "minimum": 0.5, "maximum": 9.5},
                   "when": {"type": "string", "format": "date"}},
    "required": ["code", "score", "when"],
}
ARITH = r'''root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")"
'''

# (spec, text in the spec's language); kind and fields as structured::GrammarSpec.
CASES = [
    ({"kind": "json_schema", "text": json.dumps(PERSON)}, '{"name": "Ada Lovelace", "age": 36, "tags": ["math", "engines"]}'),
    ({"kind": "json_schema", "text": json.dumps(PERSON), "any_whitespace": False}, '{"name": "Ada", "age": 36}'),
    ({"kind": "json_schema", "text": json.dumps(TREE)}, '{"value": "root", "children": [{"value": 1}, {"value": "leaf", "children": []}]}'),
    ({"kind": "json_schema", "text": json.dumps(PATTERNED)}, '{"code": "AB-123", "score": 7.25, "when": "2026-12-07"}'),
    ({"kind": "json_schema", "text": json.dumps({"type": "array", "items": {"type": "string", "format": "date"}})},
     '["2024-02-29", "1900-02-28", "2026-11-30"]'),
    ({"kind": "json_object"}, '{"a": [1, 2.5, null, true], "b": {"c": "d\\n\u00e9"}}'),
    ({"kind": "regex", "text": r"\d{3}-\d{4}( ext\. \d+)?"}, "555-1234 ext. 42"),
    ({"kind": "regex", "text": r"[a-z]+@[a-z]+\.(com|org)"}, "ada@example.org"),
    ({"kind": "choice", "choices": ["yes", "no", "maybe \"so\""]}, 'maybe "so"'),
    ({"kind": "grammar", "text": ARITH}, "12+3*(4-5)/6"),
]
REFUSED = [
    {"kind": "json_schema", "text": '{"type": "object", "properties": '},
    {"kind": "json_schema", "text": '{"type": "strange"}'},
    {"kind": "regex", "text": "(ab"},
    {"kind": "grammar", "text": "root ::= undefined_rule"},
]


def choice_grammar(choices):
    """The EBNF grammar fp8lm builds for a choice (structured/grammar_compiler.cpp)."""
    def lit(s):
        out = []
        for ch in s:
            if ch in '"\\':
                out.append("\\" + ch)
            elif ord(ch) < 0x20 or ord(ch) == 0x7F:
                out.append("\\u%04x" % ord(ch))
            else:
                out.append(ch)
        return '"' + "".join(out) + '"'
    return "root ::= " + " | ".join(lit(c) for c in choices)


# fp8lm's schema preparation (structured/grammar_compiler.cpp, prepare_schema): "format": "date" and
# "date-time" become exact calendar patterns (xgrammar's own take day 31 of any month), so that the
# reference compiles the same schema fp8lm does.
DATE = ("(([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|"
        "(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))|"
        "([0-9]{2}(0[48]|[2468][048]|[13579][26])|([2468][048]|[13579][26]|0[48])00)-02-29)")
TIME = r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"


def prepare_schema(s):
    if not isinstance(s, dict):
        return s
    s = dict(s)
    if isinstance(s.get("format"), str) and "pattern" not in s and s["format"] in ("date", "date-time"):
        s["pattern"] = "^" + DATE + ("" if s["format"] == "date" else "T" + TIME) + "$"
        del s["format"]
    for k in ("items", "additionalProperties", "propertyNames", "unevaluatedProperties", "unevaluatedItems",
              "additionalItems"):
        if k in s:
            s[k] = prepare_schema(s[k]) if not isinstance(s[k], list) else s[k]
    for k in ("properties", "patternProperties", "$defs", "definitions"):
        if isinstance(s.get(k), dict):
            s[k] = {name: prepare_schema(v) for name, v in s[k].items()}
    for k in ("anyOf", "oneOf", "allOf", "prefixItems", "items"):
        if isinstance(s.get(k), list):
            s[k] = [prepare_schema(v) for v in s[k]]
    return s


def compile_spec(compiler, spec):
    kind, ws = spec["kind"], spec.get("any_whitespace", True)
    seps = None if ws else (", ", ": ")
    if kind == "json_object":
        return compiler.compile_json_schema('{"type": "object"}', any_whitespace=ws, separators=seps, strict_mode=False)
    if kind == "json_schema":
        schema = json.dumps(prepare_schema(json.loads(spec["text"])))
        return compiler.compile_json_schema(schema, any_whitespace=ws, separators=seps, strict_mode=True)
    if kind == "regex":
        return compiler.compile_regex(spec["text"])
    if kind == "choice":
        return compiler.compile_grammar(choice_grammar(spec["choices"]))
    if kind == "grammar":
        return compiler.compile_grammar(spec["text"])
    raise ValueError(kind)


def mask_record(matcher, words):
    bitmask = xgr.allocate_token_bitmask(1, words * 32)
    matcher.fill_next_token_bitmask(bitmask)
    w = bitmask[0].numpy().astype("<i4")[:words]
    return {"allowed": int(np.unpackbits(w.view(np.uint8)).sum()), "fnv1a64": "%016x" % fnv1a64(w.tobytes())}


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def encode_mid_sequence(tok, text, add_prefix_space):
    """The text's tokens as a model continuing a prompt would generate them: where the tokenizer
    prepends a space (SentencePiece-style), tokenized after a newline, whose tokens are dropped."""
    if not add_prefix_space:
        return tok.encode(text, add_special_tokens=False)
    ids = tok.encode("\n" + text, add_special_tokens=False)
    newline = tok.convert_tokens_to_ids("<0x0A>")
    return ids[ids.index(newline) + 1:]


def main():
    assert torch is not None
    out = {"xgrammar": XGRAMMAR_VERSION, "tokenizers": [], "cases": []}
    for name, where, vocab_size, eos in TOKENIZERS:
        kind, rel = where.split(":", 1)
        d = (REPO / rel) if kind == "repo" else (HF / rel)
        if not (d / "tokenizer.json").exists():
            raise SystemExit(f"{d}/tokenizer.json is missing")
        tok = PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"))
        info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab_size, stop_token_ids=eos)
        out["tokenizers"].append({"name": name, "where": where, "vocab_size": vocab_size, "eos": eos,
                                  "vocab_type": info.vocab_type.name.lower(), "add_prefix_space": info.add_prefix_space})
        compiler = xgr.GrammarCompiler(info, cache_enabled=False)
        words = (vocab_size + 31) // 32
        for spec, text in CASES:
            matcher = xgr.GrammarMatcher(compile_spec(compiler, spec))
            ids = encode_mid_sequence(tok, text, info.add_prefix_space) + [eos[0]]
            masks, accepted = [], []
            for t in ids:
                masks.append(mask_record(matcher, words))
                ok = matcher.accept_token(t)
                accepted.append(bool(ok))
                if not ok:
                    break
            out["cases"].append({"tokenizer": name, "spec": spec, "text": text, "tokens": ids, "masks": masks,
                                 "accepted": accepted, "terminated": bool(matcher.is_terminated())})
        for spec in REFUSED:
            try:
                compile_spec(compiler, spec)
                refused = False
            except Exception:  # xgrammar raises RuntimeError / ValueError / InvalidJSONSchemaError
                refused = True
            out["cases"].append({"tokenizer": name, "spec": spec, "refused": refused})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT}: {len(out['cases'])} cases")


if __name__ == "__main__":
    main()
