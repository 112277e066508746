// MNIST-style IDX files (MNIST, Fashion-MNIST): four files, raw or gzip-compressed, read into
// memory once (47 MB for 60000 28x28 images) and normalised per batch. Malformed files are
// DataErrors that name the file and the problem.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "data/dataset.hpp"

namespace cnnergy::data {

// Where the Debian package dataset-fashion-mnist installs its four .gz files.
inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";

// Mean and standard deviation of the training images' pixels scaled to [0, 1] (computed over all
// 60000 training images of each set; Fashion-MNIST: 0.28604, 0.35302; MNIST: 0.13066, 0.30811).
Normalisation fashion_mnist_normalisation();
Normalisation mnist_normalisation();

// One images file (magic 0x00000803: N x H x W unsigned bytes) with its labels file (magic
// 0x00000801: N unsigned bytes), samples 1 x H x W, labels checked against num_classes.
std::shared_ptr<const Dataset> open_idx(const std::filesystem::path& images_file,
                                        const std::filesystem::path& labels_file,
                                        const std::string& name, std::int64_t num_classes,
                                        const Normalisation& normalisation);

// The file for `base` (e.g. "train-images-idx3-ubyte") in `dir`: base.gz, base, or the dotted
// variant base with its first '-' before "idx" turned into '.' (train-images.idx3-ubyte), raw or
// .gz. Throws DataError listing the names tried.
std::filesystem::path find_idx_file(const std::filesystem::path& dir, const std::string& base);

// Train (train-*) and test (t10k-*) splits of an MNIST-layout directory.
DatasetSplits open_idx_directory(const std::filesystem::path& dir, const std::string& name,
                                 const Normalisation& normalisation);

}  // namespace cnnergy::data
