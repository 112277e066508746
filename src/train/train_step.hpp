// One training step — forward, backward, update — enqueued either kernel by kernel or as a replayed
// CUDA graph (`--cuda-graph`): the whole step becomes one launch, which removes the per-kernel
// launch cost that dominates small batches. A recorded step keeps the arguments it was recorded
// with, so there is one recording per input buffer set, and a recording is redone whenever the
// learning rate or the (fp16 dynamic) loss scale it holds changes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "backend/ops.hpp"
#include "net/executor.hpp"
#include "net/solver.hpp"

namespace cnnergy {

class TrainStep {
 public:
  // With use_graph, NotSupported (before anything runs) when the backend cannot record graphs
  // (the CPU) or the network has dropout (every replay would draw the same mask).
  TrainStep(Executor& executor, SgdSolver& solver, bool use_graph);

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

  Executor& executor_;
  SgdSolver& solver_;
  bool use_graph_ = false;
  bool warmed_up_ = false;
  std::map<int, Recording> by_slot_;
  std::int64_t recordings_ = 0, replays_ = 0;
};

// Throws NotSupported naming the reason when `executor`'s step cannot run as a graph.
void check_graph_step_supported(const Executor& executor);

}  // namespace cnnergy
