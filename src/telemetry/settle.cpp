// The settling rule (least-squares slopes of temperature and power over the last window of samples)
// and the waits built on it: keep the workload running until settled, or cool down when idle.
#include "telemetry/settle.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "core/log.hpp"
#include "telemetry/sampler.hpp"

namespace cnnergy::telemetry {

namespace {

struct Slope {
  double value = 0, stderr_ = 0, mean = 0;
};

// Least-squares slope of y over t, with its standard error (0 with fewer than 3 points).
std::optional<Slope> fit_slope(const std::vector<std::pair<double, double>>& pts) {
  const auto n = static_cast<double>(pts.size());
  if (pts.size() < 2) return std::nullopt;
  double mt = 0, my = 0;
  for (const auto& [t, y] : pts) mt += t, my += y;
  mt /= n, my /= n;
  double stt = 0, sty = 0;
  for (const auto& [t, y] : pts) stt += (t - mt) * (t - mt), sty += (t - mt) * (y - my);
  if (stt <= 0) return std::nullopt;
  Slope s;
  s.value = sty / stt;
  s.mean = my;
  if (pts.size() >= 3) {
    double rss = 0;
    for (const auto& [t, y] : pts) {
      const double r = y - (my + s.value * (t - mt));
      rss += r * r;
    }
    s.stderr_ = std::sqrt(rss / (n - 2) / stt);
  }
  return s;
}

std::string signed_text(double v, const char* unit) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%+.3g %s", v, unit);
  return buf;
}

double seconds(std::int64_t ns) { return static_cast<double>(ns) * 1e-9; }

}  // namespace

SettleCheck check_settled(std::span<const SettleSample> samples, const SettleRule& rule) {
  SettleCheck c;
  if (samples.empty()) {
    c.reason = "no samples yet";
    return c;
  }
  const double t_end = samples.back().t_s;
  std::vector<std::pair<double, double>> temp, power;
  for (const auto& s : samples) {
    if (s.t_s < t_end - rule.window_s) continue;
    ++c.samples;
    if (s.temperature_c) temp.emplace_back(s.t_s - t_end, *s.temperature_c);
    if (s.power_w) power.emplace_back(s.t_s - t_end, *s.power_w);
  }
  const double span_s = samples.front().t_s <= t_end - rule.window_s ? rule.window_s : t_end - samples.front().t_s;
  if (c.samples < rule.min_samples || span_s < rule.window_s * 0.999) {
    c.reason = "watching (" + std::to_string(c.samples) + " samples over " + signed_text(span_s, "s").substr(1) + ")";
    return c;
  }
  bool ok = true;
  std::string why;
  if (const auto s = fit_slope(temp)) {
    c.temp_slope_c_per_s = s->value;
    if (std::abs(s->value) > rule.max_temp_slope_c_per_s + 2 * s->stderr_) {
      ok = false;
      why = "temperature " + signed_text(s->value, "C/s");
    }
  }
  if (const auto s = fit_slope(power); s && s->mean > 0) {
    c.power_slope_per_s = s->value / s->mean;
    if (std::abs(s->value) > rule.max_power_slope_per_s * s->mean + 2 * s->stderr_) {
      ok = false;
      why += (why.empty() ? "" : ", ") + std::string("power ") + signed_text(100 * s->value / s->mean, "%/s");
    }
  }
  c.settled = ok;
  if (!ok) c.reason = "still drifting: " + why;
  return c;
}

std::string SettleResult::describe() const {
  if (!observed) return "no readings to settle on";
  char head[64];
  std::snprintf(head, sizeof head, settled ? "settled in %.1f s" : "not settled after %.1f s", waited_s);
  std::string out = head;
  std::string slopes;
  if (last.temp_slope_c_per_s) slopes += "T " + signed_text(*last.temp_slope_c_per_s, "C/s");
  if (last.power_slope_per_s)
    slopes += (slopes.empty() ? "" : ", ") + std::string("P ") + signed_text(100 * *last.power_slope_per_s, "%/s");
  return slopes.empty() ? out : out + " (" + slopes + ")";
}

SettleCheck check_settled_since(const Sampler& sampler, std::int64_t since_ns, const SettleRule& rule) {
  std::vector<SettleSample> pts;
  for (const auto& s : sampler.samples_from(since_ns)) {
    if (s.t_ns < since_ns) continue;  // the rule judges only what followed the change
    SettleSample p;
    p.t_s = seconds(s.t_ns - since_ns);
    double watts = 0;
    bool have_power = true;
    for (const auto& g : s.gpus) {
      if (g.temperature_c) p.temperature_c = std::max(p.temperature_c.value_or(-1e9), double(*g.temperature_c));
      if (g.power_mw) watts += *g.power_mw * 1e-3;
      else have_power = false;
    }
    if (have_power && !s.gpus.empty()) p.power_w = watts;
    pts.push_back(p);
  }
  return check_settled(pts, rule);
}

SettleResult wait_until_settled(const std::shared_ptr<Sampler>& sampler, std::int64_t since_ns,
                                const SettleRule& rule, const std::function<void()>& keep_busy,
                                const std::function<bool()>& stop) {
  SettleResult r;
  if (!sampler || rule.max_wait_s <= 0 || sampler->gpu_count() == 0) return r;
  const std::int64_t start_ns = steady_now_ns();
  const auto idle_sleep = std::chrono::duration<double, std::milli>(std::max(10.0, sampler->interval_ms() / 2));
  for (;;) {
    r.last = check_settled_since(*sampler, since_ns, rule);
    r.observed = r.observed || r.last.temp_slope_c_per_s || r.last.power_slope_per_s;
    r.waited_s = seconds(steady_now_ns() - start_ns);
    if (r.last.settled) {
      r.settled = true;
      return r;
    }
    if (r.waited_s >= rule.max_wait_s || (stop && stop())) return r;
    if (keep_busy) keep_busy();
    else std::this_thread::sleep_for(idle_sleep);
  }
}

double cool_down(const std::shared_ptr<Sampler>& sampler, double max_c, double timeout_s) {
  if (max_c <= 0 || !sampler) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + std::chrono::duration<double>(timeout_s);
  auto waited = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  while (std::chrono::steady_clock::now() < deadline) {
    const auto latest = sampler->latest();
    bool cool = true;
    if (latest)
      for (const auto& g : latest->gpus) cool = cool && (!g.temperature_c || *g.temperature_c <= max_c);
    if (cool) return waited();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  log_warn("cool-down: the GPU did not reach " + std::to_string(max_c) + " C within " + std::to_string(timeout_s) + " s");
  return waited();
}

}  // namespace cnnergy::telemetry
