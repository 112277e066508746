// Building a comparison: every database opened read-only, its sweeps grouped into result sets, each
// trial keyed by its workload, one trial per workload and set chosen, telemetry statistics read, and
// the side-by-side text tables with ratios against the baseline.
#include "report/compare.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "core/errors.hpp"
#include "core/json.hpp"
#include "report/sweep_data.hpp"
#include "report/table.hpp"

namespace cnnergy::report {

using namespace cnnergy::tune;

CompareBy parse_compare_by(const std::string& text) {
  if (text == "device") return CompareBy::kDevice;
  if (text == "sweep") return CompareBy::kSweep;
  if (text == "tag") return CompareBy::kTag;
  throw InvalidArgument("--by must be device, sweep or tag, got '" + text + "'");
}

namespace {

// The "workload=..." line of a sweep's description (see SweepDefinition::canonical).
std::string sweep_workload(const SweepRecord& s) {
  std::istringstream in(s.description);
  std::string line;
  while (std::getline(in, line)) {
    const auto at = line.find("workload=");
    if (at != std::string::npos) return line.substr(at + 9);
  }
  return s.description;
}

std::string field_of(const std::string& workload, const std::string& name) {
  std::istringstream in(workload);
  std::string tok;
  while (in >> tok)
    if (tok.rfind(name + "=", 0) == 0) return tok.substr(name.size() + 1);
  return "";
}

std::string device_label(const SweepRecord& s) {
  const std::string w = sweep_workload(s);
  const auto& extra = s.environment.extra;
  if (field_of(w, "device") == "cpu") {
    auto it = extra.find("cpu_model");
    return "CPU " + (it != extra.end() && !it->second.empty() ? it->second : s.environment.host);
  }
  if (auto it = extra.find("device_name"); it != extra.end() && !it->second.empty()) return it->second;
  if (!s.environment.gpu_names.empty()) return s.environment.gpu_names.front();
  return "host " + s.environment.host;
}

Figure from_stats(const Stats& s) { return Figure{s.median, s.stddev, s.min, s.max}; }

std::optional<Figure> metric_figure(const TrialSummary& t, Metric m) {
  const Stats* s = t.find(m);
  if (!s) return std::nullopt;
  return from_stats(*s);
}

bool is_hardware_knob(Knob k) { return k == Knob::kPowerLimit || k == Knob::kSmClock || k == Knob::kMemClock; }

std::vector<KnobSetting> hardware_knobs(const TrialSummary& t) {
  std::vector<KnobSetting> out;
  for (const auto& k : t.knobs)
    if (is_hardware_knob(k.knob) && !k.value.is_default()) out.push_back(k);
  return out;
}

std::optional<double> num(const Json& j, const std::string& key) {
  const Json* v = j.find(key);
  return v && v->is_number() ? std::optional<double>(v->as_number()) : std::nullopt;
}

// Figures of the trial's telemetry statistics, summed (power, memory) or averaged (utilisation,
// clocks, temperature) over its GPUs. A malformed document is reported, not guessed around.
void add_telemetry(CompareEntry& e, const std::string& text, const std::string& where) {
  if (text.empty()) return;
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Error& err) {
    throw DataError(where + ": telemetry statistics are not valid JSON (" + err.what() + ")");
  }
  e.idle_power_w = num(j, "idle_power_w");
  const Json* gpus = j.find("gpus");
  std::map<std::string, double> reasons;
  double reason_samples = 0;
  if (gpus && gpus->is_array() && !gpus->as_array().empty()) {
    auto gather = [&](const std::string& key, bool sum) -> std::optional<Figure> {
      Figure f;
      double lo = 0, hi = 0;
      int n = 0;
      for (const Json& g : gpus->as_array()) {
        const Json* s = g.find(key);
        if (!s || !s->is_object()) return std::nullopt;
        const double mean = s->at("mean").as_number(), mn = s->at("min").as_number(), mx = s->at("max").as_number();
        f.value += mean;
        lo = n == 0 ? mn : (sum ? lo + mn : std::min(lo, mn));
        hi = n == 0 ? mx : (sum ? hi + mx : std::max(hi, mx));
        ++n;
      }
      if (!sum) f.value /= n;
      f.low = lo, f.high = hi;
      return f;
    };
    e.power_w = gather("power_w", true);
    e.gpu_util_pct = gather("utilization_gpu_pct", false);
    e.mem_util_pct = gather("utilization_memory_pct", false);
    e.temperature_c = gather("temperature_c", false);
    e.sm_clock_mhz = gather("sm_clock_mhz", false);
    double mem = 0;
    bool have_mem = true;
    for (const Json& g : gpus->as_array()) {
      if (auto m = num(g, "memory_used_peak_mib")) mem += *m;
      else have_mem = false;
      if (const Json* c = g.find("throttle_counts"); c && c->is_object())
        for (const auto& [name, v] : c->as_object()) reasons[name] += v.as_number();
      reason_samples += num(g, "reason_samples").value_or(0);
    }
    if (have_mem) e.memory_peak_mib = mem;
  }
  if (reason_samples > 0) {
    auto best = std::max_element(reasons.begin(), reasons.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    if (best != reasons.end() && best->second > 0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " %.0f %%", 100.0 * best->second / reason_samples);
      e.top_throttle = best->first + buf;
    }
  }
  if (const Json* cpu = j.find("cpu"); cpu && cpu->is_object()) {
    e.cpu_util_pct = num(*cpu, "utilization_pct");
    const auto seconds = num(*cpu, "seconds");
    if (auto pkg = num(*cpu, "package_energy_j"); pkg && seconds && *seconds > 0) {
      e.cpu_package_w = (*pkg + num(*cpu, "dram_energy_j").value_or(0)) / *seconds;
    }
  }
}

bool same_path(const std::string& a, const std::string& b) {
  std::error_code ec;
  return a == b || (std::filesystem::exists(a, ec) && std::filesystem::exists(b, ec) && std::filesystem::equivalent(a, b, ec));
}

}  // namespace

std::string workload_key(const std::string& sweep_workload, const TrialSpec& trial) {
  const bool is_command = sweep_workload.rfind("command=", 0) == 0;
  auto knob = [&](Knob k, const std::string& fallback) {
    const KnobValue* v = trial.find(k);
    return v && !v->is_default() ? v->text : fallback;
  };
  std::string model = is_command ? sweep_workload : "model=" + field_of(sweep_workload, "model");
  if (!is_command)
    if (auto input = field_of(sweep_workload, "input"); !input.empty()) model += " input=" + input;
  const std::string mode = field_of(sweep_workload, "mode");
  return model + " batch=" + knob(Knob::kBatch, is_command ? "-" : "64") +
         " precision=" + knob(Knob::kPrecision, is_command ? "-" : "fp32") +
         " mode=" + (mode.empty() ? "training" : mode) + " gpus=" + knob(Knob::kGpus, "1");
}

Comparison build_comparison(const std::vector<std::string>& db_paths, const CompareOptions& options) {
  if (db_paths.empty()) throw InvalidArgument("compare needs at least one results database");
  Comparison c;
  std::set<std::string> chose_other;
  for (const auto& path : db_paths) {
    const ResultStore store(path, ResultStore::Mode::kReadOnly);
    const auto sweeps = store.sweeps();
    if (sweeps.empty()) c.notes.push_back(path + " holds no sweep");
    for (const SweepRecord& s : sweeps) {
      const std::string tag = store.sweep_tag(s.id);
      std::string label;
      switch (options.by) {
        case CompareBy::kDevice: label = device_label(s); break;
        case CompareBy::kSweep: label = std::filesystem::path(path).filename().string() + ":" + s.sweep_key; break;
        case CompareBy::kTag: label = tag.empty() ? "(untagged)" : tag; break;
      }
      auto it = std::find_if(c.sets.begin(), c.sets.end(), [&](const ResultSet& r) { return r.label == label; });
      if (it == c.sets.end()) {
        ResultSet r;
        r.label = label, r.db_path = path, r.sweep_key = s.sweep_key, r.tag = tag, r.device = device_label(s);
        c.sets.push_back(std::move(r));
        it = c.sets.end() - 1;
      } else {
        c.notes.push_back("'" + label + "' joins sweep " + s.sweep_key + " of " + path + " to " + it->sweep_key + " of " +
                          it->db_path + " (the first one's trial is kept where both have a workload)");
      }
      const std::string workload = sweep_workload(s);
      // Candidates per workload: the reference trial first, then trials at default hardware
      // settings, then any; the fastest among equals.
      std::map<std::string, std::pair<int, const StoredTrial*>> best;
      const auto trials = store.trials(s.id);
      // The default hardware setting: the reference trial's power limit and clocks (none: all unset).
      std::vector<KnobSetting> default_hw;
      for (const StoredTrial& t : trials)
        if (t.summary.reference) default_hw = hardware_knobs(t.summary);
      for (const StoredTrial& t : trials) {
        if (t.summary.status != TrialStatus::kOk) continue;
        TrialSpec spec;
        spec.knobs = t.summary.knobs;
        const std::string key = workload_key(workload, spec);
        const bool per_sample = t.samples_per_iteration > 0;
        const Metric tm = per_sample ? Metric::kTimePerSample : Metric::kTimePerIteration;
        const Metric em = per_sample ? Metric::kEnergyPerSample : Metric::kEnergyPerIteration;
        const Stats* ts = t.summary.find(tm);
        const Stats* es = t.summary.find(em);
        if (ts && es) it->all_points[key].emplace_back(ts->median, es->median);
        const int rank = t.summary.reference ? 0 : hardware_knobs(t.summary) == default_hw ? 1 : 2;
        auto b = best.find(key);
        const Stats* bt = b == best.end() ? nullptr : b->second.second->summary.find(tm);
        if (b == best.end() || rank < b->second.first ||
            (rank == b->second.first && ts && (!bt || ts->median < bt->median)))
          best[key] = {rank, &t};
      }
      for (const auto& [key, chosen] : best) {
        if (it->workloads.count(key)) continue;
        const StoredTrial& t = *chosen.second;
        if (chosen.first == 2) chose_other.insert(label);
        CompareEntry e;
        e.trial_key = t.summary.key;
        e.per_sample = t.samples_per_iteration > 0;
        e.time_ms = metric_figure(t.summary, e.per_sample ? Metric::kTimePerSample : Metric::kTimePerIteration);
        e.energy_j = metric_figure(t.summary, e.per_sample ? Metric::kEnergyPerSample : Metric::kEnergyPerIteration);
        e.gflops_per_w = metric_figure(t.summary, Metric::kGflopsPerWatt);
        e.avg_power_w = metric_figure(t.summary, Metric::kAvgPower);
        e.peak_power_w = metric_figure(t.summary, Metric::kPeakPower);
        if (e.time_ms && e.time_ms->value > 0) {
          const double v = 1e3 / e.time_ms->value;
          e.throughput_per_s = Figure{v, v * e.time_ms->spread / e.time_ms->value, std::nullopt, std::nullopt};
        }
        add_telemetry(e, store.trial_telemetry_json(t.id), path + ", trial " + t.summary.key);
        it->workloads[key] = std::move(e);
      }
    }
  }
  for (const auto& label : chose_other)
    c.notes.push_back("'" + label + "' has no trial at default hardware settings for some workloads: the fastest one is shown");
  if (options.baseline) {
    const std::string& b = *options.baseline;
    std::optional<std::size_t> found;
    for (std::size_t i = 0; i < c.sets.size() && !found; ++i)
      if (same_path(c.sets[i].db_path, b) || c.sets[i].tag == b || c.sets[i].label == b) found = i;
    if (!found) {
      std::string sets;
      for (const auto& s : c.sets) sets += "\n  " + s.label + " (" + s.db_path + (s.tag.empty() ? "" : ", tag " + s.tag) + ")";
      throw InvalidArgument("--baseline '" + b + "' matches no result set (give one of the databases, a tag or a label):" +
                            (sets.empty() ? std::string(" there are none") : sets));
    }
    c.baseline = *found;
  }
  std::map<std::string, std::vector<std::size_t>> where;
  for (std::size_t i = 0; i < c.sets.size(); ++i)
    for (const auto& [key, e] : c.sets[i].workloads) where[key].push_back(i);
  for (const auto& [key, sets] : where) {
    if (sets.size() > 1) c.matched[key] = sets;
    else c.unmatched[key] = sets.front();
  }
  return c;
}

std::string format_figure(const std::optional<Figure>& f, const std::string& unit) {
  if (!f) return "-";
  std::string s = format_quantity(f->value, unit);
  if (f->spread > 0) s += " ±" + format_quantity(f->spread, unit);
  return s;
}

namespace {

std::string plain(const std::optional<double>& v, const char* fmt) {
  if (!v) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, *v);
  return buf;
}

std::string range(const std::optional<Figure>& f, const char* fmt) {
  if (!f) return "-";
  std::string s = plain(f->value, fmt);
  if (f->low && f->high) s += " (" + plain(*f->low, fmt) + ".." + plain(*f->high, fmt) + ")";
  return s;
}

// value / baseline with the spread of the ratio (relative spreads added in quadrature).
std::string ratio(const std::optional<Figure>& a, const std::optional<Figure>& b) {
  if (!a || !b || b->value == 0 || a->value == 0) return "-";
  const double r = a->value / b->value;
  const double rel = std::hypot(a->spread / a->value, b->spread / b->value);
  char buf[64];
  if (rel > 0) std::snprintf(buf, sizeof buf, "%.3fx ±%.3f", r, r * rel);
  else std::snprintf(buf, sizeof buf, "%.3fx", r);
  return buf;
}

}  // namespace

void print_comparison(std::ostream& out, const Comparison& c) {
  out << "result sets (" << c.sets.size() << "):\n";
  for (std::size_t i = 0; i < c.sets.size(); ++i) {
    const auto& s = c.sets[i];
    out << "  " << (i == c.baseline ? "* " : "  ") << s.label << "  [" << s.db_path << " " << s.sweep_key
        << (s.tag.empty() ? "" : ", tag " + s.tag) << "] " << s.workloads.size() << " workloads\n";
  }
  out << "  (* = baseline of the ratios)\n";
  for (const auto& n : c.notes) out << "note: " << n << "\n";
  if (c.matched.empty())
    out << "\nno workload is in more than one result set: nothing to set side by side (each set's workloads are "
           "listed below)\n";
  for (const auto& [key, sets] : c.matched) {
    out << "\n" << key << "\n";
    const CompareEntry* base = nullptr;
    if (auto it = c.sets[c.baseline].workloads.find(key); it != c.sets[c.baseline].workloads.end()) base = &it->second;
    const bool ps = c.sets[sets.front()].workloads.at(key).per_sample;
    TextTable t;
    t.add_column("set", TextTable::Align::kLeft);
    t.add_column(ps ? "samples/s" : "iter/s");
    t.add_column(ps ? "time/sample" : "time/iter");
    t.add_column(ps ? "energy/sample" : "energy/iter");
    t.add_column("GFLOPS/W");
    t.add_column("power W mean (min..max)");
    t.add_column("idle W");
    t.add_column("GPU util %");
    t.add_column("mem util %");
    t.add_column("memory MiB");
    t.add_column("temp C");
    t.add_column("SM MHz");
    t.add_column("throttle", TextTable::Align::kLeft);
    t.add_column("CPU util %");
    t.add_column("CPU W");
    t.add_column("throughput vs base");
    t.add_column("energy vs base");
    for (std::size_t i : sets) {
      const CompareEntry& e = c.sets[i].workloads.at(key);
      t.add_row({c.sets[i].label, format_figure(e.throughput_per_s, ""), format_figure(e.time_ms, "ms"),
                 format_figure(e.energy_j, "J"), format_figure(e.gflops_per_w, ""), range(e.power_w, "%.1f"),
                 plain(e.idle_power_w, "%.1f"), range(e.gpu_util_pct, "%.0f"), range(e.mem_util_pct, "%.0f"),
                 plain(e.memory_peak_mib, "%.0f"), range(e.temperature_c, "%.0f"), range(e.sm_clock_mhz, "%.0f"),
                 e.top_throttle.empty() ? "-" : e.top_throttle, plain(e.cpu_util_pct, "%.0f"),
                 plain(e.cpu_package_w, "%.1f"), base ? ratio(e.throughput_per_s, base->throughput_per_s) : "-",
                 base ? ratio(e.energy_j, base->energy_j) : "-"});
    }
    out << t.render();
    if (!base) out << "(the baseline " << c.sets[c.baseline].label << " has no trial of this workload: no ratios)\n";
  }
  if (!c.unmatched.empty()) {
    out << "\nworkloads in one result set only:\n";
    for (std::size_t i = 0; i < c.sets.size(); ++i) {
      bool header = false;
      for (const auto& [key, set] : c.unmatched) {
        if (set != i) continue;
        if (!header) out << "  only in " << c.sets[i].label << ":\n";
        header = true;
        out << "    " << key << "\n";
      }
    }
  }
}

}  // namespace cnnergy::report
