// The host memory a process may still use, from every limit the OS applies (MemAvailable, the cgroup's
// memory.max, RLIMIT_AS), and the check that turns a CPU allocation that cannot fit into a typed
// "does not fit" before anything is allocated (an over-committed allocation is otherwise killed by
// the kernel's OOM killer the moment its pages are touched, not refused).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace cnnergy {

// What the OS says, each absent where it sets no limit or cannot be read.
struct HostMemoryLimits {
  std::optional<std::uint64_t> mem_available_bytes;  // /proc/meminfo MemAvailable
  std::optional<std::uint64_t> cgroup_max_bytes;     // cgroup v2 memory.max (v1 memory.limit_in_bytes)
  std::uint64_t cgroup_used_bytes = 0;               // its memory.current less reclaimable page cache
  std::optional<std::uint64_t> rlimit_as_bytes;      // RLIMIT_AS soft limit
  std::uint64_t address_space_bytes = 0;             // the process's mapped address space (VmSize)
};

// The tightest of the limits: bytes still available and which limit gives them. known == false when
// no limit could be read (the check then lets the allocation try).
struct HostMemoryBudget {
  bool known = false;
  std::uint64_t available_bytes = 0;
  std::string limited_by;  // "MemAvailable", "cgroup memory.max", "RLIMIT_AS", or a test's name
};

HostMemoryLimits read_host_memory_limits();  // from /proc and /sys/fs/cgroup
HostMemoryBudget host_memory_budget(const HostMemoryLimits& limits);
inline HostMemoryBudget host_memory_budget() { return host_memory_budget(read_host_memory_limits()); }

// "12.3 GiB", "512.0 MiB", "640 B".
std::string format_memory_bytes(std::uint64_t bytes);

// Throws OutOfMemory "<what> does not fit in host memory: it needs at least N, A available (<limit>);
// <detail>" when needed_bytes > budget.available_bytes; nothing when the budget is unknown.
void check_host_memory_fits(std::uint64_t needed_bytes, const HostMemoryBudget& budget, const std::string& what,
                            const std::string& detail = "");

}  // namespace cnnergy
