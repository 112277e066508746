// A CPU batch that does not fit host memory is refused before it is allocated (issue 22): the budget
// from the OS limits (the tightest of MemAvailable, cgroup memory.max and RLIMIT_AS), and the executor's
// two checks with an injected budget — the lower bound before binding and the planned arena after —
// exact to the byte, with nothing large allocated on the way.
#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "core/host_memory.hpp"
#include "net/zoo/zoo.hpp"
#include "net_testing.hpp"

using namespace cnnergy;
using namespace cnnergy::test;

namespace {

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

HostMemoryBudget budget_of(std::uint64_t bytes) {
  HostMemoryBudget b;
  b.known = true;
  b.available_bytes = bytes;
  b.limited_by = "test limit";
  return b;
}

std::string error_of(const Graph& g, Backend& backend, ExecutorOptions o) {
  try {
    Executor ex(g, backend, o);
  } catch (const OutOfMemory& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(HostMemory, TheTightestLimitGivesTheBudget) {
  HostMemoryLimits l;
  EXPECT_FALSE(host_memory_budget(l).known);  // nothing readable: no check
  l.mem_available_bytes = 20 * kGiB;
  auto b = host_memory_budget(l);
  EXPECT_TRUE(b.known);
  EXPECT_EQ(b.available_bytes, 20 * kGiB);
  EXPECT_EQ(b.limited_by, "MemAvailable");
  l.cgroup_max_bytes = 8 * kGiB;  // a container limited below the machine's free memory
  l.cgroup_used_bytes = 3 * kGiB;
  b = host_memory_budget(l);
  EXPECT_EQ(b.available_bytes, 5 * kGiB);
  EXPECT_EQ(b.limited_by, "cgroup memory.max");
  l.rlimit_as_bytes = 6 * kGiB;  // ulimit -v: what is left of the address space
  l.address_space_bytes = 2 * kGiB;
  b = host_memory_budget(l);
  EXPECT_EQ(b.available_bytes, 4 * kGiB);
  EXPECT_EQ(b.limited_by, "RLIMIT_AS");
  l.cgroup_used_bytes = 9 * kGiB;  // already over the limit: nothing left
  EXPECT_EQ(host_memory_budget(l).available_bytes, 0u);
}

TEST(HostMemory, TheOsBudgetIsReadHere) {
  const HostMemoryBudget b = host_memory_budget();
  ASSERT_TRUE(b.known) << "no /proc/meminfo MemAvailable";
  EXPECT_GT(b.available_bytes, 0u);
  EXPECT_NO_THROW(check_host_memory_fits(1, b, "one byte"));
}

TEST(HostMemory, CheckNamesNeededAndAvailableBytes) {
  EXPECT_NO_THROW(check_host_memory_fits(100, budget_of(100), "x"));
  EXPECT_NO_THROW(check_host_memory_fits(std::uint64_t{1} << 62, HostMemoryBudget{}, "unknown budget"));
  try {
    check_host_memory_fits(3 * kGiB, budget_of(kGiB), "batch 9", "detail");
    FAIL() << "3 GiB fitted in 1 GiB";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(std::string(e.what()),
              "batch 9 does not fit in host memory: it needs at least 3.0 GiB (3221225472 bytes), "
              "1.0 GiB available (test limit); detail");
  }
  EXPECT_EQ(format_memory_bytes(640), "640 B");
  EXPECT_EQ(format_memory_bytes(1536 * 1024), "1.5 MiB");
}

// The planned bytes, measured on an executor that fits: the budget equal to them builds, one byte less
// is refused by the arena check (after binding, before the arena), with the bytes in the message.
TEST(HostMemory, ExecutorRefusesTheArenaThatDoesNotFitToTheByte) {
  const auto graph = build_model("lenet5");
  const auto backend = cpu_backend();
  for (const bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "inference");
    ExecutorOptions o;
    o.batch_size = 32;
    o.training = training;
    std::uint64_t needed = 0;
    {
      const std::size_t before = backend->memory_stats().in_use_bytes;
      Executor ex(*graph, *backend, o);
      needed = backend->memory_stats().in_use_bytes - before;  // binding, then the arena
      EXPECT_GT(needed, ex.memory().activation_bytes);
    }
    o.host_memory = budget_of(needed);
    EXPECT_EQ(error_of(*graph, *backend, o), "");
    o.host_memory = budget_of(needed - 1);
    const std::string err = error_of(*graph, *backend, o);
    EXPECT_NE(err.find("batch 32 of lenet5"), std::string::npos) << err;
    EXPECT_NE(err.find("does not fit in host memory: it needs at least"), std::string::npos) << err;
    EXPECT_NE(err.find("(" + std::to_string(needed) + " bytes)"), std::string::npos) << err;
    EXPECT_NE(err.find("as planned"), std::string::npos) << err;  // the arena check, not the lower bound
    EXPECT_EQ(backend->memory_stats().in_use_bytes, 0u);             // what binding took is given back
  }
}

// An absurd batch is refused before binding: nothing batch-sized is allocated (the backend's peak
// stays at what the small executor above needed), and it takes no time.
TEST(HostMemory, AnAbsurdBatchIsRefusedBeforeAnythingIsAllocated) {
  const auto graph = build_model("vgg16");
  const auto backend = cpu_backend();
  ExecutorOptions o;
  o.batch_size = 100000;
  o.host_memory = budget_of(16 * kGiB);
  const std::string err = error_of(*graph, *backend, o);
  EXPECT_NE(err.find("batch 100000 of vgg16 (training) does not fit in host memory"), std::string::npos) << err;
  EXPECT_NE(err.find("16.0 GiB available (test limit)"), std::string::npos) << err;
  EXPECT_NE(err.find("the output of layer 'features.0' alone takes 1.2 TiB"), std::string::npos) << err;
  EXPECT_EQ(backend->memory_stats().peak_bytes, 0u);  // not even the parameters were allocated
  // The same with the OS's own budget (no machine running these tests has 1.2 TiB free).
  o.host_memory.reset();
  EXPECT_NE(error_of(*graph, *backend, o).find("does not fit in host memory"), std::string::npos);
  EXPECT_EQ(backend->memory_stats().peak_bytes, 0u);
}
