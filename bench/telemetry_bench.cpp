// Telemetry benchmark (issue: telemetry), read-only on the GPU:
// 1. monitor overhead: training throughput of a model with no sampler, then with the sampler at the
//    sensor's period and at a fast interval (target: < 0.5 % slowdown);
// 2. energy counter vs integrated instant power over long windows (target: within 2 %);
// 3. the per-trial telemetry statistics (telemetry/trial_stats.hpp) as `sweep` keeps them: the sampler
//    with PCIe/NVLink reads and a recorder window open, paired against the sampler alone (target:
//    < 0.5 % of throughput).
// Prints a table and writes JSON (--out).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "backend/ops.hpp"
#include "cli/args.hpp"
#include "core/errors.hpp"
#include "core/rng.hpp"
#include "measure/statistics.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"
#include "net/solver.hpp"
#include "net/zoo/zoo.hpp"
#include "telemetry/energy_meter.hpp"
#include "core/json.hpp"
#include "telemetry/nvml.hpp"
#include "telemetry/sampler.hpp"
#include "telemetry/trial_stats.hpp"
#include "train/fixed_batch.hpp"
#include "train/precision.hpp"
#include "train/run_config.hpp"

using namespace cnnergy;

namespace {
using Clock = std::chrono::steady_clock;

struct GpuWorkload {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Graph> graph;
  std::unique_ptr<FixedBatchWorkload> work;
  void step() { work->step(); }
};

GpuWorkload make_workload(const std::string& model, std::int64_t batch, const std::string& precision) {
  GpuWorkload w;
  // The product's settings at this precision (the layout as bench_train_throughput's auto picks it).
  RunConfig run = RunConfig::from_knobs({{"precision", precision}}, RunConfig{});
  run.device = parse_device("cuda");
  run.layout = precision == "bf16" ? Layout::kNHWC : Layout::kNCHW;
  w.backend = create_backend(run.backend_options());
  w.graph = build_model(model);
  w.work = std::make_unique<FixedBatchWorkload>(*w.graph, *w.backend, batch);
  return w;
}

// Iterations per second over `seconds`.
double throughput(GpuWorkload& w, double seconds) {
  w.backend->synchronize();
  const auto t0 = Clock::now();
  std::int64_t n = 0;
  while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds) {
    for (int i = 0; i < 5; ++i) w.step();
    n += 5;
    w.backend->synchronize();
  }
  return static_cast<double>(n) / std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

int main(int argc, char** argv) {
  try {
    cli::ArgParser p("bench-telemetry", "Monitor overhead and energy-counter accuracy on a busy GPU (read-only).");
    p.option("model", "workload model", "resnet50");
    p.option("batch", "batch size", "128");
    p.option("precision", "precision", "bf16");
    p.option("seconds", "length of each overhead run", "8");
    p.option("rounds", "alternating rounds of (no sampler, sampler)", "3");
    p.option("windows", "long windows for counter vs integrated power", "3");
    p.option("window-s", "length of each accuracy window", "10");
    p.option("out", "JSON output", "telemetry_bench.json");
    p.option("stats", "also measure the per-trial statistics' overhead (sampler + links + recorder)", "on", {"on", "off"});
    if (!p.parse(std::vector<std::string>(argv + 1, argv + argc))) return 0;
    auto opened = telemetry::Nvml::open();
    if (!opened.nvml) throw NotSupported("no NVML: " + opened.unavailable_reason);
    GpuWorkload w = make_workload(p.get("model"), p.get_int("batch", 1, 4096), p.get("precision"));
    const double secs = p.get_double("seconds", 0.5, 600);
    const int rounds = static_cast<int>(p.get_int("rounds", 1, 100));
    for (int i = 0; i < 10; ++i) w.step();
    throughput(w, 2.0);  // warm up clocks and algorithms

    const bool stats = p.get("stats") == "on";
    std::vector<double> base, with_default, with_fast, with_stats;
    double sensor_ms = 0;
    for (int r = 0; r < rounds; ++r) {
      base.push_back(throughput(w, secs));
      {
        telemetry::SamplerOptions so;
        so.gpus = {0};
        auto s = std::make_shared<telemetry::Sampler>(opened.nvml, nullptr, so);
        sensor_ms = s->sensor_period_ms();
        with_default.push_back(throughput(w, secs));
      }
      {
        telemetry::SamplerOptions so;
        so.gpus = {0};
        so.interval_ms = 10;
        auto s = std::make_shared<telemetry::Sampler>(opened.nvml, nullptr, so);
        with_fast.push_back(throughput(w, secs));
      }
      if (stats) {  // as `sweep` runs it: links read every 5th round, one statistics window open
        telemetry::SamplerOptions so;
        so.gpus = {0};
        so.read_links = true;
        auto s = std::make_shared<telemetry::Sampler>(opened.nvml, nullptr, so);
        telemetry::TelemetryRecorder rec(s, std::make_shared<telemetry::RaplMeter>());
        rec.begin();
        with_stats.push_back(throughput(w, secs));
        rec.end();
      }
    }
    // Paired per round (base and sampled runs back to back), so slow drifts of the GPU clock under its
    // power cap cancel; the median over rounds is the estimate, the spread says how far to trust it.
    std::vector<double> paired_default, paired_fast;
    for (std::size_t r = 0; r < base.size(); ++r) {
      paired_default.push_back(1.0 - with_default[r] / base[r]);
      paired_fast.push_back(1.0 - with_fast[r] / base[r]);
    }
    const double b = summarize(base).median;
    const Summary sd = summarize(paired_default), sf = summarize(paired_fast);
    const double slow_default = sd.median;
    const double slow_fast = sf.median;
    // The statistics against the sampler alone (same round), and against no sampler at all.
    std::vector<double> paired_stats, paired_stats_base;
    for (std::size_t r = 0; r < with_stats.size(); ++r) {
      paired_stats.push_back(1.0 - with_stats[r] / with_default[r]);
      paired_stats_base.push_back(1.0 - with_stats[r] / base[r]);
    }

    // Counter vs integrated instant power over long windows, sampler at 10 ms.
    telemetry::SamplerOptions so;
    so.gpus = {0};
    so.interval_ms = 10;
    auto sampler = std::make_shared<telemetry::Sampler>(opened.nvml, nullptr, so);
    Json windows = Json::array();
    std::vector<double> rel;
    const int nwin = static_cast<int>(p.get_int("windows", 1, 100));
    const double wsec = p.get_double("window-s", 1, 3600);
    for (int i = 0; i < nwin; ++i) {
      w.backend->synchronize();
      const std::int64_t t0 = telemetry::steady_now_ns();
      throughput(w, wsec);
      const std::int64_t t1 = telemetry::steady_now_ns();
      std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(3 * sensor_ms + 100)));
      const auto c0 = sampler->counter_energy_at(0, t0), c1 = sampler->counter_energy_at(0, t1);
      const auto i0 = sampler->integrated_energy_at(0, t0), i1 = sampler->integrated_energy_at(0, t1);
      if (!c0 || !c1 || !i0 || !i1) continue;
      const double counter_j = (c1->energy_mj - c0->energy_mj) / 1e3, integ_j = (i1->energy_mj - i0->energy_mj) / 1e3;
      rel.push_back(integ_j / counter_j - 1.0);
      Json j = Json::object();
      j["seconds"] = static_cast<double>(t1 - t0) / 1e9;
      j["counter_j"] = counter_j;
      j["integrated_instant_power_j"] = integ_j;
      j["relative_difference"] = rel.back();
      windows.push_back(j);
    }
    const auto st = sampler->stats();
    Json out = Json::object();
    out["gpu"] = opened.nvml->device(0).name();
    out["workload"] = p.get("model") + " batch " + p.get("batch") + " " + p.get("precision");
    out["sensor_period_ms"] = sensor_ms;
    out["iterations_per_s_no_sampler"] = b;
    out["slowdown_sampler_at_sensor_period"] = slow_default;
    out["slowdown_sampler_at_10ms"] = slow_fast;
    out["slowdown_sampler_at_sensor_period_min_max"] = Json::array();
    out["slowdown_sampler_at_sensor_period_min_max"].push_back(sd.min);
    out["slowdown_sampler_at_sensor_period_min_max"].push_back(sd.max);
    out["rounds"] = static_cast<double>(base.size());
    out["no_sampler_throughput_cv"] = summarize(base).cv();
    out["counter_read_mean_ms"] = st.counter_read_mean_ms;
    out["power_read_mean_us"] = st.power_read_mean_us;
    out["accuracy_windows"] = windows;
    if (!paired_stats.empty()) {
      const Summary ss = summarize(paired_stats), sb = summarize(paired_stats_base);
      out["slowdown_stats_vs_sampler"] = ss.median;
      out["slowdown_stats_vs_sampler_min_max"] = Json::array();
      out["slowdown_stats_vs_sampler_min_max"].push_back(ss.min);
      out["slowdown_stats_vs_sampler_min_max"].push_back(ss.max);
      out["slowdown_stats_vs_no_sampler"] = sb.median;
    }
    std::ofstream(p.get("out")) << out.dump(1) << "\n";
    std::printf("telemetry on %s, workload %s\n", opened.nvml->device(0).name().c_str(), out["workload"].str().c_str());
    std::printf("  sensor period %.1f ms; counter read %.2f ms, power read %.1f us\n", sensor_ms, st.counter_read_mean_ms,
                st.power_read_mean_us);
    std::printf("  throughput without sampler %.3f it/s (CV %.2f %% over %zu rounds)\n", b, summarize(base).cv() * 100,
                base.size());
    std::printf("  slowdown with the sampler at the sensor period: median %+.3f %% (paired rounds, range %+.3f..%+.3f %%);"
                " at 10 ms: %+.3f %%\n", slow_default * 100, sd.min * 100, sd.max * 100, slow_fast * 100);
    if (!paired_stats.empty())
      std::printf("  slowdown of the per-trial statistics (links + recorder) against the sampler alone: median %+.3f %%"
                  " (paired rounds, range %+.3f..%+.3f %%); against no sampler: %+.3f %%\n",
                  summarize(paired_stats).median * 100, summarize(paired_stats).min * 100,
                  summarize(paired_stats).max * 100, summarize(paired_stats_base).median * 100);
    for (double r : rel) std::printf("  window: integrated instant power vs energy counter %+.3f %%\n", r * 100);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench-telemetry: error: %s\n", e.what());
    return e.exit_code();
  }
}
