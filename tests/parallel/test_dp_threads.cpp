// Data-parallel training with N CPU replicas in one process (threads communicator): weights
// identical on every replica after every step, N replicas matching one process with the same global
// batch, the report's figures, gradient buckets, and failures (a replica that throws, one that
// stalls, replicas that run different models) ending with a clear error in bounded time.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/tensor_testing.hpp"
#include "core/errors.hpp"
#include "parallel/parallel_testing.hpp"
#include "net/solver.hpp"
#include "train/parallel/dp_internal.hpp"
#include "train/parallel/dp_trainer.hpp"
#include "train/parallel/grad_buckets.hpp"
#include "train/train_step.hpp"

namespace cnnergy::dist {
namespace {

using test::SeededTest;

class DataParallelThreads : public SeededTest {
 protected:
  DataParallelThreads()
      : graph_(build_model("lenet5")), data_(data::open_dataset(test::kLenetData)) {}

  DataParallelConfig config(std::int64_t per_replica, std::int64_t iters) const {
    DataParallelConfig c;
    c.per_replica_batch = per_replica;
    c.max_iterations_per_epoch = iters;
    c.warmup_iterations = 1;
    c.seed = seed_;
    c.loader_workers = 1;
    c.prefetch = 2;
    c.solver.schedule.base_lr = 0.002;
    c.solver.weight_decay = 5e-4;
    c.buckets.cap_bytes = 64 << 10;  // LeNet-5 then has three buckets
    return c;
  }
  static LocalRunOptions cpu(int replicas, double timeout_s = 120) {
    LocalRunOptions o;
    o.devices.assign(static_cast<std::size_t>(replicas), 0);
    o.meter_energy = false;
    o.comm.timeout_s = timeout_s;
    return o;
  }

  std::unique_ptr<Graph> graph_;
  data::DatasetSplits data_;
};

TEST_F(DataParallelThreads, WeightsAreIdenticalOnEveryReplicaAfterEveryStep) {
  const int n = 3;
  const std::int64_t steps = 6;
  std::mutex m;
  std::map<std::int64_t, std::vector<std::string>> sums;  // step -> checksum per rank
  DataParallelConfig c = config(4, steps);
  c.after_step = [&](int rank, std::int64_t step, Executor& ex) {
    const std::string s = weights_checksum(ex);
    std::lock_guard<std::mutex> lock(m);
    auto& v = sums[step];
    v.resize(n);
    v[static_cast<std::size_t>(rank)] = s;
  };
  const DataParallelReport r = run_local_data_parallel(*graph_, data_, cpu(n), c);
  ASSERT_EQ(sums.size(), static_cast<std::size_t>(steps));
  std::string previous;
  for (const auto& [step, v] : sums) {
    for (int k = 1; k < n; ++k)
      EXPECT_EQ(v[static_cast<std::size_t>(k)], v[0]) << "step " << step << " rank " << k;
    EXPECT_NE(v[0], previous) << "weights did not change at step " << step;
    previous = v[0];
  }
  EXPECT_EQ(r.weights_checksum, sums.rbegin()->second[0]);

  // The report: every rank, its figures, the buckets.
  EXPECT_EQ(r.comm_kind, "threads");
  EXPECT_EQ(r.world_size, n);
  EXPECT_EQ(r.global_batch, 4 * n);
  EXPECT_EQ(r.iterations, steps);
  EXPECT_EQ(r.timed_iterations, steps - 1);
  EXPECT_EQ(r.timed_samples, (steps - 1) * 4 * n);
  ASSERT_EQ(r.ranks.size(), static_cast<std::size_t>(n));
  for (const RankReport& k : r.ranks) {
    EXPECT_EQ(k.timed_iterations, steps - 1);
    ASSERT_TRUE(k.compute_ms && k.allreduce_ms && k.wait_ms && k.exposed_comm_ms);
    EXPECT_GT(*k.compute_ms, 0);
    EXPECT_GE(*k.allreduce_ms, 0);
    EXPECT_GE(*k.wait_ms, 0);
    // Host collectives never overlap compute.
    EXPECT_GE(*k.exposed_comm_ms, *k.allreduce_ms - 1e-9);
    EXPECT_GE(k.step_ms, *k.compute_ms);
    EXPECT_EQ(k.phase_ms.size(), 5u);
    EXPECT_FALSE(k.joules);
  }
  ASSERT_EQ(r.buckets.size(), 3u);
  std::size_t bucket_params = 0;
  for (std::size_t b = 0; b < r.buckets.size(); ++b) {
    bucket_params += r.buckets[b].num_parameters;
    if (b > 0) {
      EXPECT_LT(r.buckets[b].ready_layer, r.buckets[b - 1].ready_layer);  // deepest first
    }
  }
  EXPECT_EQ(bucket_params, 8u);  // weight and bias of conv1, conv2, ip1, ip2
  EXPECT_EQ(r.bucket_transfer_ms.size(), 3u);
  EXPECT_EQ(r.phase_names, dp_phase_names());
  EXPECT_FALSE(r.cuda_graph);
  EXPECT_EQ(r.graph_recordings, 0);
  ASSERT_EQ(r.epochs.size(), 1u);
  EXPECT_TRUE(std::isfinite(r.epochs[0].train_loss));
  ASSERT_TRUE(r.epochs[0].top1);
  EXPECT_EQ(r.epochs[0].eval_samples, 64);
  EXPECT_FALSE(r.total_joules);
  EXPECT_GT(r.samples_per_s, 0);
}

TEST_F(DataParallelThreads, TwoReplicasMatchOneProcessWithTheSameGlobalBatch) {
  test::ScratchDir dir("equiv");
  DataParallelConfig two = config(8, 5);
  two.evaluate = false;
  two.save_path = dir.file("two.ckpt");
  DataParallelConfig one = two;
  one.per_replica_batch = 16;
  one.save_path = dir.file("one.ckpt");
  DataParallelConfig none = one;  // the initial weights: one step at a learning rate of 1e-12
  none.max_iterations_per_epoch = 1;
  none.solver.schedule.base_lr = 1e-12;
  none.save_path = dir.file("init.ckpt");
  run_local_data_parallel(*graph_, data_, cpu(2), two);
  run_local_data_parallel(*graph_, data_, cpu(1), one);
  run_local_data_parallel(*graph_, data_, cpu(1), none);
  const auto a = test::checkpoint_weights(*graph_, two.save_path);
  const auto b = test::checkpoint_weights(*graph_, one.save_path);
  const auto init = test::checkpoint_weights(*graph_, none.save_path);
  // Training moved the weights well beyond rounding (the comparison means something) ...
  EXPECT_GT(test::max_change(b, init), 1e-3);
  // ... and the two runs moved them the same way: the difference between them is a small part of
  // the distance trained (see test::divergence_from for why not every weight matches to rounding).
  EXPECT_LE(test::divergence_from(a, b, init), 0.05)
      << "worst weight off by " << test::weight_mismatch(a, b, 1e-5, 1e-4) << "x (1e-5 + 1e-4 |w|)";
}

TEST_F(DataParallelThreads, BarrierWaitMethodAndNoOverlapGiveTheSameWeights) {
  DataParallelConfig c = config(4, 4);
  c.evaluate = false;
  const auto overlap = run_local_data_parallel(*graph_, data_, cpu(2), c);
  c.wait_method = WaitMethod::kBarrier;
  c.check_weights_every = 1;
  const auto barrier = run_local_data_parallel(*graph_, data_, cpu(2), c);
  EXPECT_EQ(overlap.weights_checksum, barrier.weights_checksum);
  EXPECT_EQ(barrier.wait_method, "barrier");
  for (const RankReport& k : barrier.ranks) EXPECT_GE(k.wait_ms.value_or(-1), 0);
}

TEST_F(DataParallelThreads, AReplicaThatFailsStopsTheOthersAtOnce) {
  DataParallelConfig c = config(4, 50);
  c.evaluate = false;
  c.after_step = [](int rank, std::int64_t step, Executor&) {
    if (rank == 1 && step == 2) throw DataError("injected: replica 1 lost its data");
  };
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run_local_data_parallel(*graph_, data_, cpu(3, 120), c);
    FAIL() << "expected the injected failure";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("injected"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0)
      << "the other replicas must not wait for the 120 s timeout";
}

TEST_F(DataParallelThreads, AStalledReplicaIsATimeoutError) {
  DataParallelConfig c = config(4, 50);
  c.evaluate = false;
  c.after_step = [](int rank, std::int64_t step, Executor&) {
    if (rank == 0 && step == 2) std::this_thread::sleep_for(std::chrono::seconds(3));
  };
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run_local_data_parallel(*graph_, data_, cpu(2, 0.5), c);
    FAIL() << "expected a timeout";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("never arrived"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
}

TEST_F(DataParallelThreads, ReplicasWithDifferentModelsRefuseToTrain) {
  auto other = build_model("lenet5", std::nullopt, 12);  // another class count
  ThreadGroup group(2, CommOptions{30});
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        auto backend = create_backend(BackendOptions{});
        auto comm = group.communicator(r);
        DataParallelConfig c = config(4, 2);
        train_data_parallel(r == 0 ? *graph_ : *other, *backend, *comm, data_, c, nullptr);
      } catch (const InvalidArgument& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = std::string("wrong error type: ") + e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    EXPECT_NE(e.find("ranks disagree"), std::string::npos) << e;
    EXPECT_NE(e.find("classes 12"), std::string::npos) << e;
  }
}

TEST_F(DataParallelThreads, ImpossibleBatchesAndDevices) {
  EXPECT_THROW(run_local_data_parallel(*graph_, data_, cpu(2), config(200, 1)),
               InvalidArgument);  // > data set
  EXPECT_THROW(run_local_data_parallel(*graph_, data_, cpu(2), config(0, 1)), InvalidArgument);
  EXPECT_THROW(run_local_data_parallel(*graph_, data_, cpu(0), config(4, 1)), InvalidArgument);
  LocalRunOptions gpus = cpu(1);
  gpus.backend.device = Device{DeviceKind::kCuda, 0};
  gpus.devices = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  if (cuda_device_count() < 17) {
    try {
      run_local_data_parallel(*graph_, data_, gpus, config(4, 1));
      FAIL() << "expected NotSupported";
    } catch (const NotSupported& e) {
      EXPECT_NE(std::string(e.what()).find("visible"), std::string::npos) << e.what();
    }
  }
  DataParallelConfig c = config(4, 1);
  c.expected_world_size = 3;
  EXPECT_THROW(run_local_data_parallel(*graph_, data_, cpu(2), c), InvalidArgument);
}

TEST_F(DataParallelThreads, BucketsRepointGradientsWithoutChangingThem) {
  auto backend = create_backend(BackendOptions{});
  ExecutorOptions eo;
  eo.batch_size = 4;
  Executor plain(*graph_, *backend, eo), bucketed(*graph_, *backend, eo);
  plain.initialize_parameters(seed_);
  bucketed.initialize_parameters(seed_);
  auto solo = make_solo_communicator(CommOptions{});
  BucketOptions bo;
  bo.cap_bytes = 1 << 10;  // every layer its own bucket
  GradientBuckets buckets(bucketed, *solo, bo);
  EXPECT_EQ(buckets.buckets().size(), 4u);
  std::set<const Buffer*> buffers;
  for (Parameter* p : bucketed.parameters()) {
    buffers.insert(p->grad.buffer().get());
    EXPECT_EQ(p->grad.offset_bytes() % 256, 0u) << p->name << " is not aligned in its bucket";
  }
  EXPECT_EQ(buffers.size(), 4u) << "each layer's gradients should live in its own bucket buffer";
  Tensor images = test::random_tensor(Shape{4, 1, 28, 28}, rng_);
  Tensor labels = Tensor::host(Shape{4}, DType::kI32);
  for (int i = 0; i < 4; ++i)
    labels.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng_.next_u32() % 10);
  for (Executor* ex : {&plain, &bucketed}) {
    ex->set_input(images, labels);
    ex->forward(Phase::kTrain);
  }
  plain.backward();
  buckets.begin_step();
  bucketed.backward();
  buckets.end_backward();
  buckets.harvest(true);
  EXPECT_EQ(buckets.timings().size(), 1u);
  const auto pa = plain.parameters(), pb = bucketed.parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const auto a = pa[i]->grad.f32(), b = pb[i]->grad.f32();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t k = 0; k < a.size(); ++k)
      ASSERT_EQ(a[k], b[k]) << pa[i]->name << "[" << k << "]";
  }
}

// --cuda-graph records the step as a CUDA graph: CPU replicas are refused up front (NotSupported,
// exit code 4) on every rank, and so is the barrier wait method, which exists to time every
// all-reduce apart (a replayed step is timed as a whole).
TEST_F(DataParallelThreads, CudaGraphIsRefusedOnCpuReplicasAndWithTheBarrier) {
  DataParallelConfig c = config(4, 2);
  c.cuda_graph = true;
  try {
    run_local_data_parallel(*graph_, data_, cpu(2), c);
    FAIL() << "expected NotSupported";
  } catch (const NotSupported& e) {
    EXPECT_EQ(e.exit_code(), 4);
    EXPECT_NE(std::string(e.what()).find("CUDA backend"), std::string::npos) << e.what();
  }
  c.wait_method = WaitMethod::kBarrier;
  try {
    run_local_data_parallel(*graph_, data_, cpu(2), c);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--wait-method barrier"), std::string::npos) << e.what();
  }
}

// TrainStep with the data-parallel hooks (what a recorded data-parallel step records) runs, kernel
// by kernel, exactly the step the eager loop writes out by hand: forward, arm the buckets, backward
// with the loss gradient divided by the replica count, launch the rest and join, update. Bit for
// bit on the CPU backend, with the hooks called once per step, in order.
TEST_F(DataParallelThreads, TrainStepWithDataParallelHooksIsTheHandWrittenStep) {
  auto backend = create_backend(BackendOptions{});
  ExecutorOptions eo;
  eo.batch_size = 4;
  Executor by_hand(*graph_, *backend, eo), by_step(*graph_, *backend, eo);
  by_hand.initialize_parameters(seed_);
  by_step.initialize_parameters(seed_);
  SolverOptions so;
  so.schedule.base_lr = 0.01;
  SgdSolver solver_a(by_hand, so), solver_b(by_step, so);
  auto solo_a = make_solo_communicator(CommOptions{});
  auto solo_b = make_solo_communicator(CommOptions{});
  BucketOptions bo;
  bo.cap_bytes = 64 << 10;
  GradientBuckets buckets_a(by_hand, *solo_a, bo), buckets_b(by_step, *solo_b, bo);
  std::string calls;
  StepHooks hooks;
  hooks.loss_scale_divisor = 3.0f;  // as for 3 replicas
  hooks.before_backward = [&] {
    calls += "B";
    buckets_b.begin_step();
  };
  hooks.after_backward = [&] {
    calls += "E";
    buckets_b.end_backward();
  };
  hooks.before_recording = [&] { calls += "R"; };  // never: nothing is recorded eagerly
  TrainStep step(by_step, solver_b, /*use_graph=*/false, hooks);
  Tensor images = test::random_tensor(Shape{4, 1, 28, 28}, rng_);
  Tensor labels = Tensor::host(Shape{4}, DType::kI32);
  for (int i = 0; i < 4; ++i)
    labels.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng_.next_u32() % 10);
  by_hand.set_input(images, labels);
  by_step.set_input(images, labels);
  for (int i = 0; i < 3; ++i) {
    by_hand.forward(Phase::kTrain);
    buckets_a.begin_step();
    by_hand.backward(solver_a.loss_scale() / 3.0f);
    buckets_a.end_backward();
    solver_a.step();
    step.run(0);
  }
  EXPECT_EQ(calls, "BEBEBE");
  EXPECT_FALSE(step.graphed());
  EXPECT_EQ(step.recordings(), 0);
  EXPECT_EQ(solver_b.iteration(), 3);
  EXPECT_EQ(weights_checksum(by_hand), weights_checksum(by_step));
  EXPECT_THROW(
      {
        TrainStep zero(by_step, solver_b, false, StepHooks{0.0f, {}, {}, {}});
        (void)zero;
      },
      InvalidArgument);
}

// Untimed buckets (a recorded step: events inside a capture cannot be read back) reduce the same
// gradients and keep no timings; the wait barrier, which exists to time, needs timed buckets.
TEST_F(DataParallelThreads, UntimedBucketsReduceTheSameGradientsAndKeepNoTimings) {
  auto backend = create_backend(BackendOptions{});
  ExecutorOptions eo;
  eo.batch_size = 4;
  Executor timed(*graph_, *backend, eo), untimed(*graph_, *backend, eo);
  timed.initialize_parameters(seed_);
  untimed.initialize_parameters(seed_);
  auto solo = make_solo_communicator(CommOptions{});
  BucketOptions bo;
  bo.cap_bytes = 1 << 10;
  GradientBuckets with_timing(timed, *solo, bo);
  bo.timed = false;
  GradientBuckets without_timing(untimed, *solo, bo);
  EXPECT_EQ(with_timing.buckets().size(), without_timing.buckets().size());
  Tensor images = test::random_tensor(Shape{4, 1, 28, 28}, rng_);
  Tensor labels = Tensor::host(Shape{4}, DType::kI32);
  for (int i = 0; i < 4; ++i)
    labels.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng_.next_u32() % 10);
  for (int step = 0; step < 2; ++step) {
    for (auto [ex, bk] : {std::pair{&timed, &with_timing}, std::pair{&untimed, &without_timing}}) {
      ex->set_input(images, labels);
      ex->forward(Phase::kTrain);
      bk->begin_step();
      ex->backward();
      bk->end_backward();
    }
  }
  with_timing.harvest(true);
  without_timing.harvest(true);
  EXPECT_EQ(with_timing.timings().size(), 2u);
  EXPECT_TRUE(without_timing.timings().empty());
  const auto pa = timed.parameters(), pb = untimed.parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const auto a = pa[i]->grad.f32(), b = pb[i]->grad.f32();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t k = 0; k < a.size(); ++k)
      ASSERT_EQ(a[k], b[k]) << pa[i]->name << "[" << k << "]";
  }
  Executor third(*graph_, *backend, eo);
  BucketOptions bad;
  bad.timed = false;
  bad.wait_barrier = true;
  EXPECT_THROW(
      {
        GradientBuckets refused(third, *solo, bad);
        (void)refused;
      },
      InvalidArgument);
}

// Figures a replayed graph does not measure travel between ranks as "not measured", not as zero.
TEST(DataParallelReportCodec, UnmeasuredFiguresStayEmptyAcrossRanks) {
  RankReport r;
  r.rank = 1;
  r.host = "node";
  r.device = "cuda:1 (test)";
  r.timed_iterations = 3;
  r.step_ms = 12.5;
  r.load_ms = 0.25;
  r.phase_ms = {Summary{}, Summary{}};
  const RankReport graphed = decode_rank_report(encode_rank_report(r));
  EXPECT_FALSE(graphed.compute_ms || graphed.allreduce_ms || graphed.wait_ms ||
               graphed.exposed_comm_ms);
  EXPECT_FALSE(graphed.wait_joules);
  EXPECT_EQ(graphed.step_ms, 12.5);
  EXPECT_EQ(graphed.phase_ms.size(), 2u);
  r.compute_ms = 1.0 / 3.0;
  r.allreduce_ms = 0.0;
  r.wait_ms = 2.0;
  r.exposed_comm_ms = 0.5;
  const RankReport eager = decode_rank_report(encode_rank_report(r));
  ASSERT_TRUE(eager.compute_ms && eager.allreduce_ms && eager.wait_ms && eager.exposed_comm_ms);
  EXPECT_EQ(*eager.compute_ms, 1.0 / 3.0);  // exact round trip
  EXPECT_EQ(*eager.allreduce_ms, 0.0);
  EXPECT_EQ(*eager.wait_ms, 2.0);
  EXPECT_EQ(*eager.exposed_comm_ms, 0.5);
}

}  // namespace
}  // namespace cnnergy::dist
