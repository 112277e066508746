// CIFAR-10 binary batches: small generated files read back exactly (across file boundaries), the
// cifar-10-batches-bin sub-directory found, and corrupt, truncated or missing files named in
// errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "data/cifar.hpp"
#include "data/data_test_util.hpp"
#include "data/dataset.hpp"

using namespace cnnergy;
using namespace cnnergy::data;
using namespace cnnergy::data::testing;

namespace {

constexpr std::size_t kRecord = 3073, kPixels = 3072;

struct CifarFiles {
  std::vector<std::vector<std::uint8_t>> train;  // five files
  std::vector<std::uint8_t> test;
};

std::vector<std::uint8_t> random_records(Rng& rng, std::size_t count) {
  std::vector<std::uint8_t> bytes(count * kRecord);
  for (std::size_t r = 0; r < count; ++r) {
    bytes[r * kRecord] = static_cast<std::uint8_t>(rng.next_u32() % 10);
    for (std::size_t p = 1; p < kRecord; ++p)
      bytes[r * kRecord + p] = static_cast<std::uint8_t>(rng.next_u32());
  }
  return bytes;
}

CifarFiles write_cifar(const std::filesystem::path& dir, Rng& rng) {
  CifarFiles files;
  const std::size_t counts[5] = {3, 1, 4, 2, 5};
  for (int b = 0; b < 5; ++b) {
    files.train.push_back(random_records(rng, counts[b]));
    write_bytes(dir / ("data_batch_" + std::to_string(b + 1) + ".bin"), files.train.back());
  }
  files.test = random_records(rng, 3);
  write_bytes(dir / "test_batch.bin", files.test);
  return files;
}

template <typename F>
void expect_data_error(F&& open, const std::string& file, const std::string& what) {
  try {
    open();
    FAIL() << "no DataError naming " << file;
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

class CifarTest : public ::testing::Test {
 protected:
  std::uint64_t seed_ = default_seed();
  Rng rng_{seed_};
  TempDir dir_;
  std::string replay() const { return "CNNERGY_SEED=" + std::to_string(seed_); }
};

}  // namespace

TEST_F(CifarTest, ReadsEveryRecordAcrossFilesAndNormalisesPerChannel) {
  SCOPED_TRACE(replay());
  const CifarFiles files = write_cifar(dir_ / "cifar-10-batches-bin", rng_);
  const DatasetSplits splits =
      open_dataset("cifar10:" + dir_.path().string());  // finds the sub-directory
  ASSERT_EQ(splits.train->size(), 15);
  ASSERT_EQ(splits.test->size(), 3);
  EXPECT_EQ(splits.train->sample_shape(), (Shape{3, 32, 32}));
  EXPECT_EQ(splits.train->class_names().at(9), "truck");
  std::vector<const std::uint8_t*> records;  // every training record in order
  for (const auto& f : files.train)
    for (std::size_t r = 0; r < f.size() / kRecord; ++r) records.push_back(f.data() + r * kRecord);
  std::vector<std::int64_t> indices(15);
  for (std::int64_t i = 0; i < 15; ++i)
    indices[static_cast<std::size_t>(i)] = 14 - i;  // reverse order
  std::vector<float> images(15 * kPixels);
  std::vector<std::int32_t> labels(15);
  splits.train->fill(indices, {}, images, labels);
  const Normalisation norm = cifar10_normalisation();
  for (std::size_t i = 0; i < 15; ++i) {
    const std::uint8_t* rec = records[static_cast<std::size_t>(indices[i])];
    EXPECT_EQ(labels[i], rec[0]);
    for (std::size_t p = 0; p < kPixels; ++p) {
      const std::size_t c = p / 1024;
      ASSERT_NEAR(images[i * kPixels + p], (rec[1 + p] / 255.0f - norm.mean[c]) / norm.stddev[c],
                  1e-4f);
    }
  }
  std::vector<std::int64_t> one{2};
  std::vector<float> image(kPixels);
  std::vector<std::int32_t> label(1);
  splits.test->fill(one, {}, image, label);
  EXPECT_EQ(label[0], files.test[2 * kRecord]);
}

TEST_F(CifarTest, CorruptTruncatedAndMissingFilesAreNamed) {
  SCOPED_TRACE(replay());
  CifarFiles files = write_cifar(dir_.path(), rng_);
  const std::string spec = "cifar10:" + dir_.path().string();
  ASSERT_NO_THROW(open_dataset(spec));

  const auto batch3 = dir_ / "data_batch_3.bin";
  auto truncated = files.train[2];
  truncated.resize(truncated.size() - 100);
  write_bytes(batch3, truncated);
  expect_data_error([&] { open_dataset(spec); }, batch3.string(),
                    "not a whole number of 3073-byte records");

  write_bytes(batch3, {});
  expect_data_error([&] { open_dataset(spec); }, batch3.string(), "empty file");

  auto bad_label = files.train[2];
  bad_label[2 * kRecord] = 10;
  write_bytes(batch3, bad_label);
  expect_data_error([&] { open_dataset(spec); }, batch3.string(), "record 2 has label 10");

  std::filesystem::remove(batch3);
  expect_data_error([&] { open_dataset(spec); }, batch3.string(), "missing");
  write_bytes(batch3, files.train[2]);
  std::filesystem::remove(dir_ / "test_batch.bin");
  expect_data_error([&] { open_dataset(spec); }, "test_batch.bin", "missing");
}
