// CPU energy from RAPL through the Linux powercap tree (/sys/class/powercap/intel-rapl:N and, where
// a kernel offers it, amd-rapl:N). Counters wrap at max_energy_range_uj, so the meter keeps a
// running, unwrapped total that must be updated at least once per wrap period (the sampler does,
// every tick).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace cnnergy::telemetry {

struct RaplDomain {
  std::string path;  // e.g. /sys/class/powercap/intel-rapl:0
  std::string name;  // e.g. package-0 (from the `name` file)
  std::uint64_t max_energy_range_uj = 0;
};

class RaplMeter {
 public:
  // Scans `root` for top-level package domains (`*-rapl:N`, not subzones `:N:M`, not rapl-mmio,
  // which duplicates the package). Domains whose counter cannot be read are left out, so a machine
  // without RAPL or without permission yields an empty meter: available() is false, not an error.
  explicit RaplMeter(std::string root = "/sys/class/powercap");

  bool available() const { return !domains_.empty(); }
  const std::vector<RaplDomain>& domains() const { return domains_; }

  // Reads every domain and returns the unwrapped CPU energy (mJ) accumulated since construction,
  // summed over the domains; empty when unavailable. Thread-safe; call at least once per wrap
  // period (~60 s at 70 W for a 32-bit µJ counter).
  std::optional<double> total_mj();
  // The same for the DRAM subzones (`*-rapl:N:M` named "dram"), which total_mj() leaves out; empty
  // where the CPU or kernel has none (most AMD and client CPUs) or they are unreadable.
  std::optional<double> dram_total_mj();
  bool has_dram() const { return !dram_domains_.empty(); }

 private:
  std::optional<std::uint64_t> read_uj(const RaplDomain& d) const;
  void accumulate(const std::vector<RaplDomain>& domains, std::vector<std::uint64_t>& last, double& total_uj) const;

  std::vector<RaplDomain> domains_;
  std::mutex mutex_;
  std::vector<std::uint64_t> last_uj_;
  double total_uj_ = 0;
  std::vector<RaplDomain> dram_domains_;
  std::vector<std::uint64_t> dram_last_uj_;
  double dram_total_uj_ = 0;
};

}  // namespace cnnergy::telemetry
