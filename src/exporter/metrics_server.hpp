// A minimal HTTP server on the loopback interface for Prometheus scrapes: GET /metrics answers with
// the text a callback renders (OpenMetrics), anything else with 404. One thread runs an event loop
// over non-blocking sockets, so a slow or silent client never delays another's scrape: each
// connection must deliver its request within a deadline and a size limit, at most
// kMaxConnections are open at once (the oldest idle one is dropped for a newcomer), and a client
// that does not read its answer is dropped after a write deadline. Stopped by the destructor. 127.0.0.1
// unless the caller names another address (a node exporter opened to the site's Prometheus).
#pragma once

#include <functional>
#include <string>
#include <thread>

namespace cnnergy::exporter {

class MetricsServer {
 public:
  using Render = std::function<std::string()>;
  // port 0: the OS picks a free one (see port()). InvalidArgument when the port is in use or
  // cannot be bound, naming it. `bind_address`: an IPv4 address; 127.0.0.1 unless an
  // administrator asks for more (`cnnergy exporter --bind-address`).
  MetricsServer(unsigned port, Render render, const std::string& bind_address = "127.0.0.1");
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bounds every connection lives within.
  static constexpr std::size_t kMaxConnections = 64;     // open at once; the oldest idle one yields
  static constexpr int kRequestDeadlineMs = 2000;        // from accept to the request's blank line
  static constexpr std::size_t kMaxRequestBytes = 16384;  // a longer request is answered 431 and closed
  static constexpr int kWriteDeadlineMs = 5000;          // a client that does not read its answer

  unsigned port() const { return port_; }
  std::string url() const { return "http://" + address_ + ":" + std::to_string(port_) + "/metrics"; }

 private:
  void run();

  Render render_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  unsigned port_ = 0;
  std::string address_;
  std::thread thread_;
};

// An HTTP GET of http://127.0.0.1:PORT/PATH: the status line's code and the body (for tests and
// `cnnergy` itself). DeviceError when nothing answers.
struct HttpReply {
  int status = 0;
  std::string content_type, body;
};
HttpReply http_get_loopback(unsigned port, const std::string& path);

}  // namespace cnnergy::exporter
