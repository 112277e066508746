// CUDA-graph capture for a CUDA backend: records the device work a callable enqueues on the
// backend's stream (kernels, cuDNN/cuBLAS calls, async copies) into a graph once, then replays it
// with a single launch, removing per-kernel launch overhead from small, repeated steps.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "backend/ops.hpp"

namespace cnnergy::cuda {

class CudaContext;

class CudaGraph final : public CapturedWork {
 public:
  // InvalidArgument unless `backend` is a CUDA backend; the graph keeps its context alive.
  explicit CudaGraph(const Backend& backend);
  ~CudaGraph() override;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Runs `work` under stream capture: nothing executes now; the graph is instantiated at the end
  // (replacing any previous one). Rules for `work`:
  // * Run it once normally first: the first run of a convolution resolves its algorithm ("find"
  //   times kernels and waits for them), which cannot happen while capturing.
  // * No host waits inside (download, synchronize, event waits): they fail the capture.
  // * Buffers it frees are kept by the graph (not reused by other tensors) until the graph is
  //   destroyed; tensors it reads or writes that live outside, and the kernel objects it calls,
  //   must outlive the graph too.
  // A failure inside `work` (or a forbidden call) ends the capture and rethrows; no graph remains.
  void capture(const std::function<void()>& work);
  // Enqueues the captured work on the backend's stream (asynchronous, like the kernels it holds).
  void replay() override;
  bool captured() const { return exec_ != nullptr; }
  std::size_t node_count() const override { return node_count_; }

 private:
  void reset() noexcept;

  std::shared_ptr<CudaContext> ctx_;
  void* graph_ = nullptr;  // cudaGraph_t, kept opaque so that this header needs no CUDA headers
  void* exec_ = nullptr;   // cudaGraphExec_t
  std::size_t node_count_ = 0;
  struct Retained;
  std::unique_ptr<Retained> retained_;
};

}  // namespace cnnergy::cuda
