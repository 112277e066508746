// Live metrics of a monitored run for dashboards and log pipelines: the latest sampler reading and
// every completed window, rendered as OpenMetrics text (Prometheus' exposition format) and as
// JSON lines. Names follow Prometheus conventions: base units in the name (joules, watts, hertz,
// celsius, ratio), `_total` on counters, labels gpu="0",uuid="GPU-...",model="..." and, while a
// Slurm job holds the GPU, slurm_job_id="...".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "telemetry/energy_meter.hpp"
#include "telemetry/sampler.hpp"

namespace cnnergy::exporter {

struct GpuLabels {
  unsigned index = 0;
  std::string uuid, name;
};

// The Slurm job holding each GPU, by NVML index (a GPU absent from the map: none).
using JobIds = std::map<unsigned, std::string>;

// The GPUs a sampler reads, in its slot order, with their UUIDs and names.
std::vector<GpuLabels> gpu_labels(const telemetry::Sampler& sampler);

// Escapes a label value for the text format (backslash, double quote, newline).
std::string escape_label(const std::string& value);

// The state a scrape shows. Fed from the sampler thread (on_sample) and by whoever completes a
// window (on_window); render() may run on any thread.
class MetricsState {
 public:
  explicit MetricsState(std::vector<GpuLabels> gpus);

  void on_sample(const telemetry::Sample& s);
  void on_window(const telemetry::Measurement& m);
  std::string render() const;  // OpenMetrics text, ending in "# EOF\n"
  // Where the slurm_job_id label comes from: asked at every render (a node exporter reads the job
  // map a Slurm prolog writes; a monitor inside a job gives its own job for every GPU).
  void set_job_source(std::function<JobIds()> source);

 private:
  struct WindowTotals {
    std::uint64_t count = 0;
    double energy_j_total = 0, seconds_total = 0;
    std::optional<double> last_energy_j;
    double last_seconds = 0;
  };
  std::vector<GpuLabels> gpus_;
  mutable std::mutex mutex_;
  std::optional<telemetry::Sample> latest_;
  std::uint64_t samples_ = 0;
  std::map<std::string, WindowTotals> windows_;
  std::function<JobIds()> job_source_;
};

// One JSON object per line: {"type":"sample",...} for each sample and {"type":"window",...} for
// each completed window, with the time since the stream started and the Unix time.
class JsonlStream {
 public:
  // DataError naming the file when it cannot be written.
  JsonlStream(const std::string& path, std::vector<GpuLabels> gpus);
  ~JsonlStream();
  JsonlStream(const JsonlStream&) = delete;
  JsonlStream& operator=(const JsonlStream&) = delete;

  void on_sample(const telemetry::Sample& s);
  void on_window(const telemetry::Measurement& m);

 private:
  void write_line(const std::string& line);
  std::vector<GpuLabels> gpus_;
  std::FILE* out_ = nullptr;
  std::mutex mutex_;
  std::int64_t t0_ns_ = 0;
  double unix_minus_steady_s_ = 0;
};

}  // namespace cnnergy::exporter
