// The simulation behind the fake NVML driver (fake_nvml.cpp): configuration from the environment,
// the per-GPU physical model, sensor snapshots at update ticks, and the persisted settings file.
// Internal to libnvidia-ml-fake.so; see fake_nvml.cpp for the model's description.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "telemetry/nvml_api.hpp"

struct nvmlDevice_st {
  unsigned index;
};

namespace cnnergy::fake_nvml {

inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

inline std::vector<double> parse_numbers(const std::string& text) {
  std::vector<double> out;
  std::string item;
  std::istringstream is(text);
  while (std::getline(is, item, ',')) {
    if (item.find_first_not_of(" \t\n") == std::string::npos) continue;
    out.push_back(std::strtod(item.c_str(), nullptr));
  }
  return out;
}

inline double unit_noise(unsigned index, std::int64_t tick) {  // deterministic in [-1, 1]
  std::uint64_t z = 0x9E3779B97F4A7C15ull * (static_cast<std::uint64_t>(tick) + 1) +
                    index * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / static_cast<double>(1ull << 52) - 1.0;
}

struct Settings {
  unsigned power_limit_mw = 0;
  unsigned sm_lock_min = 0, sm_lock_max = 0;    // 0: not locked
  unsigned mem_lock_min = 0, mem_lock_max = 0;  // 0: not locked
  unsigned app_mem_mhz = 0, app_sm_mhz = 0;     // 0: driver default
  bool operator==(const Settings&) const = default;
};

struct Segment {  // true power from t_ns on, energy at t_ns
  std::int64_t t_ns;
  double energy_mj;
  double power_w;
};

struct Sensors {  // what the driver reports between two ticks
  unsigned long long energy_mj = 0;
  unsigned power_instant_mw = 0, power_average_mw = 0;
  unsigned sm_mhz = 0, mem_mhz = 0;
  unsigned long long reasons = 0;
  unsigned util_gpu = 0, util_mem = 0, temperature_c = 0;
  unsigned long long mem_used_bytes = 0;
  unsigned pcie_tx_kb_s = 0, pcie_rx_kb_s = 0;
};

struct Gpu {
  nvmlDevice_st handle{};
  std::string uuid;
  Settings settings;
  double load = 0.0;
  std::int64_t phase_ns = 0;  // this GPU's ticks fall at t0 + phase + k * period
  std::int64_t next_tick = 0;
  std::int64_t tick_index = 0;
  std::vector<Segment> history;
  std::deque<std::pair<std::int64_t, double>> tick_energy;  // (t, E) for the 1 s average
  Sensors sensors;
  double nvlink_tx_kib = 0, nvlink_rx_kib = 0;  // cumulative, advanced at every tick
  bool lost = false;
  double temperature_c = 0;          // thermal model only: the die temperature now
  std::int64_t temperature_t_ns = 0;  // when temperature_c was last brought up to date
};

// The optional thermal model (CNNERGY_FAKE_NVML_THERMAL="tau_s,c_per_w,leak_w_per_c"): the die
// temperature relaxes towards kAmbientC + c_per_w * P with time constant tau_s, and leakage adds
// leak_w_per_c watts per degree above kAmbientC to the board power (the power cap included), so a
// hot GPU draws more and, at its cap, clocks lower. Off by default: temperature then follows power
// at once (kAmbientC + 0.06 W^-1 * P) and adds nothing.
struct Thermal {
  bool on = false;
  double tau_s = 20, c_per_w = 0.06, leak_w_per_c = 0;
  std::string file;  // shared state, so the metering process and the job's process agree
};
inline constexpr double kAmbientC = 30.0;

struct Config {
  unsigned count = 2;
  std::string name = "NVIDIA H200 (cnnergy fake)";
  std::int64_t update_ns = 100'000'000;
  int energy_read_us = 4000;
  double idle_w = 75, dyn_max_w = 975, mem_w = 40, noise = 0.01;
  unsigned limit_min_mw = 200'000, limit_max_mw = 700'000, limit_default_mw = 700'000;
  std::vector<unsigned> sm_clocks;   // ascending
  std::vector<unsigned> mem_clocks;  // ascending
  unsigned long long memory_total_mib = 143771;
  double pcie_peak_kb_s = 6.0e6, nvlink_peak_kib_s = 0;  // traffic at full load (0: no NVLink)
  std::vector<double> loads;
  std::string load_file, state_file;
  bool set_no_permission = false, set_not_supported = false;
  std::vector<std::string> unsupported;
  std::vector<unsigned> lost;
  nvmlReturn_t init_error = NVML_SUCCESS;
  Thermal thermal;
};

class FakeDriver {
 public:
  std::mutex mutex;
  int init_count = 0;
  Config cfg;
  std::vector<Gpu> gpus;
  std::int64_t t0 = 0;
  timespec state_mtime{};
  off_t state_size = -1;
  timespec load_mtime{};

  nvmlReturn_t init() {
    if (init_count > 0) {
      ++init_count;
      return NVML_SUCCESS;
    }
    read_config();
    if (cfg.init_error != NVML_SUCCESS) return cfg.init_error;
    gpus.assign(cfg.count, Gpu{});
    t0 = now_ns();
    for (unsigned i = 0; i < cfg.count; ++i) {
      Gpu& g = gpus[i];
      g.handle.index = i;
      char uuid[64];
      std::snprintf(uuid, sizeof uuid, "GPU-fa4e%04x-c0de-4e11-8000-%012x", i, 0x5eed0000u + i);
      g.uuid = uuid;
      g.settings.power_limit_mw = cfg.limit_default_mw;
      g.load = cfg.loads.empty() ? 0.0 : cfg.loads[std::min<std::size_t>(i, cfg.loads.size() - 1)];
      g.phase_ns = (static_cast<std::int64_t>(i) * 37'000'000) % cfg.update_ns;
      g.lost = std::find(cfg.lost.begin(), cfg.lost.end(), i) != cfg.lost.end();
    }
    load_state_file(true);
    read_load_file(true);
    for (auto& g : gpus) {
      g.history.push_back({t0, 1.0e6 * (g.handle.index + 1), 0.0});
      g.next_tick = t0 + g.phase_ns;
      g.temperature_c = kAmbientC;  // leakage-free first power, then its steady temperature
      g.history.back().power_w = true_power_w(g, nullptr, nullptr, nullptr);
      g.temperature_c = kAmbientC + cfg.thermal.c_per_w * g.history.back().power_w;
      g.temperature_t_ns = 0;
      if (cfg.thermal.on) {
        read_thermal_file(g);  // another process's state, when there is one, then brought up to now
        if (g.temperature_t_ns > 0 && g.temperature_t_ns < t0) {
          const double target = kAmbientC + cfg.thermal.c_per_w * g.history.back().power_w;
          const double dt_s = static_cast<double>(t0 - g.temperature_t_ns) * 1e-9;
          g.temperature_c = target + (g.temperature_c - target) * std::exp(-dt_s / cfg.thermal.tau_s);
        }
        g.history.back().power_w = true_power_w(g, nullptr, nullptr, nullptr);
      }
      g.temperature_t_ns = std::max(g.temperature_t_ns, t0);
      if (g.next_tick == t0) g.next_tick += cfg.update_ns;
      take_snapshot(g, t0);  // readings exist from the start
    }
    init_count = 1;
    return NVML_SUCCESS;
  }

  // GPU kinds (CNNERGY_FAKE_NVML_PROFILE): name, power model, power-limit range, clocks and memory
  // of an H200-like (the default), H100-like or A100-like board; the other variables override them.
  // The figures follow the public data sheets (TDP, boost and memory clocks, memory size); the
  // power split is a model, not a measurement.
  struct Profile {
    const char* key;
    const char* name;
    double idle_w, dyn_max_w, mem_w;
    const char* limits_w;  // min,max,default
    const char* sm_clocks;
    const char* mem_clocks;
    unsigned long long memory_total_mib;
    double pcie_peak_kb_s, nvlink_peak_kib_s;
  };
  static constexpr Profile kProfiles[] = {
      {"h200", "NVIDIA H200 (cnnergy fake)", 75, 975, 40, "200,700,700", "345,1980,15", "2619", 143771, 6.0e6, 4.0e7},
      {"h100", "NVIDIA H100 80GB HBM3 (cnnergy fake)", 70, 950, 40, "200,700,700", "345,1980,15", "2619", 81559, 6.0e6,
       4.0e7},
      {"a100", "NVIDIA A100-SXM4-80GB (cnnergy fake)", 55, 420, 30, "100,400,400", "210,1410,15", "1593", 81920, 3.0e6,
       2.0e7},
  };
  static const Profile& profile(const std::string& key) {
    for (const auto& p : kProfiles)
      if (key == p.key) return p;
    return kProfiles[0];  // unknown names fall back to the default (the name shows which it is)
  }

  void read_config() {
    cfg = Config{};
    const Profile& prof = profile(env_or("CNNERGY_FAKE_NVML_PROFILE", "h200"));
    cfg.idle_w = prof.idle_w, cfg.dyn_max_w = prof.dyn_max_w, cfg.mem_w = prof.mem_w;
    cfg.memory_total_mib = prof.memory_total_mib;
    cfg.pcie_peak_kb_s = prof.pcie_peak_kb_s, cfg.nvlink_peak_kib_s = prof.nvlink_peak_kib_s;
    cfg.count = static_cast<unsigned>(
        std::clamp(std::atoi(env_or("CNNERGY_FAKE_NVML_GPUS", "2").c_str()), 0, 16));
    cfg.name = env_or("CNNERGY_FAKE_NVML_NAME", prof.name);
    cfg.update_ns = static_cast<std::int64_t>(
        std::max(1.0, std::strtod(env_or("CNNERGY_FAKE_NVML_UPDATE_MS", "100").c_str(), nullptr)) *
        1e6);
    cfg.energy_read_us = static_cast<int>(
        std::max(0.0,
                 std::strtod(env_or("CNNERGY_FAKE_NVML_ENERGY_READ_MS", "4").c_str(), nullptr)) *
        1e3);
    if (auto p = parse_numbers(env_or("CNNERGY_FAKE_NVML_POWER_W", "")); p.size() == 3) {
      cfg.idle_w = p[0], cfg.dyn_max_w = p[1], cfg.mem_w = p[2];
    }
    cfg.noise = std::strtod(env_or("CNNERGY_FAKE_NVML_NOISE", "0.01").c_str(), nullptr);
    if (auto l = parse_numbers(env_or("CNNERGY_FAKE_NVML_LIMITS_W", prof.limits_w)); l.size() == 3) {
      cfg.limit_min_mw = static_cast<unsigned>(l[0] * 1000),
      cfg.limit_max_mw = static_cast<unsigned>(l[1] * 1000);
      cfg.limit_default_mw = static_cast<unsigned>(l[2] * 1000);
    }
    auto sm =
        parse_numbers(env_or("CNNERGY_FAKE_NVML_SM_CLOCKS", prof.sm_clocks));  // min, max, step
    if (sm.size() == 3 && sm[2] > 0)
      for (double f = sm[0]; f <= sm[1] + 1e-9; f += sm[2])
        cfg.sm_clocks.push_back(static_cast<unsigned>(f));
    if (cfg.sm_clocks.empty()) cfg.sm_clocks = {345, 1980};
    for (double f : parse_numbers(env_or("CNNERGY_FAKE_NVML_MEM_CLOCKS", prof.mem_clocks)))
      cfg.mem_clocks.push_back(static_cast<unsigned>(f));
    if (cfg.mem_clocks.empty()) cfg.mem_clocks = {2619};
    std::sort(cfg.mem_clocks.begin(), cfg.mem_clocks.end());
    if (auto th = parse_numbers(env_or("CNNERGY_FAKE_NVML_THERMAL", "")); th.size() == 3 && th[0] > 0) {
      cfg.thermal.on = true;
      cfg.thermal.tau_s = th[0], cfg.thermal.c_per_w = th[1], cfg.thermal.leak_w_per_c = th[2];
    }
    cfg.loads = parse_numbers(env_or("CNNERGY_FAKE_NVML_LOAD", ""));
    cfg.load_file = env_or("CNNERGY_FAKE_NVML_LOAD_FILE", "");
    cfg.state_file = env_or("CNNERGY_FAKE_NVML_STATE", "");
    cfg.thermal.file = cfg.state_file.empty() ? std::string() : cfg.state_file + ".thermal";
    std::istringstream fail(env_or("CNNERGY_FAKE_NVML_FAIL", ""));
    std::string tok;
    while (std::getline(fail, tok, ',')) {
      const auto colon = tok.find(':');
      const std::string key = tok.substr(0, colon),
                        value = colon == std::string::npos ? "" : tok.substr(colon + 1);
      if (key == "set" && value == "no_permission") cfg.set_no_permission = true;
      if (key == "set" && value == "not_supported") cfg.set_not_supported = true;
      if (key == "unsupported") cfg.unsupported.push_back(value);
      if (key == "lost") cfg.lost.push_back(static_cast<unsigned>(std::atoi(value.c_str())));
      if (key == "init" && value == "driver_not_loaded")
        cfg.init_error = NVML_ERROR_DRIVER_NOT_LOADED;
      if (key == "init" && value == "no_permission") cfg.init_error = NVML_ERROR_NO_PERMISSION;
    }
  }

  bool is_unsupported(const char* fn) const {
    return std::find(cfg.unsupported.begin(), cfg.unsupported.end(), fn) != cfg.unsupported.end();
  }

  // --- physics
  // -------------------------------------------------------------------------------------
  unsigned mem_clock(const Gpu& g) const {
    if (g.settings.mem_lock_max) return g.settings.mem_lock_max;
    if (g.settings.app_mem_mhz) return g.settings.app_mem_mhz;
    return cfg.mem_clocks.back();
  }

  double power_at(const Gpu& g, unsigned f, double util) const {
    const double fmin = cfg.sm_clocks.front(), fmax = cfg.sm_clocks.back();
    const double v = 0.70 + 0.30 * (fmax > fmin ? (f - fmin) / (fmax - fmin) : 1.0);
    const double fm = mem_clock(g), fm_max = cfg.mem_clocks.back();
    return cfg.idle_w + cfg.dyn_max_w * util * (f / fmax) * (v * v) +
           cfg.mem_w * util * (fm / fm_max) + leakage_w(g);
  }

  double leakage_w(const Gpu& g) const {
    return cfg.thermal.on ? cfg.thermal.leak_w_per_c * std::max(0.0, g.temperature_c - kAmbientC) : 0.0;
  }

  // --- thermal model (only with cfg.thermal.on)
  // Brings the temperature up to t: exact relaxation over each piece of the (piecewise constant) true
  // power since the last update. Another process's newer state (the shared file) is taken first.
  void advance_temperature(Gpu& g, std::int64_t t) {
    if (!cfg.thermal.on) return;
    read_thermal_file(g);
    std::size_t i = g.history.size();
    while (i > 1 && g.history[i - 1].t_ns > g.temperature_t_ns) --i;  // the piece in force at temperature_t_ns
    for (; i <= g.history.size() && g.temperature_t_ns < t; ++i) {
      const std::int64_t end = i < g.history.size() ? std::min(t, g.history[i].t_ns) : t;
      if (end <= g.temperature_t_ns) continue;
      const double target = kAmbientC + cfg.thermal.c_per_w * g.history[i - 1].power_w;
      const double dt_s = static_cast<double>(end - g.temperature_t_ns) * 1e-9;
      g.temperature_c = target + (g.temperature_c - target) * std::exp(-dt_s / cfg.thermal.tau_s);
      g.temperature_t_ns = end;
    }
    g.temperature_t_ns = std::max(g.temperature_t_ns, t);
    write_thermal_file();
  }

  // "UUID t_ns temperature_c" per GPU; steady_clock is system-wide, so times compare across processes.
  void read_thermal_file(Gpu& g) {
    if (cfg.thermal.file.empty()) return;
    std::ifstream in(cfg.thermal.file);
    std::string uuid;
    long long t = 0;
    double c = 0;
    while (in >> uuid >> t >> c)
      if (uuid == g.uuid && t > g.temperature_t_ns) g.temperature_c = c, g.temperature_t_ns = t;
  }

  void write_thermal_file() const {
    if (cfg.thermal.file.empty()) return;
    const std::string tmp = cfg.thermal.file + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::trunc);
      for (const auto& g : gpus) out << g.uuid << " " << g.temperature_t_ns << " " << g.temperature_c << "\n";
    }
    std::rename(tmp.c_str(), cfg.thermal.file.c_str());
  }

  // The operating point the GPU settles at with its settings and load (without sensor noise).
  double true_power_w(const Gpu& g, unsigned* sm_out, unsigned long long* reasons_out,
                      double* util_out) const {
    const double util = std::clamp(g.load, 0.0, 1.0);
    unsigned long long reasons = 0;
    unsigned target = cfg.sm_clocks.back();
    if (g.settings.sm_lock_max) {
      target = std::min(target, g.settings.sm_lock_max);
    } else if (g.settings.app_sm_mhz) {
      target = std::min(target, g.settings.app_sm_mhz);
      reasons |= kNvmlClocksEventApplicationsClocksSetting;
    }
    unsigned f = target;
    if (util <= 0.0) {
      f = g.settings.sm_lock_min ? g.settings.sm_lock_min : cfg.sm_clocks.front();
      reasons = kNvmlClocksEventGpuIdle;
    } else {
      auto it = std::upper_bound(cfg.sm_clocks.begin(), cfg.sm_clocks.end(), target);
      std::size_t i = it == cfg.sm_clocks.begin()
                          ? 0
                          : static_cast<std::size_t>(it - cfg.sm_clocks.begin()) - 1;
      f = cfg.sm_clocks[i];
      const double limit_w = g.settings.power_limit_mw / 1000.0;
      while (i > 0 && power_at(g, f, util) > limit_w) {  // the power cap wins over a locked minimum
        f = cfg.sm_clocks[--i];
        reasons |= kNvmlClocksEventSwPowerCap;
      }
    }
    if (sm_out) *sm_out = f;
    if (reasons_out) *reasons_out = reasons;
    if (util_out) *util_out = util;
    return power_at(g, f, util);
  }

  double noisy_power_w(const Gpu& g) const {
    return true_power_w(g, nullptr, nullptr, nullptr) *
           (1.0 + cfg.noise * unit_noise(g.handle.index, g.tick_index));
  }

  static double energy_at(const Gpu& g, std::int64_t t) {
    const Segment& s = g.history.back();
    return s.energy_mj + s.power_w * static_cast<double>(t - s.t_ns) * 1e-6;  // W * ns = 1e-6 mJ
  }

  void push_segment(Gpu& g, std::int64_t t, double power_w) {
    g.history.push_back({t, energy_at(g, t), power_w});
    if (g.history.size() > 400'000) g.history.erase(g.history.begin(), g.history.begin() + 100'000);
  }

  void take_snapshot(Gpu& g, std::int64_t t) {
    Sensors& s = g.sensors;
    const double e = energy_at(g, t);
    s.energy_mj = static_cast<unsigned long long>(e);
    s.power_instant_mw = static_cast<unsigned>(g.history.back().power_w * 1000.0);
    g.tick_energy.emplace_back(t, e);
    while (g.tick_energy.size() > 2 && t - g.tick_energy[1].first >= 1'000'000'000)
      g.tick_energy.pop_front();
    const auto& [t_old, e_old] = g.tick_energy.front();
    s.power_average_mw =
        t > t_old ? static_cast<unsigned>((e - e_old) / (static_cast<double>(t - t_old) * 1e-9))
                  : s.power_instant_mw;
    double util = 0;
    true_power_w(g, &s.sm_mhz, &s.reasons, &util);
    s.mem_mhz = mem_clock(g);
    s.util_gpu = static_cast<unsigned>(std::lround(util * 100));
    s.util_mem = static_cast<unsigned>(std::lround(util * 55));
    s.temperature_c = static_cast<unsigned>(cfg.thermal.on ? g.temperature_c
                                                           : kAmbientC + 0.06 * g.history.back().power_w);
    s.mem_used_bytes = (600ull << 20) + static_cast<unsigned long long>(
                                            util * 0.9 * static_cast<double>(cfg.memory_total_mib << 20));
    s.pcie_tx_kb_s = static_cast<unsigned>(0.25 * util * cfg.pcie_peak_kb_s);
    s.pcie_rx_kb_s = static_cast<unsigned>(0.5 * util * cfg.pcie_peak_kb_s);
    const double dt_s = static_cast<double>(cfg.update_ns) * 1e-9;
    g.nvlink_tx_kib += util * cfg.nvlink_peak_kib_s * dt_s;
    g.nvlink_rx_kib += util * cfg.nvlink_peak_kib_s * dt_s;
  }

  // Brings every GPU's simulation up to `now`: ticks in order, at the load the file holds now.
  void advance(std::int64_t now) {
    if (init_count == 0) return;
    load_state_file(false);
    bool tick_due = false;
    for (const auto& g : gpus) tick_due = tick_due || g.next_tick <= now;
    // The load file is read whole at every tick that falls due, not only when its mtime changed: file
    // times are coarse (one kernel tick, 4 ms here), so a job that marked the GPU busy within the
    // same tick as the previous job marked it idle went unseen, and that job then ran its whole
    // length at the idle clock (the "repetition 0 takes 1.2 s whatever the power limit" effect).
    if (tick_due) read_load_file(true);
    for (auto& g : gpus) {
      while (g.next_tick <= now) {
        const std::int64_t t = g.next_tick;
        ++g.tick_index;
        advance_temperature(g, t);  // the new piece's leakage follows the temperature reached
        push_segment(g, t, noisy_power_w(g));
        take_snapshot(g, t);
        g.next_tick += cfg.update_ns;
      }
    }
  }

  // An immediate change of the operating point (new load or setting): new true power from now.
  void operating_point_changed(Gpu& g, std::int64_t now) {
    advance_temperature(g, now);
    push_segment(g, now, noisy_power_w(g));
  }

  // --- persisted settings
  // --------------------------------------------------------------------------
  static std::string format_settings(const std::string& uuid, const Settings& s) {
    std::ostringstream os;
    os << uuid << " power_limit_mw=" << s.power_limit_mw << " sm_lock=" << s.sm_lock_min << ","
       << s.sm_lock_max << " mem_lock=" << s.mem_lock_min << "," << s.mem_lock_max
       << " app=" << s.app_mem_mhz << "," << s.app_sm_mhz;
    return os.str();
  }

  static bool parse_settings(const std::string& line, std::string& uuid, Settings& s) {
    std::istringstream is(line);
    std::string tok;
    if (!(is >> uuid) || uuid.rfind("GPU-", 0) != 0) return false;
    while (is >> tok) {
      unsigned a = 0, b = 0;
      if (std::sscanf(tok.c_str(), "power_limit_mw=%u", &a) == 1)
        s.power_limit_mw = a;
      else if (std::sscanf(tok.c_str(), "sm_lock=%u,%u", &a, &b) == 2)
        s.sm_lock_min = a, s.sm_lock_max = b;
      else if (std::sscanf(tok.c_str(), "mem_lock=%u,%u", &a, &b) == 2)
        s.mem_lock_min = a, s.mem_lock_max = b;
      else if (std::sscanf(tok.c_str(), "app=%u,%u", &a, &b) == 2)
        s.app_mem_mhz = a, s.app_sm_mhz = b;
    }
    return true;
  }

  std::map<std::string, Settings> read_state_lines() const {
    std::map<std::string, Settings> out;
    std::ifstream in(cfg.state_file);
    std::string line;
    while (std::getline(in, line)) {
      std::string uuid;
      Settings s;
      if (parse_settings(line, uuid, s)) out[uuid] = s;
    }
    return out;
  }

  void load_state_file(bool force) {
    if (cfg.state_file.empty()) return;
    struct stat st {};
    if (::stat(cfg.state_file.c_str(), &st) != 0) return;
    if (!force && st.st_mtim.tv_sec == state_mtime.tv_sec &&
        st.st_mtim.tv_nsec == state_mtime.tv_nsec && st.st_size == state_size)
      return;
    state_mtime = st.st_mtim;
    state_size = st.st_size;
    const auto lines = read_state_lines();
    const std::int64_t now = now_ns();
    for (auto& g : gpus) {
      auto it = lines.find(g.uuid);
      if (it == lines.end() || it->second == g.settings) continue;
      g.settings = it->second;
      if (!force) operating_point_changed(g, now);
    }
  }

  // Read-modify-write of this GPU's line under an exclusive lock, replaced atomically.
  void save_settings(const Gpu& g) {
    if (cfg.state_file.empty()) return;
    const std::string lock_path = cfg.state_file + ".lock";
    const int lock_fd = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (lock_fd >= 0) ::flock(lock_fd, LOCK_EX);
    auto lines = read_state_lines();
    lines[g.uuid] = g.settings;
    const std::string tmp = cfg.state_file + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << "# cnnergy fake NVML device settings (one line per GPU UUID)\n";
      for (const auto& [uuid, s] : lines) out << format_settings(uuid, s) << "\n";
    }
    std::rename(tmp.c_str(), cfg.state_file.c_str());
    struct stat st {};
    if (::stat(cfg.state_file.c_str(), &st) == 0) state_mtime = st.st_mtim, state_size = st.st_size;
    if (lock_fd >= 0) ::close(lock_fd);  // releases the flock
  }

  void read_load_file(bool force) {
    if (cfg.load_file.empty()) return;
    struct stat st {};
    if (::stat(cfg.load_file.c_str(), &st) != 0) return;
    if (!force && st.st_mtim.tv_sec == load_mtime.tv_sec &&
        st.st_mtim.tv_nsec == load_mtime.tv_nsec)
      return;
    load_mtime = st.st_mtim;
    std::ifstream in(cfg.load_file);
    std::stringstream ss;
    ss << in.rdbuf();
    const auto loads = parse_numbers(ss.str());
    if (loads.empty()) return;
    for (auto& g : gpus) g.load = loads[std::min<std::size_t>(g.handle.index, loads.size() - 1)];
  }
};

// The one driver instance of the process (a C-ABI driver's state is process-wide by nature).
inline FakeDriver& fake() {
  static FakeDriver driver;
  return driver;
}

}  // namespace cnnergy::fake_nvml
