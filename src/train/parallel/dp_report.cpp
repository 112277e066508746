// From raw per-rank measurements to the gathered data-parallel report: transfer vs wait split of
// the bucket all-reduces (the fastest time of a bucket over all steps and ranks is its transfer
// time), compute time net of communication, wait energy, per-node and total energy, plus the model
// signature and weight checksums the ranks compare. Steps replayed as CUDA graphs give the step as
// a whole only: their compute, all-reduce, wait and exposed-communication figures stay empty.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

#include "core/errors.hpp"
#include "core/hash.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"
#include "train/parallel/dp_internal.hpp"

namespace cnnergy::dist {

namespace {

// The start value the stored fingerprints were first made with (one digit short of FNV's offset
// basis): kept so that fingerprints already in baselines still compare.
constexpr std::uint64_t kFnvOffset = 1469598103934665603ull;

std::string hex64(std::uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof(text), "%016" PRIx64, v);
  return text;
}

double sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

// ---- text codec: "key=value" lines; summaries as six numbers
// ---------------------------------------

std::string encode_summary(const Summary& s) {
  return std::to_string(s.n) + " " + exact_number(s.median) + " " + exact_number(s.mean) + " " +
         exact_number(s.stddev) + " " + exact_number(s.min) + " " + exact_number(s.max);
}

Summary decode_summary(const std::string& text) {
  std::istringstream in(text);
  Summary s;
  in >> s.n >> s.median >> s.mean >> s.stddev >> s.min >> s.max;
  if (!in) throw InternalError("malformed summary in a rank report: '" + text + "'");
  return s;
}

}  // namespace

std::string exact_number(double v) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.17g", v);
  return text;
}

std::string wait_method_name(WaitMethod m) {
  return m == WaitMethod::kBarrier ? "barrier" : "estimate";
}

WaitMethod parse_wait_method(const std::string& text) {
  if (text == "estimate") return WaitMethod::kEstimate;
  if (text == "barrier") return WaitMethod::kBarrier;
  throw InvalidArgument("unknown wait method '" + text + "' (choose one of: estimate, barrier)");
}

std::string model_signature(const Graph& graph) {
  std::uint64_t h = kFnvOffset;
  for (std::size_t i = 0; i < graph.num_layers(); ++i) {
    const Layer& l = graph.layer(i);
    std::string text = l.name() + "|" + l.type() + "|" + l.describe();
    for (const Shape& s : l.output_shapes()) text += "|" + s.str();
    for (int t : graph.layer_inputs(i)) text += "<" + std::to_string(t);
    h = fnv1a64(text.data(), text.size(), h);
  }
  return graph.model_name() + " input " + graph.input_per_sample().str() + " classes " +
         std::to_string(graph.num_classes()) + " params " +
         std::to_string(graph.parameter_count()) + " structure " + hex64(h);
}

std::uint64_t mix_rank_seed(std::uint64_t seed, int rank) {
  return rank == 0 ? seed : mix64(seed, 0xd15700ull + static_cast<std::uint64_t>(rank));
}

std::string weights_checksum(Executor& executor) {
  Backend& backend = executor.backend();
  std::uint64_t h = kFnvOffset;
  for (Parameter* p : executor.parameters()) {
    Tensor host = Tensor::host(p->master.shape(), DType::kF32, p->master.layout());
    backend.download(p->master, host);
    h = fnv1a64(host.raw(), host.size_bytes(), h);
  }
  return hex64(h);
}

std::string encode_rank_report(const RankReport& r) {
  std::string s;
  auto put = [&s](const std::string& k, const std::string& v) { s += k + "=" + v + "\n"; };
  put("rank", std::to_string(r.rank));
  put("host", r.host);
  put("device", r.device);
  put("timed_iterations", std::to_string(r.timed_iterations));
  put("seconds", exact_number(r.seconds));
  put("iteration_ms", encode_summary(r.iteration_ms));
  for (std::size_t i = 0; i < r.phase_ms.size(); ++i)
    put("phase" + std::to_string(i), encode_summary(r.phase_ms[i]));
  // Figures not measured (a replayed CUDA graph) are left out and decode as empty.
  auto put_opt = [&put](const std::string& k, const std::optional<double>& v) {
    if (v) put(k, exact_number(*v));
  };
  put_opt("compute_ms", r.compute_ms);
  put_opt("allreduce_ms", r.allreduce_ms);
  put_opt("wait_ms", r.wait_ms);
  put_opt("exposed_comm_ms", r.exposed_comm_ms);
  put("step_ms", exact_number(r.step_ms));
  put("load_ms", exact_number(r.load_ms));
  put("loader_wait_ms", exact_number(r.loader_wait_ms));
  if (r.joules) put("joules", exact_number(*r.joules));
  if (r.wait_joules) put("wait_joules", exact_number(*r.wait_joules));
  put("average_watts", exact_number(r.average_watts));
  put("energy_source", r.energy_source);
  put("metered", r.metered ? "1" : "0");
  return s;
}

RankReport decode_rank_report(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) throw InternalError("malformed rank report line '" + line + "'");
    kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  auto get = [&kv](const std::string& k) -> const std::string& {
    auto it = kv.find(k);
    if (it == kv.end()) throw InternalError("rank report lacks '" + k + "'");
    return it->second;
  };
  auto num = [&](const std::string& k) { return std::strtod(get(k).c_str(), nullptr); };
  RankReport r;
  r.rank = std::stoi(get("rank"));
  r.host = get("host");
  r.device = get("device");
  r.timed_iterations = std::stoll(get("timed_iterations"));
  r.seconds = num("seconds");
  r.iteration_ms = decode_summary(get("iteration_ms"));
  for (std::size_t i = 0; kv.count("phase" + std::to_string(i)); ++i)
    r.phase_ms.push_back(decode_summary(get("phase" + std::to_string(i))));
  auto opt = [&](const std::string& k) {
    return kv.count(k) ? std::optional<double>(num(k)) : std::nullopt;
  };
  r.compute_ms = opt("compute_ms");
  r.allreduce_ms = opt("allreduce_ms");
  r.wait_ms = opt("wait_ms");
  r.exposed_comm_ms = opt("exposed_comm_ms");
  r.step_ms = num("step_ms");
  r.load_ms = num("load_ms");
  r.loader_wait_ms = num("loader_wait_ms");
  if (kv.count("joules")) r.joules = num("joules");
  if (kv.count("wait_joules")) r.wait_joules = num("wait_joules");
  r.average_watts = num("average_watts");
  r.energy_source = get("energy_source");
  r.metered = get("metered") == "1";
  return r;
}

DataParallelReport gather_report(Communicator& comm, const RankState& st,
                                 const std::vector<BucketInfo>& buckets,
                                 const DataParallelConfig& config) {
  const std::size_t nb = buckets.size();
  constexpr double kInf = std::numeric_limits<double>::infinity();

  // Fastest all-reduce of each bucket (and of the wait barrier) over this rank's steps, then over
  // all ranks: that is the transfer; the rest of each measured duration is waiting for peers.
  std::vector<double> mins(nb + 1, kInf);
  for (const BucketStepTiming& t : st.bucket_timings) {
    for (std::size_t b = 0; b < nb && b < t.bucket_ms.size(); ++b)
      mins[b] = std::min(mins[b], t.bucket_ms[b]);
    mins[nb] = std::min(mins[nb], t.barrier_ms);
  }
  std::string mine;
  for (double m : mins) mine += exact_number(m) + " ";
  std::vector<double> global_min(nb + 1, kInf);
  for (const std::string& text : comm.all_gather(mine)) {
    std::istringstream in(text);
    for (std::size_t b = 0; b <= nb; ++b) {
      std::string tok;
      in >> tok;
      global_min[b] = std::min(global_min[b], std::strtod(tok.c_str(), nullptr));
    }
  }
  for (double& m : global_min)
    if (!std::isfinite(m)) m = 0;

  RankReport r;
  r.rank = st.rank;
  r.host = st.host;
  r.device = st.device;
  r.timed_iterations = static_cast<std::int64_t>(st.iteration_ms.size());
  r.seconds = st.seconds;
  r.iteration_ms = summarize(st.iteration_ms);
  for (const auto& p : st.phase_ms) r.phase_ms.push_back(summarize(p));
  r.loader_wait_ms = st.loader_wait_ms;
  r.metered = st.metered;
  auto phase_total = [&st](std::size_t i) {
    return i < st.phase_ms.size() ? sum(st.phase_ms[i]) : 0.0;
  };
  r.load_ms = phase_total(0);
  if (st.graphed) {
    // One replayed graph per step: only the step as a whole is timed (events around the replay on
    // the compute stream). Compute, all-reduce, wait and exposed communication stay empty.
    r.step_ms = phase_total(1);
  } else {
    const bool barrier = config.wait_method == WaitMethod::kBarrier;
    double measured_comm = 0;  // every bucket's measured duration, all steps
    double wait = 0, allreduce = 0;
    for (const BucketStepTiming& t : st.bucket_timings) {
      double step_sum = 0;
      for (std::size_t b = 0; b < nb && b < t.bucket_ms.size(); ++b) step_sum += t.bucket_ms[b];
      measured_comm += step_sum + t.barrier_ms;
      if (barrier) {
        wait += std::max(0.0, t.barrier_ms - global_min[nb]);
        allreduce += step_sum + global_min[nb];
      } else {
        for (std::size_t b = 0; b < nb && b < t.bucket_ms.size(); ++b) {
          wait += std::max(0.0, t.bucket_ms[b] - global_min[b]);
          allreduce += std::min(t.bucket_ms[b], global_min[b]);
        }
      }
    }
    r.wait_ms = wait;
    r.allreduce_ms = allreduce;
    r.step_ms = phase_total(1) + phase_total(2) + phase_total(3) + phase_total(4);
    // Host collectives are synchronous: launched from the backward hook they sit inside the
    // backward phase, so they are taken out of compute; on a GPU the backward phase holds kernels
    // only.
    r.compute_ms = phase_total(1) + phase_total(2) + phase_total(4) -
                   (st.host_comm && st.overlap ? measured_comm : 0.0);
    r.exposed_comm_ms = st.host_comm ? measured_comm : phase_total(3);
  }
  if (st.joules && !st.energy_missing) {
    r.joules = st.joules;
    r.average_watts = st.seconds > 0 ? *st.joules / st.seconds : 0;
    if (r.wait_ms) r.wait_joules = r.average_watts * *r.wait_ms / 1e3;
    r.energy_source = st.energy_source;
  }

  DataParallelReport rep;
  rep.comm_kind = comm.kind();
  rep.world_size = comm.size();
  rep.per_replica_batch = config.per_replica_batch;
  rep.global_batch = config.per_replica_batch * comm.size();
  rep.iterations = st.iterations;
  rep.buckets = buckets;
  if (!st.graphed)
    rep.bucket_transfer_ms.assign(global_min.begin(),
                                  global_min.begin() + static_cast<std::ptrdiff_t>(nb));
  rep.epochs = st.epochs;
  rep.phase_names = st.phase_names;
  rep.cuda_graph = st.graphed;
  rep.graph_recordings = st.graph_recordings;
  rep.graph_recordings_timed = st.graph_recordings_timed;
  rep.wait_method = wait_method_name(config.wait_method);
  for (const std::string& text : comm.all_gather(encode_rank_report(r)))
    rep.ranks.push_back(decode_rank_report(text));
  std::sort(rep.ranks.begin(), rep.ranks.end(),
            [](const RankReport& a, const RankReport& b) { return a.rank < b.rank; });

  rep.timed_iterations = rep.ranks.front().timed_iterations;
  rep.timed_samples = rep.timed_iterations * rep.global_batch;
  bool all_energy = true, any_metered = false;
  std::string missing;
  std::map<std::string, NodeEnergy> nodes;
  double total = 0;
  for (const RankReport& rr : rep.ranks) {
    any_metered = any_metered || rr.metered;
    rep.seconds = std::max(rep.seconds, rr.seconds);
    NodeEnergy& n = nodes[rr.host];
    n.host = rr.host;
    ++n.ranks;
    if (rr.joules) {
      total += *rr.joules;
      n.joules = n.joules.value_or(0) + *rr.joules;
    } else {
      all_energy = false;
      missing += (missing.empty() ? "" : ", ") + std::to_string(rr.rank);
    }
  }
  // A node keeps a sum only when every one of its ranks had a reading.
  for (const RankReport& rr : rep.ranks)
    if (!rr.joules) nodes[rr.host].joules.reset();
  for (auto& [host, n] : nodes) rep.nodes.push_back(n);
  if (rep.seconds > 0) rep.samples_per_s = static_cast<double>(rep.timed_samples) / rep.seconds;
  if (all_energy) {
    rep.total_joules = total;
    if (rep.timed_samples > 0)
      rep.joules_per_sample = total / static_cast<double>(rep.timed_samples);
  } else if (!any_metered) {
    rep.energy_note = "not metered (no energy probe: CPU replicas, --no-energy, or no NVML driver)";
  } else {
    rep.energy_note =
        "no energy reading on rank(s) " + missing + ": totals left out rather than extrapolated";
  }
  if (rep.timed_iterations == 0)
    rep.energy_note +=
        std::string(rep.energy_note.empty() ? "" : "; ") +
        "no timed iterations: every step was a warm-up step (raise --max-iters or lower --warmup)";
  return rep;
}

}  // namespace cnnergy::dist
