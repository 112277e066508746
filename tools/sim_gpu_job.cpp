// cnnergy-sim-job: a stand-in GPU job for the simulated (fake NVML) device, so that power-limit and
// clock sweeps can run end to end in CI. It marks the simulated GPU busy (the fake driver's load
// file), then "computes" a fixed number of cycles at whatever SM clock the simulated GPU runs at
// (read through NVML every 10 ms), so a lower power limit or a locked clock makes it slower exactly
// as a compute-bound kernel would; --mem-fraction makes part of the work clock-independent.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.hpp"
#include "core/errors.hpp"
#include "telemetry/nvml.hpp"

using namespace cnnergy;

namespace {
void write_load(const std::string& path, double load) {
  if (path.empty()) return;
  std::ofstream f(path + ".tmp");
  f << load << "\n";
  f.close();
  std::rename((path + ".tmp").c_str(), path.c_str());
}
}  // namespace

int main(int argc, char** argv) {
  try {
    cli::ArgParser p("sim-job", "Simulated compute-bound GPU job for the fake NVML device (CI sweeps).");
    p.option("gpu", "NVML index of the simulated GPU", "0");
    p.option("gcycles", "work in billions of SM cycles (1 = about half a second at 1980 MHz)", "1");
    p.option("mem-fraction", "share of the work that does not scale with the SM clock", "0.2");
    const char* lf = std::getenv("CNNERGY_FAKE_NVML_LOAD_FILE");
    p.option("load-file", "the fake driver's load file", lf ? std::string(lf) : std::string());
    if (!p.parse(std::vector<std::string>(argv + 1, argv + argc))) return 0;
    const auto gpu = static_cast<std::size_t>(p.get_int("gpu", 0, 1024));
    const double work = p.get_double("gcycles", 1e-6, 1e9) * 1e9;
    const double mem = p.get_double("mem-fraction", 0.0, 0.99);
    // Busy before the driver opens: it reads the load when it starts, so the job runs at the busy
    // clock from its first step instead of spending up to one sensor period at the idle clock.
    const std::string load_file = p.get("load-file");
    write_load(load_file, 1.0);
    struct Idle {  // marks the GPU idle again however the job ends
      std::string path;
      ~Idle() { write_load(path, 0.0); }
    } idle{load_file};
    auto opened = telemetry::Nvml::open();
    if (!opened.nvml) throw NotSupported("no NVML: " + opened.unavailable_reason);
    if (gpu >= opened.nvml->device_count()) throw InvalidArgument("no GPU " + std::to_string(gpu));
    const auto& dev = opened.nvml->device(gpu);
    const auto c0 = dev.clocks();
    const double max_mhz = c0.sm_max_mhz ? *c0.sm_max_mhz : 1980.0;
    double done = 0;
    auto last = std::chrono::steady_clock::now();
    while (done < work) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      const auto now = std::chrono::steady_clock::now();
      const double dt = std::chrono::duration<double>(now - last).count();
      last = now;
      const auto c = dev.clocks();
      const double mhz = c.sm_mhz ? *c.sm_mhz : max_mhz;
      // Work rate: the clock-bound part runs at the current clock, the memory-bound part at full rate.
      const double rate = 1e6 / ((1.0 - mem) / mhz + mem / max_mhz);
      done += rate * dt;
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "cnnergy-sim-job: error: %s\n", e.what());
    return e.exit_code();
  }
}
