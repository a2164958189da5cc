// How the CPU backend computes one linear layer, decided once from the weight's
// host description when it is uploaded (CpuOps::upload_linear) instead of on
// every call. plan_linear is the only place where the CPU backend maps a
// quantization scheme to a computation; linear() (backend/cpu/linear.h)
// executes the plan without deciding again.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "numerics/quantize.h"
#include "weights/element_type.h"
#include "weights/linear_weight.h"

namespace fp8lm::cpu {

struct LinearPlan {
  // kHighPrecision: BF16/F16/F32 weights converted to float32 a tile at a time.
  // kWeightOnly: FP8 weights dequantized per scale cell (W8A16).
  // kW8A8: FP8 weights and quantized input, scaled per K segment.
  enum class Path : uint8_t { kHighPrecision, kWeightOnly, kW8A8 } path = Path::kHighPrecision;
  ElementType weight = ElementType::kBF16;
  ScaleLayout weight_scales = ScaleLayout::tensor();  // FP8 only: the weight's scale grid
  int64_t weight_scale_width = 0;        // K width of one weight scale cell (0: whole row)
  std::optional<QuantSpec> x_quant;      // W8A8: E4M3 activation quantizer spec (tensor/token/group, rule)
  // kDynamic: scales from x; kStatic: the checkpoint's input_scale; kDynamicCapped:
  // per-token scales clamped to x_scale_cap (FBGEMM's activation_scale_upper_bound).
  enum class XScale : uint8_t { kDynamic, kStatic, kDynamicCapped } x_scale = XScale::kDynamic;
  float x_static_scale = 0.0f;           // kStatic (input_scale)
  float x_scale_cap = 0.0f;              // kDynamicCapped: upper_bound / max_finite (FBGEMM)
  int64_t segment = 0;                   // W8A8: weights::k_segment(w) (0: all of K)

  // One line, e.g. "w8a8 e4m3 w:block128x128 a:dynamic-group128 segment=128".
  std::string describe() const;
};

// Validates w (weights::validate, same errors) and decides how linear() computes with it.
LinearPlan plan_linear(const weights::LinearWeight& w);

}  // namespace fp8lm::cpu
