// Image folders (root/CLASS/**.jpg|jpeg|png, classes sorted by name, as torchvision's ImageFolder):
// decode, resize (to a fixed size, 256x256 as Castro et al. 2019, Section 7.3 does for CaffeNet, or shorter
// side to S keeping the aspect ratio), then a random crop and mirror for training or the centre
// crop for evaluation, and per-channel normalisation.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "data/dataset.hpp"

namespace cnnergy::data {

// ImageNet's per-channel mean and standard deviation (RGB, pixels in [0, 1]), the usual default.
Normalisation imagenet_normalisation();

struct ImageFolderOptions {
  int resize_width = 256;  // fixed-size resize (aspect ratio not kept) ...
  int resize_height = 256;
  int resize_shorter = 0;  // ... or, when > 0, shorter side to this many pixels, aspect kept
  int crop = 224;  // square crop side: 224 (ResNet, VGG, GoogLeNet) or 227 (CaffeNet, AlexNet)
  Normalisation normalisation = imagenet_normalisation();
};

// The images under `root`; a class directory may hold images at any depth. Throws DataError for a
// missing root, no class directory or no image at all; InvalidArgument for a crop larger than the
// resized image or a bad normalisation. Corrupt images surface as DataError from fill(), naming the
// file.
std::shared_ptr<const Dataset> open_image_folder(const std::filesystem::path& root,
                                                 const ImageFolderOptions& options,
                                                 const std::string& name);

// Splits of a folder: root/train with root/val (or root/test) when root/train holds class
// directories; otherwise root is the training split and there is no test split, unless
// holdout_fraction > 0 holds out that fraction of it (seeded, reproducible). The test split must
// have the training split's classes.
DatasetSplits open_image_folder_splits(const std::filesystem::path& root,
                                       const ImageFolderOptions& options, double holdout_fraction,
                                       std::uint64_t holdout_seed);

}  // namespace cnnergy::data
