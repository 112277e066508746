// CIFAR-10 binary version: data_batch_1..5.bin (training) and test_batch.bin, each a sequence of
// records of 1 label byte + 3072 pixel bytes (3 x 32 x 32, channel planes). Pixels are read on
// demand with positioned reads; labels are read and checked when the files are opened.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace cnnergy::data {

// Per-channel mean and standard deviation of the 50000 training images, pixels scaled to [0, 1].
Normalisation cifar10_normalisation();

// The records of `files`, in order, as one data set. A file whose size is not a whole number of
// 3073-byte records (truncated or corrupt), or a label byte above 9, is a DataError naming the
// file.
std::shared_ptr<const Dataset> open_cifar10_files(const std::vector<std::filesystem::path>& files,
                                                  const std::string& name,
                                                  const Normalisation& normalisation);

// Train and test splits of a directory holding the six .bin files (or its cifar-10-batches-bin/).
DatasetSplits open_cifar10_directory(const std::filesystem::path& dir,
                                     const Normalisation& normalisation);

}  // namespace cnnergy::data
