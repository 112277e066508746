// Synthetic samples from counter-based random numbers: any sample can be made alone, in any order,
// from any thread.
#include "data/synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/errors.hpp"
#include "core/hash.hpp"
#include "data/random.hpp"

namespace cnnergy::data {
namespace {

constexpr std::int64_t kGrid = 4;  // class patterns are kGrid x kGrid blocks per channel
constexpr std::uint64_t kPatternStream = 0x5EED0000C1A55ull;

class SyntheticDataset final : public Dataset {
 public:
  explicit SyntheticDataset(const SyntheticOptions& o)
      : options_(o),
        sample_seed_(mix64(o.seed, o.split + 1)),
        pattern_seed_(mix64(o.seed, kPatternStream)) {}

  std::string name() const override {
    return "synthetic " + options_.sample_shape.str() +
           " classes=" + std::to_string(options_.num_classes) +
           " size=" + std::to_string(options_.size) + (options_.learnable ? "" : " random-labels") +
           (options_.split == 0 ? " train" : " test");
  }
  std::int64_t size() const override { return options_.size; }
  Shape sample_shape() const override { return options_.sample_shape; }
  std::int64_t num_classes() const override { return options_.num_classes; }

 protected:
  void fill_checked(std::span<const std::int64_t> indices, const Augmentation& /*augmentation*/,
                    std::span<float> images, std::span<std::int32_t> labels) const override {
    const std::int64_t channels = options_.sample_shape[0], height = options_.sample_shape[1],
                       width = options_.sample_shape[2];
    const auto per_sample = static_cast<std::size_t>(channels * height * width);
    const auto classes = static_cast<std::uint64_t>(options_.num_classes);
    const std::int64_t gy = std::min(kGrid, height), gx = std::min(kGrid, width);
    std::vector<float> levels(static_cast<std::size_t>(channels * gy * gx));
    std::vector<std::int64_t> block_x(static_cast<std::size_t>(width));
    for (std::int64_t x = 0; x < width; ++x) block_x[static_cast<std::size_t>(x)] = x * gx / width;
    const float noise_scale = options_.noise / 32768.0f;
    for (std::size_t i = 0; i < indices.size(); ++i) {
      const std::uint64_t seed = mix64(sample_seed_, static_cast<std::uint64_t>(indices[i]));
      const std::uint64_t label = uniform_below(seed, 0, classes);
      const std::uint64_t pattern = options_.learnable ? label : uniform_below(seed, 1, classes);
      for (std::size_t l = 0; l < levels.size(); ++l)
        levels[l] = 2.0f * uniform01(pattern_seed_, pattern * levels.size() + l) - 1.0f;
      float* out = images.data() + i * per_sample;
      std::uint64_t counter = 16;  // draws 0..15 of this sample's seed are reserved for labels
      std::uint64_t bits = 0;
      int left = 0;  // 16-bit noise values left in `bits`
      for (std::int64_t c = 0; c < channels; ++c)
        for (std::int64_t y = 0; y < height; ++y) {
          const float* row_levels = levels.data() + (c * gy + y * gy / height) * gx;
          for (std::int64_t x = 0; x < width; ++x) {
            if (left == 0) {
              bits = mix64(seed, counter++);
              left = 4;
            }
            const auto u = static_cast<std::int32_t>(bits & 0xFFFFu) - 32768;  // [-32768, 32767]
            bits >>= 16;
            --left;
            *out++ = row_levels[block_x[static_cast<std::size_t>(x)]] +
                     noise_scale * static_cast<float>(u);
          }
        }
      labels[i] = static_cast<std::int32_t>(label);
    }
  }

 private:
  SyntheticOptions options_;
  std::uint64_t sample_seed_;
  std::uint64_t pattern_seed_;
};

}  // namespace

std::shared_ptr<const Dataset> make_synthetic(const SyntheticOptions& o) {
  if (o.sample_shape.rank() != 3 || o.sample_shape.numel() <= 0 || o.sample_shape[0] < 1 ||
      o.sample_shape[1] < 1 || o.sample_shape[2] < 1)
    throw InvalidArgument("synthetic sample shape must be CxHxW with positive sizes, got " +
                          o.sample_shape.str());
  if (o.size < 1)
    throw InvalidArgument("synthetic size must be positive, got " + std::to_string(o.size));
  if (o.num_classes < 1 || o.num_classes > (std::int64_t{1} << 30))
    throw InvalidArgument("synthetic classes must lie in [1, 2^30], got " +
                          std::to_string(o.num_classes));
  if (!(o.noise >= 0.0f) || !std::isfinite(o.noise))
    throw InvalidArgument("synthetic noise must be a finite value >= 0");
  return std::make_shared<SyntheticDataset>(o);
}

DatasetSplits make_synthetic_splits(const SyntheticOptions& options, std::int64_t test_size) {
  DatasetSplits splits;
  SyntheticOptions train = options;
  train.split = 0;
  splits.train = make_synthetic(train);
  SyntheticOptions test = options;
  test.split = 1;
  test.size = test_size;
  splits.test = make_synthetic(test);
  return splits;
}

}  // namespace cnnergy::data
