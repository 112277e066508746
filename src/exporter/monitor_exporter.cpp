// MonitorExporter: wires a sampler to the OpenMetrics state, its server and the JSON-lines file.
#include "exporter/monitor_exporter.hpp"

#include <cstdio>

namespace cnnergy::exporter {

std::unique_ptr<MonitorExporter> MonitorExporter::create(
    std::shared_ptr<telemetry::Sampler> sampler, std::optional<unsigned> prometheus_port,
    std::optional<std::string> jsonl_path) {
  if (!prometheus_port && !jsonl_path) return nullptr;
  auto e = std::make_unique<MonitorExporter>(gpu_labels(*sampler), prometheus_port,
                                             std::move(jsonl_path));
  e->attach(std::move(sampler));
  if (e->server_) std::fprintf(stderr, "cnnergy: serving OpenMetrics at %s\n", e->url().c_str());
  return e;
}

MonitorExporter::MonitorExporter(std::vector<GpuLabels> gpus,
                                 std::optional<unsigned> prometheus_port,
                                 std::optional<std::string> jsonl_path)
    : gpus_(gpus), state_(gpus) {
  if (jsonl_path) jsonl_ = std::make_unique<JsonlStream>(*jsonl_path, gpus);
  if (prometheus_port)
    server_ = std::make_unique<MetricsServer>(*prometheus_port, [this] { return state_.render(); });
}

MonitorExporter::~MonitorExporter() {
  detach();
  server_.reset();
}

void MonitorExporter::attach(std::shared_ptr<telemetry::Sampler> sampler) {
  detach();
  std::lock_guard<std::mutex> lock(attach_mutex_);
  sampler_ = std::move(sampler);
  if (auto latest = sampler_->latest()) {  // a scrape before the next tick sees data too
    state_.on_sample(*latest);
    if (jsonl_) jsonl_->on_sample(*latest);
  }
  listener_ = sampler_->add_listener([this](const telemetry::Sample& s) {
    state_.on_sample(s);
    if (jsonl_) jsonl_->on_sample(s);
  });
}

void MonitorExporter::detach() {
  std::lock_guard<std::mutex> lock(attach_mutex_);
  if (sampler_ && listener_) sampler_->remove_listener(listener_);
  listener_ = 0;
  sampler_.reset();
}

void MonitorExporter::on_window(const telemetry::Measurement& m) {
  state_.on_window(m);
  if (jsonl_) jsonl_->on_window(m);
}

void MonitorExporter::label_job(const std::string& slurm_job_id) {
  JobIds jobs;
  if (!slurm_job_id.empty())
    for (const auto& g : gpus_) jobs[g.index] = slurm_job_id;
  state_.set_job_source([jobs] { return jobs; });
}

std::optional<unsigned> MonitorExporter::port() const {
  return server_ ? std::optional<unsigned>(server_->port()) : std::nullopt;
}

std::string MonitorExporter::url() const { return server_ ? server_->url() : std::string(); }

}  // namespace cnnergy::exporter
