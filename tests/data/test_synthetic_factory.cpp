// Synthetic data (determinism, any shape, learnable vs random labels), spec parsing in
// open_dataset, subsets and holdouts, and the model/data compatibility check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "data/dataset.hpp"
#include "data/synthetic.hpp"

using namespace cnnergy;
using namespace cnnergy::data;

namespace {

std::vector<float> fill_indices(const Dataset& ds, const std::vector<std::int64_t>& indices,
                                std::vector<std::int32_t>* labels_out = nullptr) {
  std::vector<float> images(indices.size() * static_cast<std::size_t>(ds.sample_numel()));
  std::vector<std::int32_t> labels(indices.size());
  ds.fill(indices, {}, images, labels);
  if (labels_out) *labels_out = labels;
  return images;
}

// Accuracy on `test` of a nearest-centroid classifier over 4x4 block means fitted on `train`.
double nearest_centroid_accuracy(const Dataset& train, const Dataset& test) {
  const Shape s = train.sample_shape();
  const std::int64_t C = s[0], H = s[1], W = s[2], K = train.num_classes();
  const auto features = [&](const float* img) {
    std::vector<double> f(static_cast<std::size_t>(C * 16), 0.0);
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t y = 0; y < H; ++y)
        for (std::int64_t x = 0; x < W; ++x)
          f[static_cast<std::size_t>(c * 16 + (y * 4 / H) * 4 + x * 4 / W)] +=
              img[(c * H + y) * W + x];
    return f;
  };
  std::vector<std::vector<double>> centroid(
      static_cast<std::size_t>(K), std::vector<double>(static_cast<std::size_t>(C * 16), 0.0));
  const auto all_indices = [](const Dataset& ds) {
    std::vector<std::int64_t> v(static_cast<std::size_t>(ds.size()));
    for (std::int64_t i = 0; i < ds.size(); ++i) v[static_cast<std::size_t>(i)] = i;
    return v;
  };
  std::vector<std::int32_t> train_labels;
  const std::vector<float> train_images = fill_indices(train, all_indices(train), &train_labels);
  std::vector<std::int64_t> per_class(static_cast<std::size_t>(K), 0);
  for (std::size_t i = 0; i < train_labels.size(); ++i) {
    const auto f =
        features(train_images.data() + i * static_cast<std::size_t>(train.sample_numel()));
    const auto k = static_cast<std::size_t>(train_labels[i]);
    ++per_class[k];
    for (std::size_t j = 0; j < f.size(); ++j) centroid[k][j] += f[j];
  }
  for (std::size_t k = 0; k < centroid.size(); ++k)
    for (auto& v : centroid[k]) v /= static_cast<double>(std::max<std::int64_t>(1, per_class[k]));
  std::vector<std::int32_t> labels;
  const std::vector<float> images = fill_indices(test, all_indices(test), &labels);
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const auto f = features(images.data() + i * static_cast<std::size_t>(test.sample_numel()));
    double best = 1e300;
    std::size_t best_k = 0;
    for (std::size_t k = 0; k < centroid.size(); ++k) {
      if (per_class[k] == 0) continue;
      double d = 0;
      for (std::size_t j = 0; j < f.size(); ++j)
        d += (f[j] - centroid[k][j]) * (f[j] - centroid[k][j]);
      if (d < best) best = d, best_k = k;
    }
    correct += static_cast<std::int32_t>(best_k) == labels[i];
  }
  return static_cast<double>(correct) / static_cast<double>(labels.size());
}

}  // namespace

TEST(Synthetic, DeterministicPerSeedAndIndependentOfBatchComposition) {
  const std::uint64_t seed = default_seed();
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(seed));
  SyntheticOptions o;
  o.sample_shape = Shape{50, 60, 60};  // gait optical-flow volume
  o.size = 1000;
  o.num_classes = 155;
  o.seed = seed;
  const auto a = make_synthetic(o), b = make_synthetic(o);
  EXPECT_EQ(a->sample_shape(), (Shape{50, 60, 60}));
  std::vector<std::int32_t> la, lb;
  const auto one = fill_indices(*a, {7}, &la);
  const auto two = fill_indices(*b, {3, 7}, &lb);
  ASSERT_EQ(la[0], lb[1]);
  ASSERT_TRUE(
      std::equal(one.begin(), one.end(), two.begin() + static_cast<std::ptrdiff_t>(one.size())));
  for (const float v : one) ASSERT_TRUE(std::isfinite(v) && std::fabs(v) <= 2.0f);
  o.seed = seed + 1;
  EXPECT_NE(fill_indices(*make_synthetic(o), {7}), one);
  // Labels cover the classes and stay in range.
  std::vector<std::int64_t> all(1000);
  for (int i = 0; i < 1000; ++i) all[static_cast<std::size_t>(i)] = i;
  o.sample_shape = Shape{1, 2, 2};
  std::vector<std::int32_t> labels;
  fill_indices(*make_synthetic(o), all, &labels);
  std::set<std::int32_t> seen(labels.begin(), labels.end());
  EXPECT_GE(*seen.begin(), 0);
  EXPECT_LT(*seen.rbegin(), 155);
  EXPECT_GT(seen.size(), 140u);
}

TEST(Synthetic, LearnableLabelsAreLearnableAndRandomLabelsAreNot) {
  const std::uint64_t seed = default_seed();
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(seed));
  for (const bool learnable : {true, false}) {
    const DatasetSplits s = open_dataset(
        "synthetic:3x16x16:classes=10:size=400:test_size=200:seed=" +
        std::to_string(seed % 1000000) + ":labels=" + (learnable ? "learnable" : "random"));
    ASSERT_EQ(s.train->size(), 400);
    ASSERT_EQ(s.test->size(), 200);
    const double accuracy = nearest_centroid_accuracy(*s.train, *s.test);
    if (learnable)
      EXPECT_GT(accuracy, 0.9) << "learnable synthetic data should be separable";
    else
      EXPECT_LT(accuracy, 0.35) << "random labels should be near chance (0.1)";
  }
}

TEST(DatasetSpec, ParsesOptionsAndRejectsBadSpecs) {
  const DatasetSplits s = open_dataset("synthetic:3x224x224:classes=1000:size=50000:limit=100");
  EXPECT_EQ(s.train->size(), 100);
  EXPECT_EQ(s.test->size(), 10000);
  EXPECT_EQ(s.train->num_classes(), 1000);
  EXPECT_EQ(s.spec, "synthetic:3x224x224:classes=1000:size=50000:limit=100");

  try {
    open_dataset("imagenet:/data");
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    for (const auto& kind : dataset_kinds()) EXPECT_NE(msg.find(kind), std::string::npos) << msg;
  }
  try {
    open_dataset("synthetic:1x8x8:colour=red");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("classes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(open_dataset(""), InvalidArgument);
  EXPECT_THROW(open_dataset("synthetic"), InvalidArgument);
  EXPECT_THROW(open_dataset("synthetic:8x8"), InvalidArgument);
  EXPECT_THROW(open_dataset("synthetic:1x8x8:size=0"), InvalidArgument);
  EXPECT_THROW(open_dataset("synthetic:1x8x8:size=12abc"), InvalidArgument);
  EXPECT_THROW(open_dataset("synthetic:1x8x8:labels=maybe"), InvalidArgument);
  EXPECT_THROW(open_dataset("synthetic:1x8x8:size=5:size=6"), InvalidArgument);
  EXPECT_THROW(open_dataset("mnist"), InvalidArgument);
  EXPECT_THROW(open_dataset("cifar10"), InvalidArgument);
  EXPECT_FALSE(dataset_spec_help().empty());
}

TEST(DatasetSpec, FillRejectsBadIndicesAndSpans) {
  const auto ds = open_dataset("synthetic:1x4x4:size=10").train;
  std::vector<float> images(16);
  std::vector<std::int32_t> labels(1);
  EXPECT_THROW(ds->fill(std::vector<std::int64_t>{10}, {}, images, labels), InvalidArgument);
  EXPECT_THROW(ds->fill(std::vector<std::int64_t>{-1}, {}, images, labels), InvalidArgument);
  EXPECT_THROW(ds->fill(std::vector<std::int64_t>{1, 2}, {}, images, labels), InvalidArgument);
}

TEST(DatasetSubsets, HoldoutPartitionsAndTakeFirstMaps) {
  const auto ds = open_dataset("synthetic:1x2x2:size=50").train;
  const HoldoutSplit split = split_holdout(ds, 0.2, 5);
  ASSERT_EQ(split.train->size(), 40);
  ASSERT_EQ(split.held_out->size(), 10);
  // The two parts' samples are disjoint and together are the whole set (compared by content).
  std::set<std::vector<float>> seen;
  for (const auto& part : {split.train, split.held_out})
    for (std::int64_t i = 0; i < part->size(); ++i) seen.insert(fill_indices(*part, {i}));
  EXPECT_EQ(seen.size(), 50u);
  const auto first = take_first(ds, 3);
  EXPECT_EQ(first->size(), 3);
  EXPECT_EQ(fill_indices(*first, {2}), fill_indices(*ds, {2}));
  EXPECT_THROW(split_holdout(ds, 1.0, 1), InvalidArgument);
  EXPECT_THROW(split_holdout(ds, 0.001, 1), InvalidArgument);
}

TEST(CheckCompatible, NamesBothShapesOrClassCounts) {
  EXPECT_NO_THROW(check_compatible(Shape{1, 28, 28}, Shape{1, 28, 28}, 10, 10));
  EXPECT_NO_THROW(check_compatible(Shape{3, 227, 227}, Shape{64, 3, 227, 227}, 10, 1000));
  try {
    check_compatible(Shape{1, 28, 28}, Shape{3, 224, 224}, 10, 1000);
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("1x28x28"), std::string::npos) << msg;
    EXPECT_NE(msg.find("3x224x224"), std::string::npos) << msg;
  }
  try {
    check_compatible(Shape{3, 32, 32}, Shape{3, 32, 32}, 100, 10);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("100 classes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_compatible(Shape{3, 32, 32}, Shape{3072}, 10, 10), InvalidArgument);
}
