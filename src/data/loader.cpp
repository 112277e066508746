// DataLoader: a pool of buffer slots, workers that claim batch sequence numbers in order and fill
// slots, and a consumer that takes batches strictly in sequence order. Errors are recorded against
// the sequence number that failed, so the consumer first receives every batch before it.
#include "data/loader.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <limits>
#include <map>
#include <mutex>

#include "core/errors.hpp"
#include "core/hash.hpp"
#include "data/random.hpp"

namespace cnnergy::data {
namespace {

constexpr std::uint64_t kShuffleStream = 0x51F7ull;
constexpr std::uint64_t kAugmentStream = 0xA06Dull;
constexpr std::size_t kLabelAlignment = 256;

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

struct DataLoader::State {
  struct Filled {
    std::size_t slot = 0;
    std::int64_t count = 0;
    std::vector<std::int64_t> indices;
  };

  // Fixed at construction.
  std::shared_ptr<const Dataset> dataset;
  LoaderOptions options;
  std::int64_t batches_per_epoch = 0;
  std::int64_t total_batches = 0;
  std::size_t label_offset = 0;  // labels follow the images in each slot, aligned
  std::vector<std::shared_ptr<Buffer>> slots;

  // Guarded by mutex.
  std::mutex mutex;
  std::condition_variable work_cv;   // workers: a slot came free, or stop
  std::condition_variable ready_cv;  // consumer: a batch or an error arrived
  std::vector<std::size_t> free_slots;
  std::map<std::int64_t, Filled> ready;  // by sequence number
  std::int64_t next_claim = 0;
  std::int64_t next_deliver = 0;
  std::int64_t permutation_epoch = -1;
  std::vector<std::int64_t> permutation;
  bool stop = false;
  std::exception_ptr error;
  std::int64_t error_sequence = std::numeric_limits<std::int64_t>::max();
  LoaderStats stats;

  void return_slot(std::size_t slot) {
    {
      std::lock_guard lock(mutex);
      free_slots.push_back(slot);
    }
    work_cv.notify_one();
  }

  // The sample indices of batch `sequence`; called in sequence order under the lock.
  std::vector<std::int64_t> claim_indices(std::int64_t sequence) {
    const std::int64_t epoch = sequence / batches_per_epoch, batch = sequence % batches_per_epoch;
    const std::int64_t n = dataset->size();
    if (epoch != permutation_epoch) {
      if (options.shuffle) {
        permutation = seeded_permutation(
            n, mix64(options.seed ^ kShuffleStream, static_cast<std::uint64_t>(epoch)));
      } else if (permutation.empty()) {
        permutation.resize(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) permutation[static_cast<std::size_t>(i)] = i;
      }
      permutation_epoch = epoch;
    }
    const std::int64_t first = batch * options.batch_size;
    const std::int64_t count = std::min(options.batch_size, n - first);
    return {permutation.begin() + first, permutation.begin() + first + count};
  }

  void worker_loop() {
    const auto per_sample = static_cast<std::size_t>(dataset->sample_numel());
    std::unique_lock lock(mutex);
    for (;;) {
      work_cv.wait(lock, [&] {
        return stop || error || next_claim >= total_batches || !free_slots.empty();
      });
      if (stop || error || next_claim >= total_batches) return;
      const std::size_t slot = free_slots.back();
      free_slots.pop_back();
      const std::int64_t sequence = next_claim++;
      std::vector<std::int64_t> indices = claim_indices(sequence);
      lock.unlock();

      const auto start = std::chrono::steady_clock::now();
      std::exception_ptr failure;
      try {
        const Augmentation augmentation{
            options.augment, mix64(options.seed ^ kAugmentStream,
                                   static_cast<std::uint64_t>(sequence / batches_per_epoch))};
        auto* base = static_cast<char*>(slots[slot]->data());
        dataset->fill(indices, augmentation,
                      {reinterpret_cast<float*>(base), indices.size() * per_sample},
                      {reinterpret_cast<std::int32_t*>(base + label_offset), indices.size()});
      } catch (...) {
        failure = std::current_exception();
      }
      const double elapsed = ms_since(start);

      lock.lock();
      stats.fill_ms += elapsed;
      ++stats.batches_filled;
      if (failure) {
        if (sequence < error_sequence) {
          error = failure;
          error_sequence = sequence;
        }
        free_slots.push_back(slot);
        work_cv.notify_all();  // the other workers stop claiming
      } else {
        const auto count = static_cast<std::int64_t>(indices.size());
        ready.emplace(sequence, Filled{slot, count, std::move(indices)});
      }
      ready_cv.notify_all();
    }
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                       const HostAllocator& allocator)
    : dataset_(std::move(dataset)), options_(options) {
  if (!dataset_) throw InvalidArgument("data loader: no data set");
  if (!allocator) throw InvalidArgument("data loader: no buffer allocator");
  if (options_.batch_size < 1)
    throw InvalidArgument("batch size must be at least 1, got " +
                          std::to_string(options_.batch_size));
  if (options_.workers < 1 || options_.workers > 64)
    throw InvalidArgument("loader workers must lie in [1, 64], got " +
                          std::to_string(options_.workers));
  if (options_.prefetch < 1 || options_.prefetch > 64)
    throw InvalidArgument("loader prefetch must lie in [1, 64], got " +
                          std::to_string(options_.prefetch));
  if (options_.epochs < 0)
    throw InvalidArgument("epochs must be >= 0, got " + std::to_string(options_.epochs));
  const std::int64_t n = dataset_->size();
  batches_per_epoch_ = options_.drop_last ? n / options_.batch_size
                                          : (n + options_.batch_size - 1) / options_.batch_size;
  if (batches_per_epoch_ == 0)
    throw InvalidArgument(
        dataset_->name() + " has " + std::to_string(n) + " samples, fewer than one batch of " +
        std::to_string(options_.batch_size) + (options_.drop_last ? " (drop_last is on)" : ""));

  state_ = std::make_shared<State>();
  State& s = *state_;
  s.dataset = dataset_;
  s.options = options_;
  s.batches_per_epoch = batches_per_epoch_;
  s.total_batches = options_.epochs == 0 ? std::numeric_limits<std::int64_t>::max()
                                         : options_.epochs * batches_per_epoch_;
  const std::size_t image_bytes =
      static_cast<std::size_t>(options_.batch_size * dataset_->sample_numel()) * sizeof(float);
  s.label_offset = (image_bytes + kLabelAlignment - 1) / kLabelAlignment * kLabelAlignment;
  const std::size_t slot_bytes =
      s.label_offset + static_cast<std::size_t>(options_.batch_size) * sizeof(std::int32_t);
  // One slot for the batch the consumer holds, `prefetch` ahead of it.
  const auto slot_count = static_cast<std::size_t>(options_.prefetch) + 1;
  for (std::size_t i = 0; i < slot_count; ++i) {
    s.slots.push_back(allocator(slot_bytes));
    if (!s.slots.back() || !s.slots.back()->data() || s.slots.back()->size_bytes() < slot_bytes)
      throw InternalError("data loader: the allocator returned no buffer of " +
                          std::to_string(slot_bytes) + " bytes");
    s.free_slots.push_back(slot_count - 1 - i);
  }
  try {
    for (int w = 0; w < options_.workers; ++w)
      workers_.emplace_back([state = state_] { state->worker_loop(); });
  } catch (...) {  // thread creation failed: stop the ones started, then report
    {
      std::lock_guard lock(s.mutex);
      s.stop = true;
    }
    s.work_cv.notify_all();
    for (auto& t : workers_) t.join();
    throw;
  }
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                       Backend& backend)
    : DataLoader(std::move(dataset), options,
                 [&backend](std::size_t bytes) { return backend.alloc_pinned_host(bytes); }) {}

DataLoader::~DataLoader() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stop = true;
  }
  state_->work_cv.notify_all();
  state_->ready_cv.notify_all();
  for (auto& t : workers_) t.join();
}

std::optional<Batch> DataLoader::next() {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  if (s.next_deliver >= s.total_batches) return std::nullopt;
  const std::int64_t sequence = s.next_deliver;
  const auto arrived = [&] {
    return s.ready.count(sequence) != 0 || (s.error && s.error_sequence <= sequence);
  };
  if (!arrived()) {
    const auto start = std::chrono::steady_clock::now();
    s.ready_cv.wait(lock, arrived);
    const double waited = ms_since(start);
    ++s.stats.waits;
    s.stats.consumer_wait_ms += waited;
    s.stats.max_wait_ms = std::max(s.stats.max_wait_ms, waited);
  }
  const auto it = s.ready.find(sequence);
  if (it == s.ready.end()) std::rethrow_exception(s.error);
  State::Filled filled = std::move(it->second);
  s.ready.erase(it);
  ++s.next_deliver;
  ++s.stats.batches;
  s.stats.samples += filled.count;
  lock.unlock();

  // A view of the slot whose deleter hands the slot back; it also keeps the memory alive should the
  // loader be destroyed first.
  const std::shared_ptr<Buffer> memory = s.slots[filled.slot];
  const std::weak_ptr<State> weak = state_;
  const std::size_t slot = filled.slot;
  auto view = std::make_shared<Buffer>(memory->data(), memory->size_bytes(), memory->device(),
                                       [memory, weak, slot](void*) {
                                         if (const auto owner = weak.lock())
                                           owner->return_slot(slot);
                                       });
  const Shape sample = dataset_->sample_shape();
  Batch batch;
  batch.images = Tensor(Shape{filled.count, sample[0], sample[1], sample[2]}, DType::kF32,
                        Layout::kNCHW, view);
  batch.labels = Tensor(Shape{filled.count}, DType::kI32, Layout::kNCHW, view, s.label_offset);
  batch.indices = std::move(filled.indices);
  batch.epoch = sequence / batches_per_epoch_;
  batch.index_in_epoch = sequence % batches_per_epoch_;
  batch.last_in_epoch = batch.index_in_epoch == batches_per_epoch_ - 1;
  return batch;
}

LoaderStats DataLoader::stats() const {
  std::lock_guard lock(state_->mutex);
  return state_->stats;
}

DrainResult drain_batches(DataLoader& loader, std::int64_t batches) {
  DrainResult result;
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < batches; ++i) {
    std::optional<Batch> batch = loader.next();
    if (!batch) break;
    ++result.batches;
    result.samples += batch->size();
  }
  result.elapsed_ms = ms_since(start);
  return result;
}

}  // namespace cnnergy::data
