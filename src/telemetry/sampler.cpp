// Sampler implementation: sensor-period detection, the sampling loop, counter points, and the
// interpolation queries the energy meter uses.
#include "telemetry/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "core/errors.hpp"
#include "core/log.hpp"

namespace cnnergy::telemetry {

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

constexpr double kNsPerMs = 1e6;
constexpr double kMwNsToMj = 1e-9;  // mW * ns = 1e-9 mJ

CounterPoint to_point(const CounterBracket& b) {
  return CounterPoint{b.lo_ns + (b.hi_ns - b.lo_ns) / 2, (b.hi_ns - b.lo_ns) / 2, b.energy_mj};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

Sampler::Sampler(std::shared_ptr<const Nvml> nvml, std::shared_ptr<RaplMeter> rapl,
                 SamplerOptions options)
    : nvml_(std::move(nvml)), rapl_(std::move(rapl)), options_(std::move(options)) {
  if (options_.interval_ms && !(*options_.interval_ms >= 1.0 && *options_.interval_ms <= 60'000.0))
    throw InvalidArgument("sampling interval must be between 1 ms and 60000 ms, got " +
                          std::to_string(*options_.interval_ms) + " ms");
  if (options_.sensor_period_ms && !(*options_.sensor_period_ms > 0.0))
    throw InvalidArgument("sensor period must be positive");
  if (options_.capacity < 16) throw InvalidArgument("sampler capacity must be at least 16 samples");

  if (nvml_) {
    if (options_.gpus.empty()) {
      for (const auto& d : nvml_->devices())
        if (!d.lost()) gpu_indices_.push_back(d.index());
    } else {
      for (unsigned i : options_.gpus) {
        if (nvml_->device(i).lost())
          throw DeviceError("GPU " + std::to_string(i) + " is lost or not accessible");
        gpu_indices_.push_back(i);
      }
    }
  } else if (!options_.gpus.empty()) {
    throw NotSupported("GPUs were asked for but NVML is not available");
  }
  const std::size_t n = gpu_indices_.size();
  brackets_.resize(n);
  last_counter_.resize(n);
  last_counter_read_start_.assign(n, 0);
  has_counter_.assign(n, false);
  has_power_.assign(n, false);
  has_instant_.assign(n, false);
  for (std::size_t s = 0; s < n; ++s) {
    const GpuDevice& d = nvml_->device(gpu_indices_[s]);
    has_counter_[s] = options_.read_energy_counter && d.energy_mj().has_value();
    std::optional<std::uint32_t> inst, avg;
    d.power_fields(inst, avg);
    has_power_[s] = inst.has_value() || d.power_mw().has_value();
    has_instant_[s] = inst.has_value();
  }

  if (options_.sensor_period_ms) {
    sensor_period_ms_ = *options_.sensor_period_ms;
  } else {
    detect_sensor_period();
  }
  interval_ms_ = options_.interval_ms.value_or(sensor_period_ms_);
  stats_.interval_ms = interval_ms_;
  stats_.sensor_period_ms = sensor_period_ms_;
  stats_.sensor_period_detected = sensor_period_detected_;
  ring_.reserve(std::min<std::size_t>(options_.capacity, 4096));

  Sample first = take_sample();  // so that a window opened right away has data before it
  {
    std::lock_guard<std::mutex> lock(data_mutex_);
    ring_.push_back(std::move(first));
    ++stats_.samples;
  }
  thread_ = std::thread([this] { run(); });
}

Sampler::~Sampler() { stop(); }

void Sampler::stop() {
  {
    std::lock_guard<std::mutex> lock(run_mutex_);
    stopping_ = true;
  }
  run_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

// Watches the first GPU's counter (and power) change for up to detect_timeout_ms: the median time
// between changes is the sensor's update period. Without changes, 100 ms is assumed (and said).
void Sampler::detect_sensor_period() {
  sensor_period_ms_ = 100.0;
  sensor_period_detected_ = false;
  if (gpu_indices_.empty()) return;
  const GpuDevice& d = nvml_->device(gpu_indices_[0]);
  const bool counter = has_counter_[0];
  std::vector<std::int64_t> counter_changes, power_changes;
  std::optional<std::uint64_t> last_e;
  std::optional<std::uint32_t> last_p;
  const std::int64_t deadline =
      steady_now_ns() + static_cast<std::int64_t>(options_.detect_timeout_ms * kNsPerMs);
  while (steady_now_ns() < deadline) {
    std::optional<std::uint32_t> p, avg;
    d.power_fields(p, avg);
    if (!p) p = d.power_mw();
    const std::int64_t tp = steady_now_ns();
    if (p && last_p && *p != *last_p) power_changes.push_back(tp);
    if (p) last_p = p;
    if (counter) {
      const std::int64_t t0 = steady_now_ns();
      const auto e = d.energy_mj();
      const std::int64_t t1 = steady_now_ns();
      if (e && last_e && *e != *last_e) {
        counter_changes.push_back((t0 + t1) / 2);
        // Reads a few ms apart bracket these updates tightly: anchors for the update-time
        // estimates.
        std::lock_guard<std::mutex> lock(data_mutex_);
        brackets_[0].push_back(CounterBracket{last_counter_read_start_[0], t1, *e});
      }
      if (e) {
        last_e = e;
        last_counter_[0] = e;
        last_counter_read_start_[0] = t0;
      }
      if (counter_changes.size() >= 6) break;
    } else {
      if (power_changes.size() >= 6) break;
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  }
  auto period_of = [](const std::vector<std::int64_t>& changes) -> std::optional<double> {
    if (changes.size() < 3) return std::nullopt;
    std::vector<double> gaps;
    for (std::size_t i = 1; i < changes.size(); ++i)
      gaps.push_back(static_cast<double>(changes[i] - changes[i - 1]));
    // The median gap is robust to a missed update; the whole span over the number of updates it
    // holds is more precise than any one gap (each is quantised by the read time).
    const double m = median(gaps);
    double updates = 0;
    for (double g : gaps) updates += std::max(1.0, std::round(g / m));
    return static_cast<double>(changes.back() - changes.front()) / updates / kNsPerMs;
  };
  // The counter changes at every update (power never drops to zero); power may repeat a value.
  if (auto p = period_of(counter_changes)) {
    sensor_period_ms_ = *p, sensor_period_detected_ = true;
  } else if (auto q = period_of(power_changes)) {
    sensor_period_ms_ = *q, sensor_period_detected_ = true;
  } else {
    log_debug("sensor update period not detected; assuming 100 ms");
  }
}

Sample Sampler::take_sample() {
  Sample s;
  s.t_ns = steady_now_ns();
  s.gpus.resize(gpu_indices_.size());
  const std::int64_t period_ns = static_cast<std::int64_t>(sensor_period_ms_ * kNsPerMs);
  std::vector<CounterBracket> new_points(gpu_indices_.size());
  std::vector<bool> has_new_point(gpu_indices_.size(), false);
  std::optional<Sample> prev = latest();
  const bool links = options_.read_links && rounds_++ % std::max(1u, options_.links_every) == 0;
  // Read costs are summed locally and merged under the lock: stats() may run on another thread.
  std::uint64_t power_reads = 0, counter_reads = 0;
  double power_us = 0, counter_ms = 0, counter_max_ms = 0;
  for (std::size_t slot = 0; slot < gpu_indices_.size(); ++slot) {
    const GpuDevice& d = nvml_->device(gpu_indices_[slot]);
    GpuSample& g = s.gpus[slot];
    const std::int64_t p0 = steady_now_ns();
    std::optional<std::uint32_t> inst;
    d.power_fields(inst, g.power_average_mw);
    g.power_is_instant = inst.has_value();
    g.power_mw = inst ? inst : d.power_mw();
    const std::int64_t p1 = steady_now_ns();
    g.t_ns = (p0 + p1) / 2;
    ++power_reads;
    power_us += static_cast<double>(p1 - p0) / 1e3;

    if (has_counter_[slot]) {
      const std::int64_t c0 = steady_now_ns();
      g.energy_mj = d.energy_mj();
      const std::int64_t c1 = steady_now_ns();
      const double cost_ms = static_cast<double>(c1 - c0) / kNsPerMs;
      ++counter_reads;
      counter_ms += cost_ms;
      counter_max_ms = std::max(counter_max_ms, cost_ms);
      if (g.energy_mj) {
        // The value comes from the last sensor update before the read; that update happened after
        // the previous read (which still showed the old value) and within one period of this one
        // (10% slack: the period is itself an estimate).
        const auto& last = last_counter_[slot];
        if (!last || *g.energy_mj != *last) {
          const std::int64_t earliest = c1 - period_ns - period_ns / 10;
          const std::int64_t lo =
              last ? std::max(last_counter_read_start_[slot], earliest) : earliest;
          new_points[slot] = CounterBracket{lo, c1, *g.energy_mj};
          has_new_point[slot] = true;
        }
        last_counter_[slot] = g.energy_mj;
        last_counter_read_start_[slot] = c0;
      }
    }
    if (options_.read_extended) {
      g.sm_mhz = d.sm_clock_mhz();
      g.mem_mhz = d.mem_clock_mhz();
      g.temperature_c = d.temperature_c();
      g.utilization = d.utilization();
      g.clock_event_reasons = d.clock_event_reasons();
      if (auto m = d.memory()) g.memory_used_bytes = m->used_bytes;
    }
    if (links) {
      g.pcie = d.pcie_throughput();
      g.nvlink = d.nvlink_data_kib();
    }
    // Running trapezoid integral; a missing reading holds the other end's power.
    if (prev && slot < prev->gpus.size()) {
      const GpuSample& a = prev->gpus[slot];
      g.integrated_mj = a.integrated_mj;
      const auto pa = a.power_mw ? a.power_mw : g.power_mw;
      const auto pb = g.power_mw ? g.power_mw : a.power_mw;
      if (pa && pb)
        g.integrated_mj += 0.5 * (double(*pa) + double(*pb)) * double(g.t_ns - a.t_ns) * kMwNsToMj;
    }
  }
  if (rapl_) s.cpu_energy_mj = rapl_->total_mj();
  {
    std::lock_guard<std::mutex> lock(data_mutex_);
    stats_.power_reads += power_reads;
    stats_.counter_reads += counter_reads;
    power_read_total_us_ += power_us;
    counter_read_total_ms_ += counter_ms;
    stats_.counter_read_max_ms = std::max(stats_.counter_read_max_ms, counter_max_ms);
    for (std::size_t slot = 0; slot < new_points.size(); ++slot) {
      if (!has_new_point[slot]) continue;
      auto& pts = brackets_[slot];
      pts.push_back(new_points[slot]);
      if (pts.size() > 2 * options_.capacity)
        pts.erase(pts.begin(), pts.begin() + static_cast<long>(options_.capacity));
    }
  }
  return s;
}

void Sampler::run() {
  using clock = std::chrono::steady_clock;
  const auto interval =
      std::chrono::nanoseconds(static_cast<std::int64_t>(interval_ms_ * kNsPerMs));
  // Jitter (+-20%, mean zero) keeps the reads from locking step with the sensor's updates, which
  // would give every update-time estimate the same bias (errors then add up instead of averaging).
  std::minstd_rand jitter_rng(12345);
  std::uniform_real_distribution<double> jitter(-0.2, 0.2);
  auto next = clock::now() + interval;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(run_mutex_);
      if (run_cv_.wait_until(lock, next, [this] { return stopping_; })) return;
    }
    const auto start = clock::now();
    const bool late = start - next > interval / 2;
    Sample s = take_sample();
    const double round_ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
    {
      std::lock_guard<std::mutex> lock(data_mutex_);
      if (ring_.size() < options_.capacity) {
        ring_.push_back(s);
      } else {
        ring_[ring_head_] = s;
        ring_head_ = (ring_head_ + 1) % ring_.size();
      }
      ++stats_.samples;
      if (late) ++stats_.late_rounds;
      round_total_ms_ += round_ms;
    }
    {
      std::lock_guard<std::mutex> lock(listener_mutex_);
      for (auto& [token, listener] : listeners_) listener(s);
    }
    next += std::chrono::duration_cast<clock::duration>(interval * (1.0 + jitter(jitter_rng)));
    if (next < clock::now()) next = clock::now();  // fell behind (busy machine): do not burst
  }
}

std::vector<Sample> Sampler::samples() const {
  std::lock_guard<std::mutex> lock(data_mutex_);
  std::vector<Sample> out;
  out.reserve(ring_.size());
  for (std::size_t i = 0; i < ring_.size(); ++i)
    out.push_back(ring_[(ring_head_ + i) % ring_.size()]);
  return out;
}

std::vector<Sample> Sampler::samples_from(std::int64_t t_ns, bool* covered) const {
  std::lock_guard<std::mutex> lock(data_mutex_);
  const std::size_t n = ring_.size();
  auto at = [&](std::size_t i) -> const Sample& { return ring_[(ring_head_ + i) % n]; };
  std::size_t lo = 0, hi = n;  // first sample with t > t_ns
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    if (at(mid).t_ns <= t_ns)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (covered) *covered = lo > 0;
  std::vector<Sample> out;
  for (std::size_t i = lo > 0 ? lo - 1 : 0; i < n; ++i) out.push_back(at(i));
  return out;
}

std::optional<Sample> Sampler::latest() const {
  std::lock_guard<std::mutex> lock(data_mutex_);
  if (ring_.empty()) return std::nullopt;
  return ring_[(ring_head_ + ring_.size() - 1) % ring_.size()];
}

std::vector<CounterPoint> Sampler::counter_points(std::size_t slot) const {
  std::lock_guard<std::mutex> lock(data_mutex_);
  std::vector<CounterPoint> out;
  for (const auto& b : brackets_.at(slot)) out.push_back(to_point(b));
  return out;
}

SamplerStats Sampler::stats() const {
  std::lock_guard<std::mutex> lock(data_mutex_);
  SamplerStats s = stats_;
  if (s.counter_reads)
    s.counter_read_mean_ms = counter_read_total_ms_ / static_cast<double>(s.counter_reads);
  if (s.power_reads)
    s.power_read_mean_us = power_read_total_us_ / static_cast<double>(s.power_reads);
  if (s.samples > 1) s.round_mean_ms = round_total_ms_ / static_cast<double>(s.samples - 1);
  return s;
}

std::optional<EnergyAt> Sampler::counter_energy_at(std::size_t slot, std::int64_t t_ns) const {
  std::lock_guard<std::mutex> lock(data_mutex_);
  const auto& br = brackets_.at(slot);
  const std::size_t n = br.size();
  if (n < 2) return std::nullopt;
  // Brackets are in time order, and so are their middles.
  auto first_past = std::upper_bound(
      br.begin(), br.end(), t_ns,
      [](std::int64_t t, const CounterBracket& b) { return t < to_point(b).t_ns; });
  const std::size_t i = static_cast<std::size_t>(first_past - br.begin());
  if (i == n || i == 0) return std::nullopt;  // not yet covered, or forgotten
  const CounterPoint a = to_point(br[i - 1]), b = to_point(br[i]);
  const double span = static_cast<double>(b.t_ns - a.t_ns);
  const double frac = span > 0 ? static_cast<double>(t_ns - a.t_ns) / span : 1.0;
  EnergyAt out;
  out.energy_mj = double(a.energy_mj) + frac * (double(b.energy_mj) - double(a.energy_mj));
  // Power around the two points: the sampled powers, or the counter's own slope without them.
  double p_lo = 1e300, p_hi = 0;
  const std::int64_t from = a.t_ns - a.half_width_ns, to = b.t_ns + b.half_width_ns;
  for (const Sample& s : ring_) {
    const GpuSample& g = s.gpus[slot];
    if (g.t_ns < from || g.t_ns > to || !g.power_mw) continue;
    p_lo = std::min(p_lo, double(*g.power_mw));
    p_hi = std::max(p_hi, double(*g.power_mw));
  }
  if (p_hi == 0) {
    p_hi = span > 0 ? (double(b.energy_mj) - double(a.energy_mj)) / (span * kMwNsToMj) : 0;
    p_lo = p_hi;
  }
  // Misplacing an update in time by up to its half-width shifts E by power * half-width; power
  // changing inside the span makes the chord deviate by at most dP * span / 4; the counter is in
  // mJ.
  const double h = static_cast<double>(std::max(a.half_width_ns, b.half_width_ns));
  out.uncertainty_mj = p_hi * h * kMwNsToMj + (p_hi - p_lo) * span * kMwNsToMj / 4 + 1.0;
  return out;
}

std::optional<EnergyAt> Sampler::integrated_energy_at(std::size_t slot, std::int64_t t_ns) const {
  std::lock_guard<std::mutex> lock(data_mutex_);
  const std::size_t n = ring_.size();
  auto at = [&](std::size_t i) -> const GpuSample& {
    return ring_[(ring_head_ + i) % n].gpus[slot];
  };
  std::size_t lo = 0, hi = n;  // first sample with t > t_ns
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    if (at(mid).t_ns <= t_ns)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == n || lo == 0) return std::nullopt;
  const GpuSample& a = at(lo - 1);
  const GpuSample& b = at(lo);
  if (!a.power_mw && !b.power_mw) return std::nullopt;
  const double span = static_cast<double>(b.t_ns - a.t_ns);
  const double frac = span > 0 ? static_cast<double>(t_ns - a.t_ns) / span : 1.0;
  EnergyAt out;
  out.energy_mj = a.integrated_mj + frac * (b.integrated_mj - a.integrated_mj);
  // A power reading lags the true power by up to one sensor period (a 1 s average by up to 1 s):
  // near t the integral is off by up to lag * (power change around t), plus the trapezoid's chord
  // error. (Changes inside a window are the meter's part: lag * their total variation.)
  const double lag_ns = power_lag_ms(slot) * kNsPerMs;
  double p_lo = 1e300, p_hi = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const GpuSample& g = at(i);
    if (!g.power_mw || g.t_ns < t_ns - static_cast<std::int64_t>(lag_ns + span) || g.t_ns > b.t_ns)
      continue;
    p_lo = std::min(p_lo, double(*g.power_mw));
    p_hi = std::max(p_hi, double(*g.power_mw));
  }
  if (p_hi < p_lo) p_lo = p_hi = 0;
  out.uncertainty_mj = (p_hi - p_lo) * (lag_ns + span / 4) * kMwNsToMj + 1.0;
  return out;
}

int Sampler::add_listener(Listener listener) {
  std::lock_guard<std::mutex> lock(listener_mutex_);
  const int token = next_token_++;
  listeners_.emplace(token, std::move(listener));
  return token;
}

void Sampler::remove_listener(int token) {
  std::lock_guard<std::mutex> lock(listener_mutex_);
  listeners_.erase(token);
}

}  // namespace cnnergy::telemetry
