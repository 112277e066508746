// RAPL meter: powercap scan, counter reads and wrap-around handling.
#include "telemetry/rapl.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

namespace cnnergy::telemetry {

namespace {

std::optional<std::string> read_line(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string s;
  if (!in || !std::getline(in, s)) return std::nullopt;
  return s;
}

std::optional<std::uint64_t> parse_u64(const std::optional<std::string>& s) {
  if (!s || s->empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s->c_str(), &end, 10);
  if (errno != 0 || end == s->c_str()) return std::nullopt;
  return v;
}

}  // namespace

RaplMeter::RaplMeter(std::string root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  // Top-level zones only: intel-rapl:0, amd-rapl:1; the subzones (intel-rapl:0:0, core/uncore/dram)
  // are parts of the package and would be counted twice.
  static const std::regex kZone(R"((intel|amd)-rapl:\d+)");
  static const std::regex kSubzone(R"((intel|amd)-rapl:\d+:\d+)");
  std::vector<RaplDomain> found;
  // Subzones sit inside their package's directory and, on most kernels, also as links at the top.
  std::vector<fs::path> subzone_dirs;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string leaf = entry.path().filename().string();
    if (std::regex_match(leaf, kSubzone)) subzone_dirs.push_back(entry.path());
    if (std::regex_match(leaf, kZone)) {
      std::error_code ec2;
      for (const auto& sub : fs::directory_iterator(entry.path(), ec2))
        if (std::regex_match(sub.path().filename().string(), kSubzone)) subzone_dirs.push_back(sub.path());
    }
    if (!std::regex_match(leaf, kZone)) continue;
    RaplDomain d;
    d.path = entry.path().string();
    d.name = read_line(entry.path() / "name").value_or(leaf);
    // psys covers the whole SoC including the packages: summing it with them would double count.
    if (d.name == "psys") continue;
    d.max_energy_range_uj = parse_u64(read_line(entry.path() / "max_energy_range_uj")).value_or(0);
    if (!read_uj(d) || d.max_energy_range_uj == 0)
      continue;  // unreadable (often root-only) or malformed
    found.push_back(std::move(d));
  }
  std::sort(found.begin(), found.end(),
            [](const RaplDomain& a, const RaplDomain& b) { return a.path < b.path; });
  domains_ = std::move(found);
  for (const auto& d : domains_) last_uj_.push_back(read_uj(d).value_or(0));
  std::sort(subzone_dirs.begin(), subzone_dirs.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
  for (const auto& dir : subzone_dirs) {
    RaplDomain d;
    d.path = dir.string();
    d.name = read_line(dir / "name").value_or("");
    d.max_energy_range_uj = parse_u64(read_line(dir / "max_energy_range_uj")).value_or(0);
    const bool seen = std::any_of(dram_domains_.begin(), dram_domains_.end(), [&](const RaplDomain& x) {
      return fs::path(x.path).filename() == dir.filename();
    });
    if (d.name != "dram" || seen || d.max_energy_range_uj == 0 || !read_uj(d)) continue;
    dram_last_uj_.push_back(*read_uj(d));
    dram_domains_.push_back(std::move(d));
  }
}

std::optional<std::uint64_t> RaplMeter::read_uj(const RaplDomain& d) const {
  return parse_u64(read_line(std::filesystem::path(d.path) / "energy_uj"));
}

void RaplMeter::accumulate(const std::vector<RaplDomain>& domains, std::vector<std::uint64_t>& last,
                           double& total_uj) const {
  for (std::size_t i = 0; i < domains.size(); ++i) {
    const auto now = read_uj(domains[i]);
    if (!now) continue;  // a transient read failure: the next read catches up
    const std::uint64_t prev = last[i];
    // One wrap at most between two reads: the counter restarts from 0 after max_energy_range_uj.
    const std::uint64_t range = domains[i].max_energy_range_uj;
    const std::uint64_t delta =
        *now >= prev ? *now - prev : (prev <= range ? range - prev + *now : *now);
    total_uj += static_cast<double>(delta);
    last[i] = *now;
  }
}

std::optional<double> RaplMeter::total_mj() {
  if (domains_.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  accumulate(domains_, last_uj_, total_uj_);
  return total_uj_ / 1000.0;
}

std::optional<double> RaplMeter::dram_total_mj() {
  if (dram_domains_.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  accumulate(dram_domains_, dram_last_uj_, dram_total_uj_);
  return dram_total_uj_ / 1000.0;
}

}  // namespace cnnergy::telemetry
