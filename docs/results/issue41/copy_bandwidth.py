# The card's copy bandwidth as issue 41's rooflines take it: a 4 GiB device-to-device copy with
# PyTorch, bytes read + written, the median of 20 timed copies after 3 warm-ups.
import statistics

import torch

n = 4 << 30
a = torch.empty(n, dtype=torch.uint8, device="cuda")
b = torch.empty_like(a)
for _ in range(3):
    b.copy_(a)
ts = []
for _ in range(20):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    b.copy_(a)
    e.record()
    torch.cuda.synchronize()
    ts.append(s.elapsed_time(e) / 1e3)
print(f"copy {2 * n / statistics.median(ts) / 1e12:.3f} TB/s (read + write, median of 20)")
