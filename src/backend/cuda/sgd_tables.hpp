// The device tables behind CUDA's Backend::sgd_update_all: for each distinct set of parameters (a
// training executor's, the same every step) the entries and their chunks (kernels::SgdEntry,
// SgdChunk), uploaded once, outside any CUDA-graph capture, and kept for the backend's life: a
// captured step reads its table at every replay.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/kernels.hpp"
#include "core/tensor.hpp"

namespace cnnergy::cuda {

class CudaContext;

class SgdTables {
 public:
  struct Table {
    std::vector<kernels::SgdEntry> host;  // what was uploaded, to recognise the set again
    std::shared_ptr<Buffer> device;       // the entries, then the chunks
    const kernels::SgdEntry* entries = nullptr;
    const kernels::SgdChunk* chunks = nullptr;
    std::int64_t num_chunks = 0;
  };
  // The table holding exactly `entries`, uploaded on first sight; null where it is new and the
  // context's stream is capturing (the caller then launches per parameter).
  const Table* find_or_upload(const std::vector<kernels::SgdEntry>& entries, CudaContext& ctx);
  std::size_t size() const { return tables_.size(); }

 private:
  std::vector<std::unique_ptr<Table>> tables_;
};

}  // namespace cnnergy::cuda
