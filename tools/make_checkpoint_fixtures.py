#!/usr/bin/env python3
"""Writes the tiny checkpoints of tests/fixtures/checkpoints/ with the real producers.

Each fixture is a folder with config.json, model.safetensors (and hf_quant_config.json for
ModelOpt) plus expected.json: what the *producer* configured -- the format, the scheme of every
linear module, the KV-cache scheme -- and the name, dtype and shape of every tensor it wrote.
The C++ tests (tests/cpp/test_quant_config.cpp, test_model_config.cpp) compare fp8lm's parse
of config.json against expected.json, so they test against the producer, not against fp8lm.

Producers (see tests/fixtures/checkpoints/README.md):
  *_bf16                transformers save_pretrained of a randomly initialised tiny model
  ct_*                  LLM Compressor oneshot (compressed-tensors), scheme read back from the
                        quantization_scheme compressed-tensors attaches to each module
  hf_fp8_block_llama    transformers FineGrainedFP8 quantizing on load (its GPU check bypassed:
                        the weight quantization itself is plain PyTorch)
  modelopt_*, fbgemm_*  built here from the documented layout (../shared/docs/fp8-checkpoint-formats.md
                        §4, §5): neither ModelOpt nor FBGEMM installs without a GPU toolchain

Run with the LLM Compressor venv (pip install llmcompressor):
  .venv-llmc/bin/python tools/make_checkpoint_fixtures.py [--out tests/fixtures/checkpoints]
"""
import argparse
import json
import re
import shutil
from pathlib import Path

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

SEED = 0
E4M3_MAX = 448.0


# ---------------------------------------------------------------- tiny models

def tiny_config(arch: str, hidden: int = 64):
    """A 2-layer model of `arch`, small enough that each file is a few hundred KB."""
    common = dict(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                  max_position_embeddings=512, bos_token_id=1, eos_token_id=2)
    if arch == "llama":
        return transformers.LlamaConfig(**common, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 128})
    if arch == "qwen2":
        return transformers.Qwen2Config(**common)
    if arch == "qwen3":
        return transformers.Qwen3Config(**common, head_dim=16, tie_word_embeddings=True)
    if arch == "mistral":
        return transformers.MistralConfig(**common, sliding_window=32)
    if arch == "qwen3_moe":
        return transformers.Qwen3MoeConfig(**common, head_dim=16, moe_intermediate_size=32,
                                           num_experts=4, num_experts_per_tok=2, norm_topk_prob=True)
    if arch == "mixtral":
        return transformers.MixtralConfig(**{**common, "intermediate_size": 32},
                                          num_local_experts=4, num_experts_per_tok=2)
    raise ValueError(arch)


def tiny_model(arch: str, hidden: int = 64):
    torch.manual_seed(SEED)
    return AutoModelForCausalLM.from_config(tiny_config(arch, hidden), dtype=torch.bfloat16)


# ---------------------------------------------------------------- expected.json

def tensor_table(folder: Path) -> dict:
    out = {}
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        for k in sorted(f.keys()):
            s = f.get_slice(k)
            out[k] = {"dtype": s.get_dtype(), "shape": list(s.get_shape())}
    return out


def linear_modules(tensors: dict) -> list:
    """Every module with a 2-D weight except the embeddings: the linear layers as saved."""
    return sorted(k[: -len(".weight")] for k, v in tensors.items()
                  if k.endswith(".weight") and len(v["shape"]) == 2 and "embed_tokens" not in k)


UNQUANTIZED = {"quantized": False}


def scheme(weights, activation, *, group_rows=0, group_cols=0, act_group=128,
           weight_scale_suffix="weight_scale", ub=0.0):
    return {"quantized": True, "weight_format": "e4m3", "weight_scales": weights,
            "group_rows": group_rows, "group_cols": group_cols, "weights_serialized": True,
            "weight_scale_suffix": weight_scale_suffix, "activation": activation,
            "activation_group": act_group, "input_scale_suffix": "input_scale",
            "activation_scale_upper_bound": ub}


def check_against_tensors(name: str, modules: dict, tensors: dict):
    """The producer's per-module scheme must agree with what it wrote to disk."""
    for m, s in modules.items():
        w = tensors[m + ".weight"]
        if not s["quantized"]:
            assert w["dtype"] in ("BF16", "F16", "F32"), (name, m, w)
            continue
        assert w["dtype"] == "F8_E4M3", (name, m, w)
        assert m + "." + s["weight_scale_suffix"] in tensors, (name, m)
        has_input = m + ".input_scale" in tensors
        assert has_input == (s["activation"] == "static-tensor"), (name, m)


def write_expected(folder: Path, producer: dict, fmt: str, modules: dict, kv: dict):
    tensors = tensor_table(folder)
    assert sorted(modules) == linear_modules(tensors), (folder.name, sorted(modules))
    check_against_tensors(folder.name, modules, tensors)
    doc = {"producer": producer, "format": fmt, "kv_cache": kv, "modules": modules, "tensors": tensors}
    (folder / "expected.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def versions(**extra) -> dict:
    v = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__}
    v.update(extra)
    return v


NO_KV = {"dtype": "auto", "k_scale_name": "", "v_scale_name": ""}


def kv_from_tensors(tensors: dict, k_suffix: str, v_suffix: str) -> dict:
    """Derives the KV scale name templates from the tensors the producer wrote."""
    ks = [k for k in tensors if k.endswith(k_suffix)]
    vs = [k for k in tensors if k.endswith(v_suffix)]
    if not ks:
        return NO_KV
    template = lambda n: re.sub(r"^model\.layers\.\d+\.", "model.layers.{layer}.", n)
    return {"dtype": "fp8_e4m3", "k_scale_name": template(ks[0]), "v_scale_name": template(vs[0])}


def clean(folder: Path):
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)


def drop_generation_config(folder: Path):
    (folder / "generation_config.json").unlink(missing_ok=True)


# ---------------------------------------------------------------- producers

def make_bf16(out: Path, arch: str):
    folder = out / f"{arch}_bf16"
    clean(folder)
    model = tiny_model(arch)
    model.save_pretrained(folder)
    drop_generation_config(folder)
    tensors = tensor_table(folder)
    write_expected(folder, {"name": "transformers save_pretrained", "versions": versions()}, "none",
                   {m: UNQUANTIZED for m in linear_modules(tensors)}, NO_KV)


def ct_scheme_of(module) -> dict:
    """compressed-tensors' own per-module scheme, in fp8lm's terms."""
    s = getattr(module, "quantization_scheme", None)
    if s is None or s.weights is None:
        return UNQUANTIZED
    w = s.weights
    value = lambda e: getattr(e, "value", e)  # pydantic may keep enums or their strings
    strat = value(w.strategy)
    kw = {}
    if strat == "block":
        kw = {"group_rows": w.block_structure[0], "group_cols": w.block_structure[1]}
    elif strat == "group":
        kw = {"group_rows": 1, "group_cols": w.group_size}
    elif strat == "channel":
        kw = {"group_rows": 1}
    a = s.input_activations
    if a is None:
        act = "none"
    else:
        act = ("dynamic-" if a.dynamic else "static-") + value(a.strategy)
        if value(a.strategy) == "group":
            kw["act_group"] = a.group_size
    return scheme(strat, act, **kw)


def make_ct(out: Path, name: str, arch: str, preset: str, ignore: list, kv_cache_scheme=None,
            calibrate=False):
    import compressed_tensors
    import llmcompressor
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier

    folder = out / name
    clean(folder)
    # The quantized twin of the BF16 fixture (oneshot wants a model loaded from a folder).
    model = AutoModelForCausalLM.from_pretrained(out / f"{arch}_bf16", dtype=torch.bfloat16)
    recipe = QuantizationModifier(targets="Linear", scheme=preset, ignore=ignore,
                                  kv_cache_scheme=kv_cache_scheme)
    kwargs = {}
    if calibrate:
        from datasets import Dataset
        g = torch.Generator().manual_seed(SEED)
        ids = torch.randint(3, 256, (8, 32), generator=g).tolist()
        kwargs = dict(dataset=Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * 32] * 8}),
                      num_calibration_samples=8, max_seq_length=32)
    oneshot(model=model, recipe=recipe, **kwargs)
    # Record the scheme compressed-tensors attached, by the name the module is saved under.
    per_module = {n: ct_scheme_of(m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    model.save_pretrained(folder, save_compressed=True)
    drop_generation_config(folder)
    tensors = tensor_table(folder)
    modules = {m: per_module.get(m, UNQUANTIZED) for m in linear_modules(tensors)}
    kv = kv_from_tensors(tensors, "self_attn.k_scale", "self_attn.v_scale")
    if kv_cache_scheme is not None:
        assert kv["dtype"] == "fp8_e4m3", "the producer wrote no KV scales"
    write_expected(folder, {"name": "llmcompressor oneshot", "recipe": f"QuantizationModifier(scheme={preset!r}, "
                            f"ignore={ignore!r}, kv_cache_scheme={kv_cache_scheme!r})",
                            "versions": versions(llmcompressor=llmcompressor.__version__,
                                                 compressed_tensors=compressed_tensors.__version__)},
                   "compressed-tensors", modules, kv)


def make_hf_fp8(out: Path):
    import transformers.quantizers.quantizer_finegrained_fp8 as qf
    from transformers import FineGrainedFP8Config

    # transformers refuses to start without a GPU, but only its forward pass needs one:
    # the load-time weight quantization that writes the checkpoint is plain PyTorch.
    qf.FineGrainedFP8HfQuantizer.validate_environment = lambda self, *a, **k: None
    folder = out / "hf_fp8_block_llama"
    clean(folder)
    src = out / "_tmp_llama128"
    clean(src)
    torch.manual_seed(SEED)
    # Every weight dimension a multiple of 128: transformers skips the others.
    cfg = tiny_config("llama", hidden=128)
    cfg.num_key_value_heads = 4
    AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).save_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16, device_map="cpu",
                                                 quantization_config=FineGrainedFP8Config(weight_block_size=(128, 128)))
    shutil.rmtree(src)
    per_module = {}
    for n, m in model.named_modules():
        if type(m).__name__ == "FP8Linear":
            bn, bk = model.config.quantization_config.weight_block_size
            per_module[n] = scheme("block", "dynamic-group", group_rows=bn, group_cols=bk, act_group=bk,
                                   weight_scale_suffix="weight_scale_inv")
    model.save_pretrained(folder)
    drop_generation_config(folder)
    tensors = tensor_table(folder)
    modules = {m: per_module.get(m, UNQUANTIZED) for m in linear_modules(tensors)}
    write_expected(folder, {"name": "transformers FineGrainedFP8Config (quantize on load, CPU)",
                            "versions": versions()}, "fp8", modules, NO_KV)


def fp8_per_tensor(w: torch.Tensor):
    scale = w.float().abs().max().clamp(min=1e-12) / E4M3_MAX
    return (w.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), scale


def fp8_per_channel(w: torch.Tensor):
    scale = w.float().abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / E4M3_MAX
    return (w.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), scale


def make_modelopt(out: Path):
    """ModelOpt FP8 (legacy hf_quant_config.json), per-tensor weights + static inputs + FP8 KV."""
    folder = out / "modelopt_fp8_llama"
    clean(folder)
    model = tiny_model("llama")
    model.save_pretrained(folder)
    drop_generation_config(folder)
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    exclude = ["lm_head", "model.layers.1.mlp.down*"]
    modules = {}
    g = torch.Generator().manual_seed(SEED)
    for name in linear_modules(tensor_table(folder)):
        if name == "lm_head" or name.startswith("model.layers.1.mlp.down"):
            modules[name] = UNQUANTIZED
            continue
        q, s = fp8_per_tensor(sd[name + ".weight"])
        sd[name + ".weight"] = q
        sd[name + ".weight_scale"] = s.reshape(())  # 0-dim, as ModelOpt's export tests
        sd[name + ".input_scale"] = (torch.rand((), generator=g) + 0.5) / E4M3_MAX
        modules[name] = scheme("tensor", "static-tensor")
    for layer in range(model.config.num_hidden_layers):
        p = f"model.layers.{layer}.self_attn."
        sd[p + "k_proj.k_scale"] = torch.tensor(0.02, dtype=torch.float32)
        sd[p + "v_proj.v_scale"] = torch.tensor(0.01, dtype=torch.float32)
    save_file({k: v.contiguous() for k, v in sd.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    (folder / "hf_quant_config.json").write_text(json.dumps({
        "producer": {"name": "modelopt", "version": "0.17.0"},
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": exclude}},
        indent=4) + "\n")
    tensors = tensor_table(folder)
    write_expected(folder, {"name": "make_checkpoint_fixtures.py from the documented ModelOpt layout",
                            "versions": versions()}, "modelopt", modules,
                   kv_from_tensors(tensors, "k_proj.k_scale", "v_proj.v_scale"))


def make_fbgemm(out: Path):
    """FBGEMM FP8: per-channel weights, dynamic per-token activations with an upper bound."""
    folder = out / "fbgemm_fp8_llama"
    clean(folder)
    model = tiny_model("llama")
    skip = ["lm_head", "model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
            "model.layers.0.self_attn.v_proj", "model.layers.0.self_attn.o_proj"]
    cfg = model.config
    cfg.quantization_config = {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
                               "modules_to_not_convert": skip}
    model.save_pretrained(folder)
    drop_generation_config(folder)
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    modules = {}
    for name in linear_modules(tensor_table(folder)):
        if name in skip:
            modules[name] = UNQUANTIZED
            continue
        q, s = fp8_per_channel(sd[name + ".weight"])
        sd[name + ".weight"] = q
        sd[name + ".weight_scale"] = s  # [N, 1] F32
        modules[name] = scheme("channel", "dynamic-token", group_rows=1, ub=1200.0)
    save_file({k: v.contiguous() for k, v in sd.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    write_expected(folder, {"name": "make_checkpoint_fixtures.py from the documented FBGEMM layout",
                            "versions": versions()}, "fbgemm_fp8", modules, NO_KV)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/checkpoints"))
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    for arch in ["llama", "qwen2", "qwen3", "mistral", "qwen3_moe", "mixtral"]:
        make_bf16(out, arch)
    make_ct(out, "ct_fp8_dynamic_llama", "llama", "FP8_DYNAMIC", ["lm_head"])
    make_ct(out, "ct_fp8_static_kv_qwen3", "qwen3", "FP8", ["lm_head"],
            kv_cache_scheme={"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False,
                             "symmetric": True}, calibrate=True)
    make_ct(out, "ct_fp8_block_qwen3_moe", "qwen3_moe", "FP8_BLOCK", ["lm_head", "re:.*mlp.gate$"])
    make_hf_fp8(out)
    make_modelopt(out)
    make_fbgemm(out)


if __name__ == "__main__":
    main()
