"""The command-line program as a user meets it: help, version, `info`, bad flags."""
import json
import re
from pathlib import Path

# Subcommands that work today; a new one joins this list with its issue.
WORKING_SUBCOMMANDS = {"info", "inspect", "tokenize", "generate", "chat", "quantize", "eval", "bench", "serve"}


def subcommands_in_help(text: str) -> set[str]:
    section = re.split(r"(?i)^subcommands:\s*$", text, maxsplit=1, flags=re.M)[1]
    return {m.group(1) for m in re.finditer(r"^\s{2}(\S+)\s", section, re.M)}


def test_help_lists_only_working_subcommands(run):
    r = run("--help")
    assert r.returncode == 0
    assert "FP8" in r.stdout
    assert subcommands_in_help(r.stdout) == WORKING_SUBCOMMANDS


def test_version(run):
    r = run("--version")
    assert r.returncode == 0
    assert re.fullmatch(r"fp8lm \d+\.\d+\.\d+\n", r.stdout)


def test_info_json_reports_kernels_this_cpu_has(run):
    r = run("info", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    usable = info["cpu"]["kernels_usable"]
    assert usable[0] == "scalar"
    assert info["cpu"]["kernels_selected"] == usable[-1]
    # the Linux kernel's view of the CPU is the reference for what we detect
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        flags = set(re.search(r"^flags\s*:(.*)$", cpuinfo.read_text(), re.M).group(1).split())
        assert ("avx2" in usable) == ("avx2" in flags)
        assert ("avx512" in usable) == ({"avx512f", "avx512bw"} <= flags)
    assert isinstance(info["cuda"]["compiled"], bool)
    if info["cuda"]["compiled"]:
        assert info["cuda"]["devices"] or info["cuda"]["unavailable"]


def test_info_text(run):
    r = run("info")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("fp8lm ")
    assert "CPU FP8 kernels:" in r.stdout
    assert "CUDA backend:" in r.stdout


def test_unknown_subcommand_is_a_clear_error(run):
    r = run("serve-everything")
    assert r.returncode != 0
    assert "serve-everything" in r.stderr


def test_unknown_flag_is_named(run):
    r = run("info", "--bogus-flag")
    assert r.returncode != 0
    assert "--bogus-flag" in r.stderr


def test_no_subcommand_says_one_is_required(run):
    r = run()
    assert r.returncode != 0
    assert "subcommand" in r.stderr.lower()
