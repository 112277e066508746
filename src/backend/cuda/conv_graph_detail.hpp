// Pieces of the graph-API convolution plans (conv_graph_plan.cpp) that the fused-epilogue plans
// (conv_epilogue_plan.cpp) share: tensor and convolution descriptors, the engine filters a search
// applies, engine tags and cuDNN's rankings. Internal to the CUDA backend.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/conv_graph_plan.hpp"
#include "backend/cuda/cudnn_graph.hpp"

namespace cnnergy::cuda::graph_detail {

// Every operand of a graph-API plan declares (and must have) this alignment.
inline constexpr std::int64_t kAlignmentBytes = 16;

// A 4-D tensor (N, C, H, W) in `nhwc` or NCHW strides.
BackendDescriptor make_tensor(std::int64_t uid, cudnnDataType_t type, bool nhwc, std::int64_t n,
                              std::int64_t c, std::int64_t h, std::int64_t w);
// A 4-D tensor of any dimensions and strides, virtual (never materialized: an intermediate of a
// fused graph) or not.
BackendDescriptor strided_tensor(std::int64_t uid, cudnnDataType_t type,
                                 const std::vector<std::int64_t>& dims,
                                 const std::vector<std::int64_t>& strides, bool is_virtual);
// y's strides for (n, k, out_h, out_w) in the problem's layout.
std::vector<std::int64_t> output_strides(const GraphConvProblem& p);
// A per-channel (1, k, 1, 1) tensor's strides in the problem's layout.
std::vector<std::int64_t> channel_strides(const GraphConvProblem& p);
// A pointwise mode computing in fp32.
BackendDescriptor pointwise(cudnnPointwiseMode_t mode);
// The convolution descriptor of a problem (fp32 accumulation, cross-correlation).
BackendDescriptor make_convolution(const GraphConvProblem& p);
// An engine configuration's engine, read into a fresh descriptor.
BackendDescriptor engine_of(const BackendDescriptor& config);
// The run's numerics: fp32 accumulation, inputs not down-converted, and no tensor cores (TF32) on
// fp32 data unless TF32 is allowed.
bool keeps_numerics(const BackendDescriptor& engine, const GraphConvProblem& p);
bool uses_tensor_cores(const BackendDescriptor& engine);
bool compiles_at_run_time(const BackendDescriptor& engine);
// cudnn-frontend's tag: "eng<global index>" then "_k<knob type>=<value>" per knob choice.
std::string engine_tag(const BackendDescriptor& config, const BackendDescriptor& engine);
// Engine configurations cuDNN's heuristics rank for the graph, best first.
std::vector<BackendDescriptor> ranked_configs(const BackendDescriptor& graph,
                                              cudnnBackendHeurMode_t mode);
bool aligned(const void* p);
// A finalized variant pack of `pointers` under `uids` and the workspace; InternalError naming `what`
// for an operand that is not kAlignmentBytes-aligned (what every plan's tensors declare).
std::unique_ptr<BackendDescriptor> variant_pack(const std::vector<std::int64_t>& uids,
                                                const std::vector<void*>& pointers, void* workspace,
                                                const char* what);

}  // namespace cnnergy::cuda::graph_detail
