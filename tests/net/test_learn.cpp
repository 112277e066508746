// End to end on the CPU backend: a tiny conv net trained with momentum SGD on a synthetic,
// separable problem (the class is which horizontal band of the image is bright) must drive its
// loss down and classify fresh samples.
#include <gtest/gtest.h>

#include "net/solver.hpp"
#include "net_testing.hpp"

using namespace cnnergy;
using namespace cnnergy::test;

namespace {

constexpr std::int64_t kClasses = 3;

// Images 1x9x9: noise everywhere, plus +1 on rows [3k, 3k+3) for class k.
void make_batch(Rng& rng, std::int64_t n, Tensor& images, Tensor& labels) {
  images = Tensor::host({n, 1, 9, 9});
  labels = Tensor::host({n}, DType::kI32);
  auto px = images.f32();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::int64_t>(rng.next_u32() % kClasses);
    labels.data<std::int32_t>()[i] = static_cast<std::int32_t>(k);
    for (std::int64_t r = 0; r < 9; ++r)
      for (std::int64_t c = 0; c < 9; ++c)
        px[static_cast<std::size_t>((i * 9 + r) * 9 + c)] = rng.normal(0.0f, 0.4f) + (r / 3 == k ? 1.0f : 0.0f);
  }
}

class Learn : public SeededTest {};

}  // namespace

TEST_F(Learn, TinyNetSeparatesBands) {
  GraphBuilder g("bands", Shape{1, 9, 9}, kClasses);
  auto x = g.relu(g.conv(g.input(), "conv", ConvSpec::make(4, 3, 1, 1)), "relu");
  x = g.max_pool(x, "pool", PoolSpec::make(3, 3));
  g.softmax_loss(g.fc(x, "fc", kClasses));
  auto graph = g.build();

  auto backend = cpu_backend();
  ExecutorOptions o;
  o.batch_size = 16;
  Executor ex(*graph, *backend, o);
  ex.initialize_parameters(seed_);
  SolverOptions so;
  so.schedule.base_lr = 0.05;
  so.momentum = 0.9;
  so.weight_decay = 1e-4;
  SgdSolver solver(ex, so);

  double first = 0.0, last = 0.0;
  constexpr int kIterations = 60;
  for (int it = 0; it < kIterations; ++it) {
    Tensor images, labels;
    make_batch(rng_, o.batch_size, images, labels);
    ex.set_input(to_backend(*backend, images), to_backend(*backend, labels));
    ex.forward(Phase::kTrain);
    ex.backward(solver.loss_scale());
    solver.step();
    const double loss = ex.read_loss();
    if (it < 5) first += loss / 5.0;
    if (it >= kIterations - 5) last += loss / 5.0;
  }
  EXPECT_LT(last, 0.3 * first) << "loss went from " << first << " to " << last;

  // Fresh samples, evaluation mode.
  Tensor correct = to_backend(*backend, Tensor::host({1}, DType::kI32));
  std::int64_t total = 0;
  for (int b = 0; b < 4; ++b) {
    Tensor images, labels;
    make_batch(rng_, o.batch_size, images, labels);
    ex.set_input(to_backend(*backend, images), to_backend(*backend, labels));
    ex.forward(Phase::kEval);
    backend->count_topk(ex.logits(), ex.labels(), 1, correct);
    total += o.batch_size;
  }
  const auto hits = to_host(*backend, correct).data<std::int32_t>()[0];
  EXPECT_GE(static_cast<double>(hits) / static_cast<double>(total), 0.9) << hits << " of " << total << " correct";
}
