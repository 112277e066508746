// The program test_parallel_mpi starts under mpirun. Modes:
//   parallel_worker cli ARGS...        runs `cnnergy dist-train ARGS` (the command itself, independent
//   of
//                                  the CLI's command table) with main()'s error handling
//   parallel_worker fault die|stall RANK STEP TIMEOUT_S
//                                  trains LeNet-5 on synthetic data over MPI; after step STEP, rank
//                                  RANK dies (exit 9 without MPI_Finalize) or stalls (sleeps)
//   parallel_worker selftest           MPI collectives of every dtype against their expected values
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "cli/cmd_dist_train.hpp"
#include "core/errors.hpp"
#include "data/dataset.hpp"
#include "net/graph.hpp"
#include "net/zoo/zoo.hpp"
#include "train/parallel/dp_trainer.hpp"
#include "train/parallel/mpi_comm.hpp"

namespace {

using namespace cnnergy;
using namespace cnnergy::dist;

int fault(const std::string& kind, int fault_rank, std::int64_t fault_step, double timeout_s) {
  MpiSession session;
  auto comm = session.communicator(CommOptions{timeout_s});
  try {
    auto graph = build_model("lenet5");
    const auto data = data::open_dataset("synthetic:1x28x28:classes=10:size=2048");
    auto backend = create_backend(BackendOptions{});
    DataParallelConfig c;
    c.per_replica_batch = 4;
    c.warmup_iterations = 0;
    c.evaluate = false;
    c.loader_workers = 1;
    c.after_step = [&](int rank, std::int64_t step, Executor&) {
      if (rank != fault_rank || step != fault_step) return;
      std::fprintf(stderr, "parallel_worker: rank %d %s after step %lld\n", rank,
                   kind == "die" ? "dies" : "stalls", static_cast<long long>(step));
      std::fflush(stderr);
      if (kind == "die") std::_Exit(9);
      std::this_thread::sleep_for(std::chrono::seconds(600));
    };
    train_data_parallel(*graph, *backend, *comm, data, c, nullptr);
    std::printf("rank %d finished without noticing the fault\n", comm->rank());
    return 0;
  } catch (const Error& e) {
    comm->abort(e.what());
    session.abandon();
    std::fprintf(stderr, "parallel_worker: rank %d: error: %s\n", comm->rank(), e.what());
    return e.exit_code();
  }
}

int selftest() {
  MpiSession session;
  auto comm = session.communicator(CommOptions{60});
  const int rank = comm->rank(), n = comm->size();
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      ++failures;
      std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
    }
  };
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32}) {
    Tensor t = Tensor::host(Shape{1000}, dt);
    for (int i = 0; i < 1000; ++i) {
      const float v = static_cast<float>((i % 7) + rank);  // small integers: exact in every dtype
      if (dt == DType::kF32) t.data<float>()[i] = v;
      if (dt == DType::kF16) t.data<std::uint16_t>()[i] = float_to_half_bits(v);
      if (dt == DType::kBF16) t.data<std::uint16_t>()[i] = float_to_bf16_bits(v);
      if (dt == DType::kI32) t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v);
    }
    comm->all_reduce_sum(t);
    const Tensor f = dt == DType::kI32 ? Tensor() : to_f32_nchw(t);
    for (int i = 0; i < 1000; ++i) {
      const float want = static_cast<float>(n * (i % 7) + n * (n - 1) / 2);
      const float got = dt == DType::kI32 ? static_cast<float>(t.data<std::int32_t>()[i])
                                          : f.f32()[static_cast<std::size_t>(i)];
      if (got != want) {
        expect(false, std::string(dtype_name(dt)) + " element " + std::to_string(i) + ": " +
                          std::to_string(got) + " != " + std::to_string(want));
        break;
      }
    }
  }
  Tensor b = Tensor::host(Shape{5});
  for (int i = 0; i < 5; ++i)
    b.f32()[static_cast<std::size_t>(i)] = static_cast<float>(rank * 10 + i);
  comm->broadcast(b, n - 1);
  expect(b.f32()[3] == static_cast<float>((n - 1) * 10 + 3), "broadcast");
  const auto all = comm->all_gather("rank" + std::to_string(rank));
  expect(static_cast<int>(all.size()) == n && all.back() == "rank" + std::to_string(n - 1),
         "all_gather");
  comm->barrier();
  if (failures == 0) std::printf("rank %d: selftest ok\n", rank);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (!args.empty() && args[0] == "cli")
      return cnnergy::cli::run_dist_train({args.begin() + 1, args.end()});
    if (args.size() == 5 && args[0] == "fault")
      return fault(args[1], std::stoi(args[2]), std::stoll(args[3]), std::stod(args[4]));
    if (args.size() == 1 && args[0] == "selftest") return selftest();
    std::fprintf(
        stderr,
        "usage: parallel_worker cli ARGS... | fault die|stall RANK STEP TIMEOUT_S | selftest\n");
    return 2;
  } catch (const cnnergy::Error& e) {
    std::fprintf(stderr, "cnnergy: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cnnergy: internal error: %s\n", e.what());
    return 1;
  }
}
