"""One `fp8lm serve` process for the tests that run a server (through conftest.py's `serve` fixture):
started on a free port with the given flags, its stdout and stderr in one log file, ready once
/health answers; stop() signals it and waits a bounded time, killing it past that."""
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import openai

MODEL = Path(__file__).resolve().parents[2] / "models" / "fp8lm-gutenberg-22m"
CRASH_SIGNS = ("internal error", "terminate called", "Segmentation", "Aborted")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`fp8lm serve MODEL --threads 2 --port <free> *args`, answering /health. Raises RuntimeError
    holding the log when the process exits first or `timeout` seconds pass."""

    def __init__(self, fp8lm_bin, *args, log_path, model=MODEL, timeout=60):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_path)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [fp8lm_bin, "serve", str(model), "--threads", "2", "--port", str(self.port), *args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not self.healthy(timeout=1):
            if self.proc.poll() is not None:
                raise RuntimeError(f"fp8lm serve exited ({self.proc.returncode}):\n{self.output()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"fp8lm serve did not become healthy in {timeout} s:\n{self.output()}")
            time.sleep(0.05)

    def output(self):
        """The log so far: stdout and stderr."""
        return self.log_path.read_text(errors="replace")

    def healthy(self, timeout=5):
        """The process runs and GET /health answers 200."""
        try:
            return self.proc.poll() is None and httpx.get(self.url + "/health", timeout=timeout).status_code == 200
        except httpx.TransportError:
            return False

    def client(self, **kw):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=kw.pop("api_key", "none"), max_retries=0, timeout=60, **kw)

    def metrics(self):
        r = httpx.get(self.url + "/metrics", timeout=10)
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/plain")
        values = {}
        for line in r.text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name.split("{")[0] if "finished_reason" not in name else name] = float(value)
        return values

    def stop(self, sig=signal.SIGTERM, timeout=20):
        """Sends `sig` (unless the process has exited) and returns the exit status; a process still
        running after `timeout` seconds is killed and fails the test."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"fp8lm serve still ran {timeout} s after {sig!r}:\n{self.output()}") from None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def expect_clean_exit(self, code):
        """Exit status 0 and no sign of a crash in the log; returns the log."""
        out = self.output()
        assert code == 0, out
        for bad in CRASH_SIGNS:
            assert bad not in out, out
        return out

    def stop_cleanly(self, sig=signal.SIGTERM):
        """stop(), expecting a clean exit; returns the log."""
        return self.expect_clean_exit(self.stop(sig))
