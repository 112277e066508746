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
  std::vector<RaplDomain> found;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string leaf = entry.path().filename().string();
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
}

std::optional<std::uint64_t> RaplMeter::read_uj(const RaplDomain& d) const {
  return parse_u64(read_line(std::filesystem::path(d.path) / "energy_uj"));
}

std::optional<double> RaplMeter::total_mj() {
  if (domains_.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t i = 0; i < domains_.size(); ++i) {
    const auto now = read_uj(domains_[i]);
    if (!now) continue;  // a transient read failure: the next read catches up
    const std::uint64_t prev = last_uj_[i];
    // One wrap at most between two reads: the counter restarts from 0 after max_energy_range_uj.
    const std::uint64_t range = domains_[i].max_energy_range_uj;
    const std::uint64_t delta =
        *now >= prev ? *now - prev : (prev <= range ? range - prev + *now : *now);
    total_uj_ += static_cast<double>(delta);
    last_uj_[i] = *now;
  }
  return total_uj_ / 1000.0;
}

}  // namespace cnnergy::telemetry
