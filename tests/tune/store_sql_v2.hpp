// The results store's schema version 2 exactly as cnnergy 42b956e wrote it (copied from that
// commit's src/tune/store_sql.hpp): the upgrade test builds a version-2 database from this DDL, so
// the test does not depend on what later schema code creates.
#pragma once

#include <string>
#include <vector>

#include "tune/knobs.hpp"
#include "tune/metrics.hpp"

namespace cnnergy::tune::sql_v2 {

inline constexpr int kSchemaVersion = 2;
inline constexpr const char* kApplication = "cnnergy-results";
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

}  // namespace cnnergy::tune::sql_v2
