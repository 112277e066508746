// The threads communicator (sums of every dtype bit-identical on all ranks, broadcast, all-gather,
// timeouts and aborts that wake blocked peers), the agreement check, the solo communicator and the
// epoch sharding of data sets.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <set>
#include <thread>

#include "common/tensor_testing.hpp"
#include "core/errors.hpp"
#include "data/synthetic.hpp"
#include "train/parallel/communicator.hpp"
#include "train/parallel/sharding.hpp"

namespace cnnergy::dist {
namespace {

using test::SeededTest;

// Runs fn(rank, comm) on `n` threads of one group; returns the exception of each rank (or null).
std::vector<std::exception_ptr> run_group(int n, double timeout_s,
                                          const std::function<void(int, Communicator&)>& fn) {
  ThreadGroup group(n, CommOptions{timeout_s});
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < n; ++r) comms.push_back(group.communicator(r));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r, *comms[static_cast<std::size_t>(r)]);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
        comms[static_cast<std::size_t>(r)]->abort("rank " + std::to_string(r) + " failed");
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

void expect_no_errors(const std::vector<std::exception_ptr>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
  }
}

class ThreadCommTest : public SeededTest {};

TEST_F(ThreadCommTest, AllReduceFp32IsTheRankOrderSumOnEveryRank) {
  const int n = 3;
  const std::int64_t count = 1000 + static_cast<std::int64_t>(rng_.next_u32() % 100);
  std::vector<Tensor> inputs, outputs;
  for (int r = 0; r < n; ++r) {
    inputs.push_back(test::random_tensor(Shape{count}, rng_, -10.0f, 10.0f));
    Tensor copy = Tensor::host(Shape{count});
    std::copy(inputs.back().f32().begin(), inputs.back().f32().end(), copy.f32().begin());
    outputs.push_back(copy);
  }
  expect_no_errors(run_group(n, 30, [&](int r, Communicator& c) {
    c.all_reduce_sum(outputs[static_cast<std::size_t>(r)]);
  }));
  for (std::int64_t i = 0; i < count; ++i) {
    float expect = 0.0f;
    for (int r = 0; r < n; ++r)
      expect += inputs[static_cast<std::size_t>(r)].f32()[static_cast<std::size_t>(i)];
    for (int r = 0; r < n; ++r)
      ASSERT_EQ(outputs[static_cast<std::size_t>(r)].f32()[static_cast<std::size_t>(i)], expect)
          << "element " << i;
  }
}

TEST_F(ThreadCommTest, AllReduceHalfTypesAndInt32) {
  const int n = 2;
  const std::int64_t count = 257;
  for (DType dt : {DType::kF16, DType::kBF16, DType::kI32}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    std::vector<Tensor> t;
    std::vector<std::vector<float>> vals(n);
    for (int r = 0; r < n; ++r) {
      Tensor x = Tensor::host(Shape{count}, dt);
      for (std::int64_t i = 0; i < count; ++i) {
        const float v = dt == DType::kI32
                            ? static_cast<float>(static_cast<int>(rng_.next_u32() % 2000) - 1000)
                            : rng_.uniform(-4.0f, 4.0f);
        const auto k = static_cast<std::size_t>(i);
        if (dt == DType::kF16) {
          x.data<std::uint16_t>()[k] = float_to_half_bits(v);
          vals[static_cast<std::size_t>(r)].push_back(
              half_bits_to_float(x.data<std::uint16_t>()[k]));
        } else if (dt == DType::kBF16) {
          x.data<std::uint16_t>()[k] = float_to_bf16_bits(v);
          vals[static_cast<std::size_t>(r)].push_back(
              bf16_bits_to_float(x.data<std::uint16_t>()[k]));
        } else {
          x.data<std::int32_t>()[k] = static_cast<std::int32_t>(v);
          vals[static_cast<std::size_t>(r)].push_back(v);
        }
      }
      t.push_back(x);
    }
    expect_no_errors(run_group(
        n, 30, [&](int r, Communicator& c) { c.all_reduce_sum(t[static_cast<std::size_t>(r)]); }));
    for (std::int64_t i = 0; i < count; ++i) {
      const auto k = static_cast<std::size_t>(i);
      const float sum = vals[0][k] + vals[1][k];
      for (int r = 0; r < n; ++r) {
        const Tensor& x = t[static_cast<std::size_t>(r)];
        if (dt == DType::kF16) {
          ASSERT_EQ(x.data<std::uint16_t>()[k], float_to_half_bits(sum));
        } else if (dt == DType::kBF16) {
          ASSERT_EQ(x.data<std::uint16_t>()[k], float_to_bf16_bits(sum));
        } else {
          ASSERT_EQ(x.data<std::int32_t>()[k], static_cast<std::int32_t>(sum));
        }
      }
    }
  }
}

TEST_F(ThreadCommTest, BroadcastAllGatherAndHostSum) {
  const int n = 4;
  const int root = static_cast<int>(rng_.next_u32() % n);
  std::vector<Tensor> t;
  for (int r = 0; r < n; ++r) t.push_back(test::random_tensor(Shape{33}, rng_));
  const std::vector<float> expect(t[static_cast<std::size_t>(root)].f32().begin(),
                                  t[static_cast<std::size_t>(root)].f32().end());
  std::vector<std::vector<std::string>> gathered(n);
  std::vector<double> sums(n);
  expect_no_errors(run_group(n, 30, [&](int r, Communicator& c) {
    c.broadcast(t[static_cast<std::size_t>(r)], root);
    gathered[static_cast<std::size_t>(r)] =
        c.all_gather("r" + std::to_string(r) + std::string(static_cast<std::size_t>(r), 'x'));
    sums[static_cast<std::size_t>(r)] = all_reduce_host_sum(c, 0.5 + r);
    c.barrier();
  }));
  for (int r = 0; r < n; ++r) {
    const auto f = t[static_cast<std::size_t>(r)].f32();
    EXPECT_TRUE(std::equal(f.begin(), f.end(), expect.begin())) << "rank " << r;
    ASSERT_EQ(gathered[static_cast<std::size_t>(r)].size(), static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q)
      EXPECT_EQ(gathered[static_cast<std::size_t>(r)][static_cast<std::size_t>(q)],
                "r" + std::to_string(q) + std::string(static_cast<std::size_t>(q), 'x'));
    EXPECT_DOUBLE_EQ(sums[static_cast<std::size_t>(r)], 0.5 * n + n * (n - 1) / 2.0);
  }
}

TEST(ThreadComm, MissingPeerTimesOutAndFailsTheGroup) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = run_group(2, 0.3, [](int r, Communicator& c) {
    if (r == 0) c.barrier();  // rank 1 never comes
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(errors[0]);
  EXPECT_FALSE(errors[1]);
  try {
    std::rethrow_exception(errors[0]);
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("never arrived"), std::string::npos) << e.what();
  }
  EXPECT_LT(s, 5.0);
}

TEST(ThreadComm, AFailingRankWakesItsBlockedPeersAtOnce) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = run_group(3, 60.0, [](int r, Communicator& c) {
    if (r == 2) throw InvalidArgument("injected failure");
    c.barrier();
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 10.0) << "peers should not wait for the 60 s timeout";
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[static_cast<std::size_t>(r)]);
    try {
      std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 2 failed"), std::string::npos) << e.what();
    }
  }
}

TEST(ThreadComm, MismatchedTensorsAreAnErrorOnEveryRank) {
  const auto errors = run_group(2, 30, [](int r, Communicator& c) {
    Tensor t = Tensor::host(Shape{r == 0 ? 10 : 12});
    c.all_reduce_sum(t);
  });
  for (const auto& e : errors) {
    ASSERT_TRUE(e);
    try {
      std::rethrow_exception(e);
    } catch (const DeviceError& d) {
      EXPECT_NE(std::string(d.what()).find("different tensors"), std::string::npos) << d.what();
    }
  }
}

TEST(ThreadComm, AgreeNamesTheRankThatDiffers) {
  const auto errors = run_group(
      3, 30, [](int r, Communicator& c) { agree(c, "model", r == 2 ? "alexnet" : "lenet5"); });
  for (const auto& e : errors) {
    ASSERT_TRUE(e);
    try {
      std::rethrow_exception(e);
    } catch (const InvalidArgument& ia) {
      const std::string w = ia.what();
      EXPECT_NE(w.find("rank 2 has 'alexnet'"), std::string::npos) << w;
    }
  }
  expect_no_errors(run_group(3, 30, [](int, Communicator& c) { agree(c, "model", "lenet5"); }));
}

TEST(ThreadComm, BadArgumentsAndSolo) {
  EXPECT_THROW(ThreadGroup(0, CommOptions{}), InvalidArgument);
  EXPECT_THROW(ThreadGroup(2, CommOptions{0.0}), InvalidArgument);
  ThreadGroup g(2, CommOptions{});
  auto c0 = g.communicator(0);
  EXPECT_THROW(g.communicator(0), InvalidArgument);
  EXPECT_THROW(g.communicator(2), InvalidArgument);
  auto solo = make_solo_communicator(CommOptions{});
  Tensor t = Tensor::host(Shape{3});
  t.f32()[1] = 2.5f;
  solo->all_reduce_sum(t);
  EXPECT_EQ(t.f32()[1], 2.5f);
  EXPECT_EQ(solo->all_gather("x"), std::vector<std::string>{"x"});
  EXPECT_EQ(solo->size(), 1);
}

class ShardingTest : public SeededTest {};

TEST_F(ShardingTest, PermutationsAreSeededAndShardsPartitionEachGlobalBatch) {
  const std::int64_t size = 200 + static_cast<std::int64_t>(rng_.next_u32() % 50);
  const auto p0 = epoch_permutation(size, seed_, 0);
  EXPECT_EQ(p0, epoch_permutation(size, seed_, 0));
  EXPECT_NE(p0, epoch_permutation(size, seed_, 1));
  std::set<std::int64_t> all(p0.begin(), p0.end());
  ASSERT_EQ(static_cast<std::int64_t>(all.size()), size);
  EXPECT_EQ(*all.begin(), 0);
  EXPECT_EQ(*all.rbegin(), size - 1);

  data::SyntheticOptions so;
  so.sample_shape = Shape{1, 4, 4};
  so.size = size;
  so.num_classes = 3;
  auto full = data::make_synthetic(so);
  const int world = 3;
  const std::int64_t b = 5, batches = size / (b * world);
  std::vector<std::int64_t> seen;
  std::vector<std::shared_ptr<const data::Dataset>> shards;
  for (int r = 0; r < world; ++r)
    shards.push_back(epoch_shard(full, seed_, 2, r, world, b, batches));
  const auto perm = epoch_permutation(size, seed_, 2);
  // Global batch j, in rank order, is exactly slice j of the epoch permutation (what one process
  // with batch b * world trains on), so the labels of the shards line up with it.
  for (std::int64_t j = 0; j < batches; ++j) {
    for (int r = 0; r < world; ++r) {
      std::vector<std::int64_t> idx;
      for (std::int64_t k = 0; k < b; ++k) idx.push_back(j * b + k);
      std::vector<float> img(static_cast<std::size_t>(b * 16));
      std::vector<std::int32_t> lab(static_cast<std::size_t>(b));
      shards[static_cast<std::size_t>(r)]->fill(idx, data::Augmentation{}, img, lab);
      std::vector<std::int64_t> ref_idx;
      for (std::int64_t k = 0; k < b; ++k)
        ref_idx.push_back(perm[static_cast<std::size_t>(j * b * world + r * b + k)]);
      std::vector<float> ref_img(img.size());
      std::vector<std::int32_t> ref_lab(lab.size());
      full->fill(ref_idx, data::Augmentation{}, ref_img, ref_lab);
      ASSERT_EQ(img, ref_img);
      ASSERT_EQ(lab, ref_lab);
    }
  }
  EXPECT_THROW(epoch_shard(full, seed_, 0, 0, world, b, batches + 100), InvalidArgument);
  EXPECT_THROW(epoch_shard(full, seed_, 0, 3, world, b, 1), InvalidArgument);
  auto s1 = strided_shard(full, 1, 4);
  ASSERT_TRUE(s1);
  EXPECT_EQ(s1->size(), (size - 1 + 3) / 4);
}

}  // namespace
}  // namespace cnnergy::dist
