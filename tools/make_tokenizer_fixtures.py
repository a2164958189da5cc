#!/usr/bin/env python3
"""Expected token ids for fp8lm's tokenizer tests, made by Hugging Face `tokenizers`.

For every real BPE tokenizer.json in ../shared/data/hf/ and the shipped model's, encodes a
shared text set (plus texts made of that tokenizer's own added/special tokens) with and
without special tokens, and records the ids and the decoded text (with and without
skip_special_tokens). The tokenizer.json files themselves are not copied: the C++ tests read
them where they are.

    python3 -m venv .venv-tools && .venv-tools/bin/pip install tokenizers
    .venv-tools/bin/python tools/make_tokenizer_fixtures.py
"""
import json
import pathlib

import tokenizers

ROOT = pathlib.Path(__file__).resolve().parent.parent
HF = ROOT.parent / "shared" / "data" / "hf"
OUT = ROOT / "tests" / "fixtures" / "tokenizer"

# name -> tokenizer.json path, relative to the hf folder ("hf:") or to the repo ("repo:").
TOKENIZERS = {
    "qwen3": "hf:Qwen__Qwen3-4B",
    "deepseek_v3": "hf:deepseek-ai__DeepSeek-V3",
    "gpt2": "hf:openai-community__gpt2",
    "phi2": "hf:microsoft__phi-2",
    "phi3": "hf:microsoft__Phi-3-mini-4k-instruct",
    "tinyllama": "hf:TinyLlama__TinyLlama_v1.1",
    "roberta": "hf:FacebookAI__roberta-base",
    "gutenberg": "repo:models/fp8lm-gutenberg-22m",
}


def wiki_paragraphs(n=3, max_chars=700):
    path = ROOT.parent / "shared" / "data" / "wikitext-2-raw" / "wiki.test.raw"
    paras = [l for l in path.read_text(encoding="utf-8").split("\n") if len(l) > 200 and not l.startswith(" =")]
    return [p[:max_chars] for p in paras[:n]]


def common_texts():
    return [
        "",
        " ",
        "Hello world",
        "The quick brown fox jumps over the lazy dog.",
        " Hello, world! How are you doing today?",
        "I'm sure they'll say it's DON'T and I'VE, you're we've she'd.",
        "def add(a, b):\n    return a + b\n\nclass Foo:\n\tpass\n",
        "int main() {\n  std::vector<int> v{1, 2, 3};\n  for (auto& x : v) x *= 2;  // double\n  return 0;\n}\n",
        "a    b\t\t\tc\n\n\n   \n d          e",
        "     leading spaces",
        "trailing spaces     ",
        "\n\n\n",
        "\t \t  \r\n\r\n x",
        "1234567890 3.14159 1,000,000 0x1F 2024-01-01 12345678901234567890",
        "你好，世界！这是一个测试。中文分词很重要。",
        "こんにちは、世界。カタカナとひらがなのテスト。",
        "안녕하세요 세계! 한국어 텍스트입니다.",
        "Emoji: 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 😀😃😄 ❤️",
        "Combining: e\u0301 cafe\u0301 A\u030a \u00c5 \u212b \ufb01 \uff46\uff55\uff4c\uff4c",
        "Hello!!! ... ??? -- (a) [b] {c} <tag> @user #hash $5 100% a&b",
        "\u00a0nbsp\u3000ideographic\u2028sep\u200bzw",
        "Ünïcödé Straße ΕΛΛΗΝΙΚΆ русский текст العربية עברית हिन्दी",
        "ſtop K Kelvin ǅ İstanbul",
        "mixed中文English한국어123😀end",
        "<s> </s> <unk> <|endoftext|> not special <|im_start|",
    ] + wiki_paragraphs()


def added_token_texts(tok):
    added = sorted(tok.get_added_tokens_decoder().items())
    contents = [t.content for _, t in added]
    texts = []
    # Every added token, a few per text, embedded between ordinary text.
    for i in range(0, len(contents), 40):
        chunk = contents[i:i + 40]
        texts.append("".join(f"x{c} y" for c in chunk))
    for c in contents[:6]:
        texts.append(c)
        texts.append(f"Hello{c}world")
        texts.append(f" {c} \n spaced ")
        texts.append(f"{c}{c}")
    return texts


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    common = common_texts()
    (OUT / "texts.json").write_text(json.dumps(common, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    for name, where in TOKENIZERS.items():
        kind, rel = where.split(":")
        path = (HF / rel if kind == "hf" else ROOT / rel) / "tokenizer.json"
        tok = tokenizers.Tokenizer.from_file(str(path))
        extra = added_token_texts(tok)
        cases = []
        for text in common + extra:
            ids = tok.encode(text, add_special_tokens=True).ids
            plain = tok.encode(text, add_special_tokens=False).ids
            cases.append({
                "ids": ids,
                "ids_no_special": plain,
                "decoded": tok.decode(ids, skip_special_tokens=False),
                "decoded_skip": tok.decode(ids, skip_special_tokens=True),
            })
        doc = {
            "tokenizer": where,
            "tokenizers_version": tokenizers.__version__,
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "extra_texts": extra,
            "cases": cases,  # the common texts first (texts.json), then extra_texts
        }
        (OUT / f"{name}.json").write_text(json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n",
                                          encoding="utf-8")
        print(f"{name}: {len(cases)} cases")


if __name__ == "__main__":
    main()
