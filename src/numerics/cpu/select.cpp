// Run-time choice between the kernel tables compiled into this binary.
#include <string>

#include "common/error.h"
#include "numerics/cpu/kernels.h"

namespace fp8lm::cpu {

#if !defined(FP8LM_HAVE_AVX2)
const KernelTable* avx2_kernels() { return nullptr; }
#endif
#if !defined(FP8LM_HAVE_AVX512)
const KernelTable* avx512_kernels() { return nullptr; }
#endif

const KernelTable& select_kernels(KernelChoice choice) {
  switch (choice) {
    case KernelChoice::kScalar:
      return scalar_kernels();
    case KernelChoice::kAvx2:
      if (const KernelTable* t = avx2_kernels()) return *t;
      throw Error("CPU kernels 'avx2' requested, but this CPU or build lacks AVX2");
    case KernelChoice::kAvx512:
      if (const KernelTable* t = avx512_kernels()) return *t;
      throw Error("CPU kernels 'avx512' requested, but this CPU or build lacks AVX-512F/BW");
    case KernelChoice::kAuto:
      break;
  }
  if (const KernelTable* t = avx512_kernels()) return *t;
  if (const KernelTable* t = avx2_kernels()) return *t;
  return scalar_kernels();
}

std::vector<std::string_view> available_kernels() {
  std::vector<std::string_view> names{scalar_kernels().name};
  if (const KernelTable* t = avx2_kernels()) names.push_back(t->name);
  if (const KernelTable* t = avx512_kernels()) names.push_back(t->name);
  return names;
}

}  // namespace fp8lm::cpu
