// The sweep's planning and bookkeeping core, independent of how a trial is run: sweep identity,
// --shard and --resume selection, the dry-run plan, the failure policy (a batch that does not fit is
// recorded and larger ones skipped; too many failures in a row stop the sweep) and the loop that runs
// the plan and stores each trial as it finishes. The CLI plugs in "run one trial -> measurements".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tune/knobs.hpp"
#include "tune/metrics.hpp"
#include "tune/store.hpp"

namespace cnnergy::tune {

// --shard i/N: this process runs the trials whose index % N == i - 1. Interleaved rather than
// contiguous blocks because the trial list varies the workload knobs slowest: blocks would give one
// shard all the large batches, interleaving spreads every kind of trial evenly over the shards.
struct ShardSpec {
  std::size_t index = 1;  // 1-based
  std::size_t count = 1;
  bool contains(std::size_t trial_index) const { return trial_index % count == index - 1; }
  std::string str() const { return std::to_string(index) + "/" + std::to_string(count); }
};
ShardSpec parse_shard(const std::string& text);  // "i/N", 1 <= i <= N; InvalidArgument otherwise

// What makes two runs the same sweep: the workload, the knob space, the reference and every setting
// that changes what is measured (warm-up, window, repetitions, ...). Shard and resume flags are not
// part of it, so every shard of a sweep has the same key and `merge` joins them.
struct SweepDefinition {
  std::string workload;                          // "model=resnet50 ..." or "command=./train.sh --x"
  KnobSpace space;
  std::vector<KnobSetting> reference;            // empty: no reference trial
  std::map<std::string, std::string> settings;
  std::string canonical() const;                 // the text the key is a hash of
  std::string key() const;                       // "sw-" + 16 hex digits (FNV-1a 64 of canonical())
};

struct PlanOptions {
  ShardSpec shard;
  bool resume = false;        // skip trials the store already holds with a final status
  bool retry_failed = true;   // on resume, run failed trials again (ok, does_not_fit, skipped are final)
};

struct SweepPlan {
  std::vector<TrialSpec> all;     // the whole trial list
  std::vector<TrialSpec> to_run;  // this shard's trials still to run, in order
  std::size_t other_shards = 0, already_done = 0, retried = 0;
};

// `stored_status(key)` says what the store holds for a key (empty when nothing).
SweepPlan plan_sweep(std::vector<TrialSpec> trials, const PlanOptions& options,
                     const std::function<std::optional<TrialStatus>(const std::string&)>& stored_status);

// The dry-run listing: one line per trial with what will happen to it, then totals.
void print_plan(std::ostream& out, const SweepPlan& plan, const SweepDefinition& definition, const PlanOptions& options);

class FailurePolicy {
 public:
  // max_consecutive_failures == 0: never stop (each failure is recorded and the sweep goes on).
  explicit FailurePolicy(std::size_t max_consecutive_failures = 5) : max_failures_(max_consecutive_failures) {}
  // A reason to skip the trial without running it: a batch no larger, with every other knob the same,
  // did not fit in memory.
  std::optional<std::string> skip_reason(const TrialSpec& trial) const;
  void record(const TrialSpec& trial, TrialStatus status);
  bool should_stop() const { return max_failures_ && consecutive_failures_ >= max_failures_; }
  std::string stop_reason() const;

 private:
  std::size_t max_failures_;
  std::size_t consecutive_failures_ = 0;
  std::vector<TrialSpec> did_not_fit_;
};

struct SweepProgress {
  std::size_t done = 0, total = 0;   // trials finished in this run / planned in this run
  const TrialRecord* last = nullptr;  // the trial just stored (null in a "starting" call)
  const TrialSpec* starting = nullptr;  // set in the call made just before a trial runs
};

struct SweepOutcome {
  std::size_t ok = 0, failed = 0, does_not_fit = 0, skipped = 0;
  std::size_t run_elsewhere = 0;  // claimed or finished by another process on the same sweep (concurrent --resume)
  bool stopped_early = false;  // by the failure policy or by `should_cancel`
  std::string stop_reason;
};

// Runs one trial and returns its measurements. Throw OutOfMemory for a batch that does not fit
// (recorded as does_not_fit), any other cnnergy::Error or std::exception for a failed trial (recorded
// with its message). PermissionDenied and NotSupported stop the sweep: no later trial could run either.
using TrialRunner = std::function<TrialMeasurement(const TrialSpec&)>;

// Runs the plan, writing every trial to the store as soon as it finishes (one transaction each), so an
// interruption loses at most the trial in progress. `should_cancel` is polled between trials (the CLI
// sets it on SIGINT/SIGTERM); `on_progress` is called before each trial runs (`starting` set) and
// after each stored trial (`last` set).
SweepOutcome execute_sweep(ResultStore& store, std::int64_t sweep_id, const SweepPlan& plan, const TrialRunner& run,
                           FailurePolicy& policy, const std::function<bool()>& should_cancel = {},
                           const std::function<void(const SweepProgress&)>& on_progress = {});

}  // namespace cnnergy::tune
