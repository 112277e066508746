// Image-folder data set: directory scan at open, decode + resize + crop + normalise per sample in
// fill().
#include "data/image_folder.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <vector>

#include "core/errors.hpp"
#include "core/hash.hpp"
#include "data/file_io.hpp"
#include "data/image_codec.hpp"
#include "data/random.hpp"

namespace cnnergy::data {
namespace {

namespace fs = std::filesystem;

bool is_image_name(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

std::vector<std::string> class_directories(const fs::path& root) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec)) names.push_back(it->path().filename().string());
  if (ec) throw DataError(root.string() + ": cannot list: " + ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

struct Sample {
  std::string relative_path;  // under root
  std::int32_t label;
};

class ImageFolderDataset final : public Dataset {
 public:
  ImageFolderDataset(std::string name, fs::path root, std::vector<std::string> classes,
                     std::vector<Sample> samples, const ImageFolderOptions& options)
      : name_(std::move(name)),
        root_(std::move(root)),
        classes_(std::move(classes)),
        samples_(std::move(samples)),
        options_(options) {
    const Normalisation& n = options.normalisation;
    for (std::size_t c = 0; c < 3; ++c) {  // one value applies to every channel
      const float mean = n.mean[n.mean.size() == 1 ? 0 : c],
                  stddev = n.stddev[n.stddev.size() == 1 ? 0 : c];
      scale_[c] = 1.0f / (255.0f * stddev);
      shift_[c] = -mean / stddev;
    }
  }

  std::string name() const override { return name_; }
  std::int64_t size() const override { return static_cast<std::int64_t>(samples_.size()); }
  Shape sample_shape() const override { return {3, options_.crop, options_.crop}; }
  std::int64_t num_classes() const override { return static_cast<std::int64_t>(classes_.size()); }
  std::vector<std::string> class_names() const override { return classes_; }

 protected:
  void fill_checked(std::span<const std::int64_t> indices, const Augmentation& augmentation,
                    std::span<float> images, std::span<std::int32_t> labels) const override {
    const auto per_sample = static_cast<std::size_t>(sample_numel());
    for (std::size_t i = 0; i < indices.size(); ++i) {
      const Sample& sample = samples_[static_cast<std::size_t>(indices[i])];
      const fs::path path = root_ / sample.relative_path;
      const std::vector<std::uint8_t> bytes = read_file_bytes(path);
      const int min_w =
          options_.resize_shorter > 0 ? options_.resize_shorter : options_.resize_width;
      const int min_h =
          options_.resize_shorter > 0 ? options_.resize_shorter : options_.resize_height;
      const RgbImage image = decode_image(bytes, path.string(), min_w, min_h);
      ResampleSpec spec = geometry(image, static_cast<std::uint64_t>(indices[i]), augmentation);
      for (int c = 0; c < 3; ++c) {
        spec.scale[c] = scale_[c];
        spec.shift[c] = shift_[c];
      }
      resample_crop(image, spec, images.subspan(i * per_sample, per_sample));
      labels[i] = sample.label;
    }
  }

 private:
  // Resized size and crop of one sample: random offset and mirror (drawn from the augmentation seed
  // and the sample index) for training, the centre for evaluation.
  ResampleSpec geometry(const RgbImage& image, std::uint64_t index,
                        const Augmentation& augmentation) const {
    ResampleSpec spec;
    if (options_.resize_shorter > 0) {
      const int s = options_.resize_shorter;
      const auto scaled = [s](int along, int shorter) {
        return std::max(s, static_cast<int>(std::lround(static_cast<double>(along) * s / shorter)));
      };
      if (image.width <= image.height) {
        spec.resized_width = s;
        spec.resized_height = scaled(image.height, image.width);
      } else {
        spec.resized_height = s;
        spec.resized_width = scaled(image.width, image.height);
      }
    } else {
      spec.resized_width = options_.resize_width;
      spec.resized_height = options_.resize_height;
    }
    spec.crop_width = spec.crop_height = options_.crop;
    const int room_x = spec.resized_width - options_.crop,
              room_y = spec.resized_height - options_.crop;
    if (augmentation.enabled) {
      const std::uint64_t seed = mix64(augmentation.seed, index);
      spec.crop_x =
          static_cast<int>(uniform_below(seed, 0, static_cast<std::uint64_t>(room_x) + 1));
      spec.crop_y =
          static_cast<int>(uniform_below(seed, 1, static_cast<std::uint64_t>(room_y) + 1));
      spec.mirror = (mix64(seed, 2) & 1u) != 0;
    } else {
      spec.crop_x = room_x / 2;
      spec.crop_y = room_y / 2;
    }
    return spec;
  }

  std::string name_;
  fs::path root_;
  std::vector<std::string> classes_;
  std::vector<Sample> samples_;
  ImageFolderOptions options_;
  float scale_[3] = {1, 1, 1}, shift_[3] = {0, 0, 0};
};

void check_options(const ImageFolderOptions& o) {
  if (o.crop < 1) throw InvalidArgument("crop must be positive, got " + std::to_string(o.crop));
  if (o.resize_shorter > 0) {
    if (o.resize_shorter < o.crop)
      throw InvalidArgument("resize " + std::to_string(o.resize_shorter) +
                            " (shorter side) is smaller than crop " + std::to_string(o.crop));
  } else if (o.resize_width < o.crop || o.resize_height < o.crop) {
    throw InvalidArgument("resize " + std::to_string(o.resize_width) + "x" +
                          std::to_string(o.resize_height) + " is smaller than crop " +
                          std::to_string(o.crop));
  }
  const auto& n = o.normalisation;
  if ((n.mean.size() != 1 && n.mean.size() != 3) || (n.stddev.size() != 1 && n.stddev.size() != 3))
    throw InvalidArgument("image normalisation needs 1 or 3 means and 1 or 3 standard deviations");
  for (const float s : n.stddev)
    if (!(s > 0.0f)) throw InvalidArgument("standard deviations must be positive");
}

bool has_class_directories(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && !class_directories(dir).empty();
}

}  // namespace

Normalisation imagenet_normalisation() {
  return {{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
}

std::shared_ptr<const Dataset> open_image_folder(const fs::path& root,
                                                 const ImageFolderOptions& options,
                                                 const std::string& name) {
  check_options(options);
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw DataError(root.string() + ": no such directory (image folder)");
  const std::vector<std::string> classes = class_directories(root);
  if (classes.empty())
    throw DataError(root.string() +
                    ": no class directories (expected root/CLASS_NAME/*.jpg|*.jpeg|*.png)");
  std::vector<Sample> samples;
  for (std::size_t label = 0; label < classes.size(); ++label) {
    std::vector<std::string> files;
    const fs::path class_dir = root / classes[label];
    for (fs::recursive_directory_iterator it(class_dir, ec), end; !ec && it != end;
         it.increment(ec))
      if (it->is_regular_file(ec) && is_image_name(it->path()))
        files.push_back(fs::relative(it->path(), root, ec).string());
    if (ec) throw DataError(class_dir.string() + ": cannot list: " + ec.message());
    std::sort(files.begin(), files.end());
    for (auto& f : files) samples.push_back({std::move(f), static_cast<std::int32_t>(label)});
  }
  if (samples.empty())
    throw DataError(root.string() + ": no .jpg, .jpeg or .png file in its " +
                    std::to_string(classes.size()) + " class directories");
  return std::make_shared<ImageFolderDataset>(name, root, classes, std::move(samples), options);
}

DatasetSplits open_image_folder_splits(const fs::path& root, const ImageFolderOptions& options,
                                       double holdout_fraction, std::uint64_t holdout_seed) {
  DatasetSplits splits;
  if (has_class_directories(root / "train")) {
    splits.train =
        open_image_folder(root / "train", options, "folder " + (root / "train").string());
    for (const char* test_dir : {"val", "test"}) {
      if (!has_class_directories(root / test_dir)) continue;
      splits.test =
          open_image_folder(root / test_dir, options, "folder " + (root / test_dir).string());
      if (splits.test->class_names() != splits.train->class_names())
        throw DataError(
            (root / test_dir).string() + ": its " + std::to_string(splits.test->num_classes()) +
            " class directories differ from the " + std::to_string(splits.train->num_classes()) +
            " of " + (root / "train").string());
      break;
    }
  } else {
    splits.train = open_image_folder(root, options, "folder " + root.string());
  }
  if (holdout_fraction > 0.0) {
    if (splits.test)
      throw InvalidArgument(root.string() +
                            " already has a test split (val/ or test/); holdout= does not apply");
    HoldoutSplit held = split_holdout(splits.train, holdout_fraction, holdout_seed);
    splits.train = held.train;
    splits.test = held.held_out;
  }
  return splits;
}

}  // namespace cnnergy::data
