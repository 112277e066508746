// Schema 5 of the results store: how long each trial waited for thermally steady starts and where
// each of its windows falls in the sweep's time order (interleaved sweeps visit a trial several
// times). Written right after the base rows, inside the same transaction; databases of schema 1-4
// opened read-only lack the columns and read as "unknown".
#include "tune/sqlite.hpp"
#include "tune/store.hpp"
#include "tune/store_sql.hpp"

namespace cnnergy::tune {

bool ResultStore::has_schema5_columns() const {
  SqliteStmt st(*db_, sql::kHasColumn);
  st.bind(1, "repetitions").bind(2, "sequence");
  st.step();
  return st.get_int(0) > 0;
}

void ResultStore::write_trial_order(std::int64_t trial_id, const TrialMeasurement& m) {
  if (m.settle_s) {
    SqliteStmt st(*db_, sql::kSetTrialSettle);
    st.bind(1, m.settle_s).bind(2, trial_id);
    st.run();
  }
  SqliteStmt rep(*db_, sql::kSetRepetitionOrder);
  for (std::size_t r = 0; r < m.repetitions.size(); ++r) {
    const Repetition& x = m.repetitions[r];
    if (!x.sequence && !x.settle_s) continue;
    rep.reset();
    rep.bind(1, x.sequence).bind(2, x.settle_s).bind(3, trial_id).bind(4, static_cast<std::int64_t>(r));
    rep.run();
  }
}

void ResultStore::read_trial_order(std::int64_t trial_id, TrialMeasurement& m) const {
  if (!has_schema5_columns()) return;
  {
    SqliteStmt st(*db_, sql::kSelectTrialSettle);
    st.bind(1, trial_id);
    if (st.step()) m.settle_s = st.get_optional_double(0);
  }
  SqliteStmt st(*db_, sql::kSelectRepetitionOrder);
  st.bind(1, trial_id);
  for (std::size_t r = 0; st.step() && r < m.repetitions.size(); ++r) {
    m.repetitions[r].sequence = st.get_optional_int(0);
    m.repetitions[r].settle_s = st.get_optional_double(1);
  }
}

std::int64_t ResultStore::max_sequence(std::int64_t sweep_id) const {
  if (!has_schema5_columns()) return 0;
  SqliteStmt st(*db_, sql::kMaxSequence);
  st.bind(1, sweep_id);
  return st.step() ? st.get_optional_int(0).value_or(0) : 0;
}

}  // namespace cnnergy::tune
