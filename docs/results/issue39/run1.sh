# Issue 39 on the GPU: the CUDA sampling kernel refuses a bad row alone (kNoToken) and saturates
# penalties and temperature as the host does; the model tests (engine-level sampling on the device).
# Binaries: build-cuda/ (-DFP8LM_CUDA=ON) test_cuda_sampling, test_cuda_model, fp8lm, stripped with
# the libraries a CUDA image lacks into gpu-pack.tar.xz (as scripts/pack_gpu_binaries.sh does).
set -u
mkdir -p /tmp/b && tar xJf gpu-pack.tar.xz -C /tmp/b
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
[[ -n $lt ]] || lt=$(find / -name 'libcublasLt.so*' -not -path '*/proc/*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=/tmp/b:$(dirname "${lt:-/usr/lib}"):${LD_LIBRARY_PATH:-}
# The tests read their fixtures from the source directory they were built in.
[[ -e /work/main ]] || { mkdir -p /work && ln -s "$PWD" /work/main; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
R=${OUT:-/tmp/out}
for t in test_cuda_sampling test_cuda_model; do
  timeout 240 /tmp/b/$t > $R/$t.log 2>&1
  echo "$t exit $?: $(grep -E '^\[  (PASSED|FAILED)  \]|FAILED TEST' $R/$t.log | tr '\n' ' ')"
done
grep -E "^\[  FAILED|Failure" -A5 $R/*.log | head -40
