#!/usr/bin/env python3
"""Expected chat-template renderings for tests/cpp/test_chat_*.cpp, made by
Hugging Face transformers itself (render_jinja_template, i.e. what
apply_chat_template(..., tokenize=False) calls, with its jinja2 environment:
trim_blocks, lstrip_blocks, loopcontrols, its tojson, raise_exception,
strftime_now). Run with a Python that has transformers and jinja2:

    python tools/make_chat_fixtures.py    # writes tests/fixtures/chat/*.json

The real templates are read from ../shared/data/hf (not copied into the repo).
strftime_now is pinned to FIXED_NOW so that the Llama templates' dates are stable.
"""
import datetime as _dt
import json
import pathlib

import transformers.utils.chat_template_utils as ctu

REPO = pathlib.Path(__file__).resolve().parent.parent
HF = REPO.parent / "shared" / "data" / "hf"
OUT = REPO / "tests" / "fixtures" / "chat"
FIXED_NOW = _dt.datetime(2025, 7, 26, 12, 34, 56)  # the C++ tests pin the same clock


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


ctu.datetime = _FixedDatetime  # strftime_now reads the module's `datetime`

# (id, root, path, bos, eos): root "hf" is ../shared/data/hf, "repo" this repository.
TEMPLATES = [
    ("qwen3-0.6b", "hf", "Qwen__Qwen3-0.6B/tokenizer_config.json", None, None),
    ("qwen3-0.6b-jinja", "hf", "Qwen__Qwen3-0.6B/Qwen-Qwen3-0.6B.jinja", None, "<|im_end|>"),
    ("qwen3-4b", "hf", "Qwen__Qwen3-4B/tokenizer_config.json", None, None),
    ("qwen2.5-1.5b-instruct", "hf", "Qwen__Qwen2.5-1.5B-Instruct/tokenizer_config.json", None, None),
    ("deepseek-v3", "hf", "deepseek-ai__DeepSeek-V3/tokenizer_config.json", None, None),
    ("phi-3-mini", "hf", "microsoft__Phi-3-mini-4k-instruct/tokenizer_config.json", None, None),
    ("llama-3.2-3b-instruct", "hf", "meta-llama__Llama-3.2-3B-Instruct/meta-llama-Llama-3.2-3B-Instruct.jinja",
     "<|begin_of_text|>", "<|eot_id|>"),
    ("llama-3.3-70b-instruct", "hf", "meta-llama__Llama-3.3-70B-Instruct/meta-llama-Llama-3.3-70B-Instruct.jinja",
     "<|begin_of_text|>", "<|eot_id|>"),
    ("gemma-2-2b-it", "hf", "google__gemma-2-2b-it/google-gemma-2-2b-it.jinja", "<bos>", "<eos>"),
    ("gemma-3-4b-it", "hf", "google__gemma-3-4b-it/chat_template.json", None, None),
    ("gutenberg-22m", "repo", "models/fp8lm-gutenberg-22m/tokenizer_config.json", None, None),
]

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Zürich"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "Current time in a timezone.",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}

CONVERSATIONS = {
    "single_user": {"messages": [{"role": "user", "content": "Hello! Who are you?"}]},
    "system_user": {"messages": [
        {"role": "system", "content": "You are a terse assistant.\n"},
        {"role": "user", "content": "  What is 2+2?  "}]},
    "multi_turn": {"messages": [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Another one?"},
        {"role": "assistant", "content": "11"},
        {"role": "user", "content": "And a third?"}]},
    "assistant_last": {"messages": [
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "Hi!"}]},
    "unicode": {"messages": [
        {"role": "user", "content": "Traduis « bonjour » en 日本語 et 한국어 🙂 — \"quotes\" & 'apostrophes' \\ back\tslash"},
        {"role": "assistant", "content": "こんにちは / 안녕하세요 🎉"},
        {"role": "user", "content": "Merci ! Ça marche.\u00a0"}]},
    "content_parts": {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Describe the sky."}]}]},
    "reasoning": {"messages": [
        {"role": "user", "content": "What is 3*4?"},
        {"role": "assistant", "content": "12", "reasoning_content": "3 times 4 is 12."},
        {"role": "user", "content": "And 5*6?"}]},
    "think_in_content": {"messages": [
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "<think>\nEasy: Paris.\n</think>\n\nParis."},
        {"role": "user", "content": "Of Italy?"}]},
    "tools": {"tools": [WEATHER_TOOL, TIME_TOOL], "messages": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 21.5 °C and clear."},
        {"role": "user", "content": "Thanks"}]},
    "tools_string_args": {"tools": [WEATHER_TOOL], "messages": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "b", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "18C"},
        {"role": "tool", "tool_call_id": "b", "content": "25C"}]},
    "tools_no_calls": {"tools": [TIME_TOOL], "messages": [{"role": "user", "content": "What time is it in Tokyo?"}]},
    "two_users": {"messages": [
        {"role": "user", "content": "First."},
        {"role": "user", "content": "Second."}]},
}

VARIANTS = [(False, {}), (True, {}), (True, {"enable_thinking": False}), (True, {"enable_thinking": True})]


def template_source(root, path):
    p = (HF if root == "hf" else REPO) / path
    if p.suffix == ".jinja":
        return p.read_text(encoding="utf-8"), None
    cfg = json.loads(p.read_text(encoding="utf-8"))
    return cfg["chat_template"], cfg


def token(cfg, key):
    v = cfg.get(key) if cfg else None
    return v.get("content") if isinstance(v, dict) else v


def render(template, messages, tools, agp, kwargs, bos, eos):
    extra = dict(kwargs)
    if bos:
        extra["bos_token"] = bos
    if eos:
        extra["eos_token"] = eos
    chat = ctu._normalize_chat_messages(messages)
    try:
        out, _ = ctu.render_jinja_template(conversations=[chat], tools=tools, chat_template=template,
                                           add_generation_prompt=agp, **extra)
        return {"expected": out[0]}
    except Exception as e:  # noqa: BLE001 - the error is the expectation
        import jinja2
        raised = type(e) is jinja2.exceptions.TemplateError
        return {"error": str(e), "raised": raised}


def make_template_cases():
    templates, cases = {}, []
    for tid, root, path, bos, eos in TEMPLATES:
        src, cfg = template_source(root, path)
        if cfg is not None and path.endswith("tokenizer_config.json"):
            bos, eos = token(cfg, "bos_token"), token(cfg, "eos_token")
        templates[tid] = {"root": root, "path": path, "bos_token": bos or "", "eos_token": eos or ""}
        uses_thinking = "enable_thinking" in src
        seen = set()
        for cname, conv in CONVERSATIONS.items():
            for agp, kw in VARIANTS:
                if kw and not uses_thinking:
                    continue
                r = render(src, conv["messages"], conv.get("tools"), agp, kw, bos, eos)
                key = json.dumps(r, sort_keys=True) + cname
                if key in seen:  # a variant the template ignores adds nothing
                    continue
                seen.add(key)
                cases.append({"template": tid, "conversation": cname, "add_generation_prompt": agp, "kwargs": kw, **r})
    return {"templates": templates, "conversations": CONVERSATIONS, "cases": cases}


# Interpreter units: (name, template, variables). jinja2 (via transformers'
# environment) decides the expected output or error.
UNITS = [
    ("text", "hello", {}),
    ("trailing_newline", "a\n", {}),
    ("crlf", "a\r\nb{% if true %}\r\nc{% endif %}\r\n", {}),
    ("comment", "a{# note #}b\n{# line #}\nc", {}),
    ("var_ws", "a  {{- x -}}  b", {"x": 1}),
    ("block_ws", "a\n  {%- if true -%}\n  x\n  {%- endif -%}\n  b", {}),
    ("trim_lstrip", "<\n    {% if true %}\n    yes\n    {% endif %}\n>", {}),
    ("lstrip_plus", "<\n    {%+ if true %}x{% endif %}>", {}),
    ("lstrip_after_text", "a {% if true %}b{% endif %}", {}),
    ("raw", "{% raw %}{{ not evaluated }}{% endraw %}", {}),
    ("literals", "{{ 'a\\tb\\n' }}|{{ \"q'\" }}|{{ 1 }}|{{ 1.5 }}|{{ 1e3 }}|{{ true }}|{{ True }}|{{ none }}|{{ None }}", {}),
    ("list_repr", "{{ [1, 'a', none, true, 1.0, [2], {'k': 'v'}] }}", {}),
    ("tuple_repr", "{{ (1,) }}{{ (1, 'b') }}", {}),
    ("str_repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"'] }}", {}),
    ("floats", "{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e-5 }} {{ 3.0 }} {{ 10 / 4 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}", {}),
    ("arith", "{{ 1 + 2 * 3 - 4 }} {{ 'ab' + 'cd' }} {{ 'ab' ~ 3 ~ none }} {{ 'x' * 3 }} {{ [1] + [2] }} {{ -(3) }}", {}),
    ("compare", "{{ 1 < 2 }} {{ 'a' >= 'b' }} {{ 1 == 1.0 }} {{ [1,2] == [1,2] }} {{ 'a' != 'a' }}", {}),
    ("in", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}", {}),
    ("logic", "{{ true and 'x' }} {{ false or 0 }} {{ not none }} {{ 0 or '' or 'last' }}", {}),
    ("cond_expr", "{{ 'y' if x else 'n' }}{{ 'y' if not x }}", {"x": 1}),
    ("attr_item", "{{ d.a }} {{ d['b'] }} {{ d.c is defined }} {{ l[0] }} {{ l[-1] }} {{ l.1 }}", {"d": {"a": 1, "b": 2}, "l": [3, 4]}),
    ("undefined", "[{{ missing }}]{{ missing is defined }}{{ missing is undefined }}{{ missing | length }}{% for x in missing %}x{% endfor %}", {}),
    ("undefined_attr_error", "{{ missing.attr }}", {}),
    ("undefined_add_error", "{{ missing + 'x' }}", {}),
    ("slices", "{{ s[1:3] }} {{ s[::-1] }} {{ s[-2:] }} {{ l[::2] }} {{ l[1:] }} {{ l[:-1] }} {{ s[5:1:-2] }}", {"s": "héllo wörld", "l": [1, 2, 3, 4, 5]}),
    ("if_elif", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% endfor %}", {}),
    ("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", {}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("for_filter", "{% for x in range(10) if x % 3 == 0 %}{{ x }}/{{ loop.index }}/{{ loop.length }} {% endfor %}", {}),
    ("for_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}", {"d": {"z": 1, "a": 2}}),
    ("for_scope", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", {}),
    ("for_prev_next", "{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }} {{ loop.cycle('a', 'b') }};{% endfor %}", {}),
    ("break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("namespace", "{% set ns = namespace(n=0, s='') %}{% for x in [1, 2, 3] %}{% set ns.n = ns.n + x %}{% set ns.s = ns.s ~ x %}{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
    ("set_block", "{% set b %}inner {{ 1 + 1 }}{% endset %}[{{ b }}]", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C') }}", {}),
    ("macro_recursive", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}", {}),
    ("call_block", "{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}body{% endcall %}", {}),
    ("filter_block", "{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}),
    ("filters_str", "{{ '  pad  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'MiXed' | lower }}|{{ 'MiXed' | upper }}|{{ 'hello world' | title }}|{{ 'hELLO' | capitalize }}|{{ 'aXbX' | replace('X', '-') }}|{{ 42 | string }}", {}),
    ("filters_seq", "{{ l | length }} {{ l | count }} {{ l | first }} {{ l | last }} {{ l | join(',') }} {{ l | reverse | list }} {{ l | sort }} {{ l | unique | list }} {{ l | sum }} {{ l | min }} {{ l | max }}", {"l": [3, 1, 2, 3]}),
    ("filters_dict", "{{ d | items | list }} {{ d | length }} {{ d | list }}", {"d": {"b": 1, "a": [1, 2]}}),
    ("filter_default", "{{ missing | default('dflt') }} {{ '' | default('e', true) }} {{ '' | d('e') }} {{ none | default('n') }}", {}),
    ("selectattr", "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('+') }} {{ msgs | rejectattr('role', 'eq', 'user') | list | length }} {{ msgs | selectattr('x') | list }}", {"msgs": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "x": 1}, {"role": "user", "content": "c"}]}),
    ("map_filter", "{{ ['a', 'B'] | map('upper') | join }} {{ [1.6, 2.4] | map('int') | list }}", {}),
    ("numbers", "{{ '42' | int }} {{ '3.9' | int }} {{ 'x' | int(7) }} {{ '2.5' | float }} {{ -3 | abs }} {{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 7 | round }}", {}),
    ("indent", "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(4, true) }}|{{ 'x\\n\\ny' | indent(2, blank=true) }}", {}),
    ("tojson", "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ d | tojson(sort_keys=true) }}|{{ 'é\"\\n' | tojson }}|{{ [1.0, 2.5e-7, none, true] | tojson }}|{{ {} | tojson(indent=4) }}", {"d": {"z": [1, {"y": "ü"}], "a": None, "m": {}, "n": []}}),
    ("tojson_separators", "{{ d | tojson(separators=(',', ':')) }}", {"d": {"a": [1, 2]}}),
    ("tests", "{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is integer }}{{ true is boolean }}{{ 's' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 's' is sequence }}{{ none is none }}{{ 1 is odd }}{{ 2 is even }}{{ 2 is in [1, 2] }}{{ 3 is eq 3 }}{{ 3 is equalto(4) }}{{ true is true }}{{ 0 is false }}{{ 1 is not string }}", {}),
    ("string_methods", "{{ s.startswith('he') }} {{ s.endswith(('x', 'ld')) }} {{ s.split(' ') }} {{ s.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '\\n x \\n'.strip() }}|{{ 'xxax'.lstrip('x') }}|{{ 'axx'.rstrip('x') }} {{ s.upper() }} {{ s.replace('l', 'L') }} {{ s.find('o') }} {{ s.title() }}", {"s": "hello world"}),
    ("dict_methods", "{{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('z', 'dz') }} {{ d.get('z') }}", {"d": {"a": 1, "b": 2}}),
    ("split_think", "{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}", {"c": "<think>\nreason\n</think>\n\nanswer"}),
    ("range", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }}", {}),
    ("raise", "{{ raise_exception('Bad role: ' ~ r) }}", {"r": "x"}),
    ("strftime", "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M:%S') }}", {}),
    ("dict_global", "{{ dict(a=1, b='x') | tojson }}", {}),
    ("bool_print", "{{ true }}{{ x }}{{ [true, none] }}", {"x": False}),
    ("unicode_len", "{{ s | length }} {{ s[1] }} {{ s | reverse }}", {"s": "añ日🙂"}),
    ("nested_loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }};{% endfor %}", {}),
    ("generation", "{% generation %}gen{% endgeneration %}", {}),
    ("none_attr", "{{ n.attr is defined }}", {"n": None}),
    ("type_error", "{{ 'a' + 1 }}", {}),
]


def make_units():
    units = []
    for name, src, variables in UNITS:
        try:
            out = ctu._compile_jinja_template(src).render(**variables)
            units.append({"name": name, "template": src, "vars": variables, "expected": out})
        except Exception as e:  # noqa: BLE001
            import jinja2
            units.append({"name": name, "template": src, "vars": variables, "error": str(e),
                          "raised": type(e) is jinja2.exceptions.TemplateError})
    return units


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "templates.json").write_text(json.dumps(make_template_cases(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    (OUT / "interpreter.json").write_text(json.dumps(make_units(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
