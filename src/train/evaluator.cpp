// evaluate(): batches at the executor's batch size; the final partial batch is padded with its own
// first sample and only its real rows are counted.
#include "train/evaluator.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/errors.hpp"
#include "data/loader.hpp"
#include "net/executor.hpp"

namespace cnnergy {

namespace {
// Rank of the label's logit: number of logits strictly greater than it.
std::int64_t rank_of_label(const float* row, std::int64_t classes, std::int32_t label) {
  std::int64_t greater = 0;
  for (std::int64_t k = 0; k < classes; ++k) greater += row[k] > row[label] ? 1 : 0;
  return greater;
}
}  // namespace

Accuracy evaluate(Executor& executor, std::shared_ptr<const data::Dataset> dataset, std::int64_t max_batches,
                  int workers) {
  Backend& backend = executor.backend();
  const std::int64_t batch = executor.batch_size();
  data::LoaderOptions lo;
  lo.batch_size = std::min<std::int64_t>(batch, dataset->size());
  lo.shuffle = false;
  lo.drop_last = false;
  lo.epochs = 1;
  lo.workers = workers;
  data::DataLoader loader(dataset, lo, backend);

  const Shape& per = dataset->sample_shape();
  const Shape in_shape{batch, per[0], per[1], per[2]};
  Tensor images = backend.alloc(in_shape, DType::kF32);
  Tensor labels = backend.alloc(Shape{batch}, DType::kI32);
  Tensor host_images = Tensor::host(in_shape);
  Tensor host_labels = Tensor::host(Shape{batch}, DType::kI32);
  const std::int64_t classes = executor.graph().num_classes();
  Tensor host_logits = Tensor::host(Shape{batch, classes});

  Accuracy acc;
  std::int64_t hits1 = 0, hits5 = 0, seen = 0;
  while (auto b = loader.next()) {
    const std::int64_t n = b->size();
    const std::size_t per_bytes = static_cast<std::size_t>(per.numel()) * sizeof(float);
    std::memcpy(host_images.raw(), b->images.raw(), per_bytes * static_cast<std::size_t>(n));
    std::memcpy(host_labels.raw(), b->labels.raw(), sizeof(std::int32_t) * static_cast<std::size_t>(n));
    for (std::int64_t i = n; i < batch; ++i) {  // pad a partial batch with its first sample
      std::memcpy(static_cast<char*>(host_images.raw()) + per_bytes * static_cast<std::size_t>(i), b->images.raw(), per_bytes);
      host_labels.data<std::int32_t>()[i] = host_labels.data<std::int32_t>()[0];
    }
    backend.upload(host_images, images);
    backend.upload(host_labels, labels);
    executor.set_input(images, labels);
    executor.forward(Phase::kEval);
    const Tensor& logits = executor.logits();
    if (logits.dtype() == DType::kF32) {
      backend.download(logits, host_logits);
    } else {
      Tensor lowp = Tensor::host(logits.shape(), logits.dtype());
      backend.download(logits, lowp);
      host_logits = to_f32_nchw(lowp);
    }
    for (std::int64_t i = 0; i < n; ++i) {
      const auto r = rank_of_label(host_logits.data<float>() + i * classes, classes, host_labels.data<std::int32_t>()[i]);
      hits1 += r < 1;
      hits5 += r < 5;
    }
    seen += n;
    if (max_batches > 0 && b->index_in_epoch + 1 >= max_batches) break;
  }
  if (seen == 0) throw InvalidArgument("evaluation data set '" + dataset->name() + "' is empty");
  acc.samples = seen;
  acc.top1 = static_cast<double>(hits1) / static_cast<double>(seen);
  acc.top5 = static_cast<double>(hits5) / static_cast<double>(seen);
  return acc;
}

}  // namespace cnnergy
