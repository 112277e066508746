// Synthetic data of any shape, size and class count, generated on the fly from (seed, index): no
// storage, identical on every run with the same seed. With learnable labels each class has its own
// coarse pattern (a 4x4 grid of levels per channel) under uniform noise, so a network can learn it
// and accuracy curves mean something; with random labels the image says nothing about the label.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/shape.hpp"
#include "data/dataset.hpp"

namespace cnnergy::data {

struct SyntheticOptions {
  Shape sample_shape{3, 224, 224};  // C, H, W (e.g. 50x60x60 for the gait optical-flow volumes)
  std::int64_t size = 50000;
  std::int64_t num_classes = 1000;
  bool learnable = true;    // false: labels independent of the images
  float noise = 1.0f;       // amplitude of the per-pixel uniform noise; class levels lie in [-1, 1)
  std::uint64_t seed = 1;   // class patterns and samples
  std::uint64_t split = 0;  // 0 train, 1 test: same class patterns, other samples
};

std::shared_ptr<const Dataset> make_synthetic(const SyntheticOptions& options);

// Train (options.size samples) and test (test_size samples) splits sharing class patterns.
DatasetSplits make_synthetic_splits(const SyntheticOptions& options, std::int64_t test_size);

}  // namespace cnnergy::data
