// CudaOps' side of the persistent decode kernel (persistent/decode_program.h): the model's
// weights as the kernel reads them (prepare_decode_program, once at load), and a decode step as
// one launch (decode_program), which the step's CUDA graph records like any op.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_ops_impl.h"
#include "backend/cuda/persistent/decode_program.h"
#include "backend/cuda/persistent/weight_map.h"

namespace fp8lm::cuda {

namespace {
// Rows up to which kAuto takes the persistent kernel: where it measured faster than the layered
// path on the device (docs/results/issue41). 0: nowhere yet.
constexpr int64_t kPersistentMaxRowsMeasured = 0;
}  // namespace

struct PersistentDecode {
  persistent::ModelShape shape;
  float eps = 0.0f, attention_scale = 1.0f, rope_attention_factor = 1.0f;
  DeviceBuffer rope_inv_freq;
  const backend::Weight* embedding = nullptr;
  std::vector<persistent::DeviceLayer> layers;  // without the cache
  persistent::DeviceLinear lm_head;
  DeviceBuffer maps;  // the linear layers' CUtensorMaps (DeviceLinear::map points into it)
  const float* final_norm = nullptr;
  int64_t row_bytes = 0;  // the widest staged input row
  int sms = 0;
  // Per KV cache (its storage): the layers with their cache pointers, on the device.
  const void* cache_storage = nullptr;
  DeviceBuffer device_layers;
  DeviceBuffer counters;
  int64_t counters_size = 0;
  struct Shape {
    persistent::Schedule schedule;
    DeviceBuffer instructions, queue_start, queue;
    size_t smem = 0, slots_offset = 0;
    int slots = 0;
  };
  std::map<int64_t, Shape> by_rows;
  DeviceBuffer profile;  // the kernel's own timers, when profiling (persistent::Params::profile)
};

namespace {

// The kernel's view of an uploaded linear layer, or why it cannot run it (`why` set).
persistent::DeviceLinear device_linear(const backend::Weight& weight, const char* what, std::string& why) {
  const LinearWeight& l = as<LinearWeight>(weight, what);
  persistent::DeviceLinear d;
  d.w = l.w.get();
  d.bias = l.bias ? l.bias.as<bf16>() : nullptr;
  d.n = int32_t(l.n), d.k = int32_t(l.k);
  d.fp8 = l.plan.fp8;
  if (d.fp8) {
    const bool act = l.plan.activation == ActivationQuant::kDynamicToken ||
                     l.plan.activation == ActivationQuant::kStaticTensor;
    const bool scales = l.plan.w_layout == WeightScaleLayout::kTensor || l.plan.w_layout == WeightScaleLayout::kChannel;
    if (!act || !scales) {
      if (why.empty()) why = std::string(what) + ": " + l.plan.describe();
      return d;
    }
    d.w_scale = l.w_scale.as<float>();
    d.w_scale_per_row = l.plan.w_layout == WeightScaleLayout::kChannel;
    d.static_x_scale = l.plan.activation == ActivationQuant::kStaticTensor ? l.plan.act_quant.static_scale : nullptr;
    d.rule = l.plan.act_rule;
  }
  if (why.empty()) why = persistent::unsupported_linear(d, what);
  return d;
}

const float* vector_of(const backend::Weight* w, const char* what) {
  return w == nullptr ? nullptr : as<VectorWeight>(*w, what).values.as<float>();
}

// bench latency --profile: the kernel's own timers of the step just launched, as entries nested in
// "persistent decode step": per instruction kind and part, the mean over the CTAs of the time
// their thread 0 spent (so the parts of all kinds add up to the step), and the instructions run.
void add_persistent_profile(CudaOps::Impl& m, const PersistentDecode& p, int ctas) {
  const size_t words = size_t(ctas) * persistent::kProfileKinds * persistent::kProfileParts;
  std::vector<unsigned long long> host(words);
  FP8LM_CUDA_CHECK(cudaMemcpyAsync(host.data(), p.profile.get(), words * 8, cudaMemcpyDeviceToHost, m.stream));
  FP8LM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  static constexpr const char* kParts[] = {"wait", "stage", "work"};
  static constexpr const char* kRingParts[] = {"(thread 0 waits for pages to land)", "(loader waits for a free slot)",
                                               "(loader's run to its last page)"};
  for (int k = 0; k < persistent::kProfileKinds; ++k) {
    double ns[3] = {0, 0, 0};
    unsigned long long count = 0;
    for (int c = 0; c < ctas; ++c) {
      const unsigned long long* slot = &host[(size_t(c) * persistent::kProfileKinds + size_t(k)) * persistent::kProfileParts];
      for (int part = 0; part < 3; ++part) ns[part] += double(slot[part]);
      count += slot[3];
    }
    if (count == 0) continue;
    for (int part = 0; part < 3; ++part) {
      if (k == persistent::kProfileKinds - 1 && part > 0) continue;
      const char* part_name = k == persistent::kProfileRing ? kRingParts[part] : kParts[part];
      CudaOps::Impl::ApiSlot& slot =
          m.api_seconds[{true, std::string("persistent: ") + persistent::kProfileKindNames[k] + " " + part_name}];
      slot.seconds += ns[part] / ctas * 1e-9;
      slot.calls += int64_t(count);
      slot.nested = true;
    }
  }
}

}  // namespace

std::string CudaOps::prepare_decode_program(const backend::DecodeModel& model) {
  Impl& m = *impl_;
  m.persistent.reset();
  if (m.options.decode_kernel == backend::DecodeKernel::kLayered) return "decode steps op by op (--decode-kernel layered)";
  auto p = std::make_shared<PersistentDecode>();
  p->shape = {int(model.layers.size()), int(model.hidden), int(model.intermediate), int(model.vocab),
              model.q_heads, model.kv_heads, int(model.head_dim)};
  std::string why = persistent::unsupported_shape(p->shape, 1);
  if (model.rope == nullptr || model.rope->rotary_dim() != model.head_dim)
    why = why.empty() ? "partial rotary embedding" : why;
  for (const backend::DecodeLayer& dl : model.layers) {
    persistent::DeviceLayer l;
    l.input_norm = vector_of(dl.input_norm, "input norm");
    l.post_norm = vector_of(dl.post_attention_norm, "post-attention norm");
    l.q_norm = vector_of(dl.q_norm, "q norm");
    l.k_norm = vector_of(dl.k_norm, "k norm");
    l.qkv = device_linear(*dl.qkv, "q/k/v", why);
    l.o = device_linear(*dl.o, "o_proj", why);
    l.gate_up = device_linear(*dl.gate_up, "gate/up", why);
    l.down = device_linear(*dl.down, "down_proj", why);
    l.window = int32_t(dl.sliding_window);
    for (const persistent::DeviceLinear* d : {&l.qkv, &l.o, &l.gate_up, &l.down})
      p->row_bytes = std::max(p->row_bytes, persistent::row_bytes(*d));
    p->layers.push_back(l);
  }
  p->lm_head = device_linear(*model.lm_head, "lm_head", why);
  p->row_bytes = std::max(p->row_bytes, persistent::row_bytes(p->lm_head));
  if (!why.empty()) return "decode steps op by op: the persistent decode kernel does not run " + why;
  // Every linear layer's page geometry and tensor map, the maps in one device array.
  std::vector<persistent::DeviceLinear*> linears;
  for (persistent::DeviceLayer& l : p->layers)
    for (persistent::DeviceLinear* d : {&l.qkv, &l.o, &l.gate_up, &l.down}) linears.push_back(d);
  linears.push_back(&p->lm_head);
  std::vector<CUtensorMap> maps;
  for (persistent::DeviceLinear* d : linears) {
    d->page_steps = persistent::page_steps(int(persistent::row_bytes(*d) / 64));
    maps.push_back(persistent::weight_tensor_map(*d));
  }
  p->maps = upload(m.allocator, maps.data(), maps.size(), m.stream);
  for (size_t i = 0; i < linears.size(); ++i) linears[i]->map = p->maps.as<CUtensorMap>() + i;
  p->final_norm = vector_of(model.final_norm, "final norm");
  p->embedding = model.embedding;
  p->eps = model.eps;
  p->attention_scale = model.attention_scale;
  p->rope_attention_factor = model.rope->attention_factor();
  p->rope_inv_freq = upload(m.allocator, model.rope->inv_freq().data(), model.rope->inv_freq().size(), m.stream);
  int sms = 0;
  FP8LM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, m.options.device));
  p->sms = sms;
  m.persistent = std::move(p);
  return {};
}

std::optional<backend::Tensor> CudaOps::decode_program(int64_t rows, backend::KvCache& cache) {
  Impl& m = *impl_;
  if (!m.persistent || rows < 1 || rows > persistent::kMaxRows || m.batch.max_new_tokens != 1) return std::nullopt;
  if (m.options.decode_kernel == backend::DecodeKernel::kAuto && rows > kPersistentMaxRowsMeasured) return std::nullopt;
  PersistentDecode& p = *m.persistent;
  auto* c = dynamic_cast<CudaKvCache*>(&cache);
  if (c == nullptr || int(c->layers.size()) != p.shape.layers) return std::nullopt;
  for (const DeviceKvLayer& l : c->layers)
    if (l.element == backend::KvElement::kF32) return std::nullopt;

  // The per-size schedule, and whether its CTAs fit the device at once.
  auto it = p.by_rows.find(rows);
  if (it == p.by_rows.end()) {
    PersistentDecode::Shape s;
    // The staging area, then as many ring slots as the rest of the shared memory holds.
    s.slots_offset = persistent::staging_bytes(p.shape, int(rows), p.row_bytes);
    const size_t slot = persistent::ring_slot_bytes();
    s.slots = s.slots_offset < persistent::kSharedLimit
                  ? int(std::min<size_t>(persistent::kMaxSlots, (persistent::kSharedLimit - s.slots_offset) / slot))
                  : 0;
    s.smem = s.slots_offset + size_t(s.slots) * slot;
    const int per_sm = s.slots >= 2 ? persistent::ctas_per_sm(s.smem) : 0;
    if (per_sm >= 1) {
      s.schedule = persistent::build_schedule(p.shape, int(rows), p.sms * per_sm);
      s.instructions = upload(m.allocator, s.schedule.instructions.data(), s.schedule.instructions.size(), m.stream);
      s.queue_start = upload(m.allocator, s.schedule.queue_start.data(), s.schedule.queue_start.size(), m.stream);
      s.queue = upload(m.allocator, s.schedule.queue.data(), s.schedule.queue.size(), m.stream);
    }
    it = p.by_rows.emplace(rows, std::move(s)).first;
  }
  const PersistentDecode::Shape& shape = it->second;
  if (shape.schedule.ctas == 0) return std::nullopt;  // its staging and two ring slots do not fit

  // The layers with this cache's pointers (a new cache drops the recorded graphs anyway).
  if (p.cache_storage != c->storage.get()) {
    std::vector<persistent::DeviceLayer> layers = p.layers;
    for (size_t i = 0; i < layers.size(); ++i) {
      const DeviceKvLayer& kv = c->layers[i];
      layers[i].k_cache = kv.k, layers[i].v_cache = kv.v;
      layers[i].kv_element = int32_t(kv.element);
      layers[i].k_scale = kv.k_scale, layers[i].v_scale = kv.v_scale;
    }
    p.device_layers = upload(m.allocator, layers.data(), layers.size(), m.stream);
    p.cache_storage = c->storage.get();
  }
  const int64_t counters = persistent::counter_count(p.shape);
  if (!p.counters) {
    p.counters = DeviceBuffer(m.allocator, size_t(counters) * sizeof(unsigned), m.stream);
    FP8LM_CUDA_CHECK(cudaMemsetAsync(p.counters.get(), 0, size_t(counters) * sizeof(unsigned), m.stream));
  }

  reset_scratch();  // as the model's layers do: a step's tensors from the start of the arena
  OpTimer timer(m, "persistent decode step", rows);
  const persistent::ModelShape& s = p.shape;
  const int hd = s.head_dim;
  Tensor h = alloc(rows, s.hidden);
  embedding(*p.embedding, h);
  const Tensor qkv = alloc(rows, int64_t(s.q_heads + 2 * s.kv_heads) * hd);
  const Tensor attn = alloc(rows, int64_t(s.q_heads) * hd);
  const Tensor act = alloc(rows, s.intermediate);
  const Tensor logits = alloc(rows, s.vocab);
  auto* partials = static_cast<float*>(
      m.take(size_t(persistent::partial_floats(s, int(rows), shape.schedule.attention_splits)) * sizeof(float)));

  persistent::Params a;
  a.layers = p.device_layers.as<persistent::DeviceLayer>();
  a.instructions = shape.instructions.as<persistent::Instruction>();
  a.queue_start = shape.queue_start.as<int32_t>();
  a.queue = shape.queue.as<int32_t>();
  a.counters = p.counters.as<unsigned>();
  a.h = B(h), a.qkv = B(qkv), a.attn = B(attn), a.act = B(act), a.logits = B(logits);
  a.partials = partials;
  a.lm_head = p.lm_head;
  a.final_norm = p.final_norm;
  a.row_seq = m.batch.row_seq;
  a.row_position = m.batch.row_position;
  a.block_tables = m.batch.block_tables;
  a.max_blocks_per_seq = m.batch.max_blocks_per_seq;
  a.block_size = c->shape_.block_size;
  a.rope_inv_freq = p.rope_inv_freq.as<float>();
  a.rope_attention_factor = p.rope_attention_factor;
  a.eps = p.eps;
  a.attention_scale = p.attention_scale;
  a.shape = s;
  a.rows = int32_t(rows);
  a.splits = shape.schedule.attention_splits;
  a.slots = shape.slots;
  a.slots_offset = int32_t(shape.slots_offset);
  std::copy(std::begin(shape.schedule.phase_count), std::end(shape.schedule.phase_count), a.phase_count);
  const size_t profile_words = size_t(shape.schedule.ctas) * persistent::kProfileKinds * persistent::kProfileParts;
  if (m.profile_api) {
    if (p.profile.bytes() < profile_words * 8) p.profile = DeviceBuffer(m.allocator, profile_words * 8, m.stream);
    a.profile = p.profile.as<unsigned long long>();
  }
  persistent::launch(a, shape.schedule.ctas, shape.smem, m.stream);
  if (m.profile_api) add_persistent_profile(m, p, shape.schedule.ctas);
  return logits;
}

}  // namespace fp8lm::cuda
