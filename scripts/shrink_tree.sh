#!/usr/bin/env bash
# Moves the checkout's large fixtures, models and past results aside into .shrunk/ (git-ignored, so a
# device call does not carry them) and back: a device call carries the tree and its carried paths
# within 64 MiB, and the GPU programs' archives and the shipped model's compressed weights need the
# room. `out` before a device call, `in` after it (and before any build: gtest discovery and the CPU
# tests need the fixtures).
#
#   [KEEP="PATH ..."] bash scripts/shrink_tree.sh out|in     # KEEP: paths to leave in place (a call's tests read them)
set -euo pipefail
cd "$(dirname "$0")/.."
s=.shrunk
paths=(tests/fixtures/attention tests/fixtures/chat tests/fixtures/checkpoints tests/fixtures/eagle3 tests/fixtures/eval
       tests/fixtures/grammar tests/fixtures/http_requests tests/fixtures/linear tests/fixtures/numerics
       tests/fixtures/quantize tests/fixtures/safetensors tests/fixtures/sampler tests/fixtures/tokenizer
       tests/fixtures/models/moe tests/fixtures/models/tool_calls tests/fixtures/models/deepseek docs/images
       models/fp8lm-gutenberg-22m/model.safetensors models/fp8lm-gutenberg-22m-eagle3 models/fp8lm-gutenberg-draft-3m)
case "${1:-}" in
  out)
    # Past results too, but for the issues whose device scripts read their folder.
    for r in docs/results/*; do case "$r" in docs/results/issue41|docs/results/issue43|docs/results/issue45) ;; *) paths+=("$r") ;; esac; done
    for p in "${paths[@]}"; do
      [[ -e $p && " ${KEEP:-} " != *" $p "* ]] || continue
      mkdir -p "$s/$(dirname "$p")" && mv "$p" "$s/$p"
    done
    echo "the tree a call copies, carried paths apart: $(du -sh --exclude=.git --exclude=.deps --exclude='build*' --exclude="$s" \
      --exclude='.venv*' --exclude=.model --exclude=.so --exclude='gpu-*.tar.xz' . | cut -f1)" ;;
  in)
    [[ -d $s ]] || exit 0
    (cd "$s" && find . -mindepth 1 \( -type f -o -type l \) -print0) | while IFS= read -r -d '' f; do
      f=${f#./}; mkdir -p "$(dirname "$f")" && mv "$s/$f" "$f"
    done
    rm -rf "$s" ;;
  *) echo "usage: scripts/shrink_tree.sh out|in" >&2; exit 2 ;;
esac
