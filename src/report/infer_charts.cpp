// The charts of an inference sweep (`sweep --mode infer`) for the HTML report: p50/p99 latency against
// throughput (the serving trade-off: larger batches, more images per second, longer requests) and
// energy per image against the batch size, one series per combination of the other knobs.
#include <algorithm>
#include <map>

#include "report/report_charts.hpp"
#include "report/svg.hpp"
#include "tune/infer_latency.hpp"

namespace cnnergy::report::detail {

using namespace cnnergy::tune;

std::string infer_charts(const ResultStore& store, const SweepData& d, const std::string& id_prefix) {
  struct Point {
    double batch, images_per_s, p50_ms, p99_ms;
    std::optional<double> mj_per_image;
    std::string key;
  };
  std::map<std::string, std::vector<Point>> series;  // by the knobs other than the batch
  for (std::size_t i = 0; i < d.trials.size(); ++i) {
    const TrialSummary& s = d.summaries[i];
    if (s.status != TrialStatus::kOk) continue;
    const auto l = infer_latency_of(store.trial_telemetry_json(d.trials[i].id));
    const Stats* t = s.find(Metric::kTimePerSample);
    if (!l || !t || t->median <= 0) continue;
    std::string group;
    for (const auto& k : s.knobs)
      if (k.knob != Knob::kBatch && std::find(d.knobs.begin(), d.knobs.end(), k.knob) != d.knobs.end())
        group += (group.empty() ? "" : " ") + std::string(knob_name(k.knob)) + "=" + k.value.text;
    const Stats* e = s.find(Metric::kEnergyPerSample);
    series[group.empty() ? "all" : group].push_back(
        {static_cast<double>(l->batch), 1000.0 / t->median, l->p50_ms, l->p99_ms,
         e ? std::optional<double>(e->median * 1e3) : std::nullopt, s.key});
  }
  if (series.empty()) return "";
  Chart lat(id_prefix + "-latency", "Request latency against throughput (p99 solid, p50 dashed)",
            ChartAxis{"throughput [images/s]", 0.0, std::nullopt, {}}, ChartAxis{"latency [ms]", 0.0, std::nullopt, {}});
  Chart energy(id_prefix + "-energy-batch", "Energy per image against batch size",
               ChartAxis{"batch size", std::nullopt, std::nullopt, {}}, ChartAxis{"energy per image [mJ]", 0.0, std::nullopt, {}});
  std::size_t color = 0;
  bool any_energy = false;
  for (auto& [name, points] : series) {
    std::sort(points.begin(), points.end(), [](const Point& a, const Point& b) { return a.batch < b.batch; });
    ChartSeries p99, p50, ej;
    p99.name = ej.name = name;
    p50.name = name + " p50";
    p99.color = p50.color = ej.color = palette_color(color++);
    p50.dashed = true;
    p50.in_legend = false;
    for (const Point& p : points) {
      const std::string tip = p.key + ": batch " + format_tick(p.batch, 1) + ", " + format_tick(p.images_per_s, 0.1) +
                              " img/s, p50 " + format_tick(p.p50_ms, 0.001) + " ms, p99 " + format_tick(p.p99_ms, 0.001) + " ms";
      p99.x.push_back(p.images_per_s);
      p99.y.push_back(p.p99_ms);
      p99.tips.push_back(tip);
      p50.x.push_back(p.images_per_s);
      p50.y.push_back(p.p50_ms);
      p50.tips.push_back(tip);
      if (p.mj_per_image) {
        ej.x.push_back(p.batch);
        ej.y.push_back(*p.mj_per_image);
        ej.tips.push_back(p.key + ": " + format_tick(*p.mj_per_image, 0.001) + " mJ/image");
        any_energy = true;
      }
    }
    lat.add(std::move(p99));
    lat.add(std::move(p50));
    if (!ej.x.empty()) energy.add(std::move(ej));
  }
  return lat.svg() + (any_energy ? energy.svg() : std::string());
}

}  // namespace cnnergy::report::detail
