// The counter profiler's derived metrics (occupancy, IPC, warp execution efficiency, sectors per
// request, shared efficiency, DRAM bytes and throughput) from raw perfworks values, including the
// missing and zero cases; and that opening the profiler where it cannot run gives a reason.
#include <gtest/gtest.h>

#include <map>

#include "backend/ops.hpp"
#include "convbench/counter_profiler.hpp"

namespace cnnergy::convbench {
namespace {

std::map<std::string, double> by_name(const std::vector<DerivedMetric>& metrics) {
  std::map<std::string, double> out;
  for (const auto& m : metrics) {
    EXPECT_FALSE(m.unit.empty()) << m.name;
    out[m.name] = m.value;
  }
  return out;
}

TEST(CounterMetrics, DerivedValuesFollowTheirFormulas) {
  const std::map<std::string, double> raw = {
      {"gpu__time_duration.sum", 2.0e6},  // ns
      {"sm__warps_active.avg.pct_of_peak_sustained_active", 41.5},
      {"sm__inst_executed.avg.per_cycle_active", 1.75},
      {"smsp__inst_executed.sum", 1000},
      {"smsp__thread_inst_executed.sum", 24000},
      {"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", 800},
      {"l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", 100},
      {"l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", 400},
      {"l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", 100},
      {"l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", 500},
      {"l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", 125},
      {"dram__bytes_read.sum", 3.0e9},
      {"dram__bytes_write.sum", 1.0e9},
      {"dram__throughput.avg.pct_of_peak_sustained_elapsed", 55.0},
      {"sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", 12.5},
  };
  auto d = by_name(derive_metrics(raw, 4.0));  // the call timed at 4 ms
  EXPECT_DOUBLE_EQ(d.at("achieved_occupancy_pct"), 41.5);
  EXPECT_DOUBLE_EQ(d.at("ipc_per_sm"), 1.75);
  EXPECT_DOUBLE_EQ(d.at("warp_execution_efficiency_pct"), 75.0);  // 24 of 32 threads per instruction
  EXPECT_DOUBLE_EQ(d.at("global_load_sectors_per_request"), 8.0);
  EXPECT_DOUBLE_EQ(d.at("global_store_sectors_per_request"), 4.0);
  EXPECT_DOUBLE_EQ(d.at("shared_bank_conflicts"), 125);
  EXPECT_DOUBLE_EQ(d.at("shared_efficiency_pct"), 75.0);
  EXPECT_DOUBLE_EQ(d.at("dram_read_bytes"), 3.0e9);
  EXPECT_DOUBLE_EQ(d.at("dram_write_bytes"), 1.0e9);
  EXPECT_DOUBLE_EQ(d.at("dram_throughput_pct"), 55.0);
  EXPECT_DOUBLE_EQ(d.at("range_duration_ms"), 2.0);
  EXPECT_DOUBLE_EQ(d.at("dram_gb_per_s"), 1000.0);  // 4 GB in the call's 4 ms
  EXPECT_DOUBLE_EQ(d.at("tensor_pipe_active_pct"), 12.5);
  EXPECT_EQ(d.size(), 13u);
}

TEST(CounterMetrics, MissingOrZeroInputsLeaveTheirMetricOut) {
  EXPECT_TRUE(derive_metrics({}).empty());
  auto d = by_name(derive_metrics({{"smsp__inst_executed.sum", 0},
                                   {"smsp__thread_inst_executed.sum", 0},
                                   {"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", 0},
                                   {"l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", 0},
                                   {"dram__bytes_read.sum", 10}}));
  EXPECT_FALSE(d.count("warp_execution_efficiency_pct"));     // no instruction executed
  EXPECT_FALSE(d.count("global_load_sectors_per_request"));   // no request
  EXPECT_TRUE(d.count("dram_read_bytes"));
  EXPECT_FALSE(d.count("dram_gb_per_s"));                     // no write bytes, no call time
  EXPECT_EQ(d.size(), 1u);
  auto t = by_name(derive_metrics({{"dram__bytes_read.sum", 1e9}, {"dram__bytes_write.sum", 1e9}}));
  EXPECT_FALSE(t.count("dram_gb_per_s"));  // bytes without the call's time
  // More conflicts than wavefronts (a counter skew) cannot make the efficiency negative.
  auto s = by_name(derive_metrics({{"l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", 10},
                                   {"l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", 12}}));
  EXPECT_DOUBLE_EQ(s.at("shared_efficiency_pct"), 0.0);
}

TEST(CounterMetrics, EveryMetricAskedForIsNamedOnce) {
  const auto& names = counter_metric_names();
  EXPECT_GE(names.size(), 10u);
  for (std::size_t i = 0; i < names.size(); ++i)
    for (std::size_t j = i + 1; j < names.size(); ++j) EXPECT_NE(names[i], names[j]);
}

TEST(CounterMetrics, OpeningWithoutAUsableGpuGivesAReason) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present: test_convbench_cuda covers the profiler";
  std::string reason;
  auto profiler = open_counter_profiler(reason);
  EXPECT_EQ(profiler, nullptr);
  EXPECT_FALSE(reason.empty());
}

}  // namespace
}  // namespace cnnergy::convbench
