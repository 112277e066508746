// Whole-file reads (with gzip inflation through zlib) and positioned reads for the data readers.
#include "data/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/errors.hpp"

namespace cnnergy::data {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

bool is_gzip(std::span<const std::uint8_t> bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

// Inflates a whole gzip file held in memory (several concatenated members are allowed, as gzip -d
// does). A stream that ends early or fails its CRC is a DataError.
// `limit`: at most this many bytes come out; past it, `prefix_only` returns the first `limit` bytes and
// otherwise a DataError says the file holds more than expected (no gigabytes inflated for nothing).
std::vector<std::uint8_t> inflate_gzip(std::span<const std::uint8_t> in, const std::filesystem::path& path,
                                       std::uint64_t limit, bool prefix_only) {
  std::vector<std::uint8_t> out;
  out.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(limit, std::uint64_t{in.size()} * 3)));
  std::size_t consumed = 0;
  while (consumed < in.size()) {
    z_stream zs{};
    if (inflateInit2(&zs, 15 + 16) != Z_OK) throw InternalError("zlib inflateInit2 failed");
    std::size_t left = in.size() - consumed;
    zs.next_in = const_cast<Bytef*>(in.data() + consumed);  // zlib's API is not const-correct
    std::uint8_t chunk[1 << 16];
    for (;;) {
      if (zs.avail_in == 0 &&
          left > 0) {  // feed the input in pieces that fit zlib's 32-bit counter
        const auto take = static_cast<uInt>(std::min<std::size_t>(left, std::size_t{1} << 30));
        zs.avail_in = take;
        left -= take;
      }
      zs.next_out = chunk;
      zs.avail_out = sizeof(chunk);
      const int rc = inflate(&zs, Z_NO_FLUSH);
      out.insert(out.end(), chunk, chunk + (sizeof(chunk) - zs.avail_out));
      if (out.size() > limit) {
        inflateEnd(&zs);
        if (prefix_only) {
          out.resize(static_cast<std::size_t>(limit));
          return out;
        }
        throw DataError(path.string() + ": inflates to more than " + std::to_string(limit) +
                        " bytes, more than its header describes (corrupt or not this kind of file)");
      }
      if (rc == Z_STREAM_END) break;
      if (rc == Z_OK) continue;
      if (rc == Z_BUF_ERROR && zs.avail_in == 0 && left > 0) continue;
      const std::string why = rc == Z_BUF_ERROR
                                  ? "unexpected end of the compressed data (truncated file)"
                                  : (zs.msg ? zs.msg : "zlib error " + std::to_string(rc));
      inflateEnd(&zs);
      throw DataError(path.string() + ": corrupt gzip data: " + why);
    }
    consumed = in.size() - left - zs.avail_in;
    inflateEnd(&zs);
    // Trailing zero padding after the last member is tolerated (tape-style padding), anything else
    // must be another gzip member.
    std::span<const std::uint8_t> rest = in.subspan(consumed);
    if (!rest.empty() && !is_gzip(rest)) {
      for (const std::uint8_t b : rest)
        if (b != 0)
          throw DataError(path.string() + ": corrupt gzip data: trailing garbage after the stream");
      break;
    }
  }
  return out;
}

}  // namespace

std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path) {
  ReadOnlyFile file(path);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(file.size_bytes()));
  file.read_at(0, bytes);
  return bytes;
}

std::vector<std::uint8_t> read_file_maybe_gz(const std::filesystem::path& path, std::uint64_t max_bytes) {
  std::vector<std::uint8_t> bytes = read_file_bytes(path);
  if (!is_gzip(bytes)) return bytes;
  return inflate_gzip(bytes, path, max_bytes, false);
}

std::vector<std::uint8_t> read_prefix_maybe_gz(const std::filesystem::path& path, std::size_t n) {
  ReadOnlyFile file(path);
  std::vector<std::uint8_t> head(static_cast<std::size_t>(std::min<std::uint64_t>(file.size_bytes(), std::max<std::size_t>(n, 2))));
  file.read_at(0, head);
  if (!is_gzip(head)) {
    if (head.size() > n) head.resize(n);
    return head;
  }
  return inflate_gzip(read_file_bytes(path), path, n, true);
}

ReadOnlyFile::ReadOnlyFile(const std::filesystem::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    throw DataError(path.string() + ": cannot open: " + errno_text(err));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw DataError(path.string() + ": cannot stat: " + errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw DataError(path.string() + ": not a regular file");
  }
  size_bytes_ = static_cast<std::uint64_t>(st.st_size);
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

ReadOnlyFile::ReadOnlyFile(ReadOnlyFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      size_bytes_(other.size_bytes_) {}

ReadOnlyFile& ReadOnlyFile::operator=(ReadOnlyFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_bytes_ = other.size_bytes_;
  }
  return *this;
}

void ReadOnlyFile::read_at(std::uint64_t offset, std::span<std::uint8_t> out) const {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t got =
        ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      throw DataError(path_.string() + ": read of " + std::to_string(out.size()) +
                      " bytes at offset " + std::to_string(offset) + " failed: " + errno_text(err));
    }
    if (got == 0)
      throw DataError(path_.string() + ": truncated: wanted " + std::to_string(out.size()) +
                      " bytes at offset " + std::to_string(offset) + ", the file ends at " +
                      std::to_string(offset + done));
    done += static_cast<std::size_t>(got);
  }
}

}  // namespace cnnergy::data
