"""`fp8lm bench throughput` on the shipped model as a user runs it: the table on
stdout, every number and the configuration in --json, exactly --output-len
tokens per request, preemption under a small KV cache, and clean errors."""
import json
from pathlib import Path

import pytest
from cli_errors import assert_clean_error

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "fp8lm-gutenberg-22m"
CONTEXT = json.loads((MODEL / "config.json").read_text())["max_position_embeddings"]


def bench(run, *args):
    return run("bench", "throughput", str(MODEL), "--threads", "2", *args)


@pytest.mark.parametrize("quant", [None, "fp8"])
def test_table_and_json(run, tmp_path, quant):
    out = tmp_path / "t.json"
    extra = ("--quantization", quant) if quant else ()
    r = bench(run, "--num-prompts", "6", "--input-len", "40", "--output-len", "5", "--max-num-seqs", "4",
              "--max-num-batched-tokens", "32", "--json", str(out), *extra)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("fp8lm bench throughput: fp8lm-gutenberg-22m, weights ")
    assert ("weights FP8" in first) == bool(quant)
    for label in ("requests/s", "output tok/s", "total tok/s", "elapsed s", "preemptions", "peak running",
                  "weight bandwidth GB/s", "forward steps"):
        assert label in r.stdout, label
    j = json.loads(out.read_text())
    assert j["benchmark"] == "throughput"
    c, res = j["config"], j["results"]
    assert (c["num_prompts"], c["input_len"], c["output_len"]) == (6, 40, 5)
    assert (c["max_num_seqs"], c["max_num_batched_tokens"]) == (4, 32)
    assert c["quantization"] == quant and c["threads"] == 2
    assert res["num_requests"] == 6
    assert res["output_tokens"] == 30 and res["input_tokens"] == 240
    assert res["peak_running"] == 4 and res["preemptions"] == 0
    # 240 prompt tokens under a 32-token budget need at least 8 steps; 5 tokens each at least 5 more
    assert res["forward_steps"] >= 10
    assert res["elapsed_s"] > 0
    assert res["output_tok_s"] == pytest.approx(30 / res["elapsed_s"], rel=1e-6)
    assert res["total_tok_s"] == pytest.approx(270 / res["elapsed_s"], rel=1e-6)
    assert res["requests_per_s"] == pytest.approx(6 / res["elapsed_s"], rel=1e-6)
    assert res["weight_bandwidth_gb_s"] == pytest.approx(
        j["memory"]["weight_bytes"] * res["forward_steps"] / res["elapsed_s"] / 1e9, rel=1e-6)
    # The CPU backend's steps run on the host: no device time to report, no line for it.
    assert res["device_busy_s"] is None and res["device_idle_s"] is None
    assert "device busy" not in r.stdout


def test_small_kv_cache_preempts_and_every_request_finishes(run, tmp_path):
    out = tmp_path / "t.json"
    r = bench(run, "--num-prompts", "6", "--input-len", "24", "--output-len", "12", "--max-num-seqs", "6",
              "--kv-cache-tokens", "64", "--json", str(out))
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())["results"]
    assert res["preemptions"] > 0
    assert res["num_requests"] == 6 and res["output_tokens"] == 72


def test_bench_help_lists_throughput(run):
    r = run("bench", "--help")
    assert r.returncode == 0
    assert "latency" in r.stdout and "throughput" in r.stdout


@pytest.mark.parametrize("args, words", [
    (("--input-len", str(CONTEXT), "--output-len", "1"), "context"),
    (("--max-num-seqs", "8", "--max-num-batched-tokens", "4"), "--max-num-batched-tokens"),
    (("--num-prompts", "0"), "--num-prompts"),
    (("--input-len", "40", "--output-len", "40", "--kv-cache-tokens", "32"), "KV cache"),
])
def test_clean_errors(run, args, words):
    assert words in assert_clean_error(bench(run, *args))


def test_prefix_caching_shares_the_common_prefix(run, tmp_path):
    out = tmp_path / "t.json"
    # 8 prompts of 40 tokens whose first 32 (two blocks of 16) are the same; a 48-token budget admits
    # the first two in the first step, and every later one finds the first one's blocks cached.
    r = bench(run, "--num-prompts", "8", "--input-len", "40", "--output-len", "4", "--max-num-seqs", "8",
              "--max-num-batched-tokens", "48", "--enable-prefix-caching", "--prefix-len", "32", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "prefix cache hit rate" in r.stdout
    j = json.loads(out.read_text())
    assert j["config"]["enable_prefix_caching"] is True and j["config"]["prefix_len"] == 32
    res = j["results"]
    assert res["num_requests"] == 8 and res["output_tokens"] == 32 and res["preemptions"] == 0
    assert res["prefix_cache_queries"] == 8 * 40
    assert res["prefix_cache_hits"] == 6 * 32
    off = bench(run, "--num-prompts", "8", "--input-len", "40", "--output-len", "4", "--prefix-len", "32",
                "--max-num-seqs", "8", "--max-num-batched-tokens", "48", "--json", str(out))
    assert off.returncode == 0, off.stderr
    assert "prefix cache hit rate" not in off.stdout
    assert json.loads(out.read_text())["results"]["prefix_cache_hits"] == 0
    assert "--prefix-len" in assert_clean_error(bench(run, "--input-len", "8", "--prefix-len", "9"))


def test_speculative_config_reports_acceptance(run, tmp_path):
    # The shipped model's greedy continuations of random prompts soon repeat themselves: prompt
    # lookup drafts, every request still gets exactly --output-len tokens, and fewer steps do it.
    args = ("--num-prompts", "4", "--input-len", "16", "--output-len", "48", "--max-num-seqs", "4")
    plain, spec = tmp_path / "plain.json", tmp_path / "spec.json"
    assert bench(run, *args, "--json", str(plain)).returncode == 0
    config = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}'
    r = bench(run, *args, "--speculative-config", config, "--json", str(spec))
    assert r.returncode == 0, r.stderr
    assert "mean accepted length" in r.stdout
    p, s = json.loads(plain.read_text()), json.loads(spec.read_text())
    assert p["results"]["speculative"] is None and s["config"]["speculative_config"] == config
    st = s["results"]["speculative"]
    assert s["results"]["output_tokens"] == 4 * 48
    assert 0 < st["accepted_tokens"] <= st["drafted_tokens"]
    assert st["mean_accepted_length"] == pytest.approx((st["accepted_tokens"] + st["verify_steps"]) / st["verify_steps"])
    assert len(st["acceptance_by_position"]) == 4
    assert s["results"]["forward_steps"] < p["results"]["forward_steps"]
