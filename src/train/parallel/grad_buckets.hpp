// Gradient buckets for data-parallel training: parameters are grouped in reverse layer order into
// buckets of about `cap_bytes` (one dtype per bucket), each bucket one contiguous device buffer
// that the parameters' gradients are re-pointed into (no copies before or after the all-reduce).
// As soon as backward has written every gradient of a bucket (the Executor's after-backward hook of
// the bucket's lowest layer), its all-reduce is launched, so communication overlaps the rest of
// backward; the update waits for all buckets (Communicator::compute_wait_for_comm). Each bucket's
// all-reduce is bracketed by communication-stream events, read back lazily, for the all-reduce and
// wait-for-the-slowest figures; untimed (BucketOptions::timed = false) when the step is recorded
// as a CUDA graph, whose capture turns those events into dependencies that cannot be read back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.hpp"
#include "train/parallel/communicator.hpp"

namespace cnnergy {
class Executor;
}

namespace cnnergy::dist {

struct BucketOptions {
  std::size_t cap_bytes = std::size_t{25} << 20;  // close a bucket once it holds this much
  bool overlap = true;  // launch each bucket from the backward hook (false: all after backward)
  // Diagnostic: after backward, a one-element all-reduce before the buckets absorbs the wait for
  // the slowest rank, so the bucket timings are pure transfers. Implies no overlap; needs timed.
  bool wait_barrier = false;
  // Bracket every bucket's all-reduce with communication-stream events (timings()). Off for a step
  // recorded as a CUDA graph: an event recorded during the capture is a dependency inside the
  // graph, not a timestamp, and cannot be read back after a replay.
  bool timed = true;
};

struct BucketInfo {
  DType dtype = DType::kF32;
  std::size_t bytes = 0;  // buffer size (parameters aligned to 256 bytes)
  std::size_t num_parameters = 0;
  std::size_t ready_layer = 0;  // the bucket is complete after this layer's backward
  std::string first_parameter;  // for reports: "<layer>.weight" of the first (deepest) parameter
};

// Durations (ms) measured on the communication stream in one step.
struct BucketStepTiming {
  std::vector<double> bucket_ms;  // per bucket: from "could start" to done
  double barrier_ms = 0;          // the wait_barrier all-reduce (0 without it)
};

class GradientBuckets {
 public:
  // Builds the buckets, re-points every parameter gradient of `executor` into them, zeroes them and
  // installs the executor's layer hook (removed again by the destructor). Every rank must build the
  // same buckets: the caller agrees on the model first.
  GradientBuckets(Executor& executor, Communicator& comm, const BucketOptions& options);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  const std::vector<BucketInfo>& buckets() const { return info_; }
  const BucketOptions& options() const { return options_; }

  // Around Executor::backward(): begin_step() arms the hook; end_backward() launches the buckets
  // not launched yet and orders the compute stream after all of them (the update may then run).
  void begin_step();
  void end_backward();

  // Timings of finished steps, oldest first (none when untimed). harvest() collects the steps that
  // are certainly done (Communicator::end_step keeps the host at most one step ahead); pass
  // all = true after Communicator::synchronize() to collect every step.
  void harvest(bool all);
  const std::vector<BucketStepTiming>& timings() const { return timings_; }
  void clear_timings() { timings_.clear(); }

 private:
  struct Bucket;
  struct Slot;
  void on_layer_backward_done(std::size_t layer);
  void launch(std::size_t b);
  void harvest_slot(Slot& slot);

  Executor& executor_;
  Communicator& comm_;
  BucketOptions options_;
  std::vector<BucketInfo> info_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<std::vector<std::size_t>> by_ready_layer_;  // layer -> buckets it completes
  std::vector<bool> launched_;
  Tensor barrier_tensor_;  // one element, for wait_barrier
  std::vector<std::unique_ptr<Slot>> ring_;
  std::uint64_t step_ = 0;
  bool in_step_ = false;
  std::vector<BucketStepTiming> timings_;
};

}  // namespace cnnergy::dist
