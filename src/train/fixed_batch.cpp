// FixedBatchWorkload implementation.
#include "train/fixed_batch.hpp"

#include "core/rng.hpp"
#include "net/graph.hpp"

namespace cnnergy {

namespace {
// upload_random_batch(), returning the host images (FixedBatchWorkload keeps them for upload timing).
Tensor upload_random_batch_kept(Backend& backend, std::int64_t classes, std::uint64_t seed, const Tensor& images,
                                const Tensor& labels) {
  Rng rng(seed);
  Tensor host_images = Tensor::host(images.shape());
  rng.fill_normal(host_images.f32(), 0, 1);
  const std::int64_t batch = labels.shape()[0];
  Tensor host_labels = Tensor::host(Shape{batch}, DType::kI32);
  for (std::int64_t i = 0; i < batch; ++i)
    host_labels.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng.next_u32() % static_cast<std::uint64_t>(classes));
  backend.upload(host_images, images);
  backend.upload(host_labels, labels);
  return host_images;
}
}  // namespace

void upload_random_batch(Backend& backend, std::int64_t classes, std::uint64_t seed, const Tensor& images,
                         const Tensor& labels) {
  (void)upload_random_batch_kept(backend, classes, seed, images, labels);
}

namespace {
ExecutorOptions workload_options(std::int64_t batch, bool fuse_relu, ResidualFusion fuse_residual,
                                 std::optional<std::size_t> activation_budget_bytes, bool fuse_batch_norm_pool) {
  ExecutorOptions eo;
  eo.batch_size = batch;
  eo.fuse_relu = fuse_relu;
  eo.fuse_residual = fuse_residual != ResidualFusion::kOff;
  eo.fuse_residual_backward = fuse_residual == ResidualFusion::kForwardAndBackward;
  eo.activation_budget_bytes = activation_budget_bytes;
  eo.fuse_batch_norm_pool = fuse_batch_norm_pool;
  return eo;
}
}  // namespace

FixedBatchWorkload::FixedBatchWorkload(const Graph& graph, Backend& backend, std::int64_t batch, std::uint64_t seed,
                                       bool cuda_graph, bool fuse_relu, ResidualFusion fuse_residual,
                                       std::optional<std::size_t> activation_budget_bytes,
                                       bool fuse_batch_norm_pool)
    : FixedBatchWorkload(graph, backend,
                         workload_options(batch, fuse_relu, fuse_residual, activation_budget_bytes, fuse_batch_norm_pool),
                         seed, cuda_graph) {}

FixedBatchWorkload::FixedBatchWorkload(const Graph& graph, Backend& backend, const ExecutorOptions& options,
                                       std::uint64_t seed, bool cuda_graph) {
  const std::int64_t batch = options.batch_size;
  executor_ = std::make_unique<Executor>(graph, backend, options);
  executor_->initialize_parameters(seed);
  SolverOptions so;
  so.loss_scale = SolverOptions::loss_scale_for(backend.dtype());
  solver_ = std::make_unique<SgdSolver>(*executor_, so);
  step_ = std::make_unique<TrainStep>(*executor_, *solver_, cuda_graph);
  const Shape& per = graph.input_per_sample();
  const Shape in_shape{batch, per[0], per[1], per[2]};
  images_ = backend.alloc(in_shape, DType::kF32);
  labels_ = backend.alloc(Shape{batch}, DType::kI32);
  host_images_ = upload_random_batch_kept(backend, graph.num_classes(), seed + 1, images_, labels_);
  executor_->set_input(images_, labels_);
}

void FixedBatchWorkload::step() { step_->run(0); }

}  // namespace cnnergy
