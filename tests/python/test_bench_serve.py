"""`fp8lm bench serve` against a real `fp8lm serve` of the shipped model on the CPU:
every request completed with exactly --output-len tokens, the percentiles in
order, TTFT before the end, the concurrency cap kept, Poisson arrivals, failures
counted by reason, and clean errors for an unreachable server and bad flags."""
import json
from pathlib import Path

import pytest
from cli_errors import assert_clean_error
from server import free_port

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "fp8lm-gutenberg-22m"
NAME = "fp8lm-gutenberg-22m"
CONTEXT = json.loads((MODEL / "config.json").read_text())["max_position_embeddings"]


@pytest.fixture(scope="module")
def server(serve):
    """One `fp8lm serve` of the model (BF16), its URL."""
    s = serve()
    yield s.url
    s.stop_cleanly()


def bench(run, *args):
    return run("bench", "serve", *args)


def check_stats(res):
    for key in ("ttft", "tpot", "itl", "e2e"):
        s = res[key]
        assert s["count"] > 0, key
        assert 0 < s["median_ms"] <= s["p99_ms"], (key, s)
        assert 0 < s["mean_ms"] <= s["p99_ms"] + 1e-9, (key, s)
    assert res["ttft"]["median_ms"] < res["e2e"]["median_ms"]


def test_all_at_once(run, server, tmp_path):
    out = tmp_path / "out.json"
    r = bench(run, "--base-url", server, "--num-prompts", "24", "--max-concurrency", "8", "--request-rate", "inf",
              "--input-len", "16", "--output-len", "8", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"fp8lm bench serve: {NAME} at {server}\n")
    for label in ("completed requests", "failed requests", "duration s", "requests/s", "output tok/s",
                  "total tok/s", "max concurrency observed", "TTFT", "TPOT", "ITL", "E2E latency"):
        assert label in r.stdout, label
    j = json.loads(out.read_text())
    assert j["benchmark"] == "serve"
    c = j["config"]
    assert (c["model"], c["num_prompts"], c["max_concurrency"], c["request_rate"]) == (NAME, 24, 8, "inf")
    assert (c["input_len"], c["output_len"], c["base_url"]) == (16, 8, server)
    res = j["results"]
    assert res["completed"] == 24 and res["failed"] == 0 and res["failures"] == {}
    assert res["output_tokens"] == 24 * 8 and res["input_tokens"] == 24 * 16
    assert 1 <= res["max_concurrency_observed"] <= 8
    assert res["duration_s"] > 0
    assert res["requests_per_s"] == pytest.approx(24 / res["duration_s"])
    assert res["output_tok_s"] == pytest.approx(24 * 8 / res["duration_s"])
    assert res["total_tok_s"] == pytest.approx(24 * (8 + 16) / res["duration_s"])
    check_stats(res)
    assert len(j["per_request"]) == 24
    for p in j["per_request"]:
        assert p["success"] and p["output_tokens"] == 8 and p["prompt_tokens"] == 16
        assert 0 < p["ttft_ms"] < p["e2e_ms"]
        assert p["tpot_ms"] == pytest.approx((p["e2e_ms"] - p["ttft_ms"]) / 7)
        assert len(p["itl_ms"]) == p["chunks"] - 1
        assert p["arrival_s"] == 0


def test_poisson_rate(run, server, tmp_path):
    out = tmp_path / "out.json"
    r = bench(run, "--base-url", server + "/v1/", "--model", NAME, "--num-prompts", "12", "--request-rate", "50",
              "--input-len", "8", "--output-len", "4", "--seed", "3", "--json", str(out))
    assert r.returncode == 0, r.stderr
    j = json.loads(out.read_text())
    assert j["config"]["request_rate"] == 50 and j["config"]["max_concurrency"] is None
    res = j["results"]
    assert res["completed"] == 12 and res["failed"] == 0 and res["output_tokens"] == 12 * 4
    check_stats(res)
    arrivals = [p["arrival_s"] for p in j["per_request"]]
    assert arrivals[0] == 0 and arrivals == sorted(arrivals) and arrivals[-1] > 0
    # Each request is sent when it arrives (no cap): never before.
    assert all(p["start_s"] >= p["arrival_s"] - 1e-3 for p in j["per_request"])
    # The same seed gives the same arrival times.
    again = tmp_path / "again.json"
    assert bench(run, "--base-url", server, "--num-prompts", "12", "--request-rate", "50", "--input-len", "8",
                 "--output-len", "4", "--seed", "3", "--json", str(again)).returncode == 0
    assert [p["arrival_s"] for p in json.loads(again.read_text())["per_request"]] == arrivals


def test_failures_counted_by_reason(run, server, tmp_path):
    # Beyond the context: the server answers 400 to every request.
    out = tmp_path / "out.json"
    r = bench(run, "--base-url", server, "--num-prompts", "3", "--input-len", "8", "--output-len", str(CONTEXT),
              "--json", str(out))
    err = assert_clean_error(r)
    assert "all 3 requests" in err and "HTTP 400" in err
    assert "failed: HTTP 400" in r.stdout
    res = json.loads(out.read_text())["results"]
    assert res["completed"] == 0 and res["failed"] == 3 and res["failures"] == {"HTTP 400": 3}
    assert res["ttft"]["median_ms"] is None


def test_unknown_model(run, server):
    err = assert_clean_error(bench(run, "--base-url", server, "--model", "nope", "--num-prompts", "1"))
    assert "--model: 'nope' is not served" in err and NAME in err


def test_unreachable_url(run):
    url = f"http://127.0.0.1:{free_port()}"
    err = assert_clean_error(bench(run, "--base-url", url, "--num-prompts", "2"))
    assert "cannot reach the server at --base-url " + url in err


@pytest.mark.parametrize("flags,message", [
    (("--request-rate", "fast"), "--request-rate: 'fast' is neither"),
    (("--request-rate", "0"), "--request-rate: 0 must be above 0"),
    (("--request-rate", "-2"), "--request-rate: -2 must be above 0"),
    (("--num-prompts", "0"), "--num-prompts: 0 must be at least 1"),
    (("--max-concurrency", "0"), "--max-concurrency: 0 must be at least 1"),
    (("--input-len", "-1"), "--input-len: -1 must be at least 1"),
    (("--output-len", "0"), "--output-len: 0 must be at least 1"),
    (("--vocab-size", "5"), "--vocab-size: 5 must be above 10"),
    (("--base-url", "127.0.0.1:8000"), "--base-url: '127.0.0.1:8000' is not an http"),
])
def test_bad_flags(run, flags, message):
    # Checked before any connection: the URL is never reached.
    defaults = {"--base-url": f"http://127.0.0.1:{free_port()}", "--num-prompts": "2"}
    args = [a for k, v in defaults.items() if k not in flags for a in (k, v)]
    err = assert_clean_error(bench(run, *args, *flags))
    assert message in err, err
