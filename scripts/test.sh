#!/usr/bin/env bash
# The one test command: checks the include layers (tools/check_includes.py),
# installs what the tests need on a fresh Debian machine, builds fp8lm (with
# the CUDA backend when nvcc is there), runs the C++ tests, runs them again
# under AddressSanitizer + UndefinedBehaviorSanitizer, and runs the
# Python-driven tests of the command-line program (the chat page's in headless
# Chromium), and fuzzes the parsers of untrusted input (safetensors headers,
# config files) for a short time.
#
#   bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's header says how long the command has run (CI keeps its log: where the minutes go).
step() { printf '\n==== %s (at %d min %02d s)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }
jobs=$(nproc)

# The include-layer check is pure Python and takes under a second, so it runs before minutes of
# building. On a fresh machine python3 comes with scripts/build.sh's packages: then it runs right after.
check_includes() {
  step "Include layers (tools/check_includes.py)"
  python3 tools/check_includes.py --cmake
}
if command -v python3 >/dev/null; then
  check_includes
  bash scripts/build.sh --all
else
  bash scripts/build.sh --all
  check_includes
fi

# The chat page's tests (tests/python/test_chat_page.py) drive a real browser: Debian's Chromium
# and its WebDriver, installed when missing, as scripts/build.sh installs its packages.
step "Browser for the chat page's tests (chromium, chromium-driver)"
bash scripts/install_packages.sh chromium chromium-driver

step "Python environment for the Python-driven tests (.venv-test)"
[[ -x .venv-test/bin/python ]] || python3 -m venv .venv-test
.venv-test/bin/pip install -q --disable-pip-version-check -r tests/python/requirements.txt

step "C++ tests"
ctest --test-dir build --output-on-failure -j "$jobs"

step "C++ tests under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)"
# xgrammar (never instrumented, always -O2) is linked from the plain build, not compiled again.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFP8LM_SANITIZE=ON \
      -DFP8LM_CUDA=OFF -DFP8LM_BENCHMARKS=OFF -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
      -DFP8LM_XGRAMMAR_LIBRARY="$PWD/build/libfp8lm_xgrammar.a"
cmake --build build-asan -j "$jobs" --target fp8lm_tests  # the tests alone: ctest runs nothing else
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"

step "Python-driven tests"
FP8LM_BIN="$PWD/build/src/fp8lm" .venv-test/bin/python -m pytest -q tests/python

step "Fuzzing (build-fuzz/, clang + libFuzzer, 20 s per target)"
bash scripts/fuzz.sh 20
step "Done"
