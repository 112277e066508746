// RAII wrappers for the sqlite3 C API used by the results store: a connection, a prepared statement
// and a transaction that rolls back unless committed. Every SQLite failure becomes a DataError that
// names the database file and SQLite's own message.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

struct sqlite3;
struct sqlite3_stmt;

namespace cnnergy::tune {

// Whether a read-only open of `path` is immutable (no -wal and no -journal beside it: no writer is
// live), so that it creates no -wal/-shm file and changes nothing in the directory.
bool opens_immutable(const std::string& path);

class SqliteDb {
 public:
  // `read_only` opens an existing file without creating it or anything beside it (see
  // opens_immutable); otherwise the file is created if missing.
  SqliteDb(const std::string& path, bool read_only);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  sqlite3* get() const { return db_; }
  const std::string& path() const { return path_; }
  bool read_only() const { return read_only_; }
  void exec(const std::string& sql);  // statements without results
  // exec, retried while another connection holds a lock SQLite does not wait for by itself (changing
  // the journal mode, starting a write transaction while another process creates the schema).
  void exec_waiting(const std::string& sql, double max_wait_s = 10);
  std::int64_t last_insert_id() const;
  std::string last_error() const;  // SQLite's message for the last failed call
  [[noreturn]] void fail(const std::string& what, int rc) const;

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
  bool read_only_;
};

class SqliteStmt {
 public:
  SqliteStmt(SqliteDb& db, const std::string& sql);
  ~SqliteStmt();
  SqliteStmt(const SqliteStmt&) = delete;
  SqliteStmt& operator=(const SqliteStmt&) = delete;

  // Parameters are 1-based, as in SQLite.
  SqliteStmt& bind(int index, double v);
  SqliteStmt& bind(int index, std::int64_t v);
  SqliteStmt& bind(int index, int v) { return bind(index, static_cast<std::int64_t>(v)); }
  SqliteStmt& bind(int index, const std::string& v);
  SqliteStmt& bind(int index, const char* v) { return bind(index, std::string(v)); }
  SqliteStmt& bind(int index, const std::optional<double>& v);
  SqliteStmt& bind(int index, const std::optional<std::int64_t>& v);
  SqliteStmt& bind_null(int index);
  // Binds the next parameter in order (1, 2, ...; reset() starts again at 1): long INSERTs stay readable.
  template <typename T>
  SqliteStmt& add(const T& v) {
    return bind(++next_param_, v);
  }
  SqliteStmt& add_null() { return bind_null(++next_param_); }

  bool step();  // true while a row is available
  void run();   // steps to completion
  void reset();

  // Columns are 0-based, as in SQLite.
  bool is_null(int col) const;
  double get_double(int col) const;
  std::int64_t get_int(int col) const;
  std::string get_text(int col) const;  // "" for NULL
  std::optional<double> get_optional_double(int col) const;
  std::optional<std::int64_t> get_optional_int(int col) const;

 private:
  SqliteDb& db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
  int next_param_ = 0;
};

// BEGIN IMMEDIATE on construction (takes the write lock up front, so two writers fail early rather than
// deadlock), COMMIT in commit(), ROLLBACK in the destructor when commit() was not reached.
class SqliteTransaction {
 public:
  explicit SqliteTransaction(SqliteDb& db);
  ~SqliteTransaction();
  SqliteTransaction(const SqliteTransaction&) = delete;
  SqliteTransaction& operator=(const SqliteTransaction&) = delete;
  void commit();

 private:
  SqliteDb& db_;
  bool done_ = false;
};

}  // namespace cnnergy::tune
