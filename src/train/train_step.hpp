// One training step — forward, backward, update — enqueued either kernel by kernel or as a replayed
// CUDA graph (`--cuda-graph`): the whole step becomes one launch, which removes the per-kernel
// launch cost that dominates small batches. A recorded step keeps the arguments it was recorded
// with, so there is one recording per input buffer set, and a recording is redone whenever the
// learning rate or the (fp16 dynamic) loss scale it holds changes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "backend/ops.hpp"
#include "net/executor.hpp"
#include "net/solver.hpp"

namespace cnnergy {

// What a data-parallel step (train/parallel) adds to the plain one: each of N replicas divides its loss
// gradient by N, and gradient buckets are armed just before backward and finished just after it
// (all-reduces launched from the executor's layer hooks on a communication stream, then the
// compute stream's wait for them). In a recording these calls are recorded too, so whatever they
// enqueue on another stream must fork from the compute stream and join it again with events, and
// they must not wait on the host. `before_recording` runs on the host before a recording is made
// or replaced (replacing one waits for its replays: the data-parallel trainer first waits, with
// its timeout, for its collectives).
struct StepHooks {
  float loss_scale_divisor = 1.0f;
  std::function<void()> before_backward, after_backward, before_recording;
};

class TrainStep {
 public:
  // With use_graph, NotSupported (before anything runs) when the backend cannot record graphs
  // (the CPU) or the network has dropout (every replay would draw the same mask).
  TrainStep(Executor& executor, SgdSolver& solver, bool use_graph, StepHooks hooks = {});

  // Enqueues one step on the input given last to Executor::set_input(); `input_slot` says which of
  // the caller's input buffer sets that is (a recording addresses its input buffers). The first
  // step runs kernel by kernel (convolutions resolve their algorithms then); later ones replay.
  void run(int input_slot = 0);

  bool graphed() const { return use_graph_; }
  std::int64_t recordings() const { return recordings_; }  // graphs recorded so far
  std::int64_t replays() const { return replays_; }

 private:
  struct Recording {
    float loss_scale = 0;
    double learning_rate = 0;
    std::unique_ptr<CapturedWork> work;
  };
  void run_eager();
  void backward(float loss_scale);  // the hooks around Executor::backward

  Executor& executor_;
  SgdSolver& solver_;
  bool use_graph_ = false;
  StepHooks hooks_;
  bool warmed_up_ = false;
  std::map<int, Recording> by_slot_;
  std::int64_t recordings_ = 0, replays_ = 0;
};

// Throws NotSupported naming the reason when `executor`'s step cannot run as a graph.
void check_graph_step_supported(const Executor& executor);

}  // namespace cnnergy
