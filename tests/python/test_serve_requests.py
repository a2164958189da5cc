"""Hostile request bodies against a real `fp8lm serve` (issue 16): a deeply
nested JSON body is refused with a 400 and the server keeps answering; a huge
text prompt is refused fast, before it is tokenized in full; n × prompts ×
stop lists that would multiply the body's memory is refused naming `n`."""
import json
from pathlib import Path

import httpx
import pytest

from test_serve import CONTEXT, NAME


def post(server, path, body, timeout=60):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(server.url + path, content=data, headers={"Content-Type": "application/json"}, timeout=timeout)


def peak_rss_mib(server):
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmHWM")


def reset_peak_rss_mib(server):
    """Resets the server's peak resident memory to what it holds now (clear_refs 5)."""
    Path(f"/proc/{server.proc.pid}/clear_refs").write_text("5")
    return peak_rss_mib(server)


def started(serve):
    s = serve("--max-num-seqs", "8", "--max-waiting", "256")
    yield s
    s.stop_cleanly()


@pytest.fixture(scope="module")
def server(serve):
    yield from started(serve)


@pytest.fixture
def own_server(serve):
    """A server of its own, so that a crash fails only the test that caused it."""
    yield from started(serve)


def error_of(r, status=400):
    assert r.status_code == status, r.text
    return r.json()["error"]


def deep(levels):
    return "[" * levels + "]" * levels


# Each once crashed the process (SIGSEGV): the nested value was copied, dumped
# or converted recursively, one stack frame per level.
DEEP_BODIES = [
    ("/v1/completions", '{"x": %s, "y": 1, "prompt": "a", "max_tokens": 1}'),
    ("/v1/completions", '{"prompt": "a", "stop_token_ids": [%s], "max_tokens": 1}'),
    ("/v1/completions", '{"prompt": [%s], "max_tokens": 1}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "a", "name": %s}], "max_tokens": 1}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": %s}], "max_tokens": 1}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "a"}], "chat_template_kwargs": {"k": %s}}'),
]


@pytest.mark.parametrize("path,template", DEEP_BODIES)
def test_deeply_nested_body_is_refused_and_the_server_lives(own_server, path, template):
    server = own_server
    body = template % deep(50_000)  # ~100 KB
    e = error_of(post(server, path, body))
    assert "nests" in e["message"] and "deep" in e["message"], e
    assert server.healthy()
    # A legitimate request still works afterwards.
    r = post(server, "/v1/completions", {"prompt": "Once", "max_tokens": 2})
    assert r.status_code == 200, r.text


def test_huge_text_prompt_is_refused_before_tokenizing(server):
    prompt = "It was a dark and stormy night; the rain fell in torrents. " * (63_000_000 // 59)
    for path, body, param in (("/v1/completions", {"prompt": prompt}, "prompt"),
                              ("/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]}, "messages")):
        data = json.dumps(body)
        before = reset_peak_rss_mib(server)
        e = error_of(post(server, path, data))
        grown = peak_rss_mib(server) - before
        assert e["param"] == param and e["code"] == "context_length_exceeded", e
        # The body, its parse, the messages and the rendered prompt remain (up to
        # ~8 × 63 MB for chat);
        # tokenizing it in full took 1.5 GB (and 11 s).
        assert grown < 1000, f"{path}: peak memory grew {grown} MiB"
    assert server.healthy()


def test_n_times_stop_lists_is_refused_naming_n(server):
    stops = ["stop-%07d" % i for i in range(200_000)]  # 2.4 MB of stop strings (+ 6 MB of string headers) per choice
    e = error_of(post(server, "/v1/completions", {"prompt": "Once", "max_tokens": 1, "n": 128, "stop": stops}))
    assert e["param"] == "n", e
    assert "MiB" in e["message"], e
    ids = list(range(1, 1_100_000))  # 4.4 MB of stop ids per choice, × 64 choices
    e = error_of(post(server, "/v1/completions", {"prompt": "Once", "max_tokens": 1, "n": 64, "stop_token_ids": ids}))
    assert e["param"] == "n", e
    # The same lists with n = 1 are accepted.
    r = post(server, "/v1/completions", {"prompt": "Once", "max_tokens": 1, "stop": stops[:1000]})
    assert r.status_code == 200, r.text
    assert server.healthy()


def test_numeric_params_that_overflow_a_float_are_named(server):
    for param, value in (("temperature", 1e308), ("repetition_penalty", 1e39), ("top_p", 1e-50)):
        e = error_of(post(server, "/v1/completions", {"prompt": "Once", "max_tokens": 1, param: value}))
        assert e["param"] == param, e
    e = error_of(post(server, "/v1/completions", {"prompt": "Once", "max_tokens": CONTEXT}))
    assert e["param"] == "max_tokens", e
    e = error_of(post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                       "max_completion_tokens": CONTEXT}))
    assert e["param"] == "max_completion_tokens", e
