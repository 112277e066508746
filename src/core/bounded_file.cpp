// read_bounded_file: open without blocking (a FIFO with no writer would hang open()), fstat the
// descriptor (the checked file is the read one), refuse by type and size, then read at most the
// limit plus one byte.
#include "core/bounded_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/errors.hpp"

namespace cnnergy {

namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

const char* kind_of(mode_t mode) {
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISFIFO(mode)) return "a named pipe (FIFO)";
  if (S_ISDIR(mode)) return "a directory";
  return "not a regular file";
}

}  // namespace

std::string bytes_text(std::uint64_t bytes) {
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024 || bytes % 1024 != 0) return std::to_string(bytes) + " bytes";
  std::uint64_t v = bytes / 1024;
  int unit = 0;
  while (unit < 3 && v % 1024 == 0 && v >= 1024) {
    v /= 1024;
    ++unit;
  }
  return std::to_string(v) + " " + kUnits[unit];
}

namespace {

template <typename Buffer>
Buffer read_bounded(const std::string& path, const FileLimit& limit) {
  const std::string what = std::string(limit.what);
  if (path.empty()) throw DataError("no " + what + " file given (the path is empty)");
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0)
    throw DataError("cannot open the " + what + " " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw DataError("cannot read the " + what + " " + path + ": " + std::strerror(errno));
  const bool fifo = S_ISFIFO(st.st_mode);
  if (!S_ISREG(st.st_mode) && !(fifo && limit.allow_fifo))
    throw DataError("the " + what + " " + path + " is " + kind_of(st.st_mode) + ", not a regular file" +
                    (S_ISDIR(st.st_mode) ? "; give the file itself" : ""));
  if (!fifo && static_cast<std::uint64_t>(st.st_size) > limit.max_bytes)
    throw DataError("the " + what + " " + path + " is " + std::to_string(st.st_size) +
                    " bytes, over the limit of " + bytes_text(limit.max_bytes) + " for a " + what);
  if (fifo) {  // blocking reads from here on: the writer decides when it ends
    const int flags = ::fcntl(fd.get(), F_GETFL);
    if (flags >= 0) ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  }
  Buffer out;
  out.reserve(fifo ? 4096 : static_cast<std::size_t>(st.st_size));
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw DataError("cannot read the " + what + " " + path + ": " + std::strerror(errno));
    if (n == 0) break;
    if (out.size() + static_cast<std::size_t>(n) > limit.max_bytes)
      throw DataError("the " + what + " " + path + " is longer than the limit of " +
                      bytes_text(limit.max_bytes) + " for a " + what);
    out.insert(out.end(), buf, buf + n);
  }
  return out;
}

}  // namespace

std::string read_bounded_file(const std::string& path, const FileLimit& limit) {
  return read_bounded<std::string>(path, limit);
}

std::vector<std::uint8_t> read_bounded_bytes(const std::string& path, const FileLimit& limit) {
  return read_bounded<std::vector<std::uint8_t>>(path, limit);
}

}  // namespace cnnergy
