#!/usr/bin/env python3
"""Make the DeepSeek-V3 references of `fp8lm quantize` (tests/fixtures/quantize/deepseek_*) with LLM Compressor.

The sources are the BF16 tiny DeepseekV3ForCausalLM checkpoints of tests/fixtures/models/deepseek/
(tools/make_deepseek_fixtures.py): deepseek_v3 (q_lora_rank 32, kv_a_proj_with_mqa 144 rows: one
whole 128-row block and a ragged one, 1 dense layer then 2 MoE layers of 8 experts + shared
experts) and deepseek_v3_no_q_lora (q_proj, 1 dense + 1 MoE layer, and a multi-token-prediction
layer model.layers.2.* on disk). Each case is LLM Compressor's `oneshot` +
`save_pretrained(save_compressed=True)` with QuantizationModifier(targets="Linear", scheme=S,
ignore=IGNORE), the routers ignored by regex as LLM Compressor's DeepSeek examples do:

  deepseek_v3_FP8_DYNAMIC        ignore lm_head, re:.*mlp.gate$              (all files)
  deepseek_v3_FP8_BLOCK          ignore lm_head, re:.*mlp.gate$              (all files)
  deepseek_v3_FP8_DYNAMIC_ignore + every expert of layer 2, layer 1's shared experts and
                                 model.layers.1.self_attn.kv_a_proj_with_mqa (config.json: the
                                 order of `ignore`; model.safetensors' header only, to stay small)
  deepseek_v3_no_q_lora_FP8_BLOCK  ignore lm_head, re:.*mlp.gate$ (config.json, header only): the
                                 MTP layer is NOT written (transformers does not load it)

What LLM Compressor 0.14.0.1 (transformers 5.17.0) does with DeepSeek-V3, asserted on the bytes:
  * every nn.Linear is quantized: q_a_proj / q_b_proj (or q_proj), kv_a_proj_with_mqa (144 rows, not
    a multiple of 128: ragged blocks), kv_b_proj, o_proj, the dense MLPs, every routed expert
    (unpacked from transformers' fused DeepseekV3Experts) and the shared experts;
  * the router mlp.gate is a DeepseekV3TopkRouter, not an nn.Linear: never quantized, yet
    compressed-tensors lists it in `ignore` (with or without the recipe's regex: asserted);
  * mlp.gate.e_score_correction_bias is a float32 buffer in transformers, so it is written F32
    (the BF16 source widened, exactly);
  * `ignore` in module order: attention, the experts (each up, gate, down), the router, then the
    shared experts (DeepseekV3MoE defines experts, gate, shared_experts in that order), lm_head last.
Plus the checks of make_quantize_moe_fixtures.py: every weight_scale and FP8 code re-derived from the
BF16 source, every other tensor the source's byte for byte, the tensor set exact, the file equal to
save_file's, config.json = json.dumps(source config + quantization_config, indent=2, sort_keys=True);
each case made twice (two processes), byte-identical.

    python3 -m venv /tmp/venv-llmc && /tmp/venv-llmc/bin/pip install llmcompressor   # 0.14.0.1
    /tmp/venv-llmc/bin/python tools/make_quantize_deepseek_fixtures.py [--check-only]

About a minute on two cores. Running it twice changes nothing.
"""

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_quantize_fixtures as dense  # noqa: E402  (the shared arithmetic and checks)

REPO = dense.REPO
SOURCES = REPO / "tests/fixtures/models/deepseek"
OUT = REPO / "tests/fixtures/quantize"
IGNORE = ["lm_head", "re:.*mlp.gate$"]
EXTRA = [r"re:.*layers\.2\.mlp\.experts\..*", r"re:.*layers\.1\.mlp\.shared_experts\..*",
         "model.layers.1.self_attn.kv_a_proj_with_mqa"]
CASES = {  # fixture folder: (source, scheme, recipe ignore, whole model.safetensors committed)
    "deepseek_v3_FP8_DYNAMIC": ("deepseek_v3", "FP8_DYNAMIC", IGNORE, True),
    "deepseek_v3_FP8_BLOCK": ("deepseek_v3", "FP8_BLOCK", IGNORE, True),
    "deepseek_v3_FP8_DYNAMIC_ignore": ("deepseek_v3", "FP8_DYNAMIC", IGNORE + EXTRA, False),
    "deepseek_v3_no_q_lora_FP8_BLOCK": ("deepseek_v3_no_q_lora", "FP8_BLOCK", IGNORE, False),
    # Not committed: the recipe without the router regex gives the same `ignore` (asserted).
    "_deepseek_v3_FP8_DYNAMIC_no_router_regex": ("deepseek_v3", "FP8_DYNAMIC", ["lm_head"], None),
}
SHARED_1 = [f"model.layers.1.mlp.shared_experts.{p}" for p in ("gate_proj", "up_proj", "down_proj")]
EXPERTS_2 = [f"model.layers.2.mlp.experts.{e}.{p}" for e in range(8) for p in ("up_proj", "gate_proj", "down_proj")]
ROUTERS = ["model.layers.1.mlp.gate", "model.layers.2.mlp.gate", "lm_head"]
EXPECTED_IGNORE = {
    "deepseek_v3_FP8_DYNAMIC": ROUTERS,
    "deepseek_v3_FP8_BLOCK": ROUTERS,
    "deepseek_v3_FP8_DYNAMIC_ignore": ["model.layers.1.self_attn.kv_a_proj_with_mqa", "model.layers.1.mlp.gate"] +
                                      SHARED_1 + EXPERTS_2 + ["model.layers.2.mlp.gate", "lm_head"],
    "deepseek_v3_no_q_lora_FP8_BLOCK": ["model.layers.1.mlp.gate", "lm_head"],
    "_deepseek_v3_FP8_DYNAMIC_no_router_regex": ROUTERS,
}
HEADER = "model.safetensors.header"  # the 8-byte length + JSON header of LLM Compressor's file


def worker(spec: dict):
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(spec["src"], dtype=torch.bfloat16)
    linears = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    routers = [n for n, m in model.named_modules() if n.endswith("mlp.gate")]
    assert routers and not any(r in linears for r in routers), "the router is an nn.Linear now"
    oneshot(model=model, recipe=QuantizationModifier(targets="Linear", scheme=spec["scheme"], ignore=spec["ignore"]))
    model.save_pretrained(spec["dst"], save_compressed=True)


def header_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return data[:8 + int.from_bytes(data[:8], "little")]


def make(out: Path) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix="ds-quantize-"))
    specs = {name: {"src": str(SOURCES / src), "scheme": scheme, "ignore": ignore}
             for name, (src, scheme, ignore, _) in CASES.items()}
    dense.run_workers_twice(Path(__file__).resolve(), specs, tmp, {name: dense.FILES for name in CASES})
    for name, (_, _, _, whole) in CASES.items():
        if whole is None:
            continue
        dst = out / name
        if dst.exists():
            shutil.rmtree(dst)
        dst.mkdir(parents=True)
        for f in dense.FILES:
            if f != "model.safetensors" or whole:
                shutil.copy(tmp / "a" / name / f, dst / f)
        (dst / HEADER).write_bytes(header_bytes(tmp / "a" / name / "model.safetensors"))
    return tmp / "a"


def check(folder: Path, made: Path, src: str, scheme: str, name: str):
    """folder: the committed fixture; made: LLM Compressor's whole output (the fixture itself when
    its model.safetensors is committed)."""
    from safetensors.torch import load_file, save_file
    strategy = dense.WEIGHT_STRATEGY[scheme]
    source = load_file(str(SOURCES / src / "model.safetensors"))
    cfg = json.loads((SOURCES / src / "config.json").read_text())
    mtp = [f"model.layers.{cfg['num_hidden_layers'] + i}." for i in range(cfg.get("num_nextn_predict_layers", 0))]
    fx = load_file(str(made / "model.safetensors"))
    assert dense.read_header(made / "model.safetensors")["__metadata__"] == {"format": "pt"}
    if (folder / HEADER).exists():
        assert (folder / HEADER).read_bytes() == header_bytes(made / "model.safetensors"), name
    kept = set(EXPECTED_IGNORE[name])
    expected, codes_checked, dropped = set(), 0, 0
    for n, w in source.items():
        if any(n.startswith(p) for p in mtp):
            dropped += 1  # the MTP layer: transformers does not load it, so it is not written
            continue
        mod = n[: -len(".weight")] if n.endswith(".weight") else None
        quantized = w.dim() == 2 and mod not in kept and "embed_tokens" not in n and not n.endswith("mlp.gate.weight")
        expected.add(n)
        if n.endswith("e_score_correction_bias"):
            # a float32 buffer in transformers: the BF16 source widened exactly
            assert fx[n].dtype == torch.float32 and torch.equal(fx[n], w.float()), n
            continue
        if not quantized:
            assert fx[n].dtype == w.dtype and torch.equal(fx[n].view(torch.int16), w.view(torch.int16)), n
            continue
        pmod = n[: -len(".weight")]
        expected.add(pmod + ".weight_scale")
        scale, codes = fx[pmod + ".weight_scale"], fx[n]
        ref_scale = dense.weight_scale(w, strategy)
        assert scale.dtype == torch.bfloat16 and torch.equal(scale.view(torch.int16), ref_scale.view(torch.int16)), n
        assert codes.dtype == torch.float8_e4m3fn and torch.equal(codes.view(torch.uint8),
                                                                  dense.weight_codes(w, ref_scale, strategy)), n
        codes_checked += codes.numel()
    assert set(fx) == expected, set(fx) ^ expected
    if src == "deepseek_v3_no_q_lora":  # the one source with an MTP layer on disk
        assert dropped > 0, name
    with tempfile.TemporaryDirectory() as tmp:
        save_file(fx, f"{tmp}/m.safetensors", metadata={"format": "pt"})
        assert Path(f"{tmp}/m.safetensors").read_bytes() == (made / "model.safetensors").read_bytes(), name
    qc = dense.expected_qconfig(scheme, False)
    qc["ignore"] = EXPECTED_IGNORE[name]
    text = (made / "config.json").read_text()
    assert json.loads(text)["quantization_config"] == qc, json.loads(text)["quantization_config"]["ignore"]
    assert text == json.dumps({**cfg, "quantization_config": qc}, indent=2, sort_keys=True), name
    if folder != made and folder.exists():
        assert (folder / "config.json").read_bytes() == (made / "config.json").read_bytes(), name
    print(f"{name}: bytes verified, {codes_checked} codes, {dropped} MTP tensors not written, "
          f"ignore = {EXPECTED_IGNORE[name]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--check-only", action="store_true",
                    help="only check the fixtures whose model.safetensors is committed")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    torch.set_num_threads(1)
    out = Path(args.out)
    made = None if args.check_only else make(out)
    for name, (src, scheme, _, whole) in CASES.items():
        if made is None and not whole:
            continue
        check(out / name, out / name if whole else made / name, src, scheme, name)
    if made is not None:
        shutil.rmtree(made.parent)


if __name__ == "__main__":
    main()
