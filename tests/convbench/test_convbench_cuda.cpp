// The convolution study on a GPU with cuDNN's names (skips without a GPU): every legacy algorithm of
// each direction, the graph policies and the own:* names get a status; ok cells have consistent
// time and TFLOP/s and say what ran; kernel tracing lists kernels or says why not; energy windows
// give joules where NVML reads them; the counter profiler reads a copy's DRAM bytes as the bytes it
// moves and --metrics full gives every ok cell its counters (skipped where the GPU's counters are
// not open to this user).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "backend/cuda/cuda_backend.hpp"
#include "convbench/counter_profiler.hpp"
#include "convbench/study.hpp"
#include "core/errors.hpp"

namespace cnnergy::convbench {
namespace {

class ConvbenchCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA GPU on this machine";
  }
};

TEST_F(ConvbenchCuda, EveryCudnnNameGetsAStatusAndOkCellsAreConsistent) {
  const std::vector<ConvProblem> problems = {parse_problem("n=8,c=32,h=28,w=28,k=64,r=3,s=3,pad=1"),
                                             parse_problem("n=4,c=16,h=15,w=15,k=32,r=5,s=5,stride=2,pad=2")};
  StudyOptions o;
  o.device = Device{DeviceKind::kCuda, 0};
  o.precisions = {"fp32", "bf16"};
  o.layouts = {Layout::kNCHW, Layout::kNHWC};
  o.repetitions = 5;
  o.window_s = 0;
  o.metrics = MetricsLevel::kKernels;
  o.workspace_limit_bytes = std::size_t{1} << 30;
  const StudyResult r = run_study(problems, o);
  EXPECT_EQ(r.backend, "cuda");
  const std::set<std::string> statuses = {kStatusOk, kStatusUnsupported, kStatusDoesNotFit, kStatusFailed};
  std::set<std::string> ok_directions;
  std::set<std::string> names;
  for (const Cell& c : r.cells) {
    names.insert(c.implementation);
    ASSERT_TRUE(statuses.count(c.status)) << c.status;
    EXPECT_NE(c.status, kStatusFailed) << c.implementation << " " << c.direction << ": " << c.detail;
    if (c.status != kStatusOk) {
      EXPECT_FALSE(c.detail.empty()) << c.implementation << " " << c.direction;
      continue;
    }
    ok_directions.insert(c.direction + " " + c.precision + " " + c.layout);
    EXPECT_GT(c.time_ms.median, 0);
    const double flops = problem_flops(problems[c.problem].desc);
    EXPECT_NEAR(c.tflops, flops / (c.time_ms.median * 1e9), 1e-9 * c.tflops);
    EXPECT_FALSE(c.ran.empty()) << c.implementation;
    if (r.peaks) {
      EXPECT_TRUE(c.percent_of_peak.has_value());
    }
    ASSERT_TRUE(c.kernels.has_value());
    if (c.kernels->counters.rfind("unavailable: the activity flush", 0) != 0 && !c.kernels->kernels.empty()) {
      double share = 0;
      for (const auto& k : c.kernels->kernels) {
        share += k.share;
        EXPECT_GT(k.launches, 0);
        EXPECT_GT(k.block_threads, 0);
      }
      EXPECT_NEAR(share, 1.0, 1e-6);
    } else {
      EXPECT_EQ(c.kernels->counters.rfind("unavailable: ", 0), 0u) << c.kernels->counters;
    }
  }
  EXPECT_EQ(ok_directions.size(), 3u * 2u * 2u);  // something runs every direction x precision x layout
  EXPECT_TRUE(names.count("implicit_precomp_gemm"));
  EXPECT_TRUE(names.count("algo_1"));
  EXPECT_TRUE(names.count("graph_find"));
  EXPECT_TRUE(names.count("own:implicit_gemm"));
  EXPECT_FALSE(r.transfers.empty());
  for (const auto& t : r.transfers) EXPECT_GT(t.gb_per_s, 0);
}

// --graph-engines all: a row per graph-API engine configuration after the named implementations;
// each runs (ok) and the engine it reports is the one its row names.
TEST_F(ConvbenchCuda, GraphEngineRowsRunTheEngineTheyName) {
  StudyOptions o;
  o.device = Device{DeviceKind::kCuda, 0};
  o.implementations = {"implicit_gemm"};
  o.graph_engines = true;
  o.precisions = {"fp32", "bf16"};
  o.layouts = {Layout::kNHWC};
  o.repetitions = 3;
  o.window_s = 0;
  o.transfers = false;
  const StudyResult r = run_study({parse_problem("n=8,c=32,h=28,w=28,k=64,r=3,s=3,pad=1")}, o);
  std::set<std::string> engine_rows;
  for (const Cell& c : r.cells) {
    if (c.implementation.rfind("graph:eng", 0) != 0) continue;
    engine_rows.insert(c.direction + " " + c.precision);
    EXPECT_EQ(c.status, kStatusOk) << c.implementation << " " << c.direction << " " << c.precision << ": " << c.detail;
    if (c.status == kStatusOk) {
      EXPECT_EQ(c.ran, c.implementation);
    }
  }
  EXPECT_EQ(engine_rows.size(), 3u * 2u);  // engines for every direction x precision
  EXPECT_TRUE(r.notes.empty() || r.notes.front().find("graph engines not listed") == std::string::npos);
}

TEST_F(ConvbenchCuda, EnergyWindowsGiveJoulesWhereNvmlReadsThem) {
  StudyOptions o;
  o.device = Device{DeviceKind::kCuda, 0};
  o.implementations = {"implicit_precomp_gemm"};
  o.directions = {"forward"};
  o.window_s = 0.5;
  o.windows = 2;
  o.transfers = false;
  const StudyResult r = run_study({parse_problem("n=32,c=64,h=56,w=56,k=64,r=3,s=3,pad=1")}, o);
  ASSERT_EQ(r.cells.size(), 1u);
  const Cell& c = r.cells.front();
  ASSERT_EQ(c.status, kStatusOk) << c.detail;
  if (r.energy_source.empty()) GTEST_SKIP() << "no NVML energy here: " << c.energy_note;
  ASSERT_TRUE(c.joules_per_call.has_value()) << c.energy_note;
  EXPECT_GT(c.joules_per_call->median, 0);
  ASSERT_TRUE(c.max_batch.has_value());
  EXPECT_GT(*c.max_batch, 32);
}


// Reasons that mean "this machine does not let us read counters" (not a defect of ours).
bool counters_closed(const std::string& reason) {
  return reason.find("INSUFFICIENT_PRIVILEGES") != std::string::npos ||
         reason.find("NOT_SUPPORTED") != std::string::npos || reason.find("VIRTUALIZED") != std::string::npos;
}

TEST_F(ConvbenchCuda, CounterProfilerReadsACopysDramTraffic) {
  BackendOptions bo;
  bo.device = Device{DeviceKind::kCuda, 0};
  auto b = create_backend(bo);
  // A conversion kernel (fp32 -> bf16, not a memcpy): 256 MiB read, 128 MiB written, several times
  // the H100's / H200's L2, so the bytes go to and from DRAM.
  const std::int64_t n = std::int64_t{64} << 20;
  const Tensor x = b->alloc(Shape{n}, DType::kF32, Layout::kNCHW);
  const Tensor y = b->alloc(Shape{n}, DType::kBF16, Layout::kNCHW);
  b->fill(x, 1.0f);
  b->fill(y, 0.0f);
  b->synchronize();
  std::string reason;
  auto profiler = open_counter_profiler(reason);
  if (!profiler && counters_closed(reason)) GTEST_SKIP() << "counters not readable here: " << reason;
  ASSERT_TRUE(profiler) << reason;
  CounterSet set;
  try {
    set = profiler->measure([&] { b->copy(x, y); }, [&] { b->synchronize(); });
  } catch (const Error& e) {
    if (counters_closed(e.what())) GTEST_SKIP() << "counters not readable here: " << e.what();
    FAIL() << e.what();
  }
  EXPECT_GE(set.passes, 1);
  std::map<std::string, double> derived;
  for (const auto& m : derive_metrics(set.raw)) derived[m.name] = m.value;
  const double read_bytes = static_cast<double>(n) * 4, write_bytes = static_cast<double>(n) * 2;
  ASSERT_TRUE(derived.count("dram_read_bytes"));
  ASSERT_TRUE(derived.count("dram_write_bytes"));
  EXPECT_NEAR(derived["dram_read_bytes"], read_bytes, 0.15 * read_bytes);
  EXPECT_NEAR(derived["dram_write_bytes"], write_bytes, 0.15 * write_bytes);
  ASSERT_TRUE(derived.count("achieved_occupancy_pct"));
  EXPECT_GT(derived["achieved_occupancy_pct"], 0);
  EXPECT_LE(derived["achieved_occupancy_pct"], 100);
  ASSERT_TRUE(derived.count("warp_execution_efficiency_pct"));
  EXPECT_GT(derived["warp_execution_efficiency_pct"], 90);  // a copy's warps run full
  EXPECT_LE(derived["warp_execution_efficiency_pct"], 100.0 + 1e-9);
  ASSERT_TRUE(derived.count("range_duration_ms"));
  EXPECT_GT(derived["range_duration_ms"], 0);
}

TEST_F(ConvbenchCuda, MetricsFullGivesEveryOkCellItsCounters) {
  StudyOptions o;
  o.device = Device{DeviceKind::kCuda, 0};
  o.implementations = {"implicit_precomp_gemm", "own:direct"};
  o.precisions = {"fp32"};
  o.layouts = {Layout::kNCHW};
  o.repetitions = 3;
  o.window_s = 0;
  o.transfers = false;
  o.metrics = MetricsLevel::kFull;
  const StudyResult r = run_study({parse_problem("n=8,c=32,h=28,w=28,k=64,r=3,s=3,pad=1")}, o);
  int read = 0;
  for (const Cell& c : r.cells) {
    if (c.status != kStatusOk) continue;
    ASSERT_TRUE(c.kernels.has_value());
    if (counters_closed(c.kernels->counters)) GTEST_SKIP() << c.kernels->counters;
    ASSERT_EQ(c.kernels->counters.rfind("read: ", 0), 0u) << c.implementation << " " << c.direction << ": "
                                                          << c.kernels->counters;
    std::map<std::string, double> derived;
    for (const auto& m : derive_metrics(c.kernels->counter_values)) derived[m.name] = m.value;
    EXPECT_GT(derived["ipc_per_sm"], 0) << c.implementation << " " << c.direction;
    EXPECT_GT(derived["achieved_occupancy_pct"], 0) << c.implementation << " " << c.direction;
    EXPECT_GT(derived["range_duration_ms"], 0) << c.implementation << " " << c.direction;
    ++read;
  }
  EXPECT_GE(read, 4);  // implicit_precomp_gemm forward (a forward-only name), own:direct x three directions
}

}  // namespace
}  // namespace cnnergy::convbench
