"""Structured outputs (issue 43) through the official `openai` client: OpenAI's response_format and
vLLM's structured_outputs on the shipped model, which was never trained for JSON. Every output is
checked by references others wrote — Python's `jsonschema` (with its format checker) for JSON
schemas, `re.fullmatch` for regexes — greedy and at temperature 0.8, streamed and whole. The masks
themselves are compared with xgrammar's Python package in tests/cpp/test_structured.cpp.

The corpus below is what real clients send: nested objects, arrays with bounds, enums, anyOf,
$ref with recursion, string patterns and formats, numeric ranges, nullable fields. Strings,
numbers and repetitions are bounded, as production schemas bound them: a 22M-parameter model
given an unbounded string can write it until max_tokens, and a cut output cannot parse."""
import json
import os
import pty
import re
import subprocess
import threading
import time
from pathlib import Path

import jsonschema
import pytest

from cli_errors import assert_clean_error
from server import MODEL as REPO_MODEL
from test_serve import assert_error, raw_post

MODEL = "fp8lm-gutenberg-22m"
REPO = Path(__file__).resolve().parents[2]
PROMPT = "Here is the record as JSON:"

SCHEMAS = {
    "person": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "email": {"type": "string", "pattern": "^[a-z]{1,12}@[a-z]{1,10}\\.(com|org)$"}},
        "required": ["name", "age"]},
    "order": {"type": "object", "properties": {
        "id": {"type": "string", "pattern": "^ORD-[0-9]{6}$"},
        "items": {"type": "array", "minItems": 1, "maxItems": 4, "items": {"type": "object", "properties": {
            "sku": {"type": "string", "maxLength": 12}, "qty": {"type": "integer", "minimum": 1, "maximum": 99},
            "price": {"type": "number", "minimum": 0, "maximum": 10000}}, "required": ["sku", "qty", "price"]}},
        "status": {"enum": ["pending", "shipped", "delivered", "cancelled"]},
        "created": {"type": "string", "format": "date-time"}},
        "required": ["id", "items", "status", "created"]},
    "event": {"type": "object", "properties": {
        "title": {"type": "string", "minLength": 1, "maxLength": 60}, "date": {"type": "string", "format": "date"},
        "attendees": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 5},
        "online": {"type": "boolean"}}, "required": ["title", "date", "online"], "additionalProperties": False},
    "shape": {"anyOf": [
        {"type": "object", "properties": {"kind": {"const": "circle"}, "radius": {"type": "number", "exclusiveMinimum": 0,
                                                                                  "maximum": 100}},
         "required": ["kind", "radius"]},
        {"type": "object", "properties": {"kind": {"const": "rect"}, "w": {"type": "integer", "minimum": 1, "maximum": 50},
                                          "h": {"type": "integer", "minimum": 1, "maximum": 50}},
         "required": ["kind", "w", "h"]}]},
    "config": {"type": "object", "properties": {
        "version": {"type": "string", "pattern": "^[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}$"},
        "retries": {"type": "integer", "minimum": 0, "maximum": 10},
        "mode": {"type": "string", "enum": ["fast", "safe"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3},
        "limits": {"type": "object", "properties": {
            "cpu": {"type": "integer", "minimum": 1, "maximum": 64},
            "memory": {"type": "string", "pattern": "^[0-9]{1,5}(Mi|Gi)$"}}, "required": ["cpu"]}},
        "required": ["version", "mode", "limits"]},
    "coords": {"type": "array", "minItems": 2, "maxItems": 3, "items": {"type": "number", "minimum": -180, "maximum": 180}},
    "contact": {"type": "object", "properties": {
        "phone": {"type": "string", "pattern": "^\\+[0-9]{7,12}$"}, "id": {"type": "string", "format": "uuid"}},
        "required": ["phone", "id"]},
    "nullable": {"type": "object", "properties": {
        "note": {"type": ["string", "null"], "maxLength": 20},
        "score": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 100}, {"type": "null"}]}},
        "required": ["note", "score"]},
    "review": {"type": "object", "properties": {
        "rating": {"type": "integer", "enum": [1, 2, 3, 4, 5]}, "summary": {"type": "string", "maxLength": 80},
        "pros": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3},
        "recommend": {"type": "boolean"}}, "required": ["rating", "summary", "recommend"]},
}
# $ref with recursion: bounded in width, not in depth — the model decides when the tree ends.
TREE = {"$defs": {"node": {"type": "object", "properties": {
    "label": {"type": "string", "maxLength": 20},
    "children": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}}, "required": ["label"]}},
    "$ref": "#/$defs/node"}
DRAWS = [dict(temperature=0), dict(temperature=0.8, seed=1), dict(temperature=0.8, seed=2)]
FORMATS = jsonschema.FormatChecker()


@pytest.fixture(scope="module")
def server(serve):
    s = serve("--kv-cache-tokens", "8192")
    yield s
    assert s.stop() == 0, s.output()


def complete(client, constraint, max_tokens=400, **draw):
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=max_tokens,
                                  extra_body={"structured_outputs": constraint}, **draw)
    return r.choices[0].text, r.choices[0].finish_reason


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_json_schema_outputs_always_validate(server, name):
    client = server.client()
    for draw in DRAWS:
        text, finish = complete(client, {"json": SCHEMAS[name], "disable_any_whitespace": True}, **draw)
        assert finish == "stop", (draw, text)
        jsonschema.validate(json.loads(text), SCHEMAS[name], format_checker=FORMATS)


def test_recursive_schema_outputs_validate_when_they_end(server):
    client = server.client()
    ended = 0
    for draw in DRAWS:
        text, finish = complete(client, {"json": TREE, "disable_any_whitespace": True}, **draw)
        if finish == "stop":
            ended += 1
            jsonschema.validate(json.loads(text), TREE)
    assert ended >= 1


def test_response_format_in_chat_and_streamed(server):
    """OpenAI's own field on chat completions, whole and streamed (the deltas add up to valid JSON)."""
    client = server.client()
    schema = SCHEMAS["review"]
    rf = {"type": "json_schema", "json_schema": {"name": "review", "schema": schema, "strict": True}}
    messages = [{"role": "user", "content": "Review the book."}]
    compact = {"structured_outputs": {"disable_any_whitespace": True}}  # vLLM's option beside OpenAI's field
    whole = client.chat.completions.create(model=MODEL, messages=messages, response_format=rf, max_tokens=300,
                                           temperature=0, extra_body=compact)
    jsonschema.validate(json.loads(whole.choices[0].message.content), schema)
    text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=MODEL, messages=messages, response_format=rf, max_tokens=300, temperature=0, stream=True,
        extra_body=compact))
    assert text == whole.choices[0].message.content
    # Any object: its keys and strings are unbounded, so only an output that ends is checked.
    for seed in (5, 6, 7):
        obj = client.chat.completions.create(model=MODEL, messages=messages, response_format={"type": "json_object"},
                                             max_tokens=300, temperature=0.8, seed=seed, extra_body=compact)
        if obj.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(obj.choices[0].message.content), dict)


def test_any_whitespace_outputs_validate_when_they_end(server):
    """vLLM's default: any whitespace between JSON tokens. The small model spends many tokens on it, so
    only outputs that end are checked; those must validate."""
    client = server.client()
    for name in ("shape", "coords"):
        for draw in DRAWS:
            text, finish = complete(client, {"json": SCHEMAS[name]}, **draw)
            if finish == "stop":
                jsonschema.validate(json.loads(text), SCHEMAS[name], format_checker=FORMATS)


REGEXES = [r"\(\d{3}\) \d{3}-\d{4}", r"[A-Z]{2}-\d{3}", r"(yes|no|maybe)( because [a-z ]{1,30})?",
           r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d)", r"[a-z]{1,12}(_[a-z]{1,12}){0,3}"]


@pytest.mark.parametrize("pattern", REGEXES)
def test_regex_outputs_always_match(server, pattern):
    client = server.client()
    for draw in DRAWS:
        text, finish = complete(client, {"regex": pattern}, max_tokens=100, **draw)
        assert finish == "stop" and re.fullmatch(pattern, text), (draw, text)


def test_choice_outputs_are_one_of_the_choices(server):
    client = server.client()
    choices = ["yes", "no", "not sure", "Ask again \"later\""]
    for draw in DRAWS:
        text, finish = complete(client, {"choice": choices}, max_tokens=20, **draw)
        assert finish == "stop" and text in choices, text


def test_grammar_outputs_parse(server):
    grammar = 'root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= [0-9]{1,3} | "(" expr ")"\n'
    client = server.client()
    for draw in DRAWS:
        text, finish = complete(client, {"grammar": grammar}, max_tokens=60, **draw)
        if finish == "stop":
            assert re.fullmatch(r"[0-9+\-()]+", text), text
            eval(compile(text, "<expr>", "eval"), {"__builtins__": {}})  # Python parses it as arithmetic


@pytest.mark.parametrize("body, param, words", [
    ({"structured_outputs": {"regex": "(ab"}}, "structured_outputs", "parenthesis"),
    ({"structured_outputs": {"json": {"type": "strange"}}}, "structured_outputs", "strange"),
    ({"structured_outputs": {"json": {"type": "array", "uniqueItems": True}}}, "structured_outputs", "uniqueItems"),
    ({"structured_outputs": {"json": {"type": "number", "multipleOf": 0.5}}}, "structured_outputs", "multipleOf"),
    ({"structured_outputs": {"grammar": "root ::= nothing"}}, "structured_outputs", "nothing"),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs", "exactly one"),
    ({"structured_outputs": {"choice": []}}, "structured_outputs", "non-empty"),
    ({"structured_outputs": {"disable_any_whitespace": True}}, "structured_outputs", "no constraint"),
    ({"structured_outputs": {"json": {}, "whitespace_pattern": " "}}, "structured_outputs", "whitespace_pattern"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format", "schema"),
    ({"response_format": {"type": "yaml"}}, "response_format", "yaml"),
    ({"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"}}, "structured_outputs", "not both"),
    ({"guided_json": {"type": "object"}}, "guided_json", "structured_outputs"),
    # Hostile: a $ref cycle, 3,000 nested groups (bounded by the library's nesting limit).
    ({"structured_outputs": {"json": {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                                      "$ref": "#/$defs/a"}}}, "structured_outputs", "Circular"),
    ({"structured_outputs": {"regex": "(" * 3000 + "a" + ")" * 3000}}, "structured_outputs", "Nest"),
    ({"structured_outputs": {"structural_tag": '{"type": "structural_tag", "format": {"type": "nope"}}'}},
     "structured_outputs", "nope"),
])
def test_bad_constraints_are_400s_naming_the_field(server, body, param, words):
    r = raw_post(server, "/v1/completions", json.dumps({"model": MODEL, "prompt": "A", "max_tokens": 4, **body}))
    err = assert_error(r, 400, param)
    assert words in err["message"], err
    assert "/" not in err["message"].split(":")[0]  # no source paths of the library
    assert server.healthy()


# tool_choice "required" and named functions: calls in each --tool-call-parser's format, constrained to
# the tools' parameter schemas, parsed into tool_calls — whole and streamed.
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather forecast of a city",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "maxLength": 20},
                                          "days": {"type": "integer", "minimum": 1, "maximum": 14}},
                                          "required": ["city", "days"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 999}, "b": {"type": "integer", "minimum": 0, "maximum": 999}},
        "required": ["a", "b"]}}},
]
SCHEMA_OF = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def tool_calls(client, tool_choice, stream, **draw):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=TOOLS,
              tool_choice=tool_choice, parallel_tool_calls=False, max_tokens=200, **draw)
    if not stream:
        c = client.chat.completions.create(**kw).choices[0]
        return [(t.function.name, t.function.arguments) for t in c.message.tool_calls or []], c.finish_reason
    calls, finish = {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        for d in chunk.choices[0].delta.tool_calls or []:
            got = calls.setdefault(d.index, ["", ""])
            got[0] += d.function.name or ""
            got[1] += d.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return [tuple(calls[i]) for i in sorted(calls)], finish


@pytest.mark.parametrize("parser", ["hermes", "llama3_json", "qwen3"])
def test_required_and_named_tool_choice_always_give_parseable_calls(serve, parser):
    s = serve("--tool-call-parser", parser, "--kv-cache-tokens", "4096")
    client = s.client()
    for tool_choice in ["required", {"type": "function", "function": {"name": "get_weather"}}]:
        for stream in (False, True):
            for draw in DRAWS:
                calls, finish = tool_calls(client, tool_choice, stream, **draw)
                assert finish == "tool_calls" and len(calls) == 1, (tool_choice, stream, draw, calls, finish)
                name, arguments = calls[0]
                if isinstance(tool_choice, dict):
                    assert name == "get_weather"
                jsonschema.validate(json.loads(arguments), SCHEMA_OF[name])
    # Without a parser there is no format to constrain to; an unknown function is the client's error.
    assert_error(raw_post(s, "/v1/chat/completions", json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "tools": TOOLS,
         "tool_choice": {"type": "function", "function": {"name": "nope"}}})), 400, "tool_choice")
    assert s.stop() == 0, s.output()


def test_required_tool_choice_needs_a_parser(server):
    r = raw_post(server, "/v1/chat/completions", json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "tools": TOOLS, "tool_choice": "required"}))
    assert "--tool-call-parser" in assert_error(r, 400, "tool_choice")["message"]



def test_metrics_count_compilations_and_cache_hits(server):
    before = server.metrics()
    client = server.client()
    constraint = {"regex": "[0-9]{2}-metrics"}
    complete(client, constraint, max_tokens=20)
    complete(client, constraint, max_tokens=20)  # the same spec: a cache hit
    raw_post(server, "/v1/completions", json.dumps({"model": MODEL, "prompt": "A", "structured_outputs": {"regex": "("}}))
    after = server.metrics()
    name = "fp8lm:structured_output_"
    assert after[name + "compilations_total"] == before[name + "compilations_total"] + 1
    assert after[name + "cache_hits_total"] == before[name + "cache_hits_total"] + 1
    assert after[name + "compile_failures_total"] == before[name + "compile_failures_total"] + 1
    assert after[name + "compile_seconds_total"] > before[name + "compile_seconds_total"]
    assert after[name + "cache_bytes"] > 0


def test_reasoning_models_think_before_the_constraint(serve):
    """--reasoning-parser qwen3: the output may open with <think> … </think> (free text, to
    reasoning_content); the constraint holds for the content after it."""
    s = serve("--reasoning-parser", "qwen3", "--kv-cache-tokens", "4096")
    client = s.client()
    schema = SCHEMAS["review"]
    for draw in DRAWS:
        r = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Review the book."}], max_tokens=300,
            response_format={"type": "json_schema", "json_schema": {"name": "review", "schema": schema}},
            extra_body={"structured_outputs": {"disable_any_whitespace": True}}, **draw)
        c = r.choices[0]
        assert c.finish_reason == "stop", c
        jsonschema.validate(json.loads(c.message.content), schema)
    assert s.stop() == 0, s.output()


def worker_pids(s):
    """The server's grammar workers (fp8lm grammar-worker): its child processes, as /proc lists them."""
    pids = set()
    for children in Path(f"/proc/{s.proc.pid}/task").glob("*/children"):
        pids.update(int(p) for p in children.read_text().split())
    return pids


def process_state(pid):
    """The state letter /proc gives (R, S, Z, ...), or None for a process gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def wait_for(condition, seconds=10):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def post_constraint(s, constraint, max_tokens=4):
    return raw_post(s, "/v1/completions", json.dumps(
        {"model": MODEL, "prompt": "A", "max_tokens": max_tokens, "structured_outputs": constraint}))


def test_a_slow_compilation_fails_its_request_alone(serve):
    """--structured-outputs-timeout bounds how long a request waits for its constraint: past it the
    request gets a 400 naming the bound, and the compilation is ended with its worker process, which
    is replaced at once. With one compiling thread, the next constrained request — another slow one, or
    a quick one — does not wait behind the first: it has a new worker to itself. Unconstrained requests
    are never behind a compilation. (The memory bound is set high: this test is about time.)"""
    s = serve("--structured-outputs-timeout", "1", "--structured-outputs-threads", "1",
              "--structured-outputs-memory", "65536", "--kv-cache-tokens", "2048")
    slow = {"enum": [f"value number {i}" for i in range(60000)]}  # many seconds to compile on a 2-core CPU
    wait_for(lambda: len(worker_pids(s)) == 1)
    first = worker_pids(s)
    t0 = time.monotonic()
    err = assert_error(post_constraint(s, {"json": slow}), 400, "structured_outputs")
    assert "--structured-outputs-timeout" in err["message"] and "1 s" in err["message"], err
    assert time.monotonic() - t0 < 5
    # Its worker was killed, reaped (no zombie) and replaced.
    wait_for(lambda: len(worker_pids(s)) == 1 and worker_pids(s) != first)
    assert all(process_state(p) is None for p in first)
    client = s.client()
    assert client.completions.create(model=MODEL, prompt="A", max_tokens=4).choices[0].finish_reason == "length"
    # A quick constraint compiles at once: the one thread is not held by the slow compilation.
    text, finish = complete(client, {"regex": "[0-9]{2}-after"}, max_tokens=20)
    assert finish == "stop" and re.fullmatch("[0-9]{2}-after", text), text
    # Another slow one fails after its own second, not behind the first; neither was cached.
    slow2 = {"enum": [f"other value {i}" for i in range(60000)]}
    t0 = time.monotonic()
    err = assert_error(post_constraint(s, {"json": slow2}), 400, "structured_outputs")
    assert "--structured-outputs-timeout" in err["message"], err
    assert time.monotonic() - t0 < 5
    m = s.metrics()
    assert m["fp8lm:structured_output_compilations_total"] == 1  # the regex alone
    assert m["fp8lm:structured_output_compile_failures_total"] == 2
    assert m["fp8lm:structured_output_worker_starts_total"] == 3  # the first, and one after each timeout
    text, finish = complete(client, {"choice": ["yes", "no"]}, max_tokens=5)
    assert finish == "stop" and text in ("yes", "no"), text
    assert s.stop() == 0, s.output()
    assert all(process_state(p) is None for p in worker_pids(s) | first)


def test_stopping_ends_the_compilations_in_progress(serve):
    """SIGTERM while a constraint compiles: the request gets a 503 at once (it could not be queued
    during the drain anyway), not at its --structured-outputs-timeout, and no worker outlives the server."""
    s = serve("--structured-outputs-timeout", "60", "--structured-outputs-memory", "65536", "--kv-cache-tokens", "2048")
    slow = {"enum": [f"value number {i}" for i in range(60000)]}
    wait_for(lambda: len(worker_pids(s)) == 2)
    workers = worker_pids(s)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", post_constraint(s, {"json": slow})))
    t.start()
    time.sleep(1)  # compiling: it takes many seconds
    t0 = time.monotonic()
    s.stop_cleanly()
    assert time.monotonic() - t0 < 10
    t.join(10)
    assert_error(result["r"], 503)
    assert all(process_state(p) is None for p in workers)


# An alternation of 20,000 words: xgrammar's compilation of it needs more than 64 MiB beyond the
# vocabulary (between 64 and 96 MiB on the shipped tokenizer, measured with the bound at each), and
# the compiled grammar's JSON for the server another ~400 MiB; under the default 2048 MiB it compiles.
HUNGRY = "(" + "|".join(f"w{i:05d}" for i in range(20000)) + ")"


def test_a_compilation_past_the_memory_bound_fails_its_request_alone(serve, server):
    """--structured-outputs-memory bounds the memory one compilation may take (its worker process's
    RLIMIT_DATA): a spec past it fails its own request with a 400 naming the bound, while unconstrained
    and other constrained requests at the same time succeed, and the worker is replaced for the next."""
    # Without the bound (the module's server: the default 2048 MiB) the same spec compiles and holds.
    text, finish = complete(server.client(), {"regex": HUNGRY}, max_tokens=10)
    assert finish == "stop" and re.fullmatch(HUNGRY, text), text

    s = serve("--structured-outputs-memory", "64", "--structured-outputs-threads", "2", "--kv-cache-tokens", "4096")
    wait_for(lambda: len(worker_pids(s)) == 2)
    before = worker_pids(s)
    client = s.client()
    results = {}

    def hungry():
        results["hungry"] = post_constraint(s, {"regex": HUNGRY})

    def plain():
        results["plain"] = client.completions.create(model=MODEL, prompt="A", max_tokens=8).choices[0].finish_reason

    def constrained():
        results["constrained"] = complete(client, {"json": SCHEMAS["person"], "disable_any_whitespace": True})

    threads = [threading.Thread(target=f) for f in (hungry, plain, constrained)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    err = assert_error(results["hungry"], 400, "structured_outputs")
    assert "--structured-outputs-memory" in err["message"] and "64 MiB" in err["message"], err
    assert results["plain"] == "length"
    text, finish = results["constrained"]
    assert finish == "stop", text
    jsonschema.validate(json.loads(text), SCHEMAS["person"], format_checker=FORMATS)
    # One worker ended and was replaced; the server holds two again, none a zombie.
    wait_for(lambda: len(worker_pids(s)) == 2 and len(worker_pids(s) - before) == 1)
    assert all(process_state(p) in (None, "S", "R") for p in before)
    for pattern in REGEXES[:2]:  # the next constrained requests compile
        text, finish = complete(client, {"regex": pattern}, max_tokens=40)
        assert finish == "stop" and re.fullmatch(pattern, text), text
    assert s.healthy()
    assert s.metrics()["fp8lm:structured_output_worker_starts_total"] == 3  # two, and one after the hungry spec
    assert s.stop() == 0, s.output()


@pytest.mark.parametrize("flag, value", [("--structured-outputs-memory", "8"), ("--structured-outputs-memory", "0"),
                                         ("--structured-outputs-memory", "2000000"),
                                         ("--structured-outputs-threads", "0"), ("--structured-outputs-timeout", "-1")])
def test_structured_output_bounds_out_of_range_are_refused_by_name(run, flag, value):
    err = assert_clean_error(run("serve", str(REPO_MODEL), "--port", "0", flag, value))
    assert flag in err and value in err, err


def test_the_grammar_worker_is_not_for_people(run, fp8lm_bin):
    """The internal subcommand the server re-executes itself with: not in --help, and refused on a
    terminal or with missing arguments."""
    assert "grammar-worker" not in run("--help").stdout
    assert "grammar-worker" not in run("nope").stderr
    r = run("grammar-worker")
    assert r.returncode != 0 and "--tokenizer-json" in r.stderr
    main, terminal = pty.openpty()
    try:
        r = subprocess.run([fp8lm_bin, "grammar-worker", "--tokenizer-json", str(REPO_MODEL / "tokenizer.json"),
                            "--vocab-size", "16384", "--memory-mib", "64"], stdin=terminal, capture_output=True,
                           text=True, timeout=30)
    finally:
        os.close(main)
        os.close(terminal)
    assert r.returncode != 0 and "not by hand" in r.stderr, r.stderr


def test_bench_structured_times_the_servers_worker_round_trip(run, tmp_path):
    """`bench structured --worker`: every schema of the benchmark's corpus also compiled the server's
    way (a worker process, its JSON rebuilt), with the round trip, the rebuild and the JSON's size."""
    schemas = REPO / "bench" / "structured_schemas.json"
    out = tmp_path / "structured.json"
    r = run("bench", "structured", str(REPO_MODEL), "--schemas", str(schemas), "--steps", "4", "--worker",
            "--worker-memory", "512", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "worker (the server's way)" in r.stdout
    res = json.loads(out.read_text())["results"]
    names = list(json.loads(schemas.read_text()))
    assert [s["name"] for s in res["schemas"]] == names
    assert res["cache_hits"] == len(names)
    for s in res["schemas"]:
        assert s["worker_ms"] > 0 and s["rebuild_ms"] > 0 and s["json_bytes"] > 0, s
    w = res["worker"]
    assert w["memory_mib"] == 512 and w["json_bytes"] == sum(s["json_bytes"] for s in res["schemas"])
    assert 0 < w["peak_rss_mib"]


@pytest.mark.parametrize("value", ["8", "2000000"])
def test_bench_structured_worker_memory_out_of_range_is_refused(run, value):
    err = assert_clean_error(run("bench", "structured", str(REPO_MODEL), "--schemas",
                                 str(REPO / "bench" / "structured_schemas.json"), "--worker", "--worker-memory", value))
    assert "--worker-memory" in err and value in err, err
