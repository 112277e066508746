// A small deterministic physical model of a GPU under a power cap or a locked SM clock, used to test
// and demonstrate the searches without a GPU: power(f) = static + memory + dynamic * f * V(f)^2,
// iteration time = memory-bound part + compute-bound part * f_max / f, the cap throttles the clock.
#pragma once

#include <algorithm>
#include <cmath>

namespace cnnergy::tune {

// One workload on one simulated GPU. Every quantity is per training iteration; the model is noise-free
// (tests add their own measurement noise so that the same model gives the true curve).
struct SimDeviceModel {
  double static_power_w = 60.0;     // leakage, fans, board: drawn whatever the clock
  double memory_power_w = 40.0;     // HBM/GDDR at a fixed memory clock
  double dynamic_power_w = 480.0;   // SM dynamic power at f_max and full voltage
  double f_max_mhz = 1980.0;
  double f_min_mhz = 345.0;
  double v_floor_frac = 0.62;       // the voltage stops falling below this fraction of V_max ...
  double v_slope = 0.75;            // ... and above it falls linearly: V/V_max = 1 - slope * (1 - f/f_max)
  double compute_fraction = 0.85;   // share of the iteration time at f_max that scales with 1/f
  double time_at_fmax_ms = 100.0;

  double voltage_frac(double f_mhz) const {
    return std::max(v_floor_frac, 1.0 - v_slope * (1.0 - f_mhz / f_max_mhz));
  }
  // Board power when the SMs run at f_mhz (W).
  double power_at_clock_w(double f_mhz) const {
    const double v = voltage_frac(f_mhz);
    // Compute-bound share of the time sets how busy the SMs are: memory stalls burn less dynamic power.
    const double busy = compute_fraction * f_max_mhz / f_mhz /
                        ((1.0 - compute_fraction) + compute_fraction * f_max_mhz / f_mhz);
    return static_power_w + memory_power_w + dynamic_power_w * (f_mhz / f_max_mhz) * v * v * (0.35 + 0.65 * busy);
  }
  double time_at_clock_ms(double f_mhz) const {
    return time_at_fmax_ms * ((1.0 - compute_fraction) + compute_fraction * f_max_mhz / f_mhz);
  }
  // The clock the power controller settles on under a cap: the highest clock whose power fits, never
  // below f_min (where the cap is simply not met, as real boards do).
  double clock_under_cap_mhz(double cap_w) const {
    if (power_at_clock_w(f_max_mhz) <= cap_w) return f_max_mhz;
    if (power_at_clock_w(f_min_mhz) >= cap_w) return f_min_mhz;
    double lo = f_min_mhz, hi = f_max_mhz;  // power rises with the clock: bisection
    for (int i = 0; i < 60; ++i) {
      const double mid = 0.5 * (lo + hi);
      (power_at_clock_w(mid) <= cap_w ? lo : hi) = mid;
    }
    return lo;
  }
  double time_at_cap_ms(double cap_w) const { return time_at_clock_ms(clock_under_cap_mhz(cap_w)); }
  double power_at_cap_w(double cap_w) const { return power_at_clock_w(clock_under_cap_mhz(cap_w)); }
  double energy_at_cap_mj(double cap_w) const { return power_at_cap_w(cap_w) * time_at_cap_ms(cap_w); }
  double energy_at_clock_mj(double f_mhz) const { return power_at_clock_w(f_mhz) * time_at_clock_ms(f_mhz); }
};

}  // namespace cnnergy::tune
