// GPU data parallelism in one process (one thread per GPU, NCCL): all-reduce of every dtype across
// GPUs, LeNet-5 weights identical on both GPUs after every step and matching one GPU with the same
// global batch, fp16 replicas staying identical, per-GPU energy summed (never one GPU times N), and
// a stalled replica becoming a timeout error; the same with every step replayed as a CUDA graph
// (--cuda-graph), whose weights must equal the eager data-parallel run's. Every test skips without
// two GPUs.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "common/tensor_testing.hpp"
#include "core/errors.hpp"
#include "parallel/parallel_testing.hpp"
#include "train/parallel/dp_trainer.hpp"
#include "train/parallel/nccl_comm.hpp"
#include "train/precision.hpp"

namespace cnnergy::dist {
namespace {

using test::SeededTest;

class NcclDist : public SeededTest {
 protected:
  void SetUp() override {
    if (!nccl_built()) GTEST_SKIP() << "built without NCCL";
    if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs";
    graph_ = build_model("lenet5");
    data_ = data::open_dataset(test::kLenetData);
  }
  static LocalRunOptions gpus(int n, Precision precision = Precision::kFp32,
                              double timeout_s = 120) {
    LocalRunOptions o;
    o.backend.device = Device{DeviceKind::kCuda, 0};
    apply_precision(precision, o.backend);
    o.backend.conv_epilogue_fusion = false;  // the plain convolutions these tests were written for
    o.backend.conv_space_to_depth = false;
    for (int i = 0; i < n; ++i) o.devices.push_back(i);
    o.meter_energy = true;
    o.comm.timeout_s = timeout_s;
    return o;
  }
  DataParallelConfig config(std::int64_t per_replica, std::int64_t iters,
                            DType dtype = DType::kF32) const {
    DataParallelConfig c;
    c.per_replica_batch = per_replica;
    c.max_iterations_per_epoch = iters;
    c.warmup_iterations = 1;
    c.seed = seed_;
    c.loader_workers = 1;
    c.solver.schedule.base_lr = 0.002;
    c.solver.loss_scale = SolverOptions::loss_scale_for(dtype);
    c.buckets.cap_bytes = 64 << 10;
    return c;
  }

  std::unique_ptr<Graph> graph_;
  data::DatasetSplits data_;
};

TEST_F(NcclDist, AllReduceOfEveryDtypeAcrossGpus) {
  ThreadGroup group(2, CommOptions{60});
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        BackendOptions bo;
        bo.device = Device{DeviceKind::kCuda, r};
        auto backend = create_backend(bo);
        auto comm = make_nccl_communicator(*backend, group.communicator(r));
        for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32}) {
          Tensor host = Tensor::host(Shape{4099});
          for (std::size_t i = 0; i < 4099; ++i)
            host.f32()[i] = static_cast<float>((i % 13) + 3 * r);
          Tensor dev = backend->alloc(Shape{4099}, dt);
          Tensor typed = dt == DType::kI32 ? Tensor::host(Shape{4099}, DType::kI32)
                                           : from_f32_nchw(host, dt, Layout::kNCHW);
          if (dt == DType::kI32)
            for (std::size_t i = 0; i < 4099; ++i)
              typed.data<std::int32_t>()[i] = static_cast<std::int32_t>(host.f32()[i]);
          backend->upload(typed, dev);
          comm->wait_for_compute();
          comm->all_reduce_sum(dev);
          comm->compute_wait_for_comm();
          comm->synchronize();
          Tensor back = Tensor::host(Shape{4099}, dt);
          backend->download(dev, back);
          for (std::size_t i = 0; i < 4099; ++i) {
            const float want = static_cast<float>(2 * (i % 13) + 3);
            const float got = dt == DType::kI32 ? static_cast<float>(back.data<std::int32_t>()[i])
                                                : to_f32_nchw(back).f32()[i];
            if (got != want) {
              errors[static_cast<std::size_t>(r)] =
                  std::string(dtype_name(dt)) + " element " + std::to_string(i);
              return;
            }
          }
        }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
        group.abort(e.what());
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

TEST_F(NcclDist, WeightsIdenticalEveryStepAndEqualToOneGpu) {
  test::ScratchDir dir("nccl");
  std::mutex m;
  std::map<std::int64_t, std::vector<std::string>> sums;
  DataParallelConfig two = config(8, 6);
  two.save_path = dir.file("two.ckpt");
  two.after_step = [&](int rank, std::int64_t step, Executor& ex) {
    const std::string s = weights_checksum(ex);
    std::lock_guard<std::mutex> lock(m);
    sums[step].resize(2);
    sums[step][static_cast<std::size_t>(rank)] = s;
  };
  const DataParallelReport r = run_local_data_parallel(*graph_, data_, gpus(2), two);
  ASSERT_EQ(sums.size(), 6u);
  for (const auto& [step, v] : sums) EXPECT_EQ(v[0], v[1]) << "step " << step;
  EXPECT_EQ(r.comm_kind, "nccl");
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_NE(r.ranks[0].device, r.ranks[1].device);
  if (r.total_joules) {  // every GPU metered and summed, never one GPU times two
    EXPECT_NEAR(*r.total_joules, *r.ranks[0].joules + *r.ranks[1].joules, 1e-9);
    ASSERT_EQ(r.nodes.size(), 1u);
    EXPECT_EQ(r.nodes[0].ranks, 2);
  }
  DataParallelConfig one = config(16, 6);
  one.save_path = dir.file("one.ckpt");
  run_local_data_parallel(*graph_, data_, gpus(1), one);
  EXPECT_LE(test::weight_mismatch(test::checkpoint_weights(*graph_, two.save_path),
                                  test::checkpoint_weights(*graph_, one.save_path), 1e-4, 1e-3),
            1.0);
}

TEST_F(NcclDist, Fp16ReplicasStayIdentical) {
  DataParallelConfig c = config(8, 5, DType::kF16);
  c.check_weights_every = 1;  // throws InternalError on divergence
  const DataParallelReport r =
      run_local_data_parallel(*graph_, data_, gpus(2, Precision::kFp16), c);
  EXPECT_EQ(r.weights_checksum.size(), 16u);
  for (const BucketInfo& b : r.buckets)
    EXPECT_TRUE(b.dtype == DType::kF16 || b.dtype == DType::kF32);
}

TEST_F(NcclDist, AStalledGpuReplicaIsATimeoutError) {
  DataParallelConfig c = config(8, 50);
  c.evaluate = false;
  c.after_step = [](int rank, std::int64_t step, Executor&) {
    if (rank == 1 && step == 2) std::this_thread::sleep_for(std::chrono::seconds(4));
  };
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(run_local_data_parallel(*graph_, data_, gpus(2, Precision::kFp32, 1.0), c),
               DeviceError);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
}

// --cuda-graph: each replica replays forward, backward with the bucket all-reduces (on the
// communication stream, forked and joined inside the recording) and the update. Weights stay
// identical on both GPUs after every step, and equal the eager data-parallel run's within the
// tolerance that run keeps against one GPU (WeightsIdenticalEveryStepAndEqualToOneGpu). Both input
// paths: the loader's two input slots (a recording each) and --fixed-batch (one).
TEST_F(NcclDist, GraphedStepsKeepReplicasIdenticalAndEqualTheEagerRun) {
  for (const bool fixed : {false, true}) {
    SCOPED_TRACE(fixed ? "fixed batch" : "loader");
    test::ScratchDir dir("nccl_graph");
    std::mutex m;
    std::map<std::int64_t, std::vector<std::string>> sums;
    DataParallelConfig graphed = config(8, 6);
    graphed.fixed_batch = fixed;
    graphed.cuda_graph = true;
    graphed.save_path = dir.file("graphed.ckpt");
    graphed.after_step = [&](int rank, std::int64_t step, Executor& ex) {
      const std::string s = weights_checksum(ex);
      std::lock_guard<std::mutex> lock(m);
      sums[step].resize(2);
      sums[step][static_cast<std::size_t>(rank)] = s;
    };
    const DataParallelReport g = run_local_data_parallel(*graph_, data_, gpus(2), graphed);
    ASSERT_EQ(sums.size(), 6u);
    for (const auto& [step, v] : sums) EXPECT_EQ(v[0], v[1]) << "step " << step;
    EXPECT_TRUE(g.cuda_graph);
    EXPECT_EQ(g.comm_kind, "nccl");
    // The first step runs eagerly; then one recording per input slot (the learning rate is fixed).
    EXPECT_EQ(g.graph_recordings, fixed ? 1 : 2);
    EXPECT_EQ(g.phase_names, dp_graph_phase_names());
    EXPECT_TRUE(g.bucket_transfer_ms.empty()) << "per-bucket times are not measured in graph mode";
    ASSERT_EQ(g.ranks.size(), 2u);
    for (const RankReport& k : g.ranks) {
      EXPECT_EQ(k.phase_ms.size(), 2u);
      EXPECT_FALSE(k.compute_ms || k.allreduce_ms || k.wait_ms || k.exposed_comm_ms);
      EXPECT_FALSE(k.wait_joules);
      EXPECT_GT(k.step_ms, 0);
      EXPECT_EQ(k.timed_iterations, 5);
    }

    DataParallelConfig eager = graphed;
    eager.cuda_graph = false;
    eager.after_step = nullptr;
    eager.save_path = dir.file("eager.ckpt");
    const DataParallelReport e = run_local_data_parallel(*graph_, data_, gpus(2), eager);
    EXPECT_FALSE(e.cuda_graph);
    EXPECT_LE(test::weight_mismatch(test::checkpoint_weights(*graph_, graphed.save_path),
                                    test::checkpoint_weights(*graph_, eager.save_path), 1e-4, 1e-3),
              1.0);
  }
}

// fp16 with dynamic loss scaling, graphed: a recording is redone when the scale changes (an
// overflow at the start scale of 65536 is likely within a few steps), and the replicas stay
// identical after every step (check_weights_every = 1 throws otherwise).
TEST_F(NcclDist, GraphedFp16ReplicasStayIdentical) {
  DataParallelConfig c = config(8, 6, DType::kF16);
  c.cuda_graph = true;
  c.fixed_batch = true;
  c.check_weights_every = 1;
  const DataParallelReport r =
      run_local_data_parallel(*graph_, data_, gpus(2, Precision::kFp16), c);
  EXPECT_TRUE(r.cuda_graph);
  EXPECT_GE(r.graph_recordings, 1);
  EXPECT_EQ(r.weights_checksum.size(), 16u);
}

// A replica that stalls while the other replays its graph (whose all-reduce then waits for the
// stalled peer inside the graph) is still a timeout error in bounded time, not a hang: the bounded
// waits cover the compute stream in graph mode, and the failing rank aborts NCCL before its
// recordings are destroyed (which waits for their replays).
TEST_F(NcclDist, AStalledReplicaIsATimeoutErrorWithCudaGraphs) {
  DataParallelConfig c = config(8, 50);
  c.evaluate = false;
  c.fixed_batch = true;
  c.cuda_graph = true;
  c.after_step = [](int rank, std::int64_t step, Executor&) {
    if (rank == 1 && step == 3) std::this_thread::sleep_for(std::chrono::seconds(4));
  };
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(run_local_data_parallel(*graph_, data_, gpus(2, Precision::kFp32, 1.0), c),
               DeviceError);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
}

// The one-GPU baseline of a graphed run (--compare-single) runs graphed too, with no transport.
TEST_F(NcclDist, OneGraphedReplicaNeedsNoTransport) {
  DataParallelConfig c = config(16, 4);
  c.cuda_graph = true;
  c.fixed_batch = true;
  const DataParallelReport r = run_local_data_parallel(*graph_, data_, gpus(1), c);
  EXPECT_TRUE(r.cuda_graph);
  EXPECT_EQ(r.world_size, 1);
  EXPECT_EQ(r.graph_recordings, 1);
}

}  // namespace
}  // namespace cnnergy::dist
