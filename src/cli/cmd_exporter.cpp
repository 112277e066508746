// `cnnergy exporter`: the long-running node exporter a site's Prometheus scrapes (the package runs it
// as the cnnergy-exporter systemd unit): every GPU's energy counter, power, clocks, utilisation,
// temperature and throttle reasons as OpenMetrics, labelled with the Slurm job holding each GPU.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "cli/args.hpp"
#include "cli/telemetry_commands.hpp"
#include "cli/vocabulary.hpp"
#include "core/json.hpp"
#include "core/errors.hpp"
#include "exporter/job_map.hpp"
#include "exporter/metrics_server.hpp"
#include "exporter/openmetrics.hpp"
#include "telemetry/sampler.hpp"
#include "telemetry/signals.hpp"

namespace cnnergy::cli {

int run_exporter(const std::vector<std::string>& args) {
  ArgParser p("exporter",
              "Serve every GPU's telemetry to Prometheus until SIGTERM/SIGINT: energy counter (J, a _total "
              "counter), power (W), SM and memory clocks (Hz), utilisation, temperature, throttle reasons; "
              "labels gpu, uuid, model and, while a Slurm job holds the GPU, slurm_job_id.");
  p.option("port", "TCP port of http://ADDRESS:PORT/metrics (0: a free one, printed)", "9401");
  p.option("bind-address", "IPv4 address to listen on; open it wider (e.g. 0.0.0.0) only for the site's Prometheus",
           "127.0.0.1");
  p.option("interval-ms", "sampling interval, in ms", "1000");
  p.option("gpu", "GPU indices to export, e.g. 0,1 [default: all]");
  p.option("job-map-dir", "folder a Slurm prolog fills with one file per GPU index holding the job id "
                          "(packaging/slurm/cnnergy-prolog.sh); its GPUs' series get slurm_job_id=\"...\"");
  declare_output_flags(p, "the summary printed when it stops: address, GPUs, samples taken, scrapes served");
  p.epilog("Runs in the foreground (systemd: cnnergy-exporter.service). Exit 0 on SIGTERM/SIGINT; a port in use\n"
           "exits 2 naming it; no NVML (no driver) exits with the reason. Scrape config: docs/cluster.md.");
  if (!p.parse(args)) return 0;
  OutputSink sink(p);
  const unsigned port = static_cast<unsigned>(p.get_int("port", 0, 65535));
  telemetry::SamplerOptions so;
  so.interval_ms = p.get_double("interval-ms", 10, 600000);
  if (auto g = p.get_optional("gpu"))
    for (const auto& item : split_list(*g, "GPU")) {
      if (item.empty() || item.size() > 4 || item.find_first_not_of("0123456789") != std::string::npos)
        throw InvalidArgument("--gpu: '" + item + "' is not a GPU index");
      so.gpus.push_back(static_cast<unsigned>(std::stoul(item)));
    }

  auto opened = telemetry::Nvml::open();
  if (!opened.nvml) throw NotSupported("cnnergy exporter has no GPU to export: " + opened.unavailable_reason);
  if (opened.nvml->device_count() == 0) throw NotSupported("cnnergy exporter: NVML sees no GPU on this node");

  std::mutex mutex;
  std::condition_variable cv;
  int stop_signal = 0;
  telemetry::SignalWatcher watcher([&](int signo, bool) {
    std::lock_guard<std::mutex> lock(mutex);
    stop_signal = signo;
    cv.notify_all();
  });

  auto sampler = std::make_shared<telemetry::Sampler>(opened.nvml, nullptr, so);
  exporter::MetricsState state(exporter::gpu_labels(*sampler));
  if (auto dir = p.get_optional("job-map-dir")) state.set_job_source([d = *dir] { return exporter::read_job_map(d); });
  if (auto latest = sampler->latest()) state.on_sample(*latest);
  std::atomic<std::uint64_t> samples{0}, scrapes{0};
  const int listener = sampler->add_listener([&state, &samples](const telemetry::Sample& s) {
    state.on_sample(s);
    ++samples;
  });
  const auto started = std::chrono::steady_clock::now();
  std::string url;
  {
    exporter::MetricsServer server(port, [&state, &scrapes] {
      ++scrapes;
      return state.render();
    }, p.get("bind-address"));
    url = server.url();
    std::fprintf(stderr, "cnnergy exporter: serving %zu GPU(s) at %s (every %.0f ms)\n",
                 sampler->gpu_indices().size(), server.url().c_str(), *so.interval_ms);
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return stop_signal != 0; });
    std::fprintf(stderr, "cnnergy exporter: stopping (signal %d)\n", stop_signal);
  }
  sampler->remove_listener(listener);
  sampler->stop();
  const double uptime_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("cnnergy exporter: served %llu scrape(s) of %zu GPU(s) at %s for %.1f s (%llu samples)\n",
              static_cast<unsigned long long>(scrapes.load()), sampler->gpu_indices().size(), url.c_str(), uptime_s,
              static_cast<unsigned long long>(samples.load()));
  Json doc = Json::object();
  doc["url"] = url;
  doc["uptime_s"] = uptime_s;
  doc["samples"] = static_cast<double>(samples.load());
  doc["scrapes"] = static_cast<double>(scrapes.load());
  doc["stopped_by_signal"] = stop_signal;
  Json gpus = Json::array();
  for (const auto& g : exporter::gpu_labels(*sampler)) {
    Json x = Json::object();
    x["gpu"] = g.index;
    x["uuid"] = g.uuid;
    x["model"] = g.name;
    gpus.push_back(x);
  }
  doc["gpus"] = gpus;
  sink.finish(doc, "gpus");
  return 0;
}

}  // namespace cnnergy::cli
