// The terminal and JSON output of `cnnergy dist-train` and `cnnergy concurrent`, apart from the
// commands themselves (cmd_dist_train.cpp): per-rank compute / all-reduce / wait time and energy,
// per-node and total energy, epochs, gradient buckets, and the scaling comparison.
#include "cli/dist_train_output.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/bounded_file.hpp"
#include "core/errors.hpp"

namespace cnnergy::cli::dist_output {

using namespace cnnergy::dist;

Json opt(const std::optional<double>& v) { return v ? Json(*v) : Json(); }

Json report_json(const DataParallelReport& r) {
  Json j = Json::object();
  j["model"] = r.model;
  j["comm"] = r.comm_kind;
  j["world_size"] = r.world_size;
  j["per_replica_batch"] = r.per_replica_batch;
  j["global_batch"] = r.global_batch;
  j["iterations"] = r.iterations;
  j["timed_iterations"] = r.timed_iterations;
  j["timed_samples"] = r.timed_samples;
  j["seconds"] = r.seconds;
  j["samples_per_s"] = r.samples_per_s;
  j["total_joules"] = opt(r.total_joules);
  j["joules_per_sample"] = opt(r.joules_per_sample);
  j["wait_method"] = r.wait_method;
  j["cuda_graph"] = r.cuda_graph;
  j["graph_recordings"] = r.graph_recordings;
  j["graph_recordings_timed"] = r.graph_recordings_timed;
  // What a replayed graph hides: the all-reduces run inside it and are not timed apart.
  j["comm_timing"] = r.cuda_graph
                         ? "not measured (steps replayed as CUDA graphs: step timed as a whole)"
                         : "per bucket (" + r.wait_method + ")";
  j["weights_checksum"] = r.weights_checksum;
  j["recomputed_outputs"] = r.recomputed_outputs;
  j["conv_statistics"] = r.conv_statistics;
  j["conv_statistics_computed"] = r.conv_statistics_computed;
  j["energy_note"] = r.energy_note;
  Json ranks = Json::array();
  for (const RankReport& k : r.ranks) {
    Json x = Json::object();
    x["rank"] = k.rank;
    x["host"] = k.host;
    x["device"] = k.device;
    x["timed_iterations"] = k.timed_iterations;
    x["seconds"] = k.seconds;
    x["compute_ms"] = opt(k.compute_ms);  // null: not measured (--cuda-graph)
    x["allreduce_ms"] = opt(k.allreduce_ms);
    x["wait_ms"] = opt(k.wait_ms);
    x["exposed_comm_ms"] = opt(k.exposed_comm_ms);
    x["step_ms"] = k.step_ms;
    x["load_ms"] = k.load_ms;
    x["loader_wait_ms"] = k.loader_wait_ms;
    x["iteration_ms_median"] = k.iteration_ms.median;
    x["joules"] = opt(k.joules);
    x["wait_joules"] = opt(k.wait_joules);
    x["average_watts"] = k.average_watts;
    x["energy_source"] = k.energy_source;
    Json phases = Json::object();  // median ms per step
    for (std::size_t i = 0; i < k.phase_ms.size() && i < r.phase_names.size(); ++i)
      phases[r.phase_names[i]] = k.phase_ms[i].median;
    x["phase_ms_median"] = phases;
    ranks.push_back(x);
  }
  j["ranks"] = ranks;
  Json nodes = Json::array();
  for (const NodeEnergy& n : r.nodes) {
    Json x = Json::object();
    x["host"] = n.host;
    x["ranks"] = n.ranks;
    x["joules"] = opt(n.joules);
    nodes.push_back(x);
  }
  j["nodes"] = nodes;
  Json buckets = Json::array();
  for (std::size_t b = 0; b < r.buckets.size(); ++b) {
    Json x = Json::object();
    x["bytes"] = r.buckets[b].bytes;
    x["dtype"] = std::string(dtype_name(r.buckets[b].dtype));
    x["parameters"] = r.buckets[b].num_parameters;
    x["first_parameter"] = r.buckets[b].first_parameter;
    x["transfer_ms"] = b < r.bucket_transfer_ms.size() ? Json(r.bucket_transfer_ms[b]) : Json();
    buckets.push_back(x);
  }
  j["buckets"] = buckets;
  Json epochs = Json::array();
  for (const EpochSummary& e : r.epochs) {
    Json x = Json::object();
    x["epoch"] = e.epoch;
    x["train_loss"] = std::isfinite(e.train_loss) ? Json(e.train_loss) : Json();
    x["top1"] = opt(e.top1);
    x["top5"] = opt(e.top5);
    epochs.push_back(x);
  }
  j["epochs"] = epochs;
  return j;
}

BaselineFigures baseline_from_json(const std::string& path) {
  return dist::baseline_from_text(read_bounded_file(path, kBaselineLimit), path);
}


double per_it(double total_ms, std::int64_t iterations) {
  return iterations > 0 ? total_ms / static_cast<double>(iterations) : 0.0;
}

void print_report(const DataParallelReport& r) {
  for (const EpochSummary& e : r.epochs) {
    std::printf("epoch %lld: loss %.4f", static_cast<long long>(e.epoch), e.train_loss);
    if (e.top1)
      std::printf(", top-1 %.2f%%, top-5 %.2f%% (%lld held-out samples)", *e.top1 * 100,
                  *e.top5 * 100, static_cast<long long>(e.eval_samples));
    std::printf("\n");
  }
  if (r.cuda_graph) {
    std::printf(
        "\nper rank, ms per timed iteration (%lld timed of %lld steps; each step one replayed CUDA "
        "graph, %lld recording(s) per rank, %lld of them in the timed windows):\n",
        static_cast<long long>(r.timed_iterations), static_cast<long long>(r.iterations),
        static_cast<long long>(r.graph_recordings),
        static_cast<long long>(r.graph_recordings_timed));
  } else {
    std::printf("\nper rank, ms per timed iteration (%lld timed of %lld steps; wait method: %s):\n",
                static_cast<long long>(r.timed_iterations), static_cast<long long>(r.iterations),
                r.wait_method.c_str());
  }
  std::printf("%4s %-14s %-28s %9s %9s %9s %8s %8s %9s %10s %9s %8s\n", "rank", "host", "device",
              "step", "compute", "allreduce", "wait", "exposed", "iteration", "joules", "wait J",
              "watts");
  // Figures a replayed graph does not give print as n/a.
  auto cell = [](int width, const std::optional<double>& total, std::int64_t n) {
    if (total) {
      std::printf(" %*.3f", width, per_it(*total, n));
    } else {
      std::printf(" %*s", width, "n/a");
    }
  };
  for (const RankReport& k : r.ranks) {
    const auto n = k.timed_iterations;
    std::printf("%4d %-14.14s %-28.28s %9.3f", k.rank, k.host.c_str(), k.device.c_str(),
                per_it(k.step_ms, n));
    cell(9, k.compute_ms, n);
    cell(9, k.allreduce_ms, n);
    cell(8, k.wait_ms, n);
    cell(8, k.exposed_comm_ms, n);
    std::printf(" %9.3f", k.iteration_ms.median);
    if (k.joules) {
      std::printf(" %10.2f", *k.joules);
      if (k.wait_joules) {
        std::printf(" %9.2f", *k.wait_joules);
      } else {
        std::printf(" %9s", "n/a");
      }
      std::printf(" %8.1f\n", k.average_watts);
    } else {
      std::printf(" %10s %9s %8s\n", "-", "-", "-");
    }
  }
  if (r.cuda_graph)
    std::printf(
        "(CUDA graph: step = forward + backward + all-reduces + update as one replay, timed by "
        "events around it;\n compute, all-reduce, wait and exposed communication are not "
        "measured)\n");
  for (const NodeEnergy& n : r.nodes) {
    if (n.joules) {
      std::printf("node %s: %.2f J over %d GPU(s)\n", n.host.c_str(), *n.joules, n.ranks);
    } else {
      std::printf("node %s: %d rank(s), energy not metered\n", n.host.c_str(), n.ranks);
    }
  }
  std::printf("total: %.3f s timed, %.1f samples/s", r.seconds, r.samples_per_s);
  if (r.total_joules)
    std::printf(", %.2f J (%.5f J/sample, every GPU metered)", *r.total_joules,
                r.joules_per_sample.value_or(0));
  std::printf("\n");
  if (!r.energy_note.empty()) std::printf("energy: %s\n", r.energy_note.c_str());
  std::size_t bytes = 0;
  for (const auto& b : r.buckets) bytes += b.bytes;
  std::printf("gradients: %zu bucket(s), %.2f MiB; weights identical on every rank (checksum %s)\n",
              r.buckets.size(), static_cast<double>(bytes) / (1 << 20), r.weights_checksum.c_str());
}

void print_scaling(const ScalingComparison& c, bool gpu) {
  const char* unit = gpu ? "GPU" : "CPU replica";
  std::printf(
      "\n%s scaling on %d %ss: %.1f vs %.1f samples/s on one %s: speed-up %.2fx, efficiency "
      "%.1f%%\n",
      scaling_mode_name(c.mode).c_str(), c.gpus, unit, c.samples_per_s, c.baseline_samples_per_s,
      unit, c.speedup, c.efficiency * 100);
  if (c.energy_ratio)
    std::printf("energy per sample: %.5f J vs %.5f J on one %s (x%.2f)\n", *c.joules_per_sample,
                *c.baseline_joules_per_sample, unit, *c.energy_ratio);
}

Json scaling_json(const ScalingComparison& c) {
  Json j = Json::object();
  j["mode"] = scaling_mode_name(c.mode);
  j["gpus"] = c.gpus;
  j["baseline_samples_per_s"] = c.baseline_samples_per_s;
  j["samples_per_s"] = c.samples_per_s;
  j["speedup"] = c.speedup;
  j["efficiency"] = c.efficiency;
  j["baseline_joules_per_sample"] = opt(c.baseline_joules_per_sample);
  j["joules_per_sample"] = opt(c.joules_per_sample);
  j["energy_ratio"] = opt(c.energy_ratio);
  return j;
}

}  // namespace cnnergy::cli::dist_output
