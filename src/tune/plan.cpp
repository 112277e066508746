// Sweep identity, shard/resume planning, the dry-run listing, the failure policy and the trial loop.
#include "tune/plan.hpp"

#include <charconv>
#include <cstdio>
#include <exception>

#include "core/errors.hpp"
#include "core/hash.hpp"

namespace cnnergy::tune {

ShardSpec parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  auto number = [&](const std::string& s) {
    std::size_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || p != s.data() + s.size())
      throw InvalidArgument("invalid --shard '" + text + "': expected i/N with 1 <= i <= N, e.g. 2/8");
    return v;
  };
  if (slash == std::string::npos) throw InvalidArgument("invalid --shard '" + text + "': expected i/N with 1 <= i <= N, e.g. 2/8");
  ShardSpec s{number(text.substr(0, slash)), number(text.substr(slash + 1))};
  if (s.count < 1 || s.index < 1 || s.index > s.count)
    throw InvalidArgument("invalid --shard '" + text + "': the shard number must be between 1 and the shard count");
  return s;
}

std::string SweepDefinition::canonical() const {
  std::string out = "workload=" + workload + "\nknobs=" + space.describe() + "\nreference=" +
                    (reference.empty() ? std::string("none") : trial_key(reference)) + "\n";
  for (const auto& [k, v] : settings) out += "setting:" + k + "=" + v + "\n";  // std::map: sorted
  return out;
}

std::string SweepDefinition::key() const {
  const std::uint64_t h = fnv1a64(canonical());  // stable across compilers and runs
  char buf[24];
  std::snprintf(buf, sizeof buf, "sw-%016llx", static_cast<unsigned long long>(h));
  return buf;
}

SweepPlan plan_sweep(std::vector<TrialSpec> trials, const PlanOptions& options,
                     const std::function<std::optional<TrialStatus>(const std::string&)>& stored_status) {
  SweepPlan plan;
  for (const TrialSpec& t : trials) {
    if (!options.shard.contains(t.index)) {
      ++plan.other_shards;
      continue;
    }
    if (options.resume && stored_status) {
      if (const auto st = stored_status(t.key)) {
        if (*st != TrialStatus::kFailed || !options.retry_failed) {
          ++plan.already_done;
          continue;
        }
        ++plan.retried;
      }
    }
    plan.to_run.push_back(t);
  }
  plan.all = std::move(trials);
  return plan;
}

void print_plan(std::ostream& out, const SweepPlan& plan, const SweepDefinition& definition, const PlanOptions& options) {
  out << "sweep " << definition.key() << ": " << definition.workload << "\n";
  out << "knobs: " << definition.space.describe() << "\n";
  if (!definition.reference.empty()) out << "reference: " << trial_key(definition.reference) << "\n";
  for (const auto& [k, v] : definition.settings) out << "  " << k << " = " << v << "\n";
  std::size_t next = 0;
  for (const TrialSpec& t : plan.all) {
    const char* what = "done (resume)";
    if (!options.shard.contains(t.index)) {
      what = "other shard";
    } else if (next < plan.to_run.size() && plan.to_run[next].index == t.index) {
      what = "run";
      ++next;
    }
    char idx[32];
    std::snprintf(idx, sizeof idx, "%5zu", t.index);
    out << idx << "  " << what << (t.reference ? "  [reference]  " : "  ") << t.key << "\n";
  }
  out << plan.all.size() << " trials in the sweep; " << plan.to_run.size() << " to run";
  if (options.shard.count > 1) out << " in shard " << options.shard.str() << " (" << plan.other_shards << " in other shards)";
  if (options.resume) out << "; " << plan.already_done << " already done, " << plan.retried << " failed ones retried";
  out << "\n";
}

std::optional<std::string> FailurePolicy::skip_reason(const TrialSpec& trial) const {
  const KnobValue* batch = trial.find(Knob::kBatch);
  if (!batch || !batch->number) return std::nullopt;
  for (const TrialSpec& oom : did_not_fit_) {
    const KnobValue* b = oom.find(Knob::kBatch);
    if (!b || !b->number || *b->number > *batch->number || oom.knobs.size() != trial.knobs.size()) continue;
    bool same_otherwise = true;
    for (std::size_t i = 0; i < trial.knobs.size() && same_otherwise; ++i)
      same_otherwise = trial.knobs[i].knob == oom.knobs[i].knob &&
                       (trial.knobs[i].knob == Knob::kBatch || trial.knobs[i].value == oom.knobs[i].value);
    if (same_otherwise)
      return "batch " + std::to_string(*batch->number) + " not tried: batch " + std::to_string(*b->number) +
             " with the same other knobs did not fit in memory (" + oom.key + ")";
  }
  return std::nullopt;
}

void FailurePolicy::record(const TrialSpec& trial, TrialStatus status) {
  if (status == TrialStatus::kDoesNotFit) did_not_fit_.push_back(trial);
  if (status == TrialStatus::kFailed) ++consecutive_failures_;
  else if (status == TrialStatus::kOk) consecutive_failures_ = 0;
}

std::string FailurePolicy::stop_reason() const {
  return std::to_string(consecutive_failures_) + " trials failed in a row; stopping the sweep (the failures are "
         "recorded in the database; fix the cause and rerun with --resume)";
}

SweepOutcome execute_sweep(ResultStore& store, std::int64_t sweep_id, const SweepPlan& plan, const TrialRunner& run,
                           FailurePolicy& policy, const std::function<bool()>& should_cancel,
                           const std::function<void(const SweepProgress&)>& on_progress) {
  SweepOutcome outcome;
  std::size_t done = 0;
  for (const TrialSpec& spec : plan.to_run) {
    if (should_cancel && should_cancel()) {
      outcome.stopped_early = true;
      outcome.stop_reason = "interrupted; " + std::to_string(done) + " trials of this run are stored (rerun with --resume)";
      break;
    }
    if (!store.claim_trial(sweep_id, spec.key)) {  // another process runs (or ran) it
      ++outcome.run_elsewhere;
      continue;
    }
    struct Release {  // the claim goes once the trial is stored, or when an error ends the sweep
      ResultStore& store;
      std::int64_t sweep_id;
      const std::string& key;
      ~Release() {
        try {
          store.release_trial(sweep_id, key);
        } catch (const std::exception&) {  // a stale claim of a dead process is taken over later
        }
      }
    } release{store, sweep_id, spec.key};
    TrialRecord rec;
    rec.spec = spec;
    rec.started = utc_timestamp();
    if (auto reason = policy.skip_reason(spec)) {
      rec.status = TrialStatus::kSkipped;
      rec.error_message = *reason;
    } else {
      if (on_progress) on_progress(SweepProgress{done, plan.to_run.size(), nullptr, &spec});
      try {
        rec.measurement = run(spec);
        rec.status = TrialStatus::kOk;
        compute_trial_metrics(rec.measurement);  // a bad measurement is this trial's failure, not the sweep's
        if (rec.measurement.repetitions.empty()) throw InvalidArgument("the trial produced no repetitions");
      } catch (const OutOfMemory& e) {
        rec = TrialRecord{spec, TrialStatus::kDoesNotFit, e.what(), {}, rec.started, {}};
      } catch (const PermissionDenied& e) {
        store.write_trial(sweep_id, TrialRecord{spec, TrialStatus::kFailed, e.what(), {}, rec.started, utc_timestamp()});
        throw;  // no later trial could change the device either
      } catch (const NotSupported& e) {
        store.write_trial(sweep_id, TrialRecord{spec, TrialStatus::kFailed, e.what(), {}, rec.started, utc_timestamp()});
        throw;
      } catch (const std::bad_alloc&) {
        rec = TrialRecord{spec, TrialStatus::kFailed, "out of host memory", {}, rec.started, {}};
      } catch (const std::exception& e) {
        rec = TrialRecord{spec, TrialStatus::kFailed, e.what(), {}, rec.started, {}};
      }
    }
    rec.finished = utc_timestamp();
    store.write_trial(sweep_id, rec);
    policy.record(spec, rec.status);
    ++done;
    switch (rec.status) {
      case TrialStatus::kOk: ++outcome.ok; break;
      case TrialStatus::kFailed: ++outcome.failed; break;
      case TrialStatus::kDoesNotFit: ++outcome.does_not_fit; break;
      case TrialStatus::kSkipped: ++outcome.skipped; break;
    }
    if (on_progress) on_progress(SweepProgress{done, plan.to_run.size(), &rec});
    if (policy.should_stop()) {
      outcome.stopped_early = true;
      outcome.stop_reason = policy.stop_reason();
      break;
    }
  }
  return outcome;
}

}  // namespace cnnergy::tune
