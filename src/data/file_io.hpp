// File access for the data readers: whole-file reads that inflate gzip transparently (zlib), and a
// read-only file handle with positioned reads that several loader threads can share. Every failure
// is a DataError naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace cnnergy::data {

// The whole content of `path`; a gzip file (by its magic bytes, whatever its name) is inflated.
// Throws DataError for a missing/unreadable file or a corrupt or truncated gzip stream.
// `max_bytes`: a gzip file that inflates to more is refused (DataError) as soon as it passes that size.
std::vector<std::uint8_t> read_file_maybe_gz(const std::filesystem::path& path,
                                             std::uint64_t max_bytes = UINT64_MAX);
// The first `n` bytes of the (inflated) content, or all of it when shorter: for reading a header first.
std::vector<std::uint8_t> read_prefix_maybe_gz(const std::filesystem::path& path, std::size_t n);

// The raw bytes of `path` (no inflation). Throws DataError naming the file.
std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path);

// An open read-only file (RAII). read_at() is safe to call from several threads at once (pread).
class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(const std::filesystem::path& path);  // DataError if it cannot be opened
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ReadOnlyFile(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile& operator=(ReadOnlyFile&& other) noexcept;

  const std::filesystem::path& path() const { return path_; }
  std::uint64_t size_bytes() const { return size_bytes_; }
  // Reads exactly out.size() bytes at `offset`; DataError naming the file when it cannot.
  void read_at(std::uint64_t offset, std::span<std::uint8_t> out) const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t size_bytes_ = 0;
};

}  // namespace cnnergy::data
