#!/usr/bin/env python3
"""Where a kernel's warps stall, per source line: Nsight Compute's per-instruction samples joined
with the line table of the same cubin.

Nsight Compute's source page (`ncu -i R.ncu-rep --page source --csv --print-source sass`, as
run_ncu.sh writes it) lists every SASS instruction of the kernel with its stall samples, local
memory sectors and shared-memory wavefronts, but no source lines when the device has no source.
nvdisasm does (`nvdisasm -g -c K.cubin`, the cubin from `cuobjdump -xelf all OBJ` of a build with
-lineinfo): instruction i of the kernel's section is row i of the CSV. Prints the stall reasons of
the whole kernel, then the source lines with the most samples, local-memory sectors and excessive
shared wavefronts.

  python3 ncu_lines.py SASS.csv DISASM.txt KERNEL_SUBSTRING [SOURCE_DIR ...]
"""
import collections
import csv
import os
import re
import sys


def line_table(disasm, kernel):
    """(file, line) of every instruction of the section whose label contains `kernel`."""
    lines = open(disasm).read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith(".text.") and kernel in l)
    table, cur = [], None
    for l in lines[start + 1:]:
        if l.startswith(".text."):
            break
        m = re.match(r'\s*//## File "([^"]+)", line (\d+)', l)
        if m:
            cur = (os.path.basename(m.group(1)), int(m.group(2)))
            continue
        if re.match(r"\s*/\*[0-9a-f]{4,}\*/", l):
            table.append(cur or ("?", 0))
    return table


def source_text(dirs, name, line, cache={}):
    for d in dirs:
        p = os.path.join(d, name)
        if os.path.exists(p):
            if p not in cache:
                cache[p] = open(p).read().splitlines()
            return cache[p][line - 1].strip()[:72]
    return ""


def main():
    sass_csv, disasm, kernel, *dirs = sys.argv[1:]
    rows = list(csv.reader(open(sass_csv)))
    header, data = rows[1], rows[2:]
    col = {h: i for i, h in enumerate(header)}
    table = line_table(disasm, kernel)
    if len(table) != len(data):
        sys.exit(f"{len(data)} instructions in the CSV, {len(table)} in the section: not the same build")
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def num(row, name):
        try:
            return float(row[col[name]])
        except (ValueError, KeyError):
            return 0.0

    total = collections.Counter()
    by_line = collections.defaultdict(collections.Counter)
    for row, where in zip(data, table):
        for s in stalls:
            v = num(row, s)
            total[s] += v
            by_line[where][s] += v
            by_line[where]["samples"] += v
        by_line[where]["local"] += num(row, "L2 Theoretical Sectors Local")
        by_line[where]["excess"] += num(row, "L1 Wavefronts Shared Excessive")
    samples = sum(total.values())
    print(f"{int(samples)} samples")
    for s, v in total.most_common(8):
        print(f"  {s[6:]:18s} {100 * v / samples:5.1f} %")
    for key, title in (("samples", "stall samples"), ("local", "local-memory sectors (L2)"),
                       ("excess", "excessive shared wavefronts")):
        whole = sum(c[key] for c in by_line.values()) or 1
        print(f"\nsource lines by {title} (of {int(whole)})")
        for where, c in sorted(by_line.items(), key=lambda x: -x[1][key])[:15]:
            if c[key] == 0:
                break
            top = ", ".join(f"{s[6:]} {100 * c[s] / samples:.1f}" for s, _ in
                            sorted(((s, c[s]) for s in stalls), key=lambda x: -x[1])[:2]) if key == "samples" else ""
            print(f"  {100 * c[key] / whole:5.1f} %  {where[0]}:{where[1]:<5d} {source_text(dirs, *where):72s} {top}")


if __name__ == "__main__":
    main()
