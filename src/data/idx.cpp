// IDX reader (MNIST / Fashion-MNIST): header validation, label checks and per-batch normalisation.
#include "data/idx.hpp"

#include <array>
#include <cstdio>
#include <vector>

#include "core/errors.hpp"
#include "data/file_io.hpp"

namespace cnnergy::data {
namespace {

constexpr std::uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dimension

std::string hex32(std::uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08X", v);
  return text;
}

constexpr std::uint64_t kMaxIdxBytes = std::uint64_t{1} << 40;  // 1 TiB: any larger header is corrupt

std::uint32_t read_be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

// The dimensions of an IDX file of unsigned bytes with `expected_magic`, after checking that its
// data is exactly as long as the header says.
std::vector<std::int64_t> parse_idx_header(const std::vector<std::uint8_t>& bytes,
                                           std::uint32_t expected_magic,
                                           const std::filesystem::path& path,
                                           std::size_t* data_offset) {
  const std::string file = path.string();
  const std::size_t ndims = expected_magic & 0xFF;
  if (bytes.size() < 4)
    throw DataError(file + ": truncated: " + std::to_string(bytes.size()) +
                    " bytes, too short for an IDX header");
  const std::uint32_t magic = read_be32(bytes.data());
  if (magic != expected_magic)
    throw DataError(file + ": wrong magic number " + hex32(magic) + ", expected " +
                    hex32(expected_magic) + " (IDX, unsigned bytes, " + std::to_string(ndims) +
                    (ndims == 1 ? " dimension)" : " dimensions)") +
                    (magic == (kImagesMagic ^ kLabelsMagic ^ expected_magic)
                         ? ": images and labels files swapped?"
                         : ""));
  const std::size_t header = 4 + 4 * ndims;
  if (bytes.size() < header)
    throw DataError(file + ": truncated: the header needs " + std::to_string(header) +
                    " bytes, the file has " + std::to_string(bytes.size()));
  std::vector<std::int64_t> dims(ndims);
  std::uint64_t expected_bytes = 1;
  for (std::size_t d = 0; d < ndims; ++d) {
    dims[d] = read_be32(bytes.data() + 4 + 4 * d);
    if (dims[d] == 0)
      throw DataError(file + ": dimension " + std::to_string(d) + " in the header is 0");
    if (__builtin_mul_overflow(expected_bytes, static_cast<std::uint64_t>(dims[d]), &expected_bytes) ||
        expected_bytes > kMaxIdxBytes)
      throw DataError(file + ": the header's dimensions describe more than " + std::to_string(kMaxIdxBytes >> 30) +
                      " GiB of data (corrupt header)");
  }
  const std::uint64_t have = bytes.size() - header;
  if (have < expected_bytes)
    throw DataError(file + ": truncated: the header promises " + std::to_string(expected_bytes) +
                    " bytes of data, the file holds " + std::to_string(have));
  if (have > expected_bytes)
    throw DataError(file + ": " + std::to_string(have - expected_bytes) +
                    " bytes after the data the header describes (corrupt or not an IDX file)");
  *data_offset = header;
  return dims;
}

// The file's bytes, a gzip file inflated only as far as its header says (plus one byte to notice data
// after it): a small .gz that would inflate to gigabytes is refused without inflating it all.
std::vector<std::uint8_t> read_idx_bytes(const std::filesystem::path& path, std::uint32_t magic) {
  const std::size_t ndims = magic & 0xFF;
  const std::size_t header = 4 + 4 * ndims;
  std::vector<std::uint8_t> head = read_prefix_maybe_gz(path, header);
  if (head.size() < header || read_be32(head.data()) != magic) return head;  // the header check says why
  std::uint64_t expected = 1;
  for (std::size_t d = 0; d < ndims; ++d)
    if (__builtin_mul_overflow(expected, std::uint64_t{read_be32(head.data() + 4 + 4 * d)}, &expected) ||
        expected > kMaxIdxBytes)
      return head;  // so is a header describing an impossible size
  return read_file_maybe_gz(path, header + expected + 1);
}

class IdxDataset final : public Dataset {
 public:
  IdxDataset(std::string name, std::vector<std::uint8_t> pixels, std::size_t pixel_offset,
             std::vector<std::uint8_t> labels, std::size_t label_offset, std::int64_t count,
             std::int64_t height, std::int64_t width, std::int64_t num_classes,
             const Normalisation& normalisation)
      : name_(std::move(name)),
        pixels_(std::move(pixels)),
        pixel_offset_(pixel_offset),
        labels_(std::move(labels)),
        label_offset_(label_offset),
        count_(count),
        height_(height),
        width_(width),
        num_classes_(num_classes) {
    // A 256-entry table turns each byte into its normalised value with one load.
    for (int v = 0; v < 256; ++v)
      table_[static_cast<std::size_t>(v)] =
          (static_cast<float>(v) / 255.0f - normalisation.mean.at(0)) / normalisation.stddev.at(0);
  }

  std::string name() const override { return name_; }
  std::int64_t size() const override { return count_; }
  Shape sample_shape() const override { return {1, height_, width_}; }
  std::int64_t num_classes() const override { return num_classes_; }

 protected:
  void fill_checked(std::span<const std::int64_t> indices, const Augmentation& /*augmentation*/,
                    std::span<float> images, std::span<std::int32_t> labels) const override {
    const auto per_sample = static_cast<std::size_t>(height_ * width_);
    for (std::size_t i = 0; i < indices.size(); ++i) {
      const auto sample = static_cast<std::size_t>(indices[i]);
      const std::uint8_t* src = pixels_.data() + pixel_offset_ + sample * per_sample;
      float* dst = images.data() + i * per_sample;
      for (std::size_t p = 0; p < per_sample; ++p) dst[p] = table_[src[p]];
      labels[i] = labels_[label_offset_ + sample];
    }
  }

 private:
  std::string name_;
  std::vector<std::uint8_t> pixels_;  // the whole inflated file; data starts at pixel_offset_
  std::size_t pixel_offset_;
  std::vector<std::uint8_t> labels_;
  std::size_t label_offset_;
  std::int64_t count_, height_, width_, num_classes_;
  std::array<float, 256> table_{};
};

void check_normalisation(const Normalisation& n, const std::string& name) {
  if (n.mean.size() != 1 || n.stddev.size() != 1 || !(n.stddev[0] > 0.0f))
    throw InvalidArgument(name +
                          ": IDX normalisation needs one mean and one positive standard deviation");
}

}  // namespace

Normalisation fashion_mnist_normalisation() { return {{0.2860406f}, {0.3530242f}}; }
Normalisation mnist_normalisation() { return {{0.1306605f}, {0.3081078f}}; }

std::shared_ptr<const Dataset> open_idx(const std::filesystem::path& images_file,
                                        const std::filesystem::path& labels_file,
                                        const std::string& name, std::int64_t num_classes,
                                        const Normalisation& normalisation) {
  check_normalisation(normalisation, name);
  if (num_classes < 1 || num_classes > 256)
    throw InvalidArgument(name + ": IDX labels are bytes; num_classes must lie in [1, 256], got " +
                          std::to_string(num_classes));
  std::vector<std::uint8_t> pixels = read_idx_bytes(images_file, kImagesMagic);
  std::size_t pixel_offset = 0;
  const std::vector<std::int64_t> image_dims =
      parse_idx_header(pixels, kImagesMagic, images_file, &pixel_offset);
  std::vector<std::uint8_t> labels = read_idx_bytes(labels_file, kLabelsMagic);
  std::size_t label_offset = 0;
  const std::vector<std::int64_t> label_dims =
      parse_idx_header(labels, kLabelsMagic, labels_file, &label_offset);
  if (label_dims[0] != image_dims[0])
    throw DataError(labels_file.string() + ": holds " + std::to_string(label_dims[0]) +
                    " labels but " + images_file.string() + " holds " +
                    std::to_string(image_dims[0]) + " images");
  for (std::int64_t i = 0; i < label_dims[0]; ++i) {
    const std::uint8_t label = labels[label_offset + static_cast<std::size_t>(i)];
    if (label >= num_classes)
      throw DataError(labels_file.string() + ": label " + std::to_string(label) + " of sample " +
                      std::to_string(i) + " is outside [0, " + std::to_string(num_classes) + ")");
  }
  return std::make_shared<IdxDataset>(name, std::move(pixels), pixel_offset, std::move(labels),
                                      label_offset, image_dims[0], image_dims[1], image_dims[2],
                                      num_classes, normalisation);
}

std::filesystem::path find_idx_file(const std::filesystem::path& dir, const std::string& base) {
  std::vector<std::string> names{base + ".gz", base};
  if (const auto dash = base.rfind("-idx"); dash != std::string::npos) {
    std::string dotted = base;
    dotted[dash] = '.';
    names.push_back(dotted + ".gz");
    names.push_back(dotted);
  }
  std::string tried;
  for (const std::string& n : names) {
    std::filesystem::path candidate = dir / n;
    std::error_code ec;
    if (std::filesystem::is_regular_file(candidate, ec)) return candidate;
    tried += (tried.empty() ? "" : ", ") + n;
  }
  throw DataError((dir / base).string() + ": missing (looked for " + tried + " in " + dir.string() +
                  ")");
}

DatasetSplits open_idx_directory(const std::filesystem::path& dir, const std::string& name,
                                 const Normalisation& normalisation) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw DataError(dir.string() + ": no such directory (" + name +
                    " needs the four IDX files there)");
  DatasetSplits splits;
  splits.train =
      open_idx(find_idx_file(dir, "train-images-idx3-ubyte"),
               find_idx_file(dir, "train-labels-idx1-ubyte"), name + " train", 10, normalisation);
  splits.test =
      open_idx(find_idx_file(dir, "t10k-images-idx3-ubyte"),
               find_idx_file(dir, "t10k-labels-idx1-ubyte"), name + " test", 10, normalisation);
  if (!(splits.train->sample_shape() == splits.test->sample_shape()))
    throw DataError(dir.string() + ": train images are " + splits.train->sample_shape().str() +
                    " but test images are " + splits.test->sample_shape().str());
  return splits;
}

}  // namespace cnnergy::data
