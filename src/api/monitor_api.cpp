// The C API's monitor and windows (include/cnnergy/cnnergy.h): a sampler and an energy meter per
// monitor, windows kept by name. begin/end only take the monitor's mutex and stamp the time; the
// energy at the edges is resolved on the sampler's thread (EnergyMeter, cpu_from_samples).
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/api_guard.hpp"
#include "exporter/monitor_exporter.hpp"
#include "telemetry/energy_meter.hpp"
#include "telemetry/nvml.hpp"
#include "telemetry/rapl.hpp"
#include "telemetry/sampler.hpp"
#include "telemetry/settle.hpp"

using namespace cnnergy;
using namespace cnnergy::telemetry;

struct cnnergy_monitor {
  mutable std::mutex mutex;  // const readers (the settle check) lock it too
  std::shared_ptr<Nvml> nvml;
  std::shared_ptr<RaplMeter> rapl;  // null when not asked for or not readable
  SamplerOptions sampler_options;
  std::vector<cnnergy_gpu_info> gpus;
  std::shared_ptr<Sampler> sampler;
  std::unique_ptr<EnergyMeter> meter;
  bool running = false;
  std::uint64_t generation = 0;  // of the meter: ids of an earlier meter are refused
  std::map<std::string, EnergyMeter::WindowId> open;  // window name -> meter id
  double sensor_period_ms = 0, interval_ms = 0;
  std::int64_t started_ns = 0;  // steady clock at the last start: no window may begin before it
  // Exporting (cnnergy_monitor_export): ended windows are collected on the sampler thread as soon
  // as they are covered, exported, and kept in `done` until the caller reads them.
  std::unique_ptr<cnnergy::exporter::MonitorExporter> exporter;
  int export_listener = 0;
  std::set<EnergyMeter::WindowId> pending;
  std::map<EnergyMeter::WindowId, Measurement> done;
  std::condition_variable done_cv;
};

namespace cnnergy::api {

std::string& last_error() {
  thread_local std::string message;
  return message;
}

namespace {

constexpr int kIdBits = 40;  // low bits: the meter's window id; high bits: the meter's generation
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

cnnergy_status bad(const std::string& message) {
  return set_error(CNNERGY_ERROR_INVALID_ARGUMENT, message);
}

// Runs on the sampler thread after the meter's own listener: collects covered windows. Never
// waits for the monitor's lock (stop() holds it while joining this thread): busy -> next sample.
void collect_covered(cnnergy_monitor& m) {
  std::unique_lock<std::mutex> lock(m.mutex, std::try_to_lock);
  if (!lock.owns_lock() || !m.meter) return;
  bool any = false;
  for (auto it = m.pending.begin(); it != m.pending.end();) {
    auto r = m.meter->try_result(*it);
    if (!r) {
      ++it;
      continue;
    }
    m.exporter->on_window(*r);
    m.done.emplace(*it, std::move(*r));
    it = m.pending.erase(it);
    any = true;
  }
  if (any) m.done_cv.notify_all();
}

void attach_export(cnnergy_monitor& m) {
  if (!m.exporter || !m.sampler) return;
  m.exporter->attach(m.sampler);
  cnnergy_monitor* self = &m;
  m.export_listener = m.sampler->add_listener([self](const Sample&) { collect_covered(*self); });
}

void detach_export(cnnergy_monitor& m) {
  if (m.export_listener && m.sampler) m.sampler->remove_listener(m.export_listener);
  m.export_listener = 0;
  if (m.exporter) m.exporter->detach();
}

void start_locked(cnnergy_monitor& m) {
  if (m.running) return;
  if (m.meter && (m.meter->open_windows() > 0 || !m.done.empty()))
    throw InvalidArgument("cannot restart the monitor while windows of the last run are not "
                          "collected (read or discard them first)");
  detach_export(m);
  m.meter.reset();
  m.sampler = std::make_shared<Sampler>(m.nvml, m.rapl, m.sampler_options);
  m.meter = std::make_unique<EnergyMeter>(m.sampler, /*cpu_from_samples=*/true);
  m.open.clear();
  m.done.clear();
  m.pending.clear();
  ++m.generation;
  m.running = true;
  attach_export(m);
  m.started_ns = steady_now_ns();
  m.sensor_period_ms = m.sampler->sensor_period_ms();
  m.interval_ms = m.sampler->interval_ms();
}

double j(const std::optional<double>& mj) { return mj ? *mj / 1000.0 : kNaN; }

void fill(const Measurement& in, cnnergy_measurement& out) {
  std::memset(&out, 0, sizeof out);
  out.struct_size = sizeof out;
  std::snprintf(out.name, sizeof out.name, "%s", in.label.c_str());
  out.time_s = in.elapsed_ms / 1000.0;
  out.begin_s = static_cast<double>(in.begin_ns) / 1e9;
  out.end_s = static_cast<double>(in.end_ns) / 1e9;
  out.energy_j = j(in.gpu_energy_mj());
  out.uncertainty_j = j(in.gpu_uncertainty_mj());
  out.avg_power_w = out.time_s > 0 ? out.energy_j / out.time_s : kNaN;
  out.cpu_energy_j = j(in.cpu_energy_mj);
  out.below_sensor_period = in.short_window ? 1 : 0;
  out.sensor_period_ms = in.sensor_period_ms;
  out.gpu_count = std::min<std::size_t>(in.gpus.size(), CNNERGY_MAX_GPUS);
  double peak = 0;
  bool peak_known = !in.gpus.empty();
  int weakest = in.gpus.empty() ? 0 : 3;  // rank: none 0 < integrated 1 < counter 2
  for (std::size_t i = 0; i < out.gpu_count; ++i) {
    const GpuEnergy& g = in.gpus[i];
    cnnergy_gpu_energy& o = out.gpus[i];
    o.gpu_index = g.index;
    o.source = g.source == EnergySource::kCounter           ? CNNERGY_SOURCE_COUNTER
               : g.source == EnergySource::kIntegratedPower ? CNNERGY_SOURCE_INTEGRATED_POWER
                                                            : CNNERGY_SOURCE_NONE;
    o.energy_j = j(g.energy_mj);
    o.uncertainty_j = j(g.uncertainty_mj);
    o.avg_power_w = j(g.average_power_mw);
    o.peak_power_w = j(g.peak_power_mw);
    o.samples = g.samples;
    if (g.peak_power_mw)
      peak += *g.peak_power_mw / 1000.0;
    else
      peak_known = false;
    const int rank = o.source == CNNERGY_SOURCE_COUNTER            ? 2
                     : o.source == CNNERGY_SOURCE_INTEGRATED_POWER ? 1
                                                                   : 0;
    weakest = std::min(weakest, rank);
  }
  out.peak_power_w = peak_known ? peak : kNaN;
  out.source = weakest == 2   ? CNNERGY_SOURCE_COUNTER
               : weakest == 1 ? CNNERGY_SOURCE_INTEGRATED_POWER
                              : CNNERGY_SOURCE_NONE;
}

// The meter and its window id for an API id, or InvalidArgument.
EnergyMeter::WindowId meter_id(const cnnergy_monitor& m, cnnergy_window_id id) {
  if ((id >> kIdBits) != m.generation || !m.meter)
    throw InvalidArgument("window " + std::to_string(id) +
                          " belongs to no window of this monitor (already read or discarded?)");
  return id & ((std::uint64_t{1} << kIdBits) - 1);
}

// cnnergy_window_result for an exporting monitor: the sampler thread collects windows, so wait for
// this one in `done` (the meter must not be waited on: the collector erases windows from it).
cnnergy_status result_exported(cnnergy_monitor& m, std::unique_lock<std::mutex>& lock,
                               EnergyMeter::WindowId wid, double timeout_ms,
                               cnnergy_measurement& out) {
  const double slack_ms = 3.0 * (m.interval_ms + m.sensor_period_ms) + 1000.0;
  const double wait_ms = timeout_ms < 0 ? slack_ms : timeout_ms;
  m.done_cv.wait_for(lock, std::chrono::microseconds(static_cast<long long>(wait_ms * 1000)),
                     [&] { return m.done.count(wid) > 0 || !m.pending.count(wid); });
  auto it = m.done.find(wid);
  if (it == m.done.end()) {
    if (!m.pending.count(wid))
      throw InvalidArgument("energy window " + std::to_string(wid) + " is not open");
    if (timeout_ms == 0)
      return set_error(CNNERGY_NOT_READY, "the sampler has not yet covered the end of window " +
                                              std::to_string(wid));
    // Not covered in time (the sampler stopped?): the data there is, as the meter would give.
    m.pending.erase(wid);
    Measurement r = m.meter->result(wid, std::chrono::milliseconds(0));
    m.exporter->on_window(r);
    fill(r, out);
    return CNNERGY_OK;
  }
  fill(it->second, out);
  m.done.erase(it);
  return CNNERGY_OK;
}

// cnnergy_window_begin(_at): `t_ns` empty stamps now.
cnnergy_status begin_window(cnnergy_monitor* monitor, const char* name,
                            std::optional<std::int64_t> t_ns, cnnergy_window_id* id) {
  if (!monitor || !name) return bad("cnnergy_window_begin: NULL argument");
  const std::size_t len = std::strlen(name);
  if (len == 0 || len >= CNNERGY_NAME_MAX)
    return bad("window name must have 1 to " + std::to_string(CNNERGY_NAME_MAX - 1) + " bytes");
  std::lock_guard<std::mutex> lock(monitor->mutex);
  if (!monitor->running) return bad("the monitor is stopped: start it before beginning windows");
  std::string key(name, len);
  if (monitor->open.count(key)) return bad("window '" + key + "' is already open");
  if (t_ns && *t_ns < monitor->started_ns)
    return bad("window '" + key + "' cannot begin before the monitor (re)started");
  const auto w = t_ns ? monitor->meter->begin_at(key, *t_ns) : monitor->meter->begin(key);
  monitor->open.emplace(std::move(key), w);
  if (id) *id = (monitor->generation << kIdBits) | w;
  return CNNERGY_OK;
}

// cnnergy_window_end(_at): `t_ns` empty stamps now.
cnnergy_status end_window(cnnergy_monitor* monitor, const char* name,
                          std::optional<std::int64_t> t_ns, cnnergy_window_id* id) {
  if (!monitor || !name) return bad("cnnergy_window_end: NULL argument");
  std::lock_guard<std::mutex> lock(monitor->mutex);
  auto it = monitor->open.find(name);
  if (it == monitor->open.end())
    return bad(std::string("window '") + name + "' was never begun (or has already ended)");
  if (t_ns)
    monitor->meter->close_at(it->second, *t_ns);
  else
    monitor->meter->close(it->second);
  if (monitor->exporter) monitor->pending.insert(it->second);
  if (id) *id = (monitor->generation << kIdBits) | it->second;
  monitor->open.erase(it);
  return CNNERGY_OK;
}

}  // namespace
}  // namespace cnnergy::api

using namespace cnnergy::api;

extern "C" {

unsigned cnnergy_api_version(void) { return CNNERGY_API_VERSION; }

const char* cnnergy_last_error(void) { return last_error().c_str(); }

const char* cnnergy_status_name(cnnergy_status status) {
  switch (status) {
    case CNNERGY_OK: return "ok";
    case CNNERGY_ERROR_INTERNAL: return "internal";
    case CNNERGY_ERROR_INVALID_ARGUMENT: return "invalid_argument";
    case CNNERGY_ERROR_DATA: return "data";
    case CNNERGY_ERROR_NOT_SUPPORTED: return "not_supported";
    case CNNERGY_ERROR_PERMISSION: return "permission";
    case CNNERGY_ERROR_DEVICE: return "device";
    case CNNERGY_NOT_READY: return "not_ready";
  }
  return "unknown";
}

const char* cnnergy_source_name(cnnergy_energy_source source) {
  switch (source) {
    case CNNERGY_SOURCE_COUNTER: return "counter";
    case CNNERGY_SOURCE_INTEGRATED_POWER: return "integrated_power";
    case CNNERGY_SOURCE_NONE: break;
  }
  return "none";
}

void cnnergy_monitor_options_init(cnnergy_monitor_options* options) {
  if (!options) return;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->cpu = 1;
  options->start = 1;
}

cnnergy_status cnnergy_monitor_open(const cnnergy_monitor_options* options,
                                    cnnergy_monitor** monitor) {
  return guarded([&] {
    if (!monitor) return bad("cnnergy_monitor_open: monitor must not be NULL");
    *monitor = nullptr;
    cnnergy_monitor_options o;
    cnnergy_monitor_options_init(&o);
    if (options) {
      if (options->struct_size < sizeof(cnnergy_monitor_options))
        return bad("cnnergy_monitor_open: options.struct_size is " +
                   std::to_string(options->struct_size) + ", expected " +
                   std::to_string(sizeof(cnnergy_monitor_options)) + " (use options_init)");
      o = *options;
    }
    if (o.gpu_count > 0 && !o.gpus) return bad("cnnergy_monitor_open: gpu_count > 0, gpus NULL");
    if (o.interval_ms < 0 || !std::isfinite(o.interval_ms))
      return bad("cnnergy_monitor_open: interval_ms must be >= 0 (0: the sensor period)");
    auto m = std::make_unique<cnnergy_monitor>();
    auto opened = Nvml::open();
    m->nvml = opened.nvml;
    if (o.gpu_count > 0) {
      if (!m->nvml)
        throw NotSupported("GPUs were asked for but NVML is not available: " +
                           opened.unavailable_reason);
      for (std::size_t i = 0; i < o.gpu_count; ++i) {
        const unsigned g = o.gpus[i];
        for (std::size_t k = 0; k < i; ++k)
          if (o.gpus[k] == g) return bad("GPU " + std::to_string(g) + " is listed twice");
        m->nvml->device(g);  // InvalidArgument: "no GPU 7 (NVML sees 2)"
        m->sampler_options.gpus.push_back(g);
      }
    }
    if (m->sampler_options.gpus.size() > CNNERGY_MAX_GPUS)
      return bad("at most " + std::to_string(CNNERGY_MAX_GPUS) + " GPUs per monitor");
    if (o.interval_ms > 0) m->sampler_options.interval_ms = o.interval_ms;
    if (o.cpu) {
      auto rapl = std::make_shared<RaplMeter>();
      if (rapl->available()) m->rapl = rapl;
    }
    start_locked(*m);  // validates the GPUs (lost ones are refused) and learns the sensor period
    for (unsigned g : m->sampler->gpu_indices()) {
      const GpuDevice& d = m->nvml->device(g);
      cnnergy_gpu_info info{};
      info.index = g;
      std::snprintf(info.uuid, sizeof info.uuid, "%s", d.uuid().c_str());
      std::snprintf(info.name, sizeof info.name, "%s", d.name().c_str());
      m->gpus.push_back(info);
    }
    for (std::size_t s = 0; s < m->gpus.size(); ++s)
      m->gpus[s].has_energy_counter = m->sampler->has_counter(s) ? 1 : 0;
    if (!o.start) {
      m->sampler->stop();
      m->running = false;
    }
    *monitor = m.release();
    return CNNERGY_OK;
  });
}

void cnnergy_monitor_close(cnnergy_monitor* monitor) {
  if (!monitor) return;
  try {
    detach_export(*monitor);
    monitor->exporter.reset();
    monitor->meter.reset();  // removes its listener before the sampler goes
    if (monitor->sampler) monitor->sampler->stop();
  } catch (...) {
  }
  delete monitor;
}

cnnergy_status cnnergy_monitor_start(cnnergy_monitor* monitor) {
  return guarded([&] {
    if (!monitor) return bad("cnnergy_monitor_start: monitor is NULL");
    std::lock_guard<std::mutex> lock(monitor->mutex);
    start_locked(*monitor);
    return CNNERGY_OK;
  });
}

cnnergy_status cnnergy_monitor_stop(cnnergy_monitor* monitor) {
  return guarded([&] {
    if (!monitor) return bad("cnnergy_monitor_stop: monitor is NULL");
    std::lock_guard<std::mutex> lock(monitor->mutex);
    if (monitor->sampler) monitor->sampler->stop();
    monitor->running = false;
    return CNNERGY_OK;
  });
}

int cnnergy_monitor_running(const cnnergy_monitor* monitor) {
  return monitor && monitor->running ? 1 : 0;
}

size_t cnnergy_monitor_gpu_count(const cnnergy_monitor* monitor) {
  return monitor ? monitor->gpus.size() : 0;
}

cnnergy_status cnnergy_monitor_gpu_info(const cnnergy_monitor* monitor, size_t slot,
                                        cnnergy_gpu_info* info) {
  if (!monitor || !info) return bad("cnnergy_monitor_gpu_info: NULL argument");
  if (slot >= monitor->gpus.size())
    return bad("GPU slot " + std::to_string(slot) + " out of range (the monitor has " +
               std::to_string(monitor->gpus.size()) + " GPUs)");
  *info = monitor->gpus[slot];
  return CNNERGY_OK;
}

int cnnergy_monitor_has_cpu(const cnnergy_monitor* monitor) {
  return monitor && monitor->rapl ? 1 : 0;
}

double cnnergy_monitor_sensor_period_ms(const cnnergy_monitor* monitor) {
  return monitor ? monitor->sensor_period_ms : kNaN;
}

double cnnergy_monitor_interval_ms(const cnnergy_monitor* monitor) {
  return monitor ? monitor->interval_ms : kNaN;
}

cnnergy_status cnnergy_monitor_settle_check(const cnnergy_monitor* monitor, int64_t since_ns, double window_s,
                                            double max_temp_slope_c_per_s, double max_power_slope_per_s,
                                            cnnergy_settle_check* out) {
  return guarded([&] {
    if (!monitor || !out) return bad("cnnergy_monitor_settle_check: NULL argument");
    std::shared_ptr<cnnergy::telemetry::Sampler> sampler;
    {
      std::lock_guard<std::mutex> lock(monitor->mutex);
      if (!monitor->running || !monitor->sampler)
        return bad("the monitor is stopped: start it before asking whether the GPUs have settled");
      sampler = monitor->sampler;
    }
    cnnergy::telemetry::SettleRule rule;
    if (window_s > 0) rule.window_s = window_s;
    if (max_temp_slope_c_per_s > 0) rule.max_temp_slope_c_per_s = max_temp_slope_c_per_s;
    if (max_power_slope_per_s > 0) rule.max_power_slope_per_s = max_power_slope_per_s;
    const auto c = cnnergy::telemetry::check_settled_since(*sampler, since_ns, rule);
    std::memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->settled = c.settled ? 1 : 0;
    out->samples = c.samples;
    out->temp_slope_c_per_s = c.temp_slope_c_per_s.value_or(kNaN);
    out->power_slope_per_s = c.power_slope_per_s.value_or(kNaN);
    std::snprintf(out->reason, sizeof out->reason, "%s", c.reason.c_str());
    return CNNERGY_OK;
  });
}

cnnergy_status cnnergy_window_begin(cnnergy_monitor* monitor, const char* name,
                                    cnnergy_window_id* id) {
  return guarded([&] { return begin_window(monitor, name, std::nullopt, id); });
}

cnnergy_status cnnergy_window_begin_at(cnnergy_monitor* monitor, const char* name, int64_t t_ns,
                                       cnnergy_window_id* id) {
  return guarded([&] { return begin_window(monitor, name, t_ns, id); });
}

cnnergy_status cnnergy_window_end(cnnergy_monitor* monitor, const char* name,
                                  cnnergy_window_id* id) {
  return guarded([&] { return end_window(monitor, name, std::nullopt, id); });
}

cnnergy_status cnnergy_window_end_at(cnnergy_monitor* monitor, const char* name, int64_t t_ns,
                                     cnnergy_window_id* id) {
  return guarded([&] { return end_window(monitor, name, t_ns, id); });
}

int64_t cnnergy_now_ns(void) { return steady_now_ns(); }

size_t cnnergy_monitor_window_count(cnnergy_monitor* monitor) {
  if (!monitor) return 0;
  std::lock_guard<std::mutex> lock(monitor->mutex);
  return (monitor->meter ? monitor->meter->open_windows() : 0) + monitor->done.size();
}

cnnergy_status cnnergy_window_result(cnnergy_monitor* monitor, cnnergy_window_id id,
                                     double timeout_ms, cnnergy_measurement* out) {
  return guarded([&] {
    if (!monitor || !out) return bad("cnnergy_window_result: NULL argument");
    EnergyMeter* meter = nullptr;
    EnergyMeter::WindowId wid = 0;
    {
      std::unique_lock<std::mutex> lock(monitor->mutex);
      wid = meter_id(*monitor, id);
      for (const auto& [name, open_id] : monitor->open)
        if (open_id == wid) return bad("window '" + name + "' is still open: end it first");
      meter = monitor->meter.get();
      if (monitor->exporter && (monitor->pending.count(wid) || monitor->done.count(wid)))
        return result_exported(*monitor, lock, wid, timeout_ms, *out);
    }
    // Waiting happens without the monitor's lock, so other threads keep beginning windows. The
    // meter outlives this call: it is replaced only by start(), which refuses while windows exist.
    if (timeout_ms == 0) {
      auto m = meter->try_result(wid);
      if (!m)
        return set_error(CNNERGY_NOT_READY,
                         "the sampler has not yet covered the end of window " + std::to_string(id));
      fill(*m, *out);
    } else if (timeout_ms < 0) {
      fill(meter->result(wid), *out);
    } else {
      fill(meter->result(wid, std::chrono::milliseconds(static_cast<long long>(timeout_ms))), *out);
    }
    return CNNERGY_OK;
  });
}

cnnergy_status cnnergy_window_discard(cnnergy_monitor* monitor, cnnergy_window_id id) {
  return guarded([&] {
    if (!monitor) return bad("cnnergy_window_discard: monitor is NULL");
    std::lock_guard<std::mutex> lock(monitor->mutex);
    const auto wid = meter_id(*monitor, id);
    for (const auto& [name, open_id] : monitor->open)
      if (open_id == wid) return bad("window '" + name + "' is still open: end it first");
    if (monitor->done.erase(wid)) return CNNERGY_OK;
    monitor->pending.erase(wid);
    monitor->meter->discard(wid);
    return CNNERGY_OK;
  });
}

cnnergy_status cnnergy_monitor_export(cnnergy_monitor* monitor, int prometheus_port,
                                      const char* jsonl_path, unsigned* bound_port) {
  return guarded([&] {
    if (!monitor) return bad("cnnergy_monitor_export: monitor is NULL");
    if (prometheus_port > 65535) return bad("port " + std::to_string(prometheus_port) + " > 65535");
    if (prometheus_port < 0 && !jsonl_path)
      return bad("cnnergy_monitor_export: neither a port nor a JSON-lines file");
    std::lock_guard<std::mutex> lock(monitor->mutex);
    if (monitor->exporter) return bad("this monitor already exports its metrics");
    if (!monitor->sampler) return bad("the monitor has no sampler");
    std::optional<unsigned> port;
    if (prometheus_port >= 0) port = static_cast<unsigned>(prometheus_port);
    std::optional<std::string> path;
    if (jsonl_path) path = jsonl_path;
    monitor->exporter = std::make_unique<cnnergy::exporter::MonitorExporter>(
        cnnergy::exporter::gpu_labels(*monitor->sampler), port, path);
    if (monitor->running) attach_export(*monitor);
    if (bound_port) *bound_port = monitor->exporter->port().value_or(0);
    return CNNERGY_OK;
  });
}

}  // extern "C"
