// `cnnergy dist-train` and `cnnergy concurrent`: flags -> data-parallel configuration, the run
// (local threads or one MPI rank per process), a per-rank / per-node / total table, scaling against
// a one-GPU baseline, JSON output. Under MPI only rank 0 prints; every rank that fails says so with
// its rank, and a rank failing alone leaves without MPI_Finalize so mpirun stops the others at
// once.
#include "cli/cmd_dist_train.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "backend/ops.hpp"
#include "cli/args.hpp"
#include "cli/backend_flags.hpp"
#include "cli/dist_train_output.hpp"
#include "cli/vocabulary.hpp"
#include "core/errors.hpp"
#include "data/dataset.hpp"
#include "net/graph.hpp"
#include "net/zoo/zoo.hpp"
#include "core/json.hpp"
#include "train/parallel/concurrent.hpp"
#include "train/parallel/dp_trainer.hpp"
#include "train/parallel/mpi_comm.hpp"
#include "train/parallel/nccl_comm.hpp"
#include "train/parallel/scaling.hpp"
#include "train/precision.hpp"

namespace cnnergy::cli {

namespace {

using namespace cnnergy::dist;
using namespace dist_output;

// Flags both commands share: model, data, precision, solver, buckets, timeouts, energy.
void declare_common(ArgParser& p) {
  p.option("model", "zoo model (cnnergy model-info --list) or an ONNX file (PATH.onnx, onnx:PATH)", "lenet5");
  p.option(
      "data",
      "data set: fashion-mnist[:DIR], mnist:DIR, cifar10:DIR, folder:DIR, synthetic[:CxHxW:...]",
      "fashion-mnist");
  declare_device_flag(p, "cpu: replicas are CPU threads/processes; cuda: one GPU per replica (GPUs 0..N-1)");
  p.option("precision", "fp32 (TF32 off), tf32, fp16 (loss scaling), bf16", "fp32",
           precision_names());
  p.option("layout", "activation layout on the GPU", "nchw", {"nchw", "nhwc"});
  p.option("conv-candidates", "graph_find / auto: engines of cuDNN's ranking timed per convolution (1-100; like PyTorch's cudnn benchmark_limit)", "10");
  p.option("algo-cache", kAlgoCacheHelp);
  declare_fuse_epilogue_flag(p);
  declare_fuse_statistics_flag(p);
  declare_space_to_depth_flag(p);
  declare_activation_budget_flag(p);
  p.option("conv-algo", "GPU convolution algorithm policy: auto (the cheaper of find and graph_find per layer, host time included), find, heuristic (legacy cuDNN API), graph_find, graph_heuristic (graph API, cached execution plans) or an algorithm name, or own:NAME (the project's own kernels per layer: own:direct, own:im2col_gemm, own:implicit_gemm, own:fft, own:winograd, own:winograd_2x2; a layer one cannot run falls back to cuDNN auto with a note)",
           "auto");
  p.option("epochs", "epochs", "1");
  p.option("max-iters", "steps per epoch at most (0 = whole epoch of global batches)", "0");
  p.option("warmup", "first steps trained but neither timed nor metered", "2");
  p.option("eval-batches", "held-out batches per evaluation over all ranks (0 = all)", "0");
  p.flag("no-eval", "skip the held-out evaluation");
  p.option("lr", "learning rate (fixed)", "0.01");
  p.option("momentum", "SGD momentum", "0.9");
  p.option("weight-decay", "L2 weight decay (weights only)", "0.0005");
  p.option("bucket-mb", "gradient bucket size in MiB", "25");
  p.flag("no-overlap", "launch the all-reduces after backward instead of during it");
  p.option("wait-method", "how waiting for the slowest rank is measured (docs/multi-gpu.md)",
           "estimate", {"estimate", "barrier"});
  p.option("comm-timeout", "seconds a collective may wait for its peers before the run fails",
           "300");
  p.option("check-weights",
           "compare weight checksums across ranks every N steps (0 = at the end only)", "0");
  p.option("seed", "seed for weights, epoch order, dropout", "1");
  p.flag("augment", "random crop/mirror of training samples");
  p.flag("fixed-batch",
         "train every step on one random batch put on each GPU once (no loader): compute and "
         "communication alone, as PyTorch benchmarks with data on the GPU; accuracy is meaningless");
  p.flag("cuda-graph",
         "replay each step (after the first) as one recorded CUDA graph per GPU: forward, backward "
         "with the bucket all-reduces, update; only the whole step is timed (no per-bucket "
         "all-reduce, wait or exposed-communication figures); not with dropout");
  p.option("workers", "data-loader threads per rank", "2");
  p.option("prefetch", "batches prefetched per rank", "3");
  p.option("dataset-size", "synthetic data set size", "0");
  p.option("input", "model input override CxHxW");
  p.option("classes", "model class-count override");
  p.flag("no-energy", "do not meter energy (time only)");
  declare_output_flags(p, "the report");
}

struct Common {
  BackendOptions backend;
  DataParallelConfig config;
  CommOptions comm;
  std::unique_ptr<Graph> graph;
  data::DatasetSplits data;
  bool meter_energy = true;
  std::string precision;
};

// "synthetic" alone takes the model's input shape and class count (as `cnnergy train`).
std::string data_spec(const std::string& data, const Graph& graph, std::int64_t dataset_size) {
  if (data != "synthetic") return data;
  const Shape& in = graph.input_per_sample();
  return "synthetic:" + std::to_string(in[0]) + "x" + std::to_string(in[1]) + "x" +
         std::to_string(in[2]) + ":classes=" + std::to_string(graph.num_classes()) +
         (dataset_size > 0 ? ":size=" + std::to_string(dataset_size) : std::string());
}

Common parse_common(const ArgParser& p) {
  Common c;
  if (auto d = p.get_optional("device"); d && *d != "cpu" && *d != "cuda")
    throw InvalidArgument("--device must be cpu or cuda here (replicas take GPUs 0..N-1), got '" + *d + "'");
  c.backend.device = device_from_flags(p);
  c.config.cuda_graph = p.get_flag("cuda-graph");
  const RunConfig run = run_config_from_flags(p);
  c.config.activation_budget_bytes = run.activation_budget_bytes;
  if (c.config.cuda_graph && !c.backend.device.is_cuda())  // before any data is opened
    throw NotSupported(
        "--cuda-graph records the step as a CUDA graph and needs --device cuda (this run is on " +
        c.backend.device.str() + ")");
  c.precision = std::string(precision_name(run.precision));
  c.backend = run.backend_options();
  DataParallelConfig& d = c.config;
  d.epochs = p.get_int("epochs", 1, 100000);
  d.max_iterations_per_epoch = p.get_int("max-iters", 0, 1LL << 40);
  d.warmup_iterations = p.get_int("warmup", 0, 1LL << 40);
  d.eval_batches = p.get_int("eval-batches", 0, 1LL << 40);
  d.evaluate = !p.get_flag("no-eval");
  d.solver.schedule.base_lr = p.get_double("lr", 1e-12, 100.0);
  d.solver.momentum = p.get_double("momentum", 0.0, 0.999999);
  d.solver.weight_decay = p.get_double("weight-decay", 0.0, 1.0);
  d.solver.loss_scale = SolverOptions::loss_scale_for(c.backend.dtype);
  d.buckets.cap_bytes =
      static_cast<std::size_t>(p.get_double("bucket-mb", 1.0 / 1024, 1 << 20) * (1 << 20));
  d.buckets.overlap = !p.get_flag("no-overlap");
  d.wait_method = parse_wait_method(p.get("wait-method"));
  d.check_weights_every = p.get_int("check-weights", 0, 1LL << 40);
  d.seed = static_cast<std::uint64_t>(p.get_int("seed", 0, 1LL << 62));
  d.augment = p.get_flag("augment");
  d.fixed_batch = p.get_flag("fixed-batch");
  d.loader_workers = static_cast<int>(p.get_int("workers", 1, 64));
  d.prefetch = static_cast<int>(p.get_int("prefetch", 1, 64));
  c.comm.timeout_s = p.get_double("comm-timeout", 0.001, 1e7);
  c.meter_energy = !p.get_flag("no-energy");
  std::optional<Shape> input;
  if (auto s = p.get_optional("input")) input = parse_shape(*s);
  std::optional<std::int64_t> classes;
  if (p.get_optional("classes")) classes = p.get_int("classes", 1, 1 << 24);
  c.graph = build_model(p.get("model"), input, classes);
  const std::string spec =
      data_spec(p.get("data"), *c.graph, p.get_int("dataset-size", 0, 1LL << 40));
  c.data = data::open_dataset(spec);
  d.signature = "data spec '" + spec + "'";
  return c;
}

// Two ranks on one GPU would fail deep inside NCCL: refuse it first, naming them (collective).
void require_distinct_gpus(Communicator& comm, const Backend& backend) {
  // Every rank takes the same branch: a backend without bus ids has none on any rank.
  if (backend.pci_bus_id().empty()) return;
  const auto all = comm.all_gather(comm.host_name() + " GPU " + backend.pci_bus_id());
  for (std::size_t a = 0; a < all.size(); ++a)
    for (std::size_t b = a + 1; b < all.size(); ++b)
      if (all[a] == all[b])
        throw NotSupported("ranks " + std::to_string(a) + " and " + std::to_string(b) +
                           " would share " + all[a] +
                           ": start at most one process per GPU on each node");
}

// Re-throws a rank's failure with its rank in the message, keeping the error's exit code.
[[noreturn]] void rethrow_with_rank(int rank) {
  try {
    throw;
  } catch (const Error& e) {
    throw Error(e.code(), "rank " + std::to_string(rank) + ": " + e.what());
  } catch (const std::exception& e) {
    throw InternalError("rank " + std::to_string(rank) + ": " + e.what());
  }
}

}  // namespace

int run_dist_train(const std::vector<std::string>& args) {
  ArgParser p("dist-train",
              "Data-parallel training: the global batch split over N GPUs (or CPU replicas), "
              "gradients all-reduced "
              "in buckets during backward (NCCL on GPUs, MPI or threads on the CPU). Reports "
              "per-rank compute, "
              "all-reduce and wait time and energy, per-node and total energy, and scaling against "
              "one GPU.");
  declare_common(p);
  p.option("gpus",
           "how many GPUs (replicas) to train on, one GPU each, in this process (one GPU each); under mpirun: the rank count to expect");
  p.option("global-batch", "global batch, split over the replicas (strong scaling)");
  p.option("per-gpu-batch", "batch of each replica (weak scaling)");
  p.option(
      "launcher",
      "local: N replicas in this process; mpi: one rank per process (mpirun/srun); auto: mpi when "
      "started by an MPI launcher",
      "auto", {"auto", "local", "mpi"});
  p.option("save", "rank 0 writes a checkpoint of the final weights here");
  p.option("baseline",
           "JSON report of a one-GPU run (dist-train --gpus 1 --json) to compute scaling against");
  p.flag("compare-single",
         "after this run, run the one-GPU baseline here (rank 0) and report scaling");
  p.epilog(
      "Strong scaling: --global-batch B (each of N replicas trains B/N). Weak scaling: "
      "--per-gpu-batch b. "
      "Exit codes: see `cnnergy --help`; a rank that dies or stalls makes the others fail within "
      "--comm-timeout seconds.");
  if (!p.parse(args)) return 0;
  OutputSink sink(p);

  const bool strong = p.get_optional("global-batch").has_value();
  if (strong == p.get_optional("per-gpu-batch").has_value())
    throw InvalidArgument(
        "give exactly one of --global-batch (strong scaling) and --per-gpu-batch (weak scaling)");
  const std::string launcher = p.get("launcher");
  const bool use_mpi = launcher == "mpi" || (launcher == "auto" && launched_by_mpi());
  const std::int64_t gpus_flag =
      p.get_optional("gpus") ? p.get_int("gpus", 1, 1 << 16) : 0;  // 0: not given
  const ScalingMode mode = strong ? ScalingMode::kStrong : ScalingMode::kWeak;

  auto per_replica = [&](std::int64_t world) {
    if (!strong) return p.get_int("per-gpu-batch", 1, 1 << 24);
    const std::int64_t global = p.get_int("global-batch", 1, 1 << 30);
    if (global % world != 0)
      throw InvalidArgument("the global batch " + std::to_string(global) +
                            " does not split evenly over " + std::to_string(world) + " replicas");
    return global / world;
  };

  // The baseline is read (and refused) before any training, not after it.
  std::optional<BaselineFigures> baseline;
  if (auto path = p.get_optional("baseline")) baseline = baseline_from_json(*path);

  DataParallelReport report;
  bool print = true;
  int baseline_device = 0;
  std::unique_ptr<MpiSession> session;
  Common c;
  if (use_mpi) {
    session = std::make_unique<MpiSession>();
    print = session->world_rank() == 0;
    std::unique_ptr<Backend> backend;  // declared before the communicator: destroyed after it
    std::unique_ptr<Communicator> comm;
    try {
      comm = session->communicator(CommOptions{p.get_double("comm-timeout", 0.001, 1e7)});
      const int world = session->world_size();
      if (gpus_flag > 0 && gpus_flag != world)
        throw InvalidArgument("--gpus " + std::to_string(gpus_flag) +
                              " but the MPI launcher started " + std::to_string(world) + " ranks");
      c = parse_common(p);
      c.config.per_replica_batch = per_replica(world);
      c.config.save_path = p.get_optional("save").value_or("");
      if (c.backend.device.is_cuda()) {
        // One GPU per process: the node-local rank's, or the only one a process sees when the
        // launcher gives each its own (CUDA_VISIBLE_DEVICES per rank, e.g. srun --gpus-per-task=1).
        const int visible = cuda_device_count(), local = session->local_rank();
        if (local >= visible && visible != 1)
          throw NotSupported("local rank " + std::to_string(local) + " on " + comm->host_name() +
                             " needs its own GPU, but " + std::to_string(visible) +
                             " are visible: start at most that many processes per node");
        c.backend.device.index = baseline_device = local < visible ? local : 0;
      }
      backend = create_backend(c.backend);
      if (c.backend.device.is_cuda()) {
        require_distinct_gpus(*comm, *backend);
        comm = make_nccl_communicator(*backend, std::move(comm));
      }
      auto probe = c.meter_energy ? open_own_gpu_probe(*backend, session->local_size()) : nullptr;
      report = train_data_parallel(*c.graph, *backend, *comm, c.data, c.config, probe.get());
      probe.reset();
      comm.reset();  // frees the GPU for a --compare-single baseline
      backend.reset();
    } catch (...) {
      if (comm) comm->abort("rank " + std::to_string(session->world_rank()) + " failed");
      session->abandon();
      rethrow_with_rank(session->world_rank());
    }
  } else {
    c = parse_common(p);
    const int n = static_cast<int>(gpus_flag > 0 ? gpus_flag : 1);
    c.config.per_replica_batch = per_replica(n);
    c.config.save_path = p.get_optional("save").value_or("");
    LocalRunOptions lo;
    lo.backend = c.backend;
    for (int i = 0; i < n; ++i) lo.devices.push_back(c.backend.device.is_cuda() ? i : 0);
    lo.meter_energy = c.meter_energy;
    lo.comm = c.comm;
    if (c.backend.device.is_cuda() && n > cuda_device_count())
      throw NotSupported("--gpus " + std::to_string(n) + ": " + std::to_string(n) +
                         " GPU replica(s) asked for, but " + std::to_string(cuda_device_count()) +
                         " GPU(s) are visible");
    if (print)
      std::printf(
          "data-parallel training: %s on %s (%lld samples), %d replica(s) on %s, batch %d x %lld, "
          "%s\n",
          c.graph->model_name().c_str(), c.data.train->name().c_str(),
          static_cast<long long>(c.data.train->size()), n,
          c.backend.device.is_cuda() ? "GPUs" : "the CPU", n,
          static_cast<long long>(c.config.per_replica_batch), c.precision.c_str());
    std::fflush(stdout);
    report = run_local_data_parallel(*c.graph, c.data, lo, c.config);
  }
  if (!print) return 0;
  if (use_mpi)
    std::printf("data-parallel training: %s, %d MPI rank(s) (%s), batch %d x %lld, %s\n",
                report.model.c_str(), report.world_size, report.comm_kind.c_str(),
                report.world_size, static_cast<long long>(report.per_replica_batch),
                c.precision.c_str());
  print_report(report);
  Json out = report_json(report);
  out["fixed_batch"] = c.config.fixed_batch;
  out["precision"] = c.precision;

  if (p.get_flag("compare-single")) {
    std::printf("\nbaseline: the same training on one %s ...\n",
                c.backend.device.is_cuda() ? "GPU" : "CPU replica");
    std::fflush(stdout);
    LocalRunOptions lo;
    lo.backend = c.backend;
    lo.devices = {baseline_device};
    lo.meter_energy = c.meter_energy;
    lo.comm = c.comm;
    DataParallelConfig bc = c.config;
    bc.per_replica_batch = strong ? report.global_batch : report.per_replica_batch;
    bc.save_path.clear();
    const DataParallelReport single = run_local_data_parallel(*c.graph, c.data, lo, bc);
    std::printf("baseline: %.1f samples/s", single.samples_per_s);
    if (single.joules_per_sample) std::printf(", %.5f J/sample", *single.joules_per_sample);
    std::printf("\n");
    out["baseline"] = report_json(single);
    baseline = baseline_of(single);
  }
  if (baseline) {
    const ScalingComparison sc = compare_scaling(report, *baseline, mode);
    print_scaling(sc, c.backend.device.is_cuda());
    out["scaling"] = scaling_json(sc);
  }
  sink.finish(out, "ranks");
  return 0;
}

int run_concurrent(const std::vector<std::string>& args) {
  ArgParser p(
      "concurrent",
      "Concurrent jobs (Gera et al. 2018): K independent trainings on disjoint GPU subsets at the same "
      "time, "
      "against the same K one after another on all GPUs; total time and energy of both schedules.");
  declare_common(p);
  p.option("jobs", "number of independent trainings K", "2");
  p.option("gpus-per-job", "GPUs (or CPU replicas) of each job in the concurrent schedule", "1");
  p.option("job-batch", "global batch of each job (the same in both schedules)", "64");
  if (!p.parse(args)) return 0;
  OutputSink sink(p);

  Common c = parse_common(p);
  ConcurrentOptions o;
  o.jobs = static_cast<int>(p.get_int("jobs", 1, 1024));
  o.gpus_per_job = static_cast<int>(p.get_int("gpus-per-job", 1, 1024));
  o.backend = c.backend;
  o.job_batch = p.get_int("job-batch", 1, 1 << 30);
  o.config = c.config;
  o.meter_energy = c.meter_energy;
  o.comm = c.comm;
  std::printf(
      "%d jobs of %s (batch %lld), %d %s each concurrently vs one after another on all %d\n",
      o.jobs, c.graph->model_name().c_str(), static_cast<long long>(o.job_batch), o.gpus_per_job,
      c.backend.device.is_cuda() ? "GPU(s)" : "CPU replica(s)", o.jobs * o.gpus_per_job);
  std::fflush(stdout);
  const ConcurrentReport r = run_concurrent_schedules(*c.graph, c.data, o);

  std::printf("\n%-11s %9s %10s %9s %11s %11s\n", "schedule", "seconds", "joules", "samples",
              "samples/s", "J/sample");
  Json out = Json::object();
  out["total_gpus"] = r.total_gpus;
  out["energy_note"] = r.energy_note;
  out["fixed_batch"] = c.config.fixed_batch;
  for (const ScheduleReport* s : {&r.concurrent, &r.sequential}) {
    const double sps = s->seconds > 0 ? static_cast<double>(s->samples) / s->seconds : 0;
    std::printf("%-11s %9.3f", s->name.c_str(), s->seconds);
    if (s->joules) {
      std::printf(" %10.2f", *s->joules);
    } else {
      std::printf(" %10s", "-");
    }
    std::printf(" %9lld %11.1f", static_cast<long long>(s->samples), sps);
    if (s->joules && s->samples > 0) {
      std::printf(" %11.5f\n", *s->joules / static_cast<double>(s->samples));
    } else {
      std::printf(" %11s\n", "-");
    }
    Json j = Json::object();
    j["seconds"] = s->seconds;
    j["joules"] = opt(s->joules);
    j["samples"] = s->samples;
    Json jobs = Json::array();
    for (const auto& job : s->jobs) jobs.push_back(report_json(job));
    j["jobs"] = jobs;
    out[s->name] = j;
  }
  if (r.concurrent.seconds > 0)
    std::printf("sequential / concurrent: time x%.2f", r.sequential.seconds / r.concurrent.seconds);
  if (r.concurrent.joules && r.sequential.joules && *r.concurrent.joules > 0)
    std::printf(", energy x%.2f", *r.sequential.joules / *r.concurrent.joules);
  std::printf("\n");
  if (!r.energy_note.empty()) std::printf("energy: %s\n", r.energy_note.c_str());
  sink.finish(out);
  return 0;
}

}  // namespace cnnergy::cli
