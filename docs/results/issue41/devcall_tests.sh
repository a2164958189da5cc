# Sourced by the issue-41 device scripts: ARCHIVE's programs into /tmp/f on the library path, the
# device's name into $R/device.txt, then test_cuda_persistent (all of it when the shipped model's
# weights come along compressed in .model — `mkdir -p .model && xz -T2 -6 -c
# models/fp8lm-gutenberg-22m/model.safetensors > .model/model.safetensors.xz`, carried — else the
# wide and architecture tests) within TESTS_S seconds; rc its exit status, ran() whether it did
# not hang (a failed scheme's test does not stop the others' timing).
archive=$1
mkdir -p /tmp/f; tar xJf "$archive" -C /tmp/f
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
export LD_LIBRARY_PATH=/tmp/f:$(dirname "${lt:-/usr/lib}"):${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/device.txt
filter='CudaPersistentWide.*:Architectures/*'
if [[ -f .model/model.safetensors.xz ]]; then
  xz -dc .model/model.safetensors.xz > models/fp8lm-gutenberg-22m/model.safetensors && filter='*'
fi
timeout ${TESTS_S:-120} /tmp/f/test_cuda_persistent --gtest_filter="$filter" > $R/t.log 2>&1; rc=$?
echo "tests exit $rc: $(grep -E '^\[  (PASSED|FAILED)' $R/t.log | tr '\n' ' ')" | tee $R/tests.txt
ran() { (( rc != 124 && rc < 128 )); }
