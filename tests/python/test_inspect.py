"""`fp8lm inspect` on checkpoints written by their real producers (transformers,
LLM Compressor, FineGrainedFP8; ModelOpt/FBGEMM from the documented layout):
the per-module schemes must be the ones each producer recorded in its
expected.json, and bad input must be a named error, never a crash."""
import json
import shutil
import struct
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "checkpoints"
# The shipped models, not the EAGLE-3 heads beside them (tested below as such).
SHIPPED = sorted(p for p in (REPO / "models").glob("*/config.json")
                 if "speculators_model_type" not in json.loads(p.read_text()))
HEADS = sorted(p.parent for p in (REPO / "models").glob("*/config.json")
               if "speculators_model_type" in json.loads(p.read_text()))
FIXTURE_NAMES = sorted(p.parent.name for p in FIXTURES.glob("*/expected.json"))


def inspect_json(run, *args):
    r = run("inspect", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def safetensors_numel(path: Path) -> dict:
    """Tensor name -> element count, read from the header with the stdlib only."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, t in header.items():
        count = 1
        for d in t["shape"]:
            count *= d
        out[name] = count
    return out


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_schemes_match_the_producer(run, name):
    expected = json.loads((FIXTURES / name / "expected.json").read_text())
    got = inspect_json(run, str(FIXTURES / name))
    assert got["quantization"]["format"] == expected["format"]
    assert got["modules"] == expected["modules"]
    assert got["kv_cache"]["dtype"] == expected["kv_cache"]["dtype"]
    assert got["kv_cache"]["k_scale_name"] == expected["kv_cache"]["k_scale_name"]
    assert got["files"]["tensors"] == len(expected["tensors"])
    assert sum(d["tensors"] for d in got["dtypes"].values()) == len(expected["tensors"])


@pytest.mark.parametrize("head", HEADS, ids=lambda p: p.name)
def test_a_shipped_head_is_named_as_such(run, head):
    r = run("inspect", str(head))
    assert r.returncode != 0
    assert "an EAGLE-3 head" in r.stderr and "--speculative-config" in r.stderr


@pytest.mark.parametrize("config", SHIPPED, ids=lambda p: p.parent.name)
def test_shipped_model(run, config):
    model = config.parent
    got = inspect_json(run, str(model))
    cfg = json.loads(config.read_text())
    assert got["architecture"] == cfg["architectures"][0]
    assert got["config"]["num_hidden_layers"] == cfg["num_hidden_layers"]
    assert got["quantization"]["format"] == "none"
    # a BF16 checkpoint: every stored element is a parameter
    assert got["parameters"] == sum(safetensors_numel(model / "model.safetensors").values())
    mem = got["memory"]
    assert mem["weights_bf16_bytes"] == 2 * got["parameters"]
    assert mem["weights_fp8_bytes"] < mem["weights_bf16_bytes"]
    kv_heads, head_dim = cfg["num_key_value_heads"], cfg["hidden_size"] // cfg["num_attention_heads"]
    assert mem["kv_cache_bytes_per_token_bf16"] == 2 * cfg["num_hidden_layers"] * kv_heads * head_dim * 2
    text = run("inspect", str(model))
    assert text.returncode == 0, text.stderr
    for part in ("architecture", "linear layers", "weights", "kv per token"):
        assert part in text.stdout


def test_online_block_quantization_override(run):
    got = inspect_json(run, str(FIXTURES / "llama_bf16"), "--quantization", "fp8:block")
    assert got["quantization"]["online"] is True
    for module, scheme in got["modules"].items():
        if module == "lm_head":
            assert scheme == {"quantized": False}
        else:
            assert scheme["weight_scales"] == "block" and scheme["group_rows"] == 128
            assert scheme["activation"] == "dynamic-group" and scheme["weights_serialized"] is False


def test_fp8_kv_cache_without_scales_warns(run):
    got = inspect_json(run, str(FIXTURES / "llama_bf16"), "--kv-cache-dtype", "fp8")
    assert got["kv_cache"]["dtype"] == "fp8_e4m3"
    assert any("scales" in w for w in got["warnings"])
    assert got["memory"]["kv_cache_bytes_per_token_fp8"] * 2 == got["memory"]["kv_cache_bytes_per_token_bf16"]


def error_of(run, *args):
    r = run("inspect", *args)
    assert r.returncode != 0, r.stdout
    assert "internal error" not in r.stderr and "terminate" not in r.stderr
    return r.stderr


def test_errors_are_named(run, tmp_path):
    assert "not a model directory" in error_of(run, str(tmp_path / "missing"))
    assert "config.json" in error_of(run, str(tmp_path))

    model = tmp_path / "awq"
    shutil.copytree(FIXTURES / "llama_bf16", model)
    cfg = json.loads((model / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "awq", "bits": 4}
    (model / "config.json").write_text(json.dumps(cfg))
    err = error_of(run, str(model))
    assert "awq" in err and "compressed-tensors" in err

    (model / "config.json").write_text("{\"architectures\": [")
    assert "not valid JSON" in error_of(run, str(model))

    shutil.copy(FIXTURES / "llama_bf16" / "config.json", model / "config.json")
    data = (model / "model.safetensors").read_bytes()
    (model / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert "model.safetensors" in error_of(run, str(model))

    err = error_of(run, str(FIXTURES / "ct_fp8_dynamic_llama"), "--quantization", "fp8")
    assert "--quantization" in err or "already" in err
    assert "fp8_e3m4" in error_of(run, str(FIXTURES / "llama_bf16"), "--kv-cache-dtype", "fp8_e3m4")
