// The order a sweep measures its windows in. Back-to-back windows on a GPU are not independent (it
// heats, leaks more, clocks drift), so a sweep that measures setting A three times, then B three
// times, ... confounds the setting with time. Interleaved order visits A, B, C, A, B, C, ... (one
// window per visit, the reference in every pass); random shuffles each pass (seeded); sequential is
// the old A, A, A, B, B, B. Every window gets its place in the sweep's time order (Repetition::sequence).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "tune/plan.hpp"

namespace cnnergy::tune {

enum class SweepOrder { kInterleaved, kRandom, kSequential };
SweepOrder parse_sweep_order(std::string_view text);  // interleaved | random | sequential (InvalidArgument)
std::string_view sweep_order_name(SweepOrder order);

struct OrderOptions {
  SweepOrder order = SweepOrder::kSequential;
  // Interleaved and random: passes over the trials, one window per visit (the runner must measure
  // one window per call); more passes, up to max_passes, for trials whose time or energy per
  // iteration still varies more than cv_threshold (--windows auto).
  int passes = 3;
  int max_passes = 0;
  double cv_threshold = 0.05;
  std::uint64_t seed = 0;  // random order: the shuffle's seed (printed, so a run can be replayed)
};

// Windows (visits) the plan will measure at least: trials x passes, or trials for sequential order.
std::size_t planned_visits(const SweepPlan& plan, const OrderOptions& options);

// execute_sweep (tune/plan.hpp) in the given order. Sequential order runs each trial once (the runner
// measures all its windows). Interleaved and random orders call the runner once per visit and store
// the trial after every visit with all its windows so far (status ok from the first), so an
// interruption keeps every finished window; `SweepProgress::done/total` count visits. A visit that
// fails ends that trial (stored failed, its earlier windows dropped); does-not-fit and skips work as
// in execute_sweep. Repetitions are numbered from store.max_sequence(sweep_id) + 1 in time order.
SweepOutcome execute_sweep_in_order(ResultStore& store, std::int64_t sweep_id, const SweepPlan& plan,
                                    const TrialRunner& run, FailurePolicy& policy, const OrderOptions& options,
                                    const std::function<bool()>& should_cancel = {},
                                    const std::function<void(const SweepProgress&)>& on_progress = {});

}  // namespace cnnergy::tune
