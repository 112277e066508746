// Host memory limits (host_memory.hpp): /proc/meminfo, /proc/self/statm, getrlimit and the cgroup's
// memory files, read when asked (a CPU executor asks once per construction).
#include "core/host_memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "core/errors.hpp"

namespace cnnergy {
namespace {

// A cgroup's byte count: "max" (no limit) or a number; v1 writes a huge number for no limit.
std::optional<std::uint64_t> read_limit(const char* path) {
  std::ifstream in(path);
  std::string v;
  if (!(in >> v) || v == "max") return std::nullopt;
  try {
    const std::uint64_t n = std::stoull(v);
    if (n >= (std::uint64_t{1} << 60)) return std::nullopt;
    return n;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::uint64_t read_number(const char* path) {
  std::ifstream in(path);
  std::uint64_t n = 0;
  in >> n;
  return n;
}

// The page cache a cgroup can give back ("file" in v2's memory.stat, "total_cache" in v1's).
std::uint64_t reclaimable(const char* stat_path, const char* key) {
  std::ifstream in(stat_path);
  std::string k;
  std::uint64_t v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return 0;
}

}  // namespace

HostMemoryLimits read_host_memory_limits() {
  HostMemoryLimits l;
  {
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    std::uint64_t kib = 0;
    while (in >> key >> kib >> unit)
      if (key == "MemAvailable:") {
        l.mem_available_bytes = kib * 1024;
        break;
      }
  }
  if (auto max = read_limit("/sys/fs/cgroup/memory.max")) {  // cgroup v2 (a container sees its own)
    l.cgroup_max_bytes = max;
    const std::uint64_t current = read_number("/sys/fs/cgroup/memory.current");
    const std::uint64_t file = reclaimable("/sys/fs/cgroup/memory.stat", "file");
    l.cgroup_used_bytes = current > file ? current - file : 0;
  } else if (auto v1 = read_limit("/sys/fs/cgroup/memory/memory.limit_in_bytes")) {
    l.cgroup_max_bytes = v1;
    const std::uint64_t usage = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    const std::uint64_t cache = reclaimable("/sys/fs/cgroup/memory/memory.stat", "total_cache");
    l.cgroup_used_bytes = usage > cache ? usage - cache : 0;
  }
  rlimit r{};
  if (::getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY) {
    l.rlimit_as_bytes = static_cast<std::uint64_t>(r.rlim_cur);
    std::ifstream statm("/proc/self/statm");
    std::uint64_t pages = 0;
    statm >> pages;
    l.address_space_bytes = pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  }
  return l;
}

HostMemoryBudget host_memory_budget(const HostMemoryLimits& l) {
  HostMemoryBudget b;
  auto consider = [&](std::uint64_t available, const char* name) {
    if (!b.known || available < b.available_bytes) {
      b.known = true;
      b.available_bytes = available;
      b.limited_by = name;
    }
  };
  if (l.mem_available_bytes) consider(*l.mem_available_bytes, "MemAvailable");
  if (l.cgroup_max_bytes)
    consider(*l.cgroup_max_bytes > l.cgroup_used_bytes ? *l.cgroup_max_bytes - l.cgroup_used_bytes : 0,
             "cgroup memory.max");
  if (l.rlimit_as_bytes)
    consider(*l.rlimit_as_bytes > l.address_space_bytes ? *l.rlimit_as_bytes - l.address_space_bytes : 0, "RLIMIT_AS");
  return b;
}

std::string format_memory_bytes(std::uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  return buf;
}

void check_host_memory_fits(std::uint64_t needed_bytes, const HostMemoryBudget& budget, const std::string& what,
                            const std::string& detail) {
  if (!budget.known || needed_bytes <= budget.available_bytes) return;
  throw OutOfMemory(what + " does not fit in host memory: it needs at least " + format_memory_bytes(needed_bytes) +
                    " (" + std::to_string(needed_bytes) + " bytes), " + format_memory_bytes(budget.available_bytes) +
                    " available (" + budget.limited_by + ")" + (detail.empty() ? "" : "; " + detail));
}

}  // namespace cnnergy
