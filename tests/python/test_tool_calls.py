"""Tool calls in the chat API (issue 21), through the official `openai` client: `tools` rendered
by the chat template, the calls in the model's output parsed by --tool-call-parser (hermes,
llama3_json, qwen3 — the formats vLLM's parsers of those names read) into `tool_calls` with
JSON arguments and finish_reason "tool_calls", streamed as deltas too; malformed calls come
back as content, never a 500. The model is tools/make_tool_call_model.py's: a prompt ending in
a trigger word makes it write a fixed output, which transformers generated for the fixture
(expected.json) — so each test also checks that fp8lm's output is that text."""
import json
import subprocess
from pathlib import Path

import openai
import pytest

from test_serve import assert_error, raw_post

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "tests" / "fixtures" / "models" / "tool_calls"
EXPECTED = json.loads((MODEL / "expected.json").read_text())
TOOLS = EXPECTED["tools"]
ARGS = {"city": "Paris", "days": 3}


@pytest.fixture(scope="module", params=["hermes", "llama3_json", "qwen3"])
def parser_server(request, serve):
    s = serve("--tool-call-parser", request.param, "--kv-cache-tokens", "2048", model=MODEL)
    yield request.param, s
    assert s.stop() == 0, s.output()


def ask(client, trigger, stream, **kw):
    messages = EXPECTED["outputs"][trigger]["messages"]
    args = dict(model=MODEL.name, messages=messages, tools=TOOLS, temperature=0, max_tokens=16, **kw)
    if not stream:
        r = client.chat.completions.create(**args)
        return r.choices[0].message.content, r.choices[0].message.tool_calls, r.choices[0].finish_reason
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(stream=True, **args):
        c = chunk.choices[0]
        content += c.delta.content or ""
        for d in c.delta.tool_calls or []:
            got = calls.setdefault(d.index, {"id": d.id, "name": "", "arguments": ""})
            got["name"] += d.function.name or ""
            got["arguments"] += d.function.arguments or ""
        finish = c.finish_reason or finish
    return content or None, [calls[i] for i in sorted(calls)] or None, finish


def call_of(call):
    return (call["name"], call["arguments"]) if isinstance(call, dict) else (call.function.name, call.function.arguments)


CALLS = {"hermes": ["HERMES_CALL", "HERMES_TEXT"], "llama3_json": ["LLAMA_CALL"], "qwen3": ["QWEN_CALL"]}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_calls_are_parsed(parser_server, stream):
    parser, server = parser_server
    client = server.client()
    for trigger in CALLS[parser]:
        content, calls, finish = ask(client, trigger, stream)
        assert finish == "tool_calls", trigger
        assert len(calls) == 1
        name, arguments = call_of(calls[0])
        assert name == "get_weather" and json.loads(arguments) == ARGS
        call_id = calls[0]["id"] if isinstance(calls[0], dict) else calls[0].id
        assert call_id.startswith("chatcmpl-tool-")
        text = EXPECTED["outputs"][trigger]["text"]
        assert content == (text[: text.index("<tool_call>")] or None if "<tool_call>" in text else None)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_other_outputs_are_content(parser_server, stream):
    parser, server = parser_server
    client = server.client()
    others = ["PLAIN", "BROKEN_CALL"] + [t for p, ts in CALLS.items() if p != parser for t in ts]
    for trigger in others:
        content, calls, finish = ask(client, trigger, stream)
        text = EXPECTED["outputs"][trigger]["text"]
        # (Qwen3-Coder's XML inside <tool_call> is not Hermes' JSON, nor Hermes' JSON XML: content.)
        assert calls is None and finish == "stop", (trigger, calls)
        assert content == text, trigger
    # tool_choice "none": the calls stay text.
    content, calls, finish = ask(client, CALLS[parser][0], stream, tool_choice="none")
    assert calls is None and content == EXPECTED["outputs"][CALLS[parser][0]]["text"] and finish == "stop"


def test_bad_tool_requests_are_400(parser_server, fp8lm_bin):
    _, server = parser_server
    chat = '{"messages": [{"role": "user", "content": "hi"}], %s}'
    for fields, param in [('"tools": {}', "tools"), ('"tools": [{"type": "code"}]', "tools"),
                          ('"tools": [{"type": "function", "function": {"name": ""}}]', "tools"),
                          ('"tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]', "tools"),
                          ('"tool_choice": "auto"', "tool_choice"),
                          ('"tool_choice": "required"', "tool_choice"),
                          ('"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": 7', "tool_choice"),
                          ('"tools": [{"type": "function", "function": {"name": "f"}}], '
                           '"tool_choice": {"type": "function", "function": {"name": "g"}}', "tool_choice"),
                          ('"tools": [{"type": "function", "function": {"name": "f"}}], '
                           '"tool_choice": {"type": "function"}', "tool_choice"),
                          ('"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required", '
                           '"response_format": {"type": "json_object"}', "tool_choice")]:
        assert_error(raw_post(server, "/v1/chat/completions", chat % fields), 400, param)
    bad_history = ('{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"type": "function", '
                   '"function": {"name": "f", "arguments": "not json"}}]}, {"role": "user", "content": "x"}]}')
    assert_error(raw_post(server, "/v1/chat/completions", bad_history), 400, "messages")


def test_a_conversation_with_earlier_calls(parser_server):
    # The assistant's call and the tool's answer go back through the template (arguments as text,
    # as OpenAI clients send them); the model answers from its last trigger again.
    _, server = parser_server
    history = [{"role": "user", "content": "Weather?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "chatcmpl-tool-1", "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps(ARGS)}}]},
               {"role": "tool", "tool_call_id": "chatcmpl-tool-1", "content": "sunny"},
               {"role": "user", "content": "Thanks. PLAIN"}]
    r = server.client().chat.completions.create(model=MODEL.name, messages=history, tools=TOOLS, temperature=0,
                                               max_tokens=16)
    assert r.choices[0].message.content == EXPECTED["outputs"]["PLAIN"]["text"]


def test_auto_needs_a_parser(fp8lm_bin, serve):
    s = serve("--kv-cache-tokens", "2048", model=MODEL)
    try:
        with pytest.raises(openai.BadRequestError) as e:
            ask(s.client(), "HERMES_CALL", False)
        assert e.value.body["param"] == "tool_choice" and "--tool-call-parser" in e.value.body["message"]
        # Tools with tool_choice "none" need no parser: rendered, not parsed.
        content, calls, _ = ask(s.client(), "HERMES_CALL", False, tool_choice="none")
        assert calls is None and content == EXPECTED["outputs"]["HERMES_CALL"]["text"]
    finally:
        assert s.stop() == 0, s.output()
    r = subprocess.run([fp8lm_bin, "serve", str(MODEL), "--tool-call-parser", "mistral"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "--tool-call-parser: 'mistral'" in r.stderr
