#!/usr/bin/env python3
"""Make the references of `fp8lm quantize` (tests/fixtures/quantize/) with LLM Compressor itself.

What it writes (tests/fixtures/quantize/README.md says what every byte is and how it is computed):

  <model>_<scheme>/   config.json, model.safetensors, recipe.yaml of LLM Compressor's `oneshot` +
                      `save_pretrained(save_compressed=True)` with
                      QuantizationModifier(targets="Linear", scheme=S, ignore=["lm_head"]):
      llama_FP8_DYNAMIC, llama_FP8_BLOCK, qwen3_FP8_DYNAMIC, qwen3_FP8_BLOCK   data-free
      llama_FP8_kv   scheme FP8 (static per-tensor weights and inputs) + an FP8 KV-cache scheme,
                     calibrated on the 4 x 32 token ids of calibration_ids.json
  calibration_ids.json   those ids, in the order LLM Compressor processed them

The sources are the BF16 tiny models of tests/fixtures/models/ (llama: untied, hidden 128,
intermediate 320, so 128x128 blocks are ragged; qwen3: tied embeddings, q/k norms).

Then it checks, every run, that the bytes are what the README says:
  * every weight_scale and every FP8 code is re-derived from the BF16 source with plain float32
    arithmetic plus explicit rounding (the recipe a C++ writer follows) and compared bit for bit;
    every other tensor is the source's, byte for byte; the tensor set, dtypes and shapes are exact;
  * model.safetensors is exactly what safetensors' save_file writes for those tensors with
    metadata {"format": "pt"};
  * config.json is exactly json.dumps(source config + quantization_config, indent=2,
    sort_keys=True), no trailing newline, with quantization_config spelled out here;
  * llama_FP8_kv: input_scale / k_scale / v_scale are recomputed bit for bit from a BF16 forward
    pass (the observers replayed with plain torch ops), and compared with a float32 forward pass
    (the differences are printed; README.md quotes them);
  * each checkpoint is made twice (two processes) and must come out byte-identical.

Run it with the LLM Compressor venv (llmcompressor 0.14.0.1, which pins torch / transformers /
compressed-tensors of its own; python3 -m venv .venv-llmc && .venv-llmc/bin/pip install llmcompressor):

    /tmp/llmcvenv/bin/python tools/make_quantize_fixtures.py      # or .venv-llmc/bin/python
        [--out tests/fixtures/quantize] [--check-only]

About 2 minutes on two CPU cores (--check-only: only the checks, 10 s); CPU only, one thread per
process. Run it twice: `git diff` shows nothing. NOTE: on a CUDA GPU of compute capability >= 9, compressed-tensors quantizes weights with a
Triton kernel that divides in float32 and rounds once (README.md); these fixtures are the CPU path.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "tests/fixtures/models"
FILES = ["config.json", "model.safetensors", "recipe.yaml"]
FMAX = 448.0
BF16_EPS = 2.0 ** -7  # torch.finfo(torch.bfloat16).eps: compressed-tensors' replacement of a zero scale
VOCAB = 256
CALIB_SEQS, CALIB_LEN, CALIB_SEED = 4, 32, 0
KV_CACHE_SCHEME = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}
CASES = [  # fixture folder, source model, preset scheme, calibrate (+ kv_cache_scheme)
    ("llama_FP8_DYNAMIC", "llama", "FP8_DYNAMIC", False),
    ("llama_FP8_BLOCK", "llama", "FP8_BLOCK", False),
    ("qwen3_FP8_DYNAMIC", "qwen3", "FP8_DYNAMIC", False),
    ("qwen3_FP8_BLOCK", "qwen3", "FP8_BLOCK", False),
    ("llama_FP8_kv", "llama", "FP8", True),
]
WEIGHT_STRATEGY = {"FP8_DYNAMIC": "channel", "FP8_BLOCK": "block", "FP8": "tensor"}
KV_EMA = 0.01  # llmcompressor's MinMaxObserver averaging_constant (observer "minmax", the KV default)


def calibration_ids() -> list:
    g = torch.Generator().manual_seed(CALIB_SEED)
    return torch.randint(3, VOCAB, (CALIB_SEQS, CALIB_LEN), generator=g).tolist()


# ---------------------------------------------------------------- producer (worker process)

def worker(spec: dict):
    """oneshot + save_pretrained(save_compressed=True) into spec["dst"], in a process of its own
    (LLM Compressor keeps a global session)."""
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(spec["src"], dtype=torch.bfloat16)
    recipe = QuantizationModifier(targets="Linear", scheme=spec["scheme"], ignore=["lm_head"],
                                  kv_cache_scheme=KV_CACHE_SCHEME if spec["calibrate"] else None)
    kwargs, seen = {}, []
    if spec["calibrate"]:
        from datasets import Dataset
        from tokenizers import Tokenizer
        from tokenizers.models import WordLevel
        from transformers import PreTrainedTokenizerFast
        ids = calibration_ids()
        # oneshot insists on a processor whenever a dataset is given, and the tiny models have no
        # tokenizer: a dummy one (never used: the dataset is already tokenized).
        tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")))
        # shuffle off: LengthAwareSampler, i.e. dataset order for equal lengths (recorded below,
        # it matters for the KV observer's moving average); batch_size 1 (the default).
        kwargs = dict(processor=tok, dataset=Dataset.from_dict({"input_ids": ids}),
                      num_calibration_samples=CALIB_SEQS, max_seq_length=CALIB_LEN,
                      shuffle_calibration_samples=False, batch_size=1)
        model.model.embed_tokens.register_forward_pre_hook(lambda m, a: seen.append(a[0].tolist()))
    oneshot(model=model, recipe=recipe, **kwargs)
    model.save_pretrained(spec["dst"], save_compressed=True)
    if spec["calibrate"]:
        # the first subgraph (embedding + layer 0) runs every batch twice (calibrate, propagate)
        order = [ids.index(s[0]) for s in seen[:CALIB_SEQS]]
        assert all(len(s) == 1 for s in seen) and sorted(order) == list(range(CALIB_SEQS)), seen
        (Path(spec["dst"]) / "_order.json").write_text(json.dumps(order))


def run_workers_twice(script: Path, specs: dict, tmp: Path, files: dict) -> None:
    """Runs `script --worker SPEC` for every case of `specs` ({case: worker spec; "dst" is set here})
    twice, in separate processes (as many at once as there are cores), into tmp/a/<case> and
    tmp/b/<case>, and asserts that both runs wrote the same bytes to each of files[case]."""
    jobs = []
    for run in ("a", "b"):
        for name, spec in specs.items():
            spec = dict(spec, dst=str(tmp / run / name))
            jobs.append((name, run, [sys.executable, str(script), "--worker", json.dumps(spec)]))
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    width = max(1, min(len(jobs), os.cpu_count() or 1))
    running = []
    for i, (name, run, cmd) in enumerate(jobs):
        log = open(tmp / f"{name}_{run}.log", "w")
        running.append((name, run, subprocess.Popen(cmd, cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT), log))
        if len(running) >= width or i == len(jobs) - 1:
            for n, r, p, lg in running:
                if p.wait() != 0:
                    lg.close()
                    sys.exit(f"worker {n} ({r}) failed:\n" + (tmp / f"{n}_{r}.log").read_text()[-4000:])
                lg.close()
            running = []
    for name in specs:
        for f in files[name]:
            a, b = (tmp / "a" / name / f).read_bytes(), (tmp / "b" / name / f).read_bytes()
            assert a == b, f"not deterministic: {name}/{f} differs between two runs"


def make_all(tmp: Path) -> dict:
    """Runs every case twice, in separate processes; returns {case: folder of the first run}."""
    specs = {name: {"src": str(MODELS / src), "scheme": scheme, "calibrate": calib} for name, src, scheme, calib in CASES}
    run_workers_twice(Path(__file__).resolve(), specs, tmp,
                      {name: FILES + (["_order.json"] if name.endswith("_kv") else []) for name, *_ in CASES})
    return {name: tmp / "a" / name for name, *_ in CASES}


# ---------------------------------------------------------------- the arithmetic, as C++ does it

def f32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32)


def bf16_rne(x: torch.Tensor) -> torch.Tensor:
    """float32 -> BF16, round to nearest even (what torch's cast does; asserted in self_checks)."""
    assert x.dtype == torch.float32
    return x.to(torch.bfloat16)


def bf16_rne_bits(x: torch.Tensor) -> torch.Tensor:
    """The same rounding on the bit pattern (the C++ formula): (u + 0x7FFF + ((u >> 16) & 1)) >> 16."""
    u = x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return (r & 0xFFFF).to(torch.int32).to(torch.int16).view(torch.bfloat16)


E4M3_VALUES = torch.tensor([float(torch.tensor(c, dtype=torch.uint8).view(torch.float8_e4m3fn)) for c in range(127)],
                           dtype=torch.float64)  # codes 0x00..0x7E (0x7F is NaN): 0 .. 448


def e4m3_rne(x: torch.Tensor) -> torch.Tensor:
    """|x| <= 448 (float32) -> E4M3FN code (uint8): the nearest of the 127 finite magnitudes, ties to
    the even code (even mantissa), sign bit 0x80 copied from x (so -0.0 and tiny negatives -> 0x80).
    Written without torch's cast; equals it (self_checks)."""
    a = x.abs().to(torch.float64).flatten()
    assert float(a.max()) <= FMAX if a.numel() else True
    hi = torch.searchsorted(E4M3_VALUES, a).clamp(max=126)
    lo = (hi - 1).clamp(min=0)
    d_lo, d_hi = a - E4M3_VALUES[lo], E4M3_VALUES[hi] - a
    pick = torch.where(d_lo < d_hi, lo, torch.where(d_hi < d_lo, hi, torch.where(lo % 2 == 0, lo, hi)))
    code = pick.to(torch.int64) | (torch.signbit(x.flatten()).to(torch.int64) << 7)
    return code.to(torch.uint8).reshape(x.shape)


def block_view(t: torch.Tensor, fn, rows=128, cols=128) -> torch.Tensor:
    """fn over every rows x cols block of a 2-D tensor (ragged edge blocks: their real elements only)."""
    n, k = t.shape
    out = [[fn(t[i:i + rows, j:j + cols]) for j in range(0, k, cols)] for i in range(0, n, rows)]
    return torch.stack([torch.stack(r) for r in out])


def expand_blocks(s: torch.Tensor, n: int, k: int, rows=128, cols=128) -> torch.Tensor:
    return s.repeat_interleave(rows, 0)[:n].repeat_interleave(cols, 1)[:, :k]


def weight_scale(w: torch.Tensor, strategy: str) -> torch.Tensor:
    """BF16 scale = RNE_bf16(float32(amax) / 448), a zero replaced by 2^-7; amax of the BF16 weights
    (exact) over the tensor [1], each output row [N, 1] or each 128x128 block [cdiv(N,128), cdiv(K,128)]."""
    a = w.abs()
    amax = {"tensor": lambda: a.amax().reshape(1),
            "channel": lambda: a.amax(dim=1, keepdim=True),
            "block": lambda: block_view(a, lambda b: b.amax())}[strategy]()
    s = bf16_rne_bits(f32(amax) / FMAX)
    return torch.where(s == 0, torch.tensor(BF16_EPS, dtype=torch.bfloat16), s)


def weight_codes(w: torch.Tensor, scale: torch.Tensor, strategy: str, single_rounding=False) -> torch.Tensor:
    """code = E4M3_RNE(clamp(RNE_bf16(float32(w) / float32(scale)), -448, 448)).
    single_rounding: without the BF16 rounding of the quotient (what the Triton GPU path computes)."""
    s = expand_blocks(scale, *w.shape) if strategy == "block" else scale.reshape(-1, 1).expand_as(w)
    q = f32(w) / f32(s)  # one IEEE float32 division (exact operands: both BF16)
    if not single_rounding:
        q = f32(bf16_rne_bits(q))
    return e4m3_rne(q.clamp(-FMAX, FMAX))


def self_checks():
    """The two hand-written roundings equal torch's casts on every input that matters."""
    allbf = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    allbf = allbf[torch.isfinite(allbf) & (f32(allbf).abs() <= FMAX)]
    assert torch.equal(e4m3_rne(f32(allbf)), allbf.to(torch.float8_e4m3fn).view(torch.uint8))
    g = torch.Generator().manual_seed(1)
    x = torch.cat([torch.randn(1 << 20, generator=g) * 10.0 ** torch.randint(-6, 4, (1 << 20,), generator=g),
                   torch.tensor([0.0, -0.0, 2.0 ** -133, 448.0, -448.0])])
    assert torch.equal(bf16_rne_bits(x).view(torch.int16), x.to(torch.bfloat16).view(torch.int16))
    xs = x.clamp(-FMAX, FMAX)
    assert torch.equal(e4m3_rne(xs), xs.to(torch.float8_e4m3fn).view(torch.uint8))
    # A BF16 tensor divided by a BF16 tensor in torch (CPU) = float32 division, then RNE to BF16.
    a, b = x[: 1 << 18].to(torch.bfloat16), (x[1 << 18: 2 << 18].abs() + 1e-3).to(torch.bfloat16)
    assert torch.equal((a / b).view(torch.int16), bf16_rne(f32(a) / f32(b)).view(torch.int16))
    # compressed-tensors' zero-scale replacement for a BF16 scale (no fixture has an all-zero group)
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.utils import calculate_qparams
    z = torch.zeros(3, dtype=torch.bfloat16)
    s, _ = calculate_qparams(z, z, QuantizationArgs(num_bits=8, type="float", strategy="channel"))
    assert s.dtype == torch.bfloat16 and bool((s == BF16_EPS).all()), s


# ---------------------------------------------------------------- checks of one checkpoint

def read_header(path: Path) -> dict:
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + n])


def expected_qconfig(scheme: str, kv: bool) -> dict:
    import compressed_tensors

    def args(**kw):
        a = {"actorder": None, "block_structure": None, "dynamic": False, "group_size": None, "num_bits": 8,
             "observer": None, "observer_kwargs": {}, "scale_dtype": None, "strategy": "tensor",
             "symmetric": True, "type": "float", "zp_dtype": None}
        a.update(kw)
        return a
    weights = {"FP8_DYNAMIC": args(strategy="channel", observer="memoryless_minmax"),
               "FP8_BLOCK": args(strategy="block", block_structure=[128, 128], observer="memoryless_minmax"),
               "FP8": args(strategy="tensor", observer="memoryless_minmax")}[scheme]
    inputs = {"FP8_DYNAMIC": args(strategy="token", dynamic=True),
              "FP8_BLOCK": args(strategy="group", group_size=128, dynamic=True),
              "FP8": args(strategy="tensor", observer="static_minmax")}[scheme]
    return {"config_groups": {"group_0": {"format": "float-quantized", "input_activations": inputs,
                                          "output_activations": None, "targets": ["Linear"], "weights": weights}},
            "format": "float-quantized", "global_compression_ratio": None, "ignore": ["lm_head"],
            "kv_cache_scheme": args() if kv else None, "quant_method": "compressed-tensors",
            "quantization_status": "compressed", "sparsity_config": {}, "transform_config": {},
            "version": compressed_tensors.__version__}


def is_quantized_linear(name: str, t: torch.Tensor) -> bool:
    return name.endswith("_proj.weight") and t.dim() == 2


def check_case(folder: Path, src: str, scheme: str, kv: bool) -> dict:
    from safetensors.torch import load_file, save_file
    strategy = WEIGHT_STRATEGY[scheme]
    source = load_file(str(MODELS / src / "model.safetensors"))
    fx = load_file(str(folder / "model.safetensors"))
    header = read_header(folder / "model.safetensors")
    assert header["__metadata__"] == {"format": "pt"}, header["__metadata__"]

    expected_names = set()
    stats = {"codes": 0, "single_rounding_diffs": 0, "f32_scale_diffs": 0, "clamped": 0}
    for name, w in source.items():
        expected_names.add(name)
        if not is_quantized_linear(name, w):
            assert fx[name].dtype == w.dtype == torch.bfloat16 and torch.equal(fx[name].view(torch.int16), w.view(torch.int16)), name
            continue
        mod = name[: -len(".weight")]
        expected_names.add(mod + ".weight_scale")
        codes, scale = fx[name], fx[mod + ".weight_scale"]
        n, k = w.shape
        shape = {"tensor": [1], "channel": [n, 1], "block": [-(-n // 128), -(-k // 128)]}[strategy]
        assert codes.dtype == torch.float8_e4m3fn and list(codes.shape) == [n, k], name
        assert scale.dtype == torch.bfloat16 and list(scale.shape) == shape, (name, scale.shape)
        ref_scale = weight_scale(w, strategy)
        assert torch.equal(scale.view(torch.int16), ref_scale.view(torch.int16)), f"{mod}.weight_scale"
        ref_codes = weight_codes(w, ref_scale, strategy)
        assert torch.equal(codes.view(torch.uint8), ref_codes), f"{name}: {(codes.view(torch.uint8) != ref_codes).sum()} codes"
        # what the wrong recipes would give (README: why each rounding step matters)
        stats["codes"] += codes.numel()
        stats["single_rounding_diffs"] += int((weight_codes(w, ref_scale, strategy, True) != ref_codes).sum())
        amax = {"tensor": lambda: w.abs().amax().reshape(1), "channel": lambda: w.abs().amax(1, keepdim=True),
                "block": lambda: block_view(w.abs(), lambda b: b.amax())}[strategy]()
        s32 = f32(amax) / FMAX
        sexp = expand_blocks(s32, n, k) if strategy == "block" else s32.reshape(-1, 1).expand_as(w)
        alt = e4m3_rne((f32(w) / sexp).clamp(-FMAX, FMAX))
        stats["f32_scale_diffs"] += int((alt != ref_codes).sum())
        sfull = expand_blocks(ref_scale, n, k) if strategy == "block" else ref_scale.reshape(-1, 1).expand_as(w)
        stats["clamped"] += int((f32(bf16_rne(f32(w) / f32(sfull))).abs() > FMAX).sum())
        if scheme == "FP8":
            expected_names.add(mod + ".input_scale")
            assert fx[mod + ".input_scale"].dtype == torch.bfloat16 and list(fx[mod + ".input_scale"].shape) == [1]
    if kv:
        for i in range(sum(1 for k in source if k.endswith("input_layernorm.weight"))):
            for s in ("k_scale", "v_scale"):
                t = fx[f"model.layers.{i}.self_attn.{s}"]
                assert t.dtype == torch.bfloat16 and list(t.shape) == [1]
                expected_names.add(f"model.layers.{i}.self_attn.{s}")
    assert set(fx) == expected_names, set(fx) ^ expected_names

    # the file = safetensors' own serialization of these tensors with metadata {"format": "pt"}
    with tempfile.TemporaryDirectory() as tmp:
        save_file(fx, f"{tmp}/m.safetensors", metadata={"format": "pt"})
        assert Path(f"{tmp}/m.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes(), folder

    # config.json = the source config.json + quantization_config, json.dumps(indent=2, sort_keys=True)
    cfg = json.loads((MODELS / src / "config.json").read_text())
    qc = expected_qconfig(scheme, kv)
    text = (folder / "config.json").read_text()
    assert json.loads(text)["quantization_config"] == qc, json.loads(text)["quantization_config"]
    assert text == json.dumps({**cfg, "quantization_config": qc}, indent=2, sort_keys=True), folder
    return stats


# ---------------------------------------------------------------- static scales (llama_FP8_kv)

KV_ATTN = "fp8lm_capture"
CAPTURE = {"k": {}, "v": {}}


def capture_attention(module, query, key, value, attention_mask, **kwargs):
    # key / value: [batch, kv_heads, seq, head_dim], after RoPE, before GQA's repeat_kv
    CAPTURE["k"].setdefault(module.layer_idx, []).append(key.detach().clone())
    CAPTURE["v"].setdefault(module.layer_idx, []).append(value.detach().clone())
    eager = sys.modules[type(module).__module__].eager_attention_forward
    return eager(module, query, key, value, attention_mask, **kwargs)


@torch.no_grad()
def capture(src: str, dtype, order: list, ids: list) -> dict:
    """Inputs of every quantized Linear and K/V of every layer, per calibration batch (batch 1)."""
    from transformers import AttentionInterface, AutoModelForCausalLM
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    AttentionInterface.register(KV_ATTN, capture_attention)
    AttentionMaskInterface.register(KV_ATTN, eager_mask)
    model = AutoModelForCausalLM.from_pretrained(MODELS / src, dtype=dtype, attn_implementation="eager").eval()
    model.set_attn_implementation(KV_ATTN)
    inputs, hooks = {}, []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name != "lm_head":
            hooks.append(mod.register_forward_pre_hook(
                lambda m, a, name=name: inputs.setdefault(name, []).append(a[0].detach().clone())))
    CAPTURE["k"].clear(), CAPTURE["v"].clear()
    for i in order:
        model(input_ids=torch.tensor([ids[i]]), use_cache=False)
    for h in hooks:
        h.remove()
    return {"input": inputs, "k": dict(CAPTURE["k"]), "v": dict(CAPTURE["v"])}


def lerp(start, end, w):
    return (start * (1.0 - w)) + (end * w)  # llmcompressor.observers.helpers.lerp, in the tensors' dtype


def observed_scales(batches: list, observer: str) -> torch.Tensor:
    """What llmcompressor's observer + compressed-tensors' calculate_qparams compute, in the batches'
    dtype: per batch min / max over the whole tensor; static_minmax keeps the running min / max,
    minmax an exponential moving average (lerp 0.01) of min and of max separately, last = the last
    batch alone (memoryless); scale = max(|min|, |max|) / 448 (min / max first widened to include 0)."""
    mn = mx = None
    for b in batches:
        bmin, bmax = b.amin().reshape(1), b.amax().reshape(1)
        if mn is None or observer == "last":
            mn, mx = bmin, bmax
        elif observer == "static_minmax":
            mn, mx = torch.min(mn, bmin), torch.max(mx, bmax)
        else:
            mn, mx = lerp(mn, bmin, KV_EMA), lerp(mx, bmax, KV_EMA)
    mn, mx = torch.min(mn, torch.zeros_like(mn)), torch.max(mx, torch.zeros_like(mx))
    return torch.max(mn.abs(), mx.abs()) / torch.tensor(FMAX, dtype=mn.dtype)


def lerp_cpp(start: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
    """The BF16 lerp in C++ terms: bf16(bf16(float(s) * 0.99f) + bf16(float(e) * 0.01f))."""
    a = bf16_rne(f32(start) * torch.tensor(1.0 - KV_EMA, dtype=torch.float32))
    b = bf16_rne(f32(end) * torch.tensor(KV_EMA, dtype=torch.float32))
    return bf16_rne(f32(a) + f32(b))


def check_static(folder: Path, src: str, order: list, ids: list) -> dict:
    from safetensors.torch import load_file
    fx = load_file(str(folder / "model.safetensors"))
    out = {}
    b16, f32acts = capture(src, torch.bfloat16, order, ids), capture(src, torch.float32, order, ids)
    n_layers = len(b16["k"])
    # BF16 replay: bit for bit
    for name, batches in b16["input"].items():
        s = observed_scales(batches, "static_minmax")
        assert torch.equal(s.view(torch.int16), fx[name + ".input_scale"].view(torch.int16)), name
        # order-free; and the C++ form: max over all calibration tokens of |x|, RNE_bf16(f32(amax) / 448)
        amax = torch.stack([b.abs().amax() for b in batches]).amax()
        assert torch.equal(s.view(torch.int16), bf16_rne(f32(amax).reshape(1) / FMAX).view(torch.int16)), name
    hyp = {}
    for kind in ("k", "v"):
        for layer in range(n_layers):
            batches = b16[kind][layer]
            fixture = fx[f"model.layers.{layer}.self_attn.{kind}_scale"]
            for obs in ("minmax", "static_minmax", "last"):
                hyp.setdefault(obs, []).append(bool(torch.equal(observed_scales(batches, obs).view(torch.int16),
                                                                fixture.view(torch.int16))))
            # C++ form of the moving average, step by step in float32 + RNE to BF16
            mn, mx = batches[0].amin().reshape(1), batches[0].amax().reshape(1)
            for b in batches[1:]:
                for old, new in ((mn, b.amin().reshape(1)), (mx, b.amax().reshape(1))):
                    assert torch.equal(lerp_cpp(old, new).view(torch.int16), lerp(old, new, KV_EMA).view(torch.int16))
                mn, mx = lerp_cpp(mn, b.amin().reshape(1)), lerp_cpp(mx, b.amax().reshape(1))
            amax = torch.max(torch.min(mn, torch.zeros_like(mn)).abs(), torch.max(mx, torch.zeros_like(mx)).abs())
            assert torch.equal(bf16_rne(f32(amax) / FMAX).view(torch.int16), fixture.view(torch.int16))
    assert all(hyp["minmax"]), hyp  # the moving average, not the running max, not the last batch
    out["kv_hypotheses_matching_all_scales"] = {k: all(v) for k, v in hyp.items()}
    out["kv_hypotheses_matching"] = {k: f"{sum(v)}/{len(v)}" for k, v in hyp.items()}

    # float32 forward pass of the same BF16 weights: how close do its statistics come?
    def rel(a, b):
        return float((f32(a) - f32(b)).abs().max() / f32(b).abs().max())
    worst = {"input_scale": 0.0, "k_scale": 0.0, "v_scale": 0.0}
    ulps = {"input_scale": 0, "k_scale": 0, "v_scale": 0}
    same_bf16 = {"input_scale": [0, 0], "k_scale": [0, 0], "v_scale": [0, 0]}
    pairs = [("input_scale", observed_scales(b, "static_minmax"), fx[n + ".input_scale"])
             for n, b in f32acts["input"].items()]
    pairs += [(f"{kind}_scale", observed_scales(f32acts[kind][layer], "minmax"),
               fx[f"model.layers.{layer}.self_attn.{kind}_scale"]) for kind in ("k", "v") for layer in range(n_layers)]
    for key, s, t in pairs:
        worst[key] = max(worst[key], rel(s, t))
        ulps[key] = max(ulps[key], abs(int(bf16_rne(s).view(torch.int16)) - int(t.view(torch.int16))))
        same_bf16[key][0] += int(torch.equal(bf16_rne(s).view(torch.int16), t.view(torch.int16)))
        same_bf16[key][1] += 1
    out["float32_forward_max_rel_diff"] = {k: float(f"{v:.3g}") for k, v in worst.items()}
    out["float32_forward_max_bf16_ulps"] = ulps
    out["float32_forward_bf16_rounded_equal"] = {k: f"{a}/{b}" for k, (a, b) in same_bf16.items()}
    # how far the moving average is from the plain running amax, and the per-batch amax (README)
    ema_gap = 0.0
    for kind in ("k", "v"):
        for layer in range(n_layers):
            b = b16[kind][layer]
            ema_gap = max(ema_gap, rel(observed_scales(b, "minmax"), observed_scales(b, "static_minmax")))
            out[f"per_batch_amax_{kind}{layer}"] = [float(f32(x.abs().amax())) for x in b]
    out["kv_ema_vs_running_amax_max_rel"] = float(f"{ema_gap:.3g}")
    out["scales"] = {k: float(f32(v)) for k, v in sorted(fx.items()) if k.endswith(("input_scale", "k_scale", "v_scale"))}
    return out


# ---------------------------------------------------------------- main

def write_calibration_ids(path: Path, order: list):
    ids = calibration_ids()
    rows = ",\n".join("  " + json.dumps(r) for r in ids)
    path.write_text(
        "{\n"
        f' "generator": "torch.Generator().manual_seed({CALIB_SEED}); torch.randint(3, {VOCAB}, ({CALIB_SEQS}, {CALIB_LEN}), generator=g)",\n'
        ' "batch_size": 1,\n'
        f' "processing_order": {json.dumps(order)},\n'
        ' "input_ids": [\n' + rows + "\n ]\n}\n")
    assert json.loads(path.read_text())["input_ids"] == ids


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "tests/fixtures/quantize"))
    ap.add_argument("--check-only", action="store_true",
                    help="only run the checks on the fixtures as they are (no LLM Compressor run)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))

    import compressed_tensors
    import llmcompressor
    import safetensors
    import transformers
    from transformers.utils import logging as hf_logging
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    self_checks()
    out = Path(args.out)
    print(f"llmcompressor {llmcompressor.__version__}, compressed-tensors {compressed_tensors.__version__}, "
          f"transformers {transformers.__version__}, torch {torch.__version__}, safetensors {safetensors.__version__}")
    if args.check_only:
        order = json.loads((out / "calibration_ids.json").read_text())["processing_order"]
        assert json.loads((out / "calibration_ids.json").read_text())["input_ids"] == calibration_ids()
    else:
        order = make(out)
    check(out, order)


def make(out: Path) -> list:
    with tempfile.TemporaryDirectory() as tmp:
        made = make_all(Path(tmp))
        out.mkdir(parents=True, exist_ok=True)
        for name, *_ in CASES:
            dst = out / name
            if dst.exists():
                shutil.rmtree(dst)
            dst.mkdir()
            for f in FILES:
                shutil.copy(made[name] / f, dst / f)
        order = json.loads((made["llama_FP8_kv"] / "_order.json").read_text())
    write_calibration_ids(out / "calibration_ids.json", order)
    return order


def check(out: Path, order: list):
    for name, src, scheme, calib in CASES:
        st = check_case(out / name, src, scheme, calib)
        print(f"{name}: bytes verified; {st['codes']} codes; with one rounding (no BF16 quotient) "
              f"{st['single_rounding_diffs']} would differ, with a float32 (unrounded) scale "
              f"{st['f32_scale_diffs']}; quotients beyond 448 clamped: {st['clamped']}")
    st = check_static(out / "llama_FP8_kv", "llama", order, calibration_ids())
    print(f"llama_FP8_kv static scales: {json.dumps(st, indent=1)}")
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{total} bytes in {out}")


if __name__ == "__main__":
    main()
