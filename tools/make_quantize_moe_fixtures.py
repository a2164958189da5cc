#!/usr/bin/env python3
"""Make the MoE references of `fp8lm quantize` (tests/fixtures/quantize/moe_*) with LLM Compressor.

The sources are the BF16 tiny MoE checkpoints of tests/fixtures/checkpoints/ (qwen3_moe_bf16,
mixtral_bf16: 2 layers, 4 experts, hidden 64, so every 128x128 block is ragged). Each case is
LLM Compressor's `oneshot` + `save_pretrained(save_compressed=True)` with
QuantizationModifier(targets="Linear", scheme=S, ignore=IGNORE), the routers ignored by regex as
LLM Compressor's MoE examples do:

  moe_qwen3_FP8_DYNAMIC         ignore lm_head, re:.*mlp.gate$
  moe_qwen3_FP8_DYNAMIC_ignore  + every expert of layer 1 and model.layers.0.self_attn.o_proj
                                (the order of `ignore` in config.json: the model's module order)
  moe_mixtral_FP8_BLOCK         ignore lm_head, re:.*block_sparse_moe.gate$
  moe_qwen3_FP8                 ignore lm_head, re:.*mlp.gate$; static input scales calibrated on
                                quantize/calibration_ids.json (4 x 32 ids, batch 1, that order)

(Qwen3-MoE FP8_BLOCK is tests/fixtures/checkpoints/ct_fp8_block_qwen3_moe, same recipe.)

Checked every run, against the bytes (tests/fixtures/quantize/README.md, "MoE"):
  * every weight_scale and FP8 code re-derived from the BF16 source (make_quantize_fixtures.py's
    arithmetic), every other tensor the source's byte for byte, the tensor set exact;
  * model.safetensors is safetensors' save_file of those tensors with metadata {"format": "pt"};
  * config.json is json.dumps(source config + quantization_config, indent=2, sort_keys=True)
    with `ignore` the unquantized modules by name (asserted: EXPECTED_IGNORE);
  * Mixtral: LLM Compressor (with transformers 5.17) writes the experts as
    block_sparse_moe.experts.E.gate_proj / up_proj / down_proj, not the checkpoint's w1 / w3 / w2
    (asserted), so those are mapped back to the source's names for the checks;
  * each checkpoint is made twice (two processes) and must come out byte-identical;
  * moe_qwen3_FP8 (calibrated): every input_scale replayed bit for bit, and what LLM Compressor's
    default `moe_calibrate_all_experts=True` means asserted on the bytes: EVERY expert sees EVERY
    token (not only the rows routed to it) -- gate/up's input_scale is the amax of the layer's whole
    post-attention-norm output, down's the amax of that expert's SwiGLU over all tokens; and how
    close a float32 forward pass comes (fp8lm calibrates in float32), printed for the README.

Run with the LLM Compressor venv (llmcompressor 0.14.0.1; see make_quantize_fixtures.py):

    python3 -m venv /tmp/llmc && /tmp/llmc/bin/pip install llmcompressor==0.14.0.1
    /tmp/llmc/bin/python tools/make_quantize_moe_fixtures.py [--check-only]

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
CHECKPOINTS = REPO / "tests/fixtures/checkpoints"
OUT = REPO / "tests/fixtures/quantize"
QWEN_IGNORE = ["lm_head", "re:.*mlp.gate$"]
CASES = {  # fixture folder: (source checkpoint, scheme, recipe ignore)
    "moe_qwen3_FP8_DYNAMIC": ("qwen3_moe_bf16", "FP8_DYNAMIC", QWEN_IGNORE),
    "moe_qwen3_FP8_DYNAMIC_ignore": ("qwen3_moe_bf16", "FP8_DYNAMIC",
                                     QWEN_IGNORE + [r"re:.*layers\.1\.mlp\.experts\..*",
                                                    "model.layers.0.self_attn.o_proj"]),
    "moe_mixtral_FP8_BLOCK": ("mixtral_bf16", "FP8_BLOCK", ["lm_head", "re:.*block_sparse_moe.gate$"]),
    "moe_qwen3_FP8": ("qwen3_moe_bf16", "FP8", QWEN_IGNORE),
}
CALIBRATED = {"moe_qwen3_FP8"}  # scheme FP8: static input scales from the dense fixtures' calibration ids
# What compressed-tensors wrote as `ignore` (not the recipe's list): each unquantized Linear by
# name in named_modules() order -- an MoE block's experts (each up, gate, down) before its router.
EXPERTS_1 = [f"model.layers.1.mlp.experts.{e}.{p}" for e in range(4) for p in ("up_proj", "gate_proj", "down_proj")]
EXPECTED_IGNORE = {
    "moe_qwen3_FP8_DYNAMIC": ["model.layers.0.mlp.gate", "model.layers.1.mlp.gate", "lm_head"],
    "moe_qwen3_FP8_DYNAMIC_ignore": ["model.layers.0.self_attn.o_proj", "model.layers.0.mlp.gate"] + EXPERTS_1 +
                                    ["model.layers.1.mlp.gate", "lm_head"],
    "moe_mixtral_FP8_BLOCK": ["model.layers.0.block_sparse_moe.gate", "model.layers.1.block_sparse_moe.gate",
                              "lm_head"],
    "moe_qwen3_FP8": ["model.layers.0.mlp.gate", "model.layers.1.mlp.gate", "lm_head"],
}
MIXTRAL_NAMES = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}  # source name -> LLM Compressor's


def worker(spec: dict):
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(spec["src"], dtype=torch.bfloat16)
    kwargs, seen = {}, []
    if spec["calibrate"]:
        # As make_quantize_fixtures.py's llama_FP8_kv: the tokenized ids as the dataset, a dummy
        # tokenizer (oneshot insists on one), dataset order, batch 1. moe_calibrate_all_experts
        # is left at oneshot's default (True).
        from datasets import Dataset
        from tokenizers import Tokenizer
        from tokenizers.models import WordLevel
        from transformers import PreTrainedTokenizerFast
        ids = dense.calibration_ids()
        tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")))
        kwargs = dict(processor=tok, dataset=Dataset.from_dict({"input_ids": ids}),
                      num_calibration_samples=dense.CALIB_SEQS, max_seq_length=dense.CALIB_LEN,
                      shuffle_calibration_samples=False, batch_size=1)
        model.model.embed_tokens.register_forward_pre_hook(lambda m, a: seen.append(a[0].tolist()))
    oneshot(model=model, recipe=QuantizationModifier(targets="Linear", scheme=spec["scheme"], ignore=spec["ignore"]),
            **kwargs)
    model.save_pretrained(spec["dst"], save_compressed=True)
    if spec["calibrate"]:
        order = [ids.index(s[0]) for s in seen[:dense.CALIB_SEQS]]
        assert all(len(s) == 1 for s in seen) and order == list(range(dense.CALIB_SEQS)), seen


def make(out: Path):
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        specs = {name: {"src": str(CHECKPOINTS / src), "scheme": scheme, "ignore": ignore, "calibrate": name in CALIBRATED}
                 for name, (src, scheme, ignore) in CASES.items()}
        dense.run_workers_twice(Path(__file__).resolve(), specs, tmp, {name: dense.FILES for name in CASES})
        for name in CASES:
            dst = out / name
            if dst.exists():
                shutil.rmtree(dst)
            dst.mkdir(parents=True)
            for f in dense.FILES:
                shutil.copy(tmp / "a" / name / f, dst / f)


def producer_name(name: str, mixtral: bool) -> str:
    if not mixtral or ".experts." not in name:
        return name
    for w, proj in MIXTRAL_NAMES.items():
        name = name.replace(f".{w}.", f".{proj}.")
    return name


def check(folder: Path, src: str, scheme: str, name: str):
    from safetensors.torch import load_file, save_file
    strategy = dense.WEIGHT_STRATEGY[scheme]
    mixtral = src.startswith("mixtral")
    source = load_file(str(CHECKPOINTS / src / "model.safetensors"))
    fx = load_file(str(folder / "model.safetensors"))
    assert dense.read_header(folder / "model.safetensors")["__metadata__"] == {"format": "pt"}
    kept = set(EXPECTED_IGNORE[name])
    expected, codes_checked = set(), 0
    for n, w in source.items():
        mod = n[: -len(".weight")] if n.endswith(".weight") else None
        quantized = w.dim() == 2 and mod not in kept and "embed_tokens" not in n
        p = producer_name(n, mixtral)
        expected.add(p)
        if not quantized:
            assert fx[p].dtype == w.dtype and torch.equal(fx[p].view(torch.int16), w.view(torch.int16)), n
            continue
        pmod = p[: -len(".weight")]
        expected.add(pmod + ".weight_scale")
        if scheme == "FP8":  # values checked by check_static
            expected.add(pmod + ".input_scale")
            assert fx[pmod + ".input_scale"].dtype == torch.bfloat16 and fx[pmod + ".input_scale"].shape == (1,), p
        scale, codes = fx[pmod + ".weight_scale"], fx[p]
        ref_scale = dense.weight_scale(w, strategy)
        assert scale.dtype == torch.bfloat16 and torch.equal(scale.view(torch.int16), ref_scale.view(torch.int16)), p
        assert codes.dtype == torch.float8_e4m3fn and torch.equal(codes.view(torch.uint8),
                                                                  dense.weight_codes(w, ref_scale, strategy)), p
        codes_checked += codes.numel()
    assert set(fx) == expected, set(fx) ^ expected
    if mixtral:
        assert not any(".w1." in k or ".w2." in k or ".w3." in k for k in fx), "LLM Compressor wrote w1/w2/w3 now"
    with tempfile.TemporaryDirectory() as tmp:
        save_file(fx, f"{tmp}/m.safetensors", metadata={"format": "pt"})
        assert Path(f"{tmp}/m.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes(), folder
    cfg = json.loads((CHECKPOINTS / src / "config.json").read_text())
    qc = dense.expected_qconfig(scheme, False)
    qc["ignore"] = EXPECTED_IGNORE[name]
    text = (folder / "config.json").read_text()
    assert json.loads(text)["quantization_config"] == qc, json.loads(text)["quantization_config"]["ignore"]
    assert text == json.dumps({**cfg, "quantization_config": qc}, indent=2, sort_keys=True), folder
    print(f"{name}: bytes verified, {codes_checked} codes, ignore = {EXPECTED_IGNORE[name]}")


@torch.no_grad()
def replay(src: str, dtype, causal: bool = False) -> dict:
    """LLM Compressor's calibration forward, replayed: the source in `dtype` with the experts
    linearized as oneshot does (llmcompressor.modeling.moe.linearize_moe), under
    moe_calibration_context() (what oneshot's default moe_calibrate_all_experts=True enters), the
    calibration ids in order, batch 1, quantization off (the sequential pipeline calibrates with it
    disabled), and, as found (README, "MoE"), NO causal mask: LLM Compressor 0.14's sequential
    pipeline runs this model's layers with eager attention and attention_mask=None, which eager
    attention takes as "attend to everything" -- replayed here by a zero additive 4-D mask. Returns every quantized Linear's input per batch and each layer's post-attention-norm
    output per batch."""
    from llmcompressor.modeling.moe.context import moe_calibration_context
    from llmcompressor.modeling.moe.linearize import linearize_moe
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(CHECKPOINTS / src, dtype=dtype, attn_implementation="eager").eval()
    linearize_moe(model)
    inputs, normed, hooks = {}, {}, []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name != "lm_head" and not name.endswith(".mlp.gate"):
            hooks.append(mod.register_forward_pre_hook(
                lambda m, a, name=name: inputs.setdefault(name, []).append(a[0].detach().reshape(-1, a[0].shape[-1]))))
    for i, layer in enumerate(model.model.layers):
        hooks.append(layer.post_attention_layernorm.register_forward_hook(
            lambda m, a, out, i=i: normed.setdefault(i, []).append(out.detach().reshape(-1, out.shape[-1]))))
    with moe_calibration_context():
        for ids in dense.calibration_ids():
            mask = None if causal else torch.zeros(1, 1, len(ids), len(ids), dtype=dtype)
            model(input_ids=torch.tensor([ids]), attention_mask=mask, use_cache=False)
    for h in hooks:
        h.remove()
    return {"input": inputs, "normed": normed}


def static_scale(batches: list) -> torch.Tensor:
    """static_minmax over the batches, as C++ computes it: RNE_bf16(f32(max |x| over all tokens) / 448)."""
    amax = torch.stack([b.abs().amax() for b in batches]).amax()
    return dense.bf16_rne(dense.f32(amax).reshape(1) / dense.FMAX)


def check_static(folder: Path, src: str, name: str):
    from safetensors.torch import load_file
    fx, source = load_file(str(folder / "model.safetensors")), load_file(str(CHECKPOINTS / src / "model.safetensors"))
    b16 = replay(src, torch.bfloat16)
    scales = {n[: -len(".input_scale")]: t for n, t in fx.items() if n.endswith(".input_scale")}
    assert set(scales) == set(b16["input"]), set(scales) ^ set(b16["input"])
    experts_checked = 0
    for mod, batches in b16["input"].items():
        # the observer LLM Compressor ran (static_minmax, in BF16) and its C++ form: bit for bit
        assert torch.equal(dense.observed_scales(batches, "static_minmax").view(torch.int16),
                           scales[mod].view(torch.int16)), mod
        assert torch.equal(static_scale(batches).view(torch.int16), scales[mod].view(torch.int16)), mod
        if ".experts." not in mod:
            continue
        # calibrate_all_experts: each expert's gate/up input is the layer's WHOLE normed hidden state
        # (every token, routed to it or not), its down input that expert's SwiGLU of every token.
        layer = int(mod.split(".")[2])
        x = b16["normed"][layer]
        if mod.endswith(("gate_proj", "up_proj")):
            assert all(torch.equal(a, b) for a, b in zip(batches, x, strict=True)), mod
        else:
            e = mod[: -len(".down_proj")]
            for a, xb in zip(batches, x, strict=True):
                g = torch.nn.functional.linear(xb, source[e + ".gate_proj.weight"])
                u = torch.nn.functional.linear(xb, source[e + ".up_proj.weight"])
                assert a.shape[0] == xb.shape[0] and torch.equal(a, torch.nn.functional.silu(g) * u), mod
        experts_checked += 1
    # The bidirectional attention, shown: a causal replay misses o_proj's scale by far.
    causal = replay(src, torch.bfloat16, causal=True)["input"]
    o = "model.layers.0.self_attn.o_proj"
    ratio = float(dense.f32(static_scale(causal[o])) / dense.f32(scales[o]))
    assert ratio > 2.0, ratio
    # What no attention can touch, layer 0's q/k/v input: the causal replay's too, bit for bit.
    q = "model.layers.0.self_attn.q_proj"
    assert torch.equal(static_scale(causal[q]).view(torch.int16), scales[q].view(torch.int16))
    print(f"{name}: {len(scales)} input_scales replayed bit for bit ({experts_checked} of experts, each over every "
          f"token), with bidirectional attention (a causal replay's layer-0 o_proj scale is {ratio:.2f}x)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--check-only", action="store_true", help="only check the fixtures as they are")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--only", action="append", choices=sorted(CASES), help="make / check only this case (repeatable)")
    args = ap.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    torch.set_num_threads(1)
    out = Path(args.out)
    if args.only:
        for name in set(CASES) - set(args.only):
            del CASES[name]
    if not args.check_only:
        make(out)
    for name, (src, scheme, _) in CASES.items():
        check(out / name, src, scheme, name)
        if name in CALIBRATED:
            check_static(out / name, src, name)
    if args.only:
        return
    # The Qwen3-MoE FP8_BLOCK reference made by make_checkpoint_fixtures.py passes the same checks.
    EXPECTED_IGNORE["ct_fp8_block_qwen3_moe"] = EXPECTED_IGNORE["moe_qwen3_FP8_DYNAMIC"]
    check(CHECKPOINTS / "ct_fp8_block_qwen3_moe", "qwen3_moe_bf16", "FP8_BLOCK", "ct_fp8_block_qwen3_moe")


if __name__ == "__main__":
    main()
