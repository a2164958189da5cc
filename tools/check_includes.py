#!/usr/bin/env python3
"""Checks that src/ keeps its layers: every #include "…" goes down the LAYERS table below.

    python3 tools/check_includes.py                      # check; exit 1 on any violation
    python3 tools/check_includes.py --graph              # the component graph, wrong arrows marked ✗
    python3 tools/check_includes.py --known FILE         # violations listed in FILE are only warnings
    python3 tools/check_includes.py --write-known FILE   # write today's violations into FILE
    python3 tools/check_includes.py --cmake              # also check the fp8lm_* link edges in src/**/*.cmake

Rules (docs/architecture.md explains the layers):
  1. A file includes its own component or a lower rank; same-rank peers never include each other.
  2. A SEALED component is included only from itself and its listed includers (or EXCEPTIONS).
  3. No cycle among files.
  4. No cycle among modules (x.h + x.cpp as one node) unless MODULE_CYCLES_ALLOWED lists it.
  5. FP8LM_WITH_CUDA appears only under IFDEF_CUDA_ALLOWED.
  6. Inside a component that SUBLAYERS lists, rule 1 again over its sub-folders: a file includes
     its own sub-folder or a lower one, never a peer's or a higher one.
  7. (--cmake) Rules 1-2 applied to target_link_libraries edges between fp8lm_* targets, a
     target compiles the sources of one component only, and in a SUBLAYERS component each
     sub-folder's CMake fragment lists only the sources of its own folder.
An include resolves against the including file's folder, then src/; one that resolves nowhere is
an error (a stale path after a move).
"""
import argparse
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

# Bottom → top. A component is a folder under src/; the longest listed prefix wins, and a
# sub-folder not listed belongs to its parent (numerics/cpu is numerics).
LAYERS = [["common"], ["numerics"], ["spec"], ["io"], ["tokenizer", "chat", "weights"], ["loader", "structured"],
          ["backend"], ["backend/cpu", "backend/cuda"], ["backend/factory"], ["model"], ["calibration"],
          ["engine", "quantize"], ["eval", "server"], ["cli"]]
# Component → the components that may include it besides itself.
SEALED = {"backend/cpu": {"backend/factory"}, "backend/cuda": {"backend/factory"}}
# (includer, included) → why this one edge may break rules 1-2.
EXCEPTIONS = {("src/cli/info_command.cpp", "src/backend/cuda/device_info.h"): "info reports the CUDA devices"}
# Component → its sub-folders bottom → top, as LAYERS ranks the components ("" is the component's
# own folder). The CUDA backend (docs/architecture.md, "The CUDA backend's folders"): shared
# device helpers, the quantization kernels the other families quantize with, the op families
# side by side, CudaOps on top of them, and the NCCL ranks that each hold a CudaOps.
SUBLAYERS = {"backend/cuda": [["common"], ["quant"], ["attention", "elementwise", "gemm", "gemv", "moe", "sampling"], ["persistent"],
                              [""], ["comm"]]}
# Paths (a folder ends in /) where FP8LM_WITH_CUDA may appear: the one place that picks a backend.
IFDEF_CUDA_ALLOWED = {"src/backend/factory/", "src/cli/info_command.cpp", "src/backend/cuda/"}
# Module cycles (paths without extension) that are allowed, each with its reason.
MODULE_CYCLES_ALLOWED = {
    frozenset({"src/chat/ast", "src/chat/eval", "src/chat/value", "src/chat/builtins"}):
        "the interpreter's mutual recursion",
    frozenset({"src/backend/cuda/cuda_ops", "src/backend/cuda/cuda_ops_impl"}):
        "CudaOps::Impl and the device weights: cuda_ops.cpp's private half, shared with cuda_ops_moe.cpp",
}

SOURCE_SUFFIXES = (".h", ".cpp", ".cu", ".cuh", ".in")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
CUDA_MACRO = "FP8LM_WITH_CUDA"
CUDA_MACRO_RE = re.compile(r"\b" + CUDA_MACRO + r"\b")
RANK = {c: r for r, group in enumerate(LAYERS) for c in group}


def component(rel):
    """'src/backend/cpu/x.h' → 'backend/cpu'; None when the file is in no listed folder."""
    parts = rel.split("/")[1:-1]
    for n in range(len(parts), 0, -1):
        if "/".join(parts[:n]) in RANK:
            return "/".join(parts[:n])
    return None


def subpart(rel, comp):
    """The sub-folder of `comp` that holds rel ('' for the component's own folder)."""
    below = rel.split("/")[1 + len(comp.split("/")):-1]
    return below[0] if below else ""


def sub_rank(comp, part):
    return next((r for r, group in enumerate(SUBLAYERS[comp]) if part in group), None)


def sub_problems(comp, includer, target):
    """Rule 6: why includer → target, both inside `comp`, breaks its sub-folders' order."""
    a, b = subpart(includer, comp), subpart(target, comp)
    ra, rb = sub_rank(comp, a), sub_rank(comp, b)
    if a == b or ra is None or rb is None:
        return []
    name = lambda part, r: f"{comp}/{part}".rstrip("/") + f" (sub-rank {r})"
    if rb > ra:
        return [f"{name(a, ra)} includes {target} ({name(b, rb)}): upward include"]
    if rb == ra:
        return [f"{name(a, ra)} includes {target} ({name(b, rb)}): peers never include each other"]
    return []


def stem(rel):
    return os.path.splitext(rel)[0]


class Violation:
    """One broken rule. `key` is what a --known file lists; None for errors that must be fixed."""

    def __init__(self, where, text, key):
        self.where, self.text, self.key = where, text, key

    def __str__(self):
        return f"{self.where}: {self.text}"


def scan(root):
    """Every quoted include of src/: [(includer, line, written, resolved or None)], and the
    FP8LM_WITH_CUDA lines: [(file, line)]."""
    src = root / "src"
    files = sorted(p.relative_to(root).as_posix() for p in src.rglob("*")
                   if p.is_file() and p.name.endswith(SOURCE_SUFFIXES))
    includes, macro_lines = [], []
    for rel in files:
        text = (root / rel).read_text(errors="replace")
        for no, line in enumerate(text.splitlines(), 1):
            if CUDA_MACRO_RE.search(line):
                macro_lines.append((rel, no))
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            written = m.group(1)
            target = None
            for cand in (os.path.normpath(os.path.join(os.path.dirname(rel), written)),
                         os.path.normpath(os.path.join("src", written))):
                if (root / cand).is_file():
                    target = Path(cand).as_posix()
                    break
            includes.append((rel, no, written, target))
    return files, includes, macro_lines


def edge_problems(a, b, includer=None, target=None):
    """Why the edge component a → component b breaks rules 1-2 ([] when it does not)."""
    if a == b or (includer, target) in EXCEPTIONS:
        return []
    why = []
    if RANK[b] > RANK[a]:
        why.append("upward include")
    elif RANK[b] == RANK[a]:
        why.append("peers never include each other")
    if b in SEALED and a not in SEALED[b]:
        allowed = ", ".join(sorted(SEALED[b]))
        why.append(f"{b} is sealed (only {allowed} may include it)")
    return why


def strongly_connected(graph):
    """Tarjan's algorithm, iterative; the components with more than one node, each sorted."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                scc = []
                while True:
                    n = stack.pop()
                    on_stack.discard(n)
                    scc.append(n)
                    if n == node:
                        break
                if len(scc) > 1:
                    out.append(sorted(scc))
    return sorted(out)


def cycle_violation(kind, nodes, edges, node_of, why):
    """One cycle among `nodes` (files or module stems; node_of maps a file to its node), listing
    the includes that close it so the reader sees where to cut."""
    inside = set(nodes)
    closing = [(f, no, t) for f, no, t in edges
               if node_of(f) in inside and node_of(t) in inside and node_of(f) != node_of(t)]
    f, no, _ = closing[0]
    detail = "; ".join(f"{f}:{no} -> {t}" for f, no, t in closing)
    return Violation(f"{f}:{no}", f"{kind} {' '.join(nodes)} ({detail}): {why}", f"{kind} {' '.join(nodes)}")


def check_sources(root, notes):
    files, includes, macro_lines = scan(root)
    out = []
    for rel in files:
        comp = component(rel)
        if comp is None:
            out.append(Violation(rel, "is in no component of LAYERS: add its folder to the table", None))
        elif comp in SUBLAYERS and sub_rank(comp, subpart(rel, comp)) is None:
            out.append(Violation(rel, f"is in no sub-folder of SUBLAYERS['{comp}']: add its folder to the table",
                                 None))
    resolved = []
    for rel, no, written, target in includes:
        if target is None:
            out.append(Violation(f"{rel}:{no}", f'#include "{written}" resolves neither beside the file nor '
                                 "under src/", None))
            continue
        resolved.append((rel, no, target))
        a, b = component(rel), component(target)
        if a is None or b is None:
            continue
        if a == b and a in SUBLAYERS:
            for why in sub_problems(a, rel, target):
                out.append(Violation(f"{rel}:{no}", why, f"{rel} -> {target}"))
            continue
        why = edge_problems(a, b, rel, target)
        if why:
            out.append(Violation(f"{rel}:{no}", f"{a} (rank {RANK[a]}) includes {target} ({b}, rank {RANK[b]}): "
                                 + "; ".join(why), f"{rel} -> {target}"))
    used = {(rel, t) for rel, _, t in resolved}
    for pair, why in EXCEPTIONS.items():
        if pair not in used:
            notes.append(f"EXCEPTIONS entry {pair[0]} -> {pair[1]} ({why}) matches no include any more")

    file_graph, module_graph = defaultdict(set), defaultdict(set)
    for rel, _, target in resolved:
        file_graph[rel].add(target)
        if stem(rel) != stem(target):
            module_graph[stem(rel)].add(stem(target))
    for nodes in strongly_connected(file_graph):
        out.append(cycle_violation("file cycle:", nodes, resolved, lambda f: f, "files include each other"))
    seen_allowed = set()
    for nodes in strongly_connected(module_graph):
        if frozenset(nodes) in MODULE_CYCLES_ALLOWED:
            seen_allowed.add(frozenset(nodes))
            continue
        out.append(cycle_violation("module cycle:", nodes, resolved, stem,
                                   "break it (move what both need into a lower file) or list it in "
                                   "MODULE_CYCLES_ALLOWED with its reason"))
    for allowed, why in MODULE_CYCLES_ALLOWED.items():
        if allowed not in seen_allowed:
            notes.append(f"MODULE_CYCLES_ALLOWED entry {' '.join(sorted(allowed))} ({why}) is no cycle any "
                         "more: delete it")

    for rel, no in macro_lines:
        if not any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in IFDEF_CUDA_ALLOWED):
            out.append(Violation(f"{rel}:{no}", f"{CUDA_MACRO} outside the backend factory: only "
                                 f"{', '.join(sorted(IFDEF_CUDA_ALLOWED))} may pick a backend",
                                 f"{rel} -> {CUDA_MACRO}"))
    return out, resolved


# ---- rule 6: CMake targets ------------------------------------------------------------------

def cmake_commands(text):
    """(command, [arguments], line) for every command in a CMake file (comments dropped)."""
    text = re.sub(r"#[^\n]*", "", text)
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\(", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        yield m.group(1).lower(), text[m.end():i - 1].split(), text.count("\n", 0, m.start()) + 1


def check_cmake(root):
    src = root / "src"
    cmake_files = [p for p in [src / "CMakeLists.txt"] if p.is_file()] + sorted(src.rglob("*.cmake"))
    sources, links, out = defaultdict(set), [], []
    for path in cmake_files:
        rel = path.relative_to(root).as_posix()
        here = os.path.dirname(rel)
        for cmd, args, line in cmake_commands(path.read_text(errors="replace")):
            if cmd in ("add_library", "add_executable", "target_sources") and args:
                for a in args[1:]:
                    a = a.replace("${CMAKE_CURRENT_LIST_DIR}", here).replace("${CMAKE_CURRENT_SOURCE_DIR}", "src")
                    if "$" in a or not a.endswith(SOURCE_SUFFIXES):
                        continue  # generated (binary dir) or a keyword
                    p = Path(os.path.normpath(a if a.startswith("src/") else os.path.join("src", a))).as_posix()
                    sources[args[0]].add(p)
                    owner = component(p)
                    if owner in SUBLAYERS and component(rel) == owner and os.path.dirname(p) != here:
                        out.append(Violation(f"{rel}:{line}", f"lists {p}, outside its own folder {here}: each "
                                             f"folder of {owner} lists its sources in its own fragment", None))
            elif cmd == "target_link_libraries" and args:
                links += [(f"{rel}:{line}", args[0], dep) for dep in args[1:] if dep.startswith("fp8lm")]
    comp = {}
    for target, files in sorted(sources.items()):
        comps = sorted({component(f) or "?" for f in files})
        if len(comps) > 1:
            out.append(Violation(f"cmake {target}", f"compiles sources of {', '.join(comps)}: one target per "
                                 "component", f"cmake {target} mixes {' '.join(comps)}"))
        # A mixed target sits where its highest part sits; its link edges are checked from there.
        comp[target] = max(comps, key=lambda c: RANK.get(c, -1))
    for where, a, b in links:
        if a not in comp or b not in comp or "?" in (comp[a], comp[b]):
            continue  # a helper target without sources (e.g. fp8lm_httplib)
        why = edge_problems(comp[a], comp[b])
        if why:
            out.append(Violation(where, f"{a} ({comp[a]}, rank {RANK[comp[a]]}) links {b} ({comp[b]}, rank "
                                 f"{RANK[comp[b]]}): " + "; ".join(why), f"cmake {a} -> {b}"))
    return out


# ---- modes ----------------------------------------------------------------------------------

def print_graph(resolved):
    edges, why = defaultdict(int), defaultdict(set)
    for rel, _, target in resolved:
        a, b = component(rel), component(target)
        if a and b and a != b:
            edges[(a, b)] += 1
            why[(a, b)].update(edge_problems(a, b, rel, target))  # an EXCEPTIONS edge adds nothing
    width = max((len(f"{a} ({RANK[a]})") for a, _ in edges), default=0)
    print("component (rank) -> component (rank): includes   (✗ breaks the layers)")
    for (a, b), n in sorted(edges.items(), key=lambda e: (RANK[e[0][0]], e[0][0], RANK[e[0][1]], e[0][1])):
        mark = "  ✗ " + "; ".join(sorted(why[(a, b)])) if why[(a, b)] else ""
        print(f"{f'{a} ({RANK[a]})':<{width}} -> {b} ({RANK[b]}): {n}{mark}")
    cycles = strongly_connected({a: {b for (x, b) in edges if x == a} for (a, _) in edges})
    print("component cycles:", ", ".join(" <-> ".join(c) for c in cycles) if cycles else "none")


def entry_key(line):
    """'path:line -> target' and 'path -> target' are the same entry: the line number is only a
    pointer for the reader, since other changes to the file move it."""
    m = re.match(r"^(\S+?)(?::\d+)? -> (\S+)$", line)
    return f"{m.group(1)} -> {m.group(2)}" if m else line


def read_known(path):
    known = {}
    for no, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if line and not line.startswith("#"):
            known[entry_key(line)] = no
    return known


def write_known(path, violations):
    lines, seen = [], set()
    for v in violations:
        if v.key and v.key not in seen:
            seen.add(v.key)
            m = re.match(r"^(\S+?) -> (\S+)$", v.key)
            where_line = v.where.rsplit(":", 1)[-1] if ":" in v.where else ""
            lines.append(f"{m.group(1)}:{where_line} -> {m.group(2)}" if m and where_line.isdigit() else v.key)
    header = ["# Include-layer violations that exist today and are fixed by later changes; tools/check_includes.py",
              "# --known prints them as warnings. A line is 'path:line -> included path' (the line number is only",
              "# a pointer: entries match on the two paths), or a cycle. Regenerate after moves with",
              f"#   python3 tools/check_includes.py --write-known {path}"]
    Path(path).write_text("\n".join(header + lines) + "\n")
    return len(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                    help="the repository root (default: this script's repository)")
    ap.add_argument("--graph", action="store_true", help="print the component graph and exit")
    ap.add_argument("--known", metavar="FILE", help="violations listed here are warnings, not errors")
    ap.add_argument("--write-known", metavar="FILE", help="write the violations found now into FILE")
    ap.add_argument("--cmake", action="store_true", help="also check the link edges of the fp8lm_* targets")
    args = ap.parse_args()
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(encoding="utf-8")
    if not (args.root / "src").is_dir():
        ap.error(f"{args.root} has no src/ folder")

    notes = []
    violations, resolved = check_sources(args.root, notes)
    if args.cmake:
        violations += check_cmake(args.root)
    if args.graph:
        print_graph(resolved)
        return 0
    if args.write_known:
        n = write_known(args.write_known, violations)
        print(f"wrote {n} known violations to {args.write_known}")

    known = read_known(args.known) if args.known else {}
    matched = set()
    errors = 0
    for v in violations:
        if v.key in known:
            matched.add(v.key)
            print(f"warning: {v} (known: {args.known})")
        elif args.write_known and v.key:
            print(f"warning: {v} (written to {args.write_known})")
        else:
            errors += 1
            print(f"error: {v}")
    for key, no in sorted(known.items(), key=lambda e: e[1]):
        if key in matched or (key.startswith("cmake ") and not args.cmake):
            continue  # cmake entries are checked only with --cmake
        notes.append(f"{args.known}:{no}: '{key}' no longer occurs: delete the line")
    for n in notes:
        print(f"note: {n}")
    print(f"check_includes: {errors} error(s), {len(violations) - errors} known, {len(notes)} note(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
