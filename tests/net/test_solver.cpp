// Learning-rate policies (Castro et al. 2019's step and exponential schedules, warm-up), the momentum SGD
// update with weight decay on weights only (or on everything), and dynamic loss scaling: growth
// after good steps, back-off and a skipped update on overflow.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/errors.hpp"
#include "net/solver.hpp"
#include "net_testing.hpp"

using namespace cnnergy;
using namespace cnnergy::test;

TEST(LrSchedule, Castro2019Policies) {
  LrSchedule fixed;
  fixed.base_lr = 0.01;
  EXPECT_DOUBLE_EQ(fixed.learning_rate(12345, 100), 0.01);

  LrSchedule caffenet;  // divide by 10 every 20 epochs
  caffenet.policy = LrPolicy::kStep;
  caffenet.base_lr = 0.01;
  caffenet.gamma = 0.1;
  caffenet.step_size = 20;
  EXPECT_DOUBLE_EQ(caffenet.learning_rate(0, 100), 0.01);
  EXPECT_DOUBLE_EQ(caffenet.learning_rate(1999, 100), 0.01);
  EXPECT_NEAR(caffenet.learning_rate(2000, 100), 0.001, 1e-15);
  EXPECT_NEAR(caffenet.learning_rate(4100, 100), 0.0001, 1e-15);

  LrSchedule gait;  // decrease 20 % every epoch
  gait.policy = LrPolicy::kExponential;
  gait.base_lr = 0.01;
  gait.gamma = 0.8;
  EXPECT_DOUBLE_EQ(gait.learning_rate(9, 10), 0.01);
  EXPECT_NEAR(gait.learning_rate(10, 10), 0.008, 1e-15);
  EXPECT_NEAR(gait.learning_rate(35, 10), 0.00512, 1e-15);

  LrSchedule per_iteration;
  per_iteration.policy = LrPolicy::kStep;
  per_iteration.unit = LrUnit::kIteration;
  per_iteration.base_lr = 0.4;
  per_iteration.gamma = 0.5;
  per_iteration.step_size = 5;
  EXPECT_DOUBLE_EQ(per_iteration.learning_rate(4, 1000), 0.4);
  EXPECT_DOUBLE_EQ(per_iteration.learning_rate(5, 1000), 0.2);
  EXPECT_DOUBLE_EQ(per_iteration.learning_rate(10, 1000), 0.1);
}

TEST(LrSchedule, LinearWarmUpAndValidation) {
  LrSchedule s;
  s.base_lr = 0.1;
  s.warmup_iterations = 10;
  s.warmup_start_factor = 0.1;
  EXPECT_NEAR(s.learning_rate(0, 1), 0.01, 1e-12);
  EXPECT_NEAR(s.learning_rate(5, 1), 0.055, 1e-12);
  EXPECT_NEAR(s.learning_rate(10, 1), 0.1, 1e-12);
  EXPECT_NO_THROW(s.validate(1));
  LrSchedule bad = s;
  bad.base_lr = 0.0;
  EXPECT_THROW(bad.validate(1), InvalidArgument);
  bad = s;
  bad.policy = LrPolicy::kStep;
  bad.step_size = 0;
  EXPECT_THROW(bad.validate(1), InvalidArgument);
  EXPECT_THROW(s.validate(0), InvalidArgument);
}

namespace {

// fc (3 -> 2, with bias) on 3 features: one weight and one bias to follow by hand.
std::unique_ptr<Graph> linear_graph() {
  GraphBuilder g("linear", Shape{3}, 2);
  g.softmax_loss(g.fc(g.input(), "fc", 2));
  return g.build();
}

class Sgd : public SeededTest {
 protected:
  void SetUp() override {
    backend_ = cpu_backend();
    graph_ = linear_graph();
    ExecutorOptions o;
    o.batch_size = 2;
    executor_ = std::make_unique<Executor>(*graph_, *backend_, o);
    executor_->initialize_parameters(seed_);
  }
  // Writes random gradients (what a backward would leave) and returns copies.
  std::vector<Tensor> random_grads() {
    std::vector<Tensor> out;
    for (Parameter* p : executor_->parameters()) {
      fill_uniform(p->grad, rng_, -1.0f, 1.0f);
      out.push_back(clone(p->grad));
    }
    return out;
  }
  std::vector<Tensor> masters() {
    std::vector<Tensor> out;
    for (Parameter* p : executor_->parameters()) out.push_back(clone(p->master));
    return out;
  }
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Graph> graph_;
  std::unique_ptr<Executor> executor_;
};

}  // namespace

TEST_F(Sgd, MomentumAndWeightDecayOnWeightsOnly) {
  for (bool decay_all : {false, true}) {
    SCOPED_TRACE(decay_all ? "decay on every parameter" : "decay on weights only");
    SolverOptions so;
    so.schedule.policy = LrPolicy::kStep;  // lr halves every iteration: each step uses its own rate
    so.schedule.unit = LrUnit::kIteration;
    so.schedule.base_lr = 0.1;
    so.schedule.gamma = 0.5;
    so.momentum = 0.9;
    so.weight_decay = 0.01;
    so.decay_all_parameters = decay_all;
    SgdSolver solver(*executor_, so);
    const auto params = executor_->parameters();
    ASSERT_EQ(params.size(), 2u);
    EXPECT_TRUE(params[0]->decay);   // fc.weight
    EXPECT_FALSE(params[1]->decay);  // fc.bias
    std::vector<std::vector<double>> w(2), v(2);
    for (std::size_t i = 0; i < 2; ++i) {
      for (float x : params[i]->master.f32()) w[i].push_back(x);
      v[i].assign(w[i].size(), 0.0);
    }
    for (int step = 0; step < 3; ++step) {
      const double lr = 0.1 * std::pow(0.5, step);
      EXPECT_NEAR(solver.learning_rate(), lr, 1e-12);
      const auto g = random_grads();
      solver.step();
      for (std::size_t i = 0; i < 2; ++i) {
        const double wd = (i == 0 || decay_all) ? 0.01 : 0.0;
        for (std::size_t k = 0; k < w[i].size(); ++k) {
          v[i][k] = 0.9 * v[i][k] + g[i].f32()[k] + wd * w[i][k];
          w[i][k] -= lr * v[i][k];
          EXPECT_NEAR(params[i]->master.f32()[k], w[i][k], 1e-5) << params[i]->name << " [" << k << "] step " << step;
        }
      }
    }
    EXPECT_EQ(solver.iteration(), 3);
    executor_->initialize_parameters(seed_);
  }
}

TEST_F(Sgd, DynamicLossScalingGrowsBacksOffAndSkips) {
  SolverOptions so;
  so.schedule.base_lr = 0.5;
  so.momentum = 0.0;
  so.weight_decay = 0.0;
  so.loss_scale.dynamic = true;
  so.loss_scale.initial_scale = 1024.0f;
  so.loss_scale.growth_interval = 2;
  SgdSolver solver(*executor_, so);
  EXPECT_EQ(solver.loss_scale(), 1024.0f);

  // A good step divides the gradients by the scale.
  auto before = masters();
  auto g = random_grads();
  solver.step();
  const auto params = executor_->parameters();
  for (std::size_t i = 0; i < params.size(); ++i)
    for (std::int64_t k = 0; k < params[i]->master.numel(); ++k)
      EXPECT_NEAR(params[i]->master.f32()[k], before[i].f32()[k] - 0.5 * g[i].f32()[k] / 1024.0, 1e-6);
  EXPECT_EQ(solver.loss_scale(), 1024.0f);  // one good step of two
  random_grads();
  solver.step();
  EXPECT_EQ(solver.loss_scale(), 2048.0f);  // two good steps: grow

  // An overflow: nothing changes, the scale halves, the step counts as skipped.
  before = masters();
  random_grads();
  params[1]->grad.f32()[0] = std::numeric_limits<float>::infinity();
  solver.step();
  const auto after = masters();
  for (std::size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(all_close(after[i], before[i], 0.0, 0.0));
  EXPECT_EQ(solver.loss_scale(), 1024.0f);
  EXPECT_EQ(solver.state().skipped_steps, 1);
  EXPECT_EQ(solver.state().good_steps, 0);
  EXPECT_EQ(solver.iteration(), 3);

  // A NaN does the same.
  random_grads();
  params[0]->grad.f32()[1] = std::numeric_limits<float>::quiet_NaN();
  solver.step();
  EXPECT_EQ(solver.loss_scale(), 512.0f);
  EXPECT_EQ(solver.state().skipped_steps, 2);
}

TEST_F(Sgd, RejectsBadOptions) {
  SolverOptions so;
  so.momentum = 1.0;
  EXPECT_THROW(SgdSolver(*executor_, so), InvalidArgument);
  so = SolverOptions{};
  so.weight_decay = -1.0;
  EXPECT_THROW(SgdSolver(*executor_, so), InvalidArgument);
  so = SolverOptions{};
  so.loss_scale.dynamic = true;
  so.loss_scale.growth_factor = 1.0f;
  EXPECT_THROW(SgdSolver(*executor_, so), InvalidArgument);
  EXPECT_TRUE(SolverOptions::loss_scale_for(DType::kF16).dynamic);
  EXPECT_FALSE(SolverOptions::loss_scale_for(DType::kBF16).dynamic);
  EXPECT_EQ(SolverOptions::loss_scale_for(DType::kF32).initial_scale, 1.0f);
}
