#include "backend/cuda/cuda_ops.h"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/cuda/common/check.h"
#include "backend/cuda/gemm/cublaslt_gemm.h"
#include "backend/cuda/cuda_ops_impl.h"
#include "backend/cuda/cuda_ops_kernels.h"
#include "backend/cuda/gemm/cutlass_fp8_gemm.h"
#include "backend/cuda/device_info.h"
#include "backend/cuda/common/env_switch.h"
#include "backend/cuda/gemv/fp8_gemv.h"
#include "backend/cuda/linear_plan.h"
#include "backend/cuda/elementwise/model_kernels.h"
#include "backend/cuda/attention/paged_attention.h"
#include "backend/cuda/attention/qkv_rope_kernels.h"
#include "backend/cuda/quant/quant_kernels.h"
#include "backend/cuda/common/stream.h"
#include "common/error.h"
#include "numerics/fp8_format.h"

namespace fp8lm::cuda {
namespace {

// F16 / F32 weights as BF16 bytes on the host, rounded to nearest even (BF16 ones upload as they are).
// The conversion to float32 is exact, so the scalar loop gives the bits a vector one would.
std::vector<uint16_t> to_bf16_host(const weights::LinearWeight& w) {
  const int64_t count = w.n * w.k;
  std::vector<uint16_t> out(static_cast<size_t>(count));
  const int64_t width = int64_t(element_bytes(w.element));
  std::vector<float> row(static_cast<size_t>(w.k));
  for (int64_t r = 0; r < w.n; ++r) {
    to_float(static_cast<const std::byte*>(w.data) + r * w.k * width, w.element, w.k, row.data());
    for (int64_t i = 0; i < w.k; ++i) out[size_t(r * w.k + i)] = float_to_bf16(row[size_t(i)]);
  }
  return out;
}

}  // namespace

CudaOps::CudaOps(CudaOpsOptions options) : impl_(std::make_unique<Impl>()) {
  const DeviceList list = list_devices();
  if (list.devices.empty()) throw Error("cuda: no CUDA device: " + list.unavailable_reason);
  if (options.device < 0 || options.device >= int(list.devices.size()))
    throw Error("cuda: device " + std::to_string(options.device) + " does not exist (" +
                std::to_string(list.devices.size()) + " found)");
  if (!list.devices[size_t(options.device)].runs_this_build())
    throw Error("cuda: device " + std::to_string(options.device) + " (" + list.devices[size_t(options.device)].name +
                ") is not a GPU this build runs on (it needs Hopper, sm_90)");
  FP8LM_CUDA_CHECK(cudaSetDevice(options.device));
  impl_->options = options;
  const char* profile = std::getenv("FP8LM_CUDA_PROFILE");
  impl_->profile_env = profile != nullptr && *profile != '\0' && *profile != '0';
  if (impl_->profile_env) impl_->options.cuda_graphs = false;
  impl_->stream = Stream();
  impl_->gemm = std::make_unique<CublasLtGemm>(size_t(64) << 20, &impl_->allocator);
  impl_->fused_merge = env_switch_on("FP8LM_CUDA_FUSED_MERGE");
  impl_->cutlass_measured = env_switch_on("FP8LM_CUDA_CUTLASS");
  impl_->attention_counters = DeviceBuffer(impl_->allocator, size_t(kAttentionMergeCounters) * 4, impl_->stream);
  FP8LM_CUDA_CHECK(cudaMemsetAsync(impl_->attention_counters.get(), 0, impl_->attention_counters.bytes(), impl_->stream));
}

CudaOps::~CudaOps() {
  (void)cudaStreamSynchronize(impl_->stream);
  if (impl_->step_start != nullptr) (void)cudaEventDestroy(impl_->step_start);
  if (impl_->step_end != nullptr) (void)cudaEventDestroy(impl_->step_end);
  if (impl_->handoff != nullptr) (void)cudaEventDestroy(impl_->handoff);
}

std::string CudaOps::name() const {
  const DeviceList list = list_devices();
  std::string dev = list.devices.empty() ? "?" : list.devices[size_t(impl_->options.device)].name;
  return "cuda:" + std::to_string(impl_->options.device) + " (" + dev + ")";
}

// ---- weights ------------------------------------------------------------------------------

// The elements of `parts` stacked along n into one device buffer, each part copied to its rows
// straight from its host memory (a fused weight is never built on the host: for Llama-3.1-70B
// that was 44 GB of single-threaded copying at load). FP8 codes as they are; high-precision
// parts as BF16 (a BF16 part as it is, others converted).
static DeviceBuffer upload_rows(DeviceAllocator& a, std::span<const weights::LinearWeight> parts, bool fp8,
                                cudaStream_t s) {
  const size_t width = fp8 ? 1 : 2;
  int64_t n = 0;
  for (const weights::LinearWeight& p : parts) n += p.n;
  DeviceBuffer b(a, std::max<size_t>(size_t(n * parts[0].k) * width, 1), s);
  auto* at = static_cast<std::byte*>(b.get());
  for (const weights::LinearWeight& p : parts) {
    const size_t bytes = size_t(p.n * p.k) * width;
    if (fp8 || p.element == ElementType::kBF16) {
      FP8LM_CUDA_CHECK(cudaMemcpyAsync(at, p.data, bytes, cudaMemcpyHostToDevice, s));
    } else {
      const std::vector<uint16_t> host = to_bf16_host(p);
      FP8LM_CUDA_CHECK(cudaMemcpyAsync(at, host.data(), bytes, cudaMemcpyHostToDevice, s));
      FP8LM_CUDA_CHECK(cudaStreamSynchronize(s));  // before `host` goes
    }
    at += bytes;
  }
  FP8LM_CUDA_CHECK(cudaStreamSynchronize(s));  // the host data may go away after upload
  return b;
}

std::unique_ptr<backend::Weight> CudaOps::upload_vector(std::vector<float> values) {
  auto w = std::make_unique<VectorWeight>();
  w->size = int64_t(values.size());
  w->values = upload(impl_->allocator, values.data(), values.size(), impl_->stream);
  return w;
}

std::unique_ptr<backend::Weight> CudaOps::upload_embedding(const weights::LinearWeight& t) {
  weights::validate(t);
  auto e = std::make_unique<EmbeddingWeight>();
  e->vocab = t.n;
  e->dim = t.k;
  if (t.is_fp8()) {
    if (t.scale_layout.granularity != Granularity::kChannel)
      throw Error("cuda ops: an FP8 embedding table needs one scale per row");
    e->fp8 = true;
    e->format = t.format();
    e->table = upload(impl_->allocator, static_cast<const uint8_t*>(t.data), size_t(t.n * t.k), impl_->stream);
    e->row_scales = upload(impl_->allocator, t.scales.data(), t.scales.size(), impl_->stream);
  } else {
    e->table = upload_rows(impl_->allocator, std::span(&t, 1), false, impl_->stream);
  }
  return e;
}

std::unique_ptr<backend::Weight> CudaOps::upload_linear(const weights::LinearWeight& w) {
  return upload_linear_rows(w, std::span(&w, 1));
}

std::unique_ptr<backend::Weight> CudaOps::upload_linear_rows(const weights::LinearWeight& w,
                                                             std::span<const weights::LinearWeight> parts) {
  for (const weights::LinearWeight& part : parts) weights::validate(part);
  auto l = std::make_unique<LinearWeight>();
  l->plan = plan_linear(w);
  l->n = w.n;
  l->k = w.k;
  const LinearPlan& p = l->plan;
  cudaStream_t s = impl_->stream;
  DeviceAllocator& a = impl_->allocator;
  if (impl_->profiling()) ++impl_->linear_plans[std::to_string(w.n) + "x" + std::to_string(w.k) + "  " + p.describe()];
  if (!w.bias.empty()) {
    std::vector<uint16_t> b(w.bias.size());
    for (size_t i = 0; i < b.size(); ++i) b[i] = float_to_bf16(w.bias[i]);
    l->bias = upload(a, b.data(), b.size(), s);
  }
  l->w = upload_rows(a, parts, p.fp8, s);
  if (!p.fp8) return l;
  l->w_scale = upload(a, w.scales.data(), w.scales.size(), s);
  if (p.activation == ActivationQuant::kStaticTensor) {
    l->static_scale = upload(a, &w.input_scale, 1, s);
    l->plan.act_quant.static_scale = l->static_scale.as<float>();
  }
  // The scale grids cuBLASLt's mode wants besides the GEMV's.
  if (p.gemm_channel_scales) {
    std::vector<float> channel(size_t(w.n), w.scales[0]);
    if (w.scale_layout.granularity == Granularity::kChannel) channel = w.scales;
    l->w_scale_gemm = upload(a, channel.data(), channel.size(), s);
  } else if (p.gemm_cublas_block_scales) {
    l->w_scale_gemm = DeviceBuffer(a, size_t(cublas_block_scale_count(w.n, w.k)) * 4, s);
    block_scales_to_cublas(l->w_scale.as<float>(), w.n, w.k, l->w_scale_gemm.as<float>(), s);
    FP8LM_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  return l;
}

std::unique_ptr<backend::Weight> CudaOps::upload_fused_linear(std::span<const weights::LinearWeight> parts) {
  if (!can_fuse(parts)) return nullptr;
  // The stack's sizes, scales and bias on the host; its elements go to the device part by part.
  return upload_linear_rows(weights::stack_rows(parts), parts);
}

std::string CudaOps::describe(const backend::Weight& weight) const {
  const auto* l = dynamic_cast<const LinearWeight*>(&weight);
  return l == nullptr ? std::string() : l->plan.describe();
}

std::unique_ptr<backend::KvCache> CudaOps::make_kv_cache(const backend::KvCacheShape& shape,
                                                         std::vector<backend::KvLayerFormat> layers) {
  if (shape.num_layers <= 0 || shape.num_kv_heads <= 0 || shape.head_dim <= 0 || shape.block_size <= 0 ||
      shape.num_blocks <= 0)
    throw Error("cuda ops: the KV cache's sizes must be positive");
  if (int(layers.size()) != shape.num_layers)
    throw Error("cuda ops: " + std::to_string(layers.size()) + " KV layer formats for " +
                std::to_string(shape.num_layers) + " layers");
  impl_->drop_graphs();  // recorded steps point at the cache they ran on
  auto c = std::make_unique<CudaKvCache>();
  c->shape_ = shape;
  const size_t per_block_elems = size_t(shape.num_kv_heads) * size_t(shape.block_size) * size_t(shape.head_dim);
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const backend::KvLayerFormat& f : layers) {
    // F16 is an element type of weights; no KV-cache kernel reads or writes it.
    if (f.element == backend::KvElement::kF16) throw Error("cuda ops: a KV layer of element type f16 is not supported");
    if (kv_bytes(f.element) == 1 && !(f.k_scale > 0.0f && f.v_scale > 0.0f && std::isfinite(f.k_scale) &&
                                      std::isfinite(f.v_scale)))
      throw Error("cuda ops: an FP8 KV layer's scales must be finite and positive");
    offsets.push_back(total);
    total += 2 * align_up(per_block_elems * size_t(shape.num_blocks) * kv_bytes(f.element));
  }
  c->storage = DeviceBuffer(impl_->allocator, total, impl_->stream);
  FP8LM_CUDA_CHECK(cudaMemsetAsync(c->storage.get(), 0, total, impl_->stream));
  for (size_t i = 0; i < layers.size(); ++i) {
    const size_t half = align_up(per_block_elems * size_t(shape.num_blocks) * kv_bytes(layers[i].element));
    char* base = c->storage.as<char>() + offsets[i];
    c->layers.push_back({base, base + half, layers[i].element, layers[i].k_scale, layers[i].v_scale});
  }
  c->formats = std::move(layers);
  impl_->block_size = shape.block_size;
  c->bytes_ = total;
  FP8LM_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
  return c;
}

// ---- scratch and steps ----------------------------------------------------------------------

backend::Tensor CudaOps::alloc(int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0) throw Error("cuda ops: negative tensor shape");
  return {impl_->take(size_t(rows * cols) * sizeof(bf16)), rows, cols};
}

void CudaOps::reset_scratch() {
  impl_->scratch.reset();
  impl_->prequantized = {};
}

void CudaOps::begin_step(const backend::StepInputs& st) {
  Impl& m = *impl_;
  m.step = st;
  m.stored_kv = {};
  m.prequantized = {};
  const auto rows = int64_t(st.ids.size());
  const auto seqs = int64_t(st.sequences.size());
  if (int64_t(st.positions.size()) != rows) throw Error("cuda ops: one position per row is needed");
  int64_t max_blocks = 1, max_new = 1, max_ctx = 1;
  int64_t max_decode_new = 0;  // over the sequences the decode kernels take
  for (const backend::AttentionSequence& s : st.sequences) {
    max_blocks = std::max<int64_t>(max_blocks, int64_t(s.block_table.size()));
    max_new = std::max(max_new, s.num_tokens);
    if (s.num_tokens <= kDecodeMaxNewTokens) max_decode_new = std::max(max_decode_new, s.num_tokens);
    max_ctx = std::max(max_ctx, s.start_position + s.num_tokens);
  }
  // Block tables are padded to a power of two ≥ 32 blocks, so that decode steps
  // of one batch size share a recorded graph over a range of contexts.
  int64_t bucket = 32;
  while (bucket < max_blocks) bucket *= 2;
  m.context_bucket = bucket;
  const size_t need = size_t(rows * 3 + seqs * 3 + seqs * bucket + int64_t(st.logit_rows.size()));
  if (need > m.meta_capacity) {
    m.drop_graphs();  // they read the old buffers
    const size_t cap = std::max(need * 2, size_t(1) << 16);
    FP8LM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
    m.meta = DeviceBuffer(m.allocator, cap * 4, m.stream);
    if (m.meta_host != nullptr) FP8LM_CUDA_CHECK(cudaFreeHost(m.meta_host));
    void* p = nullptr;
    FP8LM_CUDA_CHECK(cudaMallocHost(&p, cap * 4));
    m.meta_host = static_cast<int32_t*>(p);
    m.meta_capacity = cap;
  }
  int32_t* h = m.meta_host;
  int32_t* d = m.meta.as<int32_t>();
  size_t at = 0;
  auto section = [&](size_t n) {
    const size_t start = at;
    at += n;
    return start;
  };
  const size_t o_ids = section(size_t(rows)), o_pos = section(size_t(rows)), o_rs = section(size_t(rows));
  const size_t o_first = section(size_t(seqs)), o_num = section(size_t(seqs)), o_start = section(size_t(seqs));
  const size_t o_bt = section(size_t(seqs * bucket)), o_logit = section(st.logit_rows.size());
  for (int64_t r = 0; r < rows; ++r) {
    h[o_ids + size_t(r)] = st.ids[size_t(r)];
    h[o_pos + size_t(r)] = int32_t(st.positions[size_t(r)]);
  }
  for (int64_t i = 0; i < seqs; ++i) {
    const backend::AttentionSequence& s = st.sequences[size_t(i)];
    h[o_first + size_t(i)] = int32_t(s.first_row);
    h[o_num + size_t(i)] = int32_t(s.num_tokens);
    h[o_start + size_t(i)] = int32_t(s.start_position);
    for (int64_t r = s.first_row; r < s.first_row + s.num_tokens; ++r) h[o_rs + size_t(r)] = int32_t(i);
    int32_t* bt = h + o_bt + size_t(i * bucket);
    for (int64_t b = 0; b < bucket; ++b)
      bt[b] = b < int64_t(s.block_table.size()) ? int32_t(s.block_table[size_t(b)]) : 0;
  }
  for (size_t i = 0; i < st.logit_rows.size(); ++i) h[o_logit + i] = int32_t(st.logit_rows[i]);
  m.open_step();  // the step's device time starts with its metadata (device_step_seconds)
  FP8LM_CUDA_CHECK(cudaMemcpyAsync(d, h, at * 4, cudaMemcpyHostToDevice, m.stream));

  m.d_ids = d + o_ids;
  m.d_logit_rows = d + o_logit;
  DeviceAttentionBatch& b = m.batch;
  b.num_seqs = int(seqs);
  b.num_rows = rows;
  b.row_seq = d + o_rs;
  b.row_position = d + o_pos;
  b.seq_first_row = d + o_first;
  b.seq_num_tokens = d + o_num;
  b.seq_start_position = d + o_start;
  b.block_tables = d + o_bt;
  b.max_blocks_per_seq = int(bucket);
  b.max_new_tokens = int(max_new);
  b.max_context = int(max_ctx);
  b.max_decode_new_tokens = int(max_decode_new);
}

bool CudaOps::pads_decode_batches() const { return impl_->options.cuda_graphs && !impl_->profiling(); }

backend::Tensor CudaOps::run_step(uint64_t key, const std::function<backend::Tensor()>& body) {
  Impl& m = *impl_;
  if (key == 0 || !m.options.cuda_graphs || m.profiling()) return body();  // timed ops run one by one
  if (m.link != nullptr && !m.link->capturable()) return body();
  // A recorded step's attention is sized for the whole bucket of contexts.
  m.batch.max_context = int(m.context_bucket * m.block_size);
  const uint64_t full_key = key ^ (uint64_t(m.context_bucket) << 40);
  Impl::Graph& g = m.graphs[full_key];
  if (g.exec != nullptr) {
    FP8LM_CUDA_CHECK(cudaGraphLaunch(g.exec, m.stream));
    ++m.replays;
    m.scratch.release(g.scratch_end);
    return g.out;
  }
  if (++g.seen == 1) return body();  // the first time runs directly: cuBLASLt plans, workspaces, scratch
  cudaGraph_t graph = nullptr;
  FP8LM_CUDA_CHECK(cudaStreamBeginCapture(m.stream, cudaStreamCaptureModeRelaxed));
  m.capturing = true;
  Tensor out;
  try {
    out = body();
  } catch (...) {
    m.capturing = false;
    (void)cudaStreamEndCapture(m.stream, &graph);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    throw;
  }
  m.capturing = false;
  FP8LM_CUDA_CHECK(cudaStreamEndCapture(m.stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  FP8LM_CUDA_CHECK(err);
  Impl::Graph& slot = m.graphs[full_key];  // body() may have dropped graphs (a buffer grew)
  slot.seen = 2;
  slot.exec = exec;
  slot.out = out;
  slot.scratch_end = m.scratch.mark();
  FP8LM_CUDA_CHECK(cudaGraphLaunch(exec, m.stream));
  return out;
}

// ---- ops --------------------------------------------------------------------------------------

void CudaOps::embedding(const backend::Weight& table, Tensor out) {
  OpTimer timer(*impl_, "embedding", out.rows);
  const EmbeddingWeight& e = as<EmbeddingWeight>(table, "embedding table");
  require_shape(out, impl_->batch.num_rows, e.dim, "embedding");
  if (e.fp8)
    embedding_fp8(e.table.as<uint8_t>(), e.row_scales.as<float>(), e.format, impl_->d_ids, out.rows, e.dim, B(out),
                  impl_->stream, e.vocab);
  else
    embedding_bf16(e.table.as<bf16>(), impl_->d_ids, out.rows, e.dim, B(out), impl_->stream, e.vocab);
}

void CudaOps::join_group(std::unique_ptr<RankLink> link) {
  if (link == nullptr || link->rank() < 0 || link->rank() >= link->size())
    throw Error("cuda ops: join_group needs a link with a rank in [0, size)");
  impl_->link = std::move(link);
}

namespace {

RankLink& link_of(CudaOps::Impl& m, const char* op) {
  if (m.link == nullptr) throw Error(std::string("cuda ops: ") + op + " outside a tensor-parallel group");
  return *m.link;
}

}  // namespace

void CudaOps::embedding_shard(const backend::Weight& table, int64_t vocab0, Tensor out) {
  OpTimer timer(*impl_, "embedding_shard", out.rows);
  const EmbeddingWeight& e = as<EmbeddingWeight>(table, "embedding table");
  require_shape(out, impl_->batch.num_rows, e.dim, "embedding_shard");
  if (e.fp8)
    embedding_fp8(e.table.as<uint8_t>(), e.row_scales.as<float>(), e.format, impl_->d_ids, out.rows, e.dim, B(out),
                  impl_->stream, e.vocab, vocab0, true);
  else
    embedding_shard_bf16(e.table.as<bf16>(), impl_->d_ids, out.rows, e.dim, B(out), impl_->stream, vocab0, e.vocab);
}

void CudaOps::all_reduce_sum(Tensor x) {
  RankLink& link = link_of(*impl_, "all_reduce_sum");
  OpTimer timer(*impl_, "all_reduce_sum", x.rows);
  link.all_reduce_sum(B(x), x.rows * x.cols, impl_->stream);
}

void CudaOps::all_gather_cols(Tensor local, Tensor out) {
  RankLink& link = link_of(*impl_, "all_gather_cols");
  if (out.rows != local.rows || out.cols != local.cols * link.size())
    throw Error("cuda ops: all_gather_cols of [" + std::to_string(local.rows) + ", " + std::to_string(local.cols) +
                "] from " + std::to_string(link.size()) + " ranks into [" + std::to_string(out.rows) + ", " +
                std::to_string(out.cols) + "] (every rank's block must be as wide)");
  OpTimer timer(*impl_, "all_gather_cols", local.rows);
  const Tensor parts = alloc(local.rows * link.size(), local.cols);
  link.all_gather(local.data, parts.data, local.rows * local.cols * int64_t(sizeof(bf16)), impl_->stream);
  interleave_column_blocks(B(parts), link.size(), local.rows, local.cols, B(out), impl_->stream);
}

namespace {

// Where `next` is a W8A8 linear that would quantize `out` with a kernel of its own (not the
// GEMV that quantizes while staging, not a dynamic per-tensor scale: two passes), the
// quantization the producer of `out` runs as well — its codes and scales taken from the top of
// the arena and recorded for linear() — else nothing.
std::optional<RowQuantOutput> prequantize_for(CudaOps::Impl& m, const backend::Weight* next, Tensor out);

}  // namespace

void CudaOps::rms_norm(Tensor x, const backend::Weight& w, float eps, Tensor out, const backend::Weight* next) {
  OpTimer timer(*impl_, "rms_norm", x.rows);
  const VectorWeight& g = as<VectorWeight>(w, "norm weight");
  require_shape(out, x.rows, x.cols, "rms_norm");
  if (g.size != x.cols) throw Error("cuda ops: rms_norm weight size does not match the row width");
  const std::optional<RowQuantOutput> q = prequantize_for(*impl_, next, out);
  cuda::rms_norm(B(x), g.values.as<float>(), eps, x.rows, x.cols, B(out), impl_->stream, q ? &*q : nullptr);
}

void CudaOps::add_rms_norm(Tensor h, Tensor delta, const backend::Weight& w, float eps, Tensor out,
                           const backend::Weight* next) {
  OpTimer timer(*impl_, "add_rms_norm", h.rows);
  const VectorWeight& g = as<VectorWeight>(w, "norm weight");
  require_shape(delta, h.rows, h.cols, "add_rms_norm");
  require_shape(out, h.rows, h.cols, "add_rms_norm");
  if (g.size != h.cols) throw Error("cuda ops: rms_norm weight size does not match the row width");
  const std::optional<RowQuantOutput> q = prequantize_for(*impl_, next, out);
  cuda::add_rms_norm(B(h), B(delta), g.values.as<float>(), eps, h.rows, h.cols, B(out), impl_->stream,
                     q ? &*q : nullptr);
}

void CudaOps::head_rms_norm(Tensor x, int64_t head_dim, const backend::Weight& w, float eps) {
  OpTimer timer(*impl_, "head_rms_norm", x.rows);
  const VectorWeight& g = as<VectorWeight>(w, "head norm weight");
  if (head_dim <= 0 || x.cols % head_dim != 0 || g.size != head_dim)
    throw Error("cuda ops: head_rms_norm over heads of " + std::to_string(head_dim) + " does not fit rows of " +
                std::to_string(x.cols));
  cuda::head_rms_norm(B(x), x.rows, x.cols, head_dim, g.values.as<float>(), eps, impl_->stream);
}

void CudaOps::add(Tensor acc, Tensor x) {
  OpTimer timer(*impl_, "add", acc.rows);
  require_shape(x, acc.rows, acc.cols, "add");
  cuda::add(B(acc), B(x), acc.rows * acc.cols, impl_->stream);
}

// The RoPE table's inverse frequencies on the device, uploaded the first time it is seen.
static const float* rope_inv_freq(CudaOps::Impl& m, const RopeTable& rope) {
  auto it = m.rope_freqs.find(&rope);
  if (it == m.rope_freqs.end())
    it = m.rope_freqs.emplace(&rope, upload(m.allocator, rope.inv_freq().data(), rope.inv_freq().size(), m.stream))
             .first;
  return it->second.as<float>();
}

void CudaOps::rope_qk(Tensor q, Tensor k, int64_t head_dim, const RopeTable& rope) {
  OpTimer timer(*impl_, "rope_qk", q.rows);
  if (rope.rotary_dim() != head_dim || q.cols % head_dim != 0 || k.cols % head_dim != 0 || q.rows != k.rows ||
      q.rows != impl_->batch.num_rows)
    throw Error("cuda ops: rope does not fit the tensors");
  cuda::rope_qk(B(q), q.cols, B(k), k.cols, q.rows, head_dim, impl_->batch.row_position, rope_inv_freq(*impl_, rope),
                rope.attention_factor(), impl_->stream);
}

namespace {
// The CUDA cache behind `cache`, with `layer` checked against it.
const CudaKvCache& cuda_cache(backend::KvCache& cache, int layer) {
  auto* c = dynamic_cast<CudaKvCache*>(&cache);
  if (c == nullptr) throw Error("cuda ops: the KV cache was not made by the CUDA backend");
  if (layer < 0 || layer >= int(c->layers.size())) throw Error("cuda ops: KV layer out of range");
  return *c;
}
}  // namespace

void CudaOps::split_norm_rope_qkv(Tensor qkv, Tensor q, Tensor k, Tensor v, int64_t head_dim,
                                  const backend::Weight* q_norm, const backend::Weight* k_norm, float eps,
                                  const RopeTable& rope, backend::KvCache* store_into, int layer) {
  OpTimer timer(*impl_, store_into != nullptr ? "split_norm_rope_qkv + store_kv" : "split_norm_rope_qkv", qkv.rows);
  require_shape(q, qkv.rows, q.cols, "split_norm_rope_qkv q");
  require_shape(k, qkv.rows, k.cols, "split_norm_rope_qkv k");
  require_shape(v, qkv.rows, v.cols, "split_norm_rope_qkv v");
  if (q.cols + k.cols + v.cols != qkv.cols)
    throw Error("cuda ops: split_norm_rope_qkv: q, k and v widths " + std::to_string(q.cols) + " + " +
                std::to_string(k.cols) + " + " + std::to_string(v.cols) + " do not add up to qkv's " +
                std::to_string(qkv.cols));
  if (rope.rotary_dim() != head_dim || qkv.rows != impl_->batch.num_rows)
    throw Error("cuda ops: rope does not fit the tensors");
  if ((q_norm == nullptr) != (k_norm == nullptr))
    throw Error("cuda ops: split_norm_rope_qkv takes both q/k norm weights or neither");
  const float* q_w = nullptr;
  const float* k_w = nullptr;
  if (q_norm != nullptr) {
    const VectorWeight& gq = as<VectorWeight>(*q_norm, "q norm weight");
    const VectorWeight& gk = as<VectorWeight>(*k_norm, "k norm weight");
    if (gq.size != head_dim || gk.size != head_dim)
      throw Error("cuda ops: q/k norm weights of " + std::to_string(gq.size) + " / " + std::to_string(gk.size) +
                  " values for heads of " + std::to_string(head_dim));
    q_w = gq.values.as<float>();
    k_w = gk.values.as<float>();
  }
  Impl& m = *impl_;
  KvStore store;
  if (store_into != nullptr) {
    const CudaKvCache& c = cuda_cache(*store_into, layer);
    store = {&m.batch, int(k.cols / head_dim), c.shape_.block_size, c.layers[size_t(layer)]};
  }
  cuda::split_norm_rope_qkv(B(qkv), qkv.rows, q.cols, k.cols, v.cols, head_dim, B(q), B(k), B(v), q_w, k_w, eps,
                            m.batch.row_position, rope_inv_freq(m, rope), rope.attention_factor(), m.stream,
                            store_into != nullptr ? &store : nullptr);
  if (store_into != nullptr) m.stored_kv = {layer, k.data, v.data};
}

void CudaOps::silu_mul(Tensor gate, Tensor up, Tensor out) {
  OpTimer timer(*impl_, "silu_mul", gate.rows);
  require_shape(up, gate.rows, gate.cols, "silu_mul");
  require_shape(out, gate.rows, gate.cols, "silu_mul");
  cuda::silu_mul(B(gate), B(up), gate.rows * gate.cols, B(out), impl_->stream);
}

void CudaOps::silu_mul_fused(Tensor gate_up, Tensor out) {
  OpTimer timer(*impl_, "silu_mul_fused", out.rows);
  require_shape(gate_up, out.rows, 2 * out.cols, "silu_mul_fused");
  // Not fused with the down projection's quantization: a fused kernel (one CTA per row, so that
  // the row's amax is the CTA's) measured slower than this element-wise kernel + the
  // quantization kernel at every size, and was removed (docs/results/issue18/README.md, item 8).
  cuda::silu_mul_fused(B(gate_up), out.rows, out.cols, B(out), impl_->stream);
}

void CudaOps::split_columns(Tensor x, std::span<const Tensor> parts) {
  OpTimer timer(*impl_, "split_columns", x.rows);
  if (parts.empty() || parts.size() > 4) throw Error("cuda ops: split_columns takes 1 to 4 parts");
  ColumnSplit split;
  split.count = int(parts.size());
  int64_t cols = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    require_shape(parts[i], x.rows, parts[i].cols, "split_columns part");
    split.out[i] = B(parts[i]);
    split.width[i] = parts[i].cols;
    cols += parts[i].cols;
  }
  if (cols != x.cols) throw Error("cuda ops: split_columns parts do not add up to the input's columns");
  cuda::split_columns(B(x), x.rows, split, impl_->stream);
}

void CudaOps::copy(Tensor x, Tensor out) {
  OpTimer timer(*impl_, "copy", x.rows);
  require_shape(out, x.rows, x.cols, "copy");
  FP8LM_CUDA_CHECK(cudaMemcpyAsync(out.data, x.data, size_t(x.rows * x.cols) * sizeof(bf16), cudaMemcpyDeviceToDevice,
                                   impl_->stream));
}

void CudaOps::attention(Tensor q, Tensor k, Tensor v, Tensor out, const backend::AttentionParams& params,
                        backend::KvCache& cache, int layer) {
  const CudaKvCache* c = &cuda_cache(cache, layer);
  const int64_t kv_width = int64_t(params.num_kv_heads) * params.head_dim;
  require_shape(k, q.rows, kv_width, "attention k");
  require_shape(v, q.rows, kv_width, "attention v");
  require_shape(out, q.rows, int64_t(params.num_heads) * params.head_dim, "attention out");
  Impl& m = *impl_;
  const int bs = c->shape_.block_size;
  const bool stored = m.stored_kv.layer == layer && m.stored_kv.k == k.data && m.stored_kv.v == v.data;
  m.stored_kv = {};
  if (!stored) {
    OpTimer timer(m, "store_kv", q.rows);
    store_kv(B(k), B(v), m.batch, params.num_kv_heads, params.head_dim, bs, c->layers[size_t(layer)], m.stream);
  }
  OpTimer timer(m, "attention", q.rows);
  const Impl::TempScope temps(m.scratch);
  const size_t ws = paged_attention_workspace_bytes(m.batch, params);
  void* workspace = ws > 0 ? m.take(ws) : nullptr;
  paged_attention(B(q), B(out), m.batch, params, bs, c->layers[size_t(layer)], workspace, ws, m.stream,
                  m.fused_merge ? m.attention_counters.as<unsigned>() : nullptr);
}

void CudaOps::gather_rows(Tensor x, Tensor out) {
  OpTimer timer(*impl_, "gather_rows", out.rows);
  require_shape(out, int64_t(impl_->step.logit_rows.size()), x.cols, "gather_rows");
  cuda::gather_rows(B(x), x.cols, impl_->d_logit_rows, out.rows, B(out), impl_->stream, x.rows);
}

void CudaOps::to_host(Tensor x, std::span<float> out) {
  OpTimer timer(*impl_, "to_host", x.rows);
  Impl& m = *impl_;
  if (m.capturing) throw Error("cuda ops: to_host inside a recorded step");
  if (out.size() != size_t(x.rows * x.cols)) throw Error("cuda ops: to_host size mismatch");
  const auto* h = static_cast<const uint16_t*>(m.fetch(x.data, out.size() * sizeof(bf16)));
  for (size_t i = 0; i < out.size(); ++i) out[i] = fp8lm::bf16_to_float(h[i]);
}

void CudaOps::argmax_rows(Tensor x, std::span<int32_t> out) {
  if (out.size() != size_t(x.rows)) throw Error("cuda ops: argmax_rows needs one output per row");
  start_argmax_rows(x);
  std::vector<int32_t> tokens;
  wait_tokens(tokens);
  std::copy(tokens.begin(), tokens.end(), out.begin());
}

void CudaOps::start_argmax_rows(Tensor x) {
  Impl& m = *impl_;
  OpTimer timer(m, "argmax_rows", x.rows);
  if (m.capturing) throw Error("cuda ops: argmax_rows inside a recorded step");
  if (started_ != Started::kNone) throw Error("cuda ops: argmax_rows before the last step's tokens were waited for");
  const Impl::TempScope temps(m.scratch);  // the copy below is queued before anything reuses it
  auto* ids = static_cast<int32_t*>(m.take(size_t(x.rows) * sizeof(int32_t)));
  cuda::argmax_rows(B(x), x.rows, x.cols, ids, m.stream);
  m.start_fetch(ids, size_t(x.rows) * sizeof(int32_t));
  started_ = Started::kArgmax;
  started_rows_ = x.rows;
}

void CudaOps::wait_tokens(std::vector<int32_t>& tokens) {
  const Started started = std::exchange(started_, Started::kNone);
  switch (started) {
    case Started::kNone: throw Error("cuda ops: wait_tokens without a started argmax_rows or sample_rows");
    case Started::kSample: finish_sampling(tokens); return;
    case Started::kArgmax: {
      const auto* h = static_cast<const int32_t*>(impl_->finish_fetch());
      tokens.assign(h, h + started_rows_);
      return;
    }
  }
}

void CudaOps::end_step_before(cudaStream_t other) {
  Impl& m = *impl_;
  m.end_step();
  if (m.handoff == nullptr) FP8LM_CUDA_CHECK(cudaEventCreateWithFlags(&m.handoff, cudaEventDisableTiming));
  FP8LM_CUDA_CHECK(cudaEventRecord(m.handoff, m.stream));
  FP8LM_CUDA_CHECK(cudaStreamWaitEvent(other, m.handoff, 0));
}

void CudaOps::wait_step_end() { impl_->wait_step_end(); }

// ---- linear ------------------------------------------------------------------------------------

namespace {

std::optional<RowQuantOutput> prequantize_for(CudaOps::Impl& m, const backend::Weight* next, Tensor out) {
  if (next == nullptr || out.rows == 0) return std::nullopt;
  const auto* lw = dynamic_cast<const LinearWeight*>(next);
  if (lw == nullptr || lw->k != out.cols) return std::nullopt;
  const LinearPlan& p = lw->plan;
  const int64_t rows = out.rows;
  // linear()'s own choices: BF16 GEMMs and W8A16 read x as is; the GEMV quantizes small x itself.
  if (!p.fp8 || p.activation == ActivationQuant::kNone || p.large_rows == LargeRows::kCublasBf16) return std::nullopt;
  if (p.gemv_quantizes_input(rows)) return std::nullopt;
  if (p.act_quant.static_scale == nullptr && p.act_quant.granularity == Granularity::kTensor) return std::nullopt;
  CudaOps::Impl::Prequantized pre;
  pre.before = m.scratch.mark();
  pre.codes = static_cast<uint8_t*>(m.take(size_t(rows * out.cols)));
  const int64_t nscales = std::max<int64_t>(p.act_quant.scale_count(rows, out.cols), 1);
  pre.scales = static_cast<float*>(m.take(size_t(nscales) * sizeof(float)));
  pre.after = m.scratch.mark();
  pre.x = out.data;
  pre.next = next;
  pre.rows = rows;
  m.prequantized = pre;
  return RowQuantOutput{p.act_quant, pre.codes, pre.scales};
}

}  // namespace

CudaOps::Impl::QuantizedInput CudaOps::Impl::quantize_input(const LinearPlan& p, const bf16* x, int64_t rows,
                                                            int64_t k) {
  auto* codes = static_cast<uint8_t*>(take(size_t(rows * k)));
  if (p.act_quant.static_scale != nullptr) {
    quantize_fp8_static(x, rows, k, p.act_quant.static_scale, codes, stream);
    return {codes, p.act_quant.static_scale};
  }
  const int64_t nscales = std::max<int64_t>(p.act_quant.scale_count(rows, k), 1);
  auto* scales = static_cast<float*>(take(size_t(nscales) * sizeof(float)));
  quantize_fp8_dynamic(x, rows, k, p.act_quant, codes, scales, stream);
  return {codes, scales};
}

void CudaOps::linear(Tensor x, const backend::Weight& weight, Tensor y) {
  const LinearWeight& w = as<LinearWeight>(weight, "linear weight");
  const LinearPlan& p = w.plan;
  require_shape(x, x.rows, w.k, "linear input");
  require_shape(y, x.rows, w.n, "linear output");
  Impl& im = *impl_;
  cudaStream_t s = im.stream;
  const int64_t m = x.rows;
  if (m == 0) return;
  const bf16* bias = w.bias ? w.bias.as<bf16>() : nullptr;
  // x quantized for this linear by its producer (prequantize_for), given back to the arena
  // after the linear's own temporaries (declared first: destroyed last).
  const Impl::Prequantized pre = im.prequantized.x == x.data && im.prequantized.next == &weight &&
                                         im.prequantized.rows == m
                                     ? im.prequantized
                                     : Impl::Prequantized{};
  im.prequantized = {};
  struct GiveBack {
    ScratchArena& arena;
    const Impl::Prequantized& pre;
    ~GiveBack() {
      const ScratchArena::Mark now = arena.mark();
      if (pre.codes != nullptr && now.chunk == pre.after.chunk && now.offset == pre.after.offset)
        arena.release(pre.before);
    }
  } give_back{im.scratch, pre};
  const Impl::TempScope temps(im.scratch);
  // The label (a few string operations) only when profiling: linear is the hot path.
  OpTimer timer(im,
                !im.profiling() ? std::string()
                            : std::string(!p.fp8                                   ? "linear bf16 "
                                          : p.activation == ActivationQuant::kNone ? "linear w8a16 "
                                                                                   : "linear w8a8 ") +
                                  std::to_string(w.n) + "x" + std::to_string(w.k),
                m);

  if (p.large_rows == LargeRows::kCublasBf16) {
    GemmArgs g;
    g.m = m, g.n = w.n, g.k = w.k;
    g.a = x.data, g.b = w.w.get(), g.d = y.data, g.bias = bias;
    g.mode = GemmScaleMode::kNone;
    im.gemm->run(g, s);
    return;
  }

  // GEMV over rows [r0, r0 + rows) (≤ 16) of x (BF16 or quantized) into y; with
  // `quantize`, BF16 x quantized by the GEMV itself as the scheme says.
  auto gemv = [&](int64_t r0, int64_t rows, const uint8_t* codes, const float* scales, bool quantize = false) {
    Fp8GemvArgs a;
    a.m = rows, a.n = w.n, a.k = w.k;
    a.w = w.w.as<uint8_t>();
    a.w_scale = w.w_scale.as<float>();
    a.w_layout = p.w_layout;
    if (quantize) {
      a.x = B(x) + r0 * w.k;
      a.quantize_x = true;
      a.x_layout = p.x_layout;
      a.x_scale = p.act_quant.static_scale;  // null: dynamic
      a.x_rule = p.act_rule;
    } else if (codes == nullptr) {
      a.x = B(x) + r0 * w.k;
    } else {
      a.x_codes = codes + r0 * w.k;
      a.x_layout = p.x_layout;
      const int64_t groups = (w.k + 127) / 128;
      a.x_scale = p.x_layout == ActivationScaleLayout::kTensor  ? scales
                  : p.x_layout == ActivationScaleLayout::kToken ? scales + r0
                                                                : scales + r0 * groups;
    }
    a.bias = bias;
    a.y = B(y) + r0 * w.n;
    // Start streaming weights while the kernel before finishes (Hopper PDL); the
    // GEMV waits for it before reading x. Weights are never written by kernels.
    a.programmatic_launch = true;
    im.give_gemv_workspace(a, fp8_gemv_workspace_bytes(a));
    fp8_gemv(a, s);
  };
  auto gemv_all = [&](const uint8_t* codes, const float* scales) {
    for (int64_t r0 = 0; r0 < m; r0 += kMaxGemvRows) gemv(r0, std::min(kMaxGemvRows, m - r0), codes, scales);
  };

  // W8A8 at the smallest decode sizes: one GEMV call that quantizes x while staging it (the same
  // codes and scales as the kernels below, bit for bit; one kernel and one round trip
  // of the activations fewer per projection).
  if (p.gemv_quantizes_input(m)) return gemv(0, m, nullptr, nullptr, true);

  // W8A8: quantize the activations as the scheme says, then GEMV or GEMM; W8A16 reads x as is.
  const uint8_t* codes = nullptr;
  const float* x_scales = nullptr;
  if (p.activation != ActivationQuant::kNone && pre.codes != nullptr) {
    codes = pre.codes;
    x_scales = p.act_quant.static_scale != nullptr ? p.act_quant.static_scale : pre.scales;
  } else if (p.activation != ActivationQuant::kNone) {
    OpTimer quant_timer(im, "  of which: quantize activations", m);
    const Impl::QuantizedInput q = im.quantize_input(p, B(x), m, w.k);
    codes = q.codes;
    x_scales = q.scales;
  }
  if (m <= p.gemv_max_rows) return gemv_all(codes, x_scales);

  switch (p.large_rows) {
    case LargeRows::kCublasBf16: break;  // handled above
    case LargeRows::kGemvChunks: return gemv_all(codes, x_scales);
    case LargeRows::kDequantizeBf16: {
      auto* deq = static_cast<bf16*>(im.take(size_t(w.n * w.k) * sizeof(bf16)));
      dequantize_weight_bf16(w.w.as<uint8_t>(), w.w_scale.as<float>(), p.w_layout, w.n, w.k, deq, s);
      GemmArgs g;
      g.m = m, g.n = w.n, g.k = w.k;
      g.a = x.data, g.b = deq, g.d = y.data, g.bias = bias;
      im.gemm->run(g, s);
      return;
    }
    case LargeRows::kCublasFp8: {
      GemmArgs g;
      g.n = w.n, g.k = w.k;
      g.a = codes, g.b = w.w.get(), g.d = y.data, g.bias = bias;
      g.mode = p.gemm_mode;
      switch (p.gemm_mode) {
        case GemmScaleMode::kTensor:
          g.m = m;
          g.a_scale = x_scales;
          g.b_scale = w.w_scale.as<float>();
          break;
        case GemmScaleMode::kOuterVector: {
          g.m = m;
          g.b_scale = w.w_scale_gemm.as<float>();
          if (p.x_layout == ActivationScaleLayout::kTensor) {
            auto* per_row = static_cast<float*>(im.take(size_t(m) * sizeof(float)));
            broadcast_scale(x_scales, m, per_row, s);
            g.a_scale = per_row;
          } else {
            g.a_scale = x_scales;
          }
#ifdef FP8LM_WITH_CUTLASS
          // The plan's measured range (never a layer with bias: CUTLASS's epilogue here has none),
          // unless FP8LM_CUDA_CUTLASS=0.
          if (const CutlassRows* measured = im.cutlass_measured ? p.cutlass_at(m) : nullptr) {
            CutlassFp8GemmArgs c;
            c.m = m, c.n = w.n, c.k = w.k;
            c.x = codes, c.x_scale = g.a_scale;
            c.w = w.w.as<uint8_t>(), c.w_scale = g.b_scale;
            c.y = y.data;
            c.config = measured->config;
            if (cutlass_fp8_gemm_unsupported(c).empty()) {
              const size_t ws_bytes = cutlass_fp8_gemm_workspace_bytes(c);
              cutlass_fp8_gemm(c, ws_bytes > 0 ? im.take(ws_bytes) : nullptr, ws_bytes, s);
              return;
            }
          }
#endif
          break;
        }
        case GemmScaleMode::kBlock: {
          // cuBLASLt's block scaling wants m % 4 == 0: it takes the first m − m % 4 rows, the GEMV the rest.
          const int64_t m4 = m - m % 4;
          const int64_t groups = (w.k + 127) / 128;
          auto* a_scale = static_cast<float*>(im.take(size_t(m4 * groups) * sizeof(float)));
          group_scales_to_cublas(x_scales, m4, w.k, a_scale, s);
          g.m = m4;
          g.a_scale = a_scale;
          g.b_scale = w.w_scale_gemm.as<float>();
          g.cublas_scale_layout = true;
          if (!im.gemm->supported(g)) return gemv_all(codes, x_scales);
          im.gemm->run(g, s);
          if (m4 < m) gemv(m4, m - m4, codes, x_scales);
          return;
        }
        case GemmScaleMode::kNone: throw Error("cuda ops: internal: an FP8 layer without a GEMM mode");
      }
      // Where cuBLASLt has no algorithm for the shape (it answers once per shape, cached), the GEMV serves.
      if (!im.gemm->supported(g)) return gemv_all(codes, x_scales);
      im.gemm->run(g, s);
      return;
    }
  }
}

// ---- introspection ------------------------------------------------------------------------------

DeviceMemoryStats CudaOps::memory_stats() const { return impl_->allocator.stats(); }

void CudaOps::device_memory(size_t& free_bytes, size_t& total_bytes) const {
  FP8LM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
}

std::optional<backend::MemoryInfo> CudaOps::memory_info() const {
  size_t free_bytes = 0, total_bytes = 0;
  device_memory(free_bytes, total_bytes);
  return backend::MemoryInfo{free_bytes, total_bytes, impl_->allocator.stats().peak_bytes_reserved};
}

uint64_t CudaOps::keep_step_scratch() {
  Impl& m = *impl_;
  m.stream.synchronize();
  m.drop_graphs();  // they point into the chunks replaced here
  // The profiled steps' attention may have stayed under the workspace cap
  // (short contexts): room for the whole cap, whatever the context.
  const size_t bytes = m.scratch.peak() + kAttentionWorkspaceCap;
  m.scratch.keep_one_piece(bytes, m.stream);
  m.allocator.release_cached();  // the old chunks go back to the driver, not to a free list
  return bytes;
}

bool CudaOps::set_op_profiling(bool on) {
  Impl& m = *impl_;
  if (m.profiling()) {  // what ran so far goes to the tables of the setting it ran under
    FP8LM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
    m.collect_profile();
  }
  m.profile_api = on;
  return true;
}

std::vector<backend::OpProfileEntry> CudaOps::op_profile() {
  Impl& m = *impl_;
  FP8LM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  m.collect_profile();
  std::vector<backend::OpProfileEntry> out;
  for (const auto& [key, slot] : m.api_seconds)
    out.push_back({key.first ? "decode" : "prefill", key.second, slot.seconds, slot.calls, slot.nested});
  return out;
}

void CudaOps::clear_op_profile() {
  Impl& m = *impl_;
  FP8LM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  m.collect_profile();
  m.api_seconds.clear();
}

uint64_t CudaOps::graph_replays() const { return impl_->replays; }
size_t CudaOps::graphs() const {
  size_t n = 0;
  for (const auto& [k, g] : impl_->graphs) n += g.exec != nullptr ? 1 : 0;
  return n;
}
void CudaOps::synchronize() {
  impl_->close_step();
  impl_->stream.synchronize();
}

std::optional<double> CudaOps::device_step_seconds() { return impl_->step_seconds; }

}  // namespace fp8lm::cuda
