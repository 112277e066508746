// Every SQL statement of the results store, in one place: the schema (version 2) and the queries.
// Metric columns (<metric>_median/_stddev/_min/_max) and knob columns are generated from their
// tables, so adding a metric or a knob is a schema change: bump kSchemaVersion and add the step that
// upgrades the previous version (kUpgrades).
// Version history: 1 (first); 2 adds the trials.cuda_graph knob column; 3 adds telemetry statistics
// (trials.telemetry_json, repetitions.telemetry_json) and the sweep's tag (sweeps.tag); 4 adds the
// studies table (a convolution study's whole JSON document, `cnnergy convbench --db`); 5 adds time
// order and steady starts (trials.settle_s, repetitions.sequence and repetitions.settle_s); 6 adds the
// scheduler's job id of every trial (trials.slurm_job_id, for a join with `sacct`).
#pragma once

#include <string>
#include <vector>

#include "tune/knobs.hpp"
#include "tune/metrics.hpp"

namespace cnnergy::tune::sql {

inline constexpr int kSchemaVersion = 6;

// Version 3's columns, in their own list: added to a version-2 database by its first writer, and to
// every new database right after the base schema.
inline std::vector<std::string> telemetry_columns_v3() {
  return {"ALTER TABLE sweeps ADD COLUMN tag TEXT NOT NULL DEFAULT ''",
          "ALTER TABLE trials ADD COLUMN telemetry_json TEXT NOT NULL DEFAULT ''",
          "ALTER TABLE repetitions ADD COLUMN telemetry_json TEXT NOT NULL DEFAULT ''"};
}

// Version 4's table, likewise: added to a version-3 database by its first writer, and to every new one.
inline std::vector<std::string> studies_table_v4() {
  return {"CREATE TABLE IF NOT EXISTS studies (\n"
          "  id INTEGER PRIMARY KEY,\n"
          "  kind TEXT NOT NULL,\n"
          "  created TEXT NOT NULL,\n"
          "  command_line TEXT NOT NULL,\n"
          "  device TEXT NOT NULL,\n"
          "  document_json TEXT NOT NULL\n"
          ")"};
}

// Version 5's columns, likewise: the seconds a trial (and each visit before a window) waited for a
// steady start, and each window's place in the sweep's time order.
inline std::vector<std::string> order_columns_v5() {
  return {"ALTER TABLE trials ADD COLUMN settle_s REAL",
          "ALTER TABLE repetitions ADD COLUMN sequence INTEGER",
          "ALTER TABLE repetitions ADD COLUMN settle_s REAL"};
}

// Version 6's column, likewise: the Slurm job that measured the trial ("" outside Slurm).
inline std::vector<std::string> job_id_column_v6() {
  return {"ALTER TABLE trials ADD COLUMN slurm_job_id TEXT NOT NULL DEFAULT ''"};
}

// The statements that take a database of version v to v + 1, by v. Readers of an older version
// work unchanged (every knob is read back from trials.knobs_json); a writer upgrades on open.
inline std::vector<std::string> upgrade_from(int version) {
  switch (version) {
    case 1:
      return {"ALTER TABLE trials ADD COLUMN cuda_graph TEXT",
              "UPDATE schema_info SET value = '2' WHERE key = 'schema_version'"};
    case 2: {
      auto out = telemetry_columns_v3();
      out.push_back("UPDATE schema_info SET value = '3' WHERE key = 'schema_version'");
      return out;
    }
    case 3: {
      auto out = studies_table_v4();
      out.push_back("UPDATE schema_info SET value = '4' WHERE key = 'schema_version'");
      return out;
    }
    case 4: {
      auto out = order_columns_v5();
      out.push_back("UPDATE schema_info SET value = '5' WHERE key = 'schema_version'");
      return out;
    }
    case 5: {
      auto out = job_id_column_v6();
      out.push_back("UPDATE schema_info SET value = '6' WHERE key = 'schema_version'");
      return out;
    }
    default:
      return {};
  }
}
inline constexpr const char* kApplication = "cnnergy-results";

inline const char* const kPragmas =
    "PRAGMA journal_mode=WAL;"      // readers never block the writer; a crash keeps committed trials
    "PRAGMA synchronous=FULL;"      // a trial costs minutes: pay the fsync so power loss keeps it too
    "PRAGMA foreign_keys=ON;";

// Side tables (outside the schema version) do not make a file a results database: the Python
// optimizers may create the file with only their optimizer_decisions table.
inline const char* const kHasTables =
    "SELECT count(*) FROM sqlite_master WHERE type='table' AND name NOT IN ('trial_claims', 'optimizer_decisions')";
inline const char* const kHasSchemaInfo = "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='schema_info'";
inline const char* const kReadSchemaInfo = "SELECT key, value FROM schema_info";
inline const char* const kQuickCheck = "PRAGMA quick_check";
inline const char* const kHasStudies = "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='studies'";
inline const char* const kInsertStudy =
    "INSERT INTO studies (kind, created, command_line, device, document_json) VALUES (?, ?, ?, ?, ?)";
inline const char* const kSelectStudies =
    "SELECT id, kind, created, command_line, device, document_json FROM studies ORDER BY id";

inline const char* const kStatusCheck = "CHECK (status IN ('ok','failed','does_not_fit','skipped'))";

inline std::string metric_columns_ddl() {
  std::string out;
  for (Metric m : kAllMetrics)
    for (const char* s : {"_median", "_stddev", "_min", "_max"}) out += ",\n  " + std::string(metric_name(m)) + s + " REAL";
  return out;
}

inline std::string knob_columns_ddl() {
  std::string out;
  for (Knob k : kAllKnobs) out += ",\n  " + std::string(knob_name(k)) + (knob_is_numeric(k) ? " INTEGER" : " TEXT");
  return out;
}

inline std::vector<std::string> schema() {
  return {
      "CREATE TABLE schema_info (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
      "INSERT INTO schema_info (key, value) VALUES ('application', '" + std::string(kApplication) + "'), "
      "('schema_version', '" + std::to_string(kSchemaVersion) + "')",
      "CREATE TABLE sweeps (\n"
      "  id INTEGER PRIMARY KEY,\n"
      "  sweep_key TEXT NOT NULL,\n"
      "  created TEXT NOT NULL,\n"
      "  command_line TEXT NOT NULL,\n"
      "  description TEXT NOT NULL,\n"
      "  gpu_names TEXT NOT NULL,\n"         // JSON array
      "  driver_version TEXT, cuda_version TEXT, cudnn_version TEXT, host TEXT, run_date TEXT, cnnergy_version TEXT,\n"
      "  environment_json TEXT NOT NULL,\n"  // everything, extras included
      "  notes TEXT NOT NULL DEFAULT '')",
      "CREATE INDEX sweeps_by_key ON sweeps (sweep_key)",
      "CREATE TABLE trials (\n"
      "  id INTEGER PRIMARY KEY,\n"
      "  sweep_id INTEGER NOT NULL REFERENCES sweeps (id) ON DELETE CASCADE,\n"
      "  trial_index INTEGER NOT NULL,\n"
      "  trial_key TEXT NOT NULL,\n"
      "  knobs_json TEXT NOT NULL" + knob_columns_ddl() + ",\n"
      "  status TEXT NOT NULL " + kStatusCheck + ",\n"
      "  error_message TEXT NOT NULL DEFAULT '',\n"
      "  is_reference INTEGER NOT NULL DEFAULT 0,\n"
      "  started TEXT, finished TEXT,\n"
      "  repetitions INTEGER NOT NULL DEFAULT 0,\n"
      "  samples_per_iteration REAL, flops_per_iteration REAL, accuracy REAL,\n"
      "  metrics_json TEXT NOT NULL DEFAULT '{}'" + metric_columns_ddl() + ",\n"
      "  UNIQUE (sweep_id, trial_key))",
      "CREATE TABLE repetitions (\n"
      "  id INTEGER PRIMARY KEY,\n"
      "  trial_id INTEGER NOT NULL REFERENCES trials (id) ON DELETE CASCADE,\n"
      "  rep_index INTEGER NOT NULL,\n"
      "  elapsed_ms REAL NOT NULL,\n"
      "  iterations INTEGER NOT NULL,\n"
      "  samples REAL,\n"
      "  energy_mj_json TEXT NOT NULL,\n"  // per GPU
      "  energy_mj_total REAL,\n"
      "  avg_power_w REAL, peak_power_w REAL, max_temperature_c REAL,\n"
      "  energy_source TEXT NOT NULL DEFAULT '',\n"
      "  UNIQUE (trial_id, rep_index))",
      "CREATE TABLE phases (\n"
      "  trial_id INTEGER NOT NULL REFERENCES trials (id) ON DELETE CASCADE,\n"
      "  phase_index INTEGER NOT NULL,\n"
      "  phase TEXT NOT NULL,\n"
      "  time_ms REAL NOT NULL, time_ms_stddev REAL, energy_mj REAL NOT NULL, energy_mj_stddev REAL,\n"
      "  PRIMARY KEY (trial_id, phase_index))",
      "CREATE TABLE layers (\n"
      "  trial_id INTEGER NOT NULL REFERENCES trials (id) ON DELETE CASCADE,\n"
      "  layer_index INTEGER NOT NULL,\n"
      "  name TEXT NOT NULL, type TEXT NOT NULL,\n"
      "  forward_ms REAL NOT NULL, backward_ms REAL NOT NULL, energy_mj REAL, flops REAL,\n"
      "  PRIMARY KEY (trial_id, layer_index))",
  };
}

inline const char* const kInsertSweep =
    "INSERT INTO sweeps (sweep_key, created, command_line, description, gpu_names, driver_version, cuda_version, "
    "cudnn_version, host, run_date, cnnergy_version, environment_json, notes) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)";
inline const char* const kSweepColumns =
    "SELECT id, sweep_key, created, command_line, description, environment_json, notes FROM sweeps";
inline const char* const kAppendNote = "UPDATE sweeps SET notes = notes || ? WHERE id = ?";

inline std::string insert_trial() {
  std::string cols = "sweep_id, trial_index, trial_key, knobs_json";
  std::string qs = "?,?,?,?";
  for (Knob k : kAllKnobs) {
    cols += ", " + std::string(knob_name(k));
    qs += ",?";
  }
  cols += ", status, error_message, is_reference, started, finished, repetitions, samples_per_iteration, "
          "flops_per_iteration, accuracy, metrics_json";
  qs += ",?,?,?,?,?,?,?,?,?,?";
  for (Metric m : kAllMetrics)
    for (const char* s : {"_median", "_stddev", "_min", "_max"}) {
      cols += ", " + std::string(metric_name(m)) + s;
      qs += ",?";
    }
  return "INSERT INTO trials (" + cols + ") VALUES (" + qs + ")";
}

inline const char* const kDeleteTrial = "DELETE FROM trials WHERE sweep_id = ? AND trial_key = ?";
inline const char* const kTrialStatus = "SELECT status FROM trials WHERE sweep_id = ? AND trial_key = ?";
inline const char* const kTrialColumns =
    "SELECT id, sweep_id, trial_index, trial_key, status, error_message, is_reference, started, finished, repetitions, "
    "samples_per_iteration, flops_per_iteration, accuracy, metrics_json FROM trials";
inline const char* const kInsertRepetition =
    "INSERT INTO repetitions (trial_id, rep_index, elapsed_ms, iterations, samples, energy_mj_json, energy_mj_total, "
    "avg_power_w, peak_power_w, max_temperature_c, energy_source) VALUES (?,?,?,?,?,?,?,?,?,?,?)";
inline const char* const kSelectRepetitions =
    "SELECT elapsed_ms, iterations, energy_mj_json, peak_power_w, max_temperature_c, energy_source FROM repetitions "
    "WHERE trial_id = ? ORDER BY rep_index";
inline const char* const kInsertPhase =
    "INSERT INTO phases (trial_id, phase_index, phase, time_ms, time_ms_stddev, energy_mj, energy_mj_stddev) "
    "VALUES (?,?,?,?,?,?,?)";
inline const char* const kSelectPhases =
    "SELECT phase, time_ms, time_ms_stddev, energy_mj, energy_mj_stddev FROM phases WHERE trial_id = ? ORDER BY phase_index";
inline const char* const kInsertLayer =
    "INSERT INTO layers (trial_id, layer_index, name, type, forward_ms, backward_ms, energy_mj, flops) "
    "VALUES (?,?,?,?,?,?,?,?)";
inline const char* const kSetSweepTag = "UPDATE sweeps SET tag = ? WHERE id = ?";
inline const char* const kSetTrialTelemetry = "UPDATE trials SET telemetry_json = ? WHERE id = ?";
inline const char* const kSetRepetitionTelemetry =
    "UPDATE repetitions SET telemetry_json = ? WHERE trial_id = ? AND rep_index = ?";
inline const char* const kSelectTrialTelemetry = "SELECT telemetry_json FROM trials WHERE id = ?";
inline const char* const kSelectRepetitionTelemetry =
    "SELECT telemetry_json FROM repetitions WHERE trial_id = ? ORDER BY rep_index";
inline const char* const kSetTrialSettle = "UPDATE trials SET settle_s = ? WHERE id = ?";
inline const char* const kSetRepetitionOrder =
    "UPDATE repetitions SET sequence = ?, settle_s = ? WHERE trial_id = ? AND rep_index = ?";
inline const char* const kSelectTrialSettle = "SELECT settle_s FROM trials WHERE id = ?";
inline const char* const kSelectRepetitionOrder =
    "SELECT sequence, settle_s FROM repetitions WHERE trial_id = ? ORDER BY rep_index";
inline const char* const kMaxSequence =
    "SELECT max(r.sequence) FROM repetitions r JOIN trials t ON r.trial_id = t.id WHERE t.sweep_id = ?";
inline const char* const kSelectSweepTag = "SELECT tag FROM sweeps WHERE id = ?";
inline const char* const kSetTrialJobId = "UPDATE trials SET slurm_job_id = ? WHERE id = ?";
inline const char* const kSelectTrialJobId = "SELECT slurm_job_id FROM trials WHERE id = ?";
inline const char* const kHasColumn = "SELECT count(*) FROM pragma_table_info(?) WHERE name = ?";

inline const char* const kSelectLayers =
    "SELECT layer_index, name, type, forward_ms, backward_ms, energy_mj, flops FROM layers WHERE trial_id = ? "
    "ORDER BY layer_index";

}  // namespace cnnergy::tune::sql
