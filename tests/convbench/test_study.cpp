// The convolution study on the CPU backend: every cell gets a status, ok cells have a positive time
// and TFLOP/s = FLOPs / time, impossible shapes, unknown names, precisions the backend lacks and
// problems larger than memory become statuses with their reason, transfers are timed, and the
// hotspots rank problems by time x layers.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "backend/ops.hpp"
#include "convbench/output.hpp"
#include "convbench/study.hpp"
#include "core/errors.hpp"

namespace cnnergy::convbench {
namespace {

StudyOptions cpu_options() {
  StudyOptions o;
  o.device = Device{};
  o.repetitions = 3;
  o.warmup = 1;
  o.window_s = 0;  // energy needs seconds per cell; the CLI test covers the window path
  return o;
}

const Cell* find_cell(const StudyResult& r, std::size_t problem, const std::string& impl, const std::string& dir,
                      const std::string& prec = "fp32") {
  for (const Cell& c : r.cells)
    if (c.problem == problem && c.implementation == impl && c.direction == dir && c.precision == prec) return &c;
  return nullptr;
}

TEST(ConvbenchStudy, EveryCellHasAStatusAndOkCellsAreConsistent) {
  std::vector<ConvProblem> problems = {parse_problem("n=2,c=4,h=9,w=7,k=6,r=3,s=3,stride=2,pad=1"),
                                       parse_problem("n=1,c=4,h=6,w=6,k=4,r=3,s=3,pad=1,groups=2,dilation=2")};
  StudyOptions o = cpu_options();
  o.implementations = {"reference", "im2col_gemm", "own:direct"};
  const StudyResult r = run_study(problems, o);
  EXPECT_EQ(r.backend, "cpu");
  ASSERT_EQ(r.cells.size(), 2u * 3u * 3u);  // problems x implementations x directions
  const std::set<std::string> statuses = {kStatusOk, kStatusUnsupported, kStatusDoesNotFit, kStatusFailed};
  for (const Cell& c : r.cells) {
    EXPECT_TRUE(statuses.count(c.status)) << c.status;
    if (c.implementation == "own:direct") {
      // The CPU backend does not know the name: the cell says so with the backend's own message.
      EXPECT_EQ(c.status, kStatusUnsupported);
      EXPECT_NE(c.detail.find("the CPU backend has no convolution 'own:direct'"), std::string::npos) << c.detail;
      continue;
    }
    ASSERT_EQ(c.status, kStatusOk) << c.implementation << " " << c.direction << ": " << c.detail;
    EXPECT_GT(c.time_ms.median, 0);
    EXPECT_EQ(c.time_ms.n, 3u);
    EXPECT_LE(c.time_ms.min, c.time_ms.median);
    EXPECT_GE(c.time_ms.max, c.time_ms.median);
    const double flops = problem_flops(problems[c.problem].desc);
    EXPECT_NEAR(c.tflops, flops / (c.time_ms.median * 1e9), 1e-12 * flops);
    EXPECT_FALSE(c.percent_of_peak.has_value());  // no peak table entry for a CPU
    EXPECT_EQ(c.ran, c.implementation);
    // The extra memory is the timed direction's own: the direct loops need none, im2col its buffer.
    if (c.implementation == "reference") {
      EXPECT_EQ(c.workspace_bytes, 0u);
    } else {
      EXPECT_GT(c.workspace_bytes, 0u);
    }
    EXPECT_FALSE(c.joules_per_call.has_value());
    EXPECT_NE(c.energy_note.find("not measured"), std::string::npos);
    ASSERT_TRUE(c.max_batch.has_value()) << c.max_batch_note;  // the CPU backend reports the RAM
    EXPECT_GE(*c.max_batch, problems[c.problem].desc.n);
  }
  // Transfers: 2 sets (input batch, layer tensors) x pageable/pinned x h2d/d2h per problem.
  ASSERT_EQ(r.transfers.size(), 2u * 8u);
  for (const auto& t : r.transfers) {
    EXPECT_GT(t.bytes, 0u);
    EXPECT_GT(t.gb_per_s, 0);
    ASSERT_TRUE(t.share_of_total.has_value());
    EXPECT_GT(*t.share_of_total, 0);
    EXPECT_LT(*t.share_of_total, 1);
  }
  EXPECT_TRUE(r.hotspots.empty());  // no model
  const Json doc = study_to_json(r);
  EXPECT_EQ(doc.at("cells").items().size(), r.cells.size());
  EXPECT_NE(study_table(r).find("own:direct"), std::string::npos);
}

TEST(ConvbenchStudy, BadProblemsAndPrecisionsBecomeStatusesAndTheStudyGoesOn) {
  std::vector<ConvProblem> problems = {
      parse_problem("n=1,c=1,h=4,w=4,k=1,r=7,s=7"),                     // kernel larger than the padded input
      parse_problem("n=1000000,c=1024,h=1024,w=1024,k=1,r=1,s=1"),      // petabytes: does not fit
      parse_problem("n=1,c=2,h=5,w=5,k=2,r=3,s=3")};                    // fine
  StudyOptions o = cpu_options();
  o.directions = {"forward"};
  o.precisions = {"fp32", "bf16"};  // the CPU backend is fp32 only
  o.transfers = false;
  o.metrics = MetricsLevel::kKernels;
  const StudyResult r = run_study(problems, o);
  // problems x forward implementations (reference, im2col_gemm, and onednn where built) x precisions
  const std::size_t forward_impls = create_backend(BackendOptions{})->conv_algorithm_names("forward").size();
  ASSERT_EQ(r.cells.size(), 3u * forward_impls * 2u);
  for (const Cell& c : r.cells) {
    if (c.problem == 0) {
      EXPECT_EQ(c.status, kStatusUnsupported);
      EXPECT_NE(c.detail.find("empty output"), std::string::npos) << c.detail;
    } else if (c.precision == "bf16") {
      EXPECT_EQ(c.status, kStatusUnsupported);
      EXPECT_NE(c.detail.find("bf16"), std::string::npos) << c.detail;
    } else if (c.problem == 1) {
      EXPECT_EQ(c.status, kStatusDoesNotFit);
      EXPECT_NE(c.detail.find("needs"), std::string::npos) << c.detail;
    } else {
      EXPECT_EQ(c.status, kStatusOk) << c.detail;
      ASSERT_TRUE(c.kernels.has_value());
      EXPECT_EQ(c.kernels->counters, "unavailable: no GPU kernels on the cpu backend");
    }
  }
  EXPECT_FALSE(r.notes.empty());  // the bf16 backend that could not be made
}

TEST(ConvbenchStudy, HotspotsRankProblemsByTimeTimesLayers) {
  ConvProblem a = parse_problem("n=1,c=8,h=12,w=12,k=8,r=3,s=3,pad=1");
  a.layers = {"l1", "l2", "l3"};
  ConvProblem b = parse_problem("n=1,c=3,h=12,w=12,k=8,r=1,s=1");
  b.layers = {"stem"};
  b.backward_data_used = false;
  StudyOptions o = cpu_options();
  o.implementations = {"reference", "im2col_gemm"};
  o.transfers = false;
  const StudyResult r = run_study({a, b}, o);
  ASSERT_EQ(r.hotspots.size(), 2u);
  double share = 0;
  for (const auto& h : r.hotspots) {
    share += h.share;
    const ConvProblem& p = r.problems[h.problem];
    EXPECT_EQ(h.layer_count, p.layers.size());
    EXPECT_EQ(h.winners.size(), p.backward_data_used ? 3u : 2u);
    double per_layer = 0;
    for (const auto& [dir, impl] : h.winners) {
      const Cell* best = find_cell(r, h.problem, impl, dir);
      ASSERT_NE(best, nullptr);
      for (const Cell& c : r.cells) {
        if (c.problem == h.problem && c.direction == dir && c.status == kStatusOk) {
          EXPECT_LE(best->time_ms.median, c.time_ms.median);
        }
      }
      per_layer += best->time_ms.median;
    }
    EXPECT_NEAR(h.total_ms, per_layer * static_cast<double>(p.layers.size()), 1e-9);
  }
  EXPECT_NEAR(share, 1.0, 1e-9);
  EXPECT_GE(r.hotspots[0].total_ms, r.hotspots[1].total_ms);
}

TEST(ConvbenchStudy, RejectsBadOptions) {
  StudyOptions o = cpu_options();
  o.directions = {"sideways"};
  EXPECT_THROW(run_study({parse_problem("n=1,c=1,h=4,w=4,k=1,r=1,s=1")}, o), InvalidArgument);
  o = cpu_options();
  o.repetitions = 0;
  EXPECT_THROW(run_study({parse_problem("n=1,c=1,h=4,w=4,k=1,r=1,s=1")}, o), InvalidArgument);
  EXPECT_THROW(parse_metrics_level("some"), InvalidArgument);
}

}  // namespace
}  // namespace cnnergy::convbench
