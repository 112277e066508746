// Momentum SGD with weight decay, learning-rate policies (fixed, step, exponential, optional linear
// warm-up) and dynamic loss scaling for fp16. Updates fp32 master weights through
// Backend::sgd_update; an overflowed fp16 step is skipped on the device (check_finite + skip flag)
// and the host reads the flag only when it next needs the loss scale.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/ops.hpp"
#include "layers/layer.hpp"

namespace cnnergy {

class Executor;

enum class LrPolicy { kFixed, kStep, kExponential };
enum class LrUnit { kIteration, kEpoch };

// lr(t) with t counted in `unit` (epochs = iteration / iterations_per_epoch, integer):
//   fixed: base;  step: base * gamma^floor(t / step_size);  exponential: base * gamma^t.
// Castro et al. 2019: CaffeNet step (gamma 0.1, step 20 epochs); gait nets exponential (gamma 0.8, epochs).
// Warm-up (iterations): lr ramps linearly from base*warmup_start_factor to lr(t) over the first
// warmup_iterations iterations.
struct LrSchedule {
  LrPolicy policy = LrPolicy::kFixed;
  LrUnit unit = LrUnit::kEpoch;
  double base_lr = 0.01;
  double gamma = 0.1;
  std::int64_t step_size = 1;
  std::int64_t warmup_iterations = 0;
  double warmup_start_factor = 0.0;

  // Throws InvalidArgument for non-positive lr/step_size, gamma <= 0, iterations_per_epoch < 1.
  void validate(std::int64_t iterations_per_epoch) const;
  double learning_rate(std::int64_t iteration, std::int64_t iterations_per_epoch) const;
};

struct LossScaleOptions {
  bool dynamic = false;         // SolverOptions::loss_scale_for(kF16) turns it on
  float initial_scale = 1.0f;   // the fixed scale when !dynamic; the start when dynamic (65536)
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  std::int64_t growth_interval = 2000;  // good steps in a row before the scale grows
  float min_scale = 1.0f;
  float max_scale = 16777216.0f;
};

struct SolverOptions {
  LrSchedule schedule;
  double momentum = 0.9;
  double weight_decay = 5e-4;
  bool decay_all_parameters = false;  // false: only weights (Parameter::decay); biases/BN exempt
  std::int64_t iterations_per_epoch = 1;
  LossScaleOptions loss_scale;

  // Loss scaling suited to the backend dtype: dynamic for fp16, scale 1 otherwise.
  static LossScaleOptions loss_scale_for(DType dtype);
};

// Everything checkpoints save besides tensors.
struct SolverState {
  std::int64_t iteration = 0;
  double learning_rate = 0.0;  // the rate of the last step (informational; recomputed on load)
  float loss_scale = 1.0f;
  std::int64_t good_steps = 0;     // steps since the last overflow (dynamic scaling)
  std::int64_t skipped_steps = 0;  // total overflowed steps
};

class SgdSolver {
 public:
  // Allocates momentum (fp32, zero) for every parameter of the executor. Throws InvalidArgument
  // for a bad schedule, momentum outside [0, 1), negative weight decay.
  SgdSolver(Executor& executor, const SolverOptions& options);
  ~SgdSolver();
  SgdSolver(const SgdSolver&) = delete;
  SgdSolver& operator=(const SgdSolver&) = delete;

  // The scale the next backward must use. With dynamic scaling this first resolves the previous
  // step's overflow flag (one small download, the only host wait the solver makes).
  float loss_scale();
  // One update of every parameter from the gradients of the last backward (scaled by the scale
  // loss_scale() returned), then iteration += 1. Enqueued only: does not wait for the device.
  void step();
  // step() in two parts, for a step recorded as a CUDA graph (train/train_step.hpp): the update's
  // kernels, enqueued with the current loss scale and learning rate (what a recording bakes in),
  // and the host-side bookkeeping (iteration += 1, overflow flag pending) that every replay of the
  // recorded update needs too. step() = enqueue_update() + advance().
  void enqueue_update();
  void advance();

  std::int64_t iteration() const { return state_.iteration; }
  std::int64_t epoch() const { return state_.iteration / options_.iterations_per_epoch; }
  double learning_rate() const;  // the rate the next step() uses
  const SolverOptions& options() const { return options_; }
  // Resolves any pending overflow flag first, so counts are exact.
  const SolverState& state();
  void set_state(const SolverState& state);  // checkpoint load

  // Momentum of parameter i of Executor::parameters(), fp32 (checkpoints).
  const std::vector<Tensor>& momentum() const { return momentum_; }

 private:
  void resolve_pending_flag();

  Executor& executor_;
  SolverOptions options_;
  SolverState state_;
  std::vector<Parameter*> params_;
  std::vector<Tensor> momentum_;
  Tensor overflow_flag_;       // int32 (1) on the device
  bool flag_pending_ = false;  // a step() used overflow_flag_ and it has not been read yet
};

}  // namespace cnnergy
