// sqlite3 RAII wrappers: errors become DataError with the file name and SQLite's message.
#include "tune/sqlite.hpp"

#include <sqlite3.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <thread>

#include "core/errors.hpp"

namespace cnnergy::tune {

namespace {

// `file:` URI of a path: every byte outside RFC 3986's unreserved set (and '/') percent-encoded, so
// '?', '#' and '%' in a file name stay part of the name.
std::string file_uri(const std::string& path) {
  static const char* const kHex = "0123456789ABCDEF";
  std::string out = "file:";
  for (const char ch : std::filesystem::absolute(path).string()) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '/' || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace

bool opens_immutable(const std::string& path) {
  std::error_code ec;
  return !std::filesystem::exists(path + "-wal", ec) && !std::filesystem::exists(path + "-journal", ec);
}

SqliteDb::SqliteDb(const std::string& path, bool read_only) : path_(path), read_only_(read_only) {
  int flags = read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  std::string target = path;
  // A read-only open of a WAL database creates empty -wal and -shm files beside it (SQLite needs the
  // shared-memory index even to read) and leaves them there, since a read-only connection cannot
  // remove them. With no -wal (and no rollback -journal) beside the file no writer is live, so it is
  // opened immutable: no lock, no -shm, nothing created (compare/report/export never touch the
  // directory). With one, a writer may be live: the ordinary read-only open sees its transactions.
  if (read_only && opens_immutable(path)) {
    target = file_uri(path) + "?immutable=1";
    flags |= SQLITE_OPEN_URI;
  }
  const int rc = sqlite3_open_v2(target.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    throw DataError("cannot open results database " + path + ": " + msg);
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, 10000);  // another process writing (a shard on the same file): wait, then fail
}

SqliteDb::~SqliteDb() {
  if (db_) sqlite3_close_v2(db_);
}

void SqliteDb::fail(const std::string& what, int rc) const {
  std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  const int primary = rc & 0xFF;
  if (primary == SQLITE_NOTADB) msg += " (not an SQLite database)";
  if (primary == SQLITE_CORRUPT) msg += " (the file is damaged)";
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) msg += " (another process holds the database)";
  throw DataError("results database " + path_ + ": " + what + ": " + msg);
}

void SqliteDb::exec(const std::string& sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    const std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    std::string suffix;
    const int primary = rc & 0xFF;
    if (primary == SQLITE_NOTADB) suffix = " (not an SQLite database)";
    if (primary == SQLITE_CORRUPT) suffix = " (the file is damaged)";
    throw DataError("results database " + path_ + ": " + msg + suffix);
  }
}

void SqliteDb::exec_waiting(const std::string& sql, double max_wait_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(max_wait_s);
  for (int attempt = 0;; ++attempt) {
    const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return;
    const int primary = rc & 0xFF;
    if ((primary != SQLITE_BUSY && primary != SQLITE_LOCKED) || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + (attempt % 8) * 5));
  }
  exec(sql);  // one more attempt: its error, with SQLite's message, is the one reported
}

std::int64_t SqliteDb::last_insert_id() const { return sqlite3_last_insert_rowid(db_); }

std::string SqliteDb::last_error() const { return db_ ? sqlite3_errmsg(db_) : "no connection"; }

SqliteStmt::SqliteStmt(SqliteDb& db, const std::string& sql) : db_(db), sql_(sql) {
  const int rc = sqlite3_prepare_v2(db.get(), sql.c_str(), static_cast<int>(sql.size()), &stmt_, nullptr);
  if (rc != SQLITE_OK) db_.fail("cannot prepare '" + sql.substr(0, 60) + "'", rc);
}

SqliteStmt::~SqliteStmt() { sqlite3_finalize(stmt_); }

SqliteStmt& SqliteStmt::bind(int index, double v) {
  if (const int rc = sqlite3_bind_double(stmt_, index, v); rc != SQLITE_OK) db_.fail("bind", rc);
  return *this;
}
SqliteStmt& SqliteStmt::bind(int index, std::int64_t v) {
  if (const int rc = sqlite3_bind_int64(stmt_, index, v); rc != SQLITE_OK) db_.fail("bind", rc);
  return *this;
}
SqliteStmt& SqliteStmt::bind(int index, const std::string& v) {
  if (const int rc = sqlite3_bind_text(stmt_, index, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT); rc != SQLITE_OK)
    db_.fail("bind", rc);
  return *this;
}
SqliteStmt& SqliteStmt::bind(int index, const std::optional<double>& v) { return v ? bind(index, *v) : bind_null(index); }
SqliteStmt& SqliteStmt::bind(int index, const std::optional<std::int64_t>& v) {
  return v ? bind(index, *v) : bind_null(index);
}
SqliteStmt& SqliteStmt::bind_null(int index) {
  if (const int rc = sqlite3_bind_null(stmt_, index); rc != SQLITE_OK) db_.fail("bind", rc);
  return *this;
}

bool SqliteStmt::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  db_.fail("'" + sql_.substr(0, 60) + "' failed", rc);
}

void SqliteStmt::run() {
  while (step()) {
  }
}

void SqliteStmt::reset() {
  next_param_ = 0;
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

bool SqliteStmt::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
double SqliteStmt::get_double(int col) const { return sqlite3_column_double(stmt_, col); }
std::int64_t SqliteStmt::get_int(int col) const { return sqlite3_column_int64(stmt_, col); }
std::string SqliteStmt::get_text(int col) const {
  const auto* p = sqlite3_column_text(stmt_, col);
  const int n = sqlite3_column_bytes(stmt_, col);
  return p ? std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n)) : std::string();
}
std::optional<double> SqliteStmt::get_optional_double(int col) const {
  return is_null(col) ? std::nullopt : std::optional<double>(get_double(col));
}
std::optional<std::int64_t> SqliteStmt::get_optional_int(int col) const {
  return is_null(col) ? std::nullopt : std::optional<std::int64_t>(get_int(col));
}

SqliteTransaction::SqliteTransaction(SqliteDb& db) : db_(db) { db_.exec_waiting("BEGIN IMMEDIATE"); }

SqliteTransaction::~SqliteTransaction() {
  if (!done_) sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);  // best effort; never throws
}

void SqliteTransaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace cnnergy::tune
