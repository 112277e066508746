// Schema 3 of the results store: the sweep's tag and the telemetry statistics of every trial and
// repetition, kept in columns of their own and written right after the base rows (inside the same
// transaction). Databases of schema 1-2 opened read-only lack the columns: they read as empty.
#include "tune/sqlite.hpp"
#include "tune/store.hpp"
#include "tune/store_sql.hpp"

namespace cnnergy::tune {

bool ResultStore::has_schema3_columns() const {
  SqliteStmt st(*db_, sql::kHasColumn);
  st.bind(1, "trials").bind(2, "telemetry_json");
  st.step();
  return st.get_int(0) > 0;
}

void ResultStore::write_sweep_tag(std::int64_t sweep_id, const std::string& tag) {
  SqliteStmt st(*db_, sql::kSetSweepTag);
  st.bind(1, tag).bind(2, sweep_id);
  st.run();
}

void ResultStore::write_trial_telemetry(std::int64_t trial_id, const TrialMeasurement& m) {
  if (!m.telemetry_json.empty()) {
    SqliteStmt st(*db_, sql::kSetTrialTelemetry);
    st.bind(1, m.telemetry_json).bind(2, trial_id);
    st.run();
  }
  SqliteStmt rep(*db_, sql::kSetRepetitionTelemetry);
  for (std::size_t r = 0; r < m.repetition_telemetry_json.size() && r < m.repetitions.size(); ++r) {
    if (m.repetition_telemetry_json[r].empty()) continue;
    rep.reset();
    rep.bind(1, m.repetition_telemetry_json[r]).bind(2, trial_id).bind(3, static_cast<std::int64_t>(r));
    rep.run();
  }
}

void ResultStore::read_trial_telemetry(std::int64_t trial_id, TrialMeasurement& m) const {
  if (!has_schema3_columns()) return;
  m.telemetry_json = trial_telemetry_json(trial_id);
  SqliteStmt st(*db_, sql::kSelectRepetitionTelemetry);
  st.bind(1, trial_id);
  m.repetition_telemetry_json.clear();
  while (st.step()) m.repetition_telemetry_json.push_back(st.get_text(0));
}

std::string ResultStore::trial_telemetry_json(std::int64_t trial_id) const {
  if (!has_schema3_columns()) return "";
  SqliteStmt st(*db_, sql::kSelectTrialTelemetry);
  st.bind(1, trial_id);
  return st.step() ? st.get_text(0) : std::string();
}

std::string ResultStore::sweep_tag(std::int64_t sweep_id) const {
  if (!has_schema3_columns()) return "";
  SqliteStmt st(*db_, sql::kSelectSweepTag);
  st.bind(1, sweep_id);
  return st.step() ? st.get_text(0) : std::string();
}

}  // namespace cnnergy::tune
