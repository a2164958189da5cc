#!/usr/bin/env bash
# Fetches FlashInfer's C++/CUDA headers for bench_flashinfer_decode (the peer decode-attention
# benchmark, built only with -DFP8LM_FLASHINFER=ON): the pinned PyPI wheel flashinfer-python
# (pure Python + data, ~100 MB) is downloaded once and only two header trees are unpacked, with
# the wheel's LICENSE beside them:
#   flashinfer/data/include/                    → .deps/flashinfer/include   (FlashInfer's headers)
#   flashinfer/data/cccl/libcudacxx/include/    → .deps/flashinfer/cccl/include
# The second is the libcu++ (CCCL 3.6) the wheel ships and FlashInfer's headers need:
# flashinfer/fastdiv.cuh uses cuda::fast_mod_div from <cuda/cmath>, which CUDA 13.0's own CCCL
# (3.0) lacks; CMake puts it ahead of the toolkit's copy for bench_flashinfer_decode only.
# Idempotent: nothing is fetched when .deps/flashinfer/VERSION already names the pin.
# Never needed by the CPU build, the CUDA backend or CI.
#
#   bash scripts/fetch_flashinfer.sh
#   cmake -S . -B build-fi -G Ninja -DFP8LM_CUDA=ON -DFP8LM_FLASHINFER=ON
#   cmake --build build-fi --target bench_flashinfer_decode
set -euo pipefail
cd "$(dirname "$0")/.."

# The decode kernels used (attention/decode.cuh, attention/scheduler.cuh, page.cuh) need no
# more: not the wheel's CUTLASS, spdlog, CUB or Thrust copies.
flashinfer_version=0.7.4
if [[ $(cat .deps/flashinfer/VERSION 2>/dev/null) != "$flashinfer_version" || ! -f .deps/flashinfer/cccl/include/cuda/cmath ]]; then
  rm -rf .deps/flashinfer .deps/wheels-flashinfer
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    -d .deps/wheels-flashinfer "flashinfer-python==$flashinfer_version"
  python3 - "$flashinfer_version" <<'PY'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(".deps/wheels-flashinfer").glob("flashinfer_python-*.whl"))
parts = {"flashinfer/data/include/": "include/", "flashinfer/data/cccl/libcudacxx/include/": "cccl/include/"}
count = 0
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        for src, dst in parts.items():
            if name.startswith(src) and not name.endswith("/"):
                out = pathlib.Path(".deps/flashinfer") / dst / name[len(src):]
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(name))
                count += 1
        if name.endswith(".dist-info/licenses/LICENSE"):
            pathlib.Path(".deps/flashinfer").mkdir(parents=True, exist_ok=True)
            pathlib.Path(".deps/flashinfer/LICENSE").write_bytes(z.read(name))
for need in ("include/flashinfer/attention/decode.cuh", "cccl/include/cuda/cmath"):
    if not (pathlib.Path(".deps/flashinfer") / need).is_file():
        sys.exit(f"{wheel}: no {need} unpacked from the wheel")
pathlib.Path(".deps/flashinfer/VERSION").write_text(sys.argv[1])
print(f"{count} files from {wheel.name}")
PY
  rm -rf .deps/wheels-flashinfer
fi
echo "FlashInfer $flashinfer_version headers in .deps/flashinfer/include (its libcu++ in .deps/flashinfer/cccl/include)"
