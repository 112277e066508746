// Schema 6 of the results store: the Slurm job id of every trial, in a column of its own written
// right after the base row (inside the same transaction), so a site joins the trials' energy with
// `sacct`. Databases before schema 6 opened read-only lack the column: their trials read as "".
#include "tune/sqlite.hpp"
#include "tune/store.hpp"
#include "tune/store_sql.hpp"

namespace cnnergy::tune {

void ResultStore::write_trial_job_id(std::int64_t trial_id, const std::string& job_id) {
  if (job_id.empty()) return;  // the column's default
  SqliteStmt st(*db_, sql::kSetTrialJobId);
  st.bind(1, job_id).bind(2, trial_id);
  st.run();
}

std::string ResultStore::trial_job_id(std::int64_t trial_id) const {
  if (!has_job_column_) {
    SqliteStmt has(*db_, sql::kHasColumn);
    has.bind(1, "trials").bind(2, "slurm_job_id");
    has.step();
    has_job_column_ = has.get_int(0) > 0;
  }
  if (!*has_job_column_) return "";
  SqliteStmt st(*db_, sql::kSelectTrialJobId);
  st.bind(1, trial_id);
  return st.step() ? st.get_text(0) : std::string();
}

}  // namespace cnnergy::tune
