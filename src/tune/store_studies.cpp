// Schema 4 of the results store: studies that are not sweeps of trials (a convolution study), each kept
// as its whole JSON document so that `cnnergy report` draws it as the command's own page does.
// Databases of schema 1-3 opened read-only have no studies table: they hold no study.
#include "core/errors.hpp"
#include "core/json.hpp"
#include "tune/sqlite.hpp"
#include "tune/store.hpp"
#include "tune/store_sql.hpp"

namespace cnnergy::tune {

std::int64_t ResultStore::insert_study(const StudyRecord& s) {
  if (s.kind.empty()) throw InvalidArgument("a study needs a kind");
  try {
    (void)Json::parse(s.document_json);
  } catch (const Error& e) {
    throw InvalidArgument("a study's document must be JSON: " + std::string(e.what()));
  }
  SqliteStmt st(*db_, sql::kInsertStudy);
  st.add(s.kind).add(s.created.empty() ? utc_timestamp() : s.created).add(s.command_line).add(s.device).add(s.document_json);
  st.run();
  return db_->last_insert_id();
}

std::int64_t ResultStore::add_study(const StudyRecord& study) {
  SqliteTransaction tx(*db_);
  const std::int64_t id = insert_study(study);
  tx.commit();
  return id;
}

std::vector<StudyRecord> ResultStore::studies() const {
  {
    SqliteStmt has(*db_, sql::kHasStudies);
    has.step();
    if (has.get_int(0) == 0) return {};
  }
  std::vector<StudyRecord> out;
  SqliteStmt st(*db_, sql::kSelectStudies);
  while (st.step()) {
    StudyRecord s;
    s.id = st.get_int(0);
    s.kind = st.get_text(1);
    s.created = st.get_text(2);
    s.command_line = st.get_text(3);
    s.device = st.get_text(4);
    s.document_json = st.get_text(5);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace cnnergy::tune
