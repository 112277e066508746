// Charts of a sweep: normalised energy/time with iso-metric lines, metric-vs-knob lines, phases, layers.
#include "report/report_charts.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "report/svg.hpp"

namespace cnnergy::report::detail {

using namespace cnnergy::tune;

namespace {

std::string k_text(double k) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%g", k);
  return buf;
}

std::string pct(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f %%", (v - 1) * 100);
  return buf;
}

const KnobValue* value_of(const TrialSummary& t, Knob k) {
  for (const auto& s : t.knobs)
    if (s.knob == k) return &s.value;
  return nullptr;
}

// Short legend text for a knob value: "300 W", "1005 MHz", "batch 64", "fp16", "SM clock default".
std::string value_label(Knob k, const KnobValue* v) {
  if (!v) return std::string(knob_name(k)) + " -";
  const auto unit = knob_unit(k);
  if (v->number) return unit.empty() ? std::string(knob_name(k)) + " " + v->text : v->text + " " + std::string(unit);
  if (v->is_default()) return std::string(knob_name(k)) + " default";
  return v->text;
}

}  // namespace

std::string normalised_chart(const SweepData& d, const std::vector<double>& eds_k, const std::string& id) {
  const TrialSummary* ref = d.reference();
  const Metric tm = d.analysis.time_metric(), em = d.analysis.energy_metric();
  if (!ref || !ref->find(em) || !ref->find(tm)) return "";  // no energy measured: no chart rather than an empty one
  const double t_ref = ref->find(tm)->median, e_ref = ref->find(em)->median;
  ChartSeries pts, front, reference;
  pts.name = "trials";
  pts.line = false;
  pts.color = "#56B4E9";
  double t_lo = 1, t_hi = 1;
  std::map<std::size_t, std::pair<double, double>> norm;
  for (std::size_t i = 0; i < d.summaries.size(); ++i) {
    const auto t = d.median(i, tm), e = d.median(i, em);
    if (d.summaries[i].status != TrialStatus::kOk || !t || !e) continue;
    const double x = *t / t_ref, y = *e / e_ref;
    norm[i] = {x, y};
    t_lo = std::min(t_lo, x);
    t_hi = std::max(t_hi, x);
    pts.x.push_back(x);
    pts.y.push_back(y);
    pts.tips.push_back(d.label(i) + "\ntime " + pct(x) + ", energy " + pct(y) + " vs default");
  }
  front.name = "Pareto front";
  front.color = "#D55E00";
  front.marker_radius = 5;
  for (std::size_t i : d.analysis.pareto) {
    front.x.push_back(norm.at(i).first);
    front.y.push_back(norm.at(i).second);
    front.tips.push_back("Pareto: " + d.label(i) + "\ntime " + pct(norm.at(i).first) + ", energy " + pct(norm.at(i).second));
  }
  reference.name = "default (reference)";
  reference.line = false;
  reference.color = "#000000";
  reference.marker_radius = 6;
  reference.x = {1.0};
  reference.y = {1.0};
  reference.tips = {"reference: " + d.label(*d.analysis.reference)};

  // Iso-lines through (1, 1) over the time range shown (they do not set the axes).
  const double span = std::max(t_hi - t_lo, 0.05);
  const double x0 = t_lo - 0.1 * span, x1 = t_hi + 0.1 * span;
  auto curve = [&](const std::string& name, const std::string& color, auto f) {
    ChartSeries s;
    s.name = name;
    s.color = color;
    s.markers = false;
    s.dashed = true;
    s.sets_range = false;
    s.line_width = 1.5;
    for (int k = 0; k <= 80; ++k) {
      const double x = x0 + (x1 - x0) * k / 80.0;
      s.x.push_back(x);
      s.y.push_back(f(x));
    }
    return s;
  };
  Chart chart(id, "Normalised energy vs normalised time (1 = the default setting)",
              ChartAxis{"time / time of the default", {}, {}, {}}, ChartAxis{"energy / energy of the default", {}, {}, {}});
  chart.set_size(820, 460);
  chart.add(curve("E = default", "#999999", [](double) { return 1.0; }));
  chart.add(curve("EDP = default", "#009E73", [](double x) { return x > 0 ? 1.0 / x : NAN; }));
  const char* colors[] = {"#CC79A7", "#E69F00", "#0072B2", "#999933"};
  for (std::size_t k = 0; k < eds_k.size(); ++k) {
    const double kk = eds_k[k];
    if (!(kk > 1)) continue;
    chart.add(curve("EDS(k=" + k_text(kk) + ") = default", colors[k % 4], [kk](double x) { return (kk - x) / (kk - 1); }));
  }
  chart.add(pts);
  if (!front.x.empty()) chart.add(front);
  chart.add(reference);
  std::map<std::size_t, std::string> tags;  // one label per point, listing every optimum it holds
  for (const Optimum& o : d.analysis.optima) {
    if (!norm.count(o.trial)) continue;
    const std::string tag = std::string(o.objective.maximise() ? "max " : "min ") +
                            (o.objective.kind == Objective::Kind::kEds ? o.objective.label() : std::string(metric_label(o.objective.metric)));
    tags[o.trial] += (tags[o.trial].empty() ? "" : ", ") + tag;
  }
  for (const auto& [i, text] : tags) chart.add_label(norm.at(i).first, norm.at(i).second, text.size() > 60 ? text.substr(0, 57) + "..." : text);
  return chart.svg();
}

std::vector<std::string> knob_charts(const SweepData& d, const std::string& id_prefix) {
  struct M {
    std::string title, unit;
    Metric metric;
    bool eds;
  };
  const bool ps = d.analysis.per_sample;
  std::vector<M> metrics = {{ps ? "time per sample" : "time per iteration", "ms", d.analysis.time_metric(), false},
                            {ps ? "energy per sample" : "energy per iteration", "J", d.analysis.energy_metric(), false},
                            {"average power", "W", Metric::kAvgPower, false},
                            {"EDP", "J*s", Metric::kEdp, false}};
  if (d.reference()) metrics.push_back({"EDS(k=2) vs default", "", Metric::kEdp, true});
  for (auto [m, title, unit] : {std::tuple{Metric::kGflopsPerWatt, "GFLOPS/W", "GFLOP/J"},
                                std::tuple{Metric::kSamplesPerJoule, "samples per joule", "1/J"},
                                std::tuple{Metric::kAccuracy, "accuracy", ""}}) {
    bool any = false;
    for (std::size_t i = 0; i < d.summaries.size(); ++i) any = any || d.median(i, m).has_value();
    if (any) metrics.push_back({title, unit, m, false});
  }
  const Objective eds2 = parse_objective("eds:2");
  // A metric no trial has (energy without a meter) gets no chart, rather than an empty one.
  std::erase_if(metrics, [&](const M& m) {
    for (std::size_t i = 0; i < d.summaries.size(); ++i)
      if (m.eds ? objective_value(d.summaries[i], eds2, d.reference(), ps).has_value() : d.median(i, m.metric).has_value())
        return false;
    return true;
  });
  std::vector<std::string> out;
  for (Knob k : d.knobs) {
    // x: numbers when every value is numeric, else categories ("default" first, then numeric, then text)
    bool numeric = true;
    std::vector<std::string> cats;
    for (const auto& t : d.summaries) {
      const KnobValue* v = value_of(t, k);
      if (!v) continue;
      numeric = numeric && v->number.has_value();
      if (std::find(cats.begin(), cats.end(), v->text) == cats.end()) cats.push_back(v->text);
    }
    if (!numeric)
      std::stable_sort(cats.begin(), cats.end(), [&](const std::string& a, const std::string& b) {
        auto rank = [](const std::string& s) { return s == "default" ? 0 : (!s.empty() && std::isdigit(static_cast<unsigned char>(s[0]))) ? 1 : 2; };
        if (rank(a) != rank(b)) return rank(a) < rank(b);
        if (rank(a) == 1) return std::stoll(a) < std::stoll(b);
        return false;
      });
    // series: the other varying knobs' values
    std::map<std::string, std::vector<std::size_t>> groups;
    std::vector<std::string> group_order;
    for (std::size_t i = 0; i < d.summaries.size(); ++i) {
      if (d.summaries[i].status != TrialStatus::kOk || !value_of(d.summaries[i], k)) continue;
      std::string g;
      for (Knob other : d.knobs) {
        if (other == k) continue;
        const KnobValue* v = value_of(d.summaries[i], other);
        g += (g.empty() ? "" : ", ") + value_label(other, v);
      }
      if (!groups.count(g)) group_order.push_back(g);
      groups[g].push_back(i);
    }
    constexpr std::size_t kMaxSeries = 8;
    for (std::size_t mi = 0; mi < metrics.size(); ++mi) {
      const M& m = metrics[mi];
      const std::string unit = m.unit.empty() ? "" : " [" + m.unit + "]";
      const std::string knob_axis = std::string(knob_name(k));
      Chart chart(id_prefix + "-" + std::string(knob_name(k)) + "-" + std::to_string(mi), m.title + " vs " + knob_axis,
                  ChartAxis{knob_axis, {}, {}, numeric ? std::vector<std::string>{} : cats}, ChartAxis{m.title + unit, {}, {}, {}});
      std::size_t shown = 0;
      for (const auto& g : group_order) {
        if (shown++ == kMaxSeries) break;
        std::vector<std::size_t> idx = groups[g];
        auto xval = [&](std::size_t i) {
          const KnobValue* v = value_of(d.summaries[i], k);
          return numeric ? static_cast<double>(*v->number)
                         : static_cast<double>(std::find(cats.begin(), cats.end(), v->text) - cats.begin());
        };
        std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return xval(a) < xval(b); });
        ChartSeries s;
        s.name = g.empty() ? m.title : g;
        s.in_legend = !g.empty();
        for (std::size_t i : idx) {
          std::optional<double> y;
          double lo = NAN, hi = NAN;
          if (m.eds) {
            y = objective_value(d.summaries[i], eds2, d.reference(), ps);
          } else if (const Stats* st = d.summaries[i].find(m.metric)) {
            y = st->median;
            lo = st->min;
            hi = st->max;
          }
          if (!y) continue;
          s.x.push_back(xval(i));
          s.y.push_back(*y);
          s.y_low.push_back(lo);
          s.y_high.push_back(hi);
          s.tips.push_back(d.label(i) + "\n" + m.title + ": " + format_quantity(*y, m.unit) +
                           (std::isfinite(lo) ? " (min " + format_quantity(lo, m.unit) + ", max " + format_quantity(hi, m.unit) + ")" : ""));
        }
        if (!s.x.empty()) chart.add(std::move(s));
      }
      std::string fig = "<figure>" + chart.svg();
      if (group_order.size() > kMaxSeries)
        fig += "<figcaption class=\"note\">" + std::to_string(group_order.size() - kMaxSeries) +
               " more combinations of the other knobs are in the trial table and the exports.</figcaption>";
      out.push_back(fig + "</figure>\n");
    }
  }
  return out;
}

std::string phase_charts(const SweepData& d, const std::string& id_prefix) {
  if (d.phases.empty()) return "";
  std::vector<std::string> names, cats;
  for (const auto& [i, ph] : d.phases)
    for (const auto& p : ph)
      if (std::find(names.begin(), names.end(), p.phase) == names.end()) names.push_back(p.phase);
  std::vector<BarStack> energy(names.size()), time(names.size());
  for (std::size_t k = 0; k < names.size(); ++k) energy[k].name = time[k].name = names[k];
  for (const auto& [i, ph] : d.phases) {
    cats.push_back(d.label(i));
    for (std::size_t k = 0; k < names.size(); ++k) {
      double e = 0, t = 0;
      for (const auto& p : ph)
        if (p.phase == names[k]) {
          e = p.energy_mj * 1e-3;
          t = p.time_ms;
        }
      energy[k].values.push_back(e);
      time[k].values.push_back(t);
      energy[k].tips.push_back(cats.back() + "\n" + names[k] + ": " + format_quantity(e, "J"));
      time[k].tips.push_back(cats.back() + "\n" + names[k] + ": " + format_quantity(t, "ms"));
    }
  }
  return stacked_bars_svg(id_prefix + "-phase-energy", "Energy per iteration by phase", cats, energy, "energy per iteration [J]", false) +
         stacked_bars_svg(id_prefix + "-phase-time", "Time per iteration by phase", cats, time, "time per iteration [ms]", false);
}

std::string layer_charts(const SweepData& d, const std::string& id_prefix) {
  if (d.layers.empty()) return "";
  std::size_t which = d.layers.begin()->first;
  if (d.analysis.reference && d.layers.count(*d.analysis.reference)) which = *d.analysis.reference;
  std::vector<LayerMeasurement> layers = d.layers.at(which);
  constexpr std::size_t kMaxLayers = 40;  // the hotspots; the exports have every layer
  std::stable_sort(layers.begin(), layers.end(), [](const LayerMeasurement& a, const LayerMeasurement& b) {
    return a.forward_ms + a.backward_ms > b.forward_ms + b.backward_ms;
  });
  const std::size_t total = layers.size();
  if (layers.size() > kMaxLayers) layers.resize(kMaxLayers);
  std::vector<std::string> cats;
  BarStack fwd{"forward", {}, {}}, bwd{"backward", {}, {}}, energy{"energy", {}, {}};
  bool has_energy = false;
  for (const auto& l : layers) {
    cats.push_back(l.name + " (" + l.type + ")");
    fwd.values.push_back(l.forward_ms);
    bwd.values.push_back(l.backward_ms);
    fwd.tips.push_back(cats.back() + "\nforward " + format_quantity(l.forward_ms, "ms"));
    bwd.tips.push_back(cats.back() + "\nbackward " + format_quantity(l.backward_ms, "ms"));
    energy.values.push_back(l.energy_mj.value_or(0) * 1e-3);
    energy.tips.push_back(cats.back() + "\nenergy " + format_optional(l.energy_mj ? std::optional<double>(*l.energy_mj * 1e-3) : std::nullopt, "J"));
    has_energy = has_energy || l.energy_mj.has_value();
  }
  const std::string of = " of " + d.label(which) + (total > kMaxLayers ? " (" + std::to_string(kMaxLayers) + " slowest of " + std::to_string(total) + " layers)" : "");
  std::string out = stacked_bars_svg(id_prefix + "-layer-time", "Per-layer time per iteration" + of, cats, {fwd, bwd}, "time [ms]", true);
  if (has_energy) out += stacked_bars_svg(id_prefix + "-layer-energy", "Per-layer energy per iteration" + of, cats, {energy}, "energy [J]", true);
  return out;
}

}  // namespace cnnergy::report::detail
