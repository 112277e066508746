// Mutation fuzzing of every parser, in process (each input in a forked child; see fuzz_harness.hpp):
// JSON, IDX (raw and gzip), CIFAR-10 binaries, PNG/JPEG images (decoder and image folder), .npy arrays,
// the algorithm cache file, the knob journal, the cnnergyd policy, results databases (the SQLite file, and the JSON columns
// of a valid one) and the CLI's value parsers. >= 1,000 inputs per parser with a fixed seed in CI;
// CNNERGY_FUZZ_LONG=1 runs 20x as many, CNNERGY_FUZZ_INPUTS=N and CNNERGY_FUZZ_SEED=S pick them.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdio>
#include <filesystem>

#include "core/algo_cache.hpp"
#include "core/errors.hpp"
#include "core/json.hpp"
#include "core/log.hpp"
#include "core/rng.hpp"
#include "core/shape.hpp"
#include "data/cifar.hpp"
#include "data/data_test_util.hpp"
#include "data/dataset.hpp"
#include "data/idx.hpp"
#include "data/image_codec.hpp"
#include "data/image_folder.hpp"
#include "daemon/policy.hpp"
#include "data/npy.hpp"
#include "fuzz/fuzz_harness.hpp"
#include "telemetry/journal.hpp"
#include "tune/knobs.hpp"
#include "tune/metrics.hpp"
#include "tune/plan.hpp"
#include "tune/store.hpp"
#include "tune/tune_test_util.hpp"

namespace cnnergy::fuzz {
namespace {

namespace fs = std::filesystem;
using data::testing::TempDir;

constexpr std::size_t kCiInputs = 1000;

FuzzOptions options() {
  FuzzOptions o;
  o.inputs = input_count(kCiInputs);
  o.failures_dir = fs::path(CNNERGY_TEST_BUILD_DIR) / "fuzz-failures";
  return o;
}

Bytes text_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string bytes_text(const Bytes& b) { return std::string(b.begin(), b.end()); }

void expect_clean(const FuzzReport& r) {
  std::printf("[fuzz] %-22s %6zu inputs: %zu accepted, %zu clean typed errors, %zu failures\n", r.parser.c_str(), r.inputs,
              r.accepted, r.typed_errors, r.failures.size());
  for (const auto& f : r.failures) ADD_FAILURE() << r.parser << ": " << f;
}

void fuzz(const std::string& parser, const std::vector<Bytes>& seeds, const ParseFn& parse) {
  const FuzzOptions o = options();
  expect_clean(replay_regressions(parser, parse, o));
  const FuzzReport r = run_fuzz(parser, seeds, parse, o, fuzz_seed());
  EXPECT_GE(r.inputs, o.inputs);
  expect_clean(r);
}

// Touches every sample of a data set that opened (lazy readers fail in fill()).
void read_everything(const data::Dataset& ds) {
  const std::int64_t n = std::min<std::int64_t>(ds.size(), 4);
  std::vector<std::int64_t> idx;
  for (std::int64_t i = 0; i < n; ++i) idx.push_back(i);
  std::vector<float> images(static_cast<std::size_t>(n * ds.sample_numel()));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
  ds.fill(idx, {}, images, labels);
}

TEST(Fuzz, JsonReader) {
  const std::vector<Bytes> seeds = {
      text_bytes(R"({"version":1,"pid":123,"entries":[{"uuid":"GPU-1","index":0,"knob":"power_limit"}]})"),
      text_bytes(R"([1,-2.5e3,true,false,null,"a\"b\\c\u00e9\n",{"x":[[],{}]}])"),
      text_bytes(R"({"n":3,"median":1.5,"mean":1.25,"stddev":0.1,"min":1e-300,"max":1.7976931348623157e308})")};
  fuzz("json", seeds, [](const Bytes& in) { (void)Json::parse(bytes_text(in)).dump(); });
}

TEST(Fuzz, IdxRawAndGzip) {
  std::vector<std::uint8_t> pixels(3 * 5 * 4);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i * 7);
  const Bytes images = data::testing::idx_images(3, 5, 4, pixels), labels = data::testing::idx_labels({1, 0, 2});
  TempDir dir;
  auto open = [&](const Bytes& img, const Bytes& lbl) {
    data::testing::write_bytes(dir / "img", img);
    data::testing::write_bytes(dir / "lbl", lbl);
    read_everything(*data::open_idx(dir / "img", dir / "lbl", "fuzz", 10, data::mnist_normalisation()));
  };
  fuzz("idx", {images, labels}, [&](const Bytes& in) {  // the mutant as images, then as labels
    if (in.size() >= 4 && in[3] == 1) open(images, in);
    else open(in, labels);
  });
  const Bytes gz_images = data::testing::gzip_bytes(images), gz_labels = data::testing::gzip_bytes(labels);
  fuzz("idx-gz", {gz_images}, [&](const Bytes& in) { open(in, gz_labels); });
}

TEST(Fuzz, Cifar10Binaries) {
  Bytes file;
  for (int r = 0; r < 2; ++r) {
    file.push_back(static_cast<std::uint8_t>(r * 3));
    for (int i = 0; i < 3072; ++i) file.push_back(static_cast<std::uint8_t>(i + r));
  }
  TempDir dir;
  fuzz("cifar10", {file}, [&](const Bytes& in) {
    data::testing::write_bytes(dir / "data_batch_1.bin", in);
    read_everything(*data::open_cifar10_files({dir / "data_batch_1.bin"}, "fuzz", data::cifar10_normalisation()));
  });
}

TEST(Fuzz, PngAndJpegImages) {
  TempDir dir;
  std::vector<std::uint8_t> rgb(12 * 10 * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<std::uint8_t>(i * 13);
  data::testing::write_png(dir / "seed.png", 12, 10, 3, rgb);
  const Bytes png = read_all(dir / "seed.png");
  const Bytes jpeg = data::testing::encode_jpeg(12, 10, 3, rgb, 90);
  fs::create_directories(dir / "root/cat");
  data::ImageFolderOptions fo;
  fo.resize_width = fo.resize_height = 8;
  fo.crop = 8;
  std::size_t n = 0;
  fuzz("image", {png, jpeg}, [&](const Bytes& in) {
    (void)data::decode_image(in, "fuzz.img");
    if (++n % 4 == 0) {  // every fourth one also through an image folder
      data::testing::write_bytes(dir / "root/cat/x.jpg", in);
      read_everything(*data::open_image_folder(dir / "root", fo, "fuzz"));
    }
  });
}

TEST(Fuzz, NpyArrays) {
  TempDir dir;
  Tensor t = Tensor::host(Shape({2, 3, 4}));
  for (std::int64_t i = 0; i < 24; ++i) t.data<float>()[i] = static_cast<float>(i) * 0.5f;
  data::write_npy(dir / "a.npy", t);
  fuzz("npy", {read_all(dir / "a.npy")}, [](const Bytes& in) { (void)data::parse_npy(in, "fuzz.npy"); });
}

TEST(Fuzz, AlgorithmCacheFile) {
  TempDir dir;
  AlgoCacheContext ctx;
  ctx.gpu_name = "fuzz GPU";
  ctx.compute_capability = 90;
  ConvProblemKey key;
  key.direction = "forward";
  key.n = 8, key.c = 3, key.h = 32, key.w = 32, key.k = 16, key.r = 3, key.s = 3;
  key.dtype = "f32", key.layout = "nchw", key.math = "fp32", key.policy = "find";
  AlgoDecision d;
  d.kind = "legacy";
  d.algo = 1;
  d.note = "seed";
  std::string path;
  {
    AlgoCache cache((dir / "seed").string(), ctx);
    cache.record(key, d);
    key.direction = "backward_data";
    cache.record(key, d);
    path = cache.file_path();
  }
  const Bytes seed = read_all(path);
  const fs::path target = dir / "fuzz";
  fs::create_directories(target);
  const std::string target_file = (target / fs::path(path).filename()).string();
  fuzz("algo-cache", {seed}, [&](const Bytes& in) {
    set_log_level(LogLevel::kError);  // a damaged cache is a warning by design: one per input would flood the log
    write_all(target_file, in);
    AlgoCache cache(target.string(), ctx);
    (void)cache.lookup(key);
    (void)cache.size();
  });
}

TEST(Fuzz, KnobJournal) {
  TempDir dir;
  telemetry::JournalData data = telemetry::Journal::for_this_process();
  telemetry::JournalEntry e;
  e.uuid = "GPU-0000";
  e.name = "fake";
  e.kind = telemetry::KnobKind::kPowerLimit;
  e.original_power_limit_mw = 300000;
  data.entries.push_back(e);
  e.kind = telemetry::KnobKind::kApplicationClocks;
  e.original_app_mem_mhz = 1215, e.original_app_sm_mhz = 1410;
  data.entries.push_back(e);
  const telemetry::Journal journal((dir / "journal.json").string());
  journal.write(data);
  fuzz("journal", {read_all(journal.path())}, [&](const Bytes& in) {
    write_all(journal.path(), in);
    const auto d = journal.read();
    (void)telemetry::Journal::writer_alive(d);
    for (const auto& x : d.entries) (void)telemetry::describe_restore(x);
  });
}

// The cnnergyd policy (the administrator's file, parsed strictly by a root daemon): every key set,
// so mutants reach the ranges, the lists, the user/group lookups and socket_group as a number.
TEST(Fuzz, DaemonPolicy) {
  const std::string full = R"({"version": 1, "socket_path": "/run/cnnergy/x.sock", "socket_group": 0,
    "state_dir": "/var/lib/cnnergy", "read_only": false, "gpus": [0, 1], "users": ["0", 1234],
    "groups": ["0"], "power_limit_w": {"min": 250, "max": 600.5}, "sm_clock_mhz": {"min": 500, "max": 1980},
    "mem_clock_mhz": {"min": 1215, "max": 2619}, "max_changes_per_minute": 60, "max_clients": 256,
    "max_clients_per_uid": 16, "idle_timeout_s": 300, "frame_timeout_ms": 5000, "comment": "x"})";
  const std::string small = R"({"version": 1, "socket_group": "0", "gpus": "all"})";
  fuzz("daemon-policy", {text_bytes(full), text_bytes(small)}, [](const Bytes& in) {
    const daemon::Policy p = daemon::Policy::parse(bytes_text(in), "fuzz");
    (void)p.summary();
    (void)p.user_allowed(1000, 1000, {0, 4242});
  });
}

// A small valid results database: one sweep, four trials with repetitions, phases and layers.
std::string make_store(const fs::path& dir) {
  using namespace tune;
  const std::string path = (dir / "seed.db").string();
  SweepDefinition def;
  def.workload = "model=lenet5";
  def.space.set(Knob::kBatch, parse_knob_values(Knob::kBatch, "64,128", {}));
  def.space.set(Knob::kPowerLimit, parse_knob_values(Knob::kPowerLimit, "200,300", {}));
  def.reference = def.space.default_reference({});
  ResultStore store(path);
  const auto id = store.add_sweep(SweepRecord{0, def.key(), "", "cnnergy sweep", def.canonical(), host_environment(), ""});
  Rng rng(7);
  for (const auto& t : def.space.trials(def.reference)) store.write_trial(id, testing::random_trial(rng, t, 2, 1));
  return path;
}

void read_store(const std::string& path) {
  tune::ResultStore store(path, tune::ResultStore::Mode::kReadOnly);
  for (const auto& s : store.sweeps())
    for (const auto& t : store.trials(s.id)) {
      (void)store.read_trial(t.id);
      (void)store.trial_telemetry_json(t.id);
    }
}

TEST(Fuzz, ResultsDatabaseFile) {
  TempDir dir;
  const std::string seed_path = make_store(dir.path());
  {  // a checkpoint of the WAL so the seed is one self-contained file
    tune::ResultStore s(seed_path);
  }
  sqlite3* db = nullptr;
  sqlite3_open(seed_path.c_str(), &db);
  sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  const Bytes seed = read_all(seed_path);
  const std::string target = (dir / "fuzz.db").string();
  FuzzOptions o = options();
  o.inputs = input_count(kCiInputs);
  auto parse = [&](const Bytes& in) {
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(target + suffix);
    write_all(target, in);
    read_store(target);
  };
  expect_clean(replay_regressions("results-db", parse, o));
  expect_clean(run_fuzz("results-db", {seed}, parse, o, fuzz_seed()));
}

TEST(Fuzz, ResultsDatabaseJsonColumns) {
  TempDir dir;
  const std::string seed_path = make_store(dir.path());
  std::string metrics, environment, energies;
  {
    sqlite3* db = nullptr;
    sqlite3_open(seed_path.c_str(), &db);
    auto one = [&](const char* q) {
      sqlite3_stmt* st = nullptr;
      sqlite3_prepare_v2(db, q, -1, &st, nullptr);
      std::string v = sqlite3_step(st) == SQLITE_ROW ? reinterpret_cast<const char*>(sqlite3_column_text(st, 0)) : "";
      sqlite3_finalize(st);
      return v;
    };
    metrics = one("SELECT metrics_json FROM trials LIMIT 1");
    environment = one("SELECT environment_json FROM sweeps LIMIT 1");
    energies = one("SELECT energy_mj_json FROM repetitions LIMIT 1");
    sqlite3_close(db);
  }
  const std::string work = (dir / "work.db").string();
  struct Column {
    const char* name;
    const char* update;
    std::string seed;
  };
  const Column columns[] = {{"metrics", "UPDATE trials SET metrics_json = ?", metrics},
                            {"environment", "UPDATE sweeps SET environment_json = ?", environment},
                            {"energies", "UPDATE repetitions SET energy_mj_json = ?", energies}};
  FuzzOptions o = options();
  o.inputs = (o.inputs + 2) / 3;  // >= 1,000 over the three columns
  std::size_t total = 0;
  for (const Column& c : columns) {
    auto parse = [&](const Bytes& in) {
      fs::copy_file(seed_path, work, fs::copy_options::overwrite_existing);
      fs::remove(work + "-wal");
      fs::remove(work + "-shm");
      sqlite3* db = nullptr;
      sqlite3_open(work.c_str(), &db);
      sqlite3_stmt* st = nullptr;
      sqlite3_prepare_v2(db, c.update, -1, &st, nullptr);
      sqlite3_bind_text(st, 1, reinterpret_cast<const char*>(in.data()), static_cast<int>(in.size()), SQLITE_TRANSIENT);
      sqlite3_step(st);
      sqlite3_finalize(st);
      sqlite3_close(db);
      read_store(work);
    };
    const std::string name = std::string("results-db-json-") + c.name;
    expect_clean(replay_regressions(name, parse, o));
    const FuzzReport r = run_fuzz(name, {text_bytes(c.seed)}, parse, o, fuzz_seed());
    total += r.inputs;
    expect_clean(r);
  }
  EXPECT_GE(total, input_count(kCiInputs));
}

TEST(Fuzz, CliValueParsers) {
  const std::vector<Bytes> seeds = {text_bytes("3x224x224"), text_bytes("64,128,256"), text_bytes("200:700:25"),
                                    text_bytes("fp32,tf32,fp16"), text_bytes("2/8"), text_bytes("all:50"),
                                    text_bytes("batch=64,power_limit_w=300"), text_bytes("eds:1.5"),
                                    text_bytes("nchw,nhwc"), text_bytes("supported:2"), text_bytes("default,1410")};
  tune::DeviceLimits limits;
  limits.power_limit_min_w = 100, limits.power_limit_max_w = 700, limits.power_limit_default_w = 700;
  limits.supported_sm_clocks_mhz = {1980, 1410, 1005, 510};
  limits.supported_mem_clocks_mhz = {2619, 1593};
  limits.gpu_count = 4;
  limits.conv_algos = {"auto", "find", "heuristic"};
  fuzz("cli-values", seeds, [&](const Bytes& in) {
    const std::string s = bytes_text(in);
    std::size_t typed = 0;
    auto attempt = [&](auto&& f) {
      try {
        f();
      } catch (const Error&) {
        ++typed;
      }
    };
    attempt([&] { (void)parse_shape(s); });
    attempt([&] { (void)tune::parse_shard(s); });
    attempt([&] { (void)tune::parse_objective(s); });
    attempt([&] { (void)tune::parse_trial_key(s); });
    for (tune::Knob k : tune::kAllKnobs) attempt([&] { (void)tune::parse_knob_values(k, s, limits); });
    (void)typed;
  });
}

}  // namespace
}  // namespace cnnergy::fuzz
