import os
import subprocess
from pathlib import Path

import pytest

from server import Server

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def fp8lm_bin() -> str:
    path = os.environ.get("FP8LM_BIN", str(REPO / "build" / "src" / "fp8lm"))
    if not Path(path).is_file():
        pytest.fail(f"fp8lm binary not found at {path}: build first or set FP8LM_BIN")
    return path


@pytest.fixture(scope="session")
def run(fp8lm_bin):
    def _run(*args, check=False, input=""):
        # stdin is always given (empty by default) so a command never waits on the terminal
        return subprocess.run([fp8lm_bin, *args], capture_output=True, text=True, timeout=60, check=check,
                              input=input)
    return _run


@pytest.fixture(scope="session")
def serve(fp8lm_bin, tmp_path_factory):
    """serve(*flags, model=…, timeout=…): a healthy `fp8lm serve` (server.Server), its log in a directory of
    its own under pytest's temporary directory. Servers a test left running are killed at the session's end."""
    started = []

    def _serve(*args, **kw):
        s = Server(fp8lm_bin, *args, log_path=tmp_path_factory.mktemp("serve") / "serve.log", **kw)
        started.append(s)
        return s

    yield _serve
    for s in started:
        s.kill()
