import os
import subprocess
from pathlib import Path

import pytest

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
