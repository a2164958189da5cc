"""`fp8lm serve` under a hostile load (issue 16): hundreds of concurrent requests,
streamed and whole, on a KV cache small enough to force preemption, with a burst
of clients that leave mid-stream, then SIGTERM while a hundred streams run.
Nothing may crash or be lost: every request that stays answers exactly what it
answers alone (on a server with a large cache), every stream ends with `[DONE]`
(after its last chunk or an error event), the leavers' KV blocks come back, and
the process exits 0 after draining."""
import asyncio
import json
import signal
import time

import httpx
import pytest

from test_serve import FP8, NAME, wait_idle

WORDS = ["The ship", "A letter came", "In the morning", "My dear friend", "The old house", "He said nothing",
         "When the war", "The garden was", "She laughed and", "At the inn"]


def body(i, stream, max_tokens=None):
    b = {"model": NAME, "prompt": f"{WORDS[i % 10]} {i % 7}", "max_tokens": max_tokens or 8 + i % 9,
         "ignore_eos": True, "stream": stream}
    if i % 2:
        b.update(temperature=0.9, top_p=0.95, seed=1000 + i)
    else:
        b["temperature"] = 0
    return b


async def whole(client, url, b):
    r = await client.post(url + "/v1/completions", json=b)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


async def stream(client, url, b, leave_after=None):
    """The streamed text and how the stream ended: 'done' ([DONE] after the finish
    chunk), 'error' ([DONE] after an error event), or 'left' (we closed it)."""
    text, finished, error = "", False, False
    async with client.stream("POST", url + "/v1/completions", json=b) as r:
        assert r.status_code == 200
        events = 0
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                assert finished or error, "[DONE] before a finish or an error event"
                return text, "error" if error else "done"
            event = json.loads(data)
            if "error" in event:
                error = True
                continue
            choice = event["choices"][0]
            text += choice["text"]
            finished = finished or choice["finish_reason"] is not None
            events += 1
            if leave_after is not None and events >= leave_after:
                return text, "left"
    raise AssertionError(f"stream ended without [DONE] after {text!r}")


@pytest.fixture(scope="module")
def servers(serve):
    big = serve(*FP8, "--kv-cache-tokens", "16384", "--max-num-seqs", "64")
    # 512 cached tokens (32 blocks): 128 running sequences cannot all keep theirs.
    small = serve(*FP8, "--kv-cache-tokens", "512", "--max-num-seqs", "128", "--max-waiting", "2000",
                  "--shutdown-timeout", "3")
    yield big, small
    for s in (big, small):
        s.kill()


def test_hostile_load_then_sigterm(servers):
    big, small = servers
    n = 240

    async def reference():
        async with httpx.AsyncClient(timeout=120) as c:
            return await asyncio.gather(*(whole(c, big.url, body(i, False)) for i in range(n)))

    async def load():
        limits = httpx.Limits(max_connections=300, max_keepalive_connections=300)
        async with httpx.AsyncClient(timeout=120, limits=limits) as c:
            jobs = [stream(c, small.url, body(i, True)) if i % 2 else whole(c, small.url, body(i, False))
                    for i in range(n)]
            # A burst of clients that read two chunks of a long stream and leave.
            jobs += [stream(c, small.url, body(i, True, max_tokens=64), leave_after=2) for i in range(40)]
            return await asyncio.gather(*jobs, return_exceptions=True)

    expected = asyncio.run(reference())
    results = asyncio.run(load())
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, failures[:3]
    for i in range(n):
        got = results[i][0] if i % 2 else results[i]
        assert got == expected[i], (i, body(i, bool(i % 2)))
        if i % 2:
            assert results[i][1] == "done", i
    assert all(r[1] in ("left", "done") for r in results[n:])
    m = wait_idle(small)  # the leavers' blocks are back, nothing is left running
    assert m["fp8lm:num_preemptions_total"] > 0

    # SIGTERM while 100 streams run: each finishes or gets an error event, then [DONE].
    async def drain():
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=200)) as c:
            jobs = [asyncio.create_task(stream(c, small.url, body(i, True, max_tokens=120))) for i in range(100)]
            deadline = time.monotonic() + 30
            while small.metrics()["fp8lm:num_requests_running"] == 0:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            small.proc.send_signal(signal.SIGTERM)
            return await asyncio.gather(*jobs, return_exceptions=True)

    ended = asyncio.run(drain())
    failures = [r for r in ended if isinstance(r, BaseException)]
    assert not failures, failures[:3]
    assert {how for _, how in ended} <= {"done", "error"}
    small.expect_clean_exit(small.proc.wait(timeout=30))  # the drain ends by itself
