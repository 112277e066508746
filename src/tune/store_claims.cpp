// Trial claims in the results store: a side table (not part of the schema version; readers ignore it)
// holding which process runs which trial of a sweep, taken and checked in one write transaction.
#include <unistd.h>

#include <climits>
#include <ctime>

#include "core/subprocess.hpp"
#include "tune/sqlite.hpp"
#include "tune/store.hpp"

namespace cnnergy::tune {

namespace {

constexpr const char* kClaimsTable =
    "CREATE TABLE IF NOT EXISTS trial_claims (sweep_id INTEGER NOT NULL, trial_key TEXT NOT NULL, host TEXT NOT NULL, "
    "pid INTEGER NOT NULL, pid_start_ticks INTEGER NOT NULL, claimed_unix_s INTEGER NOT NULL, "
    "PRIMARY KEY (sweep_id, trial_key))";

std::string this_host() {
  char buf[HOST_NAME_MAX + 1] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace

bool ResultStore::claim_trial(std::int64_t sweep_id, const std::string& key, bool continuing) {
  const long me = static_cast<long>(::getpid());
  const std::int64_t my_start = static_cast<std::int64_t>(process_start_ticks(me).value_or(0));
  const std::string host = this_host();
  SqliteTransaction tx(*db_);
  db_->exec(kClaimsTable);
  if (const auto status = trial_status(sweep_id, key);
      (status == TrialStatus::kOk && !continuing) || status == TrialStatus::kDoesNotFit)
    return false;  // another process stored it since we planned (tx rolls back)
  {
    SqliteStmt st(*db_, "SELECT host, pid, pid_start_ticks FROM trial_claims WHERE sweep_id = ? AND trial_key = ?");
    st.bind(1, sweep_id).bind(2, key);
    if (st.step()) {
      const std::string h = st.get_text(0);
      const long pid = static_cast<long>(st.get_int(1));
      const auto start = static_cast<std::uint64_t>(st.get_int(2));
      const bool mine = h == host && pid == me && static_cast<std::int64_t>(start) == my_start;
      if (!mine) {
        if (h != host) return false;  // a process on another machine: its liveness cannot be checked
        const auto now = process_start_ticks(pid);
        if (now && (start == 0 || *now == start)) return false;  // that process is still running it
      }
    }
  }
  SqliteStmt ins(*db_, "INSERT OR REPLACE INTO trial_claims (sweep_id, trial_key, host, pid, pid_start_ticks, "
                       "claimed_unix_s) VALUES (?, ?, ?, ?, ?, ?)");
  ins.bind(1, sweep_id).bind(2, key).bind(3, host).bind(4, static_cast<std::int64_t>(me)).bind(5, my_start);
  ins.bind(6, static_cast<std::int64_t>(std::time(nullptr)));
  ins.run();
  tx.commit();
  return true;
}

void ResultStore::release_trial(std::int64_t sweep_id, const std::string& key) {
  SqliteTransaction tx(*db_);
  db_->exec(kClaimsTable);
  SqliteStmt st(*db_, "DELETE FROM trial_claims WHERE sweep_id = ? AND trial_key = ? AND pid = ?");
  st.bind(1, sweep_id).bind(2, key).bind(3, static_cast<std::int64_t>(::getpid()));
  st.run();
  tx.commit();
}

}  // namespace cnnergy::tune
