// The prefetching data loader: worker threads fill batches (fp32 NCHW images + int32 labels) into a
// small pool of page-locked host buffers ahead of the consumer, so that uploads can be asynchronous
// and the GPU never waits for data; it shuffles per epoch with a seeded permutation, carries worker
// exceptions to the consumer, and counts how long the consumer waited against how long the workers
// worked (the "load" phase of the measured training loop).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "backend/ops.hpp"
#include "core/tensor.hpp"
#include "data/dataset.hpp"

namespace cnnergy::data {

struct LoaderOptions {
  std::int64_t batch_size = 64;
  bool shuffle = true;      // a new seeded permutation every epoch (else the data set's order)
  bool drop_last = true;    // drop the last partial batch of an epoch
  bool augment = false;     // random crop and mirror (training); centre crop otherwise
  int workers = 2;          // threads filling batches; each fills whole batches
  int prefetch = 3;         // batches filled (or being filled) ahead of the one the consumer holds
  std::int64_t epochs = 0;  // next() returns nullopt after this many epochs; 0 = never
  std::uint64_t seed = 1;   // shuffling and augmentation
};

// One batch. Its tensors are views of a pooled page-locked buffer that returns to the pool when the
// last copy of them is destroyed (release() drops this handle's own references), so a tensor handed
// to an asynchronous upload stays valid as long as the uploader holds it. Holding many batches at
// once stalls the workers once the pool is empty.
struct Batch {
  Tensor images;                      // fp32 NCHW (n, C, H, W), host memory
  Tensor labels;                      // int32 (n)
  std::vector<std::int64_t> indices;  // the data set's sample indices, in batch order
  std::int64_t epoch = 0;             // 0-based
  std::int64_t index_in_epoch = 0;    // 0-based batch number within the epoch
  bool last_in_epoch = false;

  std::int64_t size() const { return images.defined() ? images.shape().n() : 0; }
  void release() {
    images = Tensor();
    labels = Tensor();
  }
};

struct LoaderStats {
  std::int64_t batches = 0;  // delivered by next()
  std::int64_t samples = 0;
  std::int64_t waits = 0;         // next() calls that found no batch ready and had to block
  double consumer_wait_ms = 0.0;  // total time next() blocked
  double max_wait_ms = 0.0;       // longest single block
  std::int64_t batches_filled = 0;
  double fill_ms = 0.0;  // total time workers spent filling (summed over workers)
};

// Per-batch buffers come from an allocator: Backend::alloc_pinned_host in training, plain host
// memory (allocate_host_buffer) in tests.
using HostAllocator = std::function<std::shared_ptr<Buffer>(std::size_t)>;

class DataLoader {
 public:
  // Throws InvalidArgument for impossible options (batch_size < 1, workers or prefetch outside
  // [1, 64], drop_last with fewer samples than one batch). The workers start at once.
  DataLoader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
             const HostAllocator& allocator);
  // Buffers from backend.alloc_pinned_host; the backend must outlive the loader and its batches.
  DataLoader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
             Backend& backend);
  ~DataLoader();  // stops the workers (each finishes the batch it is filling) and joins them
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch in order, waiting for it if need be; nullopt after `epochs` epochs. An exception
  // a worker met while filling this batch is re-thrown here (and by every later call).
  std::optional<Batch> next();

  std::int64_t batches_per_epoch() const { return batches_per_epoch_; }
  const Dataset& dataset() const { return *dataset_; }
  const LoaderOptions& options() const { return options_; }
  LoaderStats stats() const;

  struct State;  // shared with the buffers' deleters (defined in loader.cpp)

 private:
  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  std::int64_t batches_per_epoch_ = 0;
  std::shared_ptr<State> state_;
  std::vector<std::thread> workers_;
};

// Pulls `batches` batches and drops them at once: data loading timed on its own (the per-phase
// energy window "load"). Stops early at the end of the loader's epochs.
struct DrainResult {
  std::int64_t batches = 0;
  std::int64_t samples = 0;
  double elapsed_ms = 0.0;
  double samples_per_s() const {
    return elapsed_ms > 0 ? static_cast<double>(samples) * 1000.0 / elapsed_ms : 0.0;
  }
};
DrainResult drain_batches(DataLoader& loader, std::int64_t batches);

}  // namespace cnnergy::data
