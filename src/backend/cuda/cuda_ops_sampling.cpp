// CudaOps::sample_rows and start_sample_rows (cuda_ops.h): the rows'
// descriptions packed on the host (while the step still runs on the device),
// one upload, the sampling kernel (sampling_kernels.h), rows int32 tokens back.
//
// It runs on a stream of its own, queued behind the backend's (the logits'
// producer: end_step_before), and needs nothing else of the backend's
// internals. start_sample_rows returns once it is queued; wait_tokens
// (finish_sampling) waits for the tokens.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/common/check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/sampling/sampling_kernels.h"
#include "backend/cuda/common/stream.h"
#include "common/error.h"

namespace fp8lm::cuda {

struct CudaOps::Sampling {
  Stream stream;
  // One device buffer [params | ids | counts | masks | tokens] and its pinned host
  // mirror, grown as needed (rarely: by the batch and the requests' lengths).
  void* device = nullptr;
  void* host = nullptr;
  size_t bytes = 0;
  std::vector<DeviceRowSampling> params;
  std::vector<int32_t> ids, counts;
  // Structured outputs: the masked rows' allowed-id bitmasks, copied straight into `host` (16 KB a
  // row at 128k ids: no staging copy), and their words in all.
  std::vector<std::span<const uint32_t>> masks;
  size_t mask_words = 0;
  size_t tokens_at = 0;  // the started call's tokens in `host`, and their count
  size_t rows = 0;

  Sampling() = default;
  Sampling(const Sampling&) = delete;
  Sampling& operator=(const Sampling&) = delete;
  ~Sampling() {
    (void)cudaStreamSynchronize(stream);
    if (device != nullptr) (void)cudaFree(device);
    if (host != nullptr) (void)cudaFreeHost(host);
  }
  void reserve(size_t need) {
    if (need <= bytes) return;
    need = std::max(need, bytes * 2);
    if (device != nullptr) FP8LM_CUDA_CHECK(cudaFree(device));
    if (host != nullptr) FP8LM_CUDA_CHECK(cudaFreeHost(host));
    device = host = nullptr;
    bytes = 0;
    FP8LM_CUDA_CHECK(cudaMalloc(&device, need));
    FP8LM_CUDA_CHECK(cudaMallocHost(&host, need));
    bytes = need;
  }
};

namespace {

size_t align8(size_t v) { return (v + 7) / 8 * 8; }

// The checks the host row math makes on its inputs, which the kernel takes as
// given: the penalty lists only where a penalty reads them (a long prompt is
// not walked every step for nothing).
void check_row(const backend::RowSampling& r, size_t row, int64_t vocab) {
  auto where = [&] { return "cuda ops: sample_rows row " + std::to_string(row) + ": "; };
  if (!r.greedy() && !(r.uniform >= 0.0 && r.uniform < 1.0))
    throw Error(where() + "the uniform " + std::to_string(r.uniform) + " is outside [0, 1)");
  if (!r.penalized()) return;
  auto in_vocab = [&](int32_t t, const char* what) {
    if (t < 0 || int64_t(t) >= vocab)
      throw Error(where() + what + " token id " + std::to_string(t) + " is outside the vocabulary of " +
                  std::to_string(vocab));
  };
  if (r.repetition_penalty != 1.0f)
    for (const int32_t t : r.prompt_tokens) in_vocab(t, "prompt");
  if (r.output_counts.size() != r.output_tokens.size())
    throw Error(where() + std::to_string(r.output_tokens.size()) + " output tokens but " +
                std::to_string(r.output_counts.size()) + " counts");
  for (size_t i = 0; i < r.output_tokens.size(); ++i) {
    in_vocab(r.output_tokens[i], "output");
    if (i > 0 && r.output_tokens[i] <= r.output_tokens[i - 1])
      throw Error(where() + "output tokens must be distinct and ascending (" + std::to_string(r.output_tokens[i - 1]) +
                  " then " + std::to_string(r.output_tokens[i]) + ")");
  }
}

}  // namespace

void CudaOps::sample_rows(backend::Tensor logits, std::span<const backend::RowSampling> rows,
                          std::span<int32_t> tokens) {
  if (tokens.size() != size_t(logits.rows))
    throw Error("cuda ops: sample_rows of " + std::to_string(logits.rows) + " rows given " +
                std::to_string(tokens.size()) + " outputs");
  start_sample_rows(logits, rows);
  std::vector<int32_t> got;
  wait_tokens(got);
  std::copy(got.begin(), got.end(), tokens.begin());
}

void CudaOps::start_sample_rows(backend::Tensor logits, std::span<const backend::RowSampling> rows) {
  if (rows.size() != size_t(logits.rows))
    throw Error("cuda ops: sample_rows of " + std::to_string(logits.rows) + " rows given " +
                std::to_string(rows.size()) + " row descriptions");
  if (started_ != Started::kNone) throw Error("cuda ops: sample_rows before the last step's tokens were waited for");
  if (!sampling_) sampling_ = std::make_shared<Sampling>();
  Sampling& s = *sampling_;
  s.rows = rows.size();
  if (rows.empty()) {
    started_ = Started::kSample;
    return;
  }

  // Pack: each row's prompt ids, then its output ids (their counts beside them).
  s.params.resize(rows.size());
  s.ids.clear();
  s.counts.clear();
  s.masks.clear();
  s.mask_words = 0;
  const size_t row_words = size_t((logits.cols + 31) / 32);
  for (size_t r = 0; r < rows.size(); ++r) {
    const backend::RowSampling& in = rows[r];
    check_row(in, r, logits.cols);
    DeviceRowSampling& d = s.params[r];
    d = DeviceRowSampling{};
    d.uniform = in.uniform;
    d.temperature = in.temperature;
    d.top_k = in.top_k;
    d.top_p = in.top_p;
    d.min_p = in.min_p;
    d.repetition_penalty = in.repetition_penalty;
    d.presence_penalty = in.presence_penalty;
    d.frequency_penalty = in.frequency_penalty;
    // The kernel reads the prompt ids for the repetition penalty only, the
    // output ids for any penalty.
    if (in.repetition_penalty != 1.0f) {
      d.prompt_begin = int32_t(s.ids.size());
      d.prompt_count = int32_t(in.prompt_tokens.size());
      s.ids.insert(s.ids.end(), in.prompt_tokens.begin(), in.prompt_tokens.end());
      s.counts.insert(s.counts.end(), in.prompt_tokens.size(), 0);
    }
    if (!in.allowed.empty()) {
      if (in.allowed.size() != row_words)
        throw Error("cuda ops: sample_rows row " + std::to_string(r) + ": an allowed-token mask of " +
                    std::to_string(in.allowed.size()) + " words for " + std::to_string(logits.cols) + " logits");
      d.mask_begin = int64_t(s.mask_words);
      s.masks.push_back(in.allowed);
      s.mask_words += row_words;
    }
    if (in.penalized()) {
      d.output_begin = int32_t(s.ids.size());
      d.output_count = int32_t(in.output_tokens.size());
      s.ids.insert(s.ids.end(), in.output_tokens.begin(), in.output_tokens.end());
      s.counts.insert(s.counts.end(), in.output_counts.begin(), in.output_counts.end());
    }
  }
  const size_t params_bytes = align8(rows.size() * sizeof(DeviceRowSampling));
  const size_t ids_bytes = align8(s.ids.size() * sizeof(int32_t));
  const size_t masks_bytes = align8(s.mask_words * sizeof(uint32_t));
  const size_t upload = params_bytes + 2 * ids_bytes + masks_bytes;
  const size_t tokens_bytes = rows.size() * sizeof(int32_t);
  s.reserve(upload + tokens_bytes);  // the last call's tokens were waited for: the buffers are free
  auto* host = static_cast<char*>(s.host);
  auto* device = static_cast<char*>(s.device);
  std::memcpy(host, s.params.data(), rows.size() * sizeof(DeviceRowSampling));
  std::memcpy(host + params_bytes, s.ids.data(), s.ids.size() * sizeof(int32_t));
  std::memcpy(host + params_bytes + ids_bytes, s.counts.data(), s.counts.size() * sizeof(int32_t));
  auto* mask_at = reinterpret_cast<uint32_t*>(host + params_bytes + 2 * ids_bytes);
  for (const std::span<const uint32_t> m : s.masks) mask_at = std::copy(m.begin(), m.end(), mask_at);

  // The upload first, while the step still runs (its buffers are free: the last call's tokens were
  // waited for): a batch's structured-output masks are megabytes (16 KB a row at 128k ids), which
  // would otherwise cross PCIe between the forward and the sampling.
  FP8LM_CUDA_CHECK(cudaMemcpyAsync(device, host, upload, cudaMemcpyHostToDevice, s.stream));
  end_step_before(s.stream);  // the logits are ready before the kernel reads them
  auto* d_tokens = reinterpret_cast<int32_t*>(device + upload);
  cuda::sample_rows(static_cast<const __nv_bfloat16*>(logits.data), logits.rows, logits.cols,
                    reinterpret_cast<const DeviceRowSampling*>(device),
                    reinterpret_cast<const int32_t*>(device + params_bytes),
                    reinterpret_cast<const int32_t*>(device + params_bytes + ids_bytes), d_tokens, s.stream, nullptr,
                    s.masks.empty() ? nullptr : reinterpret_cast<const uint32_t*>(device + params_bytes + 2 * ids_bytes));
  FP8LM_CUDA_CHECK(cudaMemcpyAsync(host + upload, d_tokens, tokens_bytes, cudaMemcpyDeviceToHost, s.stream));
  s.tokens_at = upload;
  started_ = Started::kSample;
}

void CudaOps::finish_sampling(std::vector<int32_t>& tokens) {
  Sampling& s = *sampling_;
  tokens.assign(s.rows, 0);
  if (s.rows == 0) return;
  wait_step_end();
  s.stream.synchronize();
  // A row the kernel refused (NaN, +inf, nothing left) keeps backend::kNoToken:
  // the engine fails its request alone.
  std::memcpy(tokens.data(), static_cast<const char*>(s.host) + s.tokens_at, s.rows * sizeof(int32_t));
}

}  // namespace fp8lm::cuda
