// MonitorExporter: wires a sampler to the OpenMetrics state, its server and the JSON-lines file.
#include "exporter/monitor_exporter.hpp"

#include <cstdio>

namespace cnnergy::exporter {

std::unique_ptr<MonitorExporter> MonitorExporter::create(
    std::shared_ptr<telemetry::Sampler> sampler, std::optional<unsigned> prometheus_port,
    std::optional<std::string> jsonl_path) {
  if (!prometheus_port && !jsonl_path) return nullptr;
  return std::make_unique<MonitorExporter>(std::move(sampler), prometheus_port,
                                           std::move(jsonl_path));
}

MonitorExporter::MonitorExporter(std::shared_ptr<telemetry::Sampler> sampler,
                                 std::optional<unsigned> prometheus_port,
                                 std::optional<std::string> jsonl_path)
    : sampler_(std::move(sampler)), state_(gpu_labels(*sampler_)) {
  if (jsonl_path) jsonl_ = std::make_unique<JsonlStream>(*jsonl_path, gpu_labels(*sampler_));
  if (auto latest = sampler_->latest()) {  // a scrape before the next tick sees data too
    state_.on_sample(*latest);
    if (jsonl_) jsonl_->on_sample(*latest);
  }
  if (prometheus_port) {
    server_ = std::make_unique<MetricsServer>(*prometheus_port, [this] { return state_.render(); });
    std::fprintf(stderr, "cnnergy: serving OpenMetrics at %s\n", server_->url().c_str());
  }
  listener_ = sampler_->add_listener([this](const telemetry::Sample& s) {
    state_.on_sample(s);
    if (jsonl_) jsonl_->on_sample(s);
  });
}

MonitorExporter::~MonitorExporter() {
  sampler_->remove_listener(listener_);
  server_.reset();
}

void MonitorExporter::on_window(const telemetry::Measurement& m) {
  state_.on_window(m);
  if (jsonl_) jsonl_->on_window(m);
}

std::optional<unsigned> MonitorExporter::port() const {
  return server_ ? std::optional<unsigned>(server_->port()) : std::nullopt;
}

}  // namespace cnnergy::exporter
