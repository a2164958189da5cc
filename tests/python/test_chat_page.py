"""The chat page `fp8lm serve` answers GET / with (src/server/chat_page.html, compiled in), driven in a
real browser: headless Chromium (Debian's chromium + chromium-driver, through Selenium) with every
host name but the server's made unresolvable. It loads the page, types into its fields and clicks
its buttons, and compares what the page shows with what the same requests through the OpenAI API
give: the streamed reply (greedy, and sampled with a seed), multi-turn history, the system prompt
(seen by the server: its prompt-token counter), stop strings, TTFT and tok/s under each reply, the
reasoning shown apart (--reasoning-parser), the stop button (the server cancels the request), API
errors shown, the API key asked for (--api-key) and kept, the model's FP8 configuration
(GET /v1/fp8lm/model, checked against `fp8lm inspect`), and that the page loads nothing but itself
and the API. Also the page as HTTP: its bytes are the file's, any query string, HEAD."""
import json
import re
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

import browser
from test_serve import FP8, MODEL, NAME, assert_error, raw_post, wait_idle

REPO = Path(__file__).resolve().parents[2]
PAGE = (REPO / "src" / "server" / "chat_page.html").read_bytes()
SYSTEM = "You write prose."
ABORTED = 'fp8lm:request_success_total{model_name="%s",finished_reason="abort"}' % NAME


@pytest.fixture(scope="module")
def server(serve):
    s = serve(*FP8, "--kv-cache-tokens", "4096", "--max-num-seqs", "8")
    yield s
    s.stop_cleanly()


@pytest.fixture(scope="module")
def driver():
    why = browser.missing()
    if why:
        pytest.fail(why)  # not a skip: CI installs them (scripts/test.sh), so a missing browser is a failure
    d = browser.chromium()
    yield d
    d.quit()


# ---- driving the page ---------------------------------------------------------------------------


def open_page(driver, server, clear_storage=True, wait_model=True):
    driver.get(server.url + "/")
    if clear_storage:
        driver.execute_script("localStorage.clear()")
        driver.get(server.url + "/")
    driver.get_log("browser")  # earlier pages' messages
    if wait_model:
        browser.wait(driver, lambda d: d.find_element(By.ID, "model-name").text == NAME, 30, "the model's name")


def fill(driver, field_id, value):
    """Types into a field as a user would (select all, then the new text)."""
    el = driver.find_element(By.ID, field_id)
    el.send_keys(Keys.CONTROL, "a")
    el.send_keys(Keys.DELETE)
    if value != "":
        el.send_keys(str(value))
    assert el.get_property("value") == str(value)


def replies(driver):
    return driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")


def send(driver, text, timeout=120):
    """Types a message, sends it with Enter, and waits for its reply to end; returns the reply."""
    before = len(replies(driver))
    box = driver.find_element(By.ID, "prompt")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)
    browser.wait(driver, lambda d: len(replies(d)) == before + 1, 10, "a reply appears")
    return wait_reply(driver, timeout)


def wait_reply(driver, timeout=120):
    browser.wait(driver, lambda d: replies(d)[-1].get_attribute("data-done") == "true", timeout, "the reply ends")
    return reply(driver)


def reply(driver, index=-1):
    msg = replies(driver)[index]
    reasoning = msg.find_element(By.CSS_SELECTOR, ".reasoning")
    errors = msg.find_elements(By.CSS_SELECTOR, ".error")
    stats = msg.find_element(By.CSS_SELECTOR, ".stats")
    return {
        "state": msg.get_attribute("data-state"),
        "content": msg.find_element(By.CSS_SELECTOR, ".content").get_property("textContent"),
        "reasoning": msg.find_element(By.CSS_SELECTOR, ".reasoning-text").get_property("textContent"),
        "reasoning_shown": reasoning.is_displayed(),
        "stats": stats.text if stats.is_displayed() else None,
        "error": errors[0].text if errors else None,
    }


def js_errors(driver):
    """The console's errors, less the network lines Chromium logs for an API's 4xx answers."""
    return [e for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and "Failed to load resource" not in e["message"]]


STATS = re.compile(r"^TTFT (\d+ ms|\d+\.\d\d s) · (\d+\.\d) tok/s · (\d+) tokens · prompt (\d+) · "
                   r"(\d+ ms|\d+\.\d\d s) total( · .*)?$")


def stats_of(r):
    m = STATS.match(r["stats"] or "")
    assert m, r["stats"]
    return {"tok_s": float(m.group(2)), "tokens": int(m.group(3)), "prompt": int(m.group(4)), "tail": m.group(6) or ""}


def api_chat(server, messages, api_key="none", **kw):
    r = server.client(api_key=api_key).chat.completions.create(model=NAME, messages=messages, **kw)
    return r.choices[0].message, r.usage


def prompt_tokens(server, messages):
    r = httpx.post(server.url + "/tokenize", json={"model": NAME, "messages": messages, "add_generation_prompt": True})
    assert r.status_code == 200, r.text
    return r.json()["count"]


# ---- the page as HTTP ---------------------------------------------------------------------------


def test_page_is_the_file_and_needs_nothing_else(server):
    r = httpx.get(server.url + "/")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert r.content == PAGE  # compiled in byte for byte
    # Offline: no URL to anywhere else, and the browser is told to load nothing from elsewhere.
    assert b"http://" not in r.content and b"https://" not in r.content and b"//cdn" not in r.content
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    # Any query string, HEAD, other paths and methods: answered, never a crash.
    for path in ("/?", "/?a=1&b=%zz", "/?" + "x" * 4000, "/#frag"):
        assert httpx.get(server.url + path).content == PAGE, path
    head = httpx.head(server.url + "/")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-type"] == "text/html; charset=utf-8"
    assert_error(httpx.get(server.url + "/index.html"), 404)
    assert_error(httpx.get(server.url + "//"), 404)
    assert_error(httpx.post(server.url + "/", content=b"x"), 404)
    assert_error(httpx.request("DELETE", server.url + "/"), 404)
    assert httpx.get(server.url + "/health").status_code == 200


def test_model_info_is_what_inspect_says(server, run):
    info = httpx.get(server.url + "/v1/fp8lm/model").json()
    r = run("inspect", str(MODEL), *FP8, "--json")
    assert r.returncode == 0, r.stderr
    want = json.loads(r.stdout)
    assert info["object"] == "fp8lm.model" and info["id"] == NAME
    for key in ("architecture", "model_type", "dtype", "parameters"):
        assert info[key] == want[key], key
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "vocab_size",
                "max_position_embeddings", "tie_word_embeddings"):
        assert info[key] == want["config"][key], key
    for key in ("format", "variant", "online", "description"):
        assert info["quantization"][key] == want["quantization"][key], key
    assert info["quantization"]["online"] is True and info["quantization"]["variant"] == "online fp8:channel"
    # inspect's groups are (pattern, scheme); the server's are per scheme, with their patterns.
    by_scheme = {}
    for g in want["linear_groups"]:
        s = by_scheme.setdefault(g["scheme"], {"count": 0, "modules": []})
        s["count"] += g["count"]
        s["modules"].append(g["pattern"])
    assert {g["scheme"]: {"count": g["count"], "modules": g["modules"]} for g in info["linear_groups"]} == by_scheme
    assert all(g["scheme"].startswith("fp8-e4m3") for g in info["linear_groups"])
    layers = want["config"]["num_hidden_layers"]
    kv = info["kv_cache"]
    assert kv["dtype"] == want["kv_cache"]["dtype"] == "fp8_e4m3"
    assert kv["layers"] == {"e4m3": layers}
    # No scales in the checkpoint: calibrated at load, and the runtime's note says so.
    assert kv["scales_from_checkpoint"] is False and 0 < kv["k_scale"][0] <= kv["k_scale"][1]
    assert any("calibrated at load" in n for n in info["notes"])
    assert kv["tokens"] == 4096 and kv["bytes"] > 0
    assert info["memory"]["weights_bf16_bytes"] == want["memory"]["weights_bf16_bytes"]
    assert 0 < info["memory"]["weights_bytes"] < info["memory"]["weights_bf16_bytes"]
    assert info["max_model_len"] == want["config"]["max_position_embeddings"]
    assert info["reasoning_parser"] == "none" and info["tool_call_parser"] == "none"
    d = info["sampling_defaults"]
    assert d["source"].endswith("generation_config.json")
    assert (round(d["temperature"], 3), round(d["top_p"], 3), d["top_k"]) == (0.8, 0.95, 50)


# ---- in the browser -----------------------------------------------------------------------------


def test_chat_streams_what_the_api_answers(server, driver):
    open_page(driver, server)
    # The FP8 configuration is on view, and the server's defaults are the fields' placeholders.
    facts = driver.find_element(By.ID, "model-facts").text
    assert "fp8-e4m3" in facts and "calibrated at load" in facts and "e4m3 × 10 layers" in facts
    assert driver.find_element(By.ID, "kv-badge").text == "kv e4m3"
    assert driver.find_element(By.ID, "temperature").get_attribute("placeholder") == "0.8"
    fill(driver, "system", SYSTEM)
    fill(driver, "temperature", 0)
    fill(driver, "max_tokens", 24)
    before = server.metrics()["fp8lm:prompt_tokens_total"]
    first = send(driver, "Tell me about the sea.")
    after = server.metrics()["fp8lm:prompt_tokens_total"]
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Tell me about the sea."}]
    want, usage = api_chat(server, messages, temperature=0, max_tokens=24)
    assert first["state"] == "done" and first["error"] is None
    assert first["content"] == want.content and want.content
    assert not first["reasoning_shown"]  # no reasoning parser: no reasoning block
    s = stats_of(first)
    assert s["tokens"] == usage.completion_tokens and s["tok_s"] > 0
    # The system prompt reached the server: the prompt it counted is the conversation with it.
    with_system = prompt_tokens(server, messages)
    assert after - before == with_system == usage.prompt_tokens == s["prompt"]
    assert with_system > prompt_tokens(server, messages[1:])
    # A second turn carries the history.
    second = send(driver, "And what of the land?")
    messages += [{"role": "assistant", "content": want.content}, {"role": "user", "content": "And what of the land?"}]
    want2, usage2 = api_chat(server, messages, temperature=0, max_tokens=24)
    assert second["content"] == want2.content and stats_of(second)["prompt"] == usage2.prompt_tokens
    assert not js_errors(driver)


def test_sampling_controls_and_stop_strings_are_sent(server, driver):
    open_page(driver, server)
    messages = [{"role": "user", "content": "Once upon a time"}]
    # Sampled with a seed: the same tokens as the API with the same fields, so every field was sent.
    for field, value in (("temperature", 0.9), ("top_p", 0.9), ("top_k", 20), ("max_tokens", 20), ("seed", 1234)):
        fill(driver, field, value)
    got = send(driver, "Once upon a time")
    want, usage = api_chat(server, messages, temperature=0.9, top_p=0.9, max_tokens=20, seed=1234,
                           extra_body={"top_k": 20})
    assert got["content"] == want.content and stats_of(got)["tokens"] == usage.completion_tokens
    other, _ = api_chat(server, messages, temperature=0.9, top_p=0.9, max_tokens=20, seed=1234, extra_body={"top_k": 2})
    assert other.content != want.content  # top_k mattered, so it was the page's 20
    # A stop string cuts the reply where the API's does.
    driver.find_element(By.ID, "new-chat").click()
    fill(driver, "seed", "")
    fill(driver, "top_p", "")
    fill(driver, "top_k", "")
    fill(driver, "temperature", 0)
    fill(driver, "max_tokens", 40)
    full, _ = api_chat(server, messages, temperature=0, max_tokens=40)
    # Three characters from the middle on, on one line and not blank (a field line holds no newline).
    text = full.content
    stop = next(text[i:i + 3] for i in range(len(text) // 2, len(text) - 3)
                if "\n" not in text[i:i + 3] and text[i:i + 3].strip())
    fill(driver, "stop-strings", stop)
    got = send(driver, "Once upon a time")
    want, _ = api_chat(server, messages, temperature=0, max_tokens=40, stop=[stop])
    assert got["content"] == want.content == full.content[:full.content.index(stop)]
    assert stats_of(got)["tail"] == " · finish: stop"
    assert not js_errors(driver)


def test_stop_button_cancels_the_request(server, driver):
    open_page(driver, server)
    messages = [{"role": "user", "content": "It was a dark and stormy night"}]
    full, _ = api_chat(server, messages, temperature=0, max_tokens=600)
    aborted = server.metrics()[ABORTED]
    fill(driver, "temperature", 0)
    fill(driver, "max_tokens", 600)
    driver.find_element(By.ID, "prompt").send_keys("It was a dark and stormy night", Keys.ENTER)
    browser.wait(driver, lambda d: replies(d) and reply(d)["content"], 60, "the reply's first text")
    stop = driver.find_element(By.ID, "stop")
    assert stop.is_displayed() and not driver.find_element(By.ID, "send").is_displayed()
    stop.click()
    got = wait_reply(driver, 10)
    assert got["state"] == "stopped" and got["error"] is None
    assert got["stats"].endswith("finish: stopped")
    # Greedy: what came is the start of the whole reply, and the server cancelled the rest.
    assert got["content"] and full.content.startswith(got["content"]) and got["content"] != full.content
    m = wait_idle(server)
    assert m[ABORTED] == aborted + 1
    assert driver.find_element(By.ID, "send").is_displayed()
    assert not js_errors(driver)


def test_api_errors_are_shown(server, driver):
    open_page(driver, server)
    fill(driver, "top_p", 0)
    fill(driver, "max_tokens", 4)
    got = send(driver, "Hello there")
    want = assert_error(raw_post(server, "/v1/chat/completions", json.dumps(
        {"messages": [{"role": "user", "content": "Hello there"}], "top_p": 0, "max_tokens": 4}).encode()), 400, "top_p")
    assert got["state"] == "error" and got["error"] == f"Error 400: {want['message']}"
    # The message goes back into the box, and out of the history: fixed, it is sent again.
    assert driver.find_element(By.ID, "prompt").get_property("value") == "Hello there"
    fill(driver, "top_p", "")
    fill(driver, "temperature", 0)
    driver.find_element(By.ID, "send").click()
    ok = wait_reply(driver)
    want_ok, _ = api_chat(server, [{"role": "user", "content": "Hello there"}], temperature=0, max_tokens=4)
    assert ok["state"] == "done" and ok["content"] == want_ok.content


def test_reasoning_is_shown_apart(serve, driver):
    # deepseek_r1: the output starts inside <think>, so without a </think> all of it is reasoning.
    s = serve(*FP8, "--kv-cache-tokens", "2048", "--reasoning-parser", "deepseek_r1")
    try:
        open_page(driver, s)
        fill(driver, "temperature", 0)
        fill(driver, "max_tokens", 16)
        got = send(driver, "Think about the sea.")
        want, usage = api_chat(s, [{"role": "user", "content": "Think about the sea."}], temperature=0, max_tokens=16)
        assert want.reasoning_content and not want.content
        assert got["reasoning_shown"] and got["reasoning"] == want.reasoning_content
        assert got["content"] == ""
        assert stats_of(got)["tokens"] == usage.completion_tokens
        assert "reasoning deepseek_r1" in driver.find_element(By.ID, "model-facts").text
        assert not js_errors(driver)
    finally:
        s.stop_cleanly()


def test_api_key_is_asked_for_and_kept(serve, driver):
    s = serve(*FP8, "--kv-cache-tokens", "2048", "--api-key", "sekrit")
    try:
        assert httpx.get(s.url + "/").status_code == 200  # the page itself is public
        assert_error(httpx.get(s.url + "/v1/fp8lm/model"), 401)  # the API is not
        open_page(driver, s, wait_model=False)
        panel = driver.find_element(By.ID, "key-panel")
        browser.wait(driver, lambda d: panel.is_displayed(), 10, "the key panel")
        assert not driver.find_element(By.ID, "key-error").is_displayed()
        # A wrong key: asked again, with the server's message.
        driver.find_element(By.ID, "api-key").send_keys("wrong", Keys.ENTER)
        browser.wait(driver, lambda d: d.find_element(By.ID, "key-error").is_displayed(), 10, "the key error")
        assert driver.find_element(By.ID, "key-error").text == "Incorrect API key provided."
        driver.find_element(By.ID, "api-key").send_keys("sekrit", Keys.ENTER)
        browser.wait(driver, lambda d: d.find_element(By.ID, "model-name").text == NAME, 10, "the model's name")
        assert not panel.is_displayed()
        fill(driver, "temperature", 0)
        fill(driver, "max_tokens", 8)
        got = send(driver, "Hello")
        want, _ = api_chat(s, [{"role": "user", "content": "Hello"}], api_key="sekrit", temperature=0, max_tokens=8)
        assert got["state"] == "done" and got["content"] == want.content
        # Kept in this browser: a reload needs no key, and the settings are still there.
        assert driver.execute_script("return localStorage.getItem('fp8lm.apiKey')") == "sekrit"
        open_page(driver, s, clear_storage=False)
        assert not driver.find_element(By.ID, "key-panel").is_displayed()
        assert driver.find_element(By.ID, "temperature").get_property("value") == "0"
        assert driver.find_element(By.ID, "max_tokens").get_property("value") == "8"
        # A key that stops working (forgotten storage): the message waits for a key, then goes.
        driver.execute_script("localStorage.setItem('fp8lm.apiKey', 'stale')")
        open_page(driver, s, clear_storage=False, wait_model=False)
        browser.wait(driver, lambda d: d.find_element(By.ID, "key-panel").is_displayed(), 10, "the key panel")
        driver.find_element(By.ID, "api-key").send_keys("sekrit", Keys.ENTER)
        browser.wait(driver, lambda d: d.find_element(By.ID, "model-name").text == NAME, 10, "the model's name")
        assert send(driver, "Hello")["content"] == want.content
        assert not js_errors(driver)
    finally:
        s.stop_cleanly()


def test_page_loads_nothing_but_the_server(server, driver):
    open_page(driver, server)
    fill(driver, "max_tokens", 4)
    send(driver, "Hi")
    urls = driver.execute_script(
        "return performance.getEntries().map((e) => e.name).filter((n) => /^https?:/.test(n))")
    assert urls and all(u.startswith(server.url + "/") for u in urls), urls
    assert set(u[len(server.url):] for u in urls) <= {"/", "/v1/fp8lm/model", "/v1/chat/completions"}
    # Nothing the page asked for failed (an external font or script would, names do not resolve).
    assert not [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
