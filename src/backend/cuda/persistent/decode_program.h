// The persistent decode kernel (issue 41): a whole decode step of a dense Llama-family model as
// one launch of one CTA per SM, each CTA running its own queue of instructions — the per-layer
// q/k/v, o, gate/up and down GEMV tiles of 16 weight rows (gate/up: 8 gate rows and their 8 up
// rows; the norm and the FP8 quantization of a tile's input folded into its staging), attention
// per (row, KV head, context split) with RoPE, the K/V store and the merge of the splits, and the
// lm_head tiles. Instructions wait on counters in global memory for the phase they read (a tile of
// o needs every attention instruction of its layer) and bump their own phase's counter when done.
// A loader warp per CTA streams the weights of the CTA's next tiles into a ring of shared-memory
// slots (cp.async.bulk completing on mbarriers) as far ahead as the ring holds, across instruction
// and phase boundaries — weights are constants, so it loads the next phase's tiles while the 7
// consumer warps wait for that phase's input: the weight stream does not stop at a phase boundary
// the way it stops between the layered path's kernels.
//
// What it runs (decode_program_supports says why not, naming the first thing it refuses):
//   * linear layers in BF16, or FP8 E4M3 with a per-tensor or per-channel weight scale and a
//     dynamic per-token or static per-tensor activation scale (W8A8); k a multiple of 64 bytes;
//   * head_dim 32, 64 or 128, full rotary, optional q/k norm (Qwen3), optional sliding window;
//   * a BF16 or FP8 (E4M3 / E5M2) KV cache;
//   * 1 … kMaxRows rows (one decode token per sequence).
// Everything else takes the layered path (the engine's choice per step, cuda_ops_persistent.cpp).
//
// Numerics are the layered path's operations in the layered path's roundings: norms in double
// sums, BF16 outputs rounded once, the same FP8 quantization (quantize_device.cuh), the same
// E4M3 → FP16 expansion and tensor-core products (mma_fragments.cuh), SiLU·mul from
// numerics/silu.h, RoPE from norm_rope_device.cuh, the cache store of kv_store_device.cuh.
// Orders of summation differ (K split over 7 warps, attention over context splits), so results
// agree with the layered path within the GEMV and attention tests' float32 bounds, not bit for bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/quant/scale_rule.h"

namespace fp8lm::cuda::persistent {

inline constexpr int kMaxRows = 8;     // one MMA's 8 activation columns
inline constexpr int kTileRows = 16;   // weight rows per GEMV tile (one MMA's rows)
// 7 consumer warps and the loader warp a CTA: 256 threads keep 255 registers a thread (288 would
// leave 168, and attention's state spills).
inline constexpr int kThreads = 224;  // the consumer warps
inline constexpr int kBlockThreads = kThreads + 32;
inline constexpr int kMaxSlots = 16;   // the weight ring's slots at most
inline constexpr size_t kSharedLimit = 225 * 1024;  // dynamic shared memory a CTA asks at most (the profiling build
                                                     // has ~1.3 KB of static shared memory beside it: 227 KB in all)
inline constexpr int kMaxGroup = 8;    // query heads per KV head the attention instruction holds
// Context splits per (row, KV head) at most: the merge stages them all in shared memory, where
// staging_bytes makes room for this many attention states.
inline constexpr int kMaxSplits = 16;

// A linear layer as the kernel reads it: W [n, k] row-major, BF16 or E4M3 codes.
struct DeviceLinear {
  const void* w = nullptr;
  const float* w_scale = nullptr;       // FP8: [n] per output row, or [1] (w_scale_per_row false)
  const float* static_x_scale = nullptr;  // FP8 static activation scale [1]; null: dynamic per token
  const __nv_bfloat16* bias = nullptr;  // [n] or null
  int32_t n = 0, k = 0;
  bool fp8 = false;
  bool w_scale_per_row = false;
  Fp8ScaleRule rule;  // dynamic activation scales
  // W as the loader copies it: a CUtensorMap on the device (2-D, 8-byte elements, boxes of 8
  // rows × page_steps · 64 bytes, zeros past K), and the 64-byte steps of K a page holds.
  const void* map = nullptr;
  int32_t page_steps = 0;
};

// Bytes of one weight row: what a tile streams a row, and what a staged input row holds.
constexpr int64_t row_bytes(const DeviceLinear& l) { return int64_t(l.k) * (l.fp8 ? 1 : 2); }

// A GEMV tile's pages: its K in pages of page_steps(steps) 64-byte steps, the last one short.
// page_steps is odd, so that a page's rows lie an odd number of 64-byte steps apart and rows g and
// g + 1 of a consumer's 16-byte reads fall in different halves of the banks (v6's 10-step pages
// made them collide: 2-way conflicts, 43 % of the shared-memory wavefronts). The consumer warps
// take a CTA's pages in turn (page q of the ring to warp q mod 7), whatever the tile. One geometry
// per linear layer, because a tensor map's box is fixed.
inline constexpr int kMaxPageSteps = 15;  // 960 bytes of a row a page at most
__host__ __device__ constexpr int page_steps(int steps) { return steps >= kMaxPageSteps ? kMaxPageSteps : (steps | 1); }
__host__ __device__ constexpr int tile_pages(int steps) { return (steps + page_steps(steps) - 1) / page_steps(steps); }

struct DeviceLayer {
  const float* input_norm = nullptr;
  const float* post_norm = nullptr;
  const float* q_norm = nullptr;  // null: no q/k norm
  const float* k_norm = nullptr;
  DeviceLinear qkv, o, gate_up, down;  // qkv: q, k, v rows stacked; gate_up: gate rows, then up rows
  void* k_cache = nullptr;  // [num_blocks][kv_heads][block_size][head_dim]
  void* v_cache = nullptr;
  int32_t kv_element = 0;   // backend::KvElement
  float k_scale = 1.0f, v_scale = 1.0f;
  int32_t window = 0;       // sliding window (0: none)
};

enum class Op : uint8_t { kQkv, kAttention, kO, kGateUp, kDown, kLmHead };
inline constexpr int kPhasesPerLayer = 5;  // qkv, attention, o, gate/up, down

// One instruction: a GEMV tile (a = tile) or an attention split (a = row, b = KV head, c = split).
struct Instruction {
  uint8_t op = 0;
  uint8_t pad = 0;
  uint16_t layer = 0;
  int32_t a = 0, b = 0, c = 0;
};

// The instruction list of one step shape and the CTAs' queues (built on the host once per row
// count): instructions in phase order, each CTA's queue a list of indices into them, in order.
struct Schedule {
  std::vector<Instruction> instructions;
  std::vector<int32_t> queue_start;  // [ctas + 1]
  std::vector<int32_t> queue;
  int ctas = 0;
  int attention_splits = 0;
  // Instructions per phase of a layer (qkv, attention, o, gate/up, down), and lm_head tiles:
  // what a phase's counter reaches when the phase is done.
  int32_t phase_count[kPhasesPerLayer] = {};
  int32_t lm_head_tiles = 0;
};

struct ModelShape {
  int layers = 0;
  int hidden = 0, intermediate = 0, vocab = 0;
  int q_heads = 0, kv_heads = 0, head_dim = 0;
};

// The instruction list and queues for `rows` rows on `ctas` CTAs: every phase's instructions
// dealt round-robin, each phase starting where the last one ended, so that the CTAs' totals stay
// within one tile of each other over the step. Attention takes
// splits (at most 16) per (row, KV head): ctas / (rows · kv_heads), so attention is one wave.
Schedule build_schedule(const ModelShape& shape, int rows, int ctas);

// Everything one launch reads. Device pointers.
struct Params {
  const DeviceLayer* layers = nullptr;
  const Instruction* instructions = nullptr;
  const int32_t* queue_start = nullptr;
  const int32_t* queue = nullptr;
  unsigned* counters = nullptr;  // counter_count(shape) of them
  __nv_bfloat16* h = nullptr;       // [rows, hidden]: the embedding rows in, the residual stream
  __nv_bfloat16* qkv = nullptr;     // [rows, (q_heads + 2 kv_heads) head_dim]
  __nv_bfloat16* attn = nullptr;    // [rows, q_heads head_dim]
  __nv_bfloat16* act = nullptr;     // [rows, intermediate]
  __nv_bfloat16* logits = nullptr;  // [rows, vocab]
  float* partials = nullptr;        // [rows, kv_heads, splits, group · (head_dim + 2) padded to 4]
  DeviceLinear lm_head;
  const float* final_norm = nullptr;
  const int32_t* row_seq = nullptr;
  const int32_t* row_position = nullptr;
  const int32_t* block_tables = nullptr;
  int32_t max_blocks_per_seq = 0, block_size = 0;
  const float* rope_inv_freq = nullptr;
  float rope_attention_factor = 1.0f;
  float eps = 0.0f;
  float attention_scale = 1.0f;
  ModelShape shape;
  int32_t rows = 0;
  int32_t splits = 0;
  int32_t slots = 0;         // the weight ring's slots (2 … kMaxSlots)
  int32_t slots_offset = 0;  // where they start in dynamic shared memory (staging_bytes)
  int32_t phase_count[kPhasesPerLayer] = {};
  // Non-null: the kernel's own timers (a separate instantiation), [ctas][kProfileKinds]
  // [kProfileParts] nanoseconds and counts — see Profile below.
  unsigned long long* profile = nullptr;
};

// The kernel's own timers (bench latency --profile): per CTA and instruction kind (the Op values,
// then the end: the last counts and the exit), the time its thread 0 spent waiting for the
// instruction's input phase, staging the input, doing the work (products, epilogue, barrier),
// and how many such instructions it ran. Kind kProfileRing is the weight ring's, inside those:
// thread 0's waits for its pages to land (within the tiles' work), the loader's waits for a free
// slot, the loader's run from the start to its last page issued, and the pages it issued.
inline constexpr int kProfileKinds = 8;
inline constexpr int kProfileParts = 4;  // wait, stage, work, count
inline constexpr int kProfileRing = 6;
inline constexpr const char* kProfileKindNames[kProfileKinds] = {
    "qkv tiles", "attention", "o tiles", "gate/up tiles", "down tiles", "lm_head tiles", "weight ring", "end of step"};

// Counters a launch uses: one per (layer, phase), the attention merges' per (row, KV head), the
// row amaxes of attn and act per layer (their producers', for the W8A8 tiles that read them), and
// the launch's own end count. Zero before the first launch; every launch leaves them zero.
int64_t counter_count(const ModelShape& shape);
// Floats of Params::partials.
int64_t partial_floats(const ModelShape& shape, int rows, int splits);
// Dynamic shared memory a launch takes before its weight ring (Params::slots_offset): a tile's
// reduction area, then the staged activations of the widest input (`row_bytes`: the largest
// k · element bytes of the step's linear layers) or attention's state if larger. Then
// Params::slots slots of ring_slot_bytes() each: as many as kSharedLimit leaves, up to kMaxSlots;
// the kernel needs 2 at least.
size_t staging_bytes(const ModelShape& shape, int rows, int64_t row_bytes);
size_t ring_slot_bytes();
// The first thing this shape or linear layer needs that the kernel does not run, or empty.
std::string unsupported_linear(const DeviceLinear& l, const char* what);
std::string unsupported_shape(const ModelShape& shape, int rows);

// How many CTAs of the kernel one SM holds with `smem` dynamic bytes (cudaOccupancy…): the
// schedule's CTAs are SMs × this, all resident at once (the counters' waits need that).
int ctas_per_sm(size_t smem);

// Runs one step on `stream`. The embedding rows must be in p.h.
void launch(const Params& p, int ctas, size_t smem, cudaStream_t stream);

}  // namespace fp8lm::cuda::persistent
