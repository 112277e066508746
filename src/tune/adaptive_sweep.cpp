// Running adaptive_search against real (or simulated) trials, storing every measurement.
#include "tune/adaptive_sweep.hpp"

#include <cmath>
#include <map>

#include "core/errors.hpp"

namespace cnnergy::tune {

AdaptiveSweepResult execute_adaptive_sweep(ResultStore& store, std::int64_t sweep_id, const std::vector<TrialSpec>& trials,
                                           Knob knob, const Objective& objective, const TrialRunner& run,
                                           const AdaptiveOptions& options,
                                           const std::function<void(const SweepProgress&)>& on_progress,
                                           const std::function<bool(const TrialMeasurement&)>& feasible) {
  if (knob != Knob::kPowerLimit && knob != Knob::kSmClock && knob != Knob::kMemClock)
    throw InvalidArgument("the adaptive search works on one hardware knob (power limit, SM or memory clock), not " +
                          std::string(knob_name(knob)));
  std::vector<double> candidates;
  std::vector<const TrialSpec*> specs;
  const TrialSpec* reference = nullptr;
  for (const TrialSpec& t : trials) {
    if (t.knobs.size() != 1 || t.knobs[0].knob != knob)
      throw InvalidArgument("the adaptive search needs a sweep over " + std::string(knob_name(knob)) + " alone; trial '" +
                            t.key + "' sets other knobs");
    if (t.reference) reference = &t;
    if (!t.knobs[0].value.number) continue;  // e.g. an unlocked clock: the reference, not a candidate
    candidates.push_back(static_cast<double>(*t.knobs[0].value.number));
    specs.push_back(&t);
  }
  AdaptiveOptions opts = options;
  const std::size_t budget = opts.max_trials ? opts.max_trials : candidates.size() / 3;
  opts.max_trials = reference && budget > 0 ? budget - 1 : budget;

  AdaptiveSweepResult result;
  std::map<std::string, TrialRecord> stored;  // accumulated repetitions per key
  std::optional<TrialSummary> ref_summary;
  const std::size_t planned = budget;

  // Runs one trial, stores the accumulated record, returns this run's own metrics (empty on failure).
  auto run_trial = [&](const TrialSpec& spec) -> std::optional<std::map<Metric, Stats>> {
    TrialRecord& rec = stored.try_emplace(spec.key, TrialRecord{spec, TrialStatus::kOk, "", {}, utc_timestamp(), ""}).first->second;
    std::optional<std::map<Metric, Stats>> own;
    TrialRecord attempt = rec;
    if (on_progress) on_progress(SweepProgress{result.trials_run, planned, nullptr, &spec});
    try {
      const TrialMeasurement m = run(spec);
      own = compute_trial_metrics(m);  // validates this run before it joins the stored record
      if (m.repetitions.empty()) throw InvalidArgument("the trial produced no repetitions");
      if (attempt.status != TrialStatus::kOk || attempt.measurement.repetitions.empty()) {
        attempt.measurement = m;
      } else {
        attempt.measurement.repetitions.insert(attempt.measurement.repetitions.end(), m.repetitions.begin(), m.repetitions.end());
      }
      attempt.status = TrialStatus::kOk;
      attempt.error_message.clear();
    } catch (const PermissionDenied& e) {
      attempt.status = TrialStatus::kFailed;
      attempt.error_message = e.what();
      attempt.finished = utc_timestamp();
      store.write_trial(sweep_id, attempt);
      throw;
    } catch (const NotSupported& e) {
      attempt.status = TrialStatus::kFailed;
      attempt.error_message = e.what();
      attempt.finished = utc_timestamp();
      store.write_trial(sweep_id, attempt);
      throw;
    } catch (const OutOfMemory& e) {
      own.reset();
      if (attempt.measurement.repetitions.empty()) {
        attempt.status = TrialStatus::kDoesNotFit;
        attempt.error_message = e.what();
      }
    } catch (const std::exception& e) {
      own.reset();  // an earlier good reading of this value stays; a first failure is recorded as such
      if (attempt.measurement.repetitions.empty()) {
        attempt.status = TrialStatus::kFailed;
        attempt.error_message = e.what();
      }
    }
    attempt.finished = utc_timestamp();
    store.write_trial(sweep_id, attempt);
    rec = attempt;
    ++result.trials_run;
    if (on_progress) on_progress(SweepProgress{result.trials_run, planned, &rec});
    return own;
  };

  if (reference) {
    if (const auto m = run_trial(*reference)) {
      TrialSummary s;
      s.key = reference->key;
      s.knobs = reference->knobs;
      s.reference = true;
      s.metrics = *m;
      ref_summary = s;
    }
  }
  const MeasureFn measure = [&](double value) {
    std::size_t i = 0;
    while (candidates[i] != value) ++i;
    const auto m = run_trial(*specs[i]);
    if (!m) return std::nan("");
    if (feasible && !feasible(stored.at(specs[i]->key).measurement)) return std::nan("");  // outside the bound
    TrialSummary s;
    s.key = specs[i]->key;
    s.knobs = specs[i]->knobs;
    s.metrics = *m;
    const bool per_sample = m->count(Metric::kTimePerSample) && m->count(Metric::kEnergyPerSample);
    const auto v = objective_value(s, objective, ref_summary ? &*ref_summary : nullptr, per_sample);
    if (!v) {
      if (objective.kind == Objective::Kind::kEds && !ref_summary)
        throw InvalidArgument("EDS needs the reference trial, which did not finish; search for energy or EDP instead");
      throw InvalidArgument("trial '" + specs[i]->key + "' did not measure " + objective.label());
    }
    return objective.maximise() ? -*v : *v;
  };
  result.search = opts.max_trials >= candidates.size() ? grid_search(candidates, measure) : adaptive_search(candidates, measure, opts);
  if (objective.maximise()) result.search.best_metric = -result.search.best_metric;  // back to the metric's sign
  result.best_key = specs[result.search.best_index]->key;
  return result;
}

}  // namespace cnnergy::tune
