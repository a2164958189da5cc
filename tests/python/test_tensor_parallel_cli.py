"""`--tensor-parallel-size` (issue 22) in the commands that run a model, on CPU ranks (threads of
one process; the same runtime drives GPU ranks over NCCL): the shipped model split over two
ranks.

* eval: the perplexity of the fixture text matches transformers' float32 number (the bound
  test_eval.py holds one rank to);
* generate and serve: greedy text equal to one rank's (weight-only FP8: the split changes only the
  float order of two partial sums), through the official `openai` client, several requests at
  once;
* a block-FP8 checkpoint (fp8lm quantize's FP8_BLOCK, LLM Compressor's bytes) whose 128 × 128
  blocks two ranks cut — each holds 3 of the 6 heads, 192 of q_proj's rows and o_proj's columns —
  is split, not refused: the load says how many cells were re-scaled, and the perplexity moves by
  far less than FP8 itself moves it (≤ 0.25 of |FP8 − BF16|, the bound the GPU tests use);
* bench latency: the JSON names the ranks and times the collectives;
* a split the model does not allow, or a size below 1, is refused by name; quantize, which
  calibrates on one CPU rank, takes no ranks (nor a device)."""
import json
import re
import threading
from pathlib import Path

import pytest
from cli_errors import assert_clean_error
from test_serve import NAME

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "fp8lm-gutenberg-22m"
EVAL = REPO / "tests" / "fixtures" / "eval"
REFERENCE = json.loads((EVAL / "reference_ctx128.json").read_text())
PROMPTS = [p["text"] for p in json.loads((REPO / "tests/fixtures/models/manifest.json").read_text())["shipped"]["prompts"]]
W8A16 = ("--quantization", "fp8:weight-only")


def test_eval_on_two_ranks_matches_transformers(run):
    r = run("eval", "perplexity", str(MODEL), "--data", str(EVAL / "harbour.txt"), "--threads", "2", "--ctx", "128",
            "--kv-cache-dtype", "fp32", "--tensor-parallel-size", "2", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["ppl"] == pytest.approx(REFERENCE["results"]["all"]["ppl"], rel=1e-3)
    assert "tensor parallelism: 2 ranks" in r.stderr


def ppl(run, model, *args):
    r = run("eval", "perplexity", str(model), "--data", str(EVAL / "harbour.txt"), "--threads", "2", "--ctx", "128",
            "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["ppl"], r.stderr


def test_block_fp8_checkpoint_whose_blocks_two_ranks_cut(run, tmp_path):
    out = tmp_path / "fp8-block"
    r = run("quantize", str(MODEL), "--out", str(out), "--scheme", "FP8_BLOCK", "--threads", "2")
    assert r.returncode == 0, r.stderr
    bf16, _ = ppl(run, MODEL)
    one, _ = ppl(run, out)
    two, log = ppl(run, out, "--tp", "2")
    m = re.search(r"shard boundaries cut (\d+) FP8 scale cells, re-scaled for their shards: (\d+) codes requantized", log)
    assert m and int(m.group(1)) > 0 and int(m.group(2)) > 0, log
    assert one != bf16
    assert abs(two - one) <= 0.25 * abs(one - bf16), (bf16, one, two)


def generate(run, prompt, tp):
    r = run("generate", str(MODEL), "--threads", "2", *W8A16, "--json", "--prompt", prompt, "--max-tokens", "24",
            "--temperature", "0", "--ignore-eos", "--tp", str(tp))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_generate_and_serve_on_two_ranks_give_one_ranks_text(serve, run):
    want = [generate(run, p, 1)["text"] for p in PROMPTS[:4]]
    assert [generate(run, p, 2)["text"] for p in PROMPTS[:2]] == want[:2]
    server = serve(*W8A16, "--tensor-parallel-size", "2", "--kv-cache-tokens", "4096")
    try:
        client = server.client()
        got = [None] * len(want)

        def ask(i):
            got[i] = client.completions.create(model=NAME, prompt=PROMPTS[i], max_tokens=24, temperature=0,
                                               extra_body={"ignore_eos": True}).choices[0].text

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(want))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got == want
    finally:
        server.stop()


def test_bench_latency_times_the_collectives(run, tmp_path):
    out = tmp_path / "tp.json"
    r = run("bench", "latency", str(MODEL), "--threads", "2", "--tp", "2", "--batch-size", "2", "--input-len", "32",
            "--output-len", "4", "--iters", "1", "--warmup", "0", "--profile", "--json", str(out))
    assert r.returncode == 0, r.stderr
    got = json.loads(out.read_text())
    assert got["config"]["tensor_parallel_size"] == 2
    for phase in ("prefill", "decode"):
        p = got["profile"][phase]
        names = {op["op"] for op in p["ops"]}
        assert {"all_reduce_sum", "all_gather_cols"} <= names
        assert 0 < p["collectives_s_per_step"] < p["ops_sum_s_per_step"]
    assert "of which collectives" in r.stdout


def test_quantize_takes_no_ranks(run, tmp_path):
    for flag in (("--tp", "2"), ("--device", "cuda")):
        r = run("quantize", str(MODEL), "--out", str(tmp_path / "q"), *flag)
        assert r.returncode != 0 and "not expected" in r.stderr + r.stdout, r.stderr
        assert not (tmp_path / "q").exists()


@pytest.mark.parametrize("size,named", [("4", "num_attention_heads 6 is not divisible by --tensor-parallel-size 4"),
                                        ("0", "--tensor-parallel-size: 0 is not a positive number of ranks")])
def test_bad_sizes_are_refused_by_name(run, size, named):
    r = run("generate", str(MODEL), "--prompt", "x", "--max-tokens", "2", "--tp", size)
    assert named in assert_clean_error(r)
