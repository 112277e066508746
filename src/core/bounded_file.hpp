// Whole-file reads that check the file before reading it: it must be a regular file (a FIFO only
// where the format allows streaming) no larger than the format's limit, so `/dev/zero`, a device or
// a huge sparse file is refused at once instead of filling memory. Every CLI and daemon reader of a
// small structured file (checkpoints, knob journals, baselines, the daemon's policy, caches) reads
// through here; the DataError names the file, what it should be and the limit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cnnergy {

struct FileLimit {
  const char* what;          // "checkpoint", "knob journal", ... (named in errors)
  std::uint64_t max_bytes;   // larger files (or longer streams) are refused
  bool allow_fifo = false;   // a named pipe is read up to max_bytes (formats read as a stream)
};

// Per-format limits: far above any file cnnergy writes, far below what would exhaust memory.
inline constexpr FileLimit kCheckpointLimit{"checkpoint", std::uint64_t{16} << 30};
inline constexpr FileLimit kKnobJournalLimit{"knob journal", std::uint64_t{4} << 20};
inline constexpr FileLimit kBaselineLimit{"baseline file", std::uint64_t{1} << 20, true};
inline constexpr FileLimit kDaemonPolicyLimit{"cnnergyd policy", std::uint64_t{1} << 20};
inline constexpr FileLimit kAlgoCacheLimit{"algorithm cache", std::uint64_t{64} << 20};

// The whole content of `path`. DataError when it is missing or unreadable, a folder, not a regular
// file (a device such as /dev/zero, a socket; a FIFO unless the limit allows one), or larger than
// `limit.max_bytes` — checked from its size before anything is read, and again while reading (a
// file that grows, a FIFO).
std::string read_bounded_file(const std::string& path, const FileLimit& limit);
// The same as bytes (binary formats).
std::vector<std::uint8_t> read_bounded_bytes(const std::string& path, const FileLimit& limit);

// "16 GiB", "1 MiB", "512 bytes": a limit as the errors print it.
std::string bytes_text(std::uint64_t bytes);

}  // namespace cnnergy
