// The cnnergyd wire protocol, shared by the daemon and its client: each message is a 4-byte
// big-endian length and then that many bytes of one JSON object (parsed strictly by core/json),
// at most kMaxMessageBytes. Every request carries "v" (kKnobProtocolVersion) and "op"; every reply
// carries "v" and "ok", and on failure "error": {"code", "exit_code", "message"}.
#pragma once

#include <sys/un.h>

#include <cstdint>
#include <string>

#include "core/errors.hpp"
#include "core/json.hpp"

namespace cnnergy::telemetry {

inline constexpr int kKnobProtocolVersion = 1;
inline constexpr std::size_t kMaxMessageBytes = 64 * 1024;

enum class FrameStatus {
  kOk,         // payload holds one whole message
  kClosed,     // the peer closed the connection between messages
  kTooLarge,   // the declared length exceeds kMaxMessageBytes (the stream cannot be resynchronised)
  kTruncated,  // the peer closed in the middle of a message
  kTimeout,    // a message started but did not complete within the frame timeout
  kError,      // a socket error
};

struct Frame {
  FrameStatus status = FrameStatus::kError;
  std::string payload;
  std::uint64_t declared_bytes = 0;  // the length prefix, when it was read
  std::string detail;                // why, for kError
};

// Reads one message. `idle_timeout_ms` bounds the wait for its first byte (-1: wait for ever, as the
// daemon does between a client's requests); once a message has started, the rest must arrive within
// `frame_timeout_ms`, so a stalled or malicious peer cannot hold a reader for longer.
Frame read_frame(int fd, int idle_timeout_ms, int frame_timeout_ms);

// Writes one message (never raises SIGPIPE). False when the peer is gone or it is over the limit.
bool write_frame(int fd, const std::string& payload);
bool write_message(int fd, const Json& message);

// A connected AF_UNIX stream socket (close-on-exec) to `path`, or -1 with errno set.
// InvalidArgument when the path does not fit in sockaddr_un.
int connect_unix(const std::string& path);
// The address for bind()/connect() (InvalidArgument when the path is too long).
sockaddr_un unix_address(const std::string& path);

// A reply skeleton ({"v": 1, "ok": true}) and an error reply carrying `code`'s exit code.
Json ok_reply();
Json error_reply(ExitCode code, const std::string& message);
// The protocol's name of an exit code ("usage", "permission", "busy" is "usage" too...).
const char* error_code_name(ExitCode code);

// Throws the typed error an error reply stands for, with its message (InternalError for a reply
// that is not one of ours).
[[noreturn]] void throw_reply_error(const Json& reply);

}  // namespace cnnergy::telemetry
