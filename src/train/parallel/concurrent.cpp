// The two schedules of Gera et al. 2018's concurrency experiment. Concurrent: one thread per job, each a
// local data-parallel run on its own GPU subset. Sequential: the jobs one after another, each on
// every GPU. A ScheduleMeter meters every GPU of the schedule over its whole wall time.
#include "train/parallel/concurrent.hpp"

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include "core/errors.hpp"

namespace cnnergy::dist {

namespace {

using Clock = std::chrono::steady_clock;

// One probe per GPU (each opened on a backend of its own: probes are opened for a backend), all
// begun and ended together around a schedule.
class ScheduleMeter {
 public:
  ScheduleMeter(const BackendOptions& base, int gpus, bool enabled, std::string& note) {
    if (!enabled) {
      note = "energy metering off";
      return;
    }
    if (!base.device.is_cuda()) {
      note =
          "CPU jobs: no per-device energy (the GPU energy counter is what this experiment meters)";
      return;
    }
    for (int i = 0; i < gpus; ++i) {
      BackendOptions bo = base;
      bo.device.index = i;
      backends_.push_back(create_backend(bo));
      auto probe = open_own_gpu_probe(*backends_.back(), gpus);
      if (!probe) {
        note =
            "GPU " + std::to_string(i) + " cannot be metered on its own: schedule energy left out";
        probes_.clear();
        return;
      }
      probes_.push_back(std::move(probe));
    }
  }
  void begin() {
    for (auto& p : probes_) p->begin();
  }
  std::optional<double> end() {
    if (probes_.empty()) return std::nullopt;
    double joules = 0;
    bool all = true;
    for (auto& p : probes_) {
      if (auto r = p->end()) {
        joules += r->joules;
      } else {
        all = false;
      }
    }
    return all ? std::optional<double>(joules) : std::nullopt;
  }

 private:
  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<std::unique_ptr<EnergyProbe>> probes_;
};

DataParallelReport run_job(const Graph& graph, const data::DatasetSplits& data,
                           const ConcurrentOptions& o, int job, int first_gpu, int gpus) {
  LocalRunOptions lo;
  lo.backend = o.backend;
  for (int g = 0; g < gpus; ++g)
    lo.devices.push_back(o.backend.device.is_cuda() ? first_gpu + g : 0);
  lo.meter_energy = o.meter_energy;
  lo.comm = o.comm;
  DataParallelConfig c = o.config;
  c.per_replica_batch = o.job_batch / gpus;
  c.seed = o.config.seed + static_cast<std::uint64_t>(job);
  c.save_path.clear();
  c.expected_world_size = 0;
  return run_local_data_parallel(graph, data, lo, c);
}

std::int64_t samples_of(const DataParallelReport& r) { return r.iterations * r.global_batch; }

}  // namespace

ConcurrentReport run_concurrent_schedules(const Graph& graph, const data::DatasetSplits& data,
                                          const ConcurrentOptions& o) {
  if (o.jobs < 1 || o.gpus_per_job < 1)
    throw InvalidArgument("need at least one job and one GPU per job, got " +
                          std::to_string(o.jobs) + " x " + std::to_string(o.gpus_per_job));
  const int total = o.jobs * o.gpus_per_job;
  if (o.backend.device.is_cuda() && total > cuda_device_count())
    throw NotSupported(std::to_string(o.jobs) + " jobs x " + std::to_string(o.gpus_per_job) +
                       " GPUs need " + std::to_string(total) + " GPUs, but " +
                       std::to_string(cuda_device_count()) + " are visible");
  if (o.job_batch < 1 || o.job_batch % o.gpus_per_job != 0 || o.job_batch % total != 0)
    throw InvalidArgument("the job batch " + std::to_string(o.job_batch) +
                          " must split evenly over " + std::to_string(o.gpus_per_job) +
                          " GPUs (concurrent) and over all " + std::to_string(total) +
                          " GPUs (sequential)");

  ConcurrentReport rep;
  rep.total_gpus = total;
  ScheduleMeter meter(o.backend, total, o.meter_energy, rep.energy_note);

  // Concurrent: every job at once on its own GPUs.
  rep.concurrent.name = "concurrent";
  rep.concurrent.jobs.resize(static_cast<std::size_t>(o.jobs));
  {
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(o.jobs));
    std::atomic<int> first_failure{-1};
    meter.begin();
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int j = 0; j < o.jobs; ++j) {
      threads.emplace_back([&, j] {
        try {
          rep.concurrent.jobs[static_cast<std::size_t>(j)] =
              run_job(graph, data, o, j, j * o.gpus_per_job, o.gpus_per_job);
        } catch (...) {
          int expected = -1;
          first_failure.compare_exchange_strong(expected, j);
          errors[static_cast<std::size_t>(j)] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    rep.concurrent.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    rep.concurrent.joules = meter.end();
    if (const int f = first_failure.load(); f >= 0)
      std::rethrow_exception(errors[static_cast<std::size_t>(f)]);
  }

  // Sequential: the same jobs one after another, each on every GPU.
  rep.sequential.name = "sequential";
  meter.begin();
  const auto t0 = Clock::now();
  for (int j = 0; j < o.jobs; ++j)
    rep.sequential.jobs.push_back(run_job(graph, data, o, j, 0, total));
  rep.sequential.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  rep.sequential.joules = meter.end();

  for (const auto& j : rep.concurrent.jobs) rep.concurrent.samples += samples_of(j);
  for (const auto& j : rep.sequential.jobs) rep.sequential.samples += samples_of(j);
  return rep;
}

}  // namespace cnnergy::dist
