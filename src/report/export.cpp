// CSV and JSON exports.
#include "report/export.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/errors.hpp"
#include "report/sweep_data.hpp"
#include "core/json.hpp"
#include "tune/significance.hpp"
#include "tune/store_sql.hpp"

namespace cnnergy::report {

using namespace cnnergy::tune;

std::string csv_field(std::string_view s) {
  std::string v(s);
  if (!v.empty() && (v[0] == '=' || v[0] == '+' || v[0] == '-' || v[0] == '@')) {
    double d = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
    if (ec != std::errc() || p != v.data() + v.size()) v = "'" + v;  // not a number: defuse the formula
  }
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw DataError("cannot write " + path + ": " + std::strerror(errno));
    out << text;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw DataError("cannot write " + path + " (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw DataError("cannot write " + path + ": " + ec.message());
  }
}

namespace {

std::string num(const std::optional<double>& v) { return v && std::isfinite(*v) ? json_number(*v) : ""; }

const Objective kEds2 = parse_objective("eds:2");
const Objective kEds15 = parse_objective("eds:1.5");

}  // namespace

void export_csv(const ResultStore& store, const std::string& path) {
  std::string out;
  std::vector<std::string> header = {"sweep_id", "sweep_key", "trial_index", "trial_key"};
  for (Knob k : kAllKnobs) header.emplace_back(knob_name(k));
  for (const char* c : {"status", "error_message", "is_reference", "repetitions", "samples_per_iteration",
                        "flops_per_iteration", "accuracy"})
    header.emplace_back(c);
  for (Metric m : kAllMetrics)
    for (const char* s : {"_median", "_stddev", "_min", "_max"}) header.push_back(std::string(metric_name(m)) + s);
  for (Metric m : kAllMetrics)
    for (const char* s : {"_ci95_low", "_ci95_high"}) header.push_back(std::string(metric_name(m)) + s);
  for (const char* c : {"energy_vs_reference_pct", "time_vs_reference_pct", "eds_k2", "eds_k1.5", "pareto",
                        "slurm_job_id"})
    header.emplace_back(c);
  for (std::size_t i = 0; i < header.size(); ++i) out += (i ? "," : "") + csv_field(header[i]);
  out += "\r\n";

  for (const SweepRecord& sw : store.sweeps()) {
    const SweepData d = load_sweep(store, sw.id);
    const TrialSummary* ref = d.reference();
    const bool ps = d.analysis.per_sample;
    for (std::size_t i = 0; i < d.trials.size(); ++i) {
      const StoredTrial& t = d.trials[i];
      const TrialSummary& s = t.summary;
      std::vector<std::string> row = {std::to_string(sw.id), sw.sweep_key, std::to_string(t.trial_index), s.key};
      for (Knob k : kAllKnobs) {
        std::string v;
        for (const auto& ks : s.knobs)
          if (ks.knob == k) v = ks.value.text;
        row.push_back(v);
      }
      row.push_back(std::string(trial_status_name(s.status)));
      row.push_back(t.error_message);
      row.push_back(s.reference ? "1" : "0");
      row.push_back(std::to_string(t.repetitions));
      row.push_back(t.samples_per_iteration > 0 ? json_number(t.samples_per_iteration) : "");
      row.push_back(t.flops_per_iteration > 0 ? json_number(t.flops_per_iteration) : "");
      row.push_back(num(t.accuracy));
      for (Metric m : kAllMetrics) {
        const Stats* st = s.find(m);
        for (int k = 0; k < 4; ++k)
          row.push_back(st ? json_number(k == 0 ? st->median : k == 1 ? st->stddev : k == 2 ? st->min : st->max) : "");
      }
      for (Metric m : kAllMetrics) {  // 95 % t-interval of the mean; empty with one repetition
        const Stats* st = s.find(m);
        const auto ci = st ? mean_interval(*st) : std::nullopt;
        row.push_back(ci ? json_number(ci->low) : "");
        row.push_back(ci ? json_number(ci->high) : "");
      }
      std::optional<double> de, dt;
      if (ref && s.status == TrialStatus::kOk) {
        const auto e = d.median(i, d.analysis.energy_metric()), tm = d.median(i, d.analysis.time_metric());
        const auto er = d.median(*d.analysis.reference, d.analysis.energy_metric());
        const auto tr = d.median(*d.analysis.reference, d.analysis.time_metric());
        if (e && er) de = (*e / *er - 1) * 100;
        if (tm && tr) dt = (*tm / *tr - 1) * 100;
      }
      row.push_back(num(de));
      row.push_back(num(dt));
      row.push_back(num(objective_value(s, kEds2, ref, ps)));
      row.push_back(num(objective_value(s, kEds15, ref, ps)));
      row.push_back(std::find(d.analysis.pareto.begin(), d.analysis.pareto.end(), i) != d.analysis.pareto.end() ? "1" : "0");
      row.push_back(t.slurm_job_id);  // joins with sacct's JobID
      for (std::size_t c = 0; c < row.size(); ++c) out += (c ? "," : "") + csv_field(row[c]);
      out += "\r\n";
    }
  }
  write_file_atomically(path, out);
}

namespace {

Json opt(const std::optional<double>& v) { return v ? Json(*v) : Json(); }

Json stats_json(const Stats& s) {
  const auto ci = mean_interval(s);  // 95 % t-interval of the mean; null with one repetition
  return Json(Json::Object{{"n", Json(s.n)}, {"median", Json(s.median)}, {"mean", Json(s.mean)}, {"stddev", Json(s.stddev)},
                           {"min", Json(s.min)}, {"max", Json(s.max)}, {"cv", Json(s.cv())},
                           {"ci95_low", ci ? Json(ci->low) : Json()}, {"ci95_high", ci ? Json(ci->high) : Json()}});
}

}  // namespace

// Schema 3's telemetry statistics (telemetry/trial_stats.hpp) as stored; null where there are none.
Json telemetry_or_null(const std::string& text) { return text.empty() ? Json() : Json::parse(text); }

void export_json(const ResultStore& store, const std::string& path) {
  Json::Array sweeps;
  for (const SweepRecord& sw : store.sweeps()) {
    const SweepData d = load_sweep(store, sw.id);
    const TrialSummary* ref = d.reference();
    Json::Array trials;
    for (std::size_t i = 0; i < d.trials.size(); ++i) {
      const StoredTrial& t = d.trials[i];
      const TrialRecord rec = store.read_trial(t.id);
      Json::Object knobs, metrics;
      for (const auto& k : t.summary.knobs)
        knobs[std::string(knob_name(k.knob))] = k.value.number ? Json(*k.value.number) : Json(k.value.text);
      for (const auto& [m, s] : t.summary.metrics) metrics[std::string(metric_name(m))] = stats_json(s);
      if (t.summary.status == TrialStatus::kOk)  // what a finished trial did not measure is null, not absent or 0
        for (Metric m : kAllMetrics)
          if (!t.summary.find(m)) metrics[std::string(metric_name(m))] = Json();
      Json::Array reps, phases, layers;
      for (const auto& r : rec.measurement.repetitions) {
        Json::Array e;
        for (double v : r.energy_mj) e.emplace_back(v);
        reps.emplace_back(Json::Object{{"elapsed_ms", Json(r.elapsed_ms)}, {"iterations", Json(r.iterations)},
                                       {"energy_mj", Json(std::move(e))}, {"peak_power_w", opt(r.peak_power_w)},
                                       {"max_temperature_c", opt(r.max_temperature_c)}, {"energy_source", Json(r.energy_source)},
                                       {"sequence", r.sequence ? Json(*r.sequence) : Json()}, {"settle_s", opt(r.settle_s)}});
        const std::size_t ri = reps.size() - 1;
        if (ri < rec.measurement.repetition_telemetry_json.size())
          reps.back()["telemetry"] = telemetry_or_null(rec.measurement.repetition_telemetry_json[ri]);
      }
      for (const auto& p : rec.measurement.phases)
        phases.emplace_back(Json::Object{{"phase", Json(p.phase)}, {"time_ms", Json(p.time_ms)}, {"time_ms_stddev", Json(p.time_ms_stddev)},
                                         {"energy_mj", Json(p.energy_mj)}, {"energy_mj_stddev", Json(p.energy_mj_stddev)}});
      for (const auto& l : rec.measurement.layers)
        layers.emplace_back(Json::Object{{"index", Json(l.layer_index)}, {"name", Json(l.name)}, {"type", Json(l.type)},
                                         {"forward_ms", Json(l.forward_ms)}, {"backward_ms", Json(l.backward_ms)},
                                         {"energy_mj", opt(l.energy_mj)}, {"flops", Json(l.flops)}});
      const bool ps = d.analysis.per_sample;
      trials.emplace_back(Json::Object{
          {"index", Json(t.trial_index)}, {"key", Json(t.summary.key)}, {"knobs", Json(std::move(knobs))},
          {"status", Json(std::string(trial_status_name(t.summary.status)))}, {"error_message", Json(t.error_message)},
          {"reference", Json(t.summary.reference)}, {"started", Json(t.started)}, {"finished", Json(t.finished)},
          {"slurm_job_id", Json(t.slurm_job_id)},
          {"samples_per_iteration", t.samples_per_iteration > 0 ? Json(t.samples_per_iteration) : Json()},
          {"flops_per_iteration", t.flops_per_iteration > 0 ? Json(t.flops_per_iteration) : Json()},
          {"accuracy", opt(t.accuracy)}, {"metrics", Json(std::move(metrics))},
          {"eds_k2", opt(objective_value(t.summary, kEds2, ref, ps))},
          {"eds_k1.5", opt(objective_value(t.summary, kEds15, ref, ps))},
          {"repetitions", Json(std::move(reps))}, {"phases", Json(std::move(phases))}, {"layers", Json(std::move(layers))}});
      trials.back()["telemetry"] = telemetry_or_null(rec.measurement.telemetry_json);
      trials.back()["settle_s"] = opt(rec.measurement.settle_s);  // waits for steady starts, every visit
    }
    Json::Array optima, pareto;
    for (const Optimum& o : d.analysis.optima)
      optima.emplace_back(Json::Object{{"objective", Json(o.objective.name())}, {"label", Json(o.objective.label())},
                                       {"trial_key", Json(d.summaries[o.trial].key)}, {"value", Json(o.value)},
                                       {"energy", opt(o.energy)}, {"time_ms", Json(o.time)}, {"avg_power_w", opt(o.avg_power_w)},
                                       {"energy_change_pct", opt(o.energy_change_pct)}, {"time_change_pct", opt(o.time_change_pct)},
                                       {"ci95_low", opt(o.interval_low)}, {"ci95_high", opt(o.interval_high)},
                                       {"interval_method", Json(kIntervalMethod)},
                                       {"runner_up_key", o.runner_up ? Json(d.summaries[*o.runner_up].key) : Json()},
                                       {"verdict", Json(verdict_name(o.verdict))}});
    for (std::size_t i : d.analysis.pareto) pareto.emplace_back(d.summaries[i].key);
    Json::Array gpus;
    for (const auto& g : sw.environment.gpu_names) gpus.emplace_back(g);
    Json::Object extra;
    for (const auto& [k, v] : sw.environment.extra) extra[k] = Json(v);
    const auto& e = sw.environment;
    sweeps.emplace_back(Json::Object{
        {"id", Json(sw.id)}, {"sweep_key", Json(sw.sweep_key)}, {"created", Json(sw.created)},
        {"command_line", Json(sw.command_line)}, {"description", Json(sw.description)}, {"notes", Json(sw.notes)},
        {"environment", Json(Json::Object{{"gpu_names", Json(std::move(gpus))}, {"driver_version", Json(e.driver_version)},
                                          {"cuda_version", Json(e.cuda_version)}, {"cudnn_version", Json(e.cudnn_version)},
                                          {"host", Json(e.host)}, {"date", Json(e.date)},
                                          {"cnnergy_version", Json(e.cnnergy_version)}, {"extra", Json(std::move(extra))}})},
        {"per_sample", Json(d.analysis.per_sample)}, {"energy_measured", Json(d.analysis.energy_measured)},
        {"reference_key", d.analysis.reference ? Json(d.summaries[*d.analysis.reference].key) : Json()},
        {"trials", Json(std::move(trials))}, {"optima", Json(std::move(optima))}, {"pareto_front", Json(std::move(pareto))}});
    sweeps.back()["tag"] = Json(store.sweep_tag(sw.id));
  }
  Json::Array studies;  // each study's own document, as its command wrote it
  for (const StudyRecord& s : store.studies())
    studies.emplace_back(Json::Object{{"id", Json(s.id)}, {"kind", Json(s.kind)}, {"created", Json(s.created)},
                                      {"command_line", Json(s.command_line)}, {"device", Json(s.device)},
                                      {"document", Json::parse(s.document_json)}});
  const Json doc(Json::Object{{"format", Json("cnnergy-results")}, {"schema_version", Json(sql::kSchemaVersion)}, {"source", Json(store.path())},
                              {"sweeps", Json(std::move(sweeps))}, {"studies", Json(std::move(studies))}});
  write_file_atomically(path, doc.dump() + "\n");
}

}  // namespace cnnergy::report
