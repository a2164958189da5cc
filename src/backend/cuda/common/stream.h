// RAII CUDA streams and events, and device-side timing of a region of a stream.
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "backend/cuda/common/check.h"

namespace fp8lm::cuda {

// A non-blocking stream (does not synchronize with the legacy default stream).
class Stream {
 public:
  Stream() { FP8LM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }
  Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
      stream_ = std::exchange(o.stream_, nullptr);
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  operator cudaStream_t() const { return stream_; }  // NOLINT: used where a cudaStream_t is expected
  void synchronize() const { FP8LM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  Event() { FP8LM_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~Event() {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
  }
  Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      if (event_ != nullptr) (void)cudaEventDestroy(event_);
      event_ = std::exchange(o.event_, nullptr);
    }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(cudaStream_t stream) { FP8LM_CUDA_CHECK(cudaEventRecord(event_, stream)); }
  void synchronize() const { FP8LM_CUDA_CHECK(cudaEventSynchronize(event_)); }
  cudaEvent_t get() const { return event_; }

  // Milliseconds of device time between two recorded events (waits for `end`).
  static float elapsed_ms(const Event& start, const Event& end) {
    end.synchronize();
    float ms = 0.0f;
    FP8LM_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, end.event_));
    return ms;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

// Times the work enqueued on `stream` between start() and stop(), on the device.
class EventTimer {
 public:
  void start(cudaStream_t stream) { begin_.record(stream); }
  void stop(cudaStream_t stream) { end_.record(stream); }
  float elapsed_ms() const { return Event::elapsed_ms(begin_, end_); }

 private:
  Event begin_, end_;
};

}  // namespace fp8lm::cuda
