// TrainStep: eager steps, and recorded steps replayed per input slot.
#include "train/train_step.hpp"

#include <string>
#include <utility>

#include "core/errors.hpp"
#include "layers/layer.hpp"

namespace cnnergy {

void check_graph_step_supported(const Executor& executor) {
  Backend& backend = executor.backend();
  if (backend.name() != "cuda")
    throw NotSupported("--cuda-graph needs the CUDA backend (this run is on " + backend.name() + ")");
  for (std::size_t i = 0; i < executor.num_layers(); ++i) {
    const Layer& layer = executor.layer(i);
    if (layer.category() == LayerCategory::kDropout)
      throw NotSupported("--cuda-graph: " + executor.graph().model_name() + " has dropout (layer '" + layer.name() +
                         "'); a replayed step would reuse one dropout mask every iteration");
  }
}

TrainStep::TrainStep(Executor& executor, SgdSolver& solver, bool use_graph, StepHooks hooks)
    : executor_(executor), solver_(solver), use_graph_(use_graph), hooks_(std::move(hooks)) {
  if (!(hooks_.loss_scale_divisor > 0.0f))
    throw InvalidArgument("TrainStep: the loss-scale divisor must be positive");
  if (use_graph_) check_graph_step_supported(executor_);
}

void TrainStep::backward(float loss_scale) {
  if (hooks_.before_backward) hooks_.before_backward();
  executor_.backward(loss_scale / hooks_.loss_scale_divisor);
  if (hooks_.after_backward) hooks_.after_backward();
}

void TrainStep::run_eager() {
  executor_.forward(Phase::kTrain);
  backward(solver_.loss_scale());
  solver_.step();
}

void TrainStep::run(int input_slot) {
  if (!use_graph_ || !warmed_up_) {
    run_eager();
    warmed_up_ = true;
    return;
  }
  // Both are host values the recorded kernels bake in; reading the scale here (not inside the
  // recording) also resolves fp16's pending overflow flag, a download no recording may contain.
  const float scale = solver_.loss_scale();
  const double lr = solver_.learning_rate();
  Recording& rec = by_slot_[input_slot];
  if (!rec.work || rec.loss_scale != scale || rec.learning_rate != lr) {
    if (hooks_.before_recording) hooks_.before_recording();
    rec.work.reset();  // its reserved memory first
    rec.work = executor_.backend().capture([&] {
      executor_.forward(Phase::kTrain);  // advances the executor's iteration, as a replay does below
      backward(scale);
      solver_.enqueue_update();
    });
    if (!rec.work) throw NotSupported("--cuda-graph: the " + executor_.backend().name() + " backend records no graphs");
    rec.loss_scale = scale;
    rec.learning_rate = lr;
    ++recordings_;
  } else {
    executor_.begin_iteration();
  }
  rec.work->replay();
  ++replays_;
  solver_.advance();
}

}  // namespace cnnergy
