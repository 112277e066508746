// Graph-API convolution plans: building, ranking, timing and running them (conv_graph_plan.hpp).
#include "backend/cuda/conv_graph_plan.hpp"
#include "backend/cuda/conv_graph_detail.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/conv_search_clock.hpp"
#include "backend/cuda/cuda_raii.hpp"
#include "core/algo_cache.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda {

namespace graph_detail {

namespace {
constexpr std::int64_t kUidX = 1, kUidW = 2, kUidY = 3;
}  // namespace

BackendDescriptor make_tensor(std::int64_t uid, cudnnDataType_t type, bool nhwc, std::int64_t n,
                              std::int64_t c, std::int64_t h, std::int64_t w) {
  BackendDescriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  d.set_int64(CUDNN_ATTR_TENSOR_DIMENSIONS, {n, c, h, w});
  d.set_int64(CUDNN_ATTR_TENSOR_STRIDES, nhwc ? std::vector<std::int64_t>{h * w * c, 1, w * c, c}
                                              : std::vector<std::int64_t>{c * h * w, h * w, w, 1});
  d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kAlignmentBytes);
  d.finalize();
  return d;
}

BackendDescriptor make_convolution(const GraphConvProblem& p) {
  BackendDescriptor d(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;  // fp32 accumulation in every precision
  d.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  d.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  const std::int64_t spatial_dims = 2;
  d.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial_dims);
  d.set_int64(CUDNN_ATTR_CONVOLUTION_DILATIONS, {p.dilation_h, p.dilation_w});
  d.set_int64(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, {p.stride_h, p.stride_w});
  d.set_int64(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, {p.pad_h, p.pad_w});
  d.set_int64(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, {p.pad_h, p.pad_w});
  d.finalize();
  return d;
}

// The attribute names of one direction's operation, in the order x, w, y, conv, alpha, beta.
struct OperationAttributes {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

OperationAttributes operation_attributes(ConvDirection dir) {
  switch (dir) {
    case ConvDirection::kForward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case ConvDirection::kBackwardData:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case ConvDirection::kBackwardFilter:
      break;
  }
  return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
}

// An engine configuration's engine, read into a fresh descriptor.
BackendDescriptor engine_of(const BackendDescriptor& config) {
  BackendDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  config.get(CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  return engine;
}

template <typename Note>
std::vector<Note> notes_of(const BackendDescriptor& engine, cudnnBackendAttributeName_t name,
                           cudnnBackendAttributeType_t type, int max_count) {
  std::vector<Note> notes(static_cast<std::size_t>(max_count));
  const std::int64_t n = engine.get(name, type, max_count, notes.data());
  notes.resize(static_cast<std::size_t>(std::clamp<std::int64_t>(n, 0, max_count)));
  return notes;
}

// The run's numerics: fp32 accumulation, inputs not down-converted, and no tensor cores (TF32)
// on fp32 data unless TF32 is allowed.
bool keeps_numerics(const BackendDescriptor& engine, const GraphConvProblem& p) {
  for (cudnnBackendNumericalNote_t note : notes_of<cudnnBackendNumericalNote_t>(
           engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
           CUDNN_NUMERICAL_NOTE_TYPE_COUNT)) {
    if (note == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS ||
        note == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)
      return false;
    if (note == CUDNN_NUMERICAL_NOTE_TENSOR_CORE && p.data_type == CUDNN_DATA_FLOAT &&
        !p.allow_tf32)
      return false;
  }
  return true;
}

bool uses_tensor_cores(const BackendDescriptor& engine) {
  for (cudnnBackendNumericalNote_t note : notes_of<cudnnBackendNumericalNote_t>(
           engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
           CUDNN_NUMERICAL_NOTE_TYPE_COUNT))
    if (note == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) return true;
  return false;
}

bool compiles_at_run_time(const BackendDescriptor& engine) {
  for (cudnnBackendBehaviorNote_t note : notes_of<cudnnBackendBehaviorNote_t>(
           engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
           CUDNN_BEHAVIOR_NOTE_TYPE_COUNT))
    if (note == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) return true;
  return false;
}

std::string engine_tag(const BackendDescriptor& config, const BackendDescriptor& engine) {
  std::string tag = "eng" + std::to_string(engine.get_int64(CUDNN_ATTR_ENGINE_GLOBAL_INDEX));
  std::vector<BackendDescriptor> knobs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    knobs.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    raw.push_back(knobs.back().get());
  }
  const std::int64_t n =
      config.get(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                 CUDNN_KNOB_TYPE_COUNTS, raw.data());
  for (std::int64_t i = 0; i < std::min<std::int64_t>(n, CUDNN_KNOB_TYPE_COUNTS); ++i) {
    const BackendDescriptor& k = knobs[static_cast<std::size_t>(i)];
    cudnnBackendKnobType_t type{};
    k.get(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &type);
    tag += "_k" + std::to_string(static_cast<int>(type)) + "=" +
           std::to_string(k.get_int64(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE));
  }
  return tag;
}

// Engine configurations cuDNN's heuristics rank for the graph, best first.
std::vector<BackendDescriptor> ranked_configs(const BackendDescriptor& graph,
                                              cudnnBackendHeurMode_t mode) {
  BackendDescriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (heur.try_finalize() != CUDNN_STATUS_SUCCESS) return {};
  const std::int64_t count =
      heur.get(CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, nullptr);
  std::vector<BackendDescriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  if (count == 0) return configs;
  const std::int64_t got =
      heur.get(CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, raw.data());
  configs.erase(configs.begin() + std::clamp<std::int64_t>(got, 0, count), configs.end());
  return configs;
}

BackendDescriptor strided_tensor(std::int64_t uid, cudnnDataType_t type,
                                 const std::vector<std::int64_t>& dims,
                                 const std::vector<std::int64_t>& strides, bool is_virtual) {
  BackendDescriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  d.set_int64(CUDNN_ATTR_TENSOR_DIMENSIONS, dims);
  d.set_int64(CUDNN_ATTR_TENSOR_STRIDES, strides);
  d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kAlignmentBytes);
  d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  d.finalize();
  return d;
}

std::vector<std::int64_t> output_strides(const GraphConvProblem& p) {
  const std::int64_t k = p.k, h = p.out_h, w = p.out_w;
  return p.nhwc ? std::vector<std::int64_t>{h * w * k, 1, w * k, k}
                : std::vector<std::int64_t>{k * h * w, h * w, w, 1};
}

std::vector<std::int64_t> channel_strides(const GraphConvProblem& p) {
  return p.nhwc ? std::vector<std::int64_t>{p.k, 1, p.k, p.k} : std::vector<std::int64_t>{p.k, 1, 1, 1};
}

BackendDescriptor pointwise(cudnnPointwiseMode_t mode) {
  BackendDescriptor d(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  d.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  const cudnnDataType_t precision = CUDNN_DATA_FLOAT;  // fused epilogues compute in fp32
  d.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision);
  d.finalize();
  return d;
}

bool aligned(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % static_cast<std::uintptr_t>(kAlignmentBytes) == 0;
}

std::unique_ptr<BackendDescriptor> variant_pack(const std::vector<std::int64_t>& uids,
                                                const std::vector<void*>& pointers, void* workspace,
                                                const char* what) {
  for (const void* p : pointers)
    if (!aligned(p))
      throw InternalError(std::string(what) + ": an operand at " +
                          std::to_string(reinterpret_cast<std::uintptr_t>(p)) + " is not " +
                          std::to_string(kAlignmentBytes) + "-byte aligned");
  auto pack = std::make_unique<BackendDescriptor>(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack->set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<std::int64_t>(uids.size()),
            uids.data());
  pack->set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
            static_cast<std::int64_t>(pointers.size()), pointers.data());
  pack->set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack->finalize();
  return pack;
}

}  // namespace graph_detail

using namespace graph_detail;

// The operation graph every plan of one problem shares.
struct GraphConvPlan::Parts {
  BackendDescriptor x, w, y, convolution, operation, graph;
};

GraphConvPlan::GraphConvPlan(std::shared_ptr<const Parts> parts, BackendDescriptor config,
                             BackendDescriptor plan, std::string engine)
    : parts_(std::move(parts)),
      config_(std::move(config)),
      plan_(std::move(plan)),
      engine_(std::move(engine)) {
  workspace_bytes_ =
      static_cast<std::size_t>(plan_.get_int64(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE));
}

GraphConvPlan::~GraphConvPlan() = default;

std::string GraphConvProblem::key() const {
  const std::int64_t v[] = {static_cast<std::int64_t>(dir),
                            static_cast<std::int64_t>(data_type),
                            nhwc,
                            allow_tf32,
                            n,
                            c,
                            h,
                            w,
                            k,
                            c_per_group,
                            r,
                            s,
                            out_h,
                            out_w,
                            pad_h,
                            pad_w,
                            stride_h,
                            stride_w,
                            dilation_h,
                            dilation_w};
  std::string out = "graph";
  for (std::int64_t x : v) out += "," + std::to_string(x);
  return out + ",beta" + std::to_string(beta);
}

namespace {
// The operation graph of one problem: tensors, convolution, operation.
std::shared_ptr<GraphConvPlan::Parts> make_parts(cudnnHandle_t handle, const GraphConvProblem& p) {
  auto parts = std::make_shared<GraphConvPlan::Parts>(
      GraphConvPlan::Parts{make_tensor(kUidX, p.data_type, p.nhwc, p.n, p.c, p.h, p.w),
                           make_tensor(kUidW, p.data_type, p.nhwc, p.k, p.c_per_group, p.r, p.s),
                           make_tensor(kUidY, p.data_type, p.nhwc, p.n, p.k, p.out_h, p.out_w),
                           make_convolution(p), BackendDescriptor(operation_attributes(p.dir).type),
                           BackendDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)});
  const OperationAttributes a = operation_attributes(p.dir);
  const float alpha = 1.0f, beta = p.beta;
  parts->operation.set_descriptor(a.x, parts->x);
  parts->operation.set_descriptor(a.w, parts->w);
  parts->operation.set_descriptor(a.y, parts->y);
  parts->operation.set_descriptor(a.conv, parts->convolution);
  parts->operation.set(a.alpha, CUDNN_TYPE_FLOAT, 1, &alpha);
  parts->operation.set(a.beta, CUDNN_TYPE_FLOAT, 1, &beta);
  parts->operation.finalize();
  parts->graph.set_descriptor(CUDNN_ATTR_OPERATIONGRAPH_OPS, parts->operation);
  parts->graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  parts->graph.finalize();

  return parts;
}
}  // namespace

std::vector<std::shared_ptr<const GraphConvPlan>> graph_conv_candidates(
    cudnnHandle_t handle, const GraphConvProblem& p, std::size_t workspace_limit,
    std::size_t ranked, std::size_t fallback, std::size_t* skipped, bool all_engines) {
  const std::shared_ptr<GraphConvPlan::Parts> parts = make_parts(handle, p);
  std::vector<std::shared_ptr<const GraphConvPlan>> plans;
  std::set<std::string> seen;
  std::size_t left_out = 0;
  // Where tensor cores serve the run (fp16/bf16 data, or fp32 data with TF32 allowed), engines
  // without them run on CUDA cores, many times slower on large problems (their warm-up alone took
  // seconds on VGG-16's 224x224 layers, and made VGG-16 tf32's search two minutes long at batch
  // 256): kept aside, and timed only where no tensor-core engine finalizes. The legacy find, which
  // "auto" sets against this list, still times the CUDA-core algorithms.
  const bool tensor_cores_serve = p.data_type == CUDNN_DATA_HALF ||
                                  p.data_type == CUDNN_DATA_BFLOAT16 ||
                                  (p.data_type == CUDNN_DATA_FLOAT && p.allow_tf32);
  std::vector<std::shared_ptr<const GraphConvPlan>> cuda_core;
  // Plans from one heuristics mode's ranking until `limit` plans are held.
  auto take = [&](cudnnBackendHeurMode_t mode, bool allow_compilation, std::size_t limit) {
    for (BackendDescriptor& config : ranked_configs(parts->graph, mode)) {
      if (plans.size() >= limit) return;
      const BackendDescriptor engine = engine_of(config);
      const std::string tag = engine_tag(config, engine);
      if (seen.count(tag)) continue;
      if (!keeps_numerics(engine, p) || (!allow_compilation && compiles_at_run_time(engine))) {
        if (!allow_compilation) ++left_out;
        continue;
      }
      seen.insert(tag);
      BackendDescriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      plan.set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config);
      if (plan.try_finalize() != CUDNN_STATUS_SUCCESS) continue;
      auto made =
          std::make_shared<const GraphConvPlan>(parts, std::move(config), std::move(plan), tag);
      if (made->workspace_bytes() > workspace_limit) {
        ++left_out;
        continue;
      }
      if (tensor_cores_serve && !all_engines && !uses_tensor_cores(engine)) {
        cuda_core.push_back(std::move(made));
        continue;
      }
      plans.push_back(std::move(made));
    }
  };
  // Engines that compile kernels at run time (seconds each) only where nothing else runs. Up to
  // `fallback` engines of the fallback list (a few that run nearly any shape) join the ranked
  // ones, and one always does where the ranked list gave nothing.
  for (const bool allow_compilation : {false, true}) {
    take(CUDNN_HEUR_MODE_A, allow_compilation, ranked);
    take(CUDNN_HEUR_MODE_FALLBACK, allow_compilation,
         plans.size() + std::max<std::size_t>(fallback, plans.empty()));
    if (!plans.empty()) break;
  }
  if (plans.empty())
    plans = std::move(cuda_core);
  else
    left_out += cuda_core.size();
  if (skipped) *skipped = left_out;
  return plans;
}

std::vector<std::string> graph_conv_engine_tags(cudnnHandle_t handle, const GraphConvProblem& p,
                                                std::size_t workspace_limit) {
  // Far more than cuDNN ranks for any convolution (a few dozen configurations): every one.
  constexpr std::size_t kEvery = 100000;
  std::vector<std::string> tags;
  for (const auto& plan : graph_conv_candidates(handle, p, workspace_limit, kEvery, kEvery,
                                                nullptr, /*all_engines=*/true))
    tags.push_back(plan->engine());
  return tags;
}

std::shared_ptr<const GraphConvPlan> graph_conv_plan_from_tag(cudnnHandle_t handle,
                                                              const GraphConvProblem& p,
                                                              const std::string& tag,
                                                              std::size_t workspace_limit) {
  const std::optional<GraphEngineTag> parsed = parse_engine_tag(tag);
  if (!parsed) return nullptr;
  try {
    const std::shared_ptr<GraphConvPlan::Parts> parts = make_parts(handle, p);
    BackendDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    engine.set_descriptor(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, parts->graph);
    engine.set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &parsed->engine_id);
    if (engine.try_finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
    // The same filters as a search: the run's numerics, no run-time compilation.
    if (!keeps_numerics(engine, p) || compiles_at_run_time(engine)) return nullptr;
    std::vector<BackendDescriptor> knobs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (const auto& [type, value] : parsed->knobs) {
      if (type < 0 || type >= CUDNN_KNOB_TYPE_COUNTS) return nullptr;
      knobs.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
      const auto knob_type = static_cast<cudnnBackendKnobType_t>(type);
      knobs.back().set(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &knob_type);
      knobs.back().set(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &value);
      if (knobs.back().try_finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
      raw.push_back(knobs.back().get());
    }
    BackendDescriptor config(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    config.set_descriptor(CUDNN_ATTR_ENGINECFG_ENGINE, engine);
    if (!raw.empty())
      config.set(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                 static_cast<std::int64_t>(raw.size()), raw.data());
    if (config.try_finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
    // What cuDNN holds must be exactly what was cached (no knob dropped or changed).
    if (engine_tag(config, engine_of(config)) != tag) return nullptr;
    BackendDescriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    plan.set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config);
    if (plan.try_finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
    auto made =
        std::make_shared<const GraphConvPlan>(parts, std::move(config), std::move(plan), tag);
    if (made->workspace_bytes() > workspace_limit) return nullptr;
    return made;
  } catch (const DeviceError&) {
    return nullptr;  // an attribute cuDNN refuses: the engine or a knob no longer exists
  }
}

GraphConvOperands operands_by_role(ConvDirection dir, const void* in1, const void* in2, void* out,
                                   void* workspace) {
  void* a = const_cast<void*>(in1);
  void* b = const_cast<void*>(in2);
  switch (dir) {
    case ConvDirection::kForward:
      return {a, b, out, workspace};  // (x, w) -> y
    case ConvDirection::kBackwardData:
      return {out, a, b, workspace};  // (w, dy) -> dx
    case ConvDirection::kBackwardFilter:
      break;
  }
  return {a, out, b, workspace};  // (x, dy) -> dw
}

std::string ms_text(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", ms);
  return buf;
}

LaunchCost launch_cost(cudaStream_t stream, const std::function<cudnnStatus_t()>& launch_once) {
  LaunchCost cost;
  if (launch_once() != CUDNN_STATUS_SUCCESS) return cost;
  Event start, stop;
  for (int rep = 0; rep < 3; ++rep) {
    CNNERGY_CUDA_CALL(cudaStreamSynchronize(stream));
    CNNERGY_CUDA_CALL(cudaEventRecord(start, stream));
    const auto h0 = std::chrono::steady_clock::now();
    const cudnnStatus_t s = launch_once();
    const auto h1 = std::chrono::steady_clock::now();
    CNNERGY_CUDA_CALL(cudaEventRecord(stop, stream));
    CNNERGY_CUDA_CALL(cudaEventSynchronize(stop));
    if (s != CUDNN_STATUS_SUCCESS) return LaunchCost{};
    float ms = 0.0f;
    CNNERGY_CUDA_CALL(cudaEventElapsedTime(&ms, start, stop));
    cost.device_ms = std::min(cost.device_ms, static_cast<double>(ms));
    cost.host_ms =
        std::min(cost.host_ms, std::chrono::duration<double, std::milli>(h1 - h0).count());
  }
  return cost;
}

std::shared_ptr<const GraphConvPlan> fastest_graph_conv(
    cudnnHandle_t handle, cudaStream_t stream,
    const std::vector<std::shared_ptr<const GraphConvPlan>>& candidates,
    const GraphConvOperands& operands) {
  std::vector<GraphConvLaunch> launches;
  std::vector<std::size_t> source;  // launches[i] runs candidates[source[i]]
  // A warm-up run each (loads the kernels; a candidate that fails to run is dropped), itself timed:
  // it over-states a kernel by at most its loading, so a candidate whose warm-up is clearly slower
  // than the fastest warm-up even after that slack is not timed at all (on VGG-16's 224x224 layers
  // the slow engines take tens of milliseconds a run, and timing them made the search minutes long).
  Event start, stop;
  std::vector<float> warm_ms;
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    GraphConvLaunch l(candidates[c]);
    CNNERGY_CUDA_CALL(cudaEventRecord(start, stream));
    if (l.execute(handle, operands) != CUDNN_STATUS_SUCCESS) continue;
    CNNERGY_CUDA_CALL(cudaEventRecord(stop, stream));
    CNNERGY_CUDA_CALL(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CNNERGY_CUDA_CALL(cudaEventElapsedTime(&ms, start, stop));
    launches.push_back(std::move(l));
    source.push_back(c);
    warm_ms.push_back(ms);
  }
  CNNERGY_CUDA_CALL(cudaStreamSynchronize(stream));
  const float fastest_warm = warm_ms.empty() ? 0.0f : *std::min_element(warm_ms.begin(), warm_ms.end());
  // Untimed candidates keep their warm-up time, an upper bound: chosen only if nothing was timed.
  std::vector<float> best_ms = warm_ms;
  float fastest = std::numeric_limits<float>::infinity();
  // One timed run of launches[i] into best_ms and fastest; false where it did not run.
  auto time_once = [&](std::size_t i) {
    CNNERGY_CUDA_CALL(cudaEventRecord(start, stream));
    if (launches[i].execute(handle, operands) != CUDNN_STATUS_SUCCESS) return false;
    CNNERGY_CUDA_CALL(cudaEventRecord(stop, stream));
    CNNERGY_CUDA_CALL(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CNNERGY_CUDA_CALL(cudaEventElapsedTime(&ms, start, stop));
    best_ms[i] = std::min(best_ms[i], ms);
    fastest = std::min(fastest, best_ms[i]);
    return true;
  };
  for (int pass = 0; pass < kGraphFindPasses; ++pass)
    for (std::size_t i = 0; i < launches.size(); ++i) {
      if (pass == 0 && warm_ms[i] > kClearlySlower * fastest_warm + kWarmupSlackMs) continue;
      // A candidate clearly slower than the best so far cannot win by another run: not timed again.
      if (pass > 0 && best_ms[i] > kClearlySlower * fastest) continue;
      time_once(i);
    }
  // Second chance for candidates whose warm-up alone kept them out, where loading can explain it.
  for (std::size_t i = 0; i < launches.size(); ++i) {
    if (warm_ms[i] <= kClearlySlower * fastest_warm + kWarmupSlackMs) continue;  // timed above
    if (source[i] != 0 && warm_ms[i] > fastest + kLoadAllowanceMs) continue;  // 0: ranked first
    for (int pass = 0; pass < kGraphFindPasses; ++pass)
      if ((pass > 0 && best_ms[i] > kClearlySlower * fastest) || !time_once(i)) break;
  }
  if (ConvSearchClock::tracing())
    for (std::size_t i = 0; i < launches.size(); ++i)
      std::fprintf(stderr,
                   "search trace: graph:candidate  %-48s warm-up %9.2f ms, best %9.2f ms, workspace %.1f MiB\n",
                   candidates[source[i]]->engine().c_str(), warm_ms[i], best_ms[i],
                   static_cast<double>(candidates[source[i]]->workspace_bytes()) / (1 << 20));
  std::shared_ptr<const GraphConvPlan> best;
  float best_time = std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < launches.size(); ++i)
    if (best_ms[i] < best_time) {
      best_time = best_ms[i];
      best = candidates[source[i]];
    }
  return best;
}

cudnnStatus_t GraphConvLaunch::execute(cudnnHandle_t handle, const GraphConvOperands& o) {
  const std::array<void*, 4> addresses{o.x, o.w, o.y, o.workspace};
  if (!pack_ || addresses != pack_addresses_) {
    pack_ = variant_pack({kUidX, kUidW, kUidY}, {o.x, o.w, o.y}, o.workspace, "graph-API convolution");
    pack_addresses_ = addresses;
  }
  return cudnnBackendExecute(handle, plan_->get(), pack_->get());
}

}  // namespace cnnergy::cuda
