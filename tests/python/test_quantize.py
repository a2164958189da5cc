"""`fp8lm quantize` as a user runs it: the output loads and runs in fp8lm, data-free presets
equal LLM Compressor's files byte for byte (tests/fixtures/quantize), and bad input — an
unknown scheme, a missing or empty calibration file, an output that exists, an FP8 input —
is refused with a named error and leaves nothing behind."""
import json
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "models"
REF = REPO / "tests" / "fixtures" / "quantize"
SHIPPED = REPO / "models" / "fp8lm-gutenberg-22m"
CALIB_TEXT = REPO / "src" / "calibration" / "calibration_text.txt"


def assert_error(r, *needles):
    assert r.returncode != 0, r.stdout
    assert "fp8lm: error:" in r.stderr and "internal error" not in r.stderr, r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr


@pytest.mark.parametrize("model,scheme", [("llama", "FP8_DYNAMIC"), ("llama", "FP8_BLOCK"),
                                          ("qwen3", "FP8_DYNAMIC"), ("qwen3", "FP8_BLOCK")])
def test_data_free_presets_equal_llm_compressor(run, tmp_path, model, scheme):
    out = tmp_path / "out"
    r = run("quantize", str(TINY / model), "--out", str(out), "--scheme", scheme)
    assert r.returncode == 0, r.stderr
    for f in ("config.json", "model.safetensors"):
        assert (out / f).read_bytes() == (REF / f"{model}_{scheme}" / f).read_bytes(), f


CHECKPOINTS = REPO / "tests" / "fixtures" / "checkpoints"


# MoE (tools/make_quantize_moe_fixtures.py): routers and lm_head kept, `ignore` by module name.
@pytest.mark.parametrize("scheme,ignore,ref", [
    ("FP8_BLOCK", [], CHECKPOINTS / "ct_fp8_block_qwen3_moe"),
    ("FP8_DYNAMIC", [], REF / "moe_qwen3_FP8_DYNAMIC"),
    ("FP8_DYNAMIC", [r"re:.*layers\.1\.mlp\.experts\..*", "model.layers.0.self_attn.o_proj"],
     REF / "moe_qwen3_FP8_DYNAMIC_ignore"),
])
def test_moe_presets_equal_llm_compressor(run, tmp_path, scheme, ignore, ref):
    out = tmp_path / "out"
    flags = [a for p in ignore for a in ("--ignore", p)]
    r = run("quantize", str(CHECKPOINTS / "qwen3_moe_bf16"), "--out", str(out), "--scheme", scheme, *flags)
    assert r.returncode == 0, r.stderr
    assert "kept in bfloat16: " in r.stdout and "model.layers.1.mlp.gate" in r.stdout
    for f in ("config.json", "model.safetensors"):
        assert (out / f).read_bytes() == (ref / f).read_bytes(), f


# (The static preset on MoE models is calibrated and compared with LLM Compressor in
# tests/cpp/test_quantize.cpp: the tiny fixtures have no tokenizer for --calib text.)
@pytest.mark.parametrize("args,needles", [
    (["--ignore", "model.layers.0.mlp.experts.1.down_proj"],
     ["--ignore keeps model.layers.0.mlp.experts.1.down_proj", "as one block with one scheme"]),
])
def test_moe_refusals_are_named_and_leave_nothing(run, tmp_path, args, needles):
    r = run("quantize", str(CHECKPOINTS / "qwen3_moe_bf16"), "--out", str(tmp_path / "out"), *args)
    assert_error(r, *needles)
    assert list(tmp_path.iterdir()) == []


def test_shipped_model_static_fp8_with_kv_scales_runs(run, tmp_path):
    out = tmp_path / "q"
    r = run("quantize", str(SHIPPED), "--out", str(out), "--scheme", "FP8", "--kv-cache-dtype", "fp8",
            "--calib", str(CALIB_TEXT), "--calib-samples", "4", "--calib-seq-len", "128", "--threads", "2")
    assert r.returncode == 0, r.stderr
    assert "calibrated on 4 samples" in r.stderr
    cfg = json.loads((out / "config.json").read_text())
    q = cfg["quantization_config"]
    assert q["quant_method"] == "compressed-tensors" and q["kv_cache_scheme"]["type"] == "float"
    assert q["config_groups"]["group_0"]["input_activations"]["strategy"] == "tensor"
    # tokenizer and generation files come along; the input is untouched
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (out / f).read_bytes() == (SHIPPED / f).read_bytes()
    info = json.loads(run("inspect", str(out), "--json").stdout)
    assert len(info["kv_cache"]["k_scales"]) == 10 and min(info["kv_cache"]["k_scales"]) > 0
    g = run("generate", str(out), "--prompt", "It was a dark and stormy night", "--max-tokens", "8", "--threads", "2")
    assert g.returncode == 0, g.stderr
    assert "KV scales per layer" in g.stderr and "calibrated at load" not in g.stderr


@pytest.mark.parametrize("args,needles", [
    (["--scheme", "FP4"], ["--scheme", "FP4"]),
    (["--scheme", "FP8"], ["--calib"]),
    (["--kv-cache-dtype", "fp8"], ["--calib"]),
    (["--scheme", "FP8", "--calib", "/nonexistent/calib.txt"], ["/nonexistent/calib.txt"]),
    (["--kv-cache-dtype", "fp8_e5m2", "--calib", str(CALIB_TEXT)], ["fp8_e5m2"]),
    (["--calib-samples", "0"], ["--calib-samples"]),
    (["--ignore", "re:("], ["--ignore"]),
])
def test_bad_flags_are_named_and_leave_nothing(run, tmp_path, args, needles):
    out = tmp_path / "out"
    r = run("quantize", str(TINY / "llama"), "--out", str(out), *args)
    assert_error(r, *needles)
    assert list(tmp_path.iterdir()) == []


def test_empty_calibration_file(run, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    r = run("quantize", str(SHIPPED), "--out", str(tmp_path / "out"), "--scheme", "FP8", "--calib", str(empty))
    assert_error(r, "empty")
    assert not (tmp_path / "out").exists()


def test_existing_output_is_never_overwritten(run, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    r = run("quantize", str(TINY / "llama"), "--out", str(out))
    assert_error(r, "already exists")
    assert (out / "mine.txt").read_text() == "keep me" and len(list(out.iterdir())) == 1


def test_fp8_input_is_refused(run, tmp_path):
    r = run("quantize", str(REF / "llama_FP8_DYNAMIC"), "--out", str(tmp_path / "out"))
    assert_error(r, "already quantized")


# Issue 16 (11): --out used to be checked only for existence (a dangling
# symbolic link does not "exist"): the whole quantization ran, then moving the
# result into place failed with "internal error: filesystem error". Every path
# problem is now refused before any work, naming the path.
def test_dangling_symlink_output_is_refused_first(run, tmp_path):
    out = tmp_path / "out"
    out.symlink_to(tmp_path / "nowhere")
    r = run("quantize", str(TINY / "llama"), "--out", str(out))
    assert_error(r, str(out), "symbolic link", "does not exist")
    assert out.is_symlink() and not (tmp_path / "nowhere").exists()
    assert "writing" not in r.stderr  # refused before any work


@pytest.mark.parametrize("kind", ["file", "parent_is_file", "missing_parent", "inside_input", "equal_to_input"])
def test_bad_output_paths_are_named_and_leave_nothing(run, tmp_path, kind):
    model = tmp_path / "model"
    shutil.copytree(TINY / "llama", model)
    before = sorted(p.name for p in model.iterdir())
    if kind == "file":
        out = tmp_path / "out"
        out.write_text("keep me")
        needles = [str(out), "already exists"]
    elif kind == "parent_is_file":
        (tmp_path / "f").write_text("x")
        out = tmp_path / "f" / "out"
        needles = [str(out), "not an existing directory"]
    elif kind == "missing_parent":
        out = tmp_path / "no" / "such" / "out"
        needles = [str(out), "not an existing directory"]
    elif kind == "inside_input":
        out = model / "q"
        needles = [str(out), "inside the input model"]
    else:
        out = model
        needles = [str(out), "already exists"]
    r = run("quantize", str(model), "--out", str(out))
    assert_error(r, *needles)
    assert "writing" not in r.stderr
    assert sorted(p.name for p in model.iterdir()) == before
    if kind == "file":
        assert out.read_text() == "keep me"
    assert not (tmp_path / "no").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_unwritable_output_parent_is_refused_first(run, tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        r = run("quantize", str(TINY / "llama"), "--out", str(parent / "out"))
        assert_error(r, str(parent), "not writable")
    finally:
        parent.chmod(0o700)


def test_output_with_trailing_slash_is_the_directory(run, tmp_path):
    out = tmp_path / "out"
    r = run("quantize", str(TINY / "llama"), "--out", str(out) + "/")
    assert r.returncode == 0, r.stderr
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_full_disk_is_named_and_leaves_nothing(fp8lm_bin, tmp_path):
    """quantize into a file system that fills up: the error says "No space left on device" (it
    said "Input/output error" where the writeback failed), and nothing is left behind. The small
    file system is a tmpfs in a mount namespace of its own (unshare), where the machine allows it."""
    import subprocess
    disk = tmp_path / "disk"
    disk.mkdir()
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=4m tmpfs {disk}"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace with a tmpfs here: {probe.stderr.strip()}")
    model = tmp_path / "model"
    shutil.copytree(SHIPPED, model)
    before = {p.name: p.stat().st_size for p in model.iterdir()}
    script = (f"mount -t tmpfs -o size=4m tmpfs {disk} && {fp8lm_bin} quantize {model} --out {disk}/out "
              f"--scheme FP8_DYNAMIC; rc=$?; ls -A {disk}; exit $rc")
    r = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=120)
    assert_error(r, "No space left on device", "MiB free on the file system")
    assert "Input/output error" not in r.stderr.split("(the system said")[0], r.stderr
    assert r.stdout.strip() == "", f"left behind: {r.stdout}"
    assert {p.name: p.stat().st_size for p in model.iterdir()} == before
