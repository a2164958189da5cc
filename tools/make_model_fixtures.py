#!/usr/bin/env python3
"""Make the reference logits of the model forward-pass tests (tests/fixtures/models/).

What it writes (see tests/fixtures/models/README.md for the exact semantics of every case):

1. Tiny random models, one folder each (config.json + model.safetensors, BF16, written by
   transformers `save_pretrained`): llama (llama3 RoPE), qwen2 (yarn RoPE, q/k/v biases),
   qwen3 (q/k norms, tied embeddings, linear RoPE), mistral (sliding window 8). Hidden 128,
   intermediate 320 (not a multiple of 128: ragged FP8 blocks), 2 layers, 4 heads / 2 KV heads,
   vocab 256. Every RMSNorm weight and the qwen2 biases are randomised, so none is a no-op.
2. For three seeded prompts per model (5, 11 and 24 tokens), the float32 logits of every
   position, computed by transformers (model in float32, eager attention, each prompt alone)
   under these cases: bf16 (plain), bf16_kv_bf16 (K/V rounded to BF16), fp8_tensor /
   fp8_channel / fp8_block / fp8_weight_only (every linear but lm_head emulated in FP8 E4M3
   exactly as fp8lm's --quantization fp8:* does it) and kv_fp8_e4m3 / kv_fp8_e4m3_scaled /
   kv_fp8_e5m2 (K after RoPE and V through an FP8 round trip).
3. Two LLM Compressor checkpoints made from the tiny models (FP8_DYNAMIC llama; static FP8 +
   FP8 KV-cache scales qwen3), the logits transformers + compressed-tensors compute for them
   (transformers_compressed_tensors) and a float32 emulation of fp8lm running them on the
   checkpoint's own codes and scales (fp8lm_semantics), plus measured facts about what
   compressed-tensors does (ct_facts, max_abs_diffs in the manifest).
4. The shipped model models/fp8lm-gutenberg-22m: four prompts, their greedy continuations
   (64 tokens), the top-1/top-2 margin of every step and the last prompt position's logits.
5. Tiny random mixture-of-experts models in tests/fixtures/models/moe/ (a manifest of their own,
   same schema): Qwen3-MoE with norm_topk_prob true and a dense layer through mlp_only_layers,
   Qwen3-MoE with norm_topk_prob false and decoder_sparse_step 2, Mixtral; hidden 64, 8 experts,
   top-2; the float32 logits of transformers' eager expert loop (bf16; for Qwen3-MoE and Mixtral
   also the four online FP8 cases, experts emulated by Fp8Experts as fp8lm and vLLM run them), and the
   smallest gap between any token's k-th and (k+1)-th router probability, asserted to be 100
   times the float32 noise of a probability, so no implementation's rounding changes an expert. FP8 MoE
   checkpoints against an emulation on their own codes and scales: HF fp8 blocks, LLM Compressor's
   FP8_BLOCK, and static FP8 (compressed-tensors FP8 layout written here for Qwen3-MoE and Mixtral,
   scales differing per expert; vLLM's largest-scale rule). `--only-moe` regenerates this part
   alone (a few seconds, no LLM Compressor, the rest untouched).

Arrays are raw little-endian float32, row-major (tools/fixture_arrays.py); manifest.json
lists them. Deterministic (seeded, one thread): run it twice and `git diff` shows nothing.

    /tmp/torchvenv/bin/python tools/make_model_fixtures.py                  # or .venv-tools
        [--out tests/fixtures/models] [--llmc-python PATH | --skip-llmc] [--only-moe]

The venv running it needs tools/requirements-fixtures.txt. LLM Compressor pins its own torch /
transformers / compressed-tensors, so it lives in a second venv (`python3 -m venv .venv-llmc &&
.venv-llmc/bin/pip install llmcompressor`; --llmc-python defaults to .venv-llmc/bin/python).
The script runs itself in that venv as a subprocess (`--llmc-worker`) to make the two
checkpoints with oneshot and to load them with that venv's stack for a cross-check.
--skip-llmc keeps the committed LLM Compressor folders, logits and manifest entries as they
are and regenerates everything else. About 35 s on one CPU thread.
"""

import argparse
import copy
import inspect
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_arrays import ArrayWriter  # noqa: E402
# The online-quantization formulas the CPU linear layer is already tested against: reusing
# them (rather than a copy) keeps the model fixtures and the linear fixtures in lockstep.
from make_linear_fixtures import FMAX, fp8, quantize_activation  # noqa: E402
from make_numerics_fixtures import ct_case  # noqa: E402

SEED = 0
E5M2_MAX = 57344.0
ARCHS = ["llama", "qwen2", "qwen3", "mistral"]
PROMPT_LENGTHS = (5, 11, 24)  # 24 > the mistral window of 8; small, so the fixtures stay small
VOCAB = 256
NORM_STD = 0.1   # RMSNorm weights = 1 + 0.1 N(0,1): far enough from 1 that a missing norm shows
BIAS_STD = 0.2   # qwen2 q/k/v biases: about a fifth of the projections' own spread
ATTN = "fp8lm_kv"  # our attention function: rounds K/V, then transformers' eager attention
SHIPPED = "models/fp8lm-gutenberg-22m"
SHIPPED_NEW_TOKENS = 64


# ---------------------------------------------------------------- tiny models

def tiny_config(arch: str):
    import transformers
    common = dict(hidden_size=128, intermediate_size=320, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, vocab_size=VOCAB, max_position_embeddings=256,
                  rms_norm_eps=1e-6,
                  # 0.08 instead of the default 0.02: the logits then spread (std ~0.9 over the
                  # vocab), so argmax and tolerances mean something; checked in make_tiny().
                  initializer_range=0.08, bos_token_id=1, eos_token_id=2)
    if arch == "llama":
        return transformers.LlamaConfig(**common, tie_word_embeddings=False, rope_parameters={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32, "rope_theta": 10000.0})
    if arch == "qwen2":
        # transformers warns that factor 4 != max_position_embeddings / original (= 8) and uses
        # the explicit factor; the mismatch is deliberate: an engine must read the factor (and
        # yarn's attention factor 0.1 ln(4) + 1 derived from it), not derive it from lengths.
        return transformers.Qwen2Config(**common, tie_word_embeddings=False, rope_parameters={
            "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
            "rope_theta": 1000000.0})
    if arch == "qwen3":
        return transformers.Qwen3Config(**common, tie_word_embeddings=True, rope_parameters={
            "rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0})
    if arch == "mistral":
        return transformers.MistralConfig(**common, tie_word_embeddings=False, sliding_window=8,
                                          rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    raise ValueError(arch)


def clean(folder: Path):
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)


def load_f32(folder: Path):
    """A checkpoint as the reference runs it: loaded as saved, computed in float32, eager attention."""
    from transformers import AutoModelForCausalLM
    # dtype float32 = the BF16 weights widened exactly (= model.float()), while the RoPE
    # inv_freq buffers are computed in float32 as on load; model.to(bf16).float() would
    # instead round inv_freq to BF16 (transformers casts buffers too).
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    return model.eval()


@torch.no_grad()
def run_logits(model, prompts) -> list:
    """[len, vocab] float32 logits of every position; each prompt alone (no padding, no cache)."""
    return [model(input_ids=torch.tensor([p]), use_cache=False).logits[0].float().contiguous()
            for p in prompts]


def make_tiny(arch: str, index: int, folder: Path):
    from transformers import AutoModelForCausalLM
    torch.manual_seed(SEED + index)
    model = AutoModelForCausalLM.from_config(tiny_config(arch), dtype=torch.float32, attn_implementation="eager")
    g = torch.Generator().manual_seed(1000 + index)
    with torch.no_grad():
        for _, mod in model.named_modules():
            # transformers initialises norms to 1 and biases to 0: either would hide a missing
            # or misplaced norm / bias in the C++ forward pass.
            if type(mod).__name__.endswith("RMSNorm"):
                mod.weight.copy_(1.0 + NORM_STD * torch.randn(mod.weight.shape, generator=g))
            if isinstance(mod, nn.Linear) and mod.bias is not None:
                mod.bias.copy_(BIAS_STD * torch.randn(mod.bias.shape, generator=g))
        # The reference model holds the BF16-rounded weights in float32; only parameters are
        # rounded (model.to(bfloat16) would round the RoPE inv_freq buffers as well).
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    clean(folder)
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(folder)
    (folder / "generation_config.json").unlink(missing_ok=True)
    return model.eval()


def make_prompts(index: int) -> list:
    g = torch.Generator().manual_seed(2000 + index)
    return [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]


# ---------------------------------------------------------------- K/V rounding

class KvRounding:
    """What our attention function does to K (after RoPE) and V before the eager attention."""

    def __init__(self):
        self.set("fp32")
        self.check = None  # callable(module, key, value) for the post-RoPE check

    def set(self, mode: str, k_scales=None, v_scales=None):
        self.mode, self.k_scales, self.v_scales = mode, k_scales, v_scales
        self.amax_k, self.amax_v = {}, {}

    def apply(self, module, key, value):
        layer = module.layer_idx
        # key/value are [batch, kv_heads, seq, head_dim]: the KV heads before repeat_kv (GQA)
        assert key.shape[1] == module.config.num_key_value_heads, key.shape
        if self.check is not None:
            self.check(module, key, value)
        if self.mode == "fp32":
            return key, value
        if self.mode == "record":  # amax over every prompt, for the scaled FP8 case
            self.amax_k[layer] = max(self.amax_k.get(layer, 0.0), float(key.abs().amax()))
            self.amax_v[layer] = max(self.amax_v.get(layer, 0.0), float(value.abs().amax()))
            return key, value
        if self.mode == "bf16":
            return key.to(torch.bfloat16).float(), value.to(torch.bfloat16).float()
        dtype, fmax = {"fp8_e4m3": (torch.float8_e4m3fn, FMAX), "fp8_e5m2": (torch.float8_e5m2, E5M2_MAX)}[self.mode]
        ks = torch.tensor(self.k_scales[layer] if self.k_scales else 1.0, dtype=torch.float32)
        vs = torch.tensor(self.v_scales[layer] if self.v_scales else 1.0, dtype=torch.float32)
        return fp8_round_trip(key, ks, dtype, fmax), fp8_round_trip(value, vs, dtype, fmax)


def fp8_round_trip(t: torch.Tensor, scale: torch.Tensor, dtype, fmax: float) -> torch.Tensor:
    """codes = saturate(t / scale) (float32, one division), back to codes * scale (float32)."""
    return torch.clamp(t.float() / scale, -fmax, fmax).to(dtype).float() * scale


KV = KvRounding()


def kv_attention(module, query, key, value, attention_mask, **kwargs):
    key, value = KV.apply(module, key, value)
    # each architecture's own eager attention (softmax in float32, repeat_kv for GQA)
    eager = sys.modules[type(module).__module__].eager_attention_forward
    return eager(module, query, key, value, attention_mask, **kwargs)


def register_attention():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    AttentionInterface.register(ATTN, kv_attention)
    # Without a registered mask function transformers builds *no* mask for an unknown
    # attention implementation (not even the causal one): use the eager one.
    AttentionMaskInterface.register(ATTN, eager_mask)


def use_kv_attention(model):
    model.set_attn_implementation(ATTN)
    assert model.config._attn_implementation == ATTN
    return model


def check_post_rope(model, prompt):
    """Asserts that the key our attention function sees is k_proj (-> k_norm) -> RoPE, not repeated."""
    mod = sys.modules[type(model.model.layers[0].self_attn).__module__]
    captured, seen = {}, []

    def pre_hook(m, args, kwargs):
        captured["pos"] = kwargs["position_embeddings"]

    def k_hook(m, args, out):
        captured["k"] = out

    handles = []
    for layer in model.model.layers:
        attn = layer.self_attn
        handles.append(attn.register_forward_pre_hook(pre_hook, with_kwargs=True))
        handles.append((attn.k_norm if hasattr(attn, "k_norm") else attn.k_proj).register_forward_hook(k_hook))

    def check(m, key, value):
        cos, sin = captured["pos"]
        k = captured["k"].view(*captured["k"].shape[:2], -1, m.head_dim).transpose(1, 2)
        _, k_rot = mod.apply_rotary_pos_emb(k, k, cos, sin)
        assert torch.equal(k_rot, key), "the key given to the attention function is not k after RoPE"
        seen.append(m.layer_idx)

    KV.check = check
    try:
        KV.set("fp32")
        run_logits(model, [prompt])
    finally:
        KV.check = None
        for h in handles:
            h.remove()
    assert seen == list(range(model.config.num_hidden_layers)), seen


# ---------------------------------------------------------------- FP8 linear emulation

class Fp8Linear(nn.Module):
    """y = dequant(x) @ dequant(W).T in float64, to float32, + bias (float32).

    W is given dequantized (float64 of codes * scale, exact); `act` is a quantize_activation
    mode (dynamic_tensor / dynamic_token / dynamic_group / static_tensor) or "none" (W8A16).
    `accum` float32 is only for the sensitivity twin (see twin()).
    """

    def __init__(self, w_deq: torch.Tensor, bias, act: str, static_scale: float = 0.0, quantize=None):
        super().__init__()
        self.w_deq, self.bias, self.act, self.static_scale = w_deq, bias, act, static_scale
        self.quantize = quantize  # x -> float64 fake-quantized x, replacing `act` (group_quantizer)
        self.accum = torch.float64

    def forward(self, x):
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1]).float()  # [tokens, K]: one call = one prompt
        if self.quantize is not None:
            xd = self.quantize(x2)
        elif self.act == "none":
            xd = x2.double()
        else:
            codes, _, full = quantize_activation(x2, self.act, self.static_scale, 0.0)
            xd = codes.double() * full.double()
        y = (xd.to(self.accum) @ self.w_deq.to(self.accum).T).float()
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, -1)


class F64Linear(nn.Module):
    """A plain linear layer accumulated in float64 (sensitivity twin of a float32 nn.Linear)."""

    def __init__(self, lin: nn.Linear):
        super().__init__()
        self.weight, self.bias = lin.weight, lin.bias

    def forward(self, x):
        y = (x.double() @ self.weight.double().T).float()
        return y if self.bias is None else y + self.bias


ONLINE = {  # case: (fp8lm --quantization, weight layout, activation mode)
    "fp8_tensor": ("fp8:tensor", "tensor", "dynamic_tensor"),
    "fp8_channel": ("fp8:channel", "channel", "dynamic_token"),
    "fp8_block": ("fp8:block", "block128", "dynamic_group"),
    "fp8_weight_only": ("fp8:weight-only", "channel", "none"),
}


def replace_linears(model, make, include_lm_head=False):
    """Replaces every nn.Linear (but lm_head) by make(name, linear)."""
    for name, mod in list(model.named_modules()):
        if isinstance(mod, nn.Linear) and (include_lm_head or name != "lm_head"):
            parent, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, attr, make(name, mod))
    return model


def ct_weight(w: torch.Tensor, layout: str) -> torch.Tensor:
    """The weight quantized as fp8lm's --quantization fp8 does it, which is what LLM Compressor
    writes (so that online quantization and `fp8lm quantize` give the same bytes): compressed-
    tensors' own calculate_qparams / quantize on the BF16 weight, i.e. scale = bf16(amax / 448),
    codes = fp8(clamp(bf16(W / scale))). Returns the dequantized weight, float64."""
    strategy = {"tensor": "tensor", "channel": "channel", "block128": "block"}[layout]
    codes, scale = ct_case(w.to(torch.bfloat16), strategy)
    n, k = w.shape
    full = {"tensor": lambda: scale.float().reshape(1, 1).expand(n, k),
            "channel": lambda: scale.float().reshape(n, 1).expand(n, k),
            "block": lambda: scale.float().repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]}[strategy]()
    return codes.double() * full.double()


def online_fp8(model, layout: str, act: str):
    def make(name, lin):
        w_deq = ct_weight(lin.weight.detach(), layout)
        bias = None if lin.bias is None else lin.bias.detach().float().clone()
        return Fp8Linear(w_deq, bias, act)
    return replace_linears(copy.deepcopy(model), make)


def twin(model):
    """The same model with every linear layer accumulated in the *other* precision: FP8 ones in
    float32 instead of float64, plain ones in float64 instead of float32. The two differ by
    about an ulp per dot product; how far the logits then move measures how close the case sits
    to FP8 rounding boundaries (a code that flips changes a value by a whole FP8 step and the
    change propagates), i.e. the noise floor any other implementation will see too."""
    m = copy.deepcopy(model)
    for mod in m.modules():
        if isinstance(mod, (Fp8Linear, Fp8Experts)):
            mod.accum = torch.float32
    return replace_linears(m, lambda name, lin: F64Linear(lin), include_lm_head=True)


# ---------------------------------------------------------------- cases

def max_diff(a: list, b: list) -> float:
    return max(per_prompt(a, b))


def per_prompt(a: list, b: list) -> list:
    """max |a - b| of each prompt (the C++ test sizes its tolerances per prompt)."""
    return [float((x - y).abs().max()) for x, y in zip(a, b)]


def mean_diff(a: list, b: list) -> float:
    return float(torch.cat([(x - y).abs().flatten() for x, y in zip(a, b)]).mean())


def top1_agreement(a: list, b: list) -> float:
    return float(torch.cat([x.argmax(-1) == y.argmax(-1) for x, y in zip(a, b)]).float().mean())


def tiny_cases(name: str, model, prompts: list, w: ArrayWriter) -> list:
    cases = []
    ref = None

    def add(case, quant, kv_dtype, kv_scales, m):
        nonlocal ref
        logits = run_logits(m, prompts)
        noise = per_prompt(logits, run_logits(twin(m), prompts))
        ref = ref if ref is not None else logits
        d = max_diff(logits, ref)
        print(f"  {name:8s} {case:19s} vs bf16: max {d:<8.4g} mean {mean_diff(logits, ref):<8.3g} "
              f"top-1 agree {top1_agreement(logits, ref):.3f} | twin max {max(noise):.3g}")
        if case != "bf16":
            assert 0 < d < 2.0, (name, case, d)  # must differ, by a modest amount
        cases.append({"name": case, "quantization": quant, "kv_cache_dtype": kv_dtype, "kv_scales": kv_scales,
                      "max_abs_diff_vs_bf16": per_prompt(logits, ref), "mean_abs_diff_vs_bf16": mean_diff(logits, ref),
                      "max_abs_diff_accumulation_twin": noise,
                      "logits": [w.array(f"{name}_{case}_p{i}", t) for i, t in enumerate(logits)]})
        return logits

    plain = add("bf16", None, "fp32", None, model)
    for case, (quant, layout, act) in ONLINE.items():
        add(case, quant, "fp32", None, online_fp8(model, layout, act))

    if getattr(model.config, "sliding_window", None):
        # The window must matter: without it, positions >= window change and earlier ones do not.
        win = model.config.sliding_window
        full = copy.deepcopy(model)
        full.config.sliding_window = None
        nowin = run_logits(full, prompts)
        assert all(torch.equal(a[:win], b[:win]) for a, b in zip(plain, nowin)), name
        assert not torch.equal(plain[-1][win:], nowin[-1][win:]), name

    kvm = use_kv_attention(copy.deepcopy(model))
    check_post_rope(kvm, prompts[-1])
    KV.set("fp32")  # our attention function without rounding must be transformers' eager exactly
    assert all(torch.equal(a, b) for a, b in zip(run_logits(kvm, prompts), plain)), name
    KV.set("record")
    run_logits(kvm, prompts)
    # float32 amax / 448 over all three prompts of the plain model, as a static calibration would
    n = model.config.num_hidden_layers
    k_scales = [float(torch.tensor(KV.amax_k[i], dtype=torch.float32) / FMAX) for i in range(n)]
    v_scales = [float(torch.tensor(KV.amax_v[i], dtype=torch.float32) / FMAX) for i in range(n)]
    for case, mode, ks, vs in [("bf16_kv_bf16", "bf16", None, None), ("kv_fp8_e4m3", "fp8_e4m3", None, None),
                               ("kv_fp8_e4m3_scaled", "fp8_e4m3", k_scales, v_scales),
                               ("kv_fp8_e5m2", "fp8_e5m2", None, None)]:
        KV.set(mode, ks, vs)
        add(case, None, mode, None if ks is None else {"k": ks, "v": vs}, kvm)
    KV.set("fp32")
    return cases


# ---------------------------------------------------------------- LLM Compressor

KV_CACHE_SCHEME = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}
LLMC = [  # fixture name, source tiny model, preset, kv_cache_scheme, calibrate
    ("llmc_fp8_dynamic_llama", "llama", "FP8_DYNAMIC", None, False),
    ("llmc_fp8_static_kv_qwen3", "qwen3", "FP8", KV_CACHE_SCHEME, True),
]
LLMC_FILES = ["config.json", "model.safetensors", "recipe.yaml"]
CALIB_SEQS, CALIB_LEN = 8, 64


def llmc_versions() -> dict:
    import compressed_tensors
    import transformers
    v = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
         "compressed_tensors": compressed_tensors.__version__}
    try:
        import llmcompressor
        v["llmcompressor"] = llmcompressor.__version__
    except ImportError:
        pass
    return v


def llmc_worker(spec: dict):
    """Runs inside the LLM Compressor venv (its own torch / transformers / compressed-tensors).

    "make": oneshot on a tiny model, save_compressed. "logits": load a checkpoint with that
    venv's transformers + compressed-tensors (float32, eager) and save the prompts' logits.
    """
    from transformers import AutoModelForCausalLM
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    if spec["op"] == "logits":
        model = AutoModelForCausalLM.from_pretrained(spec["src"], dtype=torch.float32,
                                                     attn_implementation="eager").eval()
        attn = model.model.layers[0].self_attn
        torch.save({"logits": run_logits(model, spec["prompts"]), "versions": llmc_versions(),
                    "kv_quantized": hasattr(attn, "k_scale") and getattr(attn, "quantization_scheme", None) is not None},
                   spec["dst"])
        return
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    model = AutoModelForCausalLM.from_pretrained(spec["src"], dtype=torch.bfloat16)
    recipe = QuantizationModifier(targets="Linear", scheme=spec["scheme"], ignore=["lm_head"],
                                  kv_cache_scheme=spec["kv_cache_scheme"])
    kwargs = {}
    if spec["calibrate"]:
        from datasets import Dataset
        g = torch.Generator().manual_seed(SEED)
        ids = torch.randint(3, VOCAB, (CALIB_SEQS, CALIB_LEN), generator=g).tolist()
        kwargs = dict(dataset=Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * CALIB_LEN] * CALIB_SEQS}),
                      num_calibration_samples=CALIB_SEQS, max_seq_length=CALIB_LEN)
    oneshot(model=model, recipe=recipe, **kwargs)
    model.save_pretrained(spec["dst"], save_compressed=True)


def call_worker(llmc_python: str, spec: dict, cwd: str):
    # cwd = a temporary folder: whatever logs LLM Compressor leaves behind stay out of the repo
    subprocess.run([llmc_python, str(Path(__file__).resolve()), "--llmc-worker", json.dumps(spec)],
                   check=True, cwd=cwd)


def make_llmc_checkpoint(out: Path, name: str, src: str, preset: str, kv, calib: bool, llmc_python: str):
    with tempfile.TemporaryDirectory() as tmp:
        dst = Path(tmp) / "out"
        call_worker(llmc_python, {"op": "make", "src": str((out / src).resolve()), "dst": str(dst),
                                  "scheme": preset, "kv_cache_scheme": kv, "calibrate": calib}, tmp)
        folder = out / name
        clean(folder)
        for f in LLMC_FILES:
            if (dst / f).exists():
                shutil.copy(dst / f, folder / f)


def llmc_venv_logits(folder: Path, prompts: list, llmc_python: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        dst = Path(tmp) / "logits.pt"
        call_worker(llmc_python, {"op": "logits", "src": str(folder.resolve()), "dst": str(dst),
                                  "prompts": prompts}, tmp)
        return torch.load(dst)


def checkpoint_emulation(folder: Path, with_kv: bool = True):
    """The checkpoint run with fp8lm's semantics in float32 (the model of section 2, but the
    checkpoint's own codes and scales): W = codes * weight_scale; activations per token with
    the runtime floor (dynamic) or clamp(x / input_scale) (static); K/V through an E4M3 round
    trip with k_scale / v_scale. Returns (model, kv_scales or None)."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    sd = load_file(str(folder / "model.safetensors"))
    qc = json.loads((folder / "config.json").read_text())["quantization_config"]
    (group,) = qc["config_groups"].values()
    ia = group["input_activations"]
    cfg = AutoConfig.from_pretrained(folder)
    del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="eager")
    plain = {k: v.float() for k, v in sd.items() if v.dtype != torch.float8_e4m3fn and
             not k.endswith(("weight_scale", "input_scale", "k_scale", "v_scale"))}
    _, unexpected = model.load_state_dict(plain, strict=False)
    assert not unexpected, unexpected

    def make(name, lin):
        codes = sd[name + ".weight"]
        assert codes.dtype == torch.float8_e4m3fn, name
        scale = sd[name + ".weight_scale"].float()  # [N, 1] channel or [1] tensor, BF16 on disk
        w_deq = codes.double() * scale.double().reshape(-1, 1)
        bias = None if lin.bias is None else sd[name + ".bias"].float()
        if ia is None:
            return Fp8Linear(w_deq, bias, "none")
        if ia["dynamic"]:
            assert ia["strategy"] == "token", ia
            return Fp8Linear(w_deq, bias, "dynamic_token")
        assert ia["strategy"] == "tensor", ia
        return Fp8Linear(w_deq, bias, "static_tensor", float(sd[name + ".input_scale"].float()))

    replace_linears(model, make)
    # Everything the checkpoint did not hold in high precision is now an Fp8Linear (or tied lm_head).
    have = set(plain) | ({"lm_head.weight"} if cfg.tie_word_embeddings else set())
    assert set(model.state_dict()) <= have, set(model.state_dict()) - have
    model.eval()
    kv = None
    if qc.get("kv_cache_scheme") and with_kv:
        n = cfg.num_hidden_layers
        kv = {"k": [float(sd[f"model.layers.{i}.self_attn.k_scale"].float()) for i in range(n)],
              "v": [float(sd[f"model.layers.{i}.self_attn.v_scale"].float()) for i in range(n)]}
        model = use_kv_attention(model)
    return model, kv


@torch.no_grad()
def ct_facts(folder: Path) -> dict:
    """Measures what transformers + compressed-tensors (this venv) do with the checkpoint, on
    layer 0's q_proj: the weight it multiplies by, the activation quantization it applies, in
    which dtype, and whether the attention's KV scales are used."""
    from compressed_tensors.quantization.lifecycle.initialize import is_cached_attention_module
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    sd = load_file(str(folder / "model.safetensors"))
    qc = json.loads((folder / "config.json").read_text())["quantization_config"]
    (group,) = qc["config_groups"].values()
    ia = group["input_activations"]
    name = "model.layers.0.self_attn.q_proj"
    codes, scale = sd[name + ".weight"], sd[name + ".weight_scale"].float().reshape(-1, 1)
    facts = {}
    for dtype in (torch.float32, torch.bfloat16):
        tag = str(dtype).replace("torch.", "")
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager").eval()
        lin = model.get_submodule(name)
        cap = {}
        h = lin.register_forward_hook(lambda m, a, o: cap.update(x=a[0].detach().clone(), y=o.detach().clone()))
        model(input_ids=torch.tensor([list(range(3, 20))]), use_cache=False)  # decompresses on first use
        h.remove()
        w = lin.weight
        f = {"weight_dtype": str(w.dtype).replace("torch.", ""),
             "weight_is_codes_x_scale_f32": bool(torch.equal(w.float(), codes.float() * scale)),
             "weight_is_bf16_of_codes_x_scale": bool(torch.equal(w.float(), (codes.float() * scale).bfloat16().float())),
             "status_after_forward": str(lin.quantization_status).split(".")[-1]}
        x = cap["x"]
        if ia is None:
            fq = {"none": x}
        elif ia["dynamic"]:
            s = x.abs().amax(dim=-1, keepdim=True) / torch.tensor(FMAX, dtype=x.dtype)  # in x's dtype
            fq = {"per_token_in_model_dtype": torch.clamp(x / s, -FMAX, FMAX).to(torch.float8_e4m3fn).to(x.dtype) * s,
                  "none": x}
        else:
            s = lin.input_scale.to(x.dtype)
            fq = {"static_in_model_dtype": torch.clamp(x / s, -FMAX, FMAX).to(torch.float8_e4m3fn).to(x.dtype) * s,
                  "none": x}
        # F.linear in the model's dtype on the fake-quantized input reproduces the module exactly?
        f["module_output_equals"] = [k for k, v in fq.items() if torch.equal(nn.functional.linear(v, w), cap["y"])]
        attn = model.model.layers[0].self_attn
        f["attention_recognized_as_kv_cached"] = bool(is_cached_attention_module(attn))
        f["attention_has_k_scale"] = hasattr(attn, "k_scale")
        facts[tag] = f
    facts["attention_forward_parameters"] = list(inspect.signature(attn.forward).parameters)
    return facts


def emulation_logits(folder: Path, prompts: list, with_kv: bool, accum=torch.float64, as_twin=False) -> list:
    model, kv = checkpoint_emulation(folder, with_kv)
    for mod in model.modules():
        if isinstance(mod, Fp8Linear):
            mod.accum = accum
    if as_twin:
        model = twin(model)
    KV.set("fp8_e4m3", kv["k"], kv["v"]) if kv else KV.set("fp32")
    try:
        return run_logits(model, prompts)
    finally:
        KV.set("fp32")


def llmc_entry(name: str, src: str, preset: str, kv_scheme, calib: bool, folder: Path, prompts: list,
               w: ArrayWriter, base_logits: list, llmc_python: str) -> dict:
    from transformers import AutoModelForCausalLM
    load = lambda dtype: AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager").eval()
    ct = run_logits(load(torch.float32), prompts)
    ct_bf16 = run_logits(load(torch.bfloat16), prompts)
    _, kv = checkpoint_emulation(folder)
    emu = emulation_logits(folder, prompts, True)
    emu_f32 = emulation_logits(folder, prompts, True, torch.float32)
    emu_noise = per_prompt(emu, emulation_logits(folder, prompts, True, as_twin=True))
    other = llmc_venv_logits(folder, prompts, llmc_python)
    # "f32acc": the emulation with its FP8 matmuls accumulated in float32 (torch's F.linear),
    # i.e. the same arithmetic as compressed-tensors' fake quantization: a 0 there means
    # identical semantics, whatever FP8 code flips the float64 reference sees.
    diag = {"ct_vs_fp8lm_semantics": max_diff(ct, emu),
            "ct_vs_fp8lm_semantics_f32acc": max_diff(ct, emu_f32),
            "llmc_venv_ct_vs_fp8lm_semantics": max_diff(other["logits"], emu),
            "llmc_venv_ct_vs_fp8lm_semantics_f32acc": max_diff(other["logits"], emu_f32),
            "fp8lm_semantics_vs_its_f32acc": max_diff(emu, emu_f32),
            "ct_bf16_load_vs_fp8lm_semantics": max_diff(ct_bf16, emu),
            "ct_vs_bf16_source_model": max_diff(ct, base_logits)}
    # ct equals the emulation (without the KV round trip when ct drops it) accumulated in float32;
    # the same emulation accumulated in float64 is then ct's "twin".
    ct_noise = per_prompt(ct, emulation_logits(folder, prompts, False))
    if kv:
        nk = emulation_logits(folder, prompts, False, torch.float32)
        diag["ct_vs_fp8lm_semantics_without_kv_f32acc"] = max_diff(ct, nk)
        diag["llmc_venv_ct_vs_fp8lm_semantics_without_kv_f32acc"] = max_diff(other["logits"], nk)
    print(f"  {name}: max|dlogits| {json.dumps({k: float(f'{v:.3g}') for k, v in diag.items()})}")
    facts = ct_facts(folder)
    v = other["versions"]
    return {
        "dir": name, "source": src, "prompts": prompts,
        "recipe": f"QuantizationModifier(targets='Linear', scheme={preset!r}, ignore=['lm_head'], "
                  f"kv_cache_scheme={kv_scheme!r})" +
                  (f"; calibration: {CALIB_SEQS} sequences x {CALIB_LEN} ids, "
                   f"torch.Generator().manual_seed({SEED}), randint(3, {VOCAB})" if calib else ""),
        # The source model's plain logits (bf16 case) for the same prompts: the quantization
        # effect, e.g. to size a tolerance.
        "source_bf16_logits": [w.array(f"{src}_bf16_p{i}", t) for i, t in enumerate(base_logits)],
        "ct_facts": facts, "max_abs_diffs": diag,
        # The producer's own stack, as a cross-check only (its logits are not stored: they equal
        # fp8lm_semantics, see max_abs_diffs["llmc_venv_ct_vs_fp8lm_semantics*"]).
        "llmc_venv_semantics": f"transformers {v['transformers']} + compressed-tensors {v['compressed_tensors']} "
                               f"(torch {v['torch']}), from_pretrained(dtype=float32), eager: " + LLMC_VENV_SEMANTICS[name],
        "cases": [
            # quantization null: the checkpoint's own scheme (no --quantization override)
            {"name": "transformers_compressed_tensors", "semantics": CT_SEMANTICS[name], "quantization": None,
             "kv_cache_dtype": "fp32", "kv_scales": None, "max_abs_diff_vs_bf16": per_prompt(ct, base_logits),
             "max_abs_diff_accumulation_twin": ct_noise,
             "logits": [w.array(f"{name}_ct_p{i}", t) for i, t in enumerate(ct)]},
            {"name": "fp8lm_semantics", "semantics": FP8LM_SEMANTICS[name], "quantization": None,
             "kv_cache_dtype": "fp8_e4m3" if kv else "fp32", "kv_scales": kv,
             "max_abs_diff_vs_bf16": per_prompt(emu, base_logits), "max_abs_diff_accumulation_twin": emu_noise,
             "logits": [w.array(f"{name}_fp8lm_p{i}", t) for i, t in enumerate(emu)]},
        ]}, v


# ---------------------------------------------------------------- shipped model

SHIPPED_PROMPTS = [
    ("text", "It was a dark and stormy night"),
    ("text", "The old man looked at the sea and"),
    ("chat", "Tell me a short story about a lighthouse keeper."),
    ("text", "She opened the letter, read the first line, and"),
]


@torch.no_grad()
def shipped(w: ArrayWriter) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
    folder = REPO / SHIPPED
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, attn_implementation="eager")
    model = model.float().eval()
    out = {"dir": SHIPPED, "new_tokens": SHIPPED_NEW_TOKENS, "prompts": []}
    for i, (kind, text) in enumerate(SHIPPED_PROMPTS):
        entry = {"kind": kind}
        if kind == "chat":
            entry["messages"] = [{"role": "user", "content": text}]
            text = tok.apply_chat_template(entry["messages"], add_generation_prompt=True, tokenize=False)
        ids = tok(text)["input_ids"]  # the tokenizer's defaults (it adds no BOS)
        full = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
        # Greedy by hand, with a KV cache: argmax of the raw logits, never stopping at EOS and
        # never suppressing it (generate()'s min_new_tokens would mask EOS out of the argmax).
        cache = DynamicCache(config=model.config)
        step = model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True).logits[0, -1].float()
        assert torch.equal(step, full[-1]) or float((step - full[-1]).abs().max()) < 1e-4
        greedy, margins = [], []
        for _ in range(SHIPPED_NEW_TOKENS):
            top = torch.topk(step, 2)
            greedy.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            step = model(input_ids=torch.tensor([[greedy[-1]]]), cache=cache, use_cache=True).logits[0, -1].float()
        entry.update({"text": text, "ids": ids, "greedy": greedy, "margins": margins,
                      "last_logits": w.array(f"shipped_p{i}_last", full[-1].contiguous())})
        out["prompts"].append(entry)
        print(f"  shipped p{i}: {len(ids)} ids, min margin {min(margins):.4g}, "
              f"greedy {tok.decode(greedy)[:50]!r}")
    return out


# ---------------------------------------------------------------- mixture of experts

MOE_ARCHS = ["qwen3_moe", "qwen3_moe_nonorm", "mixtral"]
MOE_DIR = "moe"  # under --out: its own manifest and arrays, so ArrayWriter's clearing stays apart
MOE_GAP_OVER_NOISE = 100  # a token's k-th - (k+1)-th router probability ≥ this × float32 noise (topk_margin)


MOE_FP8_ARCHS = ["qwen3_moe", "mixtral"]  # the FP8 cases (kept to two models: the fixtures stay small)


class Fp8Experts(nn.Module):
    """A sparse block's experts (transformers' Qwen3MoeExperts / MixtralExperts eager loop, whose
    gate_up_proj [E, 2I, H] holds gate then up) with every projection in FP8 as fp8lm's
    --quantization fp8:* runs it: each expert's gate, up and down quantized on its own
    (ct_weight, compressed-tensors' arithmetic, as the loader does per checkpoint tensor),
    activations through quantize_activation (vLLM's quantizers), products in float64 (like
    Fp8Linear). A dynamic per-TENSOR activation scale is one scale for the whole call, as vLLM's
    fused MoE takes it (moe_kernel_quantize_input on the whole batch, then on the whole
    intermediate cache): gate/up's over every token of the block's input, down's over every
    routed token's SwiGLU output. Per-token / per-group scales are per row, so gathering first
    or after is the same."""

    def __init__(self, experts, layout: str, act: str, weights=None, quantize=None):
        super().__init__()
        width = experts.intermediate_dim
        gate_up, down = experts.gate_up_proj.detach(), experts.down_proj.detach()
        self.num_experts, self.act, self.act_fn, self.quantize = experts.num_experts, act, experts.act_fn, quantize
        if weights is not None:  # a checkpoint's own: ([gate], [up], [down]) dequantized, float64
            self.gate, self.up, self.down = weights
        else:
            self.gate = [ct_weight(gate_up[e, :width], layout) for e in range(self.num_experts)]
            self.up = [ct_weight(gate_up[e, width:], layout) for e in range(self.num_experts)]
            self.down = [ct_weight(down[e], layout) for e in range(self.num_experts)]
        self.accum = torch.float64

    def quantized(self, x):
        if self.quantize is not None:
            return self.quantize(x.float())
        if self.act == "none":
            return x.double()
        codes, _, full = quantize_activation(x.float(), self.act, 0.0, 0.0)
        return codes.double() * full.double()

    def matmul(self, xd, w):
        return (xd.to(self.accum) @ w.to(self.accum).T).float()

    def forward(self, hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        xd = self.quantized(hidden_states)
        routed, acts = [], []
        for e in range(self.num_experts):
            # transformers' order: the tokens that chose e first, then second, ...
            pos, tok = torch.where((top_k_index == e).T)
            if len(tok) == 0:
                continue
            gate, up = self.matmul(xd[tok], self.gate[e]), self.matmul(xd[tok], self.up[e])
            routed.append((e, pos, tok))
            acts.append(self.act_fn(gate) * up)
        ad = self.quantized(torch.cat(acts))
        start = 0
        for (e, pos, tok), a in zip(routed, acts):
            y = self.matmul(ad[start:start + len(tok)], self.down[e])
            start += len(tok)
            out.index_add_(0, tok, (y * top_k_weights[tok, pos, None]).to(out.dtype))
        return out


def online_fp8_moe(model, layout: str, act: str):
    """online_fp8 (attention, dense MLPs) plus every sparse block's experts as Fp8Experts; the
    routers stay float32 (transformers' TopKRouter is not an nn.Linear, so replace_linears leaves
    it, as fp8lm never quantizes a router)."""
    m = online_fp8(model, layout, act)
    for layer in m.model.layers:
        if hasattr(layer.mlp, "experts"):
            layer.mlp.experts = Fp8Experts(layer.mlp.experts, layout, act)
    return m


def tiny_moe_config(arch: str):
    import transformers
    common = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  vocab_size=VOCAB, max_position_embeddings=256, rms_norm_eps=1e-6, initializer_range=0.08,
                  bos_token_id=1, eos_token_id=2, tie_word_embeddings=False, num_experts_per_tok=2,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    if arch == "qwen3_moe":
        # Layer 1 dense through mlp_only_layers (its own width, intermediate_size); 0 and 2 sparse.
        return transformers.Qwen3MoeConfig(**common, num_hidden_layers=3, num_experts=8, moe_intermediate_size=48,
                                           intermediate_size=80, norm_topk_prob=True, decoder_sparse_step=1,
                                           mlp_only_layers=[1])
    if arch == "qwen3_moe_nonorm":
        # decoder_sparse_step 2: layer 1 ((1 + 1) % 2 == 0) sparse, layer 0 dense; top-k not renormalised.
        return transformers.Qwen3MoeConfig(**common, num_hidden_layers=2, num_experts=8, moe_intermediate_size=48,
                                           intermediate_size=80, norm_topk_prob=False, decoder_sparse_step=2,
                                           mlp_only_layers=[])
    if arch == "mixtral":
        # intermediate_size is each expert's width; every layer sparse, top-2 always renormalised.
        return transformers.MixtralConfig(**common, num_hidden_layers=2, num_local_experts=8, intermediate_size=48,
                                          sliding_window=None)
    raise ValueError(arch)


def make_tiny_moe(arch: str, index: int, folder: Path):
    """As make_tiny: random init, RMSNorm weights randomised, parameters rounded to BF16, saved."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(SEED + index)
    model = AutoModelForCausalLM.from_config(tiny_moe_config(arch), dtype=torch.float32,
                                             attn_implementation="eager", experts_implementation="eager")
    g = torch.Generator().manual_seed(1000 + index)
    with torch.no_grad():
        for _, mod in model.named_modules():
            if type(mod).__name__.endswith("RMSNorm"):
                mod.weight.copy_(1.0 + NORM_STD * torch.randn(mod.weight.shape, generator=g))
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    clean(folder)
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(folder)
    (folder / "generation_config.json").unlink(missing_ok=True)
    return model.eval()


def load_moe_f32(folder: Path):
    """load_f32 with transformers' eager expert loop (the default, grouped_mm, is another kernel)."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager",
                                                 experts_implementation="eager")
    return model.eval()


def run_hooked(model, prompts: list, handles: list):
    """The model over the prompts with forward hooks in place, removed afterwards whatever happens."""
    try:
        run_logits(model, prompts)
    finally:
        for h in handles:
            h.remove()


def router_probs(model, prompts) -> dict:
    """Every MoE layer's router probabilities [tokens of all prompts, experts], float32."""
    probs, handles = {}, []
    for i, layer in enumerate(model.model.layers):
        router = getattr(layer.mlp, "gate", None)
        if router is None or not hasattr(router, "top_k"):
            continue  # a dense layer (it has gate_proj, no router)

        def hook(mod, args, out, i=i):
            x = args[0].reshape(-1, mod.hidden_dim)
            probs.setdefault(i, []).append(torch.softmax(torch.nn.functional.linear(x, mod.weight).float(), dim=-1))
        handles.append(router.register_forward_hook(hook))
    run_hooked(model, prompts, handles)
    return {i: torch.cat(p) for i, p in probs.items()}


def topk_margin(model, prompts) -> dict:
    """How safe the expert choices are: per MoE layer, the smallest gap between any token's k-th and
    (k+1)-th router probability, against how far float32 noise moves a probability — measured as
    in tiny_cases, by the accumulation twin (every nn.Linear accumulated in float64), the largest
    |Δp| over all tokens and experts. A gap many times the noise means no other implementation's
    rounding changes an expert choice (which would move that token's logits by far more than the
    tolerance)."""
    k = model.config.num_experts_per_tok
    probs, twin_probs = router_probs(model, prompts), router_probs(twin(model), prompts)
    gaps = {i: float((p.topk(k + 1, dim=-1).values[:, k - 1] - p.topk(k + 1, dim=-1).values[:, k]).min())
            for i, p in probs.items()}
    noise = max(float((probs[i] - twin_probs[i]).abs().max()) for i in probs)
    return {"layers": sorted(probs), "min_topk_gap": min(gaps.values()), "router_prob_noise": noise}


def moe_fp8_cases(arch: str, model, prompts: list, plain: list, w: ArrayWriter) -> list:
    """The online FP8 schemes (ONLINE) on an MoE model: Fp8Linear everywhere but lm_head and the
    routers, Fp8Experts in the sparse blocks. Each FP8 model's own expert choices must be as safe
    from float32 noise as the BF16 model's (topk_margin on the FP8 model and its twin)."""
    cases = []
    for case, (quant, layout, act) in ONLINE.items():
        m = online_fp8_moe(model, layout, act)
        logits = run_logits(m, prompts)
        noise = per_prompt(logits, run_logits(twin(m), prompts))
        margin = topk_margin(m, prompts)
        d = max_diff(logits, plain)
        print(f"  {arch:16s} {case:15s} vs bf16: max {d:<8.4g} mean {mean_diff(logits, plain):<8.3g} "
              f"top-1 agree {top1_agreement(logits, plain):.3f} | twin max {max(noise):.3g} | top-k gap "
              f"{margin['min_topk_gap']:.3g}, router noise {margin['router_prob_noise']:.3g}")
        assert 0 < d < 2.0, (arch, case, d)  # must differ, by a modest amount
        assert margin["min_topk_gap"] >= MOE_GAP_OVER_NOISE * margin["router_prob_noise"], (arch, case, margin)
        cases.append({"name": case, "quantization": quant, "kv_cache_dtype": "fp32", "kv_scales": None,
                      "max_abs_diff_vs_bf16": per_prompt(logits, plain), "mean_abs_diff_vs_bf16": mean_diff(logits, plain),
                      "max_abs_diff_accumulation_twin": noise, "min_topk_gap": margin["min_topk_gap"],
                      "router_prob_noise": margin["router_prob_noise"],
                      "logits": [w.array(f"{arch}_{case}_p{i}", t) for i, t in enumerate(logits)]})
    return cases


# FP8 MoE checkpoints: the Hugging Face "fp8" layout of Qwen3-30B-A3B-FP8 (per-expert
# weight_scale_inv blocks) written by transformers' own quantizer, and LLM Compressor's FP8_BLOCK
# Qwen3-MoE checkpoint of tests/fixtures/checkpoints. Neither runs in transformers on a CPU with
# fp8lm's semantics (without a GPU transformers dequantizes an fp8 checkpoint — and needs
# accelerate, not in the fixture venv — and quantizes no activation; compressed-tensors 0.20.1's
# group quantizer fails on K = 64 < 128), so the reference is the emulation on the checkpoint's
# own codes and scales.
MOE_HF_BLOCK = 16  # transformers' Fp8Quantize leaves a weight whose dims are not multiples of the
                   # block unquantized, and the tiny dims (64, 48, 32) are not multiples of 128
MOE_CT_BLOCK = "../checkpoints/ct_fp8_block_qwen3_moe"  # relative to --out
MOE_CT_SOURCE = "../checkpoints/qwen3_moe_bf16"          # the model it was made from (asserted)


def group_quantizer(g: int):
    """quantize_activation's dynamic_group (vLLM's per-token-group rule) for groups of g."""
    def quantize(x):
        m, k = x.shape
        cols = -(-k // g)
        s = torch.empty(m, cols, dtype=torch.float32)
        for j in range(cols):
            s[:, j] = torch.clamp(x[:, j * g:(j + 1) * g].abs().amax(dim=1), min=1e-10) / FMAX
        full = s.repeat_interleave(g, 1)[:, :k]
        return fp8(x, full).double() * full.double()
    return quantize


def block_dequant(codes, scales, bn: int, bk: int):
    n, k = codes.shape
    return codes.double() * scales.double().repeat_interleave(bn, 0).repeat_interleave(bk, 1)[:n, :k]


def block_checkpoint_emulation(src_model, folder: Path, scale_suffix: str, bn: int, bk: int):
    """src_model (float32) with every FP8 weight of `folder`'s checkpoint as codes x scale (block
    grid), activations in dynamic 1 x bk groups: Fp8Linear for attention and dense MLPs,
    Fp8Experts for the sparse blocks (Qwen3-MoE names). Asserts that every tensor the checkpoint
    keeps in high precision equals src_model's (so src_model is its source)."""
    from safetensors.torch import load_file
    sd = load_file(str(folder / "model.safetensors"))
    src = src_model.state_dict()
    for k, v in sd.items():
        if v.dtype != torch.float8_e4m3fn and not k.endswith(scale_suffix) and k in src:
            assert torch.equal(v.float(), src[k]), k
    quantize = group_quantizer(bk)
    deq = lambda name: block_dequant(sd[name + ".weight"], sd[name + "." + scale_suffix], bn, bk)

    def make(name, lin):
        assert sd[name + ".weight"].dtype == torch.float8_e4m3fn, name
        return Fp8Linear(deq(name), None, "group", quantize=quantize)
    m = replace_linears(copy.deepcopy(src_model), make)
    for i, layer in enumerate(m.model.layers):
        if hasattr(layer.mlp, "experts"):
            ex = layer.mlp.experts
            p = f"model.layers.{i}.mlp.experts."
            w = tuple([deq(f"{p}{e}.{proj}") for e in range(ex.num_experts)] for proj in ("gate_proj", "up_proj", "down_proj"))
            layer.mlp.experts = Fp8Experts(ex, None, None, weights=w, quantize=quantize)
    return m.eval(), sd


def make_hf_fp8_moe(src: Path, folder: Path):
    """Qwen3-30B-A3B-FP8's layout from the tiny qwen3_moe: every linear but the routers and lm_head
    as F8_E4M3 codes + F32 weight_scale_inv blocks, quantized by transformers' Fp8Quantize (the op
    FineGrainedFP8Config uses to quantize and save_pretrained to write), config.json with
    quantization_config {quant_method fp8, activation_scheme dynamic, fmt e4m3, weight_block_size}."""
    from types import SimpleNamespace
    from safetensors.torch import load_file, save_file
    from transformers import FineGrainedFP8Config
    from transformers.integrations.finegrained_fp8 import Fp8Quantize
    quantizer = Fp8Quantize(SimpleNamespace(quantization_config=FineGrainedFP8Config(
        weight_block_size=(MOE_HF_BLOCK, MOE_HF_BLOCK))))
    out = {}
    for k, v in load_file(str(src / "model.safetensors")).items():
        keep = v.ndim != 2 or k.endswith(".mlp.gate.weight") or k in ("lm_head.weight", "model.embed_tokens.weight")
        out.update({k: v} if keep else quantizer.convert({k: v}))
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                                  "weight_block_size": [MOE_HF_BLOCK, MOE_HF_BLOCK]}
    clean(folder)
    save_file(out, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


# A static FP8 MoE checkpoint (LLM Compressor's FP8 preset layout, as `fp8lm quantize --scheme FP8`
# writes it): every linear but the routers and lm_head FP8 per tensor, with a BF16 [1] input_scale
# each. Written by this script from the tiny models (LLM Compressor calibrates every expert on every
# token, so its gate/up scales of a layer are one value and vLLM's max rule could not show; see
# tests/fixtures/quantize/README.md, "MoE"): the scales here differ per expert, gate from up too.
MOE_STATIC = {  # source model: (fixture, the sparse block's name on disk, its experts' gate / up / down on disk,
                #                the seed of the scale factors: one whose largest gate/up scale is a gate's in
                #                one layer and an up's in another, see moe_checkpoints)
    "qwen3_moe": ("ct_fp8_static_qwen3_moe", "mlp", ("gate_proj", "up_proj", "down_proj"), 3000),
    "mixtral": ("ct_fp8_static_mixtral", "block_sparse_moe", ("w1", "w3", "w2"), 3001),
}
MOE_LLMC_FP8 = "../quantize/moe_qwen3_FP8"  # relative to --out: LLM Compressor's FP8 preset on a Qwen3-MoE


def expert_names(arch: str, layer: int, e: int) -> tuple:
    _, block, projs, _ = MOE_STATIC[arch]
    return tuple(f"model.layers.{layer}.{block}.experts.{e}.{p}" for p in projs)


@torch.no_grad()
def moe_calibration(arch: str, model, prompts) -> dict:
    """amax of every quantized linear's input over the prompts (the BF16 model, float32), by the
    checkpoint's module name: a dense linear's over every token; an expert's over the tokens routed
    to it only (gate and up: those rows of the block's input; down: their SwiGLU), so the experts'
    ranges differ, as a calibration that runs each expert on its own tokens finds them."""
    amax, handles = {}, []

    def note(name, t):
        amax[name] = max(amax.get(name, 0.0), float(t.float().abs().amax()))

    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and name != "lm_head":
            handles.append(mod.register_forward_pre_hook(lambda m, a, name=name: note(name, a[0])))
        elif hasattr(mod, "gate_up_proj"):  # the sparse block's experts (transformers' fused parameters)
            def hook(m, args, layer=int(name.split(".")[2])):
                x, index = args[0], args[1]
                width = m.intermediate_dim
                for e in range(m.num_experts):
                    xe = x[(index == e).any(dim=-1)]
                    if len(xe) == 0:
                        continue  # none in this prompt (every expert has some over all: make_ct_fp8_static_moe)
                    act = m.act_fn(xe @ m.gate_up_proj[e, :width].T) * (xe @ m.gate_up_proj[e, width:].T)
                    gate, up, down = expert_names(arch, layer, e)
                    note(gate, xe), note(up, xe), note(down, act)
            handles.append(mod.register_forward_pre_hook(hook))
    run_hooked(model, prompts, handles)
    return amax


def make_ct_fp8_static_moe(arch: str, src: Path, folder: Path, model, prompts, llmc_fp8: Path):
    """The static FP8 checkpoint of `src` (the BF16 tiny model `model` was loaded from): every 2-D
    weight but the routers, lm_head and the embeddings quantized per tensor as compressed-tensors
    does (ct_case: BF16 weight_scale [1]); input_scale = bf16(amax / 448 x f), amax from
    moe_calibration in float32, f = 1 for a dense linear and a seeded factor in [1, 2) for each
    expert linear (so that the block's largest gate/up scale is one expert's gate in one layer and
    another's up in another, asserted); config.json = the source's + LLM Compressor's FP8 preset
    quantization_config (read from its checkpoint `llmc_fp8`), `ignore` naming the routers in module
    order and lm_head, as compressed-tensors and fp8lm quantize write it."""
    from safetensors.torch import load_file, save_file
    _, block, _, seed = MOE_STATIC[arch]
    amax = moe_calibration(arch, model, prompts)
    g = torch.Generator().manual_seed(seed)
    sd = load_file(str(src / "model.safetensors"))
    is_router = lambda k: k.endswith(f".{block}.gate.weight")
    out = {}
    for k, v in sd.items():
        if v.ndim != 2 or is_router(k) or k in ("lm_head.weight", "model.embed_tokens.weight"):
            out[k] = v
            continue
        name = k[:-len(".weight")]
        codes, scale = ct_case(v, "tensor")
        expert = ".experts." in name
        f = 1.0 + float(torch.rand((), generator=g)) if expert else 1.0
        assert name in amax, (name, "saw no calibration token")
        s = torch.tensor(amax.pop(name), dtype=torch.float32) / FMAX * torch.tensor(f, dtype=torch.float32)
        out.update({k: codes, name + ".weight_scale": scale.reshape(1),
                    name + ".input_scale": s.to(torch.bfloat16).reshape(1)})
    assert not amax, sorted(amax)  # every calibrated linear is in the file
    ignore = [k[:-len(".weight")] for k in sd if is_router(k)]
    ignore.sort(key=lambda n: int(n.split(".")[2]))
    qc = json.loads((llmc_fp8 / "config.json").read_text())["quantization_config"]
    qc["ignore"] = ignore + ["lm_head"]
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"] = qc
    clean(folder)
    save_file(out, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


class StaticFp8Experts(Fp8Experts):
    """Fp8Experts with a checkpoint's static per-tensor input scales, one per expert linear, run as
    vLLM's fused MoE runs them (and fp8lm, Ops::moe): one scale for the gate/up input of the whole
    block, the largest of every expert's gate AND up input_scale, and one for down's input, the
    largest of the down input_scales; x' = fp8(clamp(x / s, +-448)) * s, float32 division.
    per_expert=True gives each expert linear its own scale instead (a loop over per-expert
    linears: NOT what fp8lm does; the fixture measures how far that is from the max rule)."""

    def __init__(self, experts, weights, scales, per_expert=False):
        super().__init__(experts, None, "static_tensor", weights=weights)
        gate, up, down = scales
        if not per_expert:
            gate = up = [max(gate + up)] * len(gate)
            down = [max(down)] * len(down)
        self.scales = (gate, up, down)

    @staticmethod
    def static(x, s: float):
        codes, _, full = quantize_activation(x.float(), "static_tensor", s, 0.0)
        return codes.double() * full.double()

    def forward(self, hidden_states, top_k_index, top_k_weights):
        gs, us, ds = self.scales
        out = torch.zeros_like(hidden_states)
        for e in range(self.num_experts):  # a static scale is per element: the row order does not matter
            pos, tok = torch.where((top_k_index == e).T)
            if len(tok) == 0:
                continue
            x = hidden_states[tok]
            gate, up = self.matmul(self.static(x, gs[e]), self.gate[e]), self.matmul(self.static(x, us[e]), self.up[e])
            y = self.matmul(self.static(self.act_fn(gate) * up, ds[e]), self.down[e])
            out.index_add_(0, tok, (y * top_k_weights[tok, pos, None]).to(out.dtype))
        return out


def static_checkpoint_emulation(arch: str, src_model, folder: Path, per_expert=False):
    """src_model (float32) with every FP8 weight of the static checkpoint `folder` as codes x
    weight_scale: Fp8Linear with its own input_scale for attention and dense MLPs, StaticFp8Experts
    for the sparse blocks. Asserts that the tensors the checkpoint keeps in high precision are
    src_model's. Returns (model, the per-layer expert input scales)."""
    from safetensors.torch import load_file
    sd = load_file(str(folder / "model.safetensors"))
    src = src_model.state_dict()
    for k, v in sd.items():
        if v.dtype != torch.float8_e4m3fn and not k.endswith(("weight_scale", "input_scale")) and k in src:
            assert torch.equal(v.float(), src[k]), k
    deq = lambda name: sd[name + ".weight"].double() * sd[name + ".weight_scale"].double()
    in_scale = lambda name: float(sd[name + ".input_scale"].float())

    def make(name, lin):
        assert sd[name + ".weight"].dtype == torch.float8_e4m3fn and lin.bias is None, name
        return Fp8Linear(deq(name), None, "static_tensor", in_scale(name))
    m = replace_linears(copy.deepcopy(src_model), make)
    scales = {}
    for i, layer in enumerate(m.model.layers):
        if hasattr(layer.mlp, "experts"):
            ex = layer.mlp.experts
            names = [expert_names(arch, i, e) for e in range(ex.num_experts)]
            w = tuple([deq(n[j]) for n in names] for j in range(3))
            scales[i] = tuple([in_scale(n[j]) for n in names] for j in range(3))
            layer.mlp.experts = StaticFp8Experts(ex, w, scales[i], per_expert)
    return m.eval(), scales


def moe_checkpoint_entry(name: str, folder: Path, dir_name: str, model, prompts, base_logits, semantics: str,
                         w: ArrayWriter, facts: dict) -> dict:
    logits = run_logits(model, prompts)
    noise = per_prompt(logits, run_logits(twin(model), prompts))
    margin = topk_margin(model, prompts)
    d = max_diff(logits, base_logits)
    print(f"  {name}: vs source bf16 max {d:.4g} mean {mean_diff(logits, base_logits):.3g} | twin max "
          f"{max(noise):.3g} | top-k gap {margin['min_topk_gap']:.3g}, router noise {margin['router_prob_noise']:.3g}")
    assert 0 < d < 2.0, (name, d)
    assert margin["min_topk_gap"] >= MOE_GAP_OVER_NOISE * margin["router_prob_noise"], (name, margin)
    return {"dir": dir_name, "architecture": type(model).__name__, "prompts": prompts,
            "source_bf16_logits": [w.array(f"{name}_source_bf16_p{i}", t) for i, t in enumerate(base_logits)],
            **facts, "min_topk_gap": margin["min_topk_gap"], "router_prob_noise": margin["router_prob_noise"],
            "cases": [{"name": "fp8lm_semantics", "semantics": semantics, "quantization": None,
                       "kv_cache_dtype": "fp32", "kv_scales": None,
                       "max_abs_diff_vs_bf16": per_prompt(logits, base_logits),
                       "max_abs_diff_accumulation_twin": noise,
                       "logits": [w.array(f"{name}_p{i}", t) for i, t in enumerate(logits)]}]}


def moe_checkpoints(out: Path, w: ArrayWriter, manifest: dict):
    moe_out = out / MOE_DIR
    q = manifest["models"]["qwen3_moe"]
    base = [torch.from_numpy(__import__("numpy").fromfile(moe_out / f, dtype="<f4")).reshape(len(p), -1)
            for f, p in zip(q["cases"][0]["logits"], q["prompts"])]
    src = load_moe_f32(moe_out / "qwen3_moe")
    folder = moe_out / "hf_fp8_block_qwen3_moe"
    make_hf_fp8_moe(moe_out / "qwen3_moe", folder)
    # (transformers would load this only through accelerate, which the fixture venv lacks; the
    # bytes are its own quantizer's, the reading of them is the emulation's.)
    emu, _ = block_checkpoint_emulation(src, folder, "weight_scale_inv", MOE_HF_BLOCK, MOE_HF_BLOCK)
    b = MOE_HF_BLOCK
    manifest["models"]["hf_fp8_block_qwen3_moe"] = moe_checkpoint_entry(
        "hf_fp8_block_qwen3_moe", folder, f"{MOE_DIR}/hf_fp8_block_qwen3_moe", emu, q["prompts"], base,
        f"W = codes x weight_scale_inv ({b}x{b} blocks, F32); x in dynamic 1x{b} groups, scale = max(amax, 1e-10) "
        "/ 448 (vLLM's per-token-group rule); products in float64; experts as Fp8Experts; router and lm_head "
        "float32 of the BF16 values.", w, {"source": f"{MOE_DIR}/qwen3_moe"})

    ct = (out / MOE_CT_BLOCK).resolve()
    ct_src = load_moe_f32((out / MOE_CT_SOURCE).resolve())
    emu, _ = block_checkpoint_emulation(ct_src, ct, "weight_scale", 128, 128)
    prompts = make_prompts(13)
    manifest["models"]["ct_fp8_block_qwen3_moe"] = moe_checkpoint_entry(
        "ct_fp8_block_qwen3_moe", ct, MOE_CT_BLOCK, emu, prompts, run_logits(ct_src, prompts),
        "LLM Compressor's FP8_BLOCK checkpoint (tests/fixtures/checkpoints) run with fp8lm's semantics: "
        "W = codes x weight_scale (128x128 blocks, BF16 widened; ragged: dims < 128); x in dynamic 1x128 groups "
        "(vLLM's rule); products in float64; experts as Fp8Experts; the ignored routers and lm_head float32.",
        w, {"source": MOE_CT_SOURCE})

    for arch, (name, *_) in MOE_STATIC.items():
        src = load_moe_f32(moe_out / arch)
        prompts = manifest["models"][arch]["prompts"]
        base = run_logits(src, prompts)
        folder = moe_out / name
        make_ct_fp8_static_moe(arch, moe_out / arch, folder, src, prompts, (out / MOE_LLMC_FP8).resolve())
        emu, scales = static_checkpoint_emulation(arch, src, folder)
        # Which linear holds each block's gate/up scale: a gate in one layer and an up in another,
        # so taking the gates' (or the ups') largest for both, or each its own, is a different model.
        holders = {}
        for layer, (gs, us, _) in scales.items():
            kind, e = max([(s, "gate", e) for e, s in enumerate(gs)] + [(s, "up", e) for e, s in enumerate(us)])[1:]
            assert max(gs) != max(us), (arch, layer)
            holders[str(layer)] = f"expert {e} {kind}"
        assert {h.split()[-1] for h in holders.values()} == {"gate", "up"}, (arch, holders)
        # How far each expert linear with its own scale (a loop over per-expert linears) is from the
        # max rule, in units of the quantization effect: the C++ test (mean|Δ| ≤ 0.25 of the effect,
        # test_model_logits.cpp) must tell them apart, with room (a different rounding of the same
        # values, so it stays near 0.4-0.6 however far the scales spread: [1, 3) and [1, 4) tried).
        ref = run_logits(emu, prompts)
        loop = run_logits(static_checkpoint_emulation(arch, src, folder, per_expert=True)[0], prompts)
        apart = [float((a - r).abs().mean() / (r - b).abs().mean()) for a, r, b in zip(loop, ref, base)]
        print(f"  {name}: largest gate/up input scale {holders}; per-expert scales vs the max rule: "
              f"mean|Δ| / effect {', '.join(f'{x:.3g}' for x in apart)}")
        assert min(apart) > 1.5 * 0.25, (name, apart)
        manifest["models"][name] = moe_checkpoint_entry(
            name, folder, f"{MOE_DIR}/{name}", emu, prompts, base,
            "A static FP8 checkpoint written by this script from the BF16 model (compressed-tensors, LLM Compressor's "
            "FP8 preset: per-tensor weights, BF16 weight_scale; a BF16 per-tensor input_scale for every linear, each "
            "expert's from the tokens routed to it and spread by a seeded factor in [1, 2); routers and lm_head "
            "ignored) run with fp8lm's semantics: W = codes x weight_scale; attention and dense MLP: "
            "x' = fp8(clamp(x / input_scale, +-448)) * input_scale (float32 division); the experts as vLLM's fused "
            "MoE runs them: gate and up take one scale, the largest input_scale of the block's experts' gate and up "
            "together, down the largest of their down input_scales; products in float64; router and lm_head "
            "float32 of the BF16 values.",
            w, {"source": f"{MOE_DIR}/{arch}", "largest_gate_up_input_scale": holders,
                "per_expert_scales_mean_abs_diff_over_effect": apart})


def moe_fixtures(out: Path):
    import safetensors
    import transformers
    moe_out = out / MOE_DIR
    w = ArrayWriter(moe_out)
    manifest = {"generated_by": {
        "script": "tools/make_model_fixtures.py", "torch": torch.__version__.split("+")[0],
        "transformers": transformers.__version__, "safetensors": safetensors.__version__, "threads": 1,
        "attention": "eager", "experts": "eager"}, "models": {}}
    for index, arch in enumerate(MOE_ARCHS):
        folder = moe_out / arch
        ref = make_tiny_moe(arch, 10 + index, folder)
        model = load_moe_f32(folder)
        prompts = make_prompts(10 + index)
        logits = run_logits(model, prompts)
        assert all(torch.equal(a, b) for a, b in zip(logits, run_logits(ref, prompts))), arch
        std = min(float(t.std(dim=-1).min()) for t in logits)
        margin = topk_margin(model, prompts)
        sparse = [i for i in range(model.config.num_hidden_layers)
                  if type(model.model.layers[i].mlp).__name__.endswith("SparseMoeBlock")]
        assert margin["layers"] == sparse and sparse, (arch, margin, sparse)
        print(f"{arch}: sparse layers {sparse}, smallest logits std {std:.3f}, smallest top-k gap "
              f"{margin['min_topk_gap']:.3g}, router probability noise {margin['router_prob_noise']:.3g}")
        assert std >= 0.5, (arch, std)
        assert margin["min_topk_gap"] >= MOE_GAP_OVER_NOISE * margin["router_prob_noise"], (arch, margin)
        manifest["models"][arch] = {
            "dir": f"{MOE_DIR}/{arch}", "architecture": type(model).__name__, "prompts": prompts,
            "sparse_layers": sparse, "min_topk_gap": margin["min_topk_gap"],
            "router_prob_noise": margin["router_prob_noise"],
            "cases": [{"name": "bf16", "quantization": None, "kv_cache_dtype": "fp32", "kv_scales": None,
                       "logits": [w.array(f"{arch}_bf16_p{i}", t) for i, t in enumerate(logits)]}]}
        if arch in MOE_FP8_ARCHS:
            manifest["models"][arch]["cases"] += moe_fp8_cases(arch, model, prompts, logits, w)
    moe_checkpoints(out, w, manifest)
    (moe_out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(p.stat().st_size for p in moe_out.rglob("*") if p.is_file())
    print(f"{total} bytes in {moe_out}")


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "tests/fixtures/models"))
    ap.add_argument("--llmc-python", default=str(REPO / ".venv-llmc/bin/python"),
                    help="python of a venv with llmcompressor (default: .venv-llmc/bin/python)")
    ap.add_argument("--skip-llmc", action="store_true",
                    help="keep the LLM Compressor checkpoints, their logits and manifest entries as they are")
    ap.add_argument("--only-moe", action="store_true",
                    help="regenerate only the mixture-of-experts fixtures (<out>/moe), leaving the rest as it is")
    ap.add_argument("--llmc-worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.llmc_worker:
        return llmc_worker(json.loads(args.llmc_worker))
    if args.only_moe:
        from transformers.utils import logging as hf_logging
        torch.set_num_threads(1)
        hf_logging.set_verbosity_error()
        return moe_fixtures(Path(args.out))
    if not args.skip_llmc and not Path(args.llmc_python).exists():
        sys.exit(f"{args.llmc_python} not found: pass --llmc-python PATH (a venv with llmcompressor) or --skip-llmc")

    import compressed_tensors
    import safetensors
    import transformers
    from transformers.utils import logging as hf_logging

    # One thread: float32 GEMMs then add up in one order, so the logits are the same bytes on
    # every run (and every machine with the same ISA).
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    register_attention()
    out = Path(args.out)
    manifest_path = out / "manifest.json"
    old = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    kept = {}
    if args.skip_llmc:  # carry the LLM Compressor part over: its arrays are about to be cleared
        for name, *_ in LLMC:
            assert name in old.get("models", {}), f"no {name} in {manifest_path}: run without --skip-llmc"
            for case in old["models"][name]["cases"]:
                for f in case["logits"]:
                    kept[f] = (out / f).read_bytes()
    w = ArrayWriter(out)
    manifest = {"generated_by": {
        "script": "tools/make_model_fixtures.py", "torch": torch.__version__.split("+")[0],
        "transformers": transformers.__version__, "compressed_tensors": compressed_tensors.__version__,
        "safetensors": safetensors.__version__, "threads": 1, "attention": "eager"}, "models": {}}

    base_logits = {}
    for index, arch in enumerate(ARCHS):
        folder = out / arch
        ref = make_tiny(arch, index, folder)
        model = load_f32(folder)
        prompts = make_prompts(index)
        logits = run_logits(model, prompts)
        # The saved files reproduce the model that was saved, bit for bit.
        assert all(torch.equal(a, b) for a, b in zip(logits, run_logits(ref, prompts))), arch
        std = min(float(t.std(dim=-1).min()) for t in logits)
        print(f"{arch}: smallest std of the logits over the vocab (any position) = {std:.3f}")
        assert std >= 0.5, (arch, std)
        base_logits[arch] = logits
        manifest["models"][arch] = {"dir": arch, "architecture": type(model).__name__, "prompts": prompts,
                                    "cases": tiny_cases(arch, model, prompts, w)}

    if args.skip_llmc:
        for f, data in kept.items():
            (out / f).write_bytes(data)
        for name, *_ in LLMC:
            manifest["models"][name] = old["models"][name]
        manifest["generated_by"]["llmc_venv"] = old["generated_by"]["llmc_venv"]
    else:
        for name, src, preset, kv_scheme, calib in LLMC:
            make_llmc_checkpoint(out, name, src, preset, kv_scheme, calib, args.llmc_python)
            prompts = manifest["models"][src]["prompts"]
            manifest["models"][name], v = llmc_entry(name, src, preset, kv_scheme, calib, out / name, prompts,
                                                     w, base_logits[src], args.llmc_python)
            manifest["generated_by"]["llmc_venv"] = v

    manifest["shipped"] = shipped(w)
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    moe_fixtures(out)
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{total} bytes in {out}")


# What each LLM Compressor case computes; the evidence is in the manifest's ct_facts /
# max_abs_diffs and in tests/fixtures/models/README.md.
_CT = ("transformers 5.24.0 + compressed-tensors 0.20.1 (the pinned stack), from_pretrained(dtype=float32), eager "
       "attention. Weights: the first forward decompresses every quantized Linear (ModelCompressor decompress hook "
       "-> FloatQuantizationCompressor.decompress -> quantization.lifecycle.forward.dequantize): "
       "W = float32(codes) * weight_scale (BF16 on disk, float32 in the model), exact. Activations: each quantized "
       "Linear's forward is wrapped (set_forward_quantized -> forward_quantize -> fake_quantize -> "
       "_quantize_dequantize), computed in the model dtype, here float32: ")
_DYN = ("dynamic per token (compute_dynamic_scales_and_zp, strategy token): scale = amax(|x| over the hidden "
        "dim) / 448 (calculate_qparams; a scale of exactly 0 becomes the dtype's eps, no other floor), "
        "x' = fp8(clamp(x / scale, +-448)) * scale; y = F.linear(x', W) in float32. ")
_STA = ("static per tensor: x' = fp8(clamp(x / input_scale, +-448)) * input_scale, float32 division; "
        "y = F.linear(x', W) in float32. ")
_KV_DROPPED = ("KV cache NOT quantized: compressed-tensors 0.20.1 attaches its QuantizedKVCache only to attention "
               "modules whose forward has a past_key_value(s) parameter (initialize.is_cached_attention_module), "
               "and transformers 5.24 renamed it to `cache`; self_attn.k_scale / v_scale are reported UNEXPECTED "
               "and dropped at load. So this is the checkpoint's linear layers with a float32 KV cache (fp8lm: "
               "this checkpoint with --kv-cache-dtype overridden to a high-precision cache); it equals "
               "fp8lm_semantics without the KV round trip, bit for bit when that emulation accumulates in float32. ")
_LM = "lm_head (ignored by the recipe) runs in float32."
CT_SEMANTICS = {
    "llmc_fp8_dynamic_llama": _CT + _DYN + "No KV-cache scheme. " + _LM +
    " fp8lm equivalent: this checkpoint as is (channel weights, dynamic per-token activations, float32 KV); "
    "fp8lm floors the per-token scale at 1/(448*512), which only matters for tokens with amax < 1/512.",
    "llmc_fp8_static_kv_qwen3": _CT + _STA + _KV_DROPPED + _LM,
}
LLMC_VENV_SEMANTICS = {
    "llmc_fp8_dynamic_llama": "weights and activations exactly as in transformers_compressed_tensors (float32); "
    "equals fp8lm_semantics (bit for bit when that accumulates in float32).",
    "llmc_fp8_static_kv_qwen3": "weights and static activations as in transformers_compressed_tensors, and the KV cache "
    "IS fake-quantized, as the checkpoint intends: transformers 5.17's attention forward still takes "
    "`past_key_values`, so compressed-tensors registers QuantizedKVCache, whose update() (called after RoPE, before "
    "the GQA repeat) applies forward_quantize(attn, key, 'k') with the static self_attn.k_scale (likewise V with "
    "v_scale): t' = fp8(clamp(t / scale, +-448)) * scale in float32. Equals fp8lm_semantics (bit for bit when "
    "that accumulates in float32).",
}
_EMU = ("float32 emulation of fp8lm running this checkpoint (script's Fp8Linear on the checkpoint's own codes and "
        "scales; no transformers quantizer involved): W = codes * weight_scale (BF16 scale widened to float32); ")
FP8LM_SEMANTICS = {
    "llmc_fp8_dynamic_llama": _EMU + "x per token: scale = max(amax / 448, 1 / (448 * 512)) in float32, "
    "x' = fp8(clamp(x / scale, +-448)) * scale; y = x' @ W.T in float64, then float32. lm_head float32; KV float32.",
    "llmc_fp8_static_kv_qwen3": _EMU + "x' = fp8(clamp(x / input_scale, +-448)) * input_scale (float32 division); "
    "y = x' @ W.T in float64, then float32; K (after RoPE, before the GQA repeat) and V: "
    "t' = fp8(clamp(t / s, +-448)) * s in float32 with the checkpoint's per-layer k_scale / v_scale (kv_scales). "
    "lm_head float32. This is the checkpoint's intended semantics: the LLM Compressor venv's transformers + compressed-tensors "
    "compute exactly this (see llmc_venv_semantics and max_abs_diffs).",
}

if __name__ == "__main__":
    main()
