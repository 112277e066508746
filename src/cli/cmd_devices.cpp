// `cnnergy devices`: the GPUs NVML sees, what each can measure (energy counter, instant/average
// power) and control (power-limit range, supported SM and memory clocks), with current readings.
// `--count-cuda` prints only the number of GPUs (0 without a driver), for scripts.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/args.hpp"
#include "cli/vocabulary.hpp"
#include "cli/telemetry_commands.hpp"
#include "core/log.hpp"
#include "core/json.hpp"
#include "telemetry/nvml.hpp"
#include "telemetry/rapl.hpp"

namespace cnnergy::cli {

namespace {


// Changing GPU settings needs root or CAP_SYS_ADMIN (bit 21 of the effective capability set).
bool can_change_gpu_settings() {
  if (::geteuid() == 0) return true;
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      const unsigned long long caps = std::stoull(line.substr(7), nullptr, 16);
      return (caps >> 21) & 1ull;
    }
  }
  return false;
}

std::string fmt_w(std::uint32_t mw) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f W", mw / 1000.0);
  return buf;
}

template <class T>
std::string opt_str(const std::optional<T>& v, const std::string& unit) {
  return v ? std::to_string(*v) + unit : "n/a";
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

struct DeviceReport {
  const telemetry::GpuDevice* dev;
  telemetry::GpuSnapshot snap;
  telemetry::GpuCapabilities caps;
  std::vector<std::uint32_t> mem_clocks, sm_clocks;
};

DeviceReport collect(const telemetry::GpuDevice& d) {
  DeviceReport r{&d, {}, {}, {}, {}};
  if (d.lost()) return r;
  r.snap = d.snapshot();
  r.caps = d.capabilities();
  r.mem_clocks = d.supported_mem_clocks_mhz();
  if (!r.mem_clocks.empty()) r.sm_clocks = d.supported_sm_clocks_mhz(r.mem_clocks.front());
  return r;
}

Json to_json(const DeviceReport& r) {
  const auto& d = *r.dev;
  Json g = Json::object();
  g["index"] = d.index();
  g["accessible"] = !d.lost();
  if (d.lost()) return g;
  g["name"] = d.name();
  g["uuid"] = d.uuid();
  g["pci_bus_id"] = d.pci_bus_id();
  const auto& s = r.snap;
  g["energy_mj"] = json_or_null(s.energy_mj);
  g["power_mw"] = json_or_null(s.power_mw);
  g["power_instant_mw"] = json_or_null(s.power_instant_mw);
  g["power_average_mw"] = json_or_null(s.power_average_mw);
  Json l = Json::object();
  l["current_mw"] = json_or_null(s.limits.current_mw);
  l["enforced_mw"] = json_or_null(s.limits.enforced_mw);
  l["default_mw"] = json_or_null(s.limits.default_mw);
  l["min_mw"] = json_or_null(s.limits.min_mw);
  l["max_mw"] = json_or_null(s.limits.max_mw);
  g["power_limit"] = l;
  Json c = Json::object();
  c["sm_mhz"] = json_or_null(s.clocks.sm_mhz);
  c["sm_max_mhz"] = json_or_null(s.clocks.sm_max_mhz);
  c["mem_mhz"] = json_or_null(s.clocks.mem_mhz);
  c["mem_max_mhz"] = json_or_null(s.clocks.mem_max_mhz);
  c["app_sm_mhz"] = json_or_null(s.clocks.app_sm_mhz);
  c["app_mem_mhz"] = json_or_null(s.clocks.app_mem_mhz);
  Json mem_list = Json::array(), sm_list = Json::array();
  for (auto f : r.mem_clocks) mem_list.push_back(f);
  for (auto f : r.sm_clocks) sm_list.push_back(f);
  c["supported_mem_mhz"] = mem_list;
  c["supported_sm_mhz"] = sm_list;
  g["clocks"] = c;
  g["utilization_gpu_percent"] = s.utilization ? Json(s.utilization->gpu_percent) : Json();
  g["utilization_memory_percent"] = s.utilization ? Json(s.utilization->memory_percent) : Json();
  g["memory_used_bytes"] = s.memory ? Json(s.memory->used_bytes) : Json();
  g["memory_total_bytes"] = s.memory ? Json(s.memory->total_bytes) : Json();
  g["temperature_c"] = json_or_null(s.temperature_c);
  Json reasons = Json::array();
  if (s.clock_event_reasons)
    for (const auto& n : telemetry::decode_clock_event_reasons(*s.clock_event_reasons))
      reasons.push_back(n);
  g["clock_event_reasons"] = s.clock_event_reasons ? reasons : Json();
  Json m = Json::object();
  m["energy_counter"] = r.caps.energy_counter;
  m["power_instant"] = r.caps.power_instant;
  m["power_average"] = r.caps.power_average;
  m["power_usage"] = r.caps.power_usage;
  m["clock_event_reasons"] = r.caps.clock_event_reasons;
  g["can_measure"] = m;
  Json k = Json::object();
  k["power_limit"] = r.caps.power_limit_range;
  k["sm_clock_lock"] = !r.sm_clocks.empty();
  k["memory_clock"] = !r.mem_clocks.empty();
  g["can_control"] = k;
  return g;
}

void print_text(const DeviceReport& r) {
  const auto& d = *r.dev;
  if (d.lost()) {
    std::printf("GPU %u: not accessible (lost, or no permission)\n", d.index());
    return;
  }
  const auto& s = r.snap;
  std::printf("GPU %u: %s\n", d.index(), d.name().c_str());
  std::printf("  uuid          %s\n  pci bus       %s\n", d.uuid().c_str(), d.pci_bus_id().c_str());
  std::string power = s.power_mw ? fmt_w(*s.power_mw) : "n/a";
  if (s.power_instant_mw) power += ", instant " + fmt_w(*s.power_instant_mw);
  if (s.power_average_mw) power += ", 1 s average " + fmt_w(*s.power_average_mw);
  std::printf("  power         %s\n", power.c_str());
  std::string limit = s.limits.current_mw ? fmt_w(*s.limits.current_mw) : "n/a";
  if (s.limits.default_mw) limit += " (default " + fmt_w(*s.limits.default_mw) + ")";
  if (s.limits.min_mw && s.limits.max_mw)
    limit += ", range " + fmt_w(*s.limits.min_mw) + " to " + fmt_w(*s.limits.max_mw);
  if (s.limits.enforced_mw) limit += ", enforced " + fmt_w(*s.limits.enforced_mw);
  std::printf("  power limit   %s\n", limit.c_str());
  std::printf("  energy        %s\n",
              s.energy_mj ? (std::to_string(*s.energy_mj) + " mJ since driver load").c_str()
                          : "no energy counter");
  std::printf(
      "  clocks        SM %s of %s, memory %s of %s\n", opt_str(s.clocks.sm_mhz, " MHz").c_str(),
      opt_str(s.clocks.sm_max_mhz, " MHz").c_str(), opt_str(s.clocks.mem_mhz, " MHz").c_str(),
      opt_str(s.clocks.mem_max_mhz, " MHz").c_str());
  if (s.utilization)
    std::printf("  utilisation   GPU %u %%, memory %u %%\n", s.utilization->gpu_percent,
                s.utilization->memory_percent);
  if (s.memory)
    std::printf("  memory        %.1f of %.1f GiB used\n", s.memory->used_bytes / 1073741824.0,
                s.memory->total_bytes / 1073741824.0);
  std::printf("  temperature   %s\n", opt_str(s.temperature_c, " C").c_str());
  if (s.clock_event_reasons) {
    const auto names = telemetry::decode_clock_event_reasons(*s.clock_event_reasons);
    std::printf("  clock events  %s\n", names.empty() ? "none" : join(names, ", ").c_str());
  }
  std::vector<std::string> can;
  if (r.caps.energy_counter) can.push_back("energy counter");
  if (r.caps.power_instant) can.push_back("instant power");
  if (r.caps.power_average) can.push_back("average power");
  if (r.caps.power_usage && !r.caps.power_average) can.push_back("power (nvmlDeviceGetPowerUsage)");
  std::printf("  measures      %s\n",
              can.empty() ? "nothing (time only)" : join(can, ", ").c_str());
  std::vector<std::string> ctl;
  if (r.caps.power_limit_range && s.limits.min_mw && s.limits.max_mw)
    ctl.push_back("power limit " + fmt_w(*s.limits.min_mw) + " to " + fmt_w(*s.limits.max_mw));
  if (!r.sm_clocks.empty())
    ctl.push_back("SM clock lock (" + std::to_string(r.sm_clocks.size()) + " clocks, " +
                  std::to_string(r.sm_clocks.back()) + " to " +
                  std::to_string(r.sm_clocks.front()) + " MHz)");
  if (!r.mem_clocks.empty()) {
    std::vector<std::string> m;
    for (auto f : r.mem_clocks) m.push_back(std::to_string(f));
    ctl.push_back("memory clock (" + join(m, ", ") + " MHz)");
  }
  std::printf("  controls      %s\n", ctl.empty() ? "nothing" : join(ctl, "; ").c_str());
}

}  // namespace

int run_devices(const std::vector<std::string>& args) {
  ArgParser p(
      "devices",
      "List the GPUs NVML sees: identity, current readings, what each can measure and control.");
  p.flag("count-cuda", "print only the number of GPUs NVML sees (0 without a driver)");
  declare_output_flags(p, "the inventory");
  p.implicit_value("json", "-", "use --format json (or --json FILE)");
  p.epilog("NVML is loaded from libnvidia-ml.so.1, or from $CNNERGY_NVML_LIBRARY when set.");
  if (!p.parse(args)) return 0;

  auto opened = telemetry::Nvml::open();
  if (p.get_flag("count-cuda")) {
    std::printf("%zu\n", opened.nvml ? opened.nvml->device_count() : std::size_t{0});
    return 0;
  }
  telemetry::RaplMeter rapl;
  const bool can_change = can_change_gpu_settings();
  std::vector<DeviceReport> reports;
  if (opened.nvml)
    for (const auto& d : opened.nvml->devices()) reports.push_back(collect(d));

  OutputSink sink(p);
  {
    Json out = Json::object();
    out["nvml_available"] = opened.nvml != nullptr;
    if (!opened.nvml) out["reason"] = opened.unavailable_reason;
    out["driver_version"] = opened.nvml ? Json(opened.nvml->driver_version()) : Json();
    out["nvml_version"] = opened.nvml ? Json(opened.nvml->nvml_version()) : Json();
    out["can_change_settings"] = can_change;
    Json gpus = Json::array();
    for (const auto& r : reports) gpus.push_back(to_json(r));
    out["gpus"] = gpus;
    Json cpu = Json::array();
    for (const auto& d : rapl.domains()) cpu.push_back(d.name);
    out["cpu_energy_domains"] = cpu;
    sink.finish(out, "gpus");
    if (sink.machine()) return 0;
  }
  if (!opened.nvml) {
    std::printf("no GPUs: %s\n", opened.unavailable_reason.c_str());
  } else {
    std::printf("NVML %s, driver %s (%s): %zu GPU%s\n", opened.nvml->nvml_version().c_str(),
                opened.nvml->driver_version().c_str(), opened.nvml->library_path().c_str(),
                opened.nvml->device_count(), opened.nvml->device_count() == 1 ? "" : "s");
    for (const auto& r : reports) print_text(r);
    std::printf("changing GPU settings needs root or CAP_SYS_ADMIN: %s\n",
                can_change ? "this process has it" : "this process does not have it");
  }
  std::vector<std::string> domains;
  for (const auto& d : rapl.domains()) domains.push_back(d.name);
  std::printf("CPU energy (RAPL): %s\n",
              domains.empty() ? "not readable here" : join(domains, ", ").c_str());
  return 0;
}

}  // namespace cnnergy::cli
