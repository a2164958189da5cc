"""`fp8lm serve --enable-prefix-caching` on the shipped model (CPU, FP8 weights and KV cache), driven by
the official `openai` client: a repeated long prompt is served from the cache on its second call
(usage.prompt_tokens_details.cached_tokens, the /metrics counters) with the text a server without the
cache gives; chat turns, streams, many requests sharing a prefix at once, and a cache small enough to
force preemption all give exactly what the server without the cache gives."""
import asyncio
import signal

import openai
import pytest

from test_serve import FP8, NAME, wait_idle

BLOCK = 16  # fp8lm's KV-cache block size: only full blocks are cached

STORY = ("The lighthouse stood at the end of the long grey pier, and every evening the keeper climbed its hundred "
         "and twelve steps to light the lamp. The village below had grown used to the beam that swept across the "
         "water and over the roofs; children counted its turns as they fell asleep, and the fishermen trusted it "
         "more than any chart. In the winter of the great storm the keeper did not come down for three days.")
LETTER = ("My dear sister, the coach was late again this morning, and I stood for an hour in the rain outside the "
          "inn, watching the carts go by on their way to the market. The town is smaller than I remembered, and the "
          "old bookshop on the corner has closed; a baker has taken its place, and the smell of bread fills the "
          "whole street from dawn until noon. I shall write again when I have found rooms.")


def expected_hit(prompt_tokens):
    """A repeated prompt shares its full blocks, keeping at least one token to compute (its logits)."""
    return (prompt_tokens - 1) // BLOCK * BLOCK


def stop(s):
    s.stop_cleanly(signal.SIGTERM)


@pytest.fixture(scope="module")
def plain(serve):
    s = serve(*FP8, "--kv-cache-tokens", "4096", "--max-num-seqs", "16")
    yield s
    stop(s)


@pytest.fixture(scope="module")
def cached(serve):
    s = serve(*FP8, "--kv-cache-tokens", "4096", "--max-num-seqs", "16", "--enable-prefix-caching")
    yield s
    stop(s)


def test_a_repeated_long_prompt_is_served_from_the_cache(plain, cached):
    kw = dict(model=NAME, prompt=STORY, max_tokens=24, temperature=0, extra_body={"ignore_eos": True})
    before = cached.metrics()
    c = cached.client()
    first = c.completions.create(**kw)
    second = c.completions.create(**kw)
    n = first.usage.prompt_tokens
    assert n > 4 * BLOCK
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens == expected_hit(n)
    want = plain.client().completions.create(**kw)
    assert want.usage.prompt_tokens_details is None  # without the cache, nothing is reported
    assert first.choices[0].text == second.choices[0].text == want.choices[0].text
    assert second.usage.prompt_tokens == want.usage.prompt_tokens == n
    assert second.usage.completion_tokens == want.usage.completion_tokens == 24

    after = wait_idle(cached)  # every block back: KV-cache usage 0, the cached ones included
    assert after["fp8lm:prefix_cache_queries_total"] - before["fp8lm:prefix_cache_queries_total"] == 2 * n
    assert after["fp8lm:prefix_cache_hits_total"] - before["fp8lm:prefix_cache_hits_total"] == expected_hit(n)
    assert wait_idle(plain)["fp8lm:prefix_cache_queries_total"] == 0


def test_chat_turns_and_streams_report_cached_tokens(plain, cached):
    system = {"role": "system", "content": LETTER}
    turn1 = [system, {"role": "user", "content": "Who wrote this letter?"}]
    kw = dict(model=NAME, max_tokens=20, temperature=0, extra_body={"ignore_eos": True})
    c, p = cached.client(), plain.client()
    whole = c.chat.completions.create(messages=turn1, **kw)
    chunks = list(c.chat.completions.create(messages=turn1, stream=True, stream_options={"include_usage": True}, **kw))
    usage = chunks[-1].usage
    assert usage.prompt_tokens == whole.usage.prompt_tokens
    assert usage.prompt_tokens_details.cached_tokens == expected_hit(usage.prompt_tokens)
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    want = p.chat.completions.create(messages=turn1, **kw).choices[0].message.content
    assert whole.choices[0].message.content == streamed == want

    # The next turn starts with the whole first one: its blocks are found.
    turn2 = turn1 + [{"role": "assistant", "content": want}, {"role": "user", "content": "And where was she?"}]
    got = c.chat.completions.create(messages=turn2, **kw)
    assert got.usage.prompt_tokens_details.cached_tokens >= whole.usage.prompt_tokens // BLOCK * BLOCK - BLOCK
    assert got.choices[0].message.content == p.chat.completions.create(messages=turn2, **kw).choices[0].message.content


def shared_prefix_cases():
    """24 completions over two long shared prefixes, some identical: greedy and seeded sampling, n = 1 or 2."""
    endings = ["Then", "At dawn", "Nobody knew why", "The keeper", "In the spring", "She wrote"]
    cases = []
    for i in range(24):
        prefix = STORY if i % 3 else LETTER
        kw = {"max_tokens": 8 + i % 7, "extra_body": {"ignore_eos": True}}
        if i % 2:
            kw.update(temperature=0.9, top_p=0.95, seed=500 + i, n=1 + i % 4 // 2)
        else:
            kw.update(temperature=0)
        cases.append((prefix + " " + endings[i % len(endings)], kw))
    return cases


def run_all(server, cases, concurrency):
    async def one(aclient, sem, prompt, kw):
        async with sem:
            r = await aclient.completions.create(model=NAME, prompt=prompt, **kw)
            return [ch.text for ch in sorted(r.choices, key=lambda ch: ch.index)], r.usage.completion_tokens

    async def main():
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                                      timeout=120) as aclient:
            sem = asyncio.Semaphore(concurrency)
            return await asyncio.gather(*(one(aclient, sem, p, kw) for p, kw in cases), return_exceptions=True)

    results = asyncio.run(main())
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, failures[:3]
    return results


def test_shared_prefixes_under_load_equal_the_server_without_the_cache(plain, cached):
    cases = shared_prefix_cases()
    want = run_all(plain, cases, concurrency=1)
    before = cached.metrics()
    got = run_all(cached, cases, concurrency=16)
    assert got == want
    after = wait_idle(cached)
    assert after["fp8lm:prefix_cache_hits_total"] > before["fp8lm:prefix_cache_hits_total"]


def test_preemption_with_the_cache_loses_nothing(serve, plain):
    # 256 cached tokens (16 blocks): requests of up to 11 blocks each cannot all run at once.
    small = serve(*FP8, "--kv-cache-tokens", "256", "--max-num-seqs", "16", "--enable-prefix-caching")
    try:
        cases = shared_prefix_cases()
        got = run_all(small, cases, concurrency=16)
        assert got == run_all(plain, cases, concurrency=1)
        m = wait_idle(small)
        assert m["fp8lm:num_preemptions_total"] > 0
        assert m["fp8lm:prefix_cache_hits_total"] > 0
    finally:
        stop(small)
