// The CUDA backend: cuDNN for convolution, pooling, LRN and batch norm; cuBLAS for fully connected
// layers; own kernels for the element-wise rest (and where cuDNN's semantics or types differ from
// the contract). Included only when CUDA was built.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.hpp"

namespace cnnergy::cuda {

int device_count();  // 0 without driver or GPU (never throws)
// Throws NotSupported without a GPU or where the GPU lacks the dtype (bf16 and tf32 need compute
// capability 8.0), InvalidArgument for a bad device index or algorithm policy.
std::unique_ptr<Backend> create_cuda_backend(const BackendOptions& options);

// How often the backend's convolutions ran cuDNN's "find" and how often an identical problem reused
// a cached result (per backend). InvalidArgument for a non-CUDA backend.
struct ConvAlgoCacheStats {
  std::size_t find_runs = 0;
  std::size_t cache_hits = 0;
};
ConvAlgoCacheStats conv_algo_cache_stats(const Backend& backend);

// The cudaStream_t (as void*) that all of a CUDA backend's device work runs on, for code that must
// order its own work with it (NCCL collectives, CUDA graphs). InvalidArgument for other backends.
void* native_stream(const Backend& backend);

// cuDNN's algorithm names for "forward", "backward_data" or "backward_filter" (InvalidArgument
// otherwise): what ConvAlgoChoice and the run's policy accept besides "find" and "heuristic".
std::vector<std::string> conv_algorithm_names(const std::string& direction);

}  // namespace cnnergy::cuda
