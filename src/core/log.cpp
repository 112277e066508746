// Logging implementation: one atomic threshold, one mutex so lines from threads never interleave, and
// the status line (progress bar) that log lines are printed above.
#include "core/log.hpp"

#include <atomic>
#include <mutex>
#include <string>

#include "core/errors.hpp"

namespace cnnergy {
namespace {
std::atomic<int>& threshold() {
  static std::atomic<int> level{static_cast<int>(LogLevel::kInfo)};
  return level;
}
std::mutex& output_mutex() {
  static std::mutex m;
  return m;
}
std::string& status_line() {  // guarded by output_mutex()
  static std::string line;
  return line;
}
}  // namespace

LogLevel parse_log_level(std::string_view s) {
  if (s == "debug") return LogLevel::kDebug;
  if (s == "info") return LogLevel::kInfo;
  if (s == "warn") return LogLevel::kWarn;
  if (s == "error") return LogLevel::kError;
  if (s == "silent") return LogLevel::kSilent;
  throw InvalidArgument("unknown log level '" + std::string(s) +
                        "' (choose one of: debug, info, warn, error, silent)");
}

void set_log_level(LogLevel level) { threshold().store(static_cast<int>(level)); }
LogLevel log_level() { return static_cast<LogLevel>(threshold().load()); }

void log_message(LogLevel level, std::string_view message) {
  if (static_cast<int>(level) < threshold().load()) return;
  static constexpr const char* kTags[] = {"debug", "info", "warning", "error", ""};
  std::lock_guard<std::mutex> lock(output_mutex());
  const std::string& status = status_line();
  if (!status.empty()) std::fputs("\r\x1b[K", stderr);  // clear the bar, print above it, draw it again
  std::fprintf(stderr, "cnnergy %s: %.*s\n", kTags[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
  if (!status.empty()) std::fputs(status.c_str(), stderr);
  std::fflush(stderr);
}

void set_status_line(std::string_view line) {
  std::lock_guard<std::mutex> lock(output_mutex());
  std::string& status = status_line();
  if (line.empty() && status.empty()) return;
  std::fprintf(stderr, "\r%.*s\x1b[K", static_cast<int>(line.size()), line.data());
  if (line.empty()) std::fputs("\r", stderr);
  std::fflush(stderr);
  status.assign(line);
}

}  // namespace cnnergy
