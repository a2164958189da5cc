#include "backend/cuda/gemm/cublaslt_gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <bit>
#include <functional>
#include <string>
#include <unordered_map>

#include "backend/cuda/common/check.h"
#include "common/error.h"

namespace fp8lm::cuda {
namespace {

constexpr int64_t kGroup = 128;
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool is_fp8(GemmScaleMode mode) { return mode != GemmScaleMode::kNone; }

// The largest power of two (up to 256) dividing the address; 256 for null.
uint32_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  if (v == 0) return 256;
  return uint32_t(std::min<uintptr_t>(256, uintptr_t(1) << std::countr_zero(v)));
}

std::string describe(const GemmArgs& a) {
  return std::string(name(a.mode)) + " GEMM m=" + std::to_string(a.m) + " n=" + std::to_string(a.n) +
         " k=" + std::to_string(a.k) + " (bias: " + (a.bias != nullptr ? "yes" : "no") + ")";
}

void check_status(cublasStatus_t status, const char* what, const GemmArgs& args) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error(std::string("cuBLASLt ") + what + " failed for the " + describe(args) + ": " +
                cublasLtGetStatusName(status) + " (" + cublasLtGetStatusString(status) + ")");
  }
}

// Everything the algorithm choice depends on.
struct PlanKey {
  int64_t m = 0, n = 0, k = 0;
  GemmScaleMode mode = GemmScaleMode::kNone;
  bool bias = false;
  uint32_t align_a = 0, align_b = 0, align_d = 0, align_bias = 0, align_sa = 0, align_sb = 0;
  bool operator==(const PlanKey&) const = default;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    size_t h = std::hash<int64_t>()(k.m);
    auto mix = [&h](uint64_t v) { h ^= std::hash<uint64_t>()(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
    mix(uint64_t(k.n));
    mix(uint64_t(k.k));
    mix(uint64_t(k.mode) | (uint64_t(k.bias) << 8));
    mix(uint64_t(k.align_a) | (uint64_t(k.align_b) << 16) | (uint64_t(k.align_d) << 32));
    mix(uint64_t(k.align_bias) | (uint64_t(k.align_sa) << 16) | (uint64_t(k.align_sb) << 32));
    return h;
  }
};

// The descriptors and the chosen algorithm of one shape. In cuBLASLt's
// column-major terms (see the header): A = weights [k, n] op T, B =
// activations [k, m] op N, C = D = output [n, m].
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
  std::string reason;  // why not ok

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (d != nullptr) (void)cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) (void)cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) (void)cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) (void)cublasLtMatmulDescDestroy(desc);
  }
};

template <typename T>
void set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value,
              const GemmArgs& args) {
  check_status(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)), "MatmulDescSetAttribute", args);
}

// A stand-in pointer with exactly the given alignment, for the heuristic
// (which reads pointers' alignment only, never what they point to).
const void* with_alignment(uint32_t align) { return reinterpret_cast<const void*>(uintptr_t(align)); }

}  // namespace

const char* name(GemmScaleMode mode) {
  switch (mode) {
    case GemmScaleMode::kNone: return "BF16";
    case GemmScaleMode::kTensor: return "FP8 per-tensor";
    case GemmScaleMode::kOuterVector: return "FP8 outer-vector (per-token x per-channel)";
    case GemmScaleMode::kBlock: return "FP8 block (1x128 x 128x128)";
  }
  return "?";
}

struct CublasLtGemm::Impl {
  size_t workspace_bytes = 0;
  std::unique_ptr<DeviceAllocator> own_allocator;
  DeviceAllocator* allocator = nullptr;
  cublasLtHandle_t handle = nullptr;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;

  struct Scratch {
    DeviceBuffer workspace, a_scales, b_scales;
  };
  std::unordered_map<cudaStream_t, Scratch> scratch;

  // Whether run() converts each scale grid (and so passes a 256-aligned scratch pointer).
  static bool converts_a(const GemmArgs& g) {
    return g.mode == GemmScaleMode::kBlock && !g.cublas_scale_layout && g.m > 1 && cdiv(g.k, kGroup) > 1;
  }
  static bool converts_b(const GemmArgs& g) {
    return g.mode == GemmScaleMode::kBlock && !g.cublas_scale_layout && cdiv(g.k, kGroup) % 4 != 0;
  }

  static PlanKey key_of(const GemmArgs& g) {
    PlanKey key;
    key.m = g.m;
    key.n = g.n;
    key.k = g.k;
    key.mode = g.mode;
    key.bias = g.bias != nullptr;
    key.align_a = alignment_of(g.a);
    key.align_b = alignment_of(g.b);
    key.align_d = alignment_of(g.d);
    key.align_bias = g.bias != nullptr ? alignment_of(g.bias) : 0;
    if (is_fp8(g.mode)) {
      key.align_sa = converts_a(g) ? 256 : alignment_of(g.a_scale);
      key.align_sb = converts_b(g) ? 256 : alignment_of(g.b_scale);
    }
    return key;
  }

  // supported() needs the shape only (pointers left null count as 256-byte
  // aligned); run() needs every pointer.
  static void validate(const GemmArgs& g, bool for_run) {
    if (g.m <= 0 || g.n <= 0 || g.k <= 0) throw Error("CublasLtGemm: the shape must be positive: " + describe(g));
    if (!is_fp8(g.mode) && (g.a_scale != nullptr || g.b_scale != nullptr)) {
      throw Error("CublasLtGemm: a BF16 GEMM takes no scales: " + describe(g));
    }
    if (!for_run) return;
    if (g.a == nullptr || g.b == nullptr || g.d == nullptr) {
      throw Error("CublasLtGemm: a, b and d must be device pointers: " + describe(g));
    }
    if (is_fp8(g.mode) && (g.a_scale == nullptr || g.b_scale == nullptr)) {
      throw Error("CublasLtGemm: FP8 needs a_scale and b_scale: " + describe(g));
    }
  }

  Plan& plan_for(const GemmArgs& g) {
    const PlanKey key = key_of(g);
    auto it = plans.find(key);
    if (it != plans.end()) return *it->second;
    auto plan = std::make_unique<Plan>();
    build(*plan, key, g);
    return *plans.emplace(key, std::move(plan)).first->second;
  }

  void build(Plan& p, const PlanKey& key, const GemmArgs& g) {
    const bool fp8 = is_fp8(key.mode);
    const cudaDataType_t in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    check_status(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate", g);
    set_attr(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, cublasOperation_t(CUBLAS_OP_T), g);
    set_attr(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, cublasOperation_t(CUBLAS_OP_N), g);
    if (fp8) {
      // cuBLAS's A is our weight (b), its B our activations (a).
      int32_t mode_w = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, mode_x = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
      if (key.mode == GemmScaleMode::kOuterVector) {
        mode_w = mode_x = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      } else if (key.mode == GemmScaleMode::kBlock) {
        mode_w = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
        mode_x = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      }
      set_attr(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode_w, g);
      set_attr(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode_x, g);
      set_attr(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, with_alignment(key.align_sb), g);
      set_attr(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, with_alignment(key.align_sa), g);
    }
    if (key.bias) {
      set_attr(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, cublasLtEpilogue_t(CUBLASLT_EPILOGUE_BIAS), g);
      set_attr(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(CUDA_R_16BF), g);
      set_attr(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, with_alignment(key.align_bias), g);
    }
    check_status(cublasLtMatrixLayoutCreate(&p.a, in_type, uint64_t(key.k), uint64_t(key.n), key.k), "MatrixLayoutCreate", g);
    check_status(cublasLtMatrixLayoutCreate(&p.b, in_type, uint64_t(key.k), uint64_t(key.m), key.k), "MatrixLayoutCreate", g);
    check_status(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_16BF, uint64_t(key.n), uint64_t(key.m), key.n), "MatrixLayoutCreate", g);

    cublasLtMatmulPreference_t pref = nullptr;
    check_status(cublasLtMatmulPreferenceCreate(&pref), "MatmulPreferenceCreate", g);
    struct PrefGuard {
      cublasLtMatmulPreference_t p;
      ~PrefGuard() { (void)cublasLtMatmulPreferenceDestroy(p); }
    } guard{pref};
    auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& v) {
      check_status(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v)), "MatmulPreferenceSetAttribute", g);
    };
    set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(workspace_bytes));
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b);  // cuBLAS's A = our weights
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a);
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d);
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);

    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &returned);
    if (st != CUBLAS_STATUS_SUCCESS) {
      p.reason = std::string(cublasLtGetStatusName(st)) + " from cublasLtMatmulAlgoGetHeuristic";
    } else if (returned == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
      p.reason = std::string(cublasLtGetStatusName(returned == 0 ? CUBLAS_STATUS_NOT_SUPPORTED : result.state)) +
                 " (the heuristic returned no algorithm)";
    } else if (result.workspaceSize > workspace_bytes) {
      p.reason = "CUBLAS_STATUS_INVALID_VALUE (the algorithm needs " + std::to_string(result.workspaceSize) +
                 " bytes of workspace, more than " + std::to_string(workspace_bytes) + ")";
    } else {
      p.algo = result.algo;
      p.ok = true;
    }
  }

  Scratch& scratch_for(cudaStream_t stream) {
    Scratch& s = scratch[stream];
    if (!s.workspace) s.workspace = DeviceBuffer(*allocator, workspace_bytes, stream);
    return s;
  }
};

CublasLtGemm::CublasLtGemm(size_t workspace_bytes, DeviceAllocator* allocator) : impl_(std::make_unique<Impl>()) {
  impl_->workspace_bytes = workspace_bytes;
  if (allocator == nullptr) {
    impl_->own_allocator = std::make_unique<DeviceAllocator>();
    allocator = impl_->own_allocator.get();
  }
  impl_->allocator = allocator;
  const cublasStatus_t st = cublasLtCreate(&impl_->handle);
  if (st != CUBLAS_STATUS_SUCCESS) {
    throw Error(std::string("cublasLtCreate failed: ") + cublasLtGetStatusName(st) + " (" +
                cublasLtGetStatusString(st) + ")");
  }
}

CublasLtGemm::~CublasLtGemm() {
  // The scratch buffers may still be in use by queued work on their streams
  // (which the caller may have destroyed already: synchronize the device).
  if (!impl_->scratch.empty()) (void)cudaDeviceSynchronize();
  impl_->scratch.clear();
  impl_->plans.clear();
  if (impl_->handle != nullptr) (void)cublasLtDestroy(impl_->handle);
}

bool CublasLtGemm::supported(const GemmArgs& args) {
  Impl::validate(args, false);
  return impl_->plan_for(args).ok;
}

std::string CublasLtGemm::unsupported_reason(const GemmArgs& args) {
  Impl::validate(args, false);
  return impl_->plan_for(args).reason;
}

size_t CublasLtGemm::cached_plans() const { return impl_->plans.size(); }

DeviceMemoryStats CublasLtGemm::memory_stats() const { return impl_->allocator->stats(); }

void CublasLtGemm::run(const GemmArgs& args, cudaStream_t stream) {
  Impl::validate(args, true);
  Plan& plan = impl_->plan_for(args);
  if (!plan.ok) throw Error("cuBLASLt has no algorithm for the " + describe(args) + ": " + plan.reason);

  Impl::Scratch& s = impl_->scratch_for(stream);
  if (is_fp8(args.mode)) {
    const float* sa = args.a_scale;  // activations: cuBLAS's B scale
    const float* sb = args.b_scale;  // weights: cuBLAS's A scale
    if (Impl::converts_a(args)) {
      const size_t bytes = size_t(args.m * cdiv(args.k, kGroup)) * sizeof(float);
      if (s.a_scales.bytes() < bytes) s.a_scales = DeviceBuffer(*impl_->allocator, bytes, stream);
      group_scales_to_cublas(args.a_scale, args.m, args.k, s.a_scales.as<float>(), stream);
      sa = s.a_scales.as<float>();
    }
    if (Impl::converts_b(args)) {
      const size_t bytes = size_t(cublas_block_scale_count(args.n, args.k)) * sizeof(float);
      if (s.b_scales.bytes() < bytes) s.b_scales = DeviceBuffer(*impl_->allocator, bytes, stream);
      block_scales_to_cublas(args.b_scale, args.n, args.k, s.b_scales.as<float>(), stream);
      sb = s.b_scales.as<float>();
    }
    set_attr(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, sb, args);
    set_attr(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, sa, args);
  }
  if (args.bias != nullptr) set_attr(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, args.bias, args);

  const float alpha = 1.0f, beta = 0.0f;
  check_status(cublasLtMatmul(impl_->handle, plan.desc, &alpha, args.b, plan.a, args.a, plan.b, &beta, args.d, plan.d,
                              args.d, plan.d, &plan.algo, s.workspace.get(), impl_->workspace_bytes, stream),
               "Matmul", args);
}

}  // namespace fp8lm::cuda
