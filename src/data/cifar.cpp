// CIFAR-10 binary reader: record layout validation at open, pixels read per batch with pread.
#include "data/cifar.hpp"

#include <algorithm>
#include <array>
#include <cstdint>

#include "core/errors.hpp"
#include "data/file_io.hpp"

namespace cnnergy::data {
namespace {

constexpr std::int64_t kChannels = 3, kSide = 32, kClasses = 10;
constexpr std::uint64_t kPixels = kChannels * kSide * kSide;  // 3072
constexpr std::uint64_t kRecord = 1 + kPixels;                // 3073

const std::array<std::string, kClasses> kClassNames = {
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};

class CifarDataset final : public Dataset {
 public:
  CifarDataset(std::string name, std::vector<ReadOnlyFile> files,
               std::vector<std::int64_t> first_record, std::vector<std::uint8_t> labels,
               const Normalisation& normalisation)
      : name_(std::move(name)),
        files_(std::move(files)),
        first_record_(std::move(first_record)),
        labels_(std::move(labels)) {
    for (std::size_t c = 0; c < kChannels; ++c) {
      scale_[c] = 1.0f / (255.0f * normalisation.stddev[c]);
      shift_[c] = -normalisation.mean[c] / normalisation.stddev[c];
    }
  }

  std::string name() const override { return name_; }
  std::int64_t size() const override { return static_cast<std::int64_t>(labels_.size()); }
  Shape sample_shape() const override { return {kChannels, kSide, kSide}; }
  std::int64_t num_classes() const override { return kClasses; }
  std::vector<std::string> class_names() const override {
    return {kClassNames.begin(), kClassNames.end()};
  }

 protected:
  void fill_checked(std::span<const std::int64_t> indices, const Augmentation& /*augmentation*/,
                    std::span<float> images, std::span<std::int32_t> labels) const override {
    std::array<std::uint8_t, kPixels> pixels{};
    for (std::size_t i = 0; i < indices.size(); ++i) {
      const std::int64_t sample = indices[i];
      std::size_t f = 0;  // the file holding the sample: first_record_ is ascending
      while (f + 1 < first_record_.size() && first_record_[f + 1] <= sample) ++f;
      const auto record = static_cast<std::uint64_t>(sample - first_record_[f]);
      files_[f].read_at(record * kRecord + 1, pixels);
      float* dst = images.data() + i * kPixels;
      for (std::size_t c = 0; c < kChannels; ++c)
        for (std::size_t p = 0; p < kSide * kSide; ++p) {
          const std::size_t k = c * kSide * kSide + p;
          dst[k] = static_cast<float>(pixels[k]) * scale_[c] + shift_[c];
        }
      labels[i] = labels_[static_cast<std::size_t>(sample)];
    }
  }

 private:
  std::string name_;
  std::vector<ReadOnlyFile> files_;
  std::vector<std::int64_t> first_record_;  // index of each file's first sample
  std::vector<std::uint8_t> labels_;
  std::array<float, kChannels> scale_{}, shift_{};
};

}  // namespace

Normalisation cifar10_normalisation() {
  return {{0.4914009f, 0.4821585f, 0.4465309f}, {0.2470322f, 0.2434851f, 0.2615879f}};
}

std::shared_ptr<const Dataset> open_cifar10_files(const std::vector<std::filesystem::path>& paths,
                                                  const std::string& name,
                                                  const Normalisation& normalisation) {
  if (normalisation.mean.size() != kChannels || normalisation.stddev.size() != kChannels)
    throw InvalidArgument(name +
                          ": CIFAR-10 normalisation needs 3 means and 3 standard deviations");
  for (const float s : normalisation.stddev)
    if (!(s > 0.0f)) throw InvalidArgument(name + ": standard deviations must be positive");
  if (paths.empty()) throw InvalidArgument(name + ": no files given");
  std::vector<ReadOnlyFile> files;
  std::vector<std::int64_t> first_record;
  std::vector<std::uint8_t> labels;
  for (const auto& path : paths) {
    ReadOnlyFile file(path);
    const std::uint64_t size = file.size_bytes();
    if (size == 0) throw DataError(path.string() + ": empty file (expected records of 3073 bytes)");
    if (size % kRecord != 0)
      throw DataError(
          path.string() + ": " + std::to_string(size) +
          " bytes is not a whole number of 3073-byte " +
          "records (1 label + 3x32x32 pixels): truncated or not a CIFAR-10 binary batch");
    // One pass over the file reads the label bytes (and warms the page cache for training).
    const std::uint64_t records = size / kRecord;
    std::vector<std::uint8_t> chunk;
    constexpr std::uint64_t kRecordsPerRead = 512;
    for (std::uint64_t r0 = 0; r0 < records; r0 += kRecordsPerRead) {
      const std::uint64_t n = std::min(kRecordsPerRead, records - r0);
      chunk.resize(static_cast<std::size_t>(n * kRecord));
      file.read_at(r0 * kRecord, chunk);
      for (std::uint64_t r = 0; r < n; ++r) {
        const std::uint8_t label = chunk[static_cast<std::size_t>(r * kRecord)];
        if (label >= kClasses)
          throw DataError(path.string() + ": record " + std::to_string(r0 + r) + " has label " +
                          std::to_string(label) +
                          ", outside [0, 10): corrupt or not a CIFAR-10 binary batch");
        labels.push_back(label);
      }
    }
    first_record.push_back(static_cast<std::int64_t>(labels.size() - records));
    files.push_back(std::move(file));
  }
  return std::make_shared<CifarDataset>(name, std::move(files), std::move(first_record),
                                        std::move(labels), normalisation);
}

DatasetSplits open_cifar10_directory(const std::filesystem::path& dir,
                                     const Normalisation& normalisation) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw DataError(dir.string() +
                    ": no such directory (cifar10 needs data_batch_1..5.bin and test_batch.bin)");
  std::filesystem::path root = dir;
  if (!std::filesystem::exists(root / "data_batch_1.bin", ec) &&
      std::filesystem::is_directory(dir / "cifar-10-batches-bin", ec))
    root = dir / "cifar-10-batches-bin";
  std::vector<std::filesystem::path> train;
  for (int b = 1; b <= 5; ++b) {
    const auto path = root / ("data_batch_" + std::to_string(b) + ".bin");
    if (!std::filesystem::exists(path, ec))
      throw DataError(path.string() + ": missing (CIFAR-10 training batch)");
    train.push_back(path);
  }
  const auto test = root / "test_batch.bin";
  if (!std::filesystem::exists(test, ec))
    throw DataError(test.string() + ": missing (CIFAR-10 test batch)");
  DatasetSplits splits;
  splits.train = open_cifar10_files(train, "cifar10 train", normalisation);
  splits.test = open_cifar10_files({test}, "cifar10 test", normalisation);
  return splits;
}

}  // namespace cnnergy::data
