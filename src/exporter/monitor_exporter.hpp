// What `cnnergy monitor --prometheus-port P --jsonl FILE` adds to a run, in one RAII object: the
// metrics state and its loopback server, the JSON-lines stream, and the sampler listener feeding
// both (removed before they go). The command's own code only creates it and reports windows; the
// C API attaches one to a monitor (and re-attaches it when the monitor's sampler is restarted).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "exporter/metrics_server.hpp"
#include "exporter/openmetrics.hpp"

namespace cnnergy::exporter {

class MonitorExporter {
 public:
  // Null when neither a port nor a file is given; otherwise attached to `sampler`, with the URL
  // announced on stderr (what `cnnergy monitor` wants).
  static std::unique_ptr<MonitorExporter> create(std::shared_ptr<telemetry::Sampler> sampler,
                                                 std::optional<unsigned> prometheus_port,
                                                 std::optional<std::string> jsonl_path);
  // Serves / writes nothing until attached. InvalidArgument for a port in use, DataError for a
  // file that cannot be written.
  MonitorExporter(std::vector<GpuLabels> gpus, std::optional<unsigned> prometheus_port,
                  std::optional<std::string> jsonl_path);
  ~MonitorExporter();
  MonitorExporter(const MonitorExporter&) = delete;
  MonitorExporter& operator=(const MonitorExporter&) = delete;

  // Feeds from this sampler's samples from now on (detaching from the previous one).
  void attach(std::shared_ptr<telemetry::Sampler> sampler);
  void detach();
  void on_window(const telemetry::Measurement& m);
  // Labels every GPU's series with this Slurm job id (a monitor running inside a job); "": none.
  void label_job(const std::string& slurm_job_id);
  std::optional<unsigned> port() const;
  std::string url() const;  // empty without a server

 private:
  std::vector<GpuLabels> gpus_;
  MetricsState state_;
  std::unique_ptr<JsonlStream> jsonl_;
  std::unique_ptr<MetricsServer> server_;
  std::mutex attach_mutex_;
  std::shared_ptr<telemetry::Sampler> sampler_;
  int listener_ = 0;
};

}  // namespace cnnergy::exporter
