"""`--kv-cache-memory` (vLLM's flag): the KV cache sized in bytes instead of tokens. The
capacity must be the whole blocks of 16 tokens that fit in the bytes given at the cache's
element size (BF16: 2 bytes, FP8: 1) — computed here from config.json — and every bad value
is a named error, never a crash."""
import json
import re
from pathlib import Path

import pytest

MODEL = Path(__file__).resolve().parents[2] / "models" / "fp8lm-gutenberg-22m"
CONFIG = json.loads((MODEL / "config.json").read_text())
BLOCK = 16


def bytes_per_token(element_bytes):
    head_dim = CONFIG.get("head_dim") or CONFIG["hidden_size"] // CONFIG["num_attention_heads"]
    return 2 * CONFIG["num_hidden_layers"] * CONFIG["num_key_value_heads"] * head_dim * element_bytes


def kv_tokens(run, *flags):
    r = run("bench", "latency", str(MODEL), "--threads", "2", "--batch-size", "1", "--input-len", "8",
            "--output-len", "2", "--warmup", "0", "--iters", "1", *flags)
    assert r.returncode == 0, r.stderr
    return int(re.search(r"KV cache tokens\s+(\d+)", r.stdout).group(1))


@pytest.mark.parametrize("size,nbytes", [("64MiB", 64 << 20), ("50M", 50_000_000), ("1.5Mi", 3 << 19),
                                         ("20000000", 20_000_000), ("0.02GB", 20_000_000)])
@pytest.mark.parametrize("kv,element_bytes", [("auto", 2), ("fp8", 1)])
def test_capacity_is_whole_blocks_of_the_bytes(run, size, nbytes, kv, element_bytes):
    want = nbytes // bytes_per_token(element_bytes) // BLOCK * BLOCK
    assert kv_tokens(run, "--kv-cache-memory", size, "--kv-cache-dtype", kv) == want


@pytest.mark.parametrize("value,message", [
    ("8XB", "unknown unit 'XB'"),
    ("1e6", "unknown unit 'e6'"),
    ("0", "less than one byte"),
    ("0.5", "less than one byte"),
    (".", "is not a size"),
    ("1.2.3G", "is not a size"),
    ("GiB", "is not a size"),
    ("-5", "is not a size"),
    ("99999999999T", "beyond 2^64"),
    ("100", "hold no block"),
])
def test_bad_sizes_are_named_errors(run, value, message):
    r = run("generate", str(MODEL), "--prompt", "hi", "--max-tokens", "2", "--kv-cache-memory", value)
    assert r.returncode != 0
    assert "--kv-cache-memory" in r.stderr and message in r.stderr, r.stderr
    assert "terminate called" not in r.stderr


def test_tokens_and_memory_together_is_an_error(run):
    r = run("generate", str(MODEL), "--prompt", "hi", "--kv-cache-memory", "64MiB", "--kv-cache-tokens", "100")
    assert r.returncode != 0
    assert "--kv-cache-tokens and --kv-cache-memory" in r.stderr
