// Helpers shared by the tune and report tests: fresh temporary directories and random but valid
// trial records.
#pragma once

#include <sqlite3.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>

#include "core/rng.hpp"
#include "tune/store.hpp"

namespace cnnergy::tune::testing {

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("cnnergy-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A trial record with `reps` random repetitions on `gpus` GPUs, plus phases and layers.
inline TrialRecord random_trial(Rng& rng, const TrialSpec& spec, int reps = 3, int gpus = 2) {
  TrialRecord t;
  t.spec = spec;
  t.status = TrialStatus::kOk;
  t.started = "2026-11-21T10:00:00Z";
  t.finished = "2026-11-21T10:01:00Z";
  t.measurement.samples_per_iteration = 64.0 * (1 + rng.next_u32() % 4);
  t.measurement.flops_per_iteration = 1e11 * rng.uniform(1.f, 5.f);
  t.measurement.accuracy = rng.uniform(0.5f, 0.99f);
  for (int r = 0; r < reps; ++r) {
    Repetition rep;
    rep.iterations = 10 + rng.next_u32() % 20;
    rep.elapsed_ms = static_cast<double>(rep.iterations) * rng.uniform(40.f, 60.f);
    for (int g = 0; g < gpus; ++g) rep.energy_mj.push_back(rep.elapsed_ms * rng.uniform(200.f, 400.f));
    rep.peak_power_w = rng.uniform(500.f, 700.f);
    rep.max_temperature_c = rng.uniform(50.f, 80.f);
    rep.energy_source = "counter";
    t.measurement.repetitions.push_back(rep);
  }
  for (const char* p : {"load", "forward", "backward", "update"})
    t.measurement.phases.push_back({p, rng.uniform(1.f, 20.f), rng.uniform(0.f, 1.f), rng.uniform(100.f, 5000.f), rng.uniform(0.f, 50.f)});
  for (int l = 0; l < 4; ++l)
    t.measurement.layers.push_back({l, "conv" + std::to_string(l), l % 2 ? "relu" : "conv", rng.uniform(0.1f, 5.f),
                                    rng.uniform(0.1f, 9.f), std::optional<double>(rng.uniform(1.f, 90.f)), 1e9 * rng.uniform(0.f, 3.f)});
  return t;
}

// The first column of the first row of `sql` on a raw connection ("NULL" for NULL, "" for no row).
inline std::string sqlite_scalar(sqlite3* db, const std::string& sql) {
  std::string out;
  sqlite3_exec(
      db, sql.c_str(),
      [](void* o, int, char** v, char**) {
        *static_cast<std::string*>(o) = v[0] ? v[0] : "NULL";
        return 0;
      },
      &out, nullptr);
  return out;
}

}  // namespace cnnergy::tune::testing
