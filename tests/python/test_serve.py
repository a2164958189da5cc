"""`fp8lm serve` on the shipped model (CPU, FP8 weights and KV cache), driven by the
official `openai` client and by raw HTTP: both endpoints streaming and not, every
sampling parameter, n, logprobs, usage, errors (400 naming the parameter, 401,
404, 503, prompts over the context), greedy output equal to `fp8lm generate`,
a load test whose every output equals the same request sent alone, preemption
with nothing lost, clients that leave mid-stream, and a clean stop on
SIGTERM / SIGINT."""
import asyncio
import json
import re
import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
from server import MODEL

REPO = Path(__file__).resolve().parents[2]
NAME = "fp8lm-gutenberg-22m"
CONTEXT = json.loads((MODEL / "config.json").read_text())["max_position_embeddings"]
FP8 = ("--quantization", "fp8", "--kv-cache-dtype", "fp8")
SHIPPED_PROMPTS = json.loads((REPO / "tests/fixtures/models/manifest.json").read_text())["shipped"]["prompts"]
PROMPTS = [p["text"] for p in SHIPPED_PROMPTS]
STORY = "It was a dark and stormy night"


@pytest.fixture(scope="module")
def server(serve):
    s = serve(*FP8, "--kv-cache-tokens", "16384", "--max-num-seqs", "64")
    yield s
    out = s.stop_cleanly(signal.SIGTERM)
    assert "SIGTERM" in out and "server stopped" in out


@pytest.fixture(scope="module")
def client(server):
    return server.client()


def complete(client, prompt=STORY, **kw):
    kw.setdefault("max_tokens", 16)
    return client.completions.create(model=NAME, prompt=prompt, **kw)


def chat(client, content="Tell me a story.", **kw):
    kw.setdefault("max_tokens", 16)
    return client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": content}], **kw)


def greedy(client, prompt=STORY, n=16, **kw):
    return complete(client, prompt, max_tokens=n, temperature=0, extra_body={"ignore_eos": True}, **kw)


# ---- the basics -----------------------------------------------------------------------------


def test_health_models_and_metrics(server, client):
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    models = client.models.list().data
    assert [m.id for m in models] == [NAME]
    assert models[0].owned_by == "fp8lm"
    assert client.models.retrieve(NAME).id == NAME
    m = server.metrics()
    for name in ("fp8lm:num_requests_running", "fp8lm:num_requests_waiting", "fp8lm:kv_cache_usage_perc",
                 "fp8lm:num_preemptions_total", "fp8lm:prompt_tokens_total", "fp8lm:generation_tokens_total",
                 "fp8lm:time_to_first_token_seconds_count", "fp8lm:time_per_output_token_seconds_count",
                 "fp8lm:e2e_request_latency_seconds_count"):
        assert name in m, name


@pytest.mark.parametrize("prompt,ignore_eos", [(PROMPTS[0], True), (PROMPTS[3], False)])
def test_greedy_equals_fp8lm_generate(server, client, run, prompt, ignore_eos):
    args = ["generate", str(MODEL), "--threads", "2", *FP8, "--json", "--prompt", prompt, "--max-tokens", "24",
            "--temperature", "0"]
    r = run(*args, *(["--ignore-eos"] if ignore_eos else []))
    assert r.returncode == 0, r.stderr
    want = json.loads(r.stdout)
    got = complete(client, prompt, max_tokens=24, temperature=0, extra_body={"ignore_eos": ignore_eos})
    assert got.choices[0].text == want["text"]
    assert got.choices[0].finish_reason == want["finish_reason"]
    assert got.usage.prompt_tokens == want["prompt_tokens"] == len(want["prompt_ids"])
    assert got.usage.completion_tokens == want["completion_tokens"]
    assert got.usage.total_tokens == got.usage.prompt_tokens + got.usage.completion_tokens
    # The same prompt as token ids.
    ids = complete(client, want["prompt_ids"], max_tokens=24, temperature=0, extra_body={"ignore_eos": ignore_eos})
    assert ids.choices[0].text == want["text"]
    assert got.object == "text_completion" and got.model == NAME and got.id.startswith("cmpl-")


def test_completion_stream_with_usage(client):
    whole = greedy(client, n=20)
    chunks = list(greedy(client, n=20, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.model_dump() == whole.usage.model_dump()
    assert all(c.usage is None for c in chunks[:-1])
    # Without include_usage: no usage chunk.
    plain = list(greedy(client, n=5, stream=True))
    assert all(c.choices for c in plain)


def test_chat_whole_and_streamed(client, run, tmp_path):
    msgs = [{"role": "system", "content": "You write prose."}, {"role": "user", "content": "Tell me about the sea."}]
    (tmp_path / "m.json").write_text(json.dumps(msgs))
    r = run("tokenize", "--model", str(MODEL), "--chat", str(tmp_path / "m.json"), "--add-generation-prompt", "--json")
    assert r.returncode == 0, r.stderr
    prompt_ids = json.loads(r.stdout)["ids"]
    kw = dict(model=NAME, messages=msgs, max_tokens=20, temperature=0)
    whole = client.chat.completions.create(**kw)
    assert whole.object == "chat.completion" and whole.id.startswith("chatcmpl-")
    assert whole.choices[0].message.role == "assistant"
    assert whole.usage.prompt_tokens == len(prompt_ids)
    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        whole.choices[0].finish_reason]
    assert chunks[-1].usage.model_dump() == whole.usage.model_dump()
    # The same conversation as a completion of the rendered prompt gives the same text.
    same = complete(client, prompt_ids, max_tokens=20, temperature=0)
    assert same.choices[0].text == whole.choices[0].message.content
    # Content given as text parts.
    parts = [{"role": "system", "content": [{"type": "text", "text": "You write prose."}]},
             {"role": "user", "content": "Tell me about the sea."}]
    assert client.chat.completions.create(**{**kw, "messages": parts}).choices[0].message.content == text


# ---- parameters ---------------------------------------------------------------------------------


def test_max_tokens_and_finish_reasons(client):
    r = greedy(client, n=7)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 7
    c = chat(client, max_completion_tokens=5, temperature=0, extra_body={"ignore_eos": True})
    assert c.usage.completion_tokens == 5 and c.choices[0].finish_reason == "length"
    c = chat(client, max_tokens=6, temperature=0, extra_body={"ignore_eos": True})
    assert c.usage.completion_tokens == 6
    # Without max_tokens, completions generate OpenAI's default of 16.
    r = complete(client, max_tokens=None, temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 16


def test_stop_strings(client):
    full = greedy(client, n=40).choices[0].text
    stop = full[len(full) // 2:len(full) // 2 + 4]
    assert stop.strip()
    r = complete(client, max_tokens=40, temperature=0, stop=stop, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == full[:full.index(stop)]
    r = complete(client, max_tokens=40, temperature=0, stop=["\u2014never", stop], extra_body={"ignore_eos": True})
    assert r.choices[0].text == full[:full.index(stop)]
    streamed = "".join(c.choices[0].text for c in complete(client, max_tokens=40, temperature=0, stop=[stop],
                                                               stream=True, extra_body={"ignore_eos": True}))
    assert streamed == full[:full.index(stop)]
    c = chat(client, max_tokens=40, temperature=0, stop=["e"], extra_body={"ignore_eos": True})
    assert "e" not in c.choices[0].message.content and c.choices[0].finish_reason == "stop"


def test_seed_reproducibility(client):
    kw = dict(max_tokens=16, temperature=1.0, extra_body={"ignore_eos": True})
    a = complete(client, seed=42, **kw).choices[0].text
    assert complete(client, seed=42, **kw).choices[0].text == a
    assert complete(client, seed=43, **kw).choices[0].text != a
    s = "".join(c.choices[0].text for c in complete(client, seed=42, stream=True, **kw))
    assert s == a
    c1 = chat(client, seed=7, temperature=0.9).choices[0].message.content
    assert chat(client, seed=7, temperature=0.9).choices[0].message.content == c1


def test_defaults_come_from_the_models_generation_config(client):
    # The shipped model's generation_config.json (temperature 0.8, top_p 0.95, top_k 50) fills what a
    # request leaves out; what it gives wins, field by field.
    kw = dict(max_tokens=16, seed=9, extra_body={"ignore_eos": True})
    left_out = complete(client, **kw).choices[0].text
    spelled = dict(max_tokens=16, seed=9, temperature=0.8, top_p=0.95, extra_body={"ignore_eos": True, "top_k": 50})
    assert complete(client, **spelled).choices[0].text == left_out
    openai_defaults = dict(max_tokens=16, seed=9, temperature=1.0, top_p=1.0, extra_body={"ignore_eos": True, "top_k": 0})
    assert complete(client, **openai_defaults).choices[0].text != left_out
    hotter = complete(client, temperature=1.3, **kw).choices[0].text
    hotter_spelled = dict(max_tokens=16, seed=9, temperature=1.3, top_p=0.95, extra_body={"ignore_eos": True, "top_k": 50})
    assert complete(client, **hotter_spelled).choices[0].text == hotter


def test_sampling_parameters_take_effect(client):
    base = greedy(client, n=24).choices[0].text
    extra = {"ignore_eos": True}
    # Filters that keep only the most likely token sample the greedy text at any temperature.
    assert complete(client, max_tokens=24, temperature=1.5, seed=1, extra_body={**extra, "top_k": 1}).choices[0].text == base
    assert complete(client, max_tokens=24, temperature=1.0, top_p=1e-6, seed=2, extra_body=extra).choices[0].text == base
    assert complete(client, max_tokens=24, temperature=1.0, seed=3, extra_body={**extra, "min_p": 1.0}).choices[0].text == base
    # Penalties change the (repetitive) greedy text.
    for kw in ({"presence_penalty": 2.0}, {"frequency_penalty": 2.0}, {"extra_body": {**extra, "repetition_penalty": 2.0}}):
        kw = {"extra_body": extra, **kw}
        assert complete(client, max_tokens=24, temperature=0, **kw).choices[0].text != base, kw
    # Every parameter at once is accepted, in both endpoints.
    every = dict(max_tokens=8, temperature=0.8, top_p=0.9, presence_penalty=0.1, frequency_penalty=0.1, seed=5,
                 stop=["zzz"], extra_body={"top_k": 40, "min_p": 0.01, "repetition_penalty": 1.05, "ignore_eos": True})
    assert complete(client, **every).usage.completion_tokens == 8
    assert chat(client, **every).usage.completion_tokens == 8


def test_stop_token_ids_and_ignore_eos(client, run):
    r = run("generate", str(MODEL), "--threads", "2", *FP8, "--json", "--prompt", STORY, "--max-tokens", "12",
            "--ignore-eos", "--temperature", "0")
    assert r.returncode == 0, r.stderr
    want = json.loads(r.stdout)
    k = 6
    stop_id = want["token_ids"][k]
    k = want["token_ids"].index(stop_id)  # its first occurrence
    got = complete(client, max_tokens=12, temperature=0, extra_body={"stop_token_ids": [stop_id], "ignore_eos": True})
    assert got.choices[0].finish_reason == "stop"
    assert got.usage.completion_tokens == k + 1  # the stop token is counted, its text is not shown
    assert want["text"].startswith(got.choices[0].text) and len(got.choices[0].text) < len(want["text"])
    # The shipped model practically never samples its EOS tokens; with ignore_eos every choice runs to max_tokens.
    many = complete(client, n=8, max_tokens=24, temperature=1.5, seed=3, extra_body={"ignore_eos": True})
    assert all(c.finish_reason == "length" for c in many.choices) and many.usage.completion_tokens == 8 * 24


def test_n_choices(client):
    r = complete(client, n=2, max_tokens=12, temperature=1.0, seed=11, extra_body={"ignore_eos": True})
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].text != r.choices[1].text  # each choice its own request (seed, seed + 1)
    assert r.usage.completion_tokens == 24
    assert r.usage.prompt_tokens == complete(client, max_tokens=1).usage.prompt_tokens  # the prompt counted once
    again = complete(client, n=2, max_tokens=12, temperature=1.0, seed=11, extra_body={"ignore_eos": True})
    assert [c.text for c in again.choices] == [c.text for c in r.choices]
    chunks = list(complete(client, n=2, max_tokens=12, temperature=1.0, seed=11, stream=True, extra_body={"ignore_eos": True}))
    for i in (0, 1):
        assert "".join(c.choices[0].text for c in chunks if c.choices[0].index == i) == r.choices[i].text
    g = chat(client, n=3, temperature=0, max_tokens=8)
    assert len(g.choices) == 3 and len({c.message.content for c in g.choices}) == 1
    # A list of prompts: each prompt's choices in order.
    two = complete(client, [PROMPTS[0], PROMPTS[1]], n=2, max_tokens=6, temperature=0, extra_body={"ignore_eos": True})
    assert [c.index for c in two.choices] == [0, 1, 2, 3]
    assert two.choices[0].text == two.choices[1].text == greedy(client, PROMPTS[0], n=6).choices[0].text
    assert two.choices[2].text == greedy(client, PROMPTS[1], n=6).choices[0].text


def test_completion_logprobs(client):
    r = greedy(client, n=10, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 10
    assert "".join(lp.tokens) == r.choices[0].text
    for tok, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert value <= 0 and 1 <= len(top) <= 4
        assert top[tok] == value == max(top.values())  # greedy: the most likely token
    assert lp.text_offset[0] == 0 and lp.text_offset[1] == len(lp.tokens[0])
    zero = greedy(client, n=3, logprobs=0).choices[0].logprobs
    assert all(len(t) == 1 for t in zero.top_logprobs)
    streamed = [c.choices[0].logprobs for c in greedy(client, n=10, logprobs=3, stream=True) if c.choices[0].logprobs]
    assert sum(len(x.tokens) for x in streamed) == 10
    assert [v for x in streamed for v in x.token_logprobs] == pytest.approx(lp.token_logprobs)
    assert greedy(client, n=3).choices[0].logprobs is None


def test_chat_logprobs(client):
    r = chat(client, temperature=0, max_tokens=8, logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == 8
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 2
        assert t.top_logprobs[0].token == t.token and t.top_logprobs[0].logprob == pytest.approx(t.logprob)
        assert bytes(t.bytes).decode("utf-8", "replace") == t.token
    assert "".join(t.token for t in content) == r.choices[0].message.content
    only = chat(client, temperature=0, max_tokens=3, logprobs=True).choices[0].logprobs.content
    assert len(only) >= 1 and all(t.top_logprobs == [] for t in only)
    streamed = [t for c in chat(client, temperature=0, max_tokens=8, logprobs=True, top_logprobs=2, stream=True,
                                extra_body={"ignore_eos": True})
                if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert [t.token for t in streamed] == [t.token for t in content]
    assert chat(client, max_tokens=2).choices[0].logprobs is None


# ---- errors -------------------------------------------------------------------------------------


def raw_post(server, path, body, headers=None):
    return httpx.post(server.url + path, content=body, headers={"Content-Type": "application/json", **(headers or {})},
                      timeout=30)


def assert_error(r, status, param=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if param is not None:
        assert err["param"] == param, err
    return err


# vLLM's side endpoints. The token ids are transformers' (the fixture's prompts: text with the
# tokenizer's special tokens, the chat one through apply_chat_template).
def test_tokenize_detokenize_version(server):
    for p in SHIPPED_PROMPTS:
        if p["kind"] == "chat":
            r = httpx.post(server.url + "/tokenize", json={"model": NAME, "messages": p["messages"]})
        else:
            r = httpx.post(server.url + "/tokenize", json={"prompt": p["text"]})
        assert r.status_code == 200, r.text
        got = r.json()
        assert got["tokens"] == p["ids"] and got["count"] == len(p["ids"])
        assert got["max_model_len"] == 1024 and got["token_strs"] is None
    plain = httpx.post(server.url + "/tokenize", json={"prompt": PROMPTS[0], "add_special_tokens": False,
                                                       "return_token_strs": True}).json()
    assert len(plain["token_strs"]) == plain["count"] and all(isinstance(t, str) and t for t in plain["token_strs"])
    back = httpx.post(server.url + "/detokenize", json={"tokens": plain["tokens"]})
    assert back.status_code == 200 and back.json() == {"prompt": PROMPTS[0]}
    assert httpx.get(server.url + "/version").json()["version"].count(".") == 2
    assert_error(raw_post(server, "/tokenize", b'{"prompt": "a", "messages": []}'), 400, "messages")
    assert_error(raw_post(server, "/tokenize", b'{}'), 400, "prompt")
    assert_error(raw_post(server, "/tokenize", b'{"prompt": 5}'), 400, "prompt")
    assert_error(raw_post(server, "/tokenize", b'{"prompt": "a", "add_special_tokens": "yes"}'), 400,
                 "add_special_tokens")
    assert_error(raw_post(server, "/tokenize", b'{"prompt": "a", "model": "other"}'), 404, "model")
    assert_error(raw_post(server, "/tokenize", b'not json'), 400)
    assert_error(raw_post(server, "/detokenize", b'{"tokens": [1, -2]}'), 400, "tokens")
    assert_error(raw_post(server, "/detokenize", b'{"tokens": [99999999]}'), 400, "tokens")
    assert_error(raw_post(server, "/detokenize", b'{"tokens": "1 2"}'), 400, "tokens")
    assert_error(raw_post(server, "/detokenize", b'{}'), 400, "tokens")


# examples/grafana: every query of the dashboard names series /metrics really exports, with labels they
# carry, and every exported family is on some panel.
def test_grafana_dashboard_reads_exported_metrics(server, client):
    complete(client, max_tokens=2)  # a finished request: request_success_total has a series
    exported = {}
    for line in httpx.get(server.url + "/metrics").text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? ", line)
        assert m, line
        exported.setdefault(m.group(1), set()).update(re.findall(r'([a-zA-Z_]+)="', m.group(2) or ""))
    dash = json.loads((REPO / "examples/grafana/fp8lm-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dash["templating"]["list"] if v["type"] == "query"]
    used = set()
    for e in exprs:
        names = re.findall(r"fp8lm:[a-zA-Z0-9_:]+", e)
        assert names, e
        for n in names:
            assert n in exported, (n, e)
            used.add(re.sub(r"_(bucket|sum|count)$", "", n))
        for label in re.findall(r"\b(model_name|finished_reason|le)\b", e):
            assert any(label in exported[n] for n in names), (label, e)
    families = {re.sub(r"_(bucket|sum|count)$", "", n) for n in exported if n.startswith("fp8lm:")}
    assert families == used, families ^ used
    for p in dash["panels"]:
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"] and set(p["gridPos"]) == {"x", "y", "w", "h"}
    scrape = (REPO / "examples/grafana/prometheus.yml").read_text()
    assert "metrics_path: /metrics" in scrape


def test_bad_json_and_bodies(server):
    for path in ("/v1/completions", "/v1/chat/completions"):
        for body in (b"{", b"not json", b"[1, 2]", b"\"text\"", b"", b"{\"prompt\": \"\xff\xfe\"}",
                     b"{\"messages\": null, \"prompt\": null}", b"null", b"{\"prompt\": 1e999}"):
            assert_error(raw_post(server, path, body), 400)
    assert_error(raw_post(server, "/v1/completions", b'{"prompt": ""}'), 400, "prompt")
    assert_error(raw_post(server, "/v1/completions", b'{"prompt": [99999999]}'), 400, "prompt")
    assert_error(raw_post(server, "/v1/chat/completions", b'{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}'),
                 400, "messages")


@pytest.mark.parametrize("kw,param", [
    ({"temperature": -1}, "temperature"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_p": 0}, "top_p"),
    ({"n": 0}, "n"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"presence_penalty": 3}, "presence_penalty"),
    ({"frequency_penalty": -3}, "frequency_penalty"),
    ({"logprobs": 50}, "logprobs"),
    ({"stop": [""]}, "stop"),
    ({"seed": "x"}, "seed"),
    ({"extra_body": {"top_k": -7}}, "top_k"),
    ({"extra_body": {"min_p": 2}}, "min_p"),
    ({"extra_body": {"repetition_penalty": 0}}, "repetition_penalty"),
    ({"extra_body": {"ignore_eos": "yes"}}, "ignore_eos"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
])
def test_bad_parameters_are_400_naming_them(client, kw, param):
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, **kw)
    assert e.value.status_code == 400
    assert e.value.body["param"] == param, e.value.body
    assert e.value.body["type"] == "invalid_request_error"


@pytest.mark.parametrize("kw,param", [
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 99}, "top_logprobs"),
    ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ({"temperature": -0.5}, "temperature"),
])
def test_bad_chat_parameters(client, kw, param):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, **kw)
    assert e.value.body["param"] == param, e.value.body


def test_prompt_over_the_context(client):
    long = "the sea " * (CONTEXT // 2 + 10)  # two tokens per repeat at most, more than the context in all
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, long, max_tokens=1)
    assert e.value.body["code"] == "context_length_exceeded" and e.value.body["param"] == "prompt"
    assert str(CONTEXT) in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, STORY, max_tokens=CONTEXT)  # prompt + max_tokens beyond the context
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, long)
    assert e.value.body["param"] == "messages"
    with pytest.raises(openai.BadRequestError):
        complete(client, list(range(5, CONTEXT + 5)), max_tokens=1)


def test_unknown_model_and_path_are_404(server, client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="gpt-5", prompt="x", max_tokens=1)
    assert e.value.body["param"] == "model" and "gpt-5" in e.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="other", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("other")
    assert_error(httpx.get(server.url + "/v1/nothing"), 404)
    assert_error(httpx.get(server.url + "/v1/completions"), 404)
    # A request without "model" goes to the served model.
    assert raw_post(server, "/v1/completions", b'{"prompt": "x", "max_tokens": 2}').status_code == 200


def test_server_survives_garbage(server):
    bodies = [b'{"prompt": {"a": [1, {"b": null}]}}', b'{"messages": [{"role": "user", "content": [1, 2]}]}',
              b'{"prompt": "x", "max_tokens": 1e30}', b'{"prompt": "x", "n": -1e30}', b'{"prompt": "x", "stop": {"a": 1}}',
              b'{"prompt": "x", "seed": 1.5e300}', b'{"prompt": [[1, [2]]]}', b'{"prompt": "x", "temperature": true}',
              b'{"messages": [{"role": "user"}], "max_tokens": 1}', b'{"prompt": "x", "logprobs": 1.5}',
              b'{"prompt": "x", "max_tokens": 9223372036854775807}', b'{"prompt": "x", "n": 18446744073709551615}',
              json.dumps({"prompt": " sea" * 2000, "max_tokens": 1}).encode(), b'{' * 5000]
    for path in ("/v1/completions", "/v1/chat/completions"):
        for body in bodies:
            r = raw_post(server, path, body)
            assert 400 <= r.status_code < 500, (path, body[:80], r.status_code, r.text)
            r.json()["error"]
    assert httpx.get(server.url + "/health").status_code == 200


# ---- load, preemption, disconnects ----------------------------------------------------------------


def load_cases():
    """20 distinct requests (prompt, endpoint, sampling): greedy and seeded sampling, 6..14 tokens."""
    words = ["The ship", "A letter came", "In the morning", "My dear friend", "The old house", "He said nothing",
             "When the war", "The garden was", "She laughed and", "At the inn"]
    cases = []
    for i in range(20):
        kw = {"max_tokens": 6 + i % 9, "extra_body": {"ignore_eos": True}}
        if i % 2:
            kw.update(temperature=0.9, top_p=0.95, seed=100 + i)
        else:
            kw.update(temperature=0)
        cases.append(("chat" if i % 5 == 4 else "completion", words[i % 10] + (" slowly" if i >= 10 else ""), kw))
    return cases


async def send(aclient, case, sem=None):
    kind, prompt, kw = case
    async def go():
        if kind == "chat":
            r = await aclient.chat.completions.create(model=NAME, messages=[{"role": "user", "content": prompt}], **kw)
            return r.choices[0].message.content, r.usage.completion_tokens
        r = await aclient.completions.create(model=NAME, prompt=prompt, **kw)
        return r.choices[0].text, r.usage.completion_tokens
    if sem is None:
        return await go()
    async with sem:
        return await go()


def run_load(url, cases, copies, concurrency):
    async def main():
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120) as aclient:
            alone = [await send(aclient, c) for c in cases]  # one at a time
            sem = asyncio.Semaphore(concurrency)
            jobs = [cases[i % len(cases)] for i in range(len(cases) * copies)]
            results = await asyncio.gather(*(send(aclient, c, sem) for c in jobs), return_exceptions=True)
            return alone, results
    return asyncio.run(main())


def test_load_200_requests_at_concurrency_64(server):
    before = server.metrics()
    cases = load_cases()
    alone, results = run_load(server.url, cases, copies=11, concurrency=64)
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, [(f, f.__cause__) for f in failures[:3]]
    assert len(results) == 220
    for i, r in enumerate(results):
        assert r == alone[i % len(cases)], (i, cases[i % len(cases)])
    after = server.metrics()
    assert after["fp8lm:e2e_request_latency_seconds_count"] - before["fp8lm:e2e_request_latency_seconds_count"] >= 240
    assert after["fp8lm:generation_tokens_total"] > before["fp8lm:generation_tokens_total"]
    assert after["fp8lm:num_requests_running"] == 0 and after["fp8lm:kv_cache_usage_perc"] == 0


def post_raw(url, body):
    """Raw HTTP: a connected socket that has sent POST /v1/completions with `body`."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    s = socket.create_connection((host, int(port)), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    return s


def stream_and_leave(url, body, chunks_to_read=3):
    """Raw HTTP: starts a streaming request, reads a few events, then closes the connection."""
    with post_raw(url, body) as s:
        got = b""
        while got.count(b"data: ") < chunks_to_read:
            piece = s.recv(65536)
            assert piece, got
            got += piece
        assert b"200 OK" in got.split(b"\r\n")[0]


def wait_idle(server, timeout=15):
    deadline = time.monotonic() + timeout
    while True:
        m = server.metrics()
        if m["fp8lm:num_requests_running"] == 0 and m["fp8lm:num_requests_waiting"] == 0 and m["fp8lm:kv_cache_usage_perc"] == 0:
            return m
        assert time.monotonic() < deadline, m
        time.sleep(0.05)


def test_clients_leaving_mid_stream_free_their_kv_blocks(server):
    aborted = server.metrics()['fp8lm:request_success_total{model_name="%s",finished_reason="abort"}' % NAME]
    body = {"prompt": STORY, "max_tokens": 900, "stream": True, "ignore_eos": True}
    threads = [threading.Thread(target=stream_and_leave, args=(server.url, {**body, "seed": i, "temperature": 1.0}))
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    m = wait_idle(server)
    assert m['fp8lm:request_success_total{model_name="%s",finished_reason="abort"}' % NAME] == aborted + 4
    # Still serving.
    assert greedy(server.client(), n=3).usage.completion_tokens == 3


def send_and_leave(url, body, wait_s=0.5):
    """Raw HTTP: sends a non-streaming request, waits until it must be running, then closes."""
    with post_raw(url, body):
        time.sleep(wait_s)


def test_clients_leaving_a_whole_response_free_their_kv_blocks(server):
    """Nothing is written to a non-streaming client before the answer, so the server watches
    the connection: a client that closes it has its requests cancelled well before they would
    have finished (900 tokens each would take the CPU many seconds)."""
    aborted = server.metrics()['fp8lm:request_success_total{model_name="%s",finished_reason="abort"}' % NAME]
    body = {"prompt": STORY, "max_tokens": 900, "ignore_eos": True, "n": 2}
    started = time.monotonic()
    threads = [threading.Thread(target=send_and_leave, args=(server.url, {**body, "seed": i, "temperature": 1.0}))
               for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    m = wait_idle(server, timeout=5)
    assert m['fp8lm:request_success_total{model_name="%s",finished_reason="abort"}' % NAME] == aborted + 6
    assert m["fp8lm:generation_tokens_total"] > 0
    assert time.monotonic() - started < 6
    # Still serving, whole responses too.
    assert greedy(server.client(), n=3).usage.completion_tokens == 3


@pytest.fixture(scope="module")
def small_server(serve):
    # 256 cached tokens (16 blocks of 16): 16 sequences of up to 46 positions cannot all run at once.
    s = serve(*FP8, "--kv-cache-tokens", "256", "--max-num-seqs", "16", "--api-key", "sekrit",
              "--max-model-len", "128", "--served-model-name", NAME)
    yield s
    code = s.stop(signal.SIGINT)
    assert code == 0, s.output()
    assert "SIGINT" in s.output()


def test_preemption_loses_nothing(server, small_server):
    cases = [("completion", f"{w} {i}", {"max_tokens": 30, "temperature": 0 if i % 2 else 0.8, "seed": i,
                                         "extra_body": {"ignore_eos": True}})
             for i, w in enumerate(["The night", "A storm", "Her eyes", "The road"] * 6)]

    async def main(url, key):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=120) as c:
            return await asyncio.gather(*(send(c, case) for case in cases), return_exceptions=True)

    small = asyncio.run(main(small_server.url, "sekrit"))
    failures = [r for r in small if isinstance(r, BaseException)]
    assert not failures, failures[:3]
    assert all(n == 30 for _, n in small)
    reference = asyncio.run(main(server.url, "none"))  # the same requests where the cache is large
    assert small == reference
    m = wait_idle(small_server)
    assert m["fp8lm:num_preemptions_total"] > 0


def test_api_key(small_server):
    with pytest.raises(openai.AuthenticationError) as e:
        small_server.client(api_key="wrong").models.list()
    assert e.value.status_code == 401 and e.value.body["code"] == "invalid_api_key"
    r = httpx.post(small_server.url + "/v1/completions", json={"prompt": "x"})
    assert_error(r, 401)
    assert small_server.client(api_key="sekrit").models.list().data[0].id == NAME
    assert httpx.get(small_server.url + "/health").status_code == 200  # open
    assert httpx.get(small_server.url + "/metrics").status_code == 200


def test_max_model_len(small_server):
    c = small_server.client(api_key="sekrit")
    assert c.models.list().data[0].model_extra["max_model_len"] == 128
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=NAME, prompt=list(range(5, 125)), max_tokens=10)
    assert e.value.body["code"] == "context_length_exceeded" and "128" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError):
        c.completions.create(model=NAME, prompt=list(range(5, 135)), max_tokens=1)
    assert c.completions.create(model=NAME, prompt=list(range(5, 125)), max_tokens=8).usage.completion_tokens <= 8


def test_overload_is_503(serve):
    s = serve("--max-num-seqs", "1", "--max-waiting", "1", "--kv-cache-tokens", "2048")
    try:
        body = {"prompt": STORY, "max_tokens": 900, "stream": True, "ignore_eos": True}
        with httpx.Client(timeout=30) as h1, httpx.Client(timeout=30) as h2:
            with h1.stream("POST", s.url + "/v1/completions", json=body) as first:
                first_lines = first.iter_lines()  # kept: a dropped iterator closes the response
                next(first_lines)  # running
                with h2.stream("POST", s.url + "/v1/completions", json=body) as second:
                    assert second.status_code == 200  # waiting (the one slot is taken)
                    deadline = time.monotonic() + 10
                    while s.metrics()["fp8lm:num_requests_waiting"] < 1:
                        assert time.monotonic() < deadline
                        time.sleep(0.02)
                    r = httpx.post(s.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2})
                    err = assert_error(r, 503)
                    assert "--max-waiting" in err["message"]
        wait_idle(s)  # both streams closed early: cancelled, their blocks freed
        assert httpx.post(s.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}).status_code == 200
        # More choices than the server ever queues: never possible, so a 400 rather than a 503.
        assert_error(httpx.post(s.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2, "n": 2}), 400, "n")
    finally:
        assert s.stop(signal.SIGTERM) == 0, s.output()


def test_stop_during_a_stream_exits_cleanly(serve):
    s = serve("--kv-cache-tokens", "2048")
    with httpx.Client(timeout=30) as h:
        with h.stream("POST", s.url + "/v1/completions",
                      json={"prompt": STORY, "max_tokens": 1000, "stream": True, "ignore_eos": True}) as r:
            lines = r.iter_lines()
            next(lines)
            t0 = time.monotonic()
            s.proc.send_signal(signal.SIGTERM)
            rest = []
            try:  # the stream ends: an error event then [DONE], or the connection closes
                rest = list(lines)
            except httpx.RemoteProtocolError:
                pass
            assert time.monotonic() - t0 < 15
    assert s.stop() == 0, s.output()
    assert "server stopped" in s.output()
    if rest:
        assert rest[-1] in ("data: [DONE]", "") or rest[-1].startswith("data: ")
