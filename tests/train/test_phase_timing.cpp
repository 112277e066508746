// Phase isolation and the per-layer profile on the CPU backend: both verdicts are wall-clock timings,
// so this binary runs alone (SERIAL), not beside another test on a 2-core CI machine, where a
// neighbour once put the phases' sum 56 % off the whole step in all three measurements.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "measure/layer_profile.hpp"
#include "measure/phase_energy.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"
#include "net/solver.hpp"
#include "net/zoo/zoo.hpp"

using namespace cnnergy;

namespace {
std::unique_ptr<Backend> cpu() { return create_backend(BackendOptions{}); }
}  // namespace

TEST(Measure, PhaseIsolationClosesOnTheWholeStepInTime) {
  auto graph = build_model("lenet5");
  auto backend = cpu();
  ExecutorOptions eo;
  eo.batch_size = 16;
  Executor ex(*graph, *backend, eo);
  ex.initialize_parameters(3);
  SgdSolver solver(ex, SolverOptions{});
  Tensor images = backend->alloc(Shape{16, 1, 28, 28}, DType::kF32);
  Tensor labels = backend->alloc(Shape{16}, DType::kI32);
  backend->fill(images, 0.5f);
  backend->fill(labels, 3.0f);
  ex.set_input(images, labels);
  WindowSpec ws{0.05, 3, 3, 1};
  // CPU timing on a shared CI machine is noisy (2 cores, another test binary and BLAS threads
  // beside this one put single windows off by 20x): additivity is checked loosely, and a gap
  // must persist over three measurements to fail. The real figure lives in the benchmarks.
  double best_gap = INFINITY;
  for (int attempt = 0; attempt < 3 && !(best_gap < 0.5); ++attempt) {
    const auto r = measure_phase_energy(ex, solver, nullptr, {}, {}, ws);
    ASSERT_EQ(r.phases.size(), 3u);
    EXPECT_EQ(r.phases[0].name, "forward");
    EXPECT_FALSE(r.phases[0].joules_per_iteration.has_value());  // no probe: time only
    EXPECT_EQ(r.step.ms_per_iteration.n, 3u);
    EXPECT_GE(r.step.iterations_per_window, 3);
    best_gap = std::min(best_gap, std::abs(r.time_gap_vs_step));
  }
  EXPECT_LT(best_gap, 0.5);

  LayerProfileOptions lo;
  lo.repetitions = 2;
  // The hotspot is a timing too: a loaded CI machine once put the pools first (2 passes of a few
  // milliseconds). It must be the convolutions in one of three profiles.
  std::string top;
  for (int attempt = 0; attempt < 3 && top != "conv"; ++attempt) {
    const auto prof = profile_layers(ex, nullptr, lo);
    EXPECT_EQ(prof.layers.size(), ex.num_layers());
    double share = 0;
    for (const auto& c : prof.categories) share += c.share;
    EXPECT_NEAR(share, 1.0, 1e-9);
    top = prof.categories.front().category;
  }
  EXPECT_EQ(top, "conv");  // LeNet's hotspot, as Li et al. 2016 finds
}
