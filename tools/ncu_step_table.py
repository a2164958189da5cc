#!/usr/bin/env python3
"""Per-kernel table of one step from an Nsight Compute CSV (ncu --csv --metrics gpu__time_duration.sum).

The step is the kernels from the N-th last launch of a marker kernel (minus `--lead` launches
before it) to the end of the file: e.g. the last decode step of a 48-layer MoE model is
`--marker moe_route_group --count 48 --lead 8`. Prints launches, total and mean microseconds per
kernel name and grid, largest first, and the step's total (kernels timed one at a time by ncu:
no launch gaps, no overlap).

    python3 tools/ncu_step_table.py ncu.csv[.xz] --marker moe_route_group --count 48 --lead 8
"""
import argparse
import collections
import csv
import io
import lzma
import re
import sys


def rows(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        text = "".join(line for line in f if line.startswith('"'))
    return [r for r in csv.DictReader(io.StringIO(text)) if r.get("Kernel Name")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--marker", required=True, help="regex of a kernel launched once per layer")
    ap.add_argument("--count", type=int, required=True, help="launches of the marker in the step")
    ap.add_argument("--lead", type=int, default=0, help="launches before the step's first marker")
    a = ap.parse_args()
    r = rows(a.csv)
    hits = [i for i, x in enumerate(r) if re.search(a.marker, x["Kernel Name"])]
    if len(hits) < a.count:
        sys.exit(f"ncu_step_table: {len(hits)} launches match {a.marker!r}, fewer than --count {a.count}")
    step = r[max(0, hits[-a.count] - a.lead):]
    table = collections.OrderedDict()
    for x in step:
        name = re.sub(r"\(.*", "", x["Kernel Name"]).replace("fp8lm::<unnamed>::", "")[:72] + " " + x["Grid Size"]
        ns = float(x["Metric Value"].replace(",", ""))
        t = table.setdefault(name, [0, 0.0])
        t[0] += 1
        t[1] += ns / 1e3
    total = sum(t[1] for t in table.values())
    print(f"{'launches':>8} {'total us':>10} {'mean us':>8} {'share':>6}  kernel (grid)")
    for name, (n, us) in sorted(table.items(), key=lambda kv: -kv[1][1]):
        print(f"{n:8d} {us:10.1f} {us / n:8.2f} {100 * us / total:5.1f}%  {name}")
    print(f"{len(step):8d} {total:10.1f} {'':8} {'':6}  the step")


if __name__ == "__main__":
    main()
