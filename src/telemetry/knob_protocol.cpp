// cnnergyd framing: length-prefixed JSON with a size limit and poll-bounded reads.
#include "telemetry/knob_protocol.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace cnnergy::telemetry {

namespace {

using Clock = std::chrono::steady_clock;

// Waits until fd is readable; timeout_ms < 0 waits for ever. 1: readable, 0: timeout, -1: error.
int wait_readable(int fd, int timeout_ms) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, timeout_ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return -1;
    return rc == 0 ? 0 : 1;
  }
}

// Reads exactly n bytes before `deadline`. 1: done, 0: the peer closed, -2: timeout, -1: error.
int read_exact(int fd, char* out, std::size_t n, Clock::time_point deadline) {
  std::size_t got = 0;
  while (got < n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return -2;
    const int w = wait_readable(fd, static_cast<int>(left.count()));
    if (w == 0) return -2;
    if (w < 0) return -1;
    const ssize_t r = ::recv(fd, out + got, n - got, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) return -1;
    if (r == 0) return 0;
    got += static_cast<std::size_t>(r);
  }
  return 1;
}

}  // namespace

Frame read_frame(int fd, int idle_timeout_ms, int frame_timeout_ms) {
  Frame f;
  const int w = wait_readable(fd, idle_timeout_ms);
  if (w == 0) {
    f.status = FrameStatus::kTimeout;
    return f;
  }
  if (w < 0) {
    f.detail = std::strerror(errno);
    return f;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(frame_timeout_ms);
  unsigned char head[4];
  // The first byte decides between "closed between messages" and "closed inside one".
  int r = read_exact(fd, reinterpret_cast<char*>(head), 1, deadline);
  if (r == 0) {
    f.status = FrameStatus::kClosed;
    return f;
  }
  if (r == 1) r = read_exact(fd, reinterpret_cast<char*>(head) + 1, 3, deadline);
  if (r != 1) {
    f.status = r == 0 ? FrameStatus::kTruncated : r == -2 ? FrameStatus::kTimeout : FrameStatus::kError;
    if (r == -1) f.detail = std::strerror(errno);
    return f;
  }
  f.declared_bytes = (std::uint64_t{head[0]} << 24) | (std::uint64_t{head[1]} << 16) |
                     (std::uint64_t{head[2]} << 8) | std::uint64_t{head[3]};
  if (f.declared_bytes > kMaxMessageBytes) {
    f.status = FrameStatus::kTooLarge;
    return f;
  }
  f.payload.resize(f.declared_bytes);
  r = f.declared_bytes ? read_exact(fd, f.payload.data(), f.payload.size(), deadline) : 1;
  if (r != 1) {
    f.status = r == 0 ? FrameStatus::kTruncated : r == -2 ? FrameStatus::kTimeout : FrameStatus::kError;
    if (r == -1) f.detail = std::strerror(errno);
    f.payload.clear();
    return f;
  }
  f.status = FrameStatus::kOk;
  return f;
}

bool write_frame(int fd, const std::string& payload) {
  if (payload.size() > kMaxMessageBytes) return false;
  const auto n = static_cast<std::uint32_t>(payload.size());
  std::string buf;
  buf.reserve(4 + payload.size());
  buf.push_back(static_cast<char>((n >> 24) & 0xff));
  buf.push_back(static_cast<char>((n >> 16) & 0xff));
  buf.push_back(static_cast<char>((n >> 8) & 0xff));
  buf.push_back(static_cast<char>(n & 0xff));
  buf += payload;
  std::size_t done = 0;
  while (done < buf.size()) {
    const ssize_t w = ::send(fd, buf.data() + done, buf.size() - done, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += static_cast<std::size_t>(w);
  }
  return true;
}

bool write_message(int fd, const Json& message) { return write_frame(fd, message.dump()); }

sockaddr_un unix_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    throw InvalidArgument("socket path too long (" + std::to_string(path.size()) + " bytes): " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

int connect_unix(const std::string& path) {
  const sockaddr_un addr = unix_address(path);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

Json ok_reply() {
  Json j = Json::object();
  j["v"] = kKnobProtocolVersion;
  j["ok"] = true;
  return j;
}

const char* error_code_name(ExitCode code) {
  switch (code) {
    case ExitCode::kUsage:
      return "usage";
    case ExitCode::kData:
      return "data";
    case ExitCode::kUnsupported:
      return "unsupported";
    case ExitCode::kPermission:
      return "permission";
    case ExitCode::kDevice:
      return "device";
    default:
      return "internal";
  }
}

Json error_reply(ExitCode code, const std::string& message) {
  Json j = Json::object();
  j["v"] = kKnobProtocolVersion;
  j["ok"] = false;
  Json e = Json::object();
  e["code"] = error_code_name(code);
  e["exit_code"] = static_cast<int>(code);
  e["message"] = message;
  j["error"] = std::move(e);
  return j;
}

void throw_reply_error(const Json& reply) {
  const Json* e = reply.is_object() ? reply.find("error") : nullptr;
  if (!e || !e->is_object() || !e->find("message") || !(*e)["message"].is_string() ||
      !e->find("code") || !(*e)["code"].is_string())
    throw InternalError("cnnergyd sent a reply that is neither a result nor an error: " +
                        reply.dump().substr(0, 200));
  const std::string msg = "cnnergyd: " + (*e)["message"].as_string();
  const std::string& code = (*e)["code"].as_string();
  if (code == "usage") throw InvalidArgument(msg);
  if (code == "data") throw DataError(msg);
  if (code == "unsupported") throw NotSupported(msg);
  if (code == "permission") throw PermissionDenied(msg);
  if (code == "device") throw DeviceError(msg);
  throw InternalError(msg);
}

}  // namespace cnnergy::telemetry
