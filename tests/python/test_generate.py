"""`fp8lm generate` and `fp8lm chat` on the shipped model as a user runs them.
Greedy tokens are checked against Hugging Face transformers' float32 reference
(tests/fixtures/models/manifest.json, "shipped"); other outputs are checked for
their properties (determinism, stop strings, lengths), not for their text."""
import json
import shutil
from pathlib import Path

import pytest
from cli_errors import assert_clean_error

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "fp8lm-gutenberg-22m"
CHECKPOINTS = REPO / "tests" / "fixtures" / "checkpoints"
SHIPPED = json.loads((REPO / "tests" / "fixtures" / "models" / "manifest.json").read_text())["shipped"]
PROMPTS = SHIPPED["prompts"]
CONTEXT = json.loads((MODEL / "config.json").read_text())["max_position_embeddings"]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# Where the reference's top-1 and top-2 logits are closer than this, another
# correct implementation may pick the other token (fixtures README: smallest 0.0043).
TIE_MARGIN = 0.01


def generate(run, *args, input=""):
    return run("generate", str(MODEL), "--threads", "2", *args, input=input)


def generate_json(run, *args, input=""):
    r = generate(run, "--json", *args, input=input)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def greedy_args(prompt, tokens):
    # --temperature 0: the shipped model's generation_config.json samples by default.
    return ("--prompt", prompt, "--kv-cache-dtype", "fp32", "--ignore-eos", "--max-tokens", str(tokens),
            "--temperature", "0")


NGRAM = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}'


def chat(run, *args, input):
    return run("chat", str(MODEL), "--threads", "2", *args, input=input)


# ---- generate: the Hugging Face reference -------------------------------------------------


@pytest.mark.parametrize("index", range(len(PROMPTS)), ids=lambda i: f"p{i}-{PROMPTS[i]['kind']}")
def test_greedy_matches_transformers(run, index):
    p = PROMPTS[index]
    n = SHIPPED["new_tokens"]
    got = generate_json(run, *greedy_args(p["text"], n))
    assert got["prompt_ids"] == p["ids"]
    assert got["prompt_tokens"] == len(p["ids"])
    assert got["finish_reason"] == "length"
    assert got["completion_tokens"] == n == len(got["token_ids"])
    for step, (ours, ref) in enumerate(zip(got["token_ids"], p["greedy"])):
        if ours != ref:
            # only a near-tie may go the other way; after it the continuations differ
            assert p["margins"][step] < TIE_MARGIN, (step, got["token_ids"], p["greedy"])
            break


@pytest.mark.parametrize("index", [0, 2])
def test_streamed_output_is_the_text_and_stats_go_to_stderr(run, index):
    args = greedy_args(PROMPTS[index]["text"], 24)
    got = generate_json(run, *args)
    r = generate(run, *args)
    assert r.returncode == 0, r.stderr
    assert r.stdout == got["text"] + "\n"
    assert "tok/s" in r.stderr and "finish: length" in r.stderr
    assert "tok/s" not in r.stdout and "fp8lm:" not in r.stdout


def test_prompt_from_stdin(run):
    p = PROMPTS[0]
    got = generate_json(run, "--kv-cache-dtype", "fp32", "--ignore-eos", "--max-tokens", "8", "--temperature", "0",
                        input=p["text"])
    assert got["prompt_ids"] == p["ids"]
    assert got["token_ids"] == p["greedy"][:8]


# ---- generate: FP8 ------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["fp8", "fp8:tensor", "fp8:block", "fp8:weight-only"])
def test_online_fp8_quantization_generates(run, scheme):
    r = generate(run, "--json", "--quantization", scheme, "--prompt", PROMPTS[1]["text"], "--ignore-eos",
                 "--max-tokens", "8")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["completion_tokens"] == 8 and got["finish_reason"] == "length"
    assert got["text"].strip()
    assert "weights FP8" in r.stderr


def test_fp8_kv_cache_scales_are_calibrated_at_load_never_silently_one(run):
    r = generate(run, "--json", "--kv-cache-dtype", "fp8", "--prompt", PROMPTS[1]["text"], "--ignore-eos",
                 "--max-tokens", "8")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["completion_tokens"] == 8 and got["text"].strip()
    notes = [line for line in r.stderr.splitlines() if "note:" in line]
    assert any("calibrated at load" in line for line in notes), r.stderr
    scales = [line for line in r.stderr.splitlines() if "KV scales per layer" in line]
    assert scales and "k [1 " not in scales[0], r.stderr
    # Turning calibration off uses 1.0, and says so.
    r = generate(run, "--json", "--kv-cache-dtype", "fp8", "--no-kv-calibration", "--prompt", PROMPTS[1]["text"],
                 "--max-tokens", "4")
    assert r.returncode == 0, r.stderr
    assert any("1.0" in line and "--no-kv-calibration" in line for line in r.stderr.splitlines()), r.stderr


# ---- generate: sampling -------------------------------------------------------------------


def test_same_seed_same_text(run):
    args = ("--prompt", PROMPTS[0]["text"], "--temperature", "0.8", "--seed", "1234", "--max-tokens", "24")
    first, second = generate_json(run, *args), generate_json(run, *args)
    assert first["token_ids"] == second["token_ids"]
    assert first["text"] == second["text"]


def test_stop_string_ends_the_output_before_it(run):
    args = greedy_args(PROMPTS[0]["text"], 64)
    full = generate_json(run, *args)["text"]
    middle = len(full) // 2
    stop = full[middle:middle + 5]
    assert stop.strip()
    before = full[: full.find(stop)]
    got = generate_json(run, *args, "--stop", stop)
    assert got["finish_reason"] == "stop"
    assert got["text"] == before
    assert stop not in got["text"]
    r = generate(run, *args, "--stop", stop)
    assert r.returncode == 0, r.stderr
    assert r.stdout == before + "\n"
    assert "finish: stop" in r.stderr


def test_max_tokens_limits_the_length(run):
    got = generate_json(run, "--prompt", PROMPTS[3]["text"], "--ignore-eos", "--max-tokens", "5")
    assert got["completion_tokens"] == 5 == len(got["token_ids"])
    assert got["finish_reason"] == "length"


# ---- generate: the model's generation config as defaults (vLLM's --generation-config) ------


def test_defaults_come_from_the_models_generation_config(run):
    # The shipped model's generation_config.json: do_sample, temperature 0.8, top_p 0.95, top_k 50.
    base = ("--prompt", PROMPTS[0]["text"], "--ignore-eos", "--max-tokens", "16", "--seed", "7")
    r = generate(run, "--json", *base)
    assert r.returncode == 0, r.stderr
    assert "generation_config.json: temperature 0.8, top_p 0.95, top_k 50" in r.stderr, r.stderr
    by_default = json.loads(r.stdout)["token_ids"]
    spelled_out = generate_json(run, *base, "--generation-config", "fp8lm", "--temperature", "0.8", "--top-p", "0.95",
                                "--top-k", "50")["token_ids"]
    assert by_default == spelled_out
    greedy = generate_json(run, *base, "--temperature", "0")["token_ids"]
    assert greedy != by_default  # it sampled (the greedy tokens are the transformers reference's, above)
    # A flag overrides its default only: the temperature given, top_p and top_k still the model's.
    hotter = generate_json(run, *base, "--temperature", "1.3")["token_ids"]
    hotter_spelled = generate_json(run, *base, "--generation-config", "fp8lm", "--temperature", "1.3", "--top-p",
                                   "0.95", "--top-k", "50")["token_ids"]
    assert hotter == hotter_spelled
    r = generate(run, *base, "--generation-config", "fp8lm")
    assert "sampling defaults: fp8lm's (greedy)" in r.stderr, r.stderr
    assert generate_json(run, *base, "--generation-config", "fp8lm")["token_ids"] == greedy


def test_generation_config_from_another_directory(run, tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": False, "temperature": 0.6}))
    base = ("--prompt", PROMPTS[0]["text"], "--ignore-eos", "--max-tokens", "12")
    r = generate(run, "--json", *base, "--generation-config", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "greedy (do_sample false)" in r.stderr, r.stderr
    assert json.loads(r.stdout)["token_ids"] == generate_json(run, *base, "--temperature", "0")["token_ids"]


@pytest.mark.parametrize("content, named", [
    ({"temperature": -1}, "'temperature' is -1"),
    ({"top_p": 0}, "'top_p' is 0"),
    ({"top_k": "fifty"}, "'top_k' must be an integer"),
    ({"repetition_penalty": 0}, "'repetition_penalty' is 0"),
    ({"do_sample": "yes"}, "'do_sample' must be a boolean"),
    ([1, 2], "must hold a JSON object"),
], ids=lambda v: json.dumps(v) if not isinstance(v, str) else None)
def test_bad_generation_config_is_named(run, tmp_path, content, named):
    (tmp_path / "generation_config.json").write_text(json.dumps(content))
    err = assert_clean_error(generate(run, "--prompt", "Hello", "--generation-config", str(tmp_path)))
    assert "generation_config.json" in err and named in err, err


def test_bad_generation_config_flag_is_named(run, tmp_path):
    err = assert_clean_error(generate(run, "--prompt", "Hello", "--generation-config", "nowhere"))
    assert "--generation-config" in err and "nowhere" in err
    err = assert_clean_error(generate(run, "--prompt", "Hello", "--generation-config", str(tmp_path)))
    assert "--generation-config" in err and "no generation_config.json" in err


# ---- generate: errors ---------------------------------------------------------------------


@pytest.mark.parametrize("flags, named", [
    (("--temperature", "-1"), "temperature"),
    (("--top-p", "0"), "top_p"),
    (("--max-tokens", "0"), "max_tokens"),
    (("--max-tokens", "-4"), "max_tokens"),
    (("--quantization", "fp9"), "fp9"),
    (("--kv-cache-dtype", "int4"), "int4"),
    (("--threads", "-1"), "--threads"),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_bad_flags_are_named(run, flags, named):
    err = assert_clean_error(run("generate", str(MODEL), "--prompt", "Hello", *flags))
    assert named.replace("_", "-") in err.replace("_", "-")


def test_prompt_longer_than_the_context(run):
    r = generate(run, "--prompt", "the sea and the old man " * CONTEXT, "--max-tokens", "4")
    err = assert_clean_error(r)
    assert "context" in err and str(CONTEXT) in err
    assert r.stdout == ""


def test_empty_prompt(run):
    err = assert_clean_error(generate(run, input=""))
    assert "empty" in err


def test_missing_model_directory(run, tmp_path):
    r = run("generate", str(tmp_path / "missing"), "--prompt", "Hello")
    err = assert_clean_error(r)
    assert "missing" in err


def model_with_shipped_tokenizer(tmp_path, checkpoint: Path) -> Path:
    """A checkpoint folder plus the shipped model's tokenizer (the tiny ones have none)."""
    out = tmp_path / checkpoint.name
    out.mkdir()
    for f in checkpoint.iterdir():
        (out / f.name).symlink_to(f)
    for name in TOKENIZER_FILES:
        if not (out / name).exists():
            (out / name).symlink_to(MODEL / name)
    return out


def test_unsupported_architecture_lists_the_supported_ones(run, tmp_path):
    model = model_with_shipped_tokenizer(tmp_path, MODEL)
    cfg = json.loads((MODEL / "config.json").read_text())
    cfg["architectures"] = ["GPT2LMHeadModel"]
    cfg["model_type"] = "gpt2"
    (model / "config.json").unlink()
    (model / "config.json").write_text(json.dumps(cfg))
    err = assert_clean_error(run("generate", str(model), "--prompt", "Hello"))
    assert "GPT2LMHeadModel" in err
    assert "LlamaForCausalLM" in err and "Qwen3ForCausalLM" in err


@pytest.mark.parametrize("name", ["qwen3_moe_bf16", "mixtral_bf16"])
def test_mixture_of_experts_runs_in_bf16_and_fp8(run, tmp_path, name):
    model = model_with_shipped_tokenizer(tmp_path, CHECKPOINTS / name)
    # "a" is one id below the tiny models' vocabulary of 256. Online FP8 quantizes the experts
    # at load (their logits against PyTorch: test_model_logits).
    for extra in ([], ["--quantization", "fp8"], ["--quantization", "fp8:block"]):
        r = run("generate", str(model), "--prompt", "a", "--max-tokens", "8", "--ignore-eos", "--json", *extra)
        assert r.returncode == 0, (extra, r.stderr)
        assert len(json.loads(r.stdout)["token_ids"]) == 8


def test_checkpoint_without_tokenizer_is_named(run):
    err = assert_clean_error(run("generate", str(CHECKPOINTS / "llama_bf16"), "--prompt", "Hello"))
    assert "tokenizer" in err


# ---- chat ---------------------------------------------------------------------------------


def test_chat_replies_and_exits(run):
    r = chat(run, "--max-tokens", "8", input="Hello\n/exit\nnever read\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    assert "tok/s" not in r.stdout and "fp8lm:" not in r.stdout


def test_chat_renders_the_template_like_transformers(run):
    p = next(p for p in PROMPTS if p["kind"] == "chat")
    args = ("--kv-cache-dtype", "fp32", "--ignore-eos", "--max-tokens", "24", "--temperature", "0")
    expected = generate_json(run, "--prompt", p["text"], *args)["text"]
    r = chat(run, *args, input=p["messages"][0]["content"] + "\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == expected + "\n"


def test_chat_reset_starts_over(run):
    args = ("--max-tokens", "12", "--ignore-eos", "--temperature", "0")
    once = chat(run, *args, input="Hello\n")
    assert once.returncode == 0, once.stderr
    assert once.stdout.strip()
    twice = chat(run, *args, input="Hello\n/reset\nHello\n")
    assert twice.returncode == 0, twice.stderr
    assert twice.stdout == once.stdout * 2


def test_chat_with_a_system_message(run):
    r = chat(run, "--system", "You are a sailor who answers briefly.", "--max-tokens", "8", input="Hello\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()


def test_chat_goes_on_after_a_turn_longer_than_the_context(run):
    r = chat(run, "--max-tokens", "6", "--ignore-eos", input="word " * CONTEXT + "\nHello\n")
    assert r.returncode == 0, r.stderr
    assert "context" in r.stderr and "/reset" in r.stderr
    assert r.stdout.strip() and r.stdout.count("\n") >= 1


def test_chat_bad_flag_is_named(run):
    err = assert_clean_error(chat(run, "--temperature", "-1", input="Hello\n"))
    assert "temperature" in err


# Issue 16 (10): "hidden_act" was never read, so a config asking for another
# activation ran as SiLU with exit 0. A config value fp8lm does not implement
# is refused, naming the field and the value.
@pytest.mark.parametrize("field,value", [("hidden_act", "relu6"), ("partial_rotary_factor", 0.5),
                                         ("final_logit_softcapping", 30.0)])
def test_unimplemented_config_value_is_refused_by_name(run, tmp_path, field, value):
    model = tmp_path / "model"
    shutil.copytree(MODEL, model)
    cfg = json.loads((model / "config.json").read_text())
    cfg[field] = value
    (model / "config.json").write_text(json.dumps(cfg))
    r = run("generate", str(model), "--threads", "2", "--prompt", "Once", "--max-tokens", "2")
    err = assert_clean_error(r)
    assert field in err and str(value) in err, err


# ---- generate --speculative-config (issue 42): lossless, counted, refused by name ------------


@pytest.mark.parametrize("index", range(len(PROMPTS)), ids=lambda i: f"p{i}-{PROMPTS[i]['kind']}")
def test_speculative_greedy_matches_transformers_exactly(run, index):
    # With a float32 KV cache generate gives transformers' tokens; speculation must not change one.
    p = PROMPTS[index]
    n = SHIPPED["new_tokens"]
    got = generate_json(run, *greedy_args(p["text"], n), "--speculative-config", NGRAM)
    assert got["token_ids"] == p["greedy"][:n]
    spec = got["speculative"]
    assert spec["drafted_tokens"] >= spec["accepted_tokens"] >= 0
    assert spec["mean_accepted_length"] >= 1.0


def test_speculative_draft_model_greedy_matches_transformers_exactly(run):
    # The draft model: the shipped model quantized to FP8 online (the target's tokenizer). Its
    # drafts are verified by the BF16 target, whose tokens with a float32 KV cache are transformers'.
    p = PROMPTS[0]
    n = SHIPPED["new_tokens"]
    draft = json.dumps({"model": str(MODEL), "num_speculative_tokens": 3, "quantization": "fp8"})
    got = generate_json(run, *greedy_args(p["text"], n), "--speculative-config", draft)
    assert got["token_ids"] == p["greedy"][:n]
    spec = got["speculative"]
    assert spec["accepted_tokens"] > spec["drafted_tokens"] // 2


@pytest.mark.parametrize("quantization", [None, "fp8"])
def test_speculative_shipped_draft_model_greedy_matches_transformers_exactly(run, quantization):
    # The shipped draft model (models/fp8lm-gutenberg-draft-3m, tools/train_draft_model.py: 1/8 of
    # the target, its tokenizer), in BF16 and online FP8; the BF16 target with a float32 KV cache
    # verifies its drafts, whose tokens are transformers'.
    p = PROMPTS[2]
    n = SHIPPED["new_tokens"]
    config = {"model": str(MODEL.parent / "fp8lm-gutenberg-draft-3m"), "num_speculative_tokens": 4}
    if quantization:
        config["quantization"] = quantization
    got = generate_json(run, *greedy_args(p["text"], n), "--speculative-config", json.dumps(config))
    assert got["token_ids"] == p["greedy"][:n]
    spec = got["speculative"]
    assert 0 < spec["accepted_tokens"] <= spec["drafted_tokens"]


def test_speculative_eagle3_greedy_matches_transformers_exactly(run):
    # The shipped EAGLE-3 head drafts from the target's own hidden states; the BF16 target with a
    # float32 KV cache verifies them, whose tokens are transformers'.
    p = PROMPTS[1]
    n = SHIPPED["new_tokens"]
    head = json.dumps({"method": "eagle3", "model": str(MODEL.parent / "fp8lm-gutenberg-22m-eagle3"),
                       "num_speculative_tokens": 4})
    got = generate_json(run, *greedy_args(p["text"], n), "--speculative-config", head)
    assert got["token_ids"] == p["greedy"][:n]
    spec = got["speculative"]
    assert 0 < spec["accepted_tokens"] <= spec["drafted_tokens"]


def test_speculative_stops_where_generation_without_it_stops(run):
    # A stop token met inside a verify step's kept tokens ends the output there, as without it.
    p = PROMPTS[0]
    plain = generate_json(run, *greedy_args(p["text"], 48))
    stop = plain["token_ids"][30]
    args = (*greedy_args(p["text"], 48), "--stop-token-id", str(stop))
    without = generate_json(run, *args)
    with_spec = generate_json(run, *args, "--speculative-config", NGRAM)
    assert with_spec["token_ids"] == without["token_ids"]
    assert with_spec["finish_reason"] == without["finish_reason"] == "stop"


@pytest.mark.parametrize("config, words", [
    ('{"method": "eagle3", "num_speculative_tokens": 3}', 'method "eagle3" needs "model"'),
    ('{"method": "mtp", "num_speculative_tokens": 3}', 'method "mtp" is not implemented'),
    ('{"method": "eagle3", "model": "no/such/dir", "num_speculative_tokens": 3}', 'the EAGLE-3 head: '),
    ('{"model": "draft", "method": "ngram", "num_speculative_tokens": 3}', 'prompt lookup uses no model'),
    ('{"model": "no/such/dir", "num_speculative_tokens": 3}', 'the draft model: '),
    ('{"model": "models/fp8lm-gutenberg-22m", "num_speculative_tokens": 3, "quantization": "fp9"}', 'fp9'),
    ('{"method": "ngram", "num_speculative_tokens": 3, "typo": 1}', '"typo" is not a key'),
    ('{"method": "ngram"', "not valid JSON"),
])
def test_speculative_config_refused_by_name(run, config, words):
    r = generate(run, "--prompt", "Hi", "--max-tokens", "2", "--speculative-config", config)
    assert words in assert_clean_error(r)


def test_chat_with_speculation_replies_as_without(run):
    # Two greedy turns: speculation changes no token of either reply.
    args = ("--kv-cache-dtype", "fp32", "--ignore-eos", "--max-tokens", "24", "--temperature", "0")
    turns = "Tell me about the river.\nAnd then?\n/exit\n"
    plain = chat(run, *args, input=turns)
    spec = chat(run, *args, "--speculative-config", NGRAM, input=turns)
    assert plain.returncode == 0 and spec.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout
    # Penalties: each drafted position is verified with the counts of the tokens kept before it.
    penalized = (*args, "--repetition-penalty", "1.3", "--frequency-penalty", "0.4")
    plain = chat(run, *penalized, input=turns)
    spec = chat(run, *penalized, "--speculative-config", NGRAM, input=turns)
    assert plain.returncode == 0 and spec.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout
