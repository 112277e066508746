// The results store: every sweep, trial and repetition in one SQLite file (WAL mode). Each trial is
// written in one transaction, so Ctrl-C or a crash keeps every finished trial; a file from another
// schema version, or one that is damaged or not a database, is refused with a DataError saying so.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tune/knobs.hpp"
#include "tune/metrics.hpp"

namespace cnnergy::tune {

class SqliteDb;
struct MergeReport;
struct MergeOptions;

// Where a sweep ran. The GPU fields come from telemetry (the caller fills them); host_environment()
// fills what the host knows.
struct Environment {
  std::vector<std::string> gpu_names;
  std::string driver_version, cuda_version, cudnn_version, host, date, cnnergy_version;
  std::map<std::string, std::string> extra;  // clocks, power limits, CPU, anything else worth keeping
};
Environment host_environment();  // host name, UTC date, cnnergy version
std::string utc_timestamp();     // ISO 8601, "2026-11-21T22:52:03Z"

struct SweepRecord {
  std::int64_t id = 0;           // set by the store
  std::string sweep_key;         // identity: the same key means the same sweep (resume, shards, merge)
  std::string created;           // ISO 8601 UTC; filled by add_sweep when empty
  std::string command_line;
  std::string description;       // workload and knob space, for people
  Environment environment;
  std::string notes;             // appended by merges (e.g. environments that differ)
};

// A study that is not a sweep of trials (a convolution study, `cnnergy convbench --db`): its whole JSON
// document, which `cnnergy report` draws as the command's own --html page does.
struct StudyRecord {
  std::int64_t id = 0;    // set by the store
  std::string kind;       // "convbench"
  std::string created;    // ISO 8601 UTC; filled by add_study when empty
  std::string command_line, device;
  std::string document_json;
};

// One finished trial as the sweep hands it to the store.
struct TrialRecord {
  TrialSpec spec;
  TrialStatus status = TrialStatus::kOk;
  std::string error_message;
  TrialMeasurement measurement;  // empty repetitions for a trial that did not run
  std::string started, finished;  // ISO 8601 UTC
};

// A stored trial as reports read it: the analysis summary plus bookkeeping.
struct StoredTrial {
  std::int64_t id = 0, sweep_id = 0;
  std::size_t trial_index = 0;
  TrialSummary summary;
  std::string error_message, started, finished;
  std::size_t repetitions = 0;
  double samples_per_iteration = 0, flops_per_iteration = 0;
  std::optional<double> accuracy;
  std::string slurm_job_id;  // "" outside Slurm or in a database before schema 5
};

class ResultStore {
 public:
  enum class Mode { kReadWrite, kReadOnly };
  // kReadWrite creates the file and schema when missing; kReadOnly needs an existing store.
  explicit ResultStore(const std::string& path, Mode mode = Mode::kReadWrite);
  ~ResultStore();
  ResultStore(ResultStore&&) noexcept;
  ResultStore& operator=(ResultStore&&) noexcept;

  const std::string& path() const;
  // The scheduler job id written with every trial from now on (store_jobs.cpp; merge copies each one's):
  // `sweep` sets it from the Slurm environment so `sacct` can be joined with the trials.
  void set_default_job_id(std::string job_id) { default_job_id_ = std::move(job_id); }

  // `tag` (`sweep --tag`): a label `compare --by tag` groups by; "" = none.
  std::int64_t add_sweep(const SweepRecord& sweep, const std::string& tag = "");
  std::string sweep_tag(std::int64_t sweep_id) const;  // "" when none (or the database predates schema 3)
  std::optional<SweepRecord> find_sweep(const std::string& sweep_key) const;  // the newest with that key
  std::vector<SweepRecord> sweeps() const;                                    // by id
  SweepRecord sweep(std::int64_t id) const;                                   // DataError when absent
  void append_sweep_note(std::int64_t sweep_id, const std::string& note);

  // Writes the trial, its repetitions, phases and layers in one transaction; a trial with the same key
  // in the same sweep (a failed trial retried on --resume) is replaced. Metrics are computed here from
  // the repetitions, so stored medians always agree with the stored repetitions.
  void write_trial(std::int64_t sweep_id, const TrialRecord& trial);
  bool has_trial(std::int64_t sweep_id, const std::string& key) const;
  std::optional<TrialStatus> trial_status(std::int64_t sweep_id, const std::string& key) const;
  std::vector<StoredTrial> trials(std::int64_t sweep_id) const;  // by trial index
  // Claims (store_claims.cpp): processes running one sweep at once (a repeated --resume, shards on
  // one file) claim a trial before running it, so no trial is measured twice or under contention. False
  // when another live process on this host holds the claim (or one on another host), or when the trial
  // was stored with a result (ok, does not fit) after this process planned it. Claims of processes that
  // died (PID and start time) are taken over; release_trial() drops ours once the trial is stored.
  // `continuing`: the trial is stored ok with fewer windows than asked (an interleaved sweep cut short)
  // and this process adds the rest; its ok status does not refuse the claim.
  bool claim_trial(std::int64_t sweep_id, const std::string& key, bool continuing = false);
  void release_trial(std::int64_t sweep_id, const std::string& key);
  TrialRecord read_trial(std::int64_t trial_id) const;           // everything, repetitions included
  // Studies (store_studies.cpp), in one transaction each; studies() is empty for a database that
  // predates schema 4 (opened read-only) or holds none.
  std::int64_t add_study(const StudyRecord& study);
  std::vector<StudyRecord> studies() const;
  // The trial's telemetry statistics (telemetry/trial_stats.hpp as JSON); "" when it has none or the
  // database predates schema 3.
  std::string trial_telemetry_json(std::int64_t trial_id) const;
  // Time order (store_order.cpp): the highest repetition sequence number stored for the sweep (0 when
  // none), so a resumed sweep numbers its windows after the earlier run's.
  std::int64_t max_sequence(std::int64_t sweep_id) const;

 private:
  // Both run inside a transaction the caller holds.
  std::int64_t insert_sweep(const SweepRecord& sweep, const std::string& tag = "");
  std::int64_t insert_trial(std::int64_t sweep_id, const TrialRecord& trial);  // the trial's row id
  // Schema 3 (store_telemetry.cpp): tag and telemetry columns, written after the base rows and read
  // only where the database has them (older ones opened read-only do not).
  bool has_schema3_columns() const;
  void write_sweep_tag(std::int64_t sweep_id, const std::string& tag);
  void write_trial_telemetry(std::int64_t trial_id, const TrialMeasurement& m);
  void read_trial_telemetry(std::int64_t trial_id, TrialMeasurement& m) const;
  std::int64_t insert_study(const StudyRecord& study);  // inside the caller's transaction
  // Schema 5 (store_order.cpp): settle seconds and window order, written after the base rows; absent
  // from older databases opened read-only (they read as empty).
  bool has_schema5_columns() const;
  void write_trial_order(std::int64_t trial_id, const TrialMeasurement& m);
  void read_trial_order(std::int64_t trial_id, TrialMeasurement& m) const;
  // Schema 6 (store_jobs.cpp): the trial's Slurm job id; "" where the database predates it.
  void write_trial_job_id(std::int64_t trial_id, const std::string& job_id);
  std::string trial_job_id(std::int64_t trial_id) const;
  std::string default_job_id_;
  mutable std::optional<bool> has_job_column_;
  friend MergeReport merge_stores(const std::string& out_path, const std::vector<std::string>& input_paths,
                                  const MergeOptions& options);
  std::unique_ptr<SqliteDb> db_;
};

struct MergeReport {
  std::size_t sweeps_created = 0, sweeps_merged = 0, trials_copied = 0;
  std::size_t duplicates_kept = 0, duplicates_replaced = 0;
  std::size_t studies_copied = 0;
  std::vector<std::string> messages;  // one line per duplicate or environment difference
  std::vector<std::string> sweep_keys;  // the inputs' sweeps, in the order first seen
};

struct MergeOptions {
  // The inputs are the shards of one sweep (`merge --same-sweep`, a Slurm merge job): an input
  // holding another sweep key is refused, naming both keys, before anything is written.
  bool one_sweep = false;
};

// Merges result stores into `out_path` (created when missing): sweeps with the same key, tag and GPU
// names become one sweep (shards written on several hosts of one kind join; another tag or another
// GPU kind stays a sweep of its own, so results from different machines are never mixed); a trial present twice keeps the better status (ok > does_not_fit > skipped > failed), the
// existing one on a tie, and is reported. All inputs are checked before anything is written, and the
// merge is one transaction: it happens completely or not at all.
MergeReport merge_stores(const std::string& out_path, const std::vector<std::string>& input_paths);
MergeReport merge_stores(const std::string& out_path, const std::vector<std::string>& input_paths,
                         const MergeOptions& options);

}  // namespace cnnergy::tune
