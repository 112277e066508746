// Thermally steady starts: the rule that says when a GPU's temperature and power have settled after
// a change (a new knob setting, a new workload), from the sensor samples themselves, and the wait
// that keeps the workload running until they have (or a time limit passes). Also the cool-down to a
// target temperature between trials. Used by the sweep's runners; the rule alone
// (check_settled) needs nothing but timestamped readings, so any caller (the C API, an in-training
// optimizer's profiling) can apply it to its own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace cnnergy::telemetry {

class Sampler;

// Settled = over the last `window_s` seconds of samples (at least `min_samples` of them), the
// least-squares slope of the temperature is at most `max_temp_slope_c_per_s` and that of the power at
// most `max_power_slope_per_s` (a fraction of the mean power per second), each allowed two standard
// errors of its fit on top (a slope the samples cannot tell from zero is no trend: real power swings
// with every iteration, and temperature is read in whole degrees).
struct SettleRule {
  double window_s = 1.0;                 // about ten sensor updates at 100 ms
  std::size_t min_samples = 5;
  double max_temp_slope_c_per_s = 0.1;   // 6 degrees C per minute
  double max_power_slope_per_s = 0.01;   // 1 % of the mean power per second
  double max_wait_s = 60;                // the time limit (--settle-s); 0: no settling
};

struct SettleSample {
  double t_s = 0;                          // any time base, seconds
  std::optional<double> temperature_c;     // the hottest metered GPU
  std::optional<double> power_w;           // summed over the metered GPUs
};

struct SettleCheck {
  bool settled = false;
  std::size_t samples = 0;                        // in the window
  std::optional<double> temp_slope_c_per_s;       // empty: no temperature readings
  std::optional<double> power_slope_per_s;        // fraction of the mean power per second
  std::string reason;                             // why not (empty when settled)
};

// The rule on samples ordered by time; only those within `rule.window_s` of the last one count.
SettleCheck check_settled(std::span<const SettleSample> samples, const SettleRule& rule);

// The rule on the sampler's own samples taken since `since_ns` (steady_clock ns): what
// wait_until_settled checks at each turn, for callers that keep their workload running themselves.
SettleCheck check_settled_since(const Sampler& sampler, std::int64_t since_ns, const SettleRule& rule);

struct SettleResult {
  double waited_s = 0;     // time spent in the wait (beyond what the caller ran before it)
  bool settled = false;    // false: the time limit ended the wait (or there was nothing to watch)
  bool observed = false;   // the sampler had readings to judge by
  SettleCheck last;        // the last check (slopes as reported)
  std::string describe() const;  // "settled in 3.2 s (T +0.02 C/s, P -0.3 %/s)" / "not settled after 60 s (...)"
};

// Runs `keep_busy` (one unit of the workload: a step, a command run) until the samples taken since
// `since_ns` (steady_clock ns: the knob change) satisfy the rule, or `rule.max_wait_s` passes, or
// `stop` says so. Without `keep_busy` it sleeps between checks (an idle GPU settling). No sampler or
// max_wait_s <= 0: returns at once, not observed.
SettleResult wait_until_settled(const std::shared_ptr<Sampler>& sampler, std::int64_t since_ns,
                                const SettleRule& rule, const std::function<void()>& keep_busy = {},
                                const std::function<bool()>& stop = {});

// Sleeps until every metered GPU reads at most `max_c` degrees C (or `timeout_s` passes; a warning
// then). Returns the seconds waited; 0 without a sampler or with max_c <= 0.
double cool_down(const std::shared_ptr<Sampler>& sampler, double max_c, double timeout_s);

}  // namespace cnnergy::telemetry
