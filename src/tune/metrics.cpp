// Metrics, statistics, objectives, optima and the Pareto front.
#include "tune/metrics.hpp"
#include "tune/significance.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "core/errors.hpp"

namespace cnnergy::tune {

namespace {

struct MetricInfo {
  Metric metric;
  std::string_view name, label, unit;
  bool higher_is_better;
};

constexpr std::array<MetricInfo, 12> kMetricInfo = {{
    {Metric::kTimePerIteration, "time_per_iteration_ms", "time per iteration", "ms", false},
    {Metric::kTimePerSample, "time_per_sample_ms", "time per sample", "ms", false},
    {Metric::kEnergyPerIteration, "energy_per_iteration_j", "energy per iteration", "J", false},
    {Metric::kEnergyPerSample, "energy_per_sample_j", "energy per sample", "J", false},
    {Metric::kAvgPower, "avg_power_w", "average power", "W", false},
    {Metric::kPeakPower, "peak_power_w", "peak power", "W", false},
    {Metric::kEdp, "edp_js", "EDP", "J*s", false},
    {Metric::kEd2p, "ed2p_js2", "ED2P", "J*s^2", false},
    {Metric::kGflops, "gflops", "GFLOPS", "GFLOP/s", true},
    {Metric::kGflopsPerWatt, "gflops_per_w", "GFLOPS/W", "GFLOP/J", true},
    {Metric::kSamplesPerJoule, "samples_per_j", "samples per joule", "1/J", true},
    {Metric::kAccuracy, "accuracy", "accuracy", "", true},
}};

const MetricInfo& minfo(Metric m) { return kMetricInfo[static_cast<std::size_t>(m)]; }

std::string format_k(double k) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", k);
  return buf;
}

double parse_k(const std::string& text, const std::string& whole) {
  char* end = nullptr;
  const double k = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(k) || k <= 1.0)
    throw InvalidArgument("invalid EDS parameter in '" + whole + "': k must be a number above 1 (the accepted time "
                          "increase factor of Krzywaniak et al. 2022, e.g. eds:1.5 or eds:2)");
  return k;
}

}  // namespace

std::string_view metric_name(Metric m) { return minfo(m).name; }
std::string_view metric_label(Metric m) { return minfo(m).label; }
std::string_view metric_unit(Metric m) { return minfo(m).unit; }
bool metric_higher_is_better(Metric m) { return minfo(m).higher_is_better; }

Metric parse_metric_name(std::string_view name) {
  for (const auto& i : kMetricInfo)
    if (i.name == name) return i.metric;
  std::string known;
  for (const auto& i : kMetricInfo) known += (known.empty() ? "" : ", ") + std::string(i.name);
  throw InvalidArgument("unknown metric '" + std::string(name) + "' (metrics: " + known + ")");
}

Stats compute_stats(const std::vector<double>& values) {
  std::vector<double> v;
  for (double x : values)
    if (std::isfinite(x)) v.push_back(x);
  if (v.empty()) throw InvalidArgument("statistics of an empty set of values");
  std::sort(v.begin(), v.end());
  Stats s;
  s.n = v.size();
  s.min = v.front();
  s.max = v.back();
  s.median = s.n % 2 ? v[s.n / 2] : 0.5 * (v[s.n / 2 - 1] + v[s.n / 2]);
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(s.n);
  if (s.n > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.stddev = std::sqrt(ss / static_cast<double>(s.n - 1));
  }
  return s;
}

std::map<Metric, std::vector<double>> repetition_metrics(const TrialMeasurement& m) {
  std::map<Metric, std::vector<double>> out;
  const double spi = m.samples_per_iteration;
  if (!(spi >= 0) || !std::isfinite(spi)) throw InvalidArgument("samples per iteration must be a finite number >= 0");
  if (!(m.flops_per_iteration >= 0) || !std::isfinite(m.flops_per_iteration))
    throw InvalidArgument("FLOPs per iteration must be a finite number >= 0");
  for (std::size_t r = 0; r < m.repetitions.size(); ++r) {
    const Repetition& rep = m.repetitions[r];
    if (!(rep.elapsed_ms > 0) || !std::isfinite(rep.elapsed_ms) || rep.iterations <= 0)
      throw InvalidArgument("repetition " + std::to_string(r) + " has no time or no iterations (elapsed " +
                            std::to_string(rep.elapsed_ms) + " ms, " + std::to_string(rep.iterations) + " iterations)");
    const double iters = static_cast<double>(rep.iterations);
    const double t_iter_ms = rep.elapsed_ms / iters;
    out[Metric::kTimePerIteration].push_back(t_iter_ms);
    if (spi > 0) out[Metric::kTimePerSample].push_back(t_iter_ms / spi);
    if (m.flops_per_iteration > 0) out[Metric::kGflops].push_back(m.flops_per_iteration / (t_iter_ms * 1e-3) / 1e9);
    if (rep.peak_power_w) out[Metric::kPeakPower].push_back(*rep.peak_power_w);
    if (rep.energy_mj.empty()) continue;  // no energy sensor: time metrics only
    double total_mj = 0;
    for (double e : rep.energy_mj) {
      if (!(e >= 0) || !std::isfinite(e)) throw InvalidArgument("repetition " + std::to_string(r) + " has a negative or non-finite energy");
      total_mj += e;
    }
    const double e_iter_j = total_mj * 1e-3 / iters;
    out[Metric::kEnergyPerIteration].push_back(e_iter_j);
    out[Metric::kAvgPower].push_back(total_mj / rep.elapsed_ms);  // mJ/ms = W
    // EDP and ED2P of one work unit: a sample where known (comparable across batch sizes: for a data
    // set of N samples the totals are N^2 and N^3 times these), an iteration otherwise.
    const double e_unit = spi > 0 ? e_iter_j / spi : e_iter_j;
    const double t_unit_s = (spi > 0 ? t_iter_ms / spi : t_iter_ms) * 1e-3;
    out[Metric::kEdp].push_back(e_unit * t_unit_s);
    out[Metric::kEd2p].push_back(e_unit * t_unit_s * t_unit_s);
    if (spi > 0) {
      out[Metric::kEnergyPerSample].push_back(e_iter_j / spi);
      if (e_iter_j > 0) out[Metric::kSamplesPerJoule].push_back(spi / e_iter_j);
    }
    if (m.flops_per_iteration > 0 && e_iter_j > 0) out[Metric::kGflopsPerWatt].push_back(m.flops_per_iteration / e_iter_j / 1e9);
  }
  if (m.accuracy) {
    if (!std::isfinite(*m.accuracy)) throw InvalidArgument("accuracy must be a finite number");
    out[Metric::kAccuracy].push_back(*m.accuracy);
  }
  return out;
}

std::map<Metric, Stats> compute_trial_metrics(const TrialMeasurement& m) {
  std::map<Metric, Stats> out;
  for (const auto& [metric, values] : repetition_metrics(m))
    if (!values.empty()) out[metric] = compute_stats(values);
  return out;
}

double eds(double energy, double time, double energy_ref, double time_ref, double k) {
  if (!(energy_ref > 0) || !(time_ref > 0)) throw InvalidArgument("EDS needs a reference with positive energy and time");
  if (!(k > 1)) throw InvalidArgument("EDS needs k > 1");
  return (k - 1.0) / (k * energy_ref) * energy + 1.0 / (k * time_ref) * time;
}

std::string Objective::name() const {
  return kind == Kind::kEds ? "eds_k" + format_k(eds_k) : std::string(metric_name(metric));
}

std::string Objective::label() const {
  return kind == Kind::kEds ? "EDS(k=" + format_k(eds_k) + ")" : std::string(metric_label(metric));
}

Objective parse_objective(const std::string& text) {
  Objective o;
  std::string t;
  for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "eds") {
    o.kind = Objective::Kind::kEds;
    return o;
  }
  for (const char* prefix : {"eds:", "eds_k", "eds(k="}) {
    const std::string p = prefix;
    if (t.starts_with(p)) {
      std::string k = t.substr(p.size());
      if (p == "eds(k=") {
        if (!k.ends_with(")")) break;
        k.pop_back();
      }
      o.kind = Objective::Kind::kEds;
      o.eds_k = parse_k(k, text);
      return o;
    }
  }
  static const std::map<std::string, Metric> kShort = {
      {"time", Metric::kTimePerSample},          {"t", Metric::kTimePerSample},
      {"energy", Metric::kEnergyPerSample},      {"e", Metric::kEnergyPerSample},
      {"power", Metric::kAvgPower},              {"avg_power", Metric::kAvgPower},
      {"peak_power", Metric::kPeakPower},        {"edp", Metric::kEdp},
      {"ed2p", Metric::kEd2p},                   {"gflops", Metric::kGflops},
      {"gflops_per_w", Metric::kGflopsPerWatt},  {"gflops/w", Metric::kGflopsPerWatt},
      {"samples_per_j", Metric::kSamplesPerJoule}, {"accuracy", Metric::kAccuracy}};
  if (auto it = kShort.find(t); it != kShort.end()) {
    o.metric = it->second;
    return o;
  }
  try {
    o.metric = parse_metric_name(t);
  } catch (const InvalidArgument&) {
    throw InvalidArgument("unknown metric '" + text + "' (use time, energy, power, peak_power, edp, ed2p, eds, eds:K, "
                          "gflops, gflops_per_w, samples_per_j, accuracy, or a column name such as time_per_iteration_ms)");
  }
  return o;
}

std::vector<Objective> default_objectives() {
  std::vector<Objective> out;
  for (const char* n : {"energy", "time", "edp", "ed2p", "eds:1.5", "eds:2", "gflops_per_w", "samples_per_j", "accuracy"})
    out.push_back(parse_objective(n));
  return out;
}

std::string_view trial_status_name(TrialStatus s) {
  switch (s) {
    case TrialStatus::kOk: return "ok";
    case TrialStatus::kFailed: return "failed";
    case TrialStatus::kDoesNotFit: return "does_not_fit";
    case TrialStatus::kSkipped: return "skipped";
  }
  return "failed";
}

TrialStatus parse_trial_status(std::string_view s) {
  for (TrialStatus t : {TrialStatus::kOk, TrialStatus::kFailed, TrialStatus::kDoesNotFit, TrialStatus::kSkipped})
    if (trial_status_name(t) == s) return t;
  throw DataError("unknown trial status '" + std::string(s) + "' (expected ok, failed, does_not_fit or skipped)");
}

const Stats* TrialSummary::find(Metric m) const {
  auto it = metrics.find(m);
  return it == metrics.end() ? nullptr : &it->second;
}

Objective resolve_objective(Objective o, bool per_sample) {
  if (o.kind != Objective::Kind::kMetric || per_sample) return o;
  if (o.metric == Metric::kTimePerSample) o.metric = Metric::kTimePerIteration;
  if (o.metric == Metric::kEnergyPerSample) o.metric = Metric::kEnergyPerIteration;
  return o;
}

std::optional<double> objective_value(const TrialSummary& trial, const Objective& objective,
                                      const TrialSummary* reference, bool per_sample) {
  if (trial.status != TrialStatus::kOk) return std::nullopt;
  const Objective o = resolve_objective(objective, per_sample);
  if (o.kind == Objective::Kind::kMetric) {
    const Stats* s = trial.find(o.metric);
    return s ? std::optional<double>(s->median) : std::nullopt;
  }
  const auto in = eds_inputs(trial, reference, per_sample);
  return in ? std::optional<double>(eds(in->e->median, in->t->median, in->e_ref->median, in->t_ref->median, o.eds_k))
            : std::nullopt;
}

std::optional<EdsInputs> eds_inputs(const TrialSummary& trial, const TrialSummary* reference, bool per_sample) {
  const Metric tm = per_sample ? Metric::kTimePerSample : Metric::kTimePerIteration;
  const Metric em = per_sample ? Metric::kEnergyPerSample : Metric::kEnergyPerIteration;
  if (trial.status != TrialStatus::kOk || !reference || reference->status != TrialStatus::kOk) return std::nullopt;
  const EdsInputs in{trial.find(tm), trial.find(em), reference->find(tm), reference->find(em)};
  if (!in.t || !in.e || !in.t_ref || !in.e_ref || !(in.t_ref->median > 0) || !(in.e_ref->median > 0)) return std::nullopt;
  return in;
}

std::vector<std::size_t> pareto_front(const std::vector<std::pair<double, double>>& te) {
  std::vector<std::size_t> idx(te.size());
  std::iota(idx.begin(), idx.end(), std::size_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
    return te[a].first < te[b].first || (te[a].first == te[b].first && te[a].second < te[b].second);
  });
  std::vector<std::size_t> front;
  double best_energy = std::numeric_limits<double>::infinity();
  for (std::size_t i : idx) {
    if (!std::isfinite(te[i].first) || !std::isfinite(te[i].second)) continue;
    if (te[i].second < best_energy) {  // strictly less: slower-or-equal points need less energy to count
      front.push_back(i);
      best_energy = te[i].second;
    }
  }
  return front;
}

namespace {

// Best and second-best trial of one objective (by median value).
struct Ranking {
  std::optional<std::size_t> best, runner_up;
  double best_value = 0;
};

Ranking rank(const std::vector<TrialSummary>& trials, const Objective& o, const TrialSummary* ref, bool per_sample) {
  Ranking r;
  double second_value = 0;
  auto better = [&](double a, double b) { return o.maximise() ? a > b : a < b; };
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const auto v = objective_value(trials[i], o, ref, per_sample);
    if (!v || !std::isfinite(*v)) continue;
    if (!r.best || better(*v, r.best_value)) {
      r.runner_up = r.best;
      second_value = r.best_value;
      r.best = i;
      r.best_value = *v;
    } else if (!r.runner_up || better(*v, second_value)) {
      r.runner_up = i;
      second_value = *v;
    }
  }
  return r;
}

// Distinct, or not distinguishable from the default (checked first: "no better than leaving the
// setting alone" is what a user most needs to know) or from the runner-up.
Verdict judge(const std::vector<TrialSummary>& trials, const Objective& o, const TrialSummary* ref,
              std::optional<std::size_t> reference_index, bool per_sample, Optimum& opt) {
  const auto mine = objective_interval(trials[opt.trial], o, ref, per_sample);
  if (!mine) return Verdict::kNoInterval;
  opt.interval_low = mine->low;
  opt.interval_high = mine->high;
  if (reference_index && *reference_index != opt.trial)
    if (const auto r = objective_interval(trials[*reference_index], o, ref, per_sample); r && r->overlaps(*mine))
      return Verdict::kNotDistinguishableFromDefault;
  if (opt.runner_up)
    if (const auto r = objective_interval(trials[*opt.runner_up], o, ref, per_sample); r && r->overlaps(*mine))
      return Verdict::kNotDistinguishableFromRunnerUp;
  return Verdict::kDistinct;
}

}  // namespace

Analysis analyse(const std::vector<TrialSummary>& trials, const std::vector<Objective>& objectives) {
  Analysis a;
  bool any_ok = false, all_per_sample = true, any_energy = false;
  for (const auto& t : trials) {
    if (t.status != TrialStatus::kOk) continue;
    any_ok = true;
    // The basis depends on samples only: a trial without energy must not turn time per sample into
    // time per iteration behind the user's back.
    all_per_sample = all_per_sample && t.find(Metric::kTimePerSample);
    any_energy = any_energy || t.find(Metric::kEnergyPerIteration);
  }
  a.per_sample = any_ok && all_per_sample;
  a.energy_measured = any_energy;
  const Metric tm = a.time_metric(), em = a.energy_metric();
  for (std::size_t i = 0; i < trials.size(); ++i)
    if (trials[i].reference && trials[i].status == TrialStatus::kOk && trials[i].find(tm)) {
      a.reference = i;
      break;
    }
  const TrialSummary* ref = a.reference ? &trials[*a.reference] : nullptr;

  for (const Objective& raw : objectives) {
    const Objective o = resolve_objective(raw, a.per_sample);
    const Ranking r = rank(trials, o, ref, a.per_sample);
    if (!r.best) continue;
    Optimum opt;
    opt.objective = o;
    opt.trial = *r.best;
    opt.value = r.best_value;
    opt.runner_up = r.runner_up;
    const TrialSummary& t = trials[*r.best];
    if (const Stats* s = t.find(em)) opt.energy = s->median;
    if (const Stats* s = t.find(tm)) opt.time = s->median;
    if (const Stats* s = t.find(Metric::kAvgPower)) opt.avg_power_w = s->median;
    if (ref && t.find(tm)) opt.time_change_pct = (opt.time / ref->find(tm)->median - 1.0) * 100.0;
    if (ref && opt.energy && ref->find(em)) opt.energy_change_pct = (*opt.energy / ref->find(em)->median - 1.0) * 100.0;
    opt.verdict = judge(trials, o, ref, a.reference, a.per_sample, opt);
    a.optima.push_back(opt);
  }

  std::vector<std::pair<double, double>> te;
  std::vector<std::size_t> map;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const Stats *t = trials[i].find(tm), *e = trials[i].find(em);
    if (trials[i].status != TrialStatus::kOk || !t || !e) continue;
    te.emplace_back(t->median, e->median);
    map.push_back(i);
  }
  for (std::size_t j : pareto_front(te)) a.pareto.push_back(map[j]);
  return a;
}

}  // namespace cnnergy::tune
