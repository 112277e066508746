#include "backend/cuda/sgd_tables.hpp"

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_context.hpp"

namespace cnnergy::cuda {
namespace {

bool same_entry(const kernels::SgdEntry& a, const kernels::SgdEntry& b) {
  return a.master == b.master && a.grad == b.grad && a.momentum == b.momentum && a.working == b.working &&
         a.count == b.count && a.weight_decay == b.weight_decay && a.vector == b.vector;
}

bool same_entries(const std::vector<kernels::SgdEntry>& a, const std::vector<kernels::SgdEntry>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same_entry(a[i], b[i])) return false;
  return true;
}

}  // namespace

const SgdTables::Table* SgdTables::find_or_upload(const std::vector<kernels::SgdEntry>& entries, CudaContext& ctx) {
  for (const auto& t : tables_)
    if (same_entries(t->host, entries)) return t.get();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CNNERGY_CUDA_CALL(cudaStreamIsCapturing(ctx.stream(), &capture));
  if (capture != cudaStreamCaptureStatusNone) return nullptr;
  std::vector<kernels::SgdChunk> chunks;
  for (std::size_t e = 0; e < entries.size(); ++e)
    for (std::int64_t begin = 0; begin < entries[e].count; begin += kernels::kSgdChunkElements)
      chunks.push_back({static_cast<std::int64_t>(e), begin,
                        std::min(entries[e].count, begin + kernels::kSgdChunkElements)});
  auto table = std::make_unique<Table>();
  table->host = entries;
  table->num_chunks = static_cast<std::int64_t>(chunks.size());
  const std::size_t entry_bytes = entries.size() * sizeof(kernels::SgdEntry);
  const std::size_t chunk_offset = (entry_bytes + 255) / 256 * 256;
  const std::size_t bytes = chunk_offset + chunks.size() * sizeof(kernels::SgdChunk);
  table->device = ctx.scratch(std::max<std::size_t>(bytes, 1));
  std::vector<unsigned char> staged(bytes);
  if (entry_bytes > 0) std::memcpy(staged.data(), entries.data(), entry_bytes);
  if (!chunks.empty()) std::memcpy(staged.data() + chunk_offset, chunks.data(), chunks.size() * sizeof(kernels::SgdChunk));
  auto* base = static_cast<unsigned char*>(table->device->data());
  CNNERGY_CUDA_CALL(cudaMemcpyAsync(base, staged.data(), bytes, cudaMemcpyHostToDevice, ctx.stream()));
  CNNERGY_CUDA_CALL(cudaStreamSynchronize(ctx.stream()));  // staged is freed on return
  table->entries = reinterpret_cast<const kernels::SgdEntry*>(base);
  table->chunks = reinterpret_cast<const kernels::SgdChunk*>(base + chunk_offset);
  tables_.push_back(std::move(table));
  return tables_.back().get();
}

}  // namespace cnnergy::cuda
