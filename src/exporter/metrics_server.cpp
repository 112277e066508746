// MetricsServer: one thread, poll() over the listening socket, a wake-up pipe and every open
// connection (non-blocking). A connection reads its request up to the blank line (within
// kRequestDeadlineMs and kMaxRequestBytes), then writes its whole answer (within kWriteDeadlineMs)
// and is closed (Connection: close). No call in the loop blocks, so one client's pace is never
// another's.
#include "exporter/metrics_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/errors.hpp"
#include "core/log.hpp"

namespace cnnergy::exporter {

namespace {

constexpr const char* kContentType = "application/openmetrics-text; version=1.0.0; charset=utf-8";

void write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the client went away: nothing to do
    done += static_cast<std::size_t>(n);
  }
}

sockaddr_in loopback(unsigned port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

}  // namespace

MetricsServer::MetricsServer(unsigned port, Render render, const std::string& bind_address)
    : render_(std::move(render)), address_(bind_address) {
  if (port > 65535) throw InvalidArgument("port " + std::to_string(port) + " is not 0 to 65535");
  in_addr bind_ip{};
  if (::inet_pton(AF_INET, bind_address.c_str(), &bind_ip) != 1)
    throw InvalidArgument("cannot serve metrics on '" + bind_address + "': not an IPv4 address (e.g. 127.0.0.1)");
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) throw DeviceError(std::string("socket: ") + std::strerror(errno));
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = loopback(port);
  a.sin_addr = bind_ip;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listen_fd_, SOMAXCONN) != 0) {
    const int err = errno;
    ::close(listen_fd_);
    throw InvalidArgument("cannot serve metrics on " + bind_address + ":" + std::to_string(port) + ": " +
                          std::strerror(err) +
                          (err == EADDRINUSE ? " (another program uses this port; choose another, "
                                               "or 0 for one the system picks)"
                                             : ""));
  }
  socklen_t len = sizeof a;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  if (::pipe2(wake_, O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    throw DeviceError(std::string("pipe: ") + std::strerror(errno));
  }
  thread_ = std::thread([this] { run(); });
}

MetricsServer::~MetricsServer() {
  const char c = 'q';
  if (::write(wake_[1], &c, 1) < 0) log_warn("metrics server: cannot wake its thread");
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

namespace {

using Clock = std::chrono::steady_clock;

struct Connection {
  int fd = -1;
  Clock::time_point accepted, deadline;
  std::string in, out;
  std::size_t sent = 0;
  bool writing = false;
};

// The answer to one request (its first line decides).
std::string answer(const std::string& request, const MetricsServer::Render& render) {
  const std::string line = request.substr(0, request.find("\r\n"));
  std::string status = "404 Not Found", type = "text/plain; charset=utf-8",
              body = "cnnergy serves its metrics at /metrics\n";
  if (line.rfind("GET ", 0) != 0) {
    status = "405 Method Not Allowed";
    body = "only GET\n";
  } else {
    const std::string path = line.substr(4, line.find(' ', 4) - 4);
    if (path == "/metrics" || path.rfind("/metrics?", 0) == 0) {
      status = "200 OK";
      type = kContentType;
      try {
        body = render();
      } catch (const std::exception& e) {
        log_warn(std::string("metrics server: rendering failed: ") + e.what());
        status = "500 Internal Server Error";
        type = "text/plain; charset=utf-8";
        body = "the metrics could not be rendered\n";
      }
    }
  }
  return "HTTP/1.1 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

// Reads what has arrived; false when the connection is finished with (closed by the peer, an
// error). Switches to writing once the request is whole, or with a 431 when it is too long.
bool on_readable(Connection& c, const MetricsServer::Render& render) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
    if (n == 0) return false;
    c.in.append(buf, static_cast<std::size_t>(n));
    if (c.in.find("\r\n\r\n") != std::string::npos) {
      c.out = answer(c.in, render);
    } else if (c.in.size() > MetricsServer::kMaxRequestBytes) {
      c.out = "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n"
              "Connection: close\r\n\r\n";
    } else {
      continue;
    }
    c.writing = true;
    c.deadline = Clock::now() + std::chrono::milliseconds(MetricsServer::kWriteDeadlineMs);
    return true;
  }
}

// Sends what the socket takes; false when finished (all sent, or the peer is gone).
bool on_writable(Connection& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
    c.sent += static_cast<std::size_t>(n);
  }
  return false;
}

}  // namespace

void MetricsServer::run() {
  std::vector<Connection> conns;
  std::vector<pollfd> fds;
  auto close_at = [&](std::size_t i) {
    ::close(conns[i].fd);
    conns[i] = std::move(conns.back());
    conns.pop_back();
  };
  // The oldest connection still waiting for its request (index), or conns.size() when none is.
  auto oldest_idle = [&] {
    std::size_t best = conns.size();
    for (std::size_t i = 0; i < conns.size(); ++i)
      if (!conns[i].writing && (best == conns.size() || conns[i].accepted < conns[best].accepted)) best = i;
    return best;
  };
  for (;;) {
    // Expired connections go first: their deadline is also the poll timeout.
    const auto now = Clock::now();
    auto next = now + std::chrono::hours(1);
    for (std::size_t i = conns.size(); i-- > 0;) {
      if (conns[i].deadline <= now)
        close_at(i);
      else
        next = std::min(next, conns[i].deadline);
    }
    fds.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const Connection& c : conns) fds.push_back({c.fd, static_cast<short>(c.writing ? POLLOUT : POLLIN), 0});
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::min<std::int64_t>(wait_ms, 60'000))) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents) break;
    // Existing connections first (indices match fds[2..] until anything is closed).
    for (std::size_t i = conns.size(); i-- > 0;) {
      const short ev = fds[i + 2].revents;
      if (!ev) continue;
      Connection& c = conns[i];
      bool keep = true;
      if (!c.writing) keep = on_readable(c, render_);
      if (keep && c.writing) keep = on_writable(c);  // the answer often goes out at once
      if (!keep) close_at(i);
    }
    if (fds[1].revents & POLLIN) {
      for (;;) {  // everything waiting in the backlog
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED) continue;
          if ((errno == EMFILE || errno == ENFILE) && oldest_idle() < conns.size()) {
            close_at(oldest_idle());  // out of descriptors: the oldest idle client yields
            continue;
          }
          break;  // EAGAIN: nothing more now
        }
        if (conns.size() >= kMaxConnections) {
          const std::size_t victim = oldest_idle();
          if (victim == conns.size()) {  // every slot is sending an answer: the newcomer waits its turn
            ::close(fd);
            continue;
          }
          close_at(victim);
        }
        Connection c;
        c.fd = fd;
        c.accepted = Clock::now();
        c.deadline = c.accepted + std::chrono::milliseconds(kRequestDeadlineMs);
        conns.push_back(std::move(c));
      }
    }
  }
  for (const Connection& c : conns) ::close(c.fd);
}

HttpReply http_get_loopback(unsigned port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw DeviceError(std::string("socket: ") + std::strerror(errno));
  sockaddr_in a = loopback(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int err = errno;
    ::close(fd);
    throw DeviceError("nothing answers on 127.0.0.1:" + std::to_string(port) + ": " +
                      std::strerror(err));
  }
  write_all(fd, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  std::string reply;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    reply.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  HttpReply r;
  const auto head_end = reply.find("\r\n\r\n");
  if (reply.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos)
    throw DeviceError("127.0.0.1:" + std::to_string(port) + " did not answer with HTTP");
  r.status = std::atoi(reply.c_str() + reply.find(' ') + 1);
  const auto ct = reply.find("Content-Type: ");
  if (ct != std::string::npos && ct < head_end)
    r.content_type = reply.substr(ct + 14, reply.find("\r\n", ct) - ct - 14);
  r.body = reply.substr(head_end + 4);
  return r;
}

}  // namespace cnnergy::exporter
