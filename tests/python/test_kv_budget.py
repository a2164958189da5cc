"""The KV cache on host memory and --max-model-len (issue 39), as a user meets them.

A config.json that says max_position_embeddings = 2^24 once made the CPU backend allocate one full
context (80 GiB: std::bad_alloc) to generate two tokens. Now a cache given no size takes at most half
of the host memory available and no more than the sequences can use, its untouched pages cost
nothing, and the model's context is lowered to what it holds; --max-model-len (generate, chat,
bench, eval, as vLLM's) caps the context and must fit; a cache size beyond the host's memory is
refused naming its flag. Each run's own peak resident memory is read from wait4()."""
import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest
from cli_errors import assert_clean_error

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "fp8lm-gutenberg-22m"
CONFIG = json.loads((MODEL / "config.json").read_text())
CONTEXT = CONFIG["max_position_embeddings"]
BYTES_PER_TOKEN = 2 * CONFIG["num_hidden_layers"] * CONFIG["num_key_value_heads"] * CONFIG["head_dim"] * 2  # BF16
GiB = 1 << 30
PEAK_BOUND = GiB


def long_context_model(tmp_path, context):
    """The shipped model with config.json's max_position_embeddings = `context` (other files linked)."""
    d = tmp_path / f"context-{context}"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(dict(CONFIG, max_position_embeddings=context), indent=2))
    for f in MODEL.iterdir():
        if f.name != "config.json":
            (d / f.name).symlink_to(f)
    return d


def run_measured(fp8lm_bin, *args, timeout=120):
    """Runs fp8lm; returns its CompletedProcess and its own peak resident memory in bytes."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([fp8lm_bin, *args], stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        watchdog = threading.Timer(timeout, proc.kill)
        watchdog.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            watchdog.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        r = subprocess.CompletedProcess(proc.args, proc.returncode, out.read().decode(), err.read().decode())
        return r, usage.ru_maxrss * 1024  # Linux: KiB


def generate_args(model, *flags):
    return ("generate", str(model), "--threads", "2", "--prompt", "It was a dark and stormy night", "--max-tokens",
            "2", "--temperature", "0", "--ignore-eos", "--json", *flags)


# ---- a huge max_position_embeddings -------------------------------------------------------


@pytest.mark.parametrize("power", [20, 24, 30])
def test_huge_context_generates_two_tokens_in_bounded_memory(fp8lm_bin, tmp_path, power):
    model = long_context_model(tmp_path, 2 ** power)
    r, peak = run_measured(fp8lm_bin, *generate_args(model))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["completion_tokens"] == 2
    assert peak < PEAK_BOUND, f"peak RSS {peak >> 20} MiB"
    # Where one context does not fit half the memory available, the context is lowered to what the
    # cache holds, and stderr says so.
    if 2 ** power * BYTES_PER_TOKEN > os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2:
        assert "note: max_model_len " in r.stderr and f"the model's context of {2 ** power} tokens" in r.stderr


def test_max_model_len_the_memory_cannot_hold_is_refused_naming_the_flags(fp8lm_bin, tmp_path):
    context = 2 ** 30  # 5 TiB of BF16 cache for one sequence
    model = long_context_model(tmp_path, context)
    r, peak = run_measured(fp8lm_bin, *generate_args(model, "--max-model-len", str(context)))
    err = assert_clean_error(r)
    assert f"--max-model-len: one sequence of {context} tokens needs a KV cache of 5242880 MiB" in err
    assert "lower --max-model-len to at most" in err and "--kv-cache-memory / --kv-cache-tokens" in err
    assert peak < PEAK_BOUND, f"peak RSS {peak >> 20} MiB"


def test_max_model_len_sizes_the_cache(fp8lm_bin, tmp_path):
    model = long_context_model(tmp_path, 2 ** 24)
    r, peak = run_measured(fp8lm_bin, *generate_args(model, "--max-model-len", "256"))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["completion_tokens"] == 2
    assert "note: max_model_len" not in r.stderr
    assert f"KV cache bf16, {256 * BYTES_PER_TOKEN / 2 ** 20:.1f} MiB" in r.stderr
    assert peak < PEAK_BOUND


# ---- --max-model-len ----------------------------------------------------------------------


def test_max_model_len_caps_what_generate_generates(run):
    r = run("generate", str(MODEL), "--threads", "2", "--prompt", "It was a dark and stormy night", "--max-tokens",
            "100", "--temperature", "0", "--ignore-eos", "--json", "--max-model-len", "16")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert len(got["prompt_ids"]) + got["completion_tokens"] == 16
    assert got["finish_reason"] == "length"


def test_prompt_beyond_max_model_len_is_refused(run):
    r = run("generate", str(MODEL), "--prompt", "It was a dark and stormy night", "--max-model-len", "4")
    err = assert_clean_error(r)
    assert "max_model_len is 4 tokens" in err and "--max-model-len" in err
    assert r.stdout == ""


def test_chat_accepts_max_model_len(run):
    r = run("chat", str(MODEL), "--threads", "2", "--max-model-len", "64", "--max-tokens", "8", "--ignore-eos",
            input="word " * 80 + "\nHello\n")
    assert r.returncode == 0, r.stderr
    assert "max_model_len is 64 tokens" in r.stderr and "/reset" in r.stderr  # the long turn, and chat goes on
    assert r.stdout.strip()


def data_file(tmp_path):
    f = tmp_path / "data.txt"
    f.write_text("The sea was calm and the old man rowed out beyond the reef. " * 40)
    return f


COMMANDS = {
    "generate": lambda tmp: ("generate", str(MODEL), "--prompt", "hi"),
    "chat": lambda tmp: ("chat", str(MODEL)),
    "bench latency": lambda tmp: ("bench", "latency", str(MODEL), "--input-len", "8", "--output-len", "2"),
    "bench throughput": lambda tmp: ("bench", "throughput", str(MODEL), "--input-len", "8", "--output-len", "2"),
    "bench sweep": lambda tmp: ("bench", "sweep", str(MODEL), "--input-len", "8", "--output-len", "2", "--out-dir",
                                str(tmp / "sweep")),
    "eval perplexity": lambda tmp: ("eval", "perplexity", str(MODEL), "--data", str(data_file(tmp))),
    "serve": lambda tmp: ("serve", str(MODEL), "--port", "0"),
}


@pytest.mark.parametrize("command", COMMANDS)
def test_max_model_len_beyond_the_context_is_refused(run, tmp_path, command):
    err = assert_clean_error(run(*COMMANDS[command](tmp_path), "--max-model-len", str(2 * CONTEXT)))
    assert f"--max-model-len: {2 * CONTEXT} is beyond the model's context of {CONTEXT} tokens" in err


@pytest.mark.parametrize("command", ["generate", "bench latency", "eval perplexity"])
def test_negative_max_model_len_is_refused(run, tmp_path, command):
    err = assert_clean_error(run(*COMMANDS[command](tmp_path), "--max-model-len", "-5"))
    assert "--max-model-len: -5 is negative" in err


def test_bench_lengths_beyond_max_model_len_are_refused(run):
    err = assert_clean_error(run("bench", "latency", str(MODEL), "--input-len", "60", "--output-len", "8",
                                 "--max-model-len", "64"))
    assert "--input-len + --output-len: 60 + 8 = 68 tokens is beyond the context of 64 (--max-model-len" in err


def test_eval_window_beyond_max_model_len_is_refused(run, tmp_path):
    err = assert_clean_error(run("eval", "perplexity", str(MODEL), "--data", str(data_file(tmp_path)), "--ctx", "512",
                                 "--max-model-len", "256"))
    assert "--ctx: 512 is beyond --max-model-len (256)" in err


def test_eval_window_defaults_to_max_model_len(run, tmp_path):
    r = run("eval", "perplexity", str(MODEL), "--threads", "2", "--data", str(data_file(tmp_path)), "--max-model-len",
            "128", "--limit-windows", "1", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ctx"] == 128


# ---- a cache size given beyond the host's memory ------------------------------------------


@pytest.mark.parametrize("flag,value", [("--kv-cache-memory", "64TiB"), ("--kv-cache-tokens", str(2 ** 40))])
def test_cache_size_beyond_host_memory_is_refused_naming_the_flag(fp8lm_bin, flag, value):
    r, peak = run_measured(fp8lm_bin, "generate", str(MODEL), "--prompt", "hi", "--max-tokens", "2", flag, value)
    err = assert_clean_error(r)
    assert f"{flag}: the KV cache would take" in err and "MiB available" in err and "(out of memory)" in err
    assert peak < PEAK_BOUND
