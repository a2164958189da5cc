set -uo pipefail
source .gpu-bin/common.sh
TT=240 gtest test_cuda_moe
grep -E "^\[ (q|m|h|c|b)" $R/test_cuda_moe.log | head -20
TT=240 gtest test_cuda_attention
grep -E "FAILED|Failure" $R/test_cuda_attention.log | head -10
TT=200 gtest test_cuda_model
echo "all done $((SECONDS-t0))s"
