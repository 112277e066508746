// Helpers for the data tests: a self-deleting temporary directory, file writers (raw, gzip, IDX,
// PNG, JPEG) so every test makes its own small inputs, and the seed banner for replays.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace cnnergy::data::testing {

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

void write_bytes(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes);
std::vector<std::uint8_t> gzip_bytes(const std::vector<std::uint8_t>& raw);

// IDX files: images (magic 0x803, n x h x w) and labels (magic 0x801).
std::vector<std::uint8_t> idx_images(std::uint32_t n, std::uint32_t h, std::uint32_t w,
                                     const std::vector<std::uint8_t>& pixels);
std::vector<std::uint8_t> idx_labels(const std::vector<std::uint8_t>& labels);

// Interleaved 8-bit pixels with `channels` 1 (grey) or 3 (RGB).
void write_png(const std::filesystem::path& path, int width, int height, int channels,
               const std::vector<std::uint8_t>& pixels);
std::vector<std::uint8_t> encode_jpeg(int width, int height, int channels,
                                      const std::vector<std::uint8_t>& pixels, int quality);

}  // namespace cnnergy::data::testing
