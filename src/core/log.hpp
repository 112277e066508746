// Minimal levelled logging to stderr. The level is set once by the CLI (--verbose/--quiet or
// CNNERGY_LOG=debug|info|warn|error) and passed down through a Logger, never through a global
// mutable object that library code writes.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace cnnergy {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kSilent = 4 };

LogLevel parse_log_level(std::string_view s);  // throws InvalidArgument listing the choices

// Process-wide threshold. Reading it is thread-safe (atomic); set it only from main.
void set_log_level(LogLevel level);
LogLevel log_level();

void log_message(LogLevel level, std::string_view message);

// A status line kept at the bottom of a terminal on stderr (the sweep's progress bar): log lines are
// printed above it (the line is cleared, the message written, the line drawn again), never glued to
// it. An empty line removes it. Only a caller that knows stderr is a terminal should set one.
void set_status_line(std::string_view line);

inline void log_debug(std::string_view m) { log_message(LogLevel::kDebug, m); }
inline void log_info(std::string_view m) { log_message(LogLevel::kInfo, m); }
inline void log_warn(std::string_view m) { log_message(LogLevel::kWarn, m); }
inline void log_error(std::string_view m) { log_message(LogLevel::kError, m); }

}  // namespace cnnergy
