#include "decode_attention_workload.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <numeric>
#include <random>

namespace fp8lm::bench {

using backend::KvElement;
using cuda::DeviceAllocator;
using cuda::DeviceBuffer;

namespace {

// Random bytes for a cache (and Q): BF16 values in about [-2, 2] (sign, exponent 126..128, any
// mantissa), or E4M3 codes with |x| ≤ 448 and no NaN (0x7F / 0xFF).
void fill_cache(std::vector<uint8_t>& bytes, KvElement e, std::mt19937_64& rng) {
  if (e == KvElement::kBF16) {
    for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
      const uint64_t r = rng();
      const uint16_t v = uint16_t(((r & 1) << 15) | ((126 + (r >> 1) % 3) << 7) | ((r >> 8) & 0x7F));
      std::memcpy(&bytes[i], &v, 2);
    }
  } else {
    for (uint8_t& b : bytes) {
      b = uint8_t(rng());
      if ((b & 0x7F) == 0x7F) b &= 0xFE;
    }
  }
}

// A comma-separated flag value ("1,8,32") as its words / integers.
std::vector<std::string> parse_words(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

std::vector<int> parse_ints(const std::string& s) {
  std::vector<int> out;
  for (const std::string& w : parse_words(s)) out.push_back(std::atoi(w.c_str()));
  return out;
}

}  // namespace

bool DecodeAttentionArgs::take_flag(int argc, char** argv, int& i) {
  if (i + 1 >= argc) return false;
  const std::string a = argv[i];
  const char* value = argv[i + 1];
  if (a == "--batch") batches = parse_ints(value);
  else if (a == "--context") context = std::atoi(value);
  else if (a == "--kv") kvs = parse_words(value);
  else if (a == "--heads") p.num_heads = std::atoi(value);
  else if (a == "--kv-heads") p.num_kv_heads = std::atoi(value);
  else if (a == "--head-dim") p.head_dim = std::atoi(value);
  else if (a == "--iters") iters = std::atoi(value);
  else if (a == "--json") json_path = value;
  else return false;
  ++i;
  return true;
}

bool DecodeAttentionArgs::lists_ok(const char* program) const {
  for (const int b : batches)
    if (b < 1) {
      std::fprintf(stderr, "%s: --batch %d is not ≥ 1\n", program, b);
      return false;
    }
  for (const std::string& kv : kvs)
    if (kv != "bf16" && kv != "e4m3") {
      std::fprintf(stderr, "%s: --kv %s is not bf16 or e4m3\n", program, kv.c_str());
      return false;
    }
  return true;
}

void DecodeAttentionArgs::write_json(nlohmann::json doc, const nlohmann::json& results) const {
  if (json_path.empty()) return;
  doc["shape"] = {{"heads", p.num_heads},
                  {"kv_heads", p.num_kv_heads},
                  {"head_dim", p.head_dim},
                  {"context", context},
                  {"block_size", kBlockSize}};
  doc["iters"] = iters;
  doc["results"] = results;
  std::ofstream(json_path) << doc.dump(1) << "\n";  // nlohmann::json sorts the keys: the order added is moot
}

int run_reporting_errors(const char* program, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

// The random draws, in this order: K then V of each copy, the block permutation, Q. Both programs
// build their inputs here, which is what keeps their bytes (and their published numbers) equal.
DecodeAttentionWorkload::DecodeAttentionWorkload(int batch, int context, KvElement element,
                                                 const backend::AttentionParams& p)
    : batch_(batch), element_(element), p_(p), attended_(context + 1),
      blocks_per_seq_((attended_ + kBlockSize - 1) / kBlockSize) {
  const size_t layer_bytes =
      size_t(num_blocks()) * size_t(p.num_kv_heads) * kBlockSize * size_t(p.head_dim) * element_bytes(element);
  copies_ = int(std::max<size_t>(2, (kRotateBytes + 2 * layer_bytes - 1) / (2 * layer_bytes)));

  std::mt19937_64 rng(0x6174746eULL + uint64_t(batch));
  DeviceAllocator& alloc = DeviceAllocator::global();
  std::vector<uint8_t> host(layer_bytes);
  for (int c = 0; c < copies_; ++c) {
    for (auto* list : {&ks_, &vs_}) {
      fill_cache(host, element, rng);
      list->emplace_back(alloc, layer_bytes);
      FP8LM_CUDA_CHECK(cudaMemcpy(list->back().get(), host.data(), layer_bytes, cudaMemcpyHostToDevice));
    }
  }

  // One decode row per sequence at position `context`; blocks scattered over the cache. The
  // metadata arrays are one upload, in DeviceAttentionBatch's order, block tables last.
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks()));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const auto n = static_cast<size_t>(batch);
  std::vector<int32_t> row_seq(n), row_pos(n, context), first(n), ntok(n, 1), start(n, context);
  std::iota(row_seq.begin(), row_seq.end(), 0);
  std::iota(first.begin(), first.end(), 0);
  std::vector<int32_t> meta;
  for (const auto* v : {&row_seq, &row_pos, &first, &ntok, &start, &perm})
    meta.insert(meta.end(), v->begin(), v->end());
  meta_ = DeviceBuffer(alloc, meta.size() * 4);
  FP8LM_CUDA_CHECK(cudaMemcpy(meta_.get(), meta.data(), meta.size() * 4, cudaMemcpyHostToDevice));
  const int32_t* m = meta_.as<int32_t>();
  attention_batch_.num_seqs = batch;
  attention_batch_.num_rows = batch;
  attention_batch_.row_seq = m;
  attention_batch_.row_position = m + batch;
  attention_batch_.seq_first_row = m + 2 * batch;
  attention_batch_.seq_num_tokens = m + 3 * batch;
  attention_batch_.seq_start_position = m + 4 * batch;
  attention_batch_.block_tables = block_tables();
  attention_batch_.max_blocks_per_seq = blocks_per_seq_;
  attention_batch_.max_new_tokens = 1;
  attention_batch_.max_decode_new_tokens = 1;  // as the engine gives it (cuda_ops)
  attention_batch_.max_context = attended_;

  std::vector<uint8_t> q_host(q_elems() * 2);
  fill_cache(q_host, KvElement::kBF16, rng);
  q_ = DeviceBuffer(alloc, q_host.size());
  out_ = DeviceBuffer(alloc, q_host.size());
  FP8LM_CUDA_CHECK(cudaMemcpy(q_.get(), q_host.data(), q_host.size(), cudaMemcpyHostToDevice));
  workspace_ = DeviceBuffer(alloc, cuda::paged_attention_workspace_bytes(attention_batch_, p_));  // null when 0
  counters_ = DeviceBuffer(alloc, size_t(cuda::kAttentionMergeCounters) * 4);
  FP8LM_CUDA_CHECK(cudaMemset(counters_.get(), 0, counters_.bytes()));
  FP8LM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_.s, cudaStreamNonBlocking));
}

cuda::DeviceKvLayer DecodeAttentionWorkload::layer(int copy) const {
  cuda::DeviceKvLayer kv;
  kv.k = ks_[size_t(copy)].get();
  kv.v = vs_[size_t(copy)].get();
  kv.element = element_;
  kv.k_scale = kv.v_scale = kv_scale();
  return kv;
}

void DecodeAttentionWorkload::run_paged_attention(int copy) const {
  cuda::paged_attention(q(), out(), attention_batch_, p_, kBlockSize, layer(copy), workspace(), workspace_bytes(),
                        stream(), merge_counters());
}

const char* DecodeAttentionWorkload::paged_attention_kernel() const {
  if (cuda::paged_attention_decode_uses_pairs(attention_batch_, p_, element_)) return "warp per pair";
  return cuda::paged_attention_decode_uses_mma(attention_batch_, p_, element_) ? "tensor-core decode" : "split SIMT";
}

double DecodeAttentionWorkload::kv_bytes() const {
  return double(batch_) * attended_ * p_.num_kv_heads * double(p_.head_dim) * double(element_bytes(element_)) * 2;
}

}  // namespace fp8lm::bench
