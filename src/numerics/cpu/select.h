// The one run-time choice between instruction-set variants of a table of CPU
// loops. The numerics kernels (select_kernels) and the linear layer's loops
// (backend/cpu select_linear_kernels) both go through it, so "auto" means the
// same thing for both and an explicit choice fails the same way.
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"
#include "numerics/kernel_choice.h"

namespace fp8lm::cpu {

// avx2 / avx512: nullptr when that table is not compiled in or this CPU lacks
// its instructions. kAuto = the widest available. An explicit choice that is
// not available throws "<what> '<choice>' requested, but this CPU or build
// lacks <needs>".
template <class Table>
const Table& select_table(KernelChoice choice, const Table& scalar, const Table* avx2, const Table* avx512,
                          std::string_view what, std::string_view avx2_needs, std::string_view avx512_needs) {
  auto missing = [&](std::string_view name, std::string_view needs) {
    return Error(std::string(what) + " '" + std::string(name) + "' requested, but this CPU or build lacks " +
                 std::string(needs));
  };
  switch (choice) {
    case KernelChoice::kScalar:
      return scalar;
    case KernelChoice::kAvx2:
      if (avx2 != nullptr) return *avx2;
      throw missing("avx2", avx2_needs);
    case KernelChoice::kAvx512:
      if (avx512 != nullptr) return *avx512;
      throw missing("avx512", avx512_needs);
    case KernelChoice::kAuto:
      break;
  }
  if (avx512 != nullptr) return *avx512;
  if (avx2 != nullptr) return *avx2;
  return scalar;
}

}  // namespace fp8lm::cpu
