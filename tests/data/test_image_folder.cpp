// Image folders: JPEG/PNG decoding of images the test writes, crop and mirror geometry checked on a
// coordinate pattern, resize modes, class discovery, splits, and corrupt images as DataErrors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "data/data_test_util.hpp"
#include "data/dataset.hpp"
#include "data/image_codec.hpp"
#include "data/image_folder.hpp"

using namespace cnnergy;
using namespace cnnergy::data;
using namespace cnnergy::data::testing;

namespace {

// R = x, G = y, B = 255 - x: a pattern whose values say where each output pixel came from.
std::vector<std::uint8_t> coordinate_pattern(int size) {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(size) * size * 3);
  for (int y = 0; y < size; ++y)
    for (int x = 0; x < size; ++x) {
      std::uint8_t* p = px.data() + (static_cast<std::size_t>(y) * size + x) * 3;
      p[0] = static_cast<std::uint8_t>(x);
      p[1] = static_cast<std::uint8_t>(y);
      p[2] = static_cast<std::uint8_t>(255 - x);
    }
  return px;
}

std::vector<std::uint8_t> solid(int w, int h, int channels,
                                std::initializer_list<std::uint8_t> colour) {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * channels);
  for (std::size_t i = 0; i < px.size(); ++i)
    px[i] = colour.begin()[i % static_cast<std::size_t>(channels)];
  return px;
}

// Plain [0, 1] pixels: normalisation with mean 0 and std 1.
ImageFolderOptions unit_options(int crop) {
  ImageFolderOptions o;
  o.crop = crop;
  o.normalisation = {{0.0f}, {1.0f}};
  return o;
}

std::vector<float> fill_one(const Dataset& ds, std::int64_t index, const Augmentation& aug,
                            std::int32_t* label = nullptr) {
  std::vector<float> out(static_cast<std::size_t>(ds.sample_numel()));
  std::vector<std::int32_t> labels(1);
  const std::vector<std::int64_t> indices{index};
  ds.fill(indices, aug, out, labels);
  if (label) *label = labels[0];
  return out;
}

int byte_at(const std::vector<float>& img, int crop, int c, int y, int x) {
  return static_cast<int>(
      std::lround(img[(static_cast<std::size_t>(c) * crop + y) * crop + x] * 255.0f));
}

class ImageFolderTest : public ::testing::Test {
 protected:
  std::uint64_t seed_ = default_seed();
  Rng rng_{seed_};
  TempDir dir_;
  std::string replay() const { return "CNNERGY_SEED=" + std::to_string(seed_); }
};

}  // namespace

TEST_F(ImageFolderTest, CentreCropAndRandomCropMirrorGeometry) {
  SCOPED_TRACE(replay());
  write_png(dir_ / "only/pattern.png", 256, 256, 3, coordinate_pattern(256));
  const auto ds = open_image_folder(dir_.path(), unit_options(224), "pattern");
  ASSERT_EQ(ds->sample_shape(), (Shape{3, 224, 224}));

  const std::vector<float> centre = fill_one(*ds, 0, {});
  for (int y = 0; y < 224; y += 37)
    for (int x = 0; x < 224; x += 29) {
      ASSERT_EQ(byte_at(centre, 224, 0, y, x), 16 + x);  // (256 - 224) / 2 = 16
      ASSERT_EQ(byte_at(centre, 224, 1, y, x), 16 + y);
      ASSERT_EQ(byte_at(centre, 224, 2, y, x), 255 - 16 - x);
    }

  std::set<int> offsets_x, offsets_y;
  int mirrored = 0;
  const int draws = 48;
  for (int d = 0; d < draws; ++d) {
    const std::vector<float> img = fill_one(*ds, 0, {true, rng_.engine()()});
    const int left = byte_at(img, 224, 0, 0, 0), right = byte_at(img, 224, 0, 0, 223);
    const bool mirror = left > right;
    const int x0 = mirror ? right : left, y0 = byte_at(img, 224, 1, 0, 0);
    ASSERT_GE(x0, 0);
    ASSERT_LE(x0, 32);
    ASSERT_GE(y0, 0);
    ASSERT_LE(y0, 32);
    for (int y = 0; y < 224; y += 31)
      for (int x = 0; x < 224; x += 17) {
        ASSERT_EQ(byte_at(img, 224, 0, y, x), mirror ? x0 + 223 - x : x0 + x) << "draw " << d;
        ASSERT_EQ(byte_at(img, 224, 1, y, x), y0 + y) << "draw " << d;
      }
    mirrored += mirror;
    offsets_x.insert(x0);
    offsets_y.insert(y0);
  }
  // 48 fair coin flips all equal has probability 2^-47; 48 draws from 33 offsets hit >= 10 distinct
  // values with overwhelming probability.
  EXPECT_GT(mirrored, 0);
  EXPECT_LT(mirrored, draws);
  EXPECT_GE(offsets_x.size(), 10u);
  EXPECT_GE(offsets_y.size(), 10u);

  // The same augmentation seed gives the same crop (reproducible whatever the thread count).
  EXPECT_EQ(fill_one(*ds, 0, {true, 42}), fill_one(*ds, 0, {true, 42}));
}

TEST_F(ImageFolderTest, ResizeModesAndCrop227) {
  SCOPED_TRACE(replay());
  // 300x200, left half red, right half blue; shorter side 256 -> 384x256, centre crop 227.
  std::vector<std::uint8_t> px(300 * 200 * 3);
  for (int y = 0; y < 200; ++y)
    for (int x = 0; x < 300; ++x) {
      std::uint8_t* p = px.data() + (static_cast<std::size_t>(y) * 300 + x) * 3;
      p[0] = x < 150 ? 255 : 0;
      p[2] = x < 150 ? 0 : 255;
    }
  write_png(dir_ / "c/a.png", 300, 200, 3, px);
  ImageFolderOptions shorter = unit_options(227);
  shorter.resize_shorter = 256;
  const auto ds = open_image_folder(dir_.path(), shorter, "halves");
  EXPECT_EQ(ds->sample_shape(), (Shape{3, 227, 227}));
  const std::vector<float> img = fill_one(*ds, 0, {});
  // The crop covers resized x in [78, 305) of 384: the colour edge (x = 192) lands at column 114.
  EXPECT_EQ(byte_at(img, 227, 0, 100, 0), 255);
  EXPECT_EQ(byte_at(img, 227, 2, 100, 226), 255);
  EXPECT_EQ(byte_at(img, 227, 0, 100, 112), 255);
  EXPECT_EQ(byte_at(img, 227, 2, 100, 116), 255);

  // A large solid image shrunk (box filter + bilinear) to 256x256 keeps its colour exactly.
  write_png(dir_ / "big/cls/b.png", 1100, 700, 3, solid(1100, 700, 3, {10, 20, 30}));
  const auto big = open_image_folder(dir_ / "big", unit_options(224), "big");
  const std::vector<float> b = fill_one(*big, 0, {true, 7});
  for (int c = 0; c < 3; ++c) EXPECT_EQ(byte_at(b, 224, c, 111, 50), 10 * (c + 1));

  EXPECT_THROW(open_image_folder(dir_.path(), unit_options(257), "x"), InvalidArgument);
}

TEST_F(ImageFolderTest, JpegAndGreyImagesDecodeAndClassesSortByName) {
  SCOPED_TRACE(replay());
  const auto colour = static_cast<std::uint8_t>(40 + rng_.next_u32() % 160);
  write_bytes(dir_ / "zebra/1.jpg",
              encode_jpeg(64, 48, 3, solid(64, 48, 3, {colour, 100, 50}), 95));
  write_bytes(dir_ / "apple/x/deep.JPEG",
              encode_jpeg(1024, 1024, 1, solid(1024, 1024, 1, {77}), 95));
  write_png(dir_ / "mango/g.png", 30, 30, 1, solid(30, 30, 1, {200}));
  write_bytes(dir_ / "mango/notes.txt", {'h', 'i'});  // not an image: ignored
  const auto ds = open_image_folder(dir_.path(), unit_options(224), "mixed");
  ASSERT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->class_names(), (std::vector<std::string>{"apple", "mango", "zebra"}));
  std::int32_t label = -1;
  const std::vector<float> grey_jpeg =
      fill_one(*ds, 0, {}, &label);  // apple (decoded at 1/4 scale)
  EXPECT_EQ(label, 0);
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(byte_at(grey_jpeg, 224, c, 100, 100), 77, 2);
  const std::vector<float> grey_png = fill_one(*ds, 1, {}, &label);
  EXPECT_EQ(label, 1);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(byte_at(grey_png, 224, c, 5, 200), 200);
  const std::vector<float> rgb = fill_one(*ds, 2, {}, &label);
  EXPECT_EQ(label, 2);
  EXPECT_NEAR(byte_at(rgb, 224, 0, 120, 120), colour, 4);
  EXPECT_NEAR(byte_at(rgb, 224, 1, 120, 120), 100, 4);
  EXPECT_NEAR(byte_at(rgb, 224, 2, 120, 120), 50, 4);

  // Default normalisation is ImageNet's per-channel mean/std.
  const auto imagenet = open_image_folder(dir_.path(), ImageFolderOptions{}, "imagenet");
  const std::vector<float> n = fill_one(*imagenet, 1, {});
  const Normalisation in = imagenet_normalisation();
  for (int c = 0; c < 3; ++c)
    EXPECT_NEAR(n[static_cast<std::size_t>(c) * 224 * 224],
                (200 / 255.0f - in.mean[c]) / in.stddev[c], 1e-4f);
}

TEST_F(ImageFolderTest, CorruptImagesAreDataErrorsNamingTheFile) {
  SCOPED_TRACE(replay());
  const std::vector<std::uint8_t> jpeg = encode_jpeg(80, 60, 3, coordinate_pattern(80), 90);
  std::vector<std::uint8_t> garbage(400);
  for (auto& b : garbage) b = static_cast<std::uint8_t>(rng_.next_u32());
  std::vector<std::uint8_t> bad_jpeg{0xFF, 0xD8, 0xFF};
  bad_jpeg.insert(bad_jpeg.end(), garbage.begin(), garbage.end());
  std::vector<std::uint8_t> half_jpeg(jpeg.begin(),
                                      jpeg.begin() + static_cast<std::ptrdiff_t>(jpeg.size() / 2));
  std::vector<std::uint8_t> bad_png{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  bad_png.insert(bad_png.end(), garbage.begin(), garbage.end());
  write_png(dir_ / "tmp/ok.png", 16, 16, 3, coordinate_pattern(16));
  std::vector<std::uint8_t> half_png = [&] {
    const auto ok = std::filesystem::file_size(dir_ / "tmp/ok.png");
    std::vector<std::uint8_t> all(ok);
    FILE* f = std::fopen((dir_ / "tmp/ok.png").c_str(), "rb");
    EXPECT_EQ(std::fread(all.data(), 1, all.size(), f), all.size());
    std::fclose(f);
    all.resize(all.size() - 30);
    return all;
  }();
  std::filesystem::remove_all(dir_ / "tmp");

  const std::vector<std::pair<std::string, std::vector<std::uint8_t>>> cases = {
      {"a/good.jpg", jpeg},   {"a/bad_marker.jpg", bad_jpeg}, {"a/truncated.jpg", half_jpeg},
      {"a/bad.png", bad_png}, {"a/truncated.png", half_png},  {"a/text.jpg", {'n', 'o', 'p', 'e'}},
      {"a/empty.jpeg", {}}};
  for (const auto& [name, bytes] : cases) write_bytes(dir_ / name, bytes);
  const auto ds = open_image_folder(dir_.path(), unit_options(224), "corrupt");
  ASSERT_EQ(ds->size(), static_cast<std::int64_t>(cases.size()));
  const std::vector<std::string> names = [&] {  // dataset order is sorted by path
    std::vector<std::string> v;
    for (const auto& c : cases) v.push_back(c.first);
    std::sort(v.begin(), v.end());
    return v;
  }();
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == "a/good.jpg") {
      EXPECT_NO_THROW(fill_one(*ds, static_cast<std::int64_t>(i), {}));
      continue;
    }
    try {
      fill_one(*ds, static_cast<std::int64_t>(i), {});
      ADD_FAILURE() << names[i] << " decoded without error";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(names[i]), std::string::npos) << e.what();
    }
  }
}

TEST_F(ImageFolderTest, TrainValLayoutHoldoutAndBadFolders) {
  SCOPED_TRACE(replay());
  for (const char* split : {"train", "val"})
    for (const char* cls : {"cat", "dog"})
      for (int i = 0; i < 3; ++i)
        write_png(dir_ / split / cls / (std::to_string(i) + ".png"), 8, 8, 3,
                  solid(8, 8, 3, {1, 2, 3}));
  const DatasetSplits splits =
      open_dataset("folder:" + dir_.path().string() + ":crop=7:resize=8x8");
  EXPECT_EQ(splits.train->size(), 6);
  ASSERT_TRUE(splits.test);
  EXPECT_EQ(splits.test->size(), 6);
  EXPECT_EQ(splits.train->sample_shape(), (Shape{3, 7, 7}));

  const DatasetSplits held =
      open_dataset("folder:" + (dir_ / "train").string() + ":crop=8:resize=8:holdout=0.5");
  EXPECT_EQ(held.train->size(), 3);
  EXPECT_EQ(held.test->size(), 3);
  EXPECT_THROW(open_dataset("folder:" + dir_.path().string() + ":crop=8:resize=8:holdout=0.5"),
               InvalidArgument);

  // Caffe-style mean-pixel subtraction in 0..255 units: one std value for all channels.
  const DatasetSplits caffe = open_dataset(
      "folder:" + dir_.path().string() + ":crop=8:resize=8x8:mean=0.482,0.459,0.408:std=0.0039216");
  const std::vector<float> v = fill_one(*caffe.train, 0, {});
  EXPECT_NEAR(v[0], 1 - 0.482 * 255, 0.05);
  EXPECT_NEAR(v[64], 2 - 0.459 * 255, 0.05);
  EXPECT_NEAR(v[128], 3 - 0.408 * 255, 0.05);
  EXPECT_THROW(open_dataset("folder:" + dir_.path().string() + ":mean=0.1,0.2"), InvalidArgument);
  EXPECT_THROW(open_dataset("folder:" + dir_.path().string() + ":std=0"), InvalidArgument);

  write_png(dir_ / "val/eel/0.png", 8, 8, 3, solid(8, 8, 3, {1, 2, 3}));
  EXPECT_THROW(open_dataset("folder:" + dir_.path().string() + ":crop=8:resize=8"), DataError);
  EXPECT_THROW(open_dataset("folder:" + (dir_ / "missing").string()), DataError);
  std::filesystem::create_directories(dir_ / "empty/cls");
  EXPECT_THROW(open_dataset("folder:" + (dir_ / "empty").string()), DataError);
  EXPECT_THROW(open_dataset("folder:" + dir_.path().string() + ":crop=x"), InvalidArgument);
}
