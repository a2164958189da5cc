"""`fp8lm serve --skip-tokenizer-init`: token ids in, token ids out (vLLM's flag of the
same name), which is how a --load-format dummy model without tokenizer.json is served
for benchmarks. Checked with the official `openai` client: the token ids equal what
`fp8lm generate` produces for the same prompt ids (whose tokenizer is tested against
Hugging Face `tokenizers` in test_tokenizer_vs_hf), streamed chunks carry every token,
and whatever needs text (string prompts, chat, stop strings) is refused with 400 naming
the parameter."""
import json
import shutil

import httpx
import openai
import pytest

from test_serve import FP8, MODEL, NAME, PROMPTS, assert_error, raw_post

@pytest.fixture(scope="module")
def server(serve):
    s = serve(*FP8, "--skip-tokenizer-init", "--kv-cache-tokens", "4096", "--max-num-seqs", "8")
    yield s
    assert s.stop() == 0, s.output()


@pytest.fixture(scope="module")
def client(server):
    return server.client()


def generate_ids(run, prompt, n):
    r = run("generate", str(MODEL), "--threads", "2", *FP8, "--json", "--prompt", prompt, "--max-tokens", str(n),
            "--ignore-eos", "--temperature", "0")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("prompt", PROMPTS[:2])
def test_token_ids_equal_fp8lm_generate(client, run, prompt):
    want = generate_ids(run, prompt, 20)
    ids = want["prompt_ids"]
    got = client.completions.create(model=NAME, prompt=ids, max_tokens=20, temperature=0,
                                    extra_body={"ignore_eos": True})
    choice = got.choices[0]
    assert choice.text == ""
    assert choice.model_extra["token_ids"] == want["token_ids"]
    assert choice.finish_reason == "length"
    assert got.usage.prompt_tokens == len(ids) and got.usage.completion_tokens == 20


def test_stream_carries_every_token(client, run):
    ids = generate_ids(run, PROMPTS[2], 1)["prompt_ids"]
    whole = client.completions.create(model=NAME, prompt=ids, max_tokens=12, temperature=0,
                                      extra_body={"ignore_eos": True})
    chunks = list(client.completions.create(model=NAME, prompt=ids, max_tokens=12, temperature=0, stream=True,
                                            stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    with_tokens = [c for c in chunks if c.choices and c.choices[0].model_extra.get("token_ids")]
    # One chunk per generated token: time to first token and inter-token latency are measurable.
    assert len(with_tokens) == 12
    streamed = [t for c in with_tokens for t in c.choices[0].model_extra["token_ids"]]
    assert streamed == whole.choices[0].model_extra["token_ids"]
    assert all(c.choices[0].text == "" for c in chunks if c.choices)
    assert chunks[-1].usage.completion_tokens == 12


def test_logprob_tokens_name_ids(client, run):
    ids = generate_ids(run, PROMPTS[0], 1)["prompt_ids"]
    got = client.completions.create(model=NAME, prompt=ids, max_tokens=3, temperature=0, logprobs=2,
                                    extra_body={"ignore_eos": True})
    lp = got.choices[0].logprobs
    assert lp.tokens == [f"token_id:{t}" for t in got.choices[0].model_extra["token_ids"]]
    assert all(len(top) == 2 and all(k.startswith("token_id:") for k in top) for top in lp.top_logprobs)


def test_text_is_refused_with_400(server, client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=NAME, prompt="Once upon a time", max_tokens=4)
    assert "--skip-tokenizer-init" in str(e.value) and e.value.body["param"] == "prompt"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert e.value.body["param"] == "messages"
    body = json.dumps({"model": NAME, "prompt": [1, 2, 3], "stop": ["x"]})
    assert_error(raw_post(server, "/v1/completions", body), 400, "stop")
    assert "--skip-tokenizer-init" in assert_error(raw_post(server, "/tokenize", b'{"prompt": "hi"}'), 400)["message"]
    assert "--skip-tokenizer-init" in assert_error(raw_post(server, "/detokenize", b'{"tokens": [1]}'), 400)["message"]
    # The server keeps serving.
    assert httpx.get(server.url + "/health").status_code == 200


def test_a_model_without_tokenizer_needs_the_flag(serve, tmp_path):
    shutil.copy(MODEL / "config.json", tmp_path / "config.json")  # --load-format dummy reads config.json alone
    with pytest.raises(RuntimeError) as e:
        serve("--load-format", "dummy", "--kv-cache-tokens", "1024", model=tmp_path)
    assert "tokenizer.json" in str(e.value) and "--skip-tokenizer-init" in str(e.value)
    s = serve("--load-format", "dummy", "--skip-tokenizer-init", "--kv-cache-tokens", "1024", model=tmp_path)
    try:
        got = s.client().completions.create(model=tmp_path.name, prompt=[1, 2, 3], max_tokens=5, temperature=0,
                                            extra_body={"ignore_eos": True})
        assert len(got.choices[0].model_extra["token_ids"]) == 5
    finally:
        assert s.stop() == 0, s.output()
