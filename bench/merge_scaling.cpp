// Merge scaling benchmark: `cnnergy merge` of the shard databases a Slurm job array leaves (one sweep,
// N shards of T trials each, every trial with its repetitions, phases and telemetry) into a new file,
// timed per trial for several N. The target: merging 1,000 shards costs at most 2x per trial what
// merging 10 shards does (linear in the trials, not quadratic in the shards).
// Prints a table and writes JSON (--out).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "core/errors.hpp"
#include "core/json.hpp"
#include "tune/knobs.hpp"
#include "tune/store.hpp"

using namespace cnnergy;
namespace fs = std::filesystem;

namespace {

tune::TrialRecord synthetic_trial(const tune::TrialSpec& spec, std::size_t i) {
  tune::TrialRecord t;
  t.spec = spec;
  t.started = "2026-12-07T10:00:00Z";
  t.finished = "2026-12-07T10:00:30Z";
  t.measurement.samples_per_iteration = 64;
  for (int r = 0; r < 3; ++r) {
    tune::Repetition rep;
    rep.iterations = 20;
    rep.elapsed_ms = 1000.0 + double((i * 7 + static_cast<std::size_t>(r) * 13) % 50);
    rep.energy_mj = {rep.elapsed_ms * 300.0};
    rep.peak_power_w = 350;
    rep.energy_source = "counter";
    t.measurement.repetitions.push_back(rep);
  }
  for (const char* p : {"load", "forward", "backward", "update"})
    t.measurement.phases.push_back({p, 10.0, 0.1, 3000.0, 20.0});
  t.measurement.telemetry_json = R"({"idle_power_w":70.0})";
  return t;
}

// N shard files of one sweep, trial i in shard i % N (as `sweep --shard` splits them).
std::vector<std::string> write_shards(const fs::path& dir, std::size_t shards, std::size_t per_shard) {
  const std::size_t total = shards * per_shard;
  tune::KnobSpace space;  // batch x GPU count: a knob list holds at most 4,096 values
  const std::size_t batches = (total + 9) / 10;
  space.set(tune::Knob::kBatch, tune::parse_knob_values(tune::Knob::kBatch, "1:" + std::to_string(batches) + ":1", {}));
  space.set(tune::Knob::kGpus, tune::parse_knob_values(tune::Knob::kGpus, "1:10:1", {}));
  auto trials = space.trials(space.default_reference({}));
  trials.resize(total);
  std::vector<std::string> paths;
  for (std::size_t s = 0; s < shards; ++s) {
    paths.push_back((dir / ("shard-" + std::to_string(s + 1) + "-of-" + std::to_string(shards) + ".db")).string());
    tune::ResultStore store(paths.back());
    store.set_default_job_id("1000_" + std::to_string(s + 1));
    tune::SweepRecord rec;
    rec.sweep_key = "sw-mergebench0000";
    rec.description = "merge benchmark";
    rec.environment = tune::host_environment();
    const auto id = store.add_sweep(rec);
    for (std::size_t i = s; i < total; i += shards) store.write_trial(id, synthetic_trial(trials[i], i));
  }
  return paths;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    cli::ArgParser p("bench_merge_scaling",
                     "Time `cnnergy merge --same-sweep` of N shard databases of T trials each, per trial.");
    p.option("shards", "shard counts to merge", "10,100,1000");
    p.option("trials-per-shard", "trials in each shard", "10");
    p.option("repeats", "merges per shard count (the median is reported)", "3");
    p.option("dir", "scratch folder for the shard files (removed afterwards)", fs::temp_directory_path().string());
    p.option("out", "JSON results file", "merge_scaling.json");
    if (!p.parse(std::vector<std::string>(argv + 1, argv + argc))) return 0;
    const auto per_shard = static_cast<std::size_t>(p.get_int("trials-per-shard", 1, 100000));
    const auto repeats = static_cast<int>(p.get_int("repeats", 1, 100));
    const fs::path root = fs::path(p.get("dir")) / ("cnnergy-merge-bench-" + std::to_string(::getpid()));

    Json rows = Json::array();
    double base_ms_per_trial = 0;
    std::printf("%8s %8s %12s %14s %12s\n", "shards", "trials", "merge s", "ms per trial", "vs first");
    for (const auto& item : cli::split_list(p.get("shards"), "shard count")) {
      const auto shards = static_cast<std::size_t>(std::stoul(item));
      if (shards == 0) throw InvalidArgument("--shards: a shard count must be at least 1");
      fs::create_directories(root);
      const auto setup0 = std::chrono::steady_clock::now();
      const auto paths = write_shards(root, shards, per_shard);
      const double setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - setup0).count();
      std::vector<double> times;
      tune::MergeOptions one;
      one.one_sweep = true;
      for (int r = 0; r < repeats; ++r) {
        const fs::path out = root / ("merged-" + std::to_string(r) + ".db");
        const auto t0 = std::chrono::steady_clock::now();
        const auto report = tune::merge_stores(out.string(), paths, one);
        times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        if (report.trials_copied != shards * per_shard)
          throw InternalError("merged " + std::to_string(report.trials_copied) + " trials, expected " +
                              std::to_string(shards * per_shard));
      }
      std::sort(times.begin(), times.end());
      const double median_s = times[times.size() / 2];
      const double ms_per_trial = median_s * 1e3 / double(shards * per_shard);
      if (base_ms_per_trial == 0) base_ms_per_trial = ms_per_trial;
      std::printf("%8zu %8zu %12.3f %14.3f %11.2fx\n", shards, shards * per_shard, median_s, ms_per_trial,
                  ms_per_trial / base_ms_per_trial);
      std::fflush(stdout);
      Json row = Json::object();
      row["shards"] = shards;
      row["trials"] = shards * per_shard;
      row["merge_s_median"] = median_s;
      row["merge_s_min"] = times.front();
      row["merge_s_max"] = times.back();
      row["ms_per_trial"] = ms_per_trial;
      row["per_trial_vs_first"] = ms_per_trial / base_ms_per_trial;
      row["setup_s"] = setup_s;
      rows.push_back(row);
      fs::remove_all(root);
    }
    Json doc = Json::object();
    doc["benchmark"] = "merge_scaling";
    doc["trials_per_shard"] = per_shard;
    doc["repeats"] = repeats;
    doc["host"] = tune::host_environment().host;
    doc["rows"] = rows;
    std::ofstream(p.get("out")) << doc.dump(2) << "\n";
    std::printf("wrote %s\n", p.get("out").c_str());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_merge_scaling: %s\n", e.what());
    return static_cast<int>(e.code());
  }
}
