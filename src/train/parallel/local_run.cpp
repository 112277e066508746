// run_local_data_parallel(): one process, N replicas, one thread each. Each thread creates its own
// backend (its GPU, or a CPU replica), its communicator (threads, wrapped by NCCL on GPUs) and its
// energy probe, so every GPU is metered by itself. The first replica to fail aborts the group, the
// others stop at their next collective, and that first failure is what the caller sees.
#include <atomic>
#include <cstdlib>
#include <exception>
#include <set>
#include <thread>

#include "core/errors.hpp"
#include "core/log.hpp"
#include "measure/nvml_probe.hpp"
#include "train/parallel/dp_trainer.hpp"
#include "train/parallel/nccl_comm.hpp"

namespace cnnergy::dist {

std::unique_ptr<EnergyProbe> open_own_gpu_probe(Backend& backend, int ranks_on_node) {
  if (!backend.device().is_cuda())
    return nullptr;  // CPU replicas share one package: no per-replica energy
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (ranks_on_node > 1 && visible && *visible && backend.pci_bus_id().empty()) {
    log_warn(
        "energy not metered: CUDA_VISIBLE_DEVICES is set and the backend gives no PCI bus id, so a "
        "probe "
        "would meter every GPU of the node and " +
        std::to_string(ranks_on_node) +
        " ranks would count each "
        "GPU " +
        std::to_string(ranks_on_node) + " times");
    return nullptr;
  }
  return open_energy_probe(backend);
}

DataParallelReport run_local_data_parallel(const Graph& graph, const data::DatasetSplits& data,
                                           const LocalRunOptions& options,
                                           const DataParallelConfig& config) {
  const int n = static_cast<int>(options.devices.size());
  if (n < 1) throw InvalidArgument("data-parallel training needs at least one replica");
  const bool gpu = options.backend.device.is_cuda();
  if (gpu) {
    const int visible = cuda_device_count();
    std::set<int> distinct(options.devices.begin(), options.devices.end());
    if (static_cast<int>(distinct.size()) != n)
      throw InvalidArgument("each replica needs its own GPU: the device list repeats a GPU");
    for (int d : options.devices)
      if (d < 0 || d >= visible)
        throw NotSupported(std::to_string(n) + " GPU replica(s) asked for (GPU index " +
                           std::to_string(d) + "), but " + std::to_string(visible) +
                           " GPU(s) are visible" +
                           (cuda_backend_built() ? "" : " (this cnnergy was built without CUDA)"));
  }

  ThreadGroup group(n, options.comm);
  std::vector<DataParallelReport> reports(static_cast<std::size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::atomic<int> first_failure{-1};

  auto replica = [&](int rank) {
    try {
      BackendOptions bo = options.backend;
      if (gpu) bo.device.index = options.devices[static_cast<std::size_t>(rank)];
      auto backend = create_backend(bo);
      std::unique_ptr<Communicator> comm = group.communicator(rank);
      // One replica needs no transport: its baseline figures carry no communication overhead.
      if (n == 1) {
        comm = make_solo_communicator(options.comm);
      } else if (gpu) {
        comm = make_nccl_communicator(*backend, std::move(comm));
      }
      std::unique_ptr<EnergyProbe> probe =
          options.meter_energy ? open_own_gpu_probe(*backend, n) : nullptr;
      reports[static_cast<std::size_t>(rank)] =
          train_data_parallel(graph, *backend, *comm, data, config, probe.get());
    } catch (const std::exception& e) {
      int expected = -1;
      first_failure.compare_exchange_strong(expected, rank);
      group.abort("replica " + std::to_string(rank) + " failed: " + e.what());
      errors[static_cast<std::size_t>(rank)] = std::current_exception();
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  try {
    for (int r = 0; r < n; ++r) threads.emplace_back(replica, r);
  } catch (...) {  // a thread could not start: stop the ones that did before unwinding
    group.abort("could not start every replica thread");
    for (auto& t : threads) t.join();
    throw;
  }
  for (auto& t : threads) t.join();
  if (const int f = first_failure.load(); f >= 0)
    std::rethrow_exception(errors[static_cast<std::size_t>(f)]);
  return reports.front();
}

}  // namespace cnnergy::dist
