"""`fp8lm eval perplexity` on the shipped model. The perplexity of a short original text
(tests/fixtures/eval/harbour.txt) is checked against transformers' float32 number under the same
protocol (tests/fixtures/eval/reference_ctx128.json, written by tools/reference_perplexity.py);
KL divergence against a base model is checked for its properties (a model against itself, FP8
against BF16)."""
import json
import re
from pathlib import Path

import pytest
from cli_errors import assert_clean_error

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "fp8lm-gutenberg-22m"
EVAL = REPO / "tests" / "fixtures" / "eval"
DATA = EVAL / "harbour.txt"
REFERENCE = json.loads((EVAL / "reference_ctx128.json").read_text())
CONTEXT = json.loads((MODEL / "config.json").read_text())["max_position_embeddings"]
CHECKPOINTS = REPO / "tests" / "fixtures" / "checkpoints"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
CTX = 128
# The bound; fp8lm and transformers agree far closer than this in float32.
REL_TOL = 1e-3


def perplexity(run, *args, model=MODEL, data=DATA):
    return run("eval", "perplexity", str(model), "--data", str(data), "--threads", "2", *args)


def perplexity_json(run, *args, **kwargs):
    r = perplexity(run, *args, "--json", **kwargs)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# ---- against transformers -----------------------------------------------------------------


@pytest.mark.parametrize("kv", ["fp32", "bf16"])
@pytest.mark.parametrize("protocol", ["all", "second-half"])
def test_perplexity_matches_transformers(run, protocol, kv):
    ref = REFERENCE["results"][protocol]
    got = perplexity_json(run, "--ctx", str(CTX), "--protocol", protocol, "--kv-cache-dtype", kv)
    assert got["protocol"] == protocol and got["ctx"] == CTX
    assert got["file_tokens"] == REFERENCE["file_tokens"]
    assert got["windows"] == ref["windows"] == REFERENCE["file_tokens"] // CTX
    assert got["tokens_scored"] == ref["tokens_scored"]
    assert got["ppl"] == pytest.approx(ref["ppl"], rel=REL_TOL)
    assert got["nll_mean"] == pytest.approx(ref["nll_mean"], rel=REL_TOL)


def test_scored_token_counts_follow_the_protocol(run):
    windows = REFERENCE["file_tokens"] // CTX
    assert perplexity_json(run, "--ctx", str(CTX))["tokens_scored"] == windows * (CTX - 1)
    half = perplexity_json(run, "--ctx", str(CTX), "--protocol", "second-half")
    assert half["tokens_scored"] == windows * (CTX - CTX // 2 - 1)


def test_batching_does_not_change_the_result(run):
    one = perplexity_json(run, "--ctx", str(CTX))
    three = perplexity_json(run, "--ctx", str(CTX), "--batch", "3")
    assert three["windows"] == one["windows"] and three["tokens_scored"] == one["tokens_scored"]
    assert three["ppl"] == pytest.approx(one["ppl"], rel=1e-9)


def test_limit_windows(run):
    got = perplexity_json(run, "--ctx", str(CTX), "--limit-windows", "2")
    assert got["windows"] == 2 and got["tokens_scored"] == 2 * (CTX - 1)


def test_summary_to_stdout_progress_to_stderr(run):
    r = perplexity(run, "--ctx", str(CTX))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("perplexity ") and "windows of 128" in r.stdout
    assert "fp8lm:" not in r.stdout
    assert re.search(r"fp8lm: perplexity: (\d+)/\1 windows, ppl [0-9.]+", r.stderr), r.stderr  # the last line


def test_json_to_a_file(run, tmp_path):
    out = tmp_path / "ppl.json"
    r = perplexity(run, "--ctx", str(CTX), "--json", str(out))
    assert r.returncode == 0, r.stderr
    got = json.loads(out.read_text())
    assert got["ppl"] == pytest.approx(REFERENCE["results"]["all"]["ppl"], rel=REL_TOL)
    assert r.stdout.startswith("perplexity ")


# ---- KL divergence against a base model ----------------------------------------------------


def test_a_model_against_itself(run):
    got = perplexity_json(run, "--ctx", str(CTX), "--kl-divergence-base", str(MODEL))
    assert got["kld_mean"] == 0 and got["kld_median"] == 0 and got["kld_p99"] == 0 and got["kld_max"] == 0
    assert got["top1_agreement"] == 1.0
    assert got["base_ppl"] == got["ppl"]
    assert got["delta_ppl"] == 0 and got["delta_ppl_percent"] == 0


def test_fp8_against_the_bf16_base(run):
    bf16 = perplexity_json(run, "--ctx", str(CTX))
    got = perplexity_json(run, "--ctx", str(CTX), "--quantization", "fp8", "--kl-divergence-base", str(MODEL))
    assert got["base_ppl"] == pytest.approx(bf16["ppl"], rel=1e-9)  # the base loads as stored: BF16
    assert 0 < got["kld_median"] <= got["kld_p99"] <= got["kld_max"]
    assert 0 < got["kld_mean"] < 0.02
    assert 0.9 < got["top1_agreement"] < 1.0
    assert got["delta_ppl"] == pytest.approx(got["ppl"] - got["base_ppl"], rel=1e-9)
    assert got["delta_ppl_percent"] == pytest.approx(100 * got["delta_ppl"] / got["base_ppl"], rel=1e-9)
    assert abs(got["delta_ppl_percent"]) < 5


def test_base_with_another_vocabulary_is_refused(run, tmp_path):
    base = tmp_path / "llama_bf16"
    base.mkdir()
    for f in (CHECKPOINTS / "llama_bf16").iterdir():
        (base / f.name).symlink_to(f)
    for name in TOKENIZER_FILES:
        if not (base / name).exists():
            (base / name).symlink_to(MODEL / name)
    err = assert_clean_error(perplexity(run, "--ctx", str(CTX), "--kl-divergence-base", str(base)))
    assert "vocabulary" in err


# ---- errors ---------------------------------------------------------------------------------


def test_default_ctx_longer_than_the_data_names_the_token_count(run):
    # the default window is the model's context (1024), longer than the fixture
    err = assert_clean_error(perplexity(run))
    assert str(REFERENCE["file_tokens"]) in err and str(CONTEXT) in err


@pytest.mark.parametrize("flags, named", [
    (("--ctx", "1"), "--ctx"),
    (("--ctx", str(CONTEXT + 1)), str(CONTEXT)),
    (("--ctx", "2", "--protocol", "second-half"), "second-half"),
    (("--protocol", "thirds"), "thirds"),
    (("--batch", "0"), "--batch"),
    (("--limit-windows", "-1"), "--limit-windows"),
    (("--quantization", "fp9"), "fp9"),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_bad_flags_are_named(run, flags, named):
    err = assert_clean_error(perplexity(run, *flags))
    assert named in err


def test_missing_data_file(run, tmp_path):
    err = assert_clean_error(perplexity(run, data=tmp_path / "nowhere.txt"))
    assert "nowhere.txt" in err


def test_empty_data_file(run, tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    err = assert_clean_error(perplexity(run, data=tmp_path / "empty.txt"))
    assert "empty.txt" in err and "empty" in err


def test_invalid_utf8_names_the_file(run, tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\u00e9 au lait ".encode("latin-1") * 50)
    err = assert_clean_error(perplexity(run, "--ctx", "16", data=bad))
    assert "latin1.txt" in err and "UTF-8" in err


def test_missing_base_model_is_named(run, tmp_path):
    err = assert_clean_error(perplexity(run, "--ctx", str(CTX), "--kl-divergence-base", str(tmp_path / "nobase")))
    assert "nobase" in err


def test_eval_needs_a_subcommand(run):
    r = run("eval")
    assert r.returncode != 0
    assert "perplexity" in r.stdout + r.stderr
