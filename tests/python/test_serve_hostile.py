"""Hardening II (issue 39) against a real `fp8lm serve`: one request can only fail
itself. JSON inside a request's strings is depth-bounded like the body; /tokenize
and /detokenize have the bounds completions have; the route table decides who
may call what (the API key) and what a body must be (application/json); a
request whose sampling parameters used to make a logit +inf no longer cancels
everyone's streams; a bare-LF request head is refused at once; a template per
request and chat_template_kwargs that would replace the request's own fields are
refused by name. Then the load test: 200 concurrent streams for a minute with a
poison request every second, every other request answering what it answers
alone and the server's memory bounded and back to its baseline."""
import asyncio
import json
import socket
import time
from pathlib import Path

import httpx
import pytest

from test_serve import CONTEXT, FP8, NAME
from test_serve_load import body  # prompts, lengths and seeds of the load tests

REPO = Path(__file__).resolve().parents[2]


def post(server, path, body, headers=None, timeout=60):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(server.url + path, content=data,
                      headers={"Content-Type": "application/json", **(headers or {})}, timeout=timeout)


def error_of(r, status=400):
    assert r.status_code == status, r.text
    return r.json()["error"]


def rss_mib(server, field="VmRSS"):
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
    raise AssertionError(f"no {field}")


def reset_peak_rss_mib(server):
    Path(f"/proc/{server.proc.pid}/clear_refs").write_text("5")
    return rss_mib(server, "VmHWM")


def deep_arguments_body(depth):
    """The issue's reproducer: an assistant's earlier tool call whose arguments
    text nests `depth` objects. No tools and no parser are needed."""
    args = '{"a":' * depth + "1" + "}" * depth
    return {"messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": "",
                          "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}]},
                         {"role": "user", "content": "go"}],
            "max_tokens": 2}


@pytest.fixture(scope="module")
def server(serve):
    s = serve(*FP8, "--max-num-seqs", "8")
    yield s
    s.stop_cleanly()


@pytest.fixture
def own_server(serve):
    """A server of its own, so that a crash fails only the test that caused it."""
    s = serve(*FP8, "--max-num-seqs", "8")
    yield s
    s.stop_cleanly()


def test_json_inside_strings_is_depth_bounded(own_server):
    # 20,000 levels killed the server (SIGSEGV in chat::Value::from_json); 14,000 still worked.
    for depth in (129, 20_000):
        e = error_of(post(own_server, "/v1/chat/completions", deep_arguments_body(depth)))
        assert e["param"] == "messages", e
        assert "tool_calls[0].function.arguments nests" in e["message"] and "128 levels deep" in e["message"], e
        assert own_server.healthy()
    r = post(own_server, "/v1/chat/completions", deep_arguments_body(100))
    assert r.status_code == 200, r.text


def test_tokenize_and_detokenize_are_bounded(own_server):
    server = own_server
    # 60 MB to /tokenize with return_token_strs passed 9 GB of resident memory.
    text = "It was a dark and stormy night; the rain fell in torrents. " * (60_000_000 // 59)
    before = reset_peak_rss_mib(server)
    start = time.monotonic()
    e = error_of(post(server, "/tokenize", {"prompt": text, "return_token_strs": True}))
    assert e["param"] == "prompt" and e["code"] == "context_length_exceeded", e
    assert str(CONTEXT) in e["message"]
    e = error_of(post(server, "/tokenize", {"messages": [{"role": "user", "content": text}]}))
    assert e["param"] == "messages" and e["code"] == "context_length_exceeded", e
    # 12 M ids to /detokenize took 3.7 GB and answered 480 MB.
    ids = "[" + ",".join(["1234"] * 12_000_000) + "]"
    e = error_of(post(server, "/detokenize", '{"tokens": ' + ids + "}"))
    assert e["param"] == "tokens" and e["code"] == "context_length_exceeded", e
    elapsed = time.monotonic() - start
    grown = rss_mib(server, "VmHWM") - before
    # What remains is the bodies and their parse (the 72 MB id list as JSON: ~12 M nodes).
    assert grown < 1200, f"peak memory grew {grown} MiB"
    assert elapsed < 60, elapsed
    assert server.healthy()
    # Within the bounds both work, and agree with each other.
    r = post(server, "/tokenize", {"prompt": "It was a dark and stormy night", "return_token_strs": True})
    assert r.status_code == 200, r.text
    tokens = r.json()["tokens"]
    assert r.json()["count"] == len(tokens) == len(r.json()["token_strs"])
    r = post(server, "/detokenize", {"tokens": tokens})
    assert r.status_code == 200 and "It was a dark and stormy night" in r.json()["prompt"], r.text
    r = post(server, "/detokenize", {"tokens": [5] * CONTEXT})
    assert r.status_code == 200, r.text


def test_route_table_decides_who_may_call_what(serve):
    s = serve("--api-key", "sekrit", "--max-num-seqs", "2")
    try:
        key = {"Authorization": "Bearer sekrit"}
        keyed = [("POST", "/tokenize", {"prompt": "hi"}), ("POST", "/detokenize", {"tokens": [1, 2]}),
                 ("GET", "/version", None), ("GET", "/v1/models", None), ("GET", f"/v1/models/{NAME}", None),
                 ("GET", "/v1/fp8lm/model", None),
                 ("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 1})]
        for method, path, body in keyed:
            kw = {"json": body} if body is not None else {}
            r = httpx.request(method, s.url + path, timeout=30, **kw)
            assert r.status_code == 401, (path, r.status_code, r.text)
            r = httpx.request(method, s.url + path, headers=key, timeout=30, **kw)
            assert r.status_code == 200, (path, r.status_code, r.text)
        for path in ("/health", "/metrics", "/"):
            assert httpx.get(s.url + path, timeout=30).status_code == 200, path
        # A path outside the table is no way around the key: 401 before its 404.
        for path in ("/nothing", "/v1", "/health/../tokenize", "//tokenize"):
            assert httpx.get(s.url + path, timeout=30).status_code == 401, path
            assert httpx.get(s.url + path, headers=key, timeout=30).status_code == 404, path
    finally:
        s.stop_cleanly()


def test_json_routes_take_json_alone(server):
    # text/plain needs no CORS preflight: any web page could post to a local server.
    for path in ("/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"):
        for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {"Content-Type": content_type} if content_type else {}
            r = httpx.post(server.url + path, content=b'{"prompt": "hi", "max_tokens": 1}', headers=headers, timeout=30)
            e = error_of(r, 415)
            assert path in e["message"] and "application/json" in e["message"], e
    r = httpx.post(server.url + "/v1/completions", content=b'{"prompt": "hi", "max_tokens": 1}',
                   headers={"Content-Type": "Application/JSON; charset=utf-8"}, timeout=30)
    assert r.status_code == 200, r.text


def test_a_request_whose_sampling_overflowed_fails_no_one(server):
    """repetition_penalty 1e-38 made a logit +inf, the sampler threw and the engine
    cancelled every request in flight: the stream beside it ended with 'internal error'."""
    async def run():
        async with httpx.AsyncClient(timeout=120) as c:
            async def stream():
                text, chunks = "", 0
                async with c.stream("POST", server.url + "/v1/completions",
                                    json={"prompt": "Once upon a time", "max_tokens": 60, "ignore_eos": True,
                                          "stream": True, "temperature": 0}) as r:
                    assert r.status_code == 200
                    async for line in r.aiter_lines():
                        if line.startswith("data: ") and line != "data: [DONE]":
                            event = json.loads(line[6:])
                            assert "error" not in event, event
                            text += event["choices"][0]["text"]
                            chunks += 1
                return text

            async def poison(body):
                await asyncio.sleep(0.5)
                return await c.post(server.url + "/v1/completions", json=body)

            bodies = [{"prompt": "It was a dark and the dark", "max_tokens": 3, "repetition_penalty": 1e-38},
                      {"prompt": "It was a dark and the dark", "max_tokens": 3, "repetition_penalty": 1e38,
                       "temperature": 1e-5},
                      {"prompt": "It was", "max_tokens": 3, "temperature": 1e-5, "frequency_penalty": -2,
                       "presence_penalty": -2}]
            return await asyncio.gather(stream(), *(poison(b) for b in bodies))

    alone = post(server, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 60, "ignore_eos": True,
                                             "temperature": 0}).json()["choices"][0]["text"]
    text, *answers = asyncio.run(run())
    assert text == alone
    for r in answers:
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["finish_reason"] in ("length", "stop"), r.text
    assert server.healthy()


def raw_exchange(server, data, timeout=10):
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
        return out


def test_bare_lf_request_head_is_refused_at_once(server):
    for head in (b"GET /health HTTP/1.1\nHost: x\n\n", b"GET /health HTTP/1.1\r\nHost: x\n\r\n"):
        start = time.monotonic()
        out = raw_exchange(server, head)
        assert out.startswith(b"HTTP/1.1 400"), out[:200]
        assert b"bare LF" in out
        assert time.monotonic() - start < 3  # it used to wait 20 s (--header-timeout) for a 408
    assert server.healthy()


def test_request_chat_template_and_reserved_kwargs_are_refused(server):
    messages = [{"role": "user", "content": "hi"}]
    e = error_of(post(server, "/v1/chat/completions", {"messages": messages, "chat_template": "{{ 'x' }}"}))
    assert e["param"] == "chat_template" and "not supported" in e["message"], e
    for reserved in ("messages", "add_generation_prompt", "tools", "bos_token"):
        e = error_of(post(server, "/v1/chat/completions",
                          {"messages": messages, "chat_template_kwargs": {reserved: []}}))
        assert e["param"] == "chat_template_kwargs" and reserved in e["message"], e
    r = post(server, "/v1/chat/completions", {"messages": messages, "max_tokens": 2,
                                              "chat_template_kwargs": {"enable_thinking": False}})
    assert r.status_code == 200, r.text


# ---- the load test with poison requests --------------------------------------------------

async def streamed(client, url, b):
    text, error = "", None
    async with client.stream("POST", url + "/v1/completions", json=b) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                assert error is None, error
                return text
            event = json.loads(data)
            if "error" in event:
                error = event
                continue
            text += event["choices"][0]["text"]
    raise AssertionError(f"stream ended without [DONE] after {text!r}")


POISONS = ["sampling", "tokenize", "arguments", "detokenize"]
BIG_TEXT = "It was a dark and stormy night; the rain fell in torrents. " * (30_000_000 // 59)


async def poison(client, url, kind):
    """Each answers as it does alone: the sampling one generates, the others are 400s."""
    if kind == "sampling":
        r = await client.post(url + "/v1/completions",
                              json={"prompt": "It was a dark and the dark", "max_tokens": 4, "stream": False,
                                    "repetition_penalty": 1e-38, "temperature": 1e-5})
        assert r.status_code == 200, r.text
    elif kind == "tokenize":
        r = await client.post(url + "/tokenize", json={"prompt": BIG_TEXT, "return_token_strs": True})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
    elif kind == "arguments":
        r = await client.post(url + "/v1/chat/completions", json=deep_arguments_body(20_000))
        assert r.status_code == 400 and "levels deep" in r.json()["error"]["message"], r.text
    else:
        r = await client.post(url + "/detokenize", json={"tokens": [7] * 2_000_000})
        assert r.status_code == 400 and r.json()["error"]["param"] == "tokens", r.text
    return kind


def test_poison_under_load_fails_only_itself(serve):
    s = serve(*FP8, "--max-num-seqs", "256", "--max-waiting", "2000", "--kv-cache-tokens", "16384")
    try:
        n = 200
        kinds = 40  # distinct bodies; each stream sends them in turn

        async def reference():
            # n streams at once, without poison: the references (each body's five
            # answers agree), and a baseline that already holds what that load
            # touches (KV blocks, the handler threads' stacks).
            async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=n + 50)) as c:
                return await asyncio.gather(*(streamed(c, s.url, body(i % kinds, True)) for i in range(n)))

        warm = asyncio.run(reference())
        expected = warm[:kinds]
        assert warm == expected * (n // kinds)
        time.sleep(1)
        baseline = rss_mib(s)
        reset_peak_rss_mib(s)

        async def load():
            stop_at = time.monotonic() + 60
            done, mismatches, poisons = [0], [], []

            async def worker(w, c):
                i = w
                while time.monotonic() < stop_at:
                    got = await streamed(c, s.url, body(i % kinds, True))
                    if got != expected[i % kinds]:
                        mismatches.append((i % kinds, got, expected[i % kinds]))
                    done[0] += 1
                    i += n

            async def poisoner(c):
                k = 0
                while time.monotonic() < stop_at:
                    tick = time.monotonic()
                    poisons.append(asyncio.create_task(poison(c, s.url, POISONS[k % len(POISONS)])))
                    k += 1
                    await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))

            limits = httpx.Limits(max_connections=n + 50, max_keepalive_connections=n + 50)
            async with httpx.AsyncClient(timeout=300, limits=limits) as c:
                await asyncio.gather(poisoner(c), *(worker(w, c) for w in range(n)))
                answered = await asyncio.gather(*poisons)
            return done[0], mismatches, answered

        completed, mismatches, answered = asyncio.run(load())
        assert not mismatches, mismatches[:3]
        assert completed >= n, completed
        assert len(answered) >= 45 and set(answered) == set(POISONS), answered
        peak = rss_mib(s, "VmHWM")
        time.sleep(2)
        after = rss_mib(s)
        print(f"poison load: {completed} streams, {len(answered)} poison requests; RSS baseline {baseline} MiB, "
              f"peak {peak} MiB, after {after} MiB")
        assert peak - baseline < 1500, (baseline, peak)
        assert after - baseline < 64, (baseline, after)
        assert s.healthy()
    finally:
        s.stop_cleanly()


@pytest.mark.parametrize("kind", ["chain", "deep_value", "string_work"])
def test_hostile_chat_templates_fail_the_request_not_the_server(fp8lm_bin, serve, tmp_path, kind):
    """--chat-template takes any file: a 20,000-term `+` chain (the parser built a tree that deep
    and rendering it crashed the process), a value nested 100,000 deep printed with tojson
    (SIGSEGV), and 2,000 comparisons of a 30 MB message (80 s of one handler thread) each end in a
    400 that names the bound, at once, and the server serves on."""
    template = tmp_path / f"{kind}.jinja"
    if kind == "chain":
        template.write_text("{{ " + "+".join(["1"] * 20_000) + " }}")
        needle = "expression nests deeper than 200 levels"
    elif kind == "deep_value":
        template.write_text("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
                            "{% endfor %}{{ ns.x | tojson }}")
        needle = "nests deeper than 512 levels"
    else:
        template.write_text("{% for i in range(2000) %}{% if messages[0].content == messages[0].content ~ '' %}"
                            "{% endif %}{% endfor %}{{ messages[0].content[:10] }}")
        needle = "render limit exceeded"
    if kind == "chain":  # refused while parsing: --chat-template's file is named and the server never starts
        import subprocess
        r = subprocess.run([fp8lm_bin, "serve", str(REPO / "models" / NAME), "--chat-template", str(template),
                            "--port", "0"], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and needle in r.stderr and "internal error" not in r.stderr, r.stderr
        return
    s = serve("--chat-template", str(template), "--max-num-seqs", "2")
    try:
        content = "x" * 30_000_000 if kind == "string_work" else "hi"
        start = time.monotonic()
        e = error_of(post(s, "/v1/chat/completions", {"messages": [{"role": "user", "content": content}],
                                                      "max_tokens": 2}))
        assert needle in e["message"], e
        assert time.monotonic() - start < 30
        assert s.healthy()
        r = post(s, "/v1/completions", {"prompt": "Once", "max_tokens": 2})
        assert r.status_code == 200, r.text
    finally:
        s.stop_cleanly()
