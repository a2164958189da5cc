"""`fp8lm bench latency --profile` on the CPU backend: one more iteration with every op timed.
Each op's calls per step must be what the shipped model's forward pass issues — counted here
from config.json, linear layers by their [N, K] — in both the prefill and the decode table,
and the decode roofline must be the bytes a decode step reads (every weight once, of an untied
embedding table only the rows of the step's tokens, the table's size read from the checkpoint's
own safetensors header) at the H200's copy ceiling."""
import json
import re
import struct
from collections import Counter
from pathlib import Path

import pytest

MODEL = Path(__file__).resolve().parents[2] / "models" / "fp8lm-gutenberg-22m"
UNTIED = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "models" / "llama"
CONFIG = json.loads((MODEL / "config.json").read_text())
CEILING_BYTES_PER_S = 4.29e12


def expected_calls_per_step():
    c = CONFIG
    layers, hidden, inter = c["num_hidden_layers"], c["hidden_size"], c["intermediate_size"]
    head_dim = c.get("head_dim") or hidden // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * head_dim, c["num_key_value_heads"] * head_dim
    # Per layer: q, k, v, o, gate, up, down as [N, K] (the CPU fuses none); then the lm_head.
    linears = Counter()
    for n, k in [(q, hidden), (kv, hidden), (kv, hidden), (hidden, q), (inter, hidden), (inter, hidden),
                 (hidden, inter)]:
        linears[f"{n}x{k}"] += layers
    linears[f"{c['vocab_size']}x{hidden}"] += 1
    others = {"embedding": 1, "rms_norm": 2,  # the first layer's input norm, the final norm
              "add_rms_norm": 2 * layers - 1, "add": 1, "rope_qk": layers, "attention": layers,
              "silu_mul": layers, "gather_rows": 1, "argmax_rows": 1}
    return linears, others


def run_profiled(run, tmp_path, *flags):
    out = tmp_path / "latency.json"
    r = run("bench", "latency", str(MODEL), "--threads", "2", "--batch-size", "2", "--input-len", "16",
            "--output-len", "4", "--warmup", "0", "--iters", "1", "--profile", "--json", str(out), *flags)
    assert r.returncode == 0, r.stderr
    return r, json.loads(out.read_text())


@pytest.mark.parametrize("max_batched,prefill_calls", [("16384", 1), ("16", 2)])
def test_profile_counts_the_models_ops_per_step(run, tmp_path, max_batched, prefill_calls):
    r, doc = run_profiled(run, tmp_path, "--max-num-batched-tokens", max_batched)
    linears, others = expected_calls_per_step()
    profile = doc["profile"]
    assert profile["prefill"]["steps_per_iteration"] == prefill_calls
    assert profile["decode"]["steps_per_iteration"] == 3
    for kind in ("prefill", "decode"):
        phase = profile[kind]
        got_linears, got_others = Counter(), {}
        for e in phase["ops"]:
            assert e["step"] == kind, e
            assert not e["nested"] and e["s_per_step"] >= 0, e
            m = re.fullmatch(r"linear bf16 (\d+x\d+)", e["op"])
            if m:
                got_linears[m.group(1)] += e["calls_per_step"]
            else:
                got_others[e["op"]] = e["calls_per_step"]
        assert got_linears == linears, kind
        assert got_others == others, kind
        assert sum(e["share"] for e in phase["ops"]) == pytest.approx(1.0)
        assert sum(e["s_per_step"] for e in phase["ops"]) == pytest.approx(phase["ops_sum_s_per_step"])
        assert phase["timed_step_s"] > 0 and phase["profiled_step_s"] > 0
    # The tables on stdout, one per step kind, with the ops' sum against the timed step.
    assert f"op profile, prefill: {prefill_calls} forward call" in r.stdout
    assert "op profile, decode: 3 forward calls per iteration" in r.stdout
    assert "two events per op add ~2 us" in r.stdout
    assert re.search(r"^  attention\s+[\d.]+\s+10\.00\s+[\d.]+%$", r.stdout, re.M), r.stdout


def embedding_table(model):
    """The embedding table's bytes and rows from the checkpoint's safetensors header, and whether
    config.json ties lm_head to it."""
    with open(model / "model.safetensors", "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    t = header["model.embed_tokens.weight"]
    assert t["dtype"] == "BF16"
    rows, cols = t["shape"]
    tied = json.loads((model / "config.json").read_text()).get("tie_word_embeddings", False)
    return {"bytes": rows * cols * 2, "rows": rows, "tied": tied}


# The untied fixture has no tokenizer: its weights come from config.json (--load-format dummy),
# in the checkpoint's shapes and dtype.
@pytest.mark.parametrize("model,flags", [(MODEL, ()), (UNTIED, ("--load-format", "dummy"))], ids=["tied", "untied"])
def test_profile_decode_roofline(run, tmp_path, model, flags):
    batch = 2
    out = tmp_path / "latency.json"
    r = run("bench", "latency", str(model), "--threads", "2", "--batch-size", str(batch), "--input-len", "16",
            "--output-len", "4", "--warmup", "0", "--iters", "1", "--profile", "--json", str(out), *flags)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    roof = doc["profile"]["decode_roofline"]
    weight_bytes = doc["memory"]["weight_bytes"]
    table = embedding_table(model)
    assert doc["memory"]["embedding"] == table
    # A step reads `batch` rows of an untied table, all of a tied one (it is lm_head too).
    step_bytes = weight_bytes if table["tied"] else weight_bytes - table["bytes"] + batch * table["bytes"] // table["rows"]
    assert doc["memory"]["decode_weight_bytes"] == step_bytes
    assert roof["weight_bytes_per_step"] == step_bytes
    assert roof["step_s"] == pytest.approx(step_bytes / CEILING_BYTES_PER_S)
    assert roof["tok_s"] == pytest.approx(batch / roof["step_s"])
    assert roof["share"] == pytest.approx(roof["step_s"] / doc["results"]["tpot_median_s"])
    assert roof["share"] == pytest.approx(doc["results"]["decode_weight_bandwidth_share"])
    embedding = ("the embedding table whole (it is lm_head too)" if table["tied"]
                 else "of the embedding table the rows of the step's tokens")
    assert f"decode roofline: every weight read once per step, {embedding}, at 4.29 TB/s" in r.stdout
    assert doc["profile"]["decode"]["timed_step_s"] == doc["results"]["tpot_median_s"]


def test_roofline_bandwidth_sets_the_shares(run, tmp_path):
    # On another card the shares are of its own measured copy bandwidth.
    r, doc = run_profiled(run, tmp_path, "--roofline-bandwidth", "1.5TB/s")
    roof = doc["profile"]["decode_roofline"]
    assert doc["results"]["ceilings"]["copy_bytes_per_s"] == 1.5e12
    assert roof["step_s"] == pytest.approx(roof["weight_bytes_per_step"] / 1.5e12)
    assert doc["results"]["decode_weight_bandwidth_share"] == pytest.approx(
        doc["memory"]["decode_weight_bytes"] / doc["results"]["tpot_median_s"] / 1.5e12)
    assert "at 1.50 TB/s" in r.stdout
    bad = run("bench", "latency", str(MODEL), "--roofline-bandwidth", "fast", "--output-len", "2")
    assert bad.returncode != 0
    assert "--roofline-bandwidth: 'fast' is not a number" in bad.stderr


def test_profile_without_decode_and_json_without_profile(run, tmp_path):
    out = tmp_path / "latency.json"
    r = run("bench", "latency", str(MODEL), "--threads", "2", "--input-len", "8", "--output-len", "1",
            "--warmup", "0", "--iters", "1", "--profile", "--json", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["profile"]["decode"] is None and doc["profile"]["decode_roofline"] is None
    assert doc["profile"]["prefill"]["steps_per_iteration"] == 1
    assert "op profile, decode" not in r.stdout and "decode roofline" not in r.stdout
    r = run("bench", "latency", str(MODEL), "--threads", "2", "--input-len", "8", "--output-len", "2",
            "--warmup", "0", "--iters", "1", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["profile"] is None
    assert "op profile" not in r.stdout


def test_verify_tokens_feed_each_sequence_k_plus_one_tokens_a_step(run, tmp_path):
    # Issue 42's verify-step cost: each decode step feeds every sequence --verify-tokens tokens,
    # whose extra positions the cache sized for the benchmark holds (16 + 2 + 15 positions: three
    # blocks of 16 a sequence instead of two); out of range is refused by name.
    docs = {}
    for v in ("1", "16"):
        out = tmp_path / f"v{v}.json"
        r = run("bench", "latency", str(MODEL), "--threads", "2", "--batch-size", "2", "--input-len", "16",
                "--output-len", "2", "--warmup", "0", "--iters", "1", "--verify-tokens", v, "--json", str(out))
        assert r.returncode == 0, r.stderr
        docs[v] = json.loads(out.read_text())
    assert docs["1"]["config"]["verify_tokens"] == 1 and docs["16"]["config"]["verify_tokens"] == 16
    assert docs["1"]["config"]["kv_cache_tokens"] == 2 * 32
    assert docs["16"]["config"]["kv_cache_tokens"] == 2 * 48
    assert docs["16"]["per_iteration"]["tpot_median_s"][0] > 0
    for bad in ("0", "18"):
        r = run("bench", "latency", str(MODEL), "--verify-tokens", bad, "--output-len", "2")
        assert r.returncode != 0
        assert f"--verify-tokens: {bad} is outside 1 … 17" in r.stderr
