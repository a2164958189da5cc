"""`fp8lm tokenize` on the shipped model against what Hugging Face produced:
ids from `tokenizers` (tests/fixtures/tokenizer/gutenberg.json) and prompts from
transformers' apply_chat_template (tests/fixtures/chat/templates.json)."""
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "fp8lm-gutenberg-22m"
TOK = REPO / "tests" / "fixtures" / "tokenizer"
CHAT = REPO / "tests" / "fixtures" / "chat" / "templates.json"

TEXTS = json.loads((TOK / "texts.json").read_text())
GUTENBERG = json.loads((TOK / "gutenberg.json").read_text())
CASES = list(zip(TEXTS + GUTENBERG["extra_texts"], GUTENBERG["cases"]))


def tokenize(run, *args, stdin=""):
    r = run("tokenize", "--model", str(MODEL), *args, input=stdin)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("index", range(len(CASES)))
def test_ids_match_hf_tokenizers(run, index):
    text, case = CASES[index]
    got = json.loads(tokenize(run, "--json", stdin=text))
    assert got["ids"] == case["ids"]
    assert len(got["tokens"]) == len(case["ids"])
    got = json.loads(tokenize(run, "--json", "--no-special", stdin=text))
    assert got["ids"] == case["ids_no_special"]
    if case["ids"]:
        decoded = json.loads(tokenize(run, "--decode", "--json", "--text=" + json.dumps(case["ids"])))
        assert decoded["text"] == case["decoded"]


def test_plain_output_is_space_separated_ids(run):
    text, case = CASES[1]
    assert tokenize(run, f"--text={text}").split() == [str(i) for i in case["ids"]]


def chat_cases():
    data = json.loads(CHAT.read_text())
    out = []
    for c in data["cases"]:
        if c["template"] != "gutenberg-22m" or "expected" not in c or c["kwargs"]:
            continue
        conv = data["conversations"][c["conversation"]]
        out.append((c["conversation"], c["add_generation_prompt"], conv, c["expected"]))
    return out


@pytest.mark.parametrize("name,gen,conv,expected", chat_cases(), ids=lambda v: str(v)[:20])
def test_chat_prompt_matches_transformers(run, tmp_path, name, gen, conv, expected):
    conv_file = tmp_path / "conv.json"
    conv_file.write_text(json.dumps(conv))
    args = ["--chat", str(conv_file), "--json"] + (["--add-generation-prompt"] if gen else [])
    got = json.loads(tokenize(run, *args))
    assert got["prompt"] == expected
    # transformers tokenizes a rendered chat without adding special tokens
    plain = json.loads(tokenize(run, "--json", "--no-special", stdin=expected))
    assert got["ids"] == plain["ids"]


def test_errors_are_named(run, tmp_path):
    def err(*args):
        r = run("tokenize", *args)
        assert r.returncode != 0
        assert "internal error" not in r.stderr
        return r.stderr

    assert "99999999" in err("--model", str(MODEL), "--decode", "--text", "1 99999999")
    assert "not a token id" in err("--model", str(MODEL), "--decode", "--text", "12 abc")
    assert "tokenizer.json" in err("--model", str(tmp_path))
    bad = tmp_path / "bad.json"
    bad.write_text("{\"messages\": [")
    assert "bad.json" in err("--model", str(MODEL), "--chat", str(bad))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{\"model\": {\"type\": \"Unigram\"}}")
    assert "Unigram" in err("--model", str(broken))
