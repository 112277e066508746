// What `cnnergy monitor --prometheus-port P --jsonl FILE` adds to a run, in one RAII object: the
// metrics state and its loopback server, the JSON-lines stream, and the sampler listener feeding
// both (removed before they go). The command's own code only creates it and reports windows.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "exporter/metrics_server.hpp"
#include "exporter/openmetrics.hpp"

namespace cnnergy::exporter {

class MonitorExporter {
 public:
  // Null when neither a port nor a file is given. Announces the URL on stderr.
  static std::unique_ptr<MonitorExporter> create(std::shared_ptr<telemetry::Sampler> sampler,
                                                 std::optional<unsigned> prometheus_port,
                                                 std::optional<std::string> jsonl_path);
  MonitorExporter(std::shared_ptr<telemetry::Sampler> sampler,
                  std::optional<unsigned> prometheus_port, std::optional<std::string> jsonl_path);
  ~MonitorExporter();
  MonitorExporter(const MonitorExporter&) = delete;
  MonitorExporter& operator=(const MonitorExporter&) = delete;

  void on_window(const telemetry::Measurement& m);
  std::optional<unsigned> port() const;

 private:
  std::shared_ptr<telemetry::Sampler> sampler_;
  MetricsState state_;
  std::unique_ptr<JsonlStream> jsonl_;
  std::unique_ptr<MetricsServer> server_;
  int listener_ = 0;
};

}  // namespace cnnergy::exporter
