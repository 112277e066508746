// A model bound to a backend with one random batch already on the device: the workload that
// benchmarks, profiles and sweep trials measure (compute without the data loader in the way).
#pragma once

#include <cstdint>
#include <memory>

#include "backend/ops.hpp"
#include "net/executor.hpp"
#include "net/solver.hpp"
#include "train/train_step.hpp"

namespace cnnergy {

class Graph;

// Uploads normal(0, 1) images and uniform labels in [0, classes), drawn from `seed`, into the
// device tensors `images` (fp32 NCHW, N x C x H x W) and `labels` (int32, N); waits for the copy.
void upload_random_batch(Backend& backend, std::int64_t classes, std::uint64_t seed, const Tensor& images,
                         const Tensor& labels);

// ExecutorOptions::fuse_residual and ::fuse_residual_backward together.
enum class ResidualFusion { kOff, kForward, kForwardAndBackward };

class FixedBatchWorkload {
 public:
  // Allocates the executor (OutOfMemory here is a batch that does not fit), initialises weights
  // from `seed`, uploads normal(0, 1) images and uniform labels, and sets them as the input.
  // Loss scaling follows the backend dtype (dynamic for fp16). With cuda_graph the steps after the
  // first replay one recorded CUDA graph (TrainStep; NotSupported where it cannot). fuse_relu,
  // fuse_residual: ExecutorOptions::fuse_relu, ::fuse_residual and ::fuse_residual_backward (less
  // only to measure what the fusions bring); fuse_batch_norm_pool likewise ExecutorOptions'.
  FixedBatchWorkload(const Graph& graph, Backend& backend, std::int64_t batch, std::uint64_t seed = 1,
                     bool cuda_graph = false, bool fuse_relu = true,
                     ResidualFusion fuse_residual = ResidualFusion::kForwardAndBackward,
                     std::optional<std::size_t> activation_budget_bytes = std::nullopt,
                     bool fuse_batch_norm_pool = true);
  // The same with the executor's options given whole (options.batch_size is the batch).
  FixedBatchWorkload(const Graph& graph, Backend& backend, const ExecutorOptions& options, std::uint64_t seed,
                     bool cuda_graph);

  Executor& executor() { return *executor_; }
  SgdSolver& solver() { return *solver_; }
  const Tensor& host_images() const { return host_images_; }  // fp32 NCHW, for upload timing
  const Tensor& device_images() const { return images_; }
  const Tensor& device_labels() const { return labels_; }

  void step();  // forward, backward and update, enqueued only
  const TrainStep& train_step() const { return *step_; }

 private:
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<SgdSolver> solver_;
  std::unique_ptr<TrainStep> step_;
  Tensor host_images_, images_, labels_;
};

}  // namespace cnnergy
