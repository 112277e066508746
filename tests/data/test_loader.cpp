// The prefetching loader: every index once per epoch, per-epoch shuffling, real overlap of loading
// with consuming, worker exceptions re-thrown in next(), buffer recycling, and a destructor that
// neither hangs with batches pending nor frees memory a batch still uses.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <set>
#include <thread>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"

using namespace cnnergy;
using namespace cnnergy::data;
using namespace std::chrono_literals;

namespace {

// Sample i is the 2x3x3 image filled with i, labelled i % 7. Filling a batch can be made slow, and
// a chosen index can be made to fail.
class IndexDataset final : public Dataset {
 public:
  explicit IndexDataset(std::int64_t n, std::chrono::milliseconds fill_delay = 0ms,
                        std::int64_t failing_index = -1)
      : n_(n), delay_(fill_delay), failing_(failing_index) {}
  std::string name() const override { return "index"; }
  std::int64_t size() const override { return n_; }
  Shape sample_shape() const override { return {2, 3, 3}; }
  std::int64_t num_classes() const override { return 7; }
  mutable std::atomic<int> fills{0};

 protected:
  void fill_checked(std::span<const std::int64_t> indices, const Augmentation&,
                    std::span<float> images, std::span<std::int32_t> labels) const override {
    ++fills;
    if (delay_ > 0ms) std::this_thread::sleep_for(delay_);
    for (std::size_t i = 0; i < indices.size(); ++i) {
      if (indices[i] == failing_)
        throw DataError("sample " + std::to_string(failing_) + " is unreadable");
      for (std::size_t k = 0; k < 18; ++k) images[i * 18 + k] = static_cast<float>(indices[i]);
      labels[i] = static_cast<std::int32_t>(indices[i] % 7);
    }
  }

 private:
  std::int64_t n_;
  std::chrono::milliseconds delay_;
  std::int64_t failing_;
};

HostAllocator host_allocator() {
  return [](std::size_t bytes) { return allocate_host_buffer(bytes); };
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

std::vector<std::int64_t> epoch_order(std::uint64_t seed, bool shuffle, std::int64_t epochs) {
  LoaderOptions o;
  o.batch_size = 8;
  o.seed = seed;
  o.shuffle = shuffle;
  o.epochs = epochs;
  o.drop_last = false;
  DataLoader loader(std::make_shared<IndexDataset>(30), o, host_allocator());
  std::vector<std::int64_t> order;
  while (auto b = loader.next()) order.insert(order.end(), b->indices.begin(), b->indices.end());
  return order;
}

}  // namespace

TEST(DataLoader, EveryIndexExactlyOncePerEpochWithMatchingContent) {
  const std::uint64_t seed = default_seed();
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(seed));
  for (const bool drop_last : {false, true}) {
    LoaderOptions o;
    o.batch_size = 10;
    o.drop_last = drop_last;
    o.workers = 3;
    o.prefetch = 2;
    o.epochs = 3;
    o.seed = seed;
    const auto ds = std::make_shared<IndexDataset>(103);
    DataLoader loader(ds, o, host_allocator());
    ASSERT_EQ(loader.batches_per_epoch(), drop_last ? 10 : 11);
    std::vector<std::multiset<std::int64_t>> seen(3);
    std::int64_t batches = 0;
    while (auto batch = loader.next()) {
      ASSERT_LT(batch->epoch, 3);
      EXPECT_EQ(batch->index_in_epoch, batches % loader.batches_per_epoch());
      EXPECT_EQ(batch->last_in_epoch, batch->index_in_epoch == loader.batches_per_epoch() - 1);
      const std::int64_t expected_size = (!drop_last && batch->last_in_epoch) ? 3 : 10;
      ASSERT_EQ(batch->size(), expected_size);
      ASSERT_EQ(batch->images.shape(), (Shape{expected_size, 2, 3, 3}));
      ASSERT_EQ(batch->labels.dtype(), DType::kI32);
      const std::span<const float> images = batch->images.f32();
      const auto* labels = batch->labels.data<std::int32_t>();
      for (std::int64_t i = 0; i < batch->size(); ++i) {
        const std::int64_t index = batch->indices[static_cast<std::size_t>(i)];
        ASSERT_EQ(images[static_cast<std::size_t>(i) * 18 + 17], static_cast<float>(index));
        ASSERT_EQ(labels[i], index % 7);
        seen[static_cast<std::size_t>(batch->epoch)].insert(index);
      }
      ++batches;
    }
    EXPECT_EQ(batches, 3 * loader.batches_per_epoch());
    EXPECT_FALSE(loader.next().has_value());
    for (const auto& epoch : seen) {
      EXPECT_EQ(epoch.size(), drop_last ? 100u : 103u);
      EXPECT_EQ(std::set<std::int64_t>(epoch.begin(), epoch.end()).size(), epoch.size())
          << "an index repeated";
    }
    const LoaderStats stats = loader.stats();
    EXPECT_EQ(stats.batches, batches);
    EXPECT_EQ(stats.samples, drop_last ? 300 : 309);
    EXPECT_GE(stats.batches_filled, batches);
  }
}

TEST(DataLoader, ShufflesDifferentlyEachEpochAndReproduciblyPerSeed) {
  const std::uint64_t seed = default_seed();
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(seed));
  const std::vector<std::int64_t> a = epoch_order(seed, true, 2), b = epoch_order(seed, true, 2);
  ASSERT_EQ(a.size(), 60u);
  EXPECT_EQ(a, b);
  const std::vector<std::int64_t> first(a.begin(), a.begin() + 30), second(a.begin() + 30, a.end());
  EXPECT_NE(first, second);  // 1 / 30! chance of a false failure
  EXPECT_NE(epoch_order(seed + 1, true, 1), first);
  const std::vector<std::int64_t> plain = epoch_order(seed, false, 2);
  for (std::size_t i = 0; i < plain.size(); ++i)
    ASSERT_EQ(plain[i], static_cast<std::int64_t>(i % 30));
}

TEST(DataLoader, PrefetchOverlapsLoadingWithConsuming) {
  // 12 batches, 25 ms to load each and 25 ms to consume each: 600 ms one after the other, about 325
  // ms overlapped. Sleeps, not computation, so a busy machine does not change the outcome much.
  LoaderOptions o;
  o.batch_size = 4;
  o.workers = 1;
  o.prefetch = 2;
  o.epochs = 1;
  DataLoader loader(std::make_shared<IndexDataset>(48, 25ms), o, host_allocator());
  const auto start = std::chrono::steady_clock::now();
  while (auto batch = loader.next()) std::this_thread::sleep_for(25ms);
  const double elapsed = ms_since(start);
  EXPECT_LT(elapsed, 0.8 * 600.0) << "loading did not overlap consuming";
  const LoaderStats stats = loader.stats();
  EXPECT_EQ(stats.batches, 12);
  EXPECT_GE(stats.fill_ms, 12 * 25.0 * 0.95);
  EXPECT_LT(stats.consumer_wait_ms, 0.5 * stats.fill_ms);

  // Several workers fill batches in parallel: 16 batches of 25 ms with 4 workers, nothing to
  // consume.
  o.workers = 4;
  o.prefetch = 4;
  DataLoader parallel(std::make_shared<IndexDataset>(64, 25ms), o, host_allocator());
  const DrainResult drained = drain_batches(parallel, 100);
  EXPECT_EQ(drained.batches, 16);
  EXPECT_EQ(drained.samples, 64);
  EXPECT_LT(drained.elapsed_ms, 0.6 * 400.0) << "workers did not fill in parallel";
  EXPECT_GT(drained.samples_per_s(), 0.0);
}

TEST(DataLoader, WorkerExceptionReachesTheConsumerAfterEarlierBatches) {
  LoaderOptions o;
  o.batch_size = 5;
  o.shuffle = false;
  o.workers = 3;
  o.prefetch = 4;
  DataLoader loader(std::make_shared<IndexDataset>(100, 0ms, /*failing_index=*/17), o,
                    host_allocator());
  for (int b = 0; b < 3; ++b) {  // batches 0..2 hold samples 0..14
    const auto batch = loader.next();
    ASSERT_TRUE(batch.has_value());
    EXPECT_EQ(batch->indices.front(), 5 * b);
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      loader.next();
      FAIL() << "the worker's error was not re-thrown";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("sample 17 is unreadable"), std::string::npos)
          << e.what();
    }
  }
}

TEST(DataLoader, ReleasedBatchesReturnTheirBuffersAndHeldOnesOutliveTheLoader) {
  LoaderOptions o;
  o.batch_size = 2;
  o.workers = 1;
  o.prefetch = 1;  // two buffers in all
  o.shuffle = false;
  std::atomic<int> allocations{0};
  HostAllocator counting = [&](std::size_t bytes) {
    ++allocations;
    return allocate_host_buffer(bytes);
  };
  auto loader = std::make_unique<DataLoader>(std::make_shared<IndexDataset>(20), o, counting);
  EXPECT_EQ(allocations.load(), 2);
  auto first = loader->next();
  auto second = loader->next();
  ASSERT_TRUE(first && second);
  // Both buffers are held: a third batch cannot be filled until one comes back.
  auto third = std::async(std::launch::async, [&] { return loader->next(); });
  EXPECT_EQ(third.wait_for(150ms), std::future_status::timeout);
  Tensor kept = first->images;  // a copy of the view keeps the buffer out of the pool
  first->release();
  EXPECT_EQ(third.wait_for(150ms), std::future_status::timeout);
  kept = Tensor();
  ASSERT_EQ(third.wait_for(5s), std::future_status::ready);
  const auto batch3 = third.get();
  ASSERT_TRUE(batch3);
  EXPECT_EQ(batch3->indices.front(), 4);
  loader.reset();  // batches still held: their memory must stay valid
  EXPECT_EQ(second->images.f32()[0], 2.0f);
  EXPECT_EQ(batch3->images.f32()[18], 5.0f);
}

TEST(DataLoader, DestructorWithPendingBatchesDoesNotHang) {
  LoaderOptions o;
  o.batch_size = 4;
  o.workers = 2;
  o.prefetch = 4;
  const auto ds = std::make_shared<IndexDataset>(1000, 40ms);
  auto loader = std::make_unique<DataLoader>(ds, o, host_allocator());
  auto batch = loader->next();
  ASSERT_TRUE(batch);
  std::this_thread::sleep_for(20ms);
  const auto start = std::chrono::steady_clock::now();
  loader.reset();
  EXPECT_LT(ms_since(start), 1000.0);  // at most one 40 ms fill per worker to finish
  const int fills_at_stop = ds->fills.load();
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(ds->fills.load(), fills_at_stop) << "a worker kept running after the destructor";
  // A loader destroyed before its first next() also stops cleanly.
  { DataLoader unused(ds, o, host_allocator()); }
}

TEST(DataLoader, RejectsImpossibleOptions) {
  const auto ds = std::make_shared<IndexDataset>(10);
  auto make = [&](LoaderOptions o) { DataLoader loader(ds, o, host_allocator()); };
  LoaderOptions o;
  o.batch_size = 0;
  EXPECT_THROW(make(o), InvalidArgument);
  o = {};
  o.batch_size = 11;  // drop_last with fewer samples than a batch
  EXPECT_THROW(make(o), InvalidArgument);
  o.drop_last = false;
  EXPECT_NO_THROW(make(o));
  o = {};
  o.workers = 0;
  EXPECT_THROW(make(o), InvalidArgument);
  o = {};
  o.prefetch = 0;
  EXPECT_THROW(make(o), InvalidArgument);
  EXPECT_THROW(DataLoader(nullptr, LoaderOptions{}, host_allocator()), InvalidArgument);
}

TEST(DataLoader, AugmentedSyntheticBatchesFlowThroughTheFactory) {
  const DatasetSplits s = open_dataset("synthetic:3x8x8:classes=4:size=64");
  LoaderOptions o;
  o.batch_size = 16;
  o.epochs = 2;
  o.augment = true;
  DataLoader loader(s.train, o, host_allocator());
  const DrainResult r = drain_batches(loader, 1000);
  EXPECT_EQ(r.batches, 8);
  EXPECT_EQ(r.samples, 128);
  EXPECT_FALSE(loader.next());
}

TEST(DataLoader, BuffersFromABackendUploadToIt) {
  BackendOptions options;  // the CPU backend: its "pinned" memory is plain host memory
  const std::unique_ptr<Backend> backend = create_backend(options);
  LoaderOptions o;
  o.batch_size = 6;
  o.epochs = 1;
  DataLoader loader(std::make_shared<IndexDataset>(12), o, *backend);
  const auto batch = loader.next();
  ASSERT_TRUE(batch);
  const Tensor images = backend->alloc(batch->images.shape(), DType::kF32);
  const Tensor labels = backend->alloc(batch->labels.shape(), DType::kI32);
  backend->upload(batch->images, images, /*async=*/true);
  backend->upload(batch->labels, labels, /*async=*/true);
  backend->synchronize();
  const Tensor back = Tensor::host(images.shape());
  backend->download(images, back);
  for (std::int64_t i = 0; i < 6; ++i)
    EXPECT_EQ(back.f32()[static_cast<std::size_t>(i) * 18],
              static_cast<float>(batch->indices[static_cast<std::size_t>(i)]));
  const Tensor labels_back = Tensor::host(labels.shape(), DType::kI32);
  backend->download(labels, labels_back);
  EXPECT_EQ(labels_back.data<std::int32_t>()[5], batch->indices[5] % 7);
}
