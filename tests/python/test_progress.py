"""Progress of long commands on stderr (issue 21): on a terminal a bar redrawn in place
(carriage returns, the counts growing to the total); in a pipe or a log, plain lines — for a
short run only the final one — so that logs stay readable. Checked for loading (and online
quantization), eval perplexity, bench latency and bench throughput, through a pseudo-terminal
for the bar."""
import os
import pty
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "fp8lm-gutenberg-22m"
LAYERS = 10  # the shipped model's


def on_a_terminal(fp8lm_bin, *args):
    """Runs fp8lm with stderr on a pseudo-terminal; returns (exit code, what the terminal got)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([fp8lm_bin, *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    got = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        got += chunk
    os.close(master)
    return p.wait(timeout=120), got.decode("utf-8", "replace")


def test_loading_in_a_log_is_one_plain_line(run):
    r = run("generate", str(MODEL), "--threads", "2", "--prompt", "Hi", "--max-tokens", "2", "--quantization", "fp8")
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if "loading weights" in line]
    assert len(lines) == 1 and re.fullmatch(rf"fp8lm: loading weights: {LAYERS}/{LAYERS} layers, [0-9.]+ s", lines[0]), lines
    assert "\r" not in r.stderr and "\x1b[" not in r.stderr


def test_loading_on_a_terminal_is_a_bar(fp8lm_bin):
    code, got = on_a_terminal(fp8lm_bin, "generate", str(MODEL), "--threads", "2", "--prompt", "Hi", "--max-tokens", "2")
    assert code == 0, got
    frames = [f for f in re.split(r"[\r\n]+", got) if "loading weights [" in f]
    assert frames, got
    counts = [int(re.search(r"\] (\d+)/", f).group(1)) for f in frames]
    assert counts == sorted(counts) and counts[-1] == LAYERS, frames
    assert "#" * 30 in frames[-1]


def test_eval_and_bench_report_progress(run, fp8lm_bin, tmp_path):
    data = tmp_path / "text.txt"
    data.write_text("The sea was calm and the old man rowed out beyond the reef. " * 60)
    r = run("eval", "perplexity", str(MODEL), "--data", str(data), "--threads", "2", "--ctx", "64")
    assert r.returncode == 0, r.stderr
    assert re.search(r"fp8lm: perplexity: (\d+)/\1 windows, ppl [0-9.]+, \d+ tok/s", r.stderr), r.stderr
    r = run("bench", "latency", str(MODEL), "--threads", "2", "--input-len", "8", "--output-len", "2", "--warmup", "1",
            "--iters", "2")
    assert r.returncode == 0, r.stderr
    assert re.search(r"fp8lm: bench latency: 3/3 iterations \(warm-up included\), last [0-9.]+ s", r.stderr), r.stderr
    r = run("bench", "throughput", str(MODEL), "--threads", "2", "--num-prompts", "6", "--input-len", "8",
            "--output-len", "2")
    assert r.returncode == 0, r.stderr
    assert re.search(r"fp8lm: bench throughput: 6/6 requests", r.stderr), r.stderr
    code, got = on_a_terminal(fp8lm_bin, "eval", "perplexity", str(MODEL), "--data", str(data), "--threads", "2",
                              "--ctx", "64")
    assert code == 0, got
    assert re.search(r"\rfp8lm: perplexity \[#+\] (\d+)/\1 windows, ppl", got), got
