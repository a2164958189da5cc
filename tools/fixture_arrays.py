"""Raw-array fixture files shared by the tools/make_*_fixtures.py scripts.

Each tensor is written as its little-endian, row-major bytes (FP8 as uint8, BF16
as int16 bit patterns) to `<name>.bin`; identical arrays are stored once, and a
writer clears the *.bin files of an earlier run so that stale ones never linger.
"""
import hashlib
from pathlib import Path

import torch

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


class ArrayWriter:
    def __init__(self, out: Path):
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("*.bin"):
            old.unlink()
        self.written: dict[bytes, str] = {}  # identical arrays are stored once

    def array(self, name: str, t: torch.Tensor) -> str:
        """Writes a tensor's raw bytes; returns the file name (an earlier one if identical)."""
        t = t.contiguous().cpu()
        if t.dtype in FP8_DTYPES:
            t = t.view(torch.uint8)
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        data = t.numpy().tobytes()
        key = hashlib.sha256(data).digest()
        if key not in self.written:
            self.written[key] = f"{name}.bin"
            (self.out / self.written[key]).write_bytes(data)
        return self.written[key]
