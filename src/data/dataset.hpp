// The data set interface every source implements (synthetic, IDX, CIFAR-10, image folders), the
// train/test pair a spec string opens, and the model/data shape check. Samples come out as fp32
// NCHW, already normalised, with int32 labels; the prefetching loader (loader.hpp) batches them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/shape.hpp"

namespace cnnergy::data {

// Random training augmentation (crop offset, mirror) of one batch. Each sample's draw comes from
// (seed, sample index), so a run is reproducible whatever the number of loader threads.
struct Augmentation {
  bool enabled = false;
  std::uint64_t seed = 0;
};

// Per-channel normalisation of pixels first scaled to [0, 1]: x' = (x - mean[c]) / stddev[c].
// One entry applies to every channel.
struct Normalisation {
  std::vector<float> mean;
  std::vector<float> stddev;
};

// A data set: `size()` samples of shape `sample_shape()` = {C, H, W}, labels in [0, num_classes()).
// fill() is const and thread-safe: the loader calls it from several threads at once.
class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual std::string name() const = 0;  // "fashion-mnist train", "synthetic 3x224x224 ..."
  virtual std::int64_t size() const = 0;
  virtual Shape sample_shape() const = 0;  // {C, H, W}
  virtual std::int64_t num_classes() const = 0;
  virtual std::vector<std::string> class_names() const { return {}; }  // empty where unnamed

  std::int64_t sample_numel() const { return sample_shape().numel(); }

  // Writes samples `indices[i]` to images[i * sample_numel() ...] (fp32 C,H,W, normalised) and
  // their labels to labels[i]. Throws InvalidArgument for an index outside [0, size()) or spans
  // of the wrong length, DataError for a sample that cannot be read (naming the file).
  void fill(std::span<const std::int64_t> indices, const Augmentation& augmentation,
            std::span<float> images, std::span<std::int32_t> labels) const;

 protected:
  // Called by fill() after the arguments were checked.
  virtual void fill_checked(std::span<const std::int64_t> indices, const Augmentation& augmentation,
                            std::span<float> images, std::span<std::int32_t> labels) const = 0;
};

// A view of some samples of another data set, in the order given (for `limit=` and holdouts).
class SubsetDataset final : public Dataset {
 public:
  SubsetDataset(std::shared_ptr<const Dataset> parent, std::vector<std::int64_t> indices,
                std::string name);
  std::string name() const override { return name_; }
  std::int64_t size() const override { return static_cast<std::int64_t>(indices_.size()); }
  Shape sample_shape() const override { return parent_->sample_shape(); }
  std::int64_t num_classes() const override { return parent_->num_classes(); }
  std::vector<std::string> class_names() const override { return parent_->class_names(); }

 protected:
  void fill_checked(std::span<const std::int64_t> indices, const Augmentation& augmentation,
                    std::span<float> images, std::span<std::int32_t> labels) const override;

 private:
  std::shared_ptr<const Dataset> parent_;
  std::vector<std::int64_t> indices_;
  std::string name_;
};

// The first `count` samples (all of them when count >= size).
std::shared_ptr<const Dataset> take_first(std::shared_ptr<const Dataset> dataset,
                                          std::int64_t count);

// Splits a data set into (train, held-out) parts: a seeded permutation, the last
// round(fraction * size) samples held out. fraction must lie in (0, 1).
struct HoldoutSplit {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> held_out;
};
HoldoutSplit split_holdout(const std::shared_ptr<const Dataset>& dataset, double fraction,
                           std::uint64_t seed);

// What a spec opens: a training split and, where the source has one, a test split (else null).
struct DatasetSplits {
  std::string spec;
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> test;
};

// Opens a data set from a spec: "KIND[:POSITIONAL][:key=value]..." with KIND one of
//   fashion-mnist[:DIR]   mnist:DIR   cifar10:DIR   folder:DIR   synthetic:CxHxW
// (see docs/data.md for every option). An unknown kind is an InvalidArgument listing the kinds;
// missing or malformed files are DataError naming the file.
DatasetSplits open_dataset(const std::string& spec);

// The kinds open_dataset accepts, and a one-line usage of each (for --help).
std::vector<std::string> dataset_kinds();
std::string dataset_spec_help();

// Throws InvalidArgument naming both shapes when a model whose input is `model_input` ({C,H,W} or
// {N,C,H,W}) cannot take samples of `dataset_sample` ({C,H,W}), or naming both counts when the data
// set has more classes than the model has outputs.
void check_compatible(const Shape& dataset_sample, const Shape& model_input,
                      std::int64_t dataset_classes, std::int64_t model_classes);

}  // namespace cnnergy::data
