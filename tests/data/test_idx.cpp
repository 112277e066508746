// IDX (MNIST / Fashion-MNIST) reading: raw and gzip files the test writes, every malformed-input
// case (each a DataError naming the file), and the real Fashion-MNIST when its Debian package is
// present.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "data/data_test_util.hpp"
#include "data/dataset.hpp"
#include "data/idx.hpp"

using namespace cnnergy;
using namespace cnnergy::data;
using namespace cnnergy::data::testing;

namespace {

struct IdxContent {
  std::uint32_t n, h, w;
  std::vector<std::uint8_t> pixels, labels;
};

IdxContent random_content(Rng& rng, std::uint32_t n, std::uint32_t h, std::uint32_t w) {
  IdxContent c{n, h, w, std::vector<std::uint8_t>(std::size_t{n} * h * w),
               std::vector<std::uint8_t>(n)};
  for (auto& p : c.pixels) p = static_cast<std::uint8_t>(rng.next_u32());
  for (auto& l : c.labels) l = static_cast<std::uint8_t>(rng.next_u32() % 10);
  return c;
}

// Writes the four MNIST files into dir (gzip or raw, with the given file-name style).
void write_mnist_dir(const std::filesystem::path& dir, const IdxContent& train,
                     const IdxContent& test, bool gz, bool dotted = false) {
  auto name = [&](std::string base) {
    if (dotted) base[base.rfind("-idx")] = '.';
    return dir / (gz ? base + ".gz" : base);
  };
  auto put = [&](const std::string& base, const std::vector<std::uint8_t>& raw) {
    write_bytes(name(base), gz ? gzip_bytes(raw) : raw);
  };
  put("train-images-idx3-ubyte", idx_images(train.n, train.h, train.w, train.pixels));
  put("train-labels-idx1-ubyte", idx_labels(train.labels));
  put("t10k-images-idx3-ubyte", idx_images(test.n, test.h, test.w, test.pixels));
  put("t10k-labels-idx1-ubyte", idx_labels(test.labels));
}

void expect_samples_match(const Dataset& ds, const IdxContent& c, Rng& rng,
                          const Normalisation& norm) {
  ASSERT_EQ(ds.size(), c.n);
  ASSERT_EQ(ds.sample_shape(), (Shape{1, c.h, c.w}));
  ASSERT_EQ(ds.num_classes(), 10);
  std::vector<std::int64_t> indices;
  for (int i = 0; i < 9; ++i) indices.push_back(rng.next_u32() % c.n);
  const std::size_t per = std::size_t{c.h} * c.w;
  std::vector<float> images(indices.size() * per);
  std::vector<std::int32_t> labels(indices.size());
  ds.fill(indices, {}, images, labels);
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const auto s = static_cast<std::size_t>(indices[i]);
    EXPECT_EQ(labels[i], c.labels[s]);
    for (std::size_t p = 0; p < per; ++p) {
      const float expected = (c.pixels[s * per + p] / 255.0f - norm.mean[0]) / norm.stddev[0];
      ASSERT_NEAR(images[i * per + p], expected, 1e-5f) << "sample " << s << " pixel " << p;
    }
  }
}

// Runs `open` and checks that it throws DataError whose message names `file` and contains `what`.
template <typename F>
void expect_data_error(F&& open, const std::string& file, const std::string& what) {
  try {
    open();
    FAIL() << "no DataError; expected one naming " << file << " with '" << what << "'";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

class IdxTest : public ::testing::Test {
 protected:
  std::uint64_t seed_ = default_seed();
  Rng rng_{seed_};
  TempDir dir_;
  void SetUp() override { RecordProperty("seed", std::to_string(seed_)); }
  std::string replay() const { return "CNNERGY_SEED=" + std::to_string(seed_); }
};

}  // namespace

TEST_F(IdxTest, ReadsRawAndGzipFilesAndNormalises) {
  SCOPED_TRACE(replay());
  const IdxContent train = random_content(rng_, 23, 5, 7), test = random_content(rng_, 11, 5, 7);
  for (const bool gz : {false, true}) {
    const auto d = dir_ / (gz ? "gz" : "raw");
    write_mnist_dir(d, train, test, gz);
    const DatasetSplits splits = open_dataset("mnist:" + d.string());
    expect_samples_match(*splits.train, train, rng_, mnist_normalisation());
    expect_samples_match(*splits.test, test, rng_, mnist_normalisation());
  }
}

TEST_F(IdxTest, FindsDottedFileNamesAndAppliesFashionMnistNormalisation) {
  SCOPED_TRACE(replay());
  const IdxContent train = random_content(rng_, 9, 4, 4), test = random_content(rng_, 6, 4, 4);
  write_mnist_dir(dir_.path(), train, test, /*gz=*/false, /*dotted=*/true);
  const DatasetSplits splits = open_dataset("fashion-mnist:" + dir_.path().string() + ":limit=5");
  EXPECT_EQ(splits.train->size(), 5);
  EXPECT_EQ(splits.test->size(), 6);
  expect_samples_match(*splits.test, test, rng_, fashion_mnist_normalisation());
}

TEST_F(IdxTest, EveryMalformedInputIsADataErrorNamingTheFile) {
  SCOPED_TRACE(replay());
  const IdxContent c = random_content(rng_, 8, 3, 3);
  const auto images = idx_images(c.n, c.h, c.w, c.pixels), labels = idx_labels(c.labels);
  const Normalisation norm = mnist_normalisation();
  const auto img = dir_ / "images", lab = dir_ / "labels";
  auto open = [&] { return open_idx(img, lab, "t", 10, norm); };
  write_bytes(img, images);
  write_bytes(lab, labels);
  ASSERT_NO_THROW(open());

  expect_data_error([&] { open_idx(dir_ / "absent", lab, "t", 10, norm); },
                    (dir_ / "absent").string(), "cannot open");

  auto bad = images;
  bad[3] = 0x01;  // a labels magic number in the images file
  write_bytes(img, bad);
  expect_data_error(open, img.string(), "wrong magic number 0x00000801");
  bad = images;
  bad[2] = 0x0D;  // float elements
  write_bytes(img, bad);
  expect_data_error(open, img.string(), "wrong magic number");

  bad.assign(images.begin(), images.end() - 5);  // truncated pixel data
  write_bytes(img, bad);
  expect_data_error(open, img.string(), "truncated");
  bad.assign(images.begin(), images.begin() + 10);  // truncated header
  write_bytes(img, bad);
  expect_data_error(open, img.string(), "truncated");
  bad = images;
  bad.push_back(0);
  write_bytes(img, bad);
  expect_data_error(open, img.string(), "bytes after the data");
  bad = images;
  bad[7] = 0;  // n = 0
  bad[4] = bad[5] = bad[6] = 0;
  write_bytes(img, bad);
  expect_data_error(open, img.string(), "dimension 0");

  write_bytes(img, images);
  std::vector<std::uint8_t> fewer(c.labels.begin(), c.labels.end() - 1);
  write_bytes(lab, idx_labels(fewer));
  expect_data_error(open, lab.string(), "holds 7 labels but");

  auto out_of_range = c.labels;
  out_of_range[5] = 10;
  write_bytes(lab, idx_labels(out_of_range));
  expect_data_error(open, lab.string(), "label 10 of sample 5 is outside [0, 10)");

  // gzip: truncated stream, corrupted stream, garbage after it.
  write_bytes(lab, labels);
  const auto gz = gzip_bytes(images);
  write_bytes(img, std::vector<std::uint8_t>(
                       gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(gz.size() / 2)));
  expect_data_error(open, img.string(), "truncated");
  auto corrupt = gz;
  corrupt[corrupt.size() - 6] ^= 0xFF;  // inside the CRC32 trailer
  write_bytes(img, corrupt);
  expect_data_error(open, img.string(), "corrupt gzip data");
  auto trailing = gz;
  trailing.push_back('x');
  write_bytes(img, trailing);
  expect_data_error(open, img.string(), "trailing garbage");
}

TEST_F(IdxTest, MissingFileInADirectoryIsNamed) {
  SCOPED_TRACE(replay());
  const IdxContent c = random_content(rng_, 4, 2, 2);
  write_mnist_dir(dir_.path(), c, c, /*gz=*/true);
  std::filesystem::remove(dir_ / "t10k-labels-idx1-ubyte.gz");
  expect_data_error([&] { open_dataset("mnist:" + dir_.path().string()); },
                    "t10k-labels-idx1-ubyte", "missing");
  expect_data_error([&] { open_dataset("mnist:" + (dir_ / "nowhere").string()); }, "nowhere",
                    "no such directory");
}

TEST(IdxRealData, FashionMnistFromTheDebianPackage) {
  if (!std::filesystem::exists(std::filesystem::path(kFashionMnistDefaultDir) /
                               "train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (" << kFashionMnistDefaultDir << ")";
  const DatasetSplits splits = open_dataset("fashion-mnist");
  ASSERT_EQ(splits.train->size(), 60000);
  ASSERT_EQ(splits.test->size(), 10000);
  EXPECT_EQ(splits.train->sample_shape(), (Shape{1, 28, 28}));
  for (const auto& ds : {splits.train, splits.test}) {
    std::vector<std::int64_t> per_class(10, 0);
    double sum = 0, sum_sq = 0;
    const std::int64_t chunk = 2000;
    std::vector<float> images(static_cast<std::size_t>(chunk) * 784);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(chunk));
    std::vector<std::int64_t> indices(static_cast<std::size_t>(chunk));
    for (std::int64_t first = 0; first < ds->size(); first += chunk) {
      for (std::int64_t i = 0; i < chunk; ++i) indices[static_cast<std::size_t>(i)] = first + i;
      ds->fill(indices, {}, images, labels);
      for (const std::int32_t l : labels) {
        ASSERT_GE(l, 0);
        ASSERT_LT(l, 10);
        ++per_class[static_cast<std::size_t>(l)];
      }
      for (const float v : images) {
        sum += v;
        sum_sq += static_cast<double>(v) * v;
      }
    }
    // Fashion-MNIST is balanced: 6000 (train) or 1000 (test) images per class.
    for (const std::int64_t count : per_class) EXPECT_EQ(count, ds->size() / 10) << ds->name();
    const double n = static_cast<double>(ds->size()) * 784;
    const double mean = sum / n, sd = std::sqrt(sum_sq / n - mean * mean);
    EXPECT_NEAR(mean, 0.0, 0.01) << ds->name();  // normalised with the training set's statistics
    EXPECT_NEAR(sd, 1.0, 0.01) << ds->name();
  }
}
