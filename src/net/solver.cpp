// Learning-rate schedules and the momentum SGD solver with dynamic loss scaling.
#include "net/solver.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/errors.hpp"
#include "net/executor.hpp"

namespace cnnergy {

void LrSchedule::validate(std::int64_t iterations_per_epoch) const {
  if (!(base_lr > 0.0) || !std::isfinite(base_lr)) throw InvalidArgument("learning rate must be > 0");
  if (policy != LrPolicy::kFixed && !(gamma > 0.0)) throw InvalidArgument("learning-rate gamma must be > 0");
  if (policy == LrPolicy::kStep && step_size < 1) throw InvalidArgument("learning-rate step size must be >= 1");
  if (warmup_iterations < 0 || warmup_start_factor < 0.0 || warmup_start_factor > 1.0)
    throw InvalidArgument("warm-up needs iterations >= 0 and a start factor in [0, 1]");
  if (iterations_per_epoch < 1) throw InvalidArgument("iterations per epoch must be >= 1");
}

double LrSchedule::learning_rate(std::int64_t iteration, std::int64_t iterations_per_epoch) const {
  const std::int64_t t = unit == LrUnit::kEpoch ? iteration / std::max<std::int64_t>(iterations_per_epoch, 1) : iteration;
  double lr = base_lr;
  switch (policy) {
    case LrPolicy::kFixed: break;
    case LrPolicy::kStep: lr = base_lr * std::pow(gamma, static_cast<double>(t / std::max<std::int64_t>(step_size, 1))); break;
    case LrPolicy::kExponential: lr = base_lr * std::pow(gamma, static_cast<double>(t)); break;
  }
  if (iteration < warmup_iterations) {
    const double progress = static_cast<double>(iteration) / static_cast<double>(warmup_iterations);
    lr *= warmup_start_factor + (1.0 - warmup_start_factor) * progress;
  }
  return lr;
}

LossScaleOptions SolverOptions::loss_scale_for(DType dtype) {
  LossScaleOptions o;
  if (dtype == DType::kF16) {
    o.dynamic = true;
    o.initial_scale = 65536.0f;
  }
  return o;
}

SgdSolver::SgdSolver(Executor& executor, const SolverOptions& options) : executor_(executor), options_(options) {
  options_.schedule.validate(options_.iterations_per_epoch);
  if (!(options_.momentum >= 0.0 && options_.momentum < 1.0)) throw InvalidArgument("momentum must be in [0, 1)");
  if (!(options_.weight_decay >= 0.0)) throw InvalidArgument("weight decay must be >= 0");
  const LossScaleOptions& ls = options_.loss_scale;
  if (!(ls.initial_scale > 0.0f) || !std::isfinite(ls.initial_scale)) throw InvalidArgument("loss scale must be > 0");
  if (ls.dynamic && (!(ls.growth_factor > 1.0f) || !(ls.backoff_factor > 0.0f && ls.backoff_factor < 1.0f) ||
                     ls.growth_interval < 1 || !(ls.min_scale > 0.0f) || ls.max_scale < ls.min_scale))
    throw InvalidArgument("dynamic loss scaling needs growth > 1, backoff in (0, 1), interval >= 1, 0 < min <= max");
  if (!executor_.training()) throw InvalidArgument("a solver needs an executor bound for training");
  Backend& backend = executor_.backend();
  params_ = executor_.parameters();
  for (Parameter* p : params_) {
    Tensor m = backend.alloc(p->shape, DType::kF32, p->master.layout());
    backend.fill(m, 0.0f);
    momentum_.push_back(std::move(m));
  }
  if (ls.dynamic) {
    overflow_flag_ = backend.alloc(Shape{1}, DType::kI32);
    backend.fill(overflow_flag_, 0.0f);
  }
  state_.loss_scale = ls.initial_scale;
  state_.learning_rate = learning_rate();
}

SgdSolver::~SgdSolver() = default;

double SgdSolver::learning_rate() const {
  return options_.schedule.learning_rate(state_.iteration, options_.iterations_per_epoch);
}

void SgdSolver::resolve_pending_flag() {
  if (!flag_pending_) return;
  Tensor host = Tensor::host(Shape{1}, DType::kI32);
  executor_.backend().download(overflow_flag_, host);
  flag_pending_ = false;
  const LossScaleOptions& ls = options_.loss_scale;
  if (host.data<std::int32_t>()[0] != 0) {
    state_.loss_scale = std::max(ls.min_scale, state_.loss_scale * ls.backoff_factor);
    state_.good_steps = 0;
    ++state_.skipped_steps;
  } else if (++state_.good_steps >= ls.growth_interval) {
    state_.loss_scale = std::min(ls.max_scale, state_.loss_scale * ls.growth_factor);
    state_.good_steps = 0;
  }
}

float SgdSolver::loss_scale() {
  resolve_pending_flag();
  return state_.loss_scale;
}

const SolverState& SgdSolver::state() {
  resolve_pending_flag();
  return state_;
}

void SgdSolver::set_state(const SolverState& state) {
  if (state.iteration < 0 || !(state.loss_scale > 0.0f)) throw DataError("solver state out of range");
  state_ = state;
  flag_pending_ = false;
  state_.learning_rate = learning_rate();
}

void SgdSolver::step() {
  enqueue_update();
  advance();
}

void SgdSolver::enqueue_update() {
  Backend& backend = executor_.backend();
  const bool dynamic = options_.loss_scale.dynamic;
  // The scale the gradients carry is the one loss_scale() handed out; resolve an unread flag first
  // so the flag tensor can be reused.
  const float scale = loss_scale();
  const double lr = learning_rate();
  if (dynamic) {
    backend.fill(overflow_flag_, 0.0f);
    for (Parameter* p : params_) backend.check_finite(p->grad, overflow_flag_);
  }
  SgdStep step;
  step.learning_rate = static_cast<float>(lr);
  step.momentum = static_cast<float>(options_.momentum);
  step.inv_grad_scale = 1.0f / scale;
  std::vector<SgdUpdate> updates(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Parameter* p = params_[i];
    const bool decay = p->decay || options_.decay_all_parameters;
    updates[i] = {p->master, p->grad, momentum_[i], p->working, decay ? static_cast<float>(options_.weight_decay) : 0.0f};
  }
  backend.sgd_update_all(updates, step, dynamic ? overflow_flag_ : Tensor{});
}

void SgdSolver::advance() {
  flag_pending_ = options_.loss_scale.dynamic;
  state_.learning_rate = learning_rate();
  ++state_.iteration;
}

}  // namespace cnnergy
