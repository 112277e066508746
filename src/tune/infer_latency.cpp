// Inference latency in a trial's telemetry JSON, and the choice under a latency bound (infer_latency.hpp).
#include "tune/infer_latency.hpp"

#include "core/errors.hpp"
#include "core/json.hpp"

namespace cnnergy::tune {

std::string with_infer_latency(const std::string& telemetry_json, const InferLatency& l) {
  Json doc = telemetry_json.empty() ? Json::object() : Json::parse(telemetry_json);
  if (!doc.is_object()) doc = Json::object();
  Json j = Json::object();
  j["batch"] = l.batch;
  j["requests"] = l.count;
  j["mean_ms"] = l.mean_ms;
  j["p50_ms"] = l.p50_ms;
  j["p90_ms"] = l.p90_ms;
  j["p99_ms"] = l.p99_ms;
  j["max_ms"] = l.max_ms;
  doc["inference"] = j;
  return doc.dump();
}

std::optional<InferLatency> infer_latency_of(const std::string& telemetry_json) {
  if (telemetry_json.empty()) return std::nullopt;
  try {
    const Json doc = Json::parse(telemetry_json);
    const Json* j = doc.is_object() ? doc.find("inference") : nullptr;
    if (j == nullptr || !j->is_object()) return std::nullopt;
    InferLatency l;
    l.batch = json_integer(j->at("batch"), "inference batch", 1, std::int64_t{1} << 40);
    l.count = static_cast<std::size_t>(json_integer(j->at("requests"), "inference requests", 0, std::int64_t{1} << 53));
    l.mean_ms = j->at("mean_ms").as_number();
    l.p50_ms = j->at("p50_ms").as_number();
    l.p90_ms = j->at("p90_ms").as_number();
    l.p99_ms = j->at("p99_ms").as_number();
    l.max_ms = j->at("max_ms").as_number();
    return l;
  } catch (const Error&) {
    return std::nullopt;  // a trial of another mode, or a damaged entry: no latency
  }
}

LatencyBoundChoice choose_under_latency_bound(const std::vector<TrialSummary>& trials,
                                              const std::function<std::optional<InferLatency>(std::size_t)>& latency_of,
                                              const Objective& objective, double max_p99_ms) {
  LatencyBoundChoice c;
  const TrialSummary* reference = nullptr;
  for (const auto& t : trials)
    if (t.reference && t.status == TrialStatus::kOk) reference = &t;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const TrialSummary& t = trials[i];
    if (t.status != TrialStatus::kOk) continue;
    const auto l = latency_of(i);
    if (!l) continue;
    ++c.measured;
    if (!c.best_p99_index || l->p99_ms < c.best_p99_ms) {
      c.best_p99_index = i;
      c.best_p99_ms = l->p99_ms;
    }
    if (l->p99_ms > max_p99_ms) continue;
    ++c.meeting;
    const bool per_sample = t.find(Metric::kTimePerSample) && t.find(Metric::kEnergyPerSample);
    const auto v = objective_value(t, objective, reference, per_sample);
    if (!v) continue;  // e.g. energy not measured: meets the bound but cannot be ranked
    const double score = objective.maximise() ? -*v : *v;
    if (!c.chosen || score < (objective.maximise() ? -*c.chosen_value : *c.chosen_value)) {
      c.chosen = i;
      c.chosen_value = *v;
    }
  }
  return c;
}

}  // namespace cnnergy::tune
