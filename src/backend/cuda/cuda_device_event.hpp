// The CUDA backend's DeviceEvent: a timing event recorded on the context's stream (or another),
// for the phase timers' device times.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <utility>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_context.hpp"
#include "backend/cuda/cuda_raii.hpp"
#include "backend/ops.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda {

class CudaDeviceEvent final : public DeviceEvent {
 public:
  explicit CudaDeviceEvent(std::shared_ptr<CudaContext> ctx) : ctx_(std::move(ctx)) {}

  void record() override { record_on(ctx_->stream()); }
  void record_on(cudaStream_t stream) {
    ctx_->activate();
    CNNERGY_CUDA_CALL(cudaEventRecord(event_, stream));
    recorded_ = true;
  }
  cudaEvent_t raw() const { return event_; }
  bool recorded() const { return recorded_; }
  void synchronize() override {
    require_recorded("synchronize");
    CNNERGY_CUDA_CALL(cudaEventSynchronize(event_));
  }
  bool ready() const override {
    if (!recorded_) return false;
    const cudaError_t s = cudaEventQuery(event_);
    if (s == cudaErrorNotReady) return false;
    CNNERGY_CUDA_CALL(s);
    return true;
  }
  double elapsed_ms(const DeviceEvent& since) const override {
    const auto* start = dynamic_cast<const CudaDeviceEvent*>(&since);
    if (start == nullptr) throw InvalidArgument("elapsed_ms: the start event is not a CUDA event");
    require_recorded("elapsed_ms");
    start->require_recorded("elapsed_ms (start event)");
    CNNERGY_CUDA_CALL(cudaEventSynchronize(start->event_));
    CNNERGY_CUDA_CALL(cudaEventSynchronize(event_));
    float ms = 0.0f;
    CNNERGY_CUDA_CALL(cudaEventElapsedTime(&ms, start->event_, event_));
    return ms;
  }

 private:
  void require_recorded(const char* what) const {
    if (!recorded_)
      throw InvalidArgument(std::string("device event: ") + what + " before record()");
  }
  std::shared_ptr<CudaContext> ctx_;
  Event event_;
  bool recorded_ = false;
};

}  // namespace cnnergy::cuda
