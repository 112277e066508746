// Energy meter: window bookkeeping on the caller's side, boundary resolution on the sampler's
// thread (as soon as the sampler has data past a boundary, so windows outlive the ring buffer).
#include "telemetry/energy_meter.hpp"

#include <algorithm>
#include <cmath>

#include "core/errors.hpp"
#include "core/log.hpp"

namespace cnnergy::telemetry {

namespace {
constexpr std::int64_t kStampSlackNs = 1'000'000;  // a caller's stamp may lead ours by 1 ms
}  // namespace

const char* to_string(EnergySource s) {
  switch (s) {
    case EnergySource::kCounter:
      return "counter";
    case EnergySource::kIntegratedPower:
      return "integrated_power";
    case EnergySource::kNone:
      break;
  }
  return "none";
}

std::optional<double> Measurement::gpu_energy_mj() const {
  double sum = 0;
  for (const auto& g : gpus) {
    if (!g.energy_mj) return std::nullopt;
    sum += *g.energy_mj;
  }
  return gpus.empty() ? std::nullopt : std::optional<double>(sum);
}

std::optional<double> Measurement::gpu_uncertainty_mj() const {
  double sum = 0;
  for (const auto& g : gpus) {
    if (!g.uncertainty_mj) return std::nullopt;
    sum += *g.uncertainty_mj;
  }
  return gpus.empty() ? std::nullopt : std::optional<double>(sum);
}

EnergyMeter::EnergyMeter(std::shared_ptr<Sampler> sampler, bool cpu_from_samples)
    : sampler_(std::move(sampler)), cpu_from_samples_(cpu_from_samples) {
  if (!sampler_) throw InvalidArgument("EnergyMeter needs a sampler");
  listener_token_ = sampler_->add_listener([this](const Sample& s) { on_sample(s); });
}

EnergyMeter::~EnergyMeter() { sampler_->remove_listener(listener_token_); }

EnergyMeter::WindowId EnergyMeter::begin(std::string label, const SyncFn& sync) {
  if (sync) sync();
  Window w;
  w.label = std::move(label);
  w.begin_ns = steady_now_ns();
  if (const auto& rapl = sampler_->rapl(); rapl && !cpu_from_samples_)
    w.cpu_begin_mj = rapl->total_mj();  // a sysfs read (tens of µs)
  w.gpus.resize(sampler_->gpu_count());
  std::lock_guard<std::mutex> lock(mutex_);
  const WindowId id = next_id_++;
  windows_.emplace(id, std::move(w));
  return id;
}

void EnergyMeter::close(WindowId id, const SyncFn& sync) {
  if (sync) sync();
  const std::int64_t t = steady_now_ns();
  std::optional<double> cpu;
  if (const auto& rapl = sampler_->rapl(); rapl && !cpu_from_samples_) cpu = rapl->total_mj();
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = windows_.find(id);
  if (it == windows_.end())
    throw InvalidArgument("energy window " + std::to_string(id) + " is not open");
  if (it->second.closed)
    throw InvalidArgument("energy window " + std::to_string(id) + " was already closed");
  it->second.end_ns = t;
  it->second.closed = true;
  it->second.cpu_end_mj = cpu;
  // No resolve() here: the sampler has no data past `t` yet, and on_sample() resolves every
  // window on its own thread, so a close on the caller's thread only stamps (a close costs under 10 us).
}

EnergyMeter::WindowId EnergyMeter::begin_at(std::string label, std::int64_t t_ns) {
  const std::int64_t now = steady_now_ns();
  if (t_ns > now + kStampSlackNs)
    throw InvalidArgument("window '" + label + "': its begin is " +
                          std::to_string((t_ns - now) / 1000) + " us in the future");
  Window w;
  w.label = std::move(label);
  w.begin_ns = t_ns;
  w.gpus.resize(sampler_->gpu_count());
  std::lock_guard<std::mutex> lock(mutex_);
  const WindowId id = next_id_++;
  Window& placed = windows_.emplace(id, std::move(w)).first->second;
  if (last_sample_ns_ >= t_ns) replay(placed);
  return id;
}

void EnergyMeter::close_at(WindowId id, std::int64_t t_ns) {
  const std::int64_t now = steady_now_ns();
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = windows_.find(id);
  if (it == windows_.end())
    throw InvalidArgument("energy window " + std::to_string(id) + " is not open");
  Window& w = it->second;
  if (w.closed)
    throw InvalidArgument("energy window " + std::to_string(id) + " was already closed");
  if (t_ns > now + kStampSlackNs || t_ns < w.begin_ns)
    throw InvalidArgument("window '" + w.label + "': its end must lie between its begin and now");
  w.end_ns = t_ns;
  w.closed = true;
  // Samples past the end were counted while the window was open: count again with the end known.
  if (last_sample_ns_ > t_ns) replay(w);
}

void EnergyMeter::replay(Window& w) {
  bool covered = false;
  const std::vector<Sample> seen = sampler_->samples_from(w.begin_ns, &covered);
  if (!covered) return;  // the ring no longer reaches the begin: keep what was counted
  for (GpuWindow& g : w.gpus) {
    g.peak_mw = 0;
    g.samples = 0;
    g.variation_mw = 0;
    g.last_power_mw.reset();
    g.variation_done = false;
  }
  if (cpu_from_samples_) w.cpu_begin_mj.reset(), w.cpu_end_mj.reset();
  CpuReading previous;
  for (const Sample& s : seen) {
    if (s.t_ns > last_sample_ns_) break;  // on_sample has yet to see it: it will count it
    accumulate(w, s, previous);
    if (s.cpu_energy_mj) previous = std::make_pair(s.t_ns, *s.cpu_energy_mj);
  }
  resolve(w);
}

Measurement EnergyMeter::end(WindowId id, const SyncFn& sync) {
  close(id, sync);
  return result(id);
}

std::size_t EnergyMeter::open_windows() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return windows_.size();
}

// Tries every boundary that is still unknown; the sampler answers once it has data past it.
void EnergyMeter::resolve(Window& w) {
  for (std::size_t slot = 0; slot < w.gpus.size(); ++slot) {
    GpuWindow& g = w.gpus[slot];
    const bool counter = sampler_->has_counter(slot);
    if (counter && !g.begin.counter)
      g.begin.counter = sampler_->counter_energy_at(slot, w.begin_ns);
    if (!g.begin.integrated) g.begin.integrated = sampler_->integrated_energy_at(slot, w.begin_ns);
    if (!w.closed) continue;
    if (counter && !g.end.counter) g.end.counter = sampler_->counter_energy_at(slot, w.end_ns);
    if (!g.end.integrated) g.end.integrated = sampler_->integrated_energy_at(slot, w.end_ns);
  }
}

bool EnergyMeter::complete(const Window& w) const {
  if (!w.closed) return false;
  if (cpu_from_samples_ && sampler_->rapl() && !w.cpu_end_mj) return false;
  for (std::size_t slot = 0; slot < w.gpus.size(); ++slot) {
    const GpuWindow& g = w.gpus[slot];
    if (sampler_->has_counter(slot)) {
      if (!g.begin.counter || !g.end.counter) return false;
    } else if (sampler_->has_power(slot)) {
      if (!g.begin.integrated || !g.end.integrated) return false;
    }
  }
  return true;
}

// One sample's share of a window: CPU energy at its edges (interpolated between this sample and
// the previous one), and the power samples inside it (peak, count, total variation).
void EnergyMeter::accumulate(Window& w, const Sample& s, const CpuReading& previous_cpu) {
  const auto cpu_at = [&](std::int64_t t) -> std::optional<double> {
    if (!s.cpu_energy_mj || s.t_ns < t) return std::nullopt;
    if (!previous_cpu || previous_cpu->first >= s.t_ns) return s.cpu_energy_mj;
    if (previous_cpu->first > t) return previous_cpu->second;  // registered late: the nearest one
    const double f = double(t - previous_cpu->first) / double(s.t_ns - previous_cpu->first);
    return previous_cpu->second + f * (*s.cpu_energy_mj - previous_cpu->second);
  };
  if (cpu_from_samples_) {
    if (!w.cpu_begin_mj) w.cpu_begin_mj = cpu_at(w.begin_ns);
    if (w.closed && !w.cpu_end_mj) w.cpu_end_mj = cpu_at(w.end_ns);
  }
  for (std::size_t slot = 0; slot < w.gpus.size() && slot < s.gpus.size(); ++slot) {
    const GpuSample& g = s.gpus[slot];
    GpuWindow& gw = w.gpus[slot];
    if (!g.power_mw || g.t_ns < w.begin_ns) continue;
    if (!gw.variation_done) {
      if (gw.last_power_mw) gw.variation_mw += std::abs(double(*g.power_mw) - *gw.last_power_mw);
      gw.last_power_mw = double(*g.power_mw);
      gw.variation_done = w.closed && g.t_ns > w.end_ns;
    }
    if (w.closed && g.t_ns > w.end_ns) continue;
    gw.peak_mw = std::max(gw.peak_mw, double(*g.power_mw));
    ++gw.samples;
  }
}

void EnergyMeter::on_sample(const Sample& s) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [id, w] : windows_) {
      accumulate(w, s, last_cpu_);
      resolve(w);
    }
    if (s.cpu_energy_mj) last_cpu_ = std::make_pair(s.t_ns, *s.cpu_energy_mj);
    last_sample_ns_ = std::max(last_sample_ns_, s.t_ns);
  }
  cv_.notify_all();
}

std::optional<Measurement> EnergyMeter::try_result(WindowId id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = windows_.find(id);
  if (it == windows_.end())
    throw InvalidArgument("energy window " + std::to_string(id) + " is not open");
  if (!it->second.closed || !complete(it->second)) return std::nullopt;
  Measurement m = make_measurement(it->second);
  windows_.erase(it);
  return m;
}

void EnergyMeter::discard(WindowId id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (windows_.erase(id) == 0)
    throw InvalidArgument("energy window " + std::to_string(id) + " is not open");
}

Measurement EnergyMeter::result(WindowId id, std::optional<std::chrono::milliseconds> timeout) {
  const double slack_ms = 3.0 * (sampler_->interval_ms() + sampler_->sensor_period_ms()) + 1000.0;
  const auto wait =
      timeout.value_or(std::chrono::milliseconds(static_cast<std::int64_t>(slack_ms)));
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = windows_.find(id);
  if (it == windows_.end())
    throw InvalidArgument("energy window " + std::to_string(id) + " is not open");
  if (!it->second.closed)
    throw InvalidArgument("energy window " + std::to_string(id) + " is still open: close it first");
  if (!cv_.wait_for(lock, wait, [&] { return complete(it->second); })) {
    resolve(it->second);
    log_warn("energy window '" + it->second.label +
             "': the sampler did not cover its end in time; "
             "using what is available");
  }
  Measurement m = make_measurement(it->second);
  windows_.erase(it);
  return m;
}

Measurement EnergyMeter::make_measurement(const Window& w) const {
  Measurement m;
  m.label = w.label;
  m.begin_ns = w.begin_ns;
  m.end_ns = w.end_ns;
  m.elapsed_ms = static_cast<double>(w.end_ns - w.begin_ns) / 1e6;
  m.sensor_period_ms = sampler_->sensor_period_ms();
  m.short_window = m.elapsed_ms < m.sensor_period_ms;
  if (w.cpu_begin_mj && w.cpu_end_mj) m.cpu_energy_mj = *w.cpu_end_mj - *w.cpu_begin_mj;
  for (std::size_t slot = 0; slot < w.gpus.size(); ++slot) {
    const GpuWindow& g = w.gpus[slot];
    GpuEnergy e;
    e.index = sampler_->gpu_indices()[slot];
    e.samples = g.samples;
    if (g.begin.counter && g.end.counter) {
      e.source = EnergySource::kCounter;
      e.energy_mj = g.end.counter->energy_mj - g.begin.counter->energy_mj;
      e.uncertainty_mj = g.begin.counter->uncertainty_mj + g.end.counter->uncertainty_mj;
    } else if (g.begin.integrated && g.end.integrated) {
      e.source = EnergySource::kIntegratedPower;
      e.energy_mj = g.end.integrated->energy_mj - g.begin.integrated->energy_mj;
      e.uncertainty_mj =
          g.begin.integrated->uncertainty_mj + g.end.integrated->uncertainty_mj +
          sampler_->power_lag_ms(slot) * 1e-3 * g.variation_mw;  // ms * mW = µJ, * 1e-3 = mJ
    }
    if (e.energy_mj && m.elapsed_ms > 0)
      e.average_power_mw = *e.energy_mj / (m.elapsed_ms / 1000.0);
    if (g.samples > 0)
      e.peak_power_mw = g.peak_mw;  // empty when no sample fell inside (short window)
    m.gpus.push_back(e);
  }
  return m;
}

}  // namespace cnnergy::telemetry
