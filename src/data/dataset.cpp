// Argument checking shared by every data set, subset views (limit, holdout) and the check that a
// model can take a data set's samples.
#include "data/dataset.hpp"

#include <cmath>
#include <string>

#include "core/errors.hpp"
#include "data/random.hpp"

namespace cnnergy::data {

void Dataset::fill(std::span<const std::int64_t> indices, const Augmentation& augmentation,
                   std::span<float> images, std::span<std::int32_t> labels) const {
  const auto per_sample = static_cast<std::size_t>(sample_numel());
  if (images.size() != indices.size() * per_sample || labels.size() != indices.size())
    throw InvalidArgument(name() + ": fill of " + std::to_string(indices.size()) +
                          " samples needs " + std::to_string(indices.size() * per_sample) +
                          " image values and " + std::to_string(indices.size()) + " labels, got " +
                          std::to_string(images.size()) + " and " + std::to_string(labels.size()));
  const std::int64_t n = size();
  for (const std::int64_t index : indices)
    if (index < 0 || index >= n)
      throw InvalidArgument(name() + ": sample index " + std::to_string(index) + " outside [0, " +
                            std::to_string(n) + ")");
  fill_checked(indices, augmentation, images, labels);
}

SubsetDataset::SubsetDataset(std::shared_ptr<const Dataset> parent,
                             std::vector<std::int64_t> indices, std::string name)
    : parent_(std::move(parent)), indices_(std::move(indices)), name_(std::move(name)) {
  CNNERGY_CHECK(parent_ != nullptr, "subset of no data set");
  const std::int64_t n = parent_->size();
  for (const std::int64_t index : indices_)
    if (index < 0 || index >= n)
      throw InvalidArgument(name_ + ": subset index " + std::to_string(index) + " outside [0, " +
                            std::to_string(n) + ")");
}

void SubsetDataset::fill_checked(std::span<const std::int64_t> indices,
                                 const Augmentation& augmentation, std::span<float> images,
                                 std::span<std::int32_t> labels) const {
  std::vector<std::int64_t> mapped(indices.size());
  for (std::size_t i = 0; i < indices.size(); ++i)
    mapped[i] = indices_[static_cast<std::size_t>(indices[i])];
  parent_->fill(mapped, augmentation, images, labels);
}

std::shared_ptr<const Dataset> take_first(std::shared_ptr<const Dataset> dataset,
                                          std::int64_t count) {
  if (count <= 0) throw InvalidArgument("limit must be positive, got " + std::to_string(count));
  if (count >= dataset->size()) return dataset;
  std::vector<std::int64_t> indices(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) indices[static_cast<std::size_t>(i)] = i;
  const std::string name = dataset->name() + " (first " + std::to_string(count) + ")";
  return std::make_shared<SubsetDataset>(std::move(dataset), std::move(indices), name);
}

HoldoutSplit split_holdout(const std::shared_ptr<const Dataset>& dataset, double fraction,
                           std::uint64_t seed) {
  if (!(fraction > 0.0 && fraction < 1.0))
    throw InvalidArgument("holdout fraction must lie in (0, 1), got " + std::to_string(fraction));
  const std::int64_t n = dataset->size();
  const auto held = static_cast<std::int64_t>(std::llround(fraction * static_cast<double>(n)));
  if (held < 1 || held >= n)
    throw InvalidArgument("holdout " + std::to_string(fraction) + " of " + std::to_string(n) +
                          " samples of " + dataset->name() + " leaves an empty split");
  const std::vector<std::int64_t> order = seeded_permutation(n, seed);
  std::vector<std::int64_t> train(order.begin(), order.end() - held);
  std::vector<std::int64_t> test(order.end() - held, order.end());
  const std::string base = dataset->name();
  HoldoutSplit split;
  split.train = std::make_shared<SubsetDataset>(dataset, std::move(train), base + " (train part)");
  split.held_out =
      std::make_shared<SubsetDataset>(dataset, std::move(test), base + " (held-out part)");
  return split;
}

void check_compatible(const Shape& dataset_sample, const Shape& model_input,
                      std::int64_t dataset_classes, std::int64_t model_classes) {
  if (dataset_sample.rank() != 3)
    throw InvalidArgument("data set sample shape must be CxHxW, got " + dataset_sample.str());
  Shape per_sample = model_input;
  if (model_input.rank() == 4) per_sample = Shape{model_input[1], model_input[2], model_input[3]};
  if (per_sample.rank() != 3)
    throw InvalidArgument("model input shape must be CxHxW or NxCxHxW, got " + model_input.str());
  if (!(per_sample == dataset_sample))
    throw InvalidArgument(
        "the data set's samples are " + dataset_sample.str() + " (CxHxW) but the model expects " +
        per_sample.str() + "; pick a model built for " + dataset_sample.str() +
        " inputs or a data set (e.g. crop=, synthetic:" + per_sample.str() + ") that matches");
  if (dataset_classes > model_classes)
    throw InvalidArgument("the data set has " + std::to_string(dataset_classes) +
                          " classes but the model has " + std::to_string(model_classes) +
                          " outputs; labels would fall outside the classifier");
}

}  // namespace cnnergy::data
