"""`--load-format dummy`: a model from config.json alone (random weights), as a
user runs it for performance work: `inspect` and `bench latency` work on a
directory holding nothing but config.json; commands that need text fail with
a clear error."""
import json

import pytest
from cli_errors import assert_clean_error

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 300,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
}
NO_TOKENIZER = "has no tokenizer.json (--load-format dummy loads config.json alone)"


@pytest.fixture
def model_dir(tmp_path):
    d = tmp_path / "tiny-llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(TINY_LLAMA))
    return d


def test_bench_latency_runs_on_config_alone(run, model_dir):
    r = run("bench", "latency", str(model_dir), "--load-format", "dummy", "--batch-size", "1", "--input-len", "8",
            "--output-len", "4", "--threads", "2")
    assert r.returncode == 0, r.stderr
    assert "fp8lm bench latency: tiny-llama, weights bfloat16" in r.stdout
    for row in ("prefill tok/s", "TTFT ms", "decode tok/s", "TPOT median ms", "weights MiB"):
        assert row in r.stdout
    assert "--load-format dummy" in r.stderr  # the note that the weights are random


def test_bench_latency_fp8_with_calibrated_fp8_kv_cache(run, model_dir, tmp_path):
    out = tmp_path / "bench.json"
    r = run("bench", "latency", str(model_dir), "--load-format", "dummy", "--quantization", "fp8:block",
            "--kv-cache-dtype", "fp8", "--batch-size", "2", "--input-len", "8", "--output-len", "4",
            "--threads", "2", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "weights FP8 fp8-e4m3 w:block128x128" in r.stdout
    assert "calibrated at load on random token ids" in r.stderr
    results = json.loads(out.read_text())["results"]
    assert results["prefill_tok_s"] > 0 and results["decode_tok_s"] > 0


def test_inspect_dummy(run, model_dir):
    r = run("inspect", str(model_dir), "--load-format", "dummy", "--quantization", "fp8")
    assert r.returncode == 0, r.stderr
    assert "files         none: --load-format dummy" in r.stdout
    assert "online fp8:channel" in r.stdout or "fp8:channel" in r.stdout
    j = json.loads(run("inspect", str(model_dir), "--load-format", "dummy", "--json", check=True).stdout)
    assert j["load_format"] == "dummy"
    assert j["files"]["count"] == 0
    # 2 × embeddings + 2 layers of (attention + MLP + norms) + the final norm
    h, i, v, kv = 64, 128, 300, 2 * 16
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * i + 2 * h
    assert j["parameters"] == 2 * v * h + 2 * per_layer + h


def test_without_dummy_the_directory_is_not_a_checkpoint(run, model_dir):
    assert_clean_error(run("inspect", str(model_dir)))


def test_bad_load_format_is_named(run, model_dir):
    err = assert_clean_error(run("inspect", str(model_dir), "--load-format", "pt"))
    assert "--load-format" in err and "'pt'" in err


def test_dummy_without_config_is_named(run, tmp_path):
    err = assert_clean_error(run("bench", "latency", str(tmp_path), "--load-format", "dummy", "--input-len", "8",
                                 "--output-len", "4"))
    assert "config.json" in err


def test_commands_that_need_text_fail_clearly(run, model_dir, tmp_path):
    err = assert_clean_error(run("generate", str(model_dir), "--load-format", "dummy", "--prompt", "Hello",
                                 "--threads", "2"))
    assert NO_TOKENIZER in err
    err = assert_clean_error(run("chat", str(model_dir), "--load-format", "dummy", "--threads", "2", input="hi\n"))
    assert NO_TOKENIZER in err
    data = tmp_path / "text.txt"
    data.write_text("Some text to score. " * 20)
    err = assert_clean_error(run("eval", "perplexity", str(model_dir), "--load-format", "dummy", "--data", str(data),
                                 "--threads", "2"))
    assert NO_TOKENIZER in err
    err = assert_clean_error(run("tokenize", "--model", str(model_dir), "--text", "hi"))
    assert NO_TOKENIZER in err
