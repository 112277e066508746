// Interleaved, random and sequential sweep orders over execute_sweep's bookkeeping (claims, failure
// policy, one transaction per stored trial), with every window numbered in time order.
#include "tune/sweep_order.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <random>

#include "core/errors.hpp"
#include "core/log.hpp"

namespace cnnergy::tune {

SweepOrder parse_sweep_order(std::string_view text) {
  if (text == "interleaved") return SweepOrder::kInterleaved;
  if (text == "random") return SweepOrder::kRandom;
  if (text == "sequential") return SweepOrder::kSequential;
  throw InvalidArgument("unknown sweep order '" + std::string(text) + "': expected interleaved, random or sequential");
}

std::string_view sweep_order_name(SweepOrder order) {
  switch (order) {
    case SweepOrder::kInterleaved: return "interleaved";
    case SweepOrder::kRandom: return "random";
    case SweepOrder::kSequential: return "sequential";
  }
  return "sequential";
}

std::size_t planned_visits(const SweepPlan& plan, const OrderOptions& options) {
  if (options.order == SweepOrder::kSequential) return plan.to_run.size();
  return plan.to_run.size() * static_cast<std::size_t>(std::max(1, options.passes));
}

namespace {

// Per-iteration time and energy of each window: does the trial want another pass (--windows auto)?
bool wants_more(const TrialMeasurement& m, const OrderOptions& o, int passes_done) {
  if (passes_done < o.passes) return true;
  if (passes_done >= o.max_passes) return false;
  std::vector<double> ms, mj;
  for (const auto& r : m.repetitions) {
    if (r.iterations <= 0) continue;
    ms.push_back(r.elapsed_ms / static_cast<double>(r.iterations));
    double e = 0;
    for (double x : r.energy_mj) e += x;
    if (!r.energy_mj.empty()) mj.push_back(e / static_cast<double>(r.iterations));
  }
  auto noisy = [&](const std::vector<double>& v) { return v.size() >= 2 && compute_stats(v).cv() > o.cv_threshold; };
  return noisy(ms) || (mj.size() == ms.size() && noisy(mj));
}

// --windows auto: a trial still noisy after its last pass is said so (as the sequential runners do).
void warn_if_still_noisy(const TrialRecord& rec, const OrderOptions& o) {
  if (o.max_passes <= o.passes || rec.status != TrialStatus::kOk) return;
  std::vector<double> ms, mj;
  for (const auto& r : rec.measurement.repetitions) {
    if (r.iterations <= 0) continue;
    ms.push_back(r.elapsed_ms / static_cast<double>(r.iterations));
    double e = 0;
    for (double x : r.energy_mj) e += x;
    if (!r.energy_mj.empty()) mj.push_back(e / static_cast<double>(r.iterations));
  }
  if (ms.size() < 2) return;
  const double cv_t = compute_stats(ms).cv(), cv_e = mj.size() == ms.size() ? compute_stats(mj).cv() : 0;
  if (cv_t <= o.cv_threshold && cv_e <= o.cv_threshold) return;
  char buf[160];
  if (mj.size() == ms.size())
    std::snprintf(buf, sizeof buf, "CV of time %.3g %%, of energy %.3g %% > %.3g %%", 100 * cv_t, 100 * cv_e,
                  100 * o.cv_threshold);
  else
    std::snprintf(buf, sizeof buf, "CV of time %.3g %% > %.3g %%", 100 * cv_t, 100 * o.cv_threshold);
  log_warn("trial " + rec.spec.key + " stayed noisy after " + std::to_string(ms.size()) + " windows (" + buf +
           "): its interval is wide");
}

struct Visited {  // one trial across its visits
  const TrialSpec* spec = nullptr;
  TrialRecord record;
  int passes = 0;
  bool active = true;  // more visits to come
  bool claimed = false;
  bool continuing = false;  // stored ok with fewer windows than asked: this run adds the rest
};

void count(SweepOutcome& out, TrialStatus s) {
  switch (s) {
    case TrialStatus::kOk: ++out.ok; break;
    case TrialStatus::kFailed: ++out.failed; break;
    case TrialStatus::kDoesNotFit: ++out.does_not_fit; break;
    case TrialStatus::kSkipped: ++out.skipped; break;
  }
}

}  // namespace

SweepOutcome execute_sweep_in_order(ResultStore& store, std::int64_t sweep_id, const SweepPlan& plan,
                                    const TrialRunner& run, FailurePolicy& policy, const OrderOptions& options,
                                    const std::function<bool()>& should_cancel,
                                    const std::function<void(const SweepProgress&)>& on_progress) {
  std::int64_t next_sequence = store.max_sequence(sweep_id) + 1;
  auto number = [&](TrialMeasurement& m, std::size_t from) {
    for (std::size_t i = from; i < m.repetitions.size(); ++i) m.repetitions[i].sequence = next_sequence++;
  };
  if (options.order == SweepOrder::kSequential) {
    const TrialRunner numbered = [&](const TrialSpec& spec) {
      TrialMeasurement m = run(spec);
      number(m, 0);
      return m;
    };
    return execute_sweep(store, sweep_id, plan, numbered, policy, should_cancel, on_progress);
  }
  if (options.passes < 1) throw InvalidArgument("an interleaved sweep needs at least one pass");

  SweepOutcome outcome;
  std::vector<Visited> trials(plan.to_run.size());
  std::map<std::string, std::int64_t> stored_ok;  // a resumed interleaved sweep: trials with some windows
  for (const auto& t : store.trials(sweep_id))
    if (t.summary.status == TrialStatus::kOk) stored_ok[t.summary.key] = t.id;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    trials[i].spec = &plan.to_run[i];
    trials[i].record.spec = plan.to_run[i];
    if (const auto it = stored_ok.find(plan.to_run[i].key); it != stored_ok.end()) {  // continue it
      trials[i].record = store.read_trial(it->second);
      trials[i].record.spec = plan.to_run[i];
      trials[i].passes = static_cast<int>(trials[i].record.measurement.repetitions.size());
      trials[i].continuing = true;
    }
  }
  struct Claims {  // every claim this run holds goes when it ends, however it ends
    ResultStore& store;
    std::int64_t sweep_id;
    std::vector<Visited>& trials;
    ~Claims() {
      for (const auto& t : trials)
        if (t.claimed) try {
            store.release_trial(sweep_id, t.spec->key);
          } catch (const std::exception&) {  // a stale claim of a dead process is taken over later
          }
    }
  } claims{store, sweep_id, trials};
  std::mt19937_64 rng(options.seed);
  std::size_t done = 0, total = planned_visits(plan, options);
  for (int pass = 0;; ++pass) {
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < trials.size(); ++i) {
      if (trials[i].active && wants_more(trials[i].record.measurement, options, trials[i].passes)) {
        order.push_back(i);
      } else if (trials[i].active) {
        trials[i].active = false;
        warn_if_still_noisy(trials[i].record, options);
      }
    }
    if (order.empty()) break;
    if (pass >= options.passes) total = std::max(total, done + order.size());  // --windows auto: extra passes
    if (options.order == SweepOrder::kRandom) std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t i : order) {
      Visited& v = trials[i];
      const TrialSpec& spec = *v.spec;
      if (should_cancel && should_cancel()) {
        outcome.stopped_early = true;
        outcome.stop_reason = "interrupted after " + std::to_string(done) +
                              " windows; every finished window is stored (rerun with --resume to complete the trials)";
        for (const auto& t : trials)
          if (t.passes > 0) count(outcome, t.record.status);
        return outcome;
      }
      if (!v.claimed) {
        if (!store.claim_trial(sweep_id, spec.key, v.continuing)) {  // another process runs (or ran) it
          ++outcome.run_elsewhere;
          v.active = false;
          continue;
        }
        v.claimed = true;
      }
      TrialRecord& rec = v.record;
      if (rec.started.empty()) rec.started = utc_timestamp();
      if (auto reason = policy.skip_reason(spec)) {
        rec = TrialRecord{spec, TrialStatus::kSkipped, *reason, {}, rec.started, {}};
        v.active = false;
      } else {
        if (on_progress) on_progress(SweepProgress{done, total, nullptr, &spec});
        try {
          TrialMeasurement m = run(spec);
          if (m.repetitions.empty()) throw InvalidArgument("the trial produced no repetitions");
          number(m, 0);
          TrialMeasurement& acc = rec.measurement;
          const bool first = acc.repetitions.empty();
          for (auto& r : m.repetitions) acc.repetitions.push_back(std::move(r));
          for (std::size_t k = 0; k < m.repetition_telemetry_json.size(); ++k)
            acc.repetition_telemetry_json.push_back(std::move(m.repetition_telemetry_json[k]));
          acc.repetition_telemetry_json.resize(acc.repetitions.size());
          if (m.settle_s) acc.settle_s = acc.settle_s.value_or(0) + *m.settle_s;
          acc.settle_text = m.settle_text;
          if (first) {  // what does not change between visits
            acc.samples_per_iteration = m.samples_per_iteration;
            acc.flops_per_iteration = m.flops_per_iteration;
            acc.accuracy = m.accuracy;
            acc.phases = std::move(m.phases);
            acc.layers = std::move(m.layers);
            acc.algo_search_ms = m.algo_search_ms;
          }
          acc.telemetry_json = m.telemetry_json;  // the latest visit's statistics
          rec.status = TrialStatus::kOk;
          compute_trial_metrics(acc);
        } catch (const OutOfMemory& e) {
          rec = TrialRecord{spec, TrialStatus::kDoesNotFit, e.what(), {}, rec.started, {}};
          v.active = false;
        } catch (const PermissionDenied& e) {
          store.write_trial(sweep_id, TrialRecord{spec, TrialStatus::kFailed, e.what(), {}, rec.started, utc_timestamp()});
          throw;
        } catch (const NotSupported& e) {
          store.write_trial(sweep_id, TrialRecord{spec, TrialStatus::kFailed, e.what(), {}, rec.started, utc_timestamp()});
          throw;
        } catch (const std::bad_alloc&) {
          rec = TrialRecord{spec, TrialStatus::kFailed, "out of host memory", {}, rec.started, {}};
          v.active = false;
        } catch (const std::exception& e) {
          rec = TrialRecord{spec, TrialStatus::kFailed, e.what(), {}, rec.started, {}};
          v.active = false;
        }
      }
      ++v.passes;
      rec.finished = utc_timestamp();
      store.write_trial(sweep_id, rec);
      policy.record(spec, rec.status);
      ++done;
      if (on_progress) on_progress(SweepProgress{done, total, &rec});
      if (policy.should_stop()) {
        outcome.stopped_early = true;
        outcome.stop_reason = policy.stop_reason();
        for (const auto& t : trials)
          if (t.passes > 0) count(outcome, t.record.status);
        return outcome;
      }
    }
  }
  for (const auto& t : trials)
    if (t.passes > 0) count(outcome, t.record.status);
  return outcome;
}

}  // namespace cnnergy::tune
