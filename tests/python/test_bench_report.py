"""`fp8lm bench sweep` and `fp8lm bench report` on the shipped model on the CPU: a
tiny sweep (two configurations × batch sizes 1 and 2) writes a JSON with every
point and a self-contained HTML page — well-formed, one SVG per chart, no URL but
the SVG namespace, as many plotted points as results, the roofline drawn — that
`bench report` rebuilds byte for byte from the JSON, and merges with bench latency
and bench serve results; bad flags and files get clean errors."""
import json
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cli_errors import assert_clean_error

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "fp8lm-gutenberg-22m"
CONTEXT = json.loads((MODEL / "config.json").read_text())["max_position_embeddings"]
SVG = "{http://www.w3.org/2000/svg}"
BANDWIDTH = 20e9
INPUT_LEN, OUTPUT_LEN = 12, 5


def sweep_args(out_dir, *changes):
    """The tiny sweep's command line; `changes` (flag, value, …) replace or add flags."""
    flags = {"--threads": "2", "--configs": "bf16 fp8", "--batch-sizes": "2,1", "--input-len": str(INPUT_LEN),
             "--output-len": str(OUTPUT_LEN), "--warmup": "0", "--iters": "1", "--roofline-bandwidth": "20G",
             "--out-dir": str(out_dir)}
    flags.update(zip(changes[::2], changes[1::2]))
    return ("bench", "sweep", str(MODEL), *[x for kv in flags.items() for x in kv])


@pytest.fixture(scope="module")
def sweep(fp8lm_bin, tmp_path_factory):
    """One sweep, shared: its directory, the JSON, the HTML, the command's stdout."""
    out = tmp_path_factory.mktemp("sweep")
    r = subprocess.run([fp8lm_bin, *sweep_args(out)], capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    return out, json.loads((out / "sweep.json").read_text()), (out / "report.html").read_text(), r.stdout


def charts(html):
    """{chart id: its <svg> element} of a page, which must parse as XML."""
    root = ET.fromstring(html)
    out = {}
    for section in root.iter("section"):
        figures = list(section.iter("figure"))
        if not figures:
            continue
        svgs = list(figures[0].iter(SVG + "svg"))
        assert len(svgs) == 1, section.get("id")
        assert svgs[0].get("data-chart") == section.get("id")
        out[section.get("id")] = svgs[0]
    assert len(list(root.iter(SVG + "svg"))) == len(out)
    return out


def classed(svg, tag, cls):
    return [e for e in svg.iter(SVG + tag) if e.get("class") == cls]


def test_json_holds_every_point(sweep):
    _, j, _, stdout = sweep
    assert j["benchmark"] == "sweep" and j["schema"] == 1
    c = j["config"]
    assert c["configs"] == ["bf16", "fp8"] and c["batch_sizes"] == [1, 2]
    assert (c["input_len"], c["output_len"], c["iters"], c["warmup"]) == (INPUT_LEN, OUTPUT_LEN, 1, 0)
    assert j["roofline"]["bandwidth_bytes_per_s"] == BANDWIDTH
    context = INPUT_LEN + OUTPUT_LEN / 2
    assert j["roofline"]["decode_context_tokens"] == context
    assert [r["name"] for r in j["runs"]] == ["bf16", "fp8"]
    assert j["runs"][0]["quantization"] is None and j["runs"][1]["quantization"] == "fp8"
    assert j["runs"][1]["config"]["weights"].startswith("FP8")
    assert j["runs"][1]["weight_bytes"] < j["runs"][0]["weight_bytes"]
    for run in j["runs"]:
        assert run["kv_cache_bytes_per_token"] > 0
        assert [p["batch_size"] for p in run["points"]] == [1, 2]
        for p in run["points"]:
            for key in ("ttft_s", "prefill_tok_s", "tpot_median_s", "decode_tok_s"):
                assert p[key] > 0, (run["name"], p["batch_size"], key)
            assert p["prefill_tok_s"] == pytest.approx(p["batch_size"] * INPUT_LEN / p["ttft_s"], rel=1e-9)
            assert p["decode_tok_s"] == pytest.approx(p["batch_size"] / p["tpot_median_s"], rel=1e-9)
            roof = p["batch_size"] * BANDWIDTH / (
                run["weight_bytes"] + p["batch_size"] * context * run["kv_cache_bytes_per_token"])
            assert p["roofline_decode_tok_s"] == pytest.approx(roof, rel=1e-12)
            assert p["roofline_share"] == pytest.approx(p["decode_tok_s"] / roof, rel=1e-12)
    # The table on stdout has a row per point.
    rows = [line.split() for line in stdout.splitlines() if line.startswith("  bf16") or line.startswith("  fp8")]
    assert [(r[0], r[1]) for r in rows] == [("bf16", "1"), ("bf16", "2"), ("fp8", "1"), ("fp8", "2")]


def test_html_is_self_contained_with_one_svg_per_chart(sweep):
    _, _, html, _ = sweep
    assert html.startswith("<!DOCTYPE html>")
    found = charts(html)
    assert list(found) == ["decode-throughput", "prefill-throughput", "decode-vs-baseline", "prefill-vs-baseline"]
    assert re.findall(r"https?://[^\s\"'<>]*", html) == ["http://www.w3.org/2000/svg"] * len(found)
    assert "<script" not in html and "<link" not in html and "<img" not in html and "url(" not in html
    for svg in found.values():  # title, axes, legend in each
        assert svg.find(SVG + "title").text
        assert classed(svg, "rect", "plot-area")
        assert [g for g in svg.iter(SVG + "g") if g.get("class") == "legend"]
        labels = [t.text for t in classed(svg, "text", "axis-label")]
        assert len(labels) == 2 and all(labels), labels


def test_plotted_points_are_the_results(sweep):
    _, j, html, _ = sweep
    found = charts(html)
    for chart, key in (("decode-throughput", "decode_tok_s"), ("prefill-throughput", "prefill_tok_s")):
        points = classed(found[chart], "circle", "pt")
        expect = {(r["name"], p["batch_size"]): p[key] for r in j["runs"] for p in r["points"]}
        assert len(points) == len(expect) == 4
        got = {(c.get("data-series"), int(float(c.get("data-x")))): float(c.get("data-y")) for c in points}
        assert got.keys() == expect.keys()
        for k, v in expect.items():
            assert got[k] == pytest.approx(v, rel=1e-8), k
    # The rooflines are drawn: one dashed line per configuration.
    refs = classed(found["decode-throughput"], "path", "line ref")
    assert len(refs) == 2 and all(r.get("stroke-dasharray") for r in refs)
    # Side by side: a bar per (configuration, batch size), fp8's labelled with its ratio to bf16.
    bars = classed(found["decode-vs-baseline"], "rect", "bar")
    assert len(bars) == 4
    assert {(b.get("data-series"), b.get("data-group")) for b in bars} == {
        (r["name"], str(p["batch_size"])) for r in j["runs"] for p in r["points"]}
    decode = {r["name"]: [p["decode_tok_s"] for p in r["points"]] for r in j["runs"]}
    notes = sorted(t.text for t in classed(found["decode-vs-baseline"], "text", "note"))
    assert notes == sorted(f"{f / b:.2f}\u00d7" for f, b in zip(decode["fp8"], decode["bf16"]))


def test_report_rebuilds_the_same_page(run, sweep, tmp_path):
    out_dir, _, html, _ = sweep
    out = tmp_path / "again.html"
    r = run("bench", "report", str(out_dir / "sweep.json"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_text() == html
    # --svg-dir: the same charts as files that stand alone.
    svg_dir = tmp_path / "svg"
    r = run("bench", "report", str(out_dir / "sweep.json"), "--out", str(out), "--svg-dir", str(svg_dir))
    assert r.returncode == 0, r.stderr
    files = sorted(p.name for p in svg_dir.iterdir())
    assert files == sorted(f"{c}.svg" for c in charts(html))
    for f in svg_dir.iterdir():
        assert ET.parse(f).getroot().tag == SVG + "svg"
    # Another baseline and bandwidth change the page.
    r = run("bench", "report", str(out_dir / "sweep.json"), "--out", str(out), "--baseline", "fp8",
            "--roofline-bandwidth", "1T")
    assert r.returncode == 0, r.stderr
    assert "baseline fp8" in out.read_text() and "roofline at 1 TB/s" in out.read_text()


def serve_results(fp8lm_bin, serve, out_dir, concurrencies):
    """bench serve --label bf16 --json against a real fp8lm serve of the model, at each concurrency."""
    server = serve()
    try:
        files = []
        for c in concurrencies:
            f = out_dir / f"serve_c{c}.json"
            r = subprocess.run([fp8lm_bin, "bench", "serve", "--base-url", server.url, "--num-prompts", "4",
                                "--max-concurrency", str(c), "--input-len", "8", "--output-len", "4", "--label",
                                "bf16", "--json", str(f)], capture_output=True, text=True, timeout=60,
                               stdin=subprocess.DEVNULL)
            assert r.returncode == 0, r.stderr
            files.append(f)
        return files
    finally:
        server.stop()


def test_report_merges_latency_and_serve_results(run, fp8lm_bin, serve, sweep, tmp_path):
    out_dir, j, _, _ = sweep
    latency = tmp_path / "latency_fp8kv_b2.json"
    r = run("bench", "latency", str(MODEL), "--threads", "2", "--quantization", "fp8", "--kv-cache-dtype", "fp8",
            "--batch-size", "2", "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN), "--warmup", "0",
            "--iters", "1", "--json", str(latency))
    assert r.returncode == 0, r.stderr
    assert json.loads(latency.read_text())["memory"]["kv_cache_bytes_per_token"] > 0
    served = serve_results(fp8lm_bin, serve, tmp_path, (1, 2))
    assert json.loads(served[0].read_text())["config"]["label"] == "bf16"
    out = tmp_path / "all.html"
    r = run("bench", "report", str(out_dir / "sweep.json"), str(latency), *map(str, served), "--out", str(out))
    assert r.returncode == 0, r.stderr
    found = charts(out.read_text())
    assert list(found) == ["decode-throughput", "prefill-throughput", "decode-vs-baseline", "prefill-vs-baseline",
                           "serve-throughput", "serve-ttft", "serve-tpot"]
    points = classed(found["decode-throughput"], "circle", "pt")
    assert len(points) == 5  # the sweep's four and the latency file's one
    assert {p.get("data-series") for p in points} == {"bf16", "fp8", "fp8+kv"}
    assert len(classed(found["serve-throughput"], "rect", "bar")) == 2
    ttft = classed(found["serve-ttft"], "rect", "bar")
    assert len(ttft) == 2 * 3  # p50, p90, p99 at each concurrency
    for c in ("1", "2"):
        v = {b.get("data-level"): float(b.get("data-value")) for b in ttft if b.get("data-group") == c}
        assert 0 < v["p50"] <= v["p90"] <= v["p99"]
    # A LABEL= prefix names a file's configuration.
    r = run("bench", "report", f"fp8lm-c1={served[0]}", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "fp8lm-c1" in out.read_text()


@pytest.mark.parametrize("args, words", [
    (("--configs", ""), "--configs: no configuration given"),
    (("--configs", "fp8 fp8"), "--configs: 'fp8' is given twice"),
    (("--configs", "int4"), "--configs: 'int4'"),
    (("--configs", "fp8+cache"), "'+cache' where +kv or +kv=DTYPE belongs"),
    (("--configs", "bf16+kv=fp4"), "--configs: 'bf16+kv=fp4'"),
    (("--batch-sizes", ""), "--batch-sizes: no batch size given"),
    (("--batch-sizes", "0,2"), "--batch-sizes: 0 must be at least 1"),
    (("--batch-sizes", "1,x"), "--batch-sizes: 'x' is not a whole number"),
    (("--batch-sizes", "2,2"), "--batch-sizes: 2 is given twice"),
    (("--input-len", str(CONTEXT)), "context"),
    (("--iters", "0"), "--iters"),
    (("--roofline-bandwidth", "fast"), "--roofline-bandwidth: 'fast' is not a number"),
    (("--roofline-bandwidth", "4.29Q"), "--roofline-bandwidth: '4.29Q' has an unknown unit"),
    (("--baseline", "fp16"), "--baseline: 'fp16' is not one of --configs"),
    (("--quantization", "fp8"), "--quantization: bench sweep takes the weights of each run from --configs"),
    (("--kv-cache-tokens", "8"), "--kv-cache-tokens"),
])
def test_sweep_errors(run, tmp_path, args, words):
    r = run(*sweep_args(tmp_path / "out", *args))
    assert words in assert_clean_error(r)
    assert not (tmp_path / "out" / "report.html").exists()


def test_sweep_needs_an_out_dir(run):
    r = run("bench", "sweep", str(MODEL), "--batch-sizes", "1")
    assert r.returncode != 0 and "--out-dir" in r.stderr


def test_report_errors(run, sweep, tmp_path):
    out_dir, j, _, _ = sweep
    out = str(tmp_path / "r.html")
    assert "no such file" in assert_clean_error(run("bench", "report", str(tmp_path / "none.json"), "--out", out))
    bad = tmp_path / "bad.json"
    bad.write_text('{"benchmark": "sweep", "runs": [')
    assert "bad.json: is not valid JSON" in assert_clean_error(run("bench", "report", str(bad), "--out", out))
    bad.write_text('{"benchmark": "throughput", "results": {}}')
    assert "holds bench throughput results" in assert_clean_error(run("bench", "report", str(bad), "--out", out))
    bad.write_text("[1, 2]")
    assert "bad.json: is not a JSON object" in assert_clean_error(run("bench", "report", str(bad), "--out", out))
    empty = dict(j, runs=[])
    bad.write_text(json.dumps(empty))
    assert "bad.json: runs is empty" in assert_clean_error(run("bench", "report", str(bad), "--out", out))
    broken = json.loads(json.dumps(j))
    del broken["runs"][1]["points"][0]["prefill_tok_s"]
    bad.write_text(json.dumps(broken))
    assert "bad.json: runs[1].points[0].prefill_tok_s is missing" in assert_clean_error(
        run("bench", "report", str(bad), "--out", out))
    sweep_json = str(out_dir / "sweep.json")
    assert "is in sweep.json too" in assert_clean_error(run("bench", "report", sweep_json, sweep_json, "--out", out))
    assert "--baseline: 'x' is not one of the configurations (bf16, fp8)" in assert_clean_error(
        run("bench", "report", sweep_json, "--out", out, "--baseline", "x"))
    assert "names one configuration" in assert_clean_error(run("bench", "report", f"x={sweep_json}", "--out", out))
    assert not Path(out).exists()
    r = run("bench", "report", sweep_json)
    assert r.returncode != 0 and "--out" in r.stderr
