// MetricsServer: poll() on the listening socket and a wake-up pipe; each request is read up to its
// blank line (or 2 s, or 16 kB) and answered with Connection: close.
#include "exporter/metrics_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw DeviceError(std::string("socket: ") + std::strerror(errno));
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = loopback(port);
  a.sin_addr = bind_ip;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listen_fd_, 16) != 0) {
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

void MetricsServer::run() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    if (!(fds[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    try {
      serve(fd);
    } catch (const std::exception& e) {
      log_warn(std::string("metrics server: ") + e.what());
    }
    ::close(fd);
  }
}

void MetricsServer::serve(int fd) {
  std::string request;
  char buf[2048];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 2000) <= 0) return;  // a client that says nothing is dropped
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return;
    request.append(buf, static_cast<std::size_t>(n));
  }
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
      body = render_();
    }
  }
  write_all(fd, "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
                    "\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\nConnection: close\r\n\r\n" + body);
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
