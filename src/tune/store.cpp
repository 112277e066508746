// The results store on SQLite: opening with schema and integrity checks, sweeps, transactional trial
// writes, reads for reports, and merging stores (shards of one sweep, or several sweeps into one file).
#include "tune/store.hpp"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/build_info.hpp"
#include "core/errors.hpp"
#include "core/json.hpp"
#include "tune/sqlite.hpp"
#include "tune/significance.hpp"
#include "tune/store_sql.hpp"

namespace cnnergy::tune {

namespace fs = std::filesystem;

std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Environment host_environment() {
  Environment env;
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) == 0) env.host = host.data();
  env.date = utc_timestamp();
  env.cnnergy_version = build::kVersion;
  if (build::kHaveCuda) env.cuda_version = build::kCudaVersion;
  return env;
}

namespace {

Json environment_json(const Environment& e) {
  Json::Array gpus;
  for (const auto& g : e.gpu_names) gpus.emplace_back(g);
  Json::Object extra;
  for (const auto& [k, v] : e.extra) extra[k] = Json(v);
  return Json(Json::Object{{"gpu_names", Json(std::move(gpus))},
                           {"driver_version", Json(e.driver_version)},
                           {"cuda_version", Json(e.cuda_version)},
                           {"cudnn_version", Json(e.cudnn_version)},
                           {"host", Json(e.host)},
                           {"date", Json(e.date)},
                           {"cnnergy_version", Json(e.cnnergy_version)},
                           {"extra", Json(std::move(extra))}});
}

std::string str_or_empty(const Json& j) { return j.is_string() ? j.as_string() : std::string(); }

Environment environment_from_json(const std::string& text) {
  const Json j = Json::parse(text);
  Environment e;
  if (j["gpu_names"].is_array())
    for (const auto& g : j["gpu_names"].as_array()) e.gpu_names.push_back(str_or_empty(g));
  e.driver_version = str_or_empty(j["driver_version"]);
  e.cuda_version = str_or_empty(j["cuda_version"]);
  e.cudnn_version = str_or_empty(j["cudnn_version"]);
  e.host = str_or_empty(j["host"]);
  e.date = str_or_empty(j["date"]);
  e.cnnergy_version = str_or_empty(j["cnnergy_version"]);
  if (j["extra"].is_object())
    for (const auto& [k, v] : j["extra"].as_object()) e.extra[k] = str_or_empty(v);
  return e;
}

Json knobs_json(const std::vector<KnobSetting>& knobs) {
  Json::Object o;
  for (const auto& s : knobs)
    o[std::string(knob_name(s.knob))] = s.value.number ? Json(*s.value.number) : Json(s.value.text);
  return Json(std::move(o));
}

Json stats_json(const Stats& s) {
  // ci95_low/high (a 95 % t-interval of the mean, null with one repetition) are derived from n, mean and
  // stddev, so stores written before they existed need no upgrade: readers recompute them.
  const auto ci = mean_interval(s);
  return Json(Json::Object{{"n", Json(s.n)}, {"median", Json(s.median)}, {"mean", Json(s.mean)},
                           {"stddev", Json(s.stddev)}, {"min", Json(s.min)}, {"max", Json(s.max)},
                           {"ci95_low", ci ? Json(ci->low) : Json()}, {"ci95_high", ci ? Json(ci->high) : Json()}});
}

std::map<Metric, Stats> metrics_from_json(const std::string& text) {
  std::map<Metric, Stats> out;
  const Json j = Json::parse(text);
  for (const auto& [name, v] : j.as_object()) {
    Stats s;
    const double n = v["n"].as_number();
    if (!(n >= 0 && n <= 1e9 && n == std::floor(n))) throw DataError("metric '" + name + "': n must be a count");
    s.n = static_cast<std::size_t>(n);
    s.median = v["median"].as_number();
    s.mean = v["mean"].as_number();
    s.stddev = v["stddev"].as_number();
    s.min = v["min"].as_number();
    s.max = v["max"].as_number();
    out[parse_metric_name(name)] = s;
  }
  return out;
}

bool has_sqlite_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::array<char, 16> head{};
  in.read(head.data(), head.size());
  return in.gcount() == 16 && std::string(head.data(), 16) == std::string("SQLite format 3\0", 16);
}

int status_rank(TrialStatus s) {
  switch (s) {
    case TrialStatus::kOk: return 3;
    case TrialStatus::kDoesNotFit: return 2;
    case TrialStatus::kSkipped: return 1;
    case TrialStatus::kFailed: return 0;
  }
  return 0;
}

// A writer needs the file and its folder (SQLite's -wal and -shm files live beside it): without
// them SQLite's errors would read as a damaged database.
void check_writable(const std::string& path, bool exists) {
  if (path.empty()) throw InvalidArgument("the results database path is empty (--db needs a file name)");
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (exists && ::access(path.c_str(), W_OK) != 0 && errno == EACCES)
    throw PermissionDenied("cannot write results database " + path + ": permission denied (the file is read-only to this user)");
  if (::access(dir.c_str(), W_OK) != 0 && (errno == EACCES || errno == EROFS))
    throw PermissionDenied("cannot write results database " + path + ": no permission to write in its folder " + dir.string() +
                           (errno == EROFS ? " (a read-only file system)" : "") +
                           " (SQLite keeps its -wal and -shm files beside the database)");
  if (exists && ::access(path.c_str(), W_OK) != 0 && errno == EROFS)
    throw PermissionDenied("cannot write results database " + path + ": it is on a read-only file system");
}

// A JSON column's value parsed by `parse`; errors name the database, the row and the column.
template <typename F>
auto parse_json_column(const std::string& db, const std::string& row, const char* column, F&& parse) {
  try {
    return parse();
  } catch (const Error& e) {
    throw DataError("results database " + db + ", " + row + ", column " + column + ": " + e.what());
  }
}

SweepRecord read_sweep_row(const SqliteStmt& st, const std::string& db) {
  SweepRecord s;
  s.id = st.get_int(0);
  s.sweep_key = st.get_text(1);
  s.created = st.get_text(2);
  s.command_line = st.get_text(3);
  s.description = st.get_text(4);
  s.environment = parse_json_column(db, "sweep " + std::to_string(s.id), "environment_json",
                                    [&] { return environment_from_json(st.get_text(5)); });
  s.notes = st.get_text(6);
  return s;
}

}  // namespace

ResultStore::ResultStore(const std::string& path, Mode mode) {
  const bool read_only = mode == Mode::kReadOnly;
  std::error_code ec;
  const bool exists = fs::exists(path, ec);
  if (read_only && !exists) throw DataError("no results database at " + path);
  if (exists && fs::is_directory(path, ec)) throw DataError("results database path " + path + " is a directory");
  if (!read_only) check_writable(path, exists);
  const bool has_content = exists && fs::file_size(path, ec) > 0;
  if (has_content && !has_sqlite_header(path))
    throw DataError(path + " is not a cnnergy results database (it is not an SQLite file: damaged, or some other file)");
  db_ = std::make_unique<SqliteDb>(path, read_only);
  if (has_content) {
    // quick_check reads every page (milliseconds for a sweep's database): a damaged file is refused
    // here with a clear message instead of failing half-way through a report.
    std::string problems;
    try {
      SqliteStmt check(*db_, sql::kQuickCheck);
      while (check.step())
        if (check.get_text(0) != "ok") problems += (problems.empty() ? "" : "; ") + check.get_text(0);
    } catch (const DataError&) {
      problems = db_->last_error();  // so damaged that the check itself cannot run
    }
    if (!problems.empty())
      throw DataError("results database " + path + " is damaged (" + problems.substr(0, 300) +
                      "); its finished trials may be recoverable with `sqlite3 " + path + " .recover`");
  }
  // Every probe statement is finished before the pragmas run: an unfinished SELECT keeps a read
  // transaction open, and the journal mode cannot change inside one.
  auto count = [&](const char* query) {
    SqliteStmt st(*db_, query);
    st.step();
    return st.get_int(0);
  };
  if (count(sql::kHasTables) == 0) {
    if (read_only) throw DataError(path + " is an empty SQLite file, not a cnnergy results database");
    db_->exec_waiting(sql::kPragmas);
    // Two sweeps creating one new database at once: the check is repeated inside the write
    // transaction, so the second writer finds the first one's schema instead of creating it again.
    SqliteTransaction tx(*db_);
    const bool create = count(sql::kHasTables) == 0;
    if (create) {
      for (const auto& stmt : sql::schema()) db_->exec(stmt);
      for (const auto& stmt : sql::telemetry_columns_v3()) db_->exec(stmt);
      for (const auto& stmt : sql::studies_table_v4()) db_->exec(stmt);
      for (const auto& stmt : sql::order_columns_v5()) db_->exec(stmt);
      for (const auto& stmt : sql::job_id_column_v6()) db_->exec(stmt);
    }
    tx.commit();
    if (create) return;
  }
  if (count(sql::kHasSchemaInfo) == 0) throw DataError(path + " is an SQLite database but not a cnnergy results database (no schema_info table)");
  std::map<std::string, std::string> info;
  {
    SqliteStmt read_info(*db_, sql::kReadSchemaInfo);
    while (read_info.step()) info[read_info.get_text(0)] = read_info.get_text(1);
  }
  if (info["application"] != sql::kApplication)
    throw DataError(path + " is an SQLite database but not a cnnergy results database (application '" + info["application"] + "')");
  int version = 0;
  try {
    version = std::stoi(info["schema_version"]);
  } catch (const std::exception&) {
    version = 0;
  }
  // An older database: readers use it as it is; a writer upgrades it first, in one transaction.
  if (version >= 1 && version < sql::kSchemaVersion && !read_only) {
    SqliteTransaction tx(*db_);
    for (int v = version; v < sql::kSchemaVersion; ++v)
      for (const auto& stmt : sql::upgrade_from(v)) {
        // A column added by hand or by a newer writer of this same version is not added twice.
        if (stmt.rfind("ALTER TABLE trials ADD COLUMN slurm_job_id", 0) == 0) {
          SqliteStmt has(*db_, sql::kHasColumn);
          has.bind(1, "trials").bind(2, "slurm_job_id");
          has.step();
          if (has.get_int(0) > 0) continue;
        }
        db_->exec(stmt);
      }
    tx.commit();
    version = sql::kSchemaVersion;
  }
  if (version < 1 || version > sql::kSchemaVersion)
    throw DataError("results database " + path + " has schema version " + info["schema_version"] + "; this cnnergy (" +
                    build::kVersion + ") reads schema versions 1 to " + std::to_string(sql::kSchemaVersion) +
                    ": open it with the cnnergy that wrote it (export --json keeps everything), or use a new database file");
  if (!read_only) db_->exec_waiting(sql::kPragmas);
}

ResultStore::~ResultStore() = default;
ResultStore::ResultStore(ResultStore&&) noexcept = default;
ResultStore& ResultStore::operator=(ResultStore&&) noexcept = default;

const std::string& ResultStore::path() const { return db_->path(); }

std::int64_t ResultStore::insert_sweep(const SweepRecord& s, const std::string& tag) {
  if (s.sweep_key.empty()) throw InvalidArgument("a sweep needs a key");
  Json::Array gpus;
  for (const auto& g : s.environment.gpu_names) gpus.emplace_back(g);
  SqliteStmt st(*db_, sql::kInsertSweep);
  st.bind(1, s.sweep_key).bind(2, s.created.empty() ? utc_timestamp() : s.created).bind(3, s.command_line);
  st.bind(4, s.description).bind(5, Json(std::move(gpus)).dump()).bind(6, s.environment.driver_version);
  st.bind(7, s.environment.cuda_version).bind(8, s.environment.cudnn_version).bind(9, s.environment.host);
  st.bind(10, s.environment.date).bind(11, s.environment.cnnergy_version);
  st.bind(12, environment_json(s.environment).dump()).bind(13, s.notes);
  st.run();
  const std::int64_t id = db_->last_insert_id();
  if (!tag.empty()) write_sweep_tag(id, tag);
  return id;
}

std::int64_t ResultStore::add_sweep(const SweepRecord& s, const std::string& tag) {
  SqliteTransaction tx(*db_);
  const std::int64_t id = insert_sweep(s, tag);
  tx.commit();
  return id;
}

std::optional<SweepRecord> ResultStore::find_sweep(const std::string& sweep_key) const {
  SqliteStmt st(*db_, std::string(sql::kSweepColumns) + " WHERE sweep_key = ? ORDER BY id DESC LIMIT 1");
  st.bind(1, sweep_key);
  if (!st.step()) return std::nullopt;
  return read_sweep_row(st, path());
}

std::vector<SweepRecord> ResultStore::sweeps() const {
  std::vector<SweepRecord> out;
  SqliteStmt st(*db_, std::string(sql::kSweepColumns) + " ORDER BY id");
  while (st.step()) out.push_back(read_sweep_row(st, path()));
  return out;
}

SweepRecord ResultStore::sweep(std::int64_t id) const {
  SqliteStmt st(*db_, std::string(sql::kSweepColumns) + " WHERE id = ?");
  st.bind(1, id);
  if (!st.step()) throw DataError("results database " + path() + " has no sweep " + std::to_string(id));
  return read_sweep_row(st, path());
}

void ResultStore::append_sweep_note(std::int64_t sweep_id, const std::string& note) {
  SqliteStmt st(*db_, sql::kAppendNote);
  st.bind(1, note + "\n").bind(2, sweep_id);
  st.run();
}

std::int64_t ResultStore::insert_trial(std::int64_t sweep_id, const TrialRecord& t) {
  const TrialMeasurement& m = t.measurement;
  const auto metrics = compute_trial_metrics(m);  // validates the measurement before anything is written
  {
    SqliteStmt del(*db_, sql::kDeleteTrial);
    del.bind(1, sweep_id).bind(2, t.spec.key);
    del.run();
  }
  SqliteStmt st(*db_, sql::insert_trial());
  st.add(sweep_id).add(static_cast<std::int64_t>(t.spec.index)).add(t.spec.key).add(knobs_json(t.spec.knobs).dump());
  for (Knob k : kAllKnobs) {
    const KnobValue* v = t.spec.find(k);
    if (!v) st.add_null();
    else if (v->number) st.add(*v->number);
    else st.add(v->text);
  }
  st.add(std::string(trial_status_name(t.status))).add(t.error_message).add(t.spec.reference ? 1 : 0);
  st.add(t.started).add(t.finished).add(static_cast<std::int64_t>(m.repetitions.size()));
  st.add(m.samples_per_iteration > 0 ? std::optional<double>(m.samples_per_iteration) : std::nullopt);
  st.add(m.flops_per_iteration > 0 ? std::optional<double>(m.flops_per_iteration) : std::nullopt);
  st.add(m.accuracy);
  Json::Object mj;
  for (const auto& [metric, s] : metrics) mj[std::string(metric_name(metric))] = stats_json(s);
  st.add(Json(std::move(mj)).dump());
  for (Metric metric : kAllMetrics) {
    auto it = metrics.find(metric);
    if (it == metrics.end()) {
      for (int k = 0; k < 4; ++k) st.add_null();
    } else {
      st.add(it->second.median).add(it->second.stddev).add(it->second.min).add(it->second.max);
    }
  }
  st.run();
  const std::int64_t trial_id = db_->last_insert_id();

  SqliteStmt rep(*db_, sql::kInsertRepetition);
  for (std::size_t r = 0; r < m.repetitions.size(); ++r) {
    const Repetition& x = m.repetitions[r];
    Json::Array energies;
    double total = 0;
    for (double e : x.energy_mj) {
      energies.emplace_back(e);
      total += e;
    }
    rep.reset();
    rep.bind(1, trial_id).bind(2, static_cast<std::int64_t>(r)).bind(3, x.elapsed_ms).bind(4, x.iterations);
    rep.bind(5, m.samples_per_iteration > 0 ? std::optional<double>(m.samples_per_iteration * static_cast<double>(x.iterations))
                                            : std::nullopt);
    rep.bind(6, Json(std::move(energies)).dump());
    rep.bind(7, x.energy_mj.empty() ? std::nullopt : std::optional<double>(total));
    rep.bind(8, x.energy_mj.empty() ? std::nullopt : std::optional<double>(total / x.elapsed_ms));
    rep.bind(9, x.peak_power_w).bind(10, x.max_temperature_c).bind(11, x.energy_source);
    rep.run();
  }
  SqliteStmt ph(*db_, sql::kInsertPhase);
  for (std::size_t p = 0; p < m.phases.size(); ++p) {
    const auto& x = m.phases[p];
    ph.reset();
    ph.bind(1, trial_id).bind(2, static_cast<std::int64_t>(p)).bind(3, x.phase).bind(4, x.time_ms);
    ph.bind(5, x.time_ms_stddev).bind(6, x.energy_mj).bind(7, x.energy_mj_stddev);
    ph.run();
  }
  SqliteStmt ly(*db_, sql::kInsertLayer);
  for (const auto& x : m.layers) {
    ly.reset();
    ly.bind(1, trial_id).bind(2, x.layer_index).bind(3, x.name).bind(4, x.type).bind(5, x.forward_ms);
    ly.bind(6, x.backward_ms).bind(7, x.energy_mj).bind(8, x.flops);
    ly.run();
  }
  write_trial_telemetry(trial_id, m);
  write_trial_order(trial_id, m);
  write_trial_job_id(trial_id, default_job_id_);
  return trial_id;
}

void ResultStore::write_trial(std::int64_t sweep_id, const TrialRecord& trial) {
  SqliteTransaction tx(*db_);
  insert_trial(sweep_id, trial);
  tx.commit();
}

std::optional<TrialStatus> ResultStore::trial_status(std::int64_t sweep_id, const std::string& key) const {
  SqliteStmt st(*db_, sql::kTrialStatus);
  st.bind(1, sweep_id).bind(2, key);
  if (!st.step()) return std::nullopt;
  return parse_trial_status(st.get_text(0));
}

bool ResultStore::has_trial(std::int64_t sweep_id, const std::string& key) const {
  return trial_status(sweep_id, key).has_value();
}

std::vector<StoredTrial> ResultStore::trials(std::int64_t sweep_id) const {
  std::vector<StoredTrial> out;
  SqliteStmt st(*db_, std::string(sql::kTrialColumns) + " WHERE sweep_id = ? ORDER BY trial_index, id");
  st.bind(1, sweep_id);
  while (st.step()) {
    StoredTrial t;
    t.id = st.get_int(0);
    t.sweep_id = st.get_int(1);
    t.trial_index = static_cast<std::size_t>(st.get_int(2));
    try {
      t.summary.key = st.get_text(3);
      t.summary.knobs = parse_trial_key(t.summary.key);
      t.summary.status = parse_trial_status(st.get_text(4));
      t.summary.metrics = parse_json_column(path(), "trial " + std::to_string(t.id), "metrics_json",
                                            [&] { return metrics_from_json(st.get_text(13)); });
    } catch (const DataError&) {
      throw;
    } catch (const Error& e) {
      throw DataError("results database " + path() + ", trial " + std::to_string(t.id) + ": " + e.what());
    }
    t.error_message = st.get_text(5);
    t.summary.reference = st.get_int(6) != 0;
    t.started = st.get_text(7);
    t.finished = st.get_text(8);
    t.repetitions = static_cast<std::size_t>(st.get_int(9));
    t.samples_per_iteration = st.get_optional_double(10).value_or(0);
    t.flops_per_iteration = st.get_optional_double(11).value_or(0);
    t.accuracy = st.get_optional_double(12);
    t.slurm_job_id = trial_job_id(t.id);
    out.push_back(std::move(t));
  }
  return out;
}

TrialRecord ResultStore::read_trial(std::int64_t trial_id) const {
  SqliteStmt st(*db_, std::string(sql::kTrialColumns) + " WHERE id = ?");
  st.bind(1, trial_id);
  if (!st.step()) throw DataError("results database " + path() + " has no trial " + std::to_string(trial_id));
  TrialRecord t;
  try {
    t.spec.index = static_cast<std::size_t>(st.get_int(2));
    t.spec.key = st.get_text(3);
    t.spec.knobs = parse_trial_key(t.spec.key);
    t.status = parse_trial_status(st.get_text(4));
  } catch (const Error& e) {
    throw DataError("results database " + path() + ", trial " + std::to_string(trial_id) + ": " + e.what());
  }
  t.error_message = st.get_text(5);
  t.spec.reference = st.get_int(6) != 0;
  t.started = st.get_text(7);
  t.finished = st.get_text(8);
  t.measurement.samples_per_iteration = st.get_optional_double(10).value_or(0);
  t.measurement.flops_per_iteration = st.get_optional_double(11).value_or(0);
  t.measurement.accuracy = st.get_optional_double(12);

  SqliteStmt reps(*db_, sql::kSelectRepetitions);
  reps.bind(1, trial_id);
  while (reps.step()) {
    Repetition r;
    r.elapsed_ms = reps.get_double(0);
    r.iterations = reps.get_int(1);
    r.energy_mj = parse_json_column(path(), "trial " + std::to_string(trial_id), "repetitions.energy_mj_json", [&] {
      const Json energies = Json::parse(reps.get_text(2));  // named: as_array() refers into it
      std::vector<double> mj;
      for (const auto& e : energies.as_array()) mj.push_back(e.as_number());
      return mj;
    });
    r.peak_power_w = reps.get_optional_double(3);
    r.max_temperature_c = reps.get_optional_double(4);
    r.energy_source = reps.get_text(5);
    t.measurement.repetitions.push_back(std::move(r));
  }
  SqliteStmt ph(*db_, sql::kSelectPhases);
  ph.bind(1, trial_id);
  while (ph.step())
    t.measurement.phases.push_back({ph.get_text(0), ph.get_double(1), ph.get_optional_double(2).value_or(0),
                                    ph.get_double(3), ph.get_optional_double(4).value_or(0)});
  SqliteStmt ly(*db_, sql::kSelectLayers);
  ly.bind(1, trial_id);
  while (ly.step()) {
    LayerMeasurement l;
    l.layer_index = ly.get_int(0);
    l.name = ly.get_text(1);
    l.type = ly.get_text(2);
    l.forward_ms = ly.get_double(3);
    l.backward_ms = ly.get_double(4);
    l.energy_mj = ly.get_optional_double(5);
    l.flops = ly.get_optional_double(6).value_or(0);
    t.measurement.layers.push_back(std::move(l));
  }
  read_trial_telemetry(trial_id, t.measurement);
  read_trial_order(trial_id, t.measurement);
  return t;
}

MergeReport merge_stores(const std::string& out_path, const std::vector<std::string>& input_paths) {
  return merge_stores(out_path, input_paths, MergeOptions{});
}

MergeReport merge_stores(const std::string& out_path, const std::vector<std::string>& input_paths,
                         const MergeOptions& options) {
  if (input_paths.empty()) throw InvalidArgument("merge needs at least one input database");
  std::error_code ec;
  for (const auto& in : input_paths)
    if (fs::exists(out_path, ec) && fs::exists(in, ec) && fs::equivalent(out_path, in, ec))
      throw InvalidArgument("merge input " + in + " is the output database itself");
  // Open (and so check) every input before the output is touched. They are opened again one at a
  // time for the copy: a thousand shards held open at once would exceed the process's file limit.
  std::string first_key, first_path;
  for (const auto& path : input_paths) {
    const ResultStore in(path, ResultStore::Mode::kReadOnly);
    if (!options.one_sweep) continue;
    for (const SweepRecord& s : in.sweeps()) {
      if (first_key.empty()) {
        first_key = s.sweep_key;
        first_path = path;
      } else if (s.sweep_key != first_key) {
        throw InvalidArgument("merge input " + path + " holds sweep " + s.sweep_key + ", not sweep " + first_key +
                              " of " + first_path + ": it is a shard of another sweep (another workload or other "
                              "settings); nothing was merged");
      }
    }
  }
  ResultStore out(out_path, ResultStore::Mode::kReadWrite);

  MergeReport report;
  SqliteTransaction tx(*out.db_);
  std::set<std::string> keys;
  for (const auto& path : input_paths) {
    const ResultStore in(path, ResultStore::Mode::kReadOnly);
    for (const SweepRecord& s : in.sweeps()) {
      if (keys.insert(s.sweep_key).second) report.sweep_keys.push_back(s.sweep_key);
      std::int64_t target = 0;
      const std::string tag = in.sweep_tag(s.id);
      std::optional<SweepRecord> same_sweep;
      for (const SweepRecord& o : out.sweeps())  // the same sweep on the same kind of machine, same tag
        if (o.sweep_key == s.sweep_key && out.sweep_tag(o.id) == tag && o.environment.gpu_names == s.environment.gpu_names)
          same_sweep = o;
      if (same_sweep) {
        target = same_sweep->id;
        ++report.sweeps_merged;
        const Environment& a = same_sweep->environment;
        if (a.host != s.environment.host || a.gpu_names != s.environment.gpu_names ||
            a.driver_version != s.environment.driver_version) {
          const std::string note = "merged trials from " + in.path() + " measured on host '" + s.environment.host +
                                   "', driver '" + s.environment.driver_version + "' (this sweep's record says host '" +
                                   a.host + "', driver '" + a.driver_version + "')";
          out.append_sweep_note(target, note);
          report.messages.push_back("sweep " + s.sweep_key + ": " + note);
        }
      } else {
        SweepRecord copy = s;
        copy.notes += "merged from " + in.path() + "\n";
        target = out.insert_sweep(copy, tag);
        ++report.sweeps_created;
      }
      for (const StoredTrial& t : in.trials(s.id)) {
        const auto existing = out.trial_status(target, t.summary.key);
        if (existing) {
          const bool replace = status_rank(t.summary.status) > status_rank(*existing);
          report.messages.push_back("duplicate trial " + t.summary.key + " of sweep " + s.sweep_key + " in " + in.path() +
                                    ": " + (replace ? "replaced the stored " : "kept the stored ") +
                                    std::string(trial_status_name(*existing)) + " trial (this one is " +
                                    std::string(trial_status_name(t.summary.status)) + ")");
          if (!replace) {
            ++report.duplicates_kept;
            continue;
          }
          ++report.duplicates_replaced;
        }
        out.write_trial_job_id(out.insert_trial(target, in.read_trial(t.id)), t.slurm_job_id);
        ++report.trials_copied;
      }
    }
  }
  // Studies: each one that the output does not already hold (the same kind, time, command and document).
  for (const auto& path : input_paths) {
    const ResultStore in(path, ResultStore::Mode::kReadOnly);
    for (const StudyRecord& s : in.studies()) {
      bool present = false;
      for (const StudyRecord& o : out.studies())
        present = present || (o.kind == s.kind && o.created == s.created && o.command_line == s.command_line &&
                              o.document_json == s.document_json);
      if (present) {
        report.messages.push_back("study " + std::to_string(s.id) + " of " + in.path() + " (" + s.kind + ", " + s.created +
                                  ") is already in the output: not copied again");
        continue;
      }
      out.insert_study(s);
      ++report.studies_copied;
    }
  }
  tx.commit();
  return report;
}

}  // namespace cnnergy::tune
