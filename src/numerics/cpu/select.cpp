// Run-time choice between the kernel tables compiled into this binary.
#include "numerics/cpu/select.h"

#include "numerics/cpu/kernels.h"

namespace fp8lm::cpu {

#if !defined(FP8LM_HAVE_AVX2)
const KernelTable* avx2_kernels() { return nullptr; }
#endif
#if !defined(FP8LM_HAVE_AVX512)
const KernelTable* avx512_kernels() { return nullptr; }
#endif

const KernelTable& select_kernels(KernelChoice choice) {
  return select_table(choice, scalar_kernels(), avx2_kernels(), avx512_kernels(), "CPU kernels", "AVX2",
                      "AVX-512F/BW");
}

std::vector<std::string_view> available_kernels() {
  std::vector<std::string_view> names{scalar_kernels().name};
  if (const KernelTable* t = avx2_kernels()) names.push_back(t->name);
  if (const KernelTable* t = avx512_kernels()) names.push_back(t->name);
  return names;
}

}  // namespace fp8lm::cpu
