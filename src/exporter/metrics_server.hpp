// A minimal HTTP server on the loopback interface for Prometheus scrapes: GET /metrics answers with
// the text a callback renders (OpenMetrics), anything else with 404. One thread, one connection at
// a time (a scrape is a few kB), stopped by the destructor. 127.0.0.1 unless the caller names another
// address (a node exporter an administrator opens to the site's Prometheus).
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

  unsigned port() const { return port_; }
  std::string url() const { return "http://" + address_ + ":" + std::to_string(port_) + "/metrics"; }

 private:
  void run();
  void serve(int fd);

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
