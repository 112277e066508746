// Fused-epilogue convolution plans (conv_epilogue_plan.hpp): the operation graph, its candidates,
// and their launch.
#include "backend/cuda/conv_epilogue_plan.hpp"

#include <chrono>
#include <deque>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/conv_graph_detail.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda {

using namespace graph_detail;

namespace {

// Operand ids of the variant pack; 100 and up name the virtual (never materialized) tensors.
constexpr std::int64_t kUidX = 1, kUidW = 2, kUidY = 3, kUidB = 4, kUidZ = 5, kUidSum = 6, kUidSqsum = 7;
constexpr std::int64_t kUidInScale = 8, kUidInShift = 9;
constexpr std::int64_t kUidConv = 100, kUidBiased = 101;  // 101 to 199: the epilogue steps' outputs
constexpr std::int64_t kUidPrologue = 200;                // 200 to 202: the prologue's

BackendDescriptor pointwise_operation(const BackendDescriptor& mode, const BackendDescriptor& x,
                                      const BackendDescriptor* b, const BackendDescriptor& y) {
  BackendDescriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, mode);
  op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b) op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  op.finalize();
  return op;
}

}  // namespace

// Everything the operation graph references stays alive with every plan built from it.
struct EpilogueConvPlan::Parts {
  std::deque<BackendDescriptor> keep;  // tensors, convolution, pointwise modes, operations (a deque:
                                       // references to its elements stay valid as it grows)
  std::unique_ptr<BackendDescriptor> graph;
  std::int64_t statistics_channels = 0;  // k for a statistics problem, else 0
};

EpilogueConvPlan::EpilogueConvPlan(std::shared_ptr<const Parts> parts, BackendDescriptor config,
                                   BackendDescriptor plan, std::string engine, bool compiled,
                                   double build_ms)
    : parts_(std::move(parts)),
      config_(std::move(config)),
      plan_(std::move(plan)),
      engine_(std::move(engine)),
      compiled_(compiled),
      build_ms_(build_ms) {
  workspace_bytes_ =
      static_cast<std::size_t>(plan_.get_int64(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE));
}

EpilogueConvPlan::~EpilogueConvPlan() = default;

std::string EpilogueConvProblem::key() const {
  return "epilogue," + conv.key() + (bias ? "" : ",nobias") + (residual ? ",z" : "") + (relu ? ",relu" : "") +
         (statistics ? ",stats" : "") + (input_affine_relu ? ",prologue" : "");
}

namespace {

std::shared_ptr<EpilogueConvPlan::Parts> make_parts(cudnnHandle_t handle,
                                                    const EpilogueConvProblem& e) {
  const GraphConvProblem& p = e.conv;
  auto parts = std::make_shared<EpilogueConvPlan::Parts>();
  parts->statistics_channels = e.statistics ? p.k : 0;
  auto& keep = parts->keep;
  const std::vector<std::int64_t> y_dims{p.n, p.k, p.out_h, p.out_w};
  const std::vector<std::int64_t> y_strides = output_strides(p);
  const BackendDescriptor& x = keep.emplace_back(make_tensor(kUidX, p.data_type, p.nhwc, p.n, p.c, p.h, p.w));
  const BackendDescriptor& w =
      keep.emplace_back(make_tensor(kUidW, p.data_type, p.nhwc, p.k, p.c_per_group, p.r, p.s));
  const BackendDescriptor& y = keep.emplace_back(strided_tensor(kUidY, p.data_type, y_dims, y_strides, false));
  const bool pointwise_steps = e.bias || e.residual || e.relu;
  const BackendDescriptor& conv_out =
      pointwise_steps ? keep.emplace_back(strided_tensor(kUidConv, CUDNN_DATA_FLOAT, y_dims, y_strides, true)) : y;
  const BackendDescriptor& convolution = keep.emplace_back(make_convolution(p));

  std::vector<cudnnBackendDescriptor_t> ops;
  const BackendDescriptor* conv_in = &x;
  if (e.input_affine_relu) {  // relu(x * scale + shift), per input channel, into the convolution
    const std::vector<std::int64_t> x_dims{p.n, p.c, p.h, p.w};
    const std::vector<std::int64_t> x_strides =
        p.nhwc ? std::vector<std::int64_t>{p.h * p.w * p.c, 1, p.w * p.c, p.c}
               : std::vector<std::int64_t>{p.c * p.h * p.w, p.h * p.w, p.w, 1};
    const std::vector<std::int64_t> c_strides =
        p.nhwc ? std::vector<std::int64_t>{p.c, 1, p.c, p.c} : std::vector<std::int64_t>{p.c, 1, 1, 1};
    const BackendDescriptor& scale =
        keep.emplace_back(strided_tensor(kUidInScale, p.data_type, {1, p.c, 1, 1}, c_strides, false));
    const BackendDescriptor& shift =
        keep.emplace_back(strided_tensor(kUidInShift, p.data_type, {1, p.c, 1, 1}, c_strides, false));
    const BackendDescriptor& scaled =
        keep.emplace_back(strided_tensor(kUidPrologue, CUDNN_DATA_FLOAT, x_dims, x_strides, true));
    const BackendDescriptor& shifted =
        keep.emplace_back(strided_tensor(kUidPrologue + 1, CUDNN_DATA_FLOAT, x_dims, x_strides, true));
    const BackendDescriptor& activated =
        keep.emplace_back(strided_tensor(kUidPrologue + 2, p.data_type, x_dims, x_strides, true));
    const BackendDescriptor& mul = keep.emplace_back(pointwise(CUDNN_POINTWISE_MUL));
    const BackendDescriptor& add = keep.emplace_back(pointwise(CUDNN_POINTWISE_ADD));
    const BackendDescriptor& relu = keep.emplace_back(pointwise(CUDNN_POINTWISE_RELU_FWD));
    ops.push_back(keep.emplace_back(pointwise_operation(mul, x, &scale, scaled)).get());
    ops.push_back(keep.emplace_back(pointwise_operation(add, scaled, &shift, shifted)).get());
    ops.push_back(keep.emplace_back(pointwise_operation(relu, shifted, nullptr, activated)).get());
    conv_in = &activated;
  }
  BackendDescriptor& conv_op =
      keep.emplace_back(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  const float alpha = 1.0f, beta = 0.0f;
  conv_op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, *conv_in);
  conv_op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w);
  conv_op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, conv_out);
  conv_op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, convolution);
  conv_op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
  conv_op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
  conv_op.finalize();
  ops.push_back(conv_op.get());

  // conv (+ b) (+ z) (relu): each step writes a virtual fp32 tensor, the last one y.
  const BackendDescriptor& add = keep.emplace_back(pointwise(CUDNN_POINTWISE_ADD));
  const BackendDescriptor* last = &conv_out;
  int steps_left = int{e.bias} + int{e.residual} + int{e.relu};
  std::int64_t next_uid = kUidBiased;
  auto step_output = [&]() -> const BackendDescriptor& {
    return --steps_left == 0 ? y
                             : keep.emplace_back(strided_tensor(next_uid++, CUDNN_DATA_FLOAT, y_dims, y_strides, true));
  };
  if (e.bias) {
    const BackendDescriptor& b =
        keep.emplace_back(strided_tensor(kUidB, p.data_type, {1, p.k, 1, 1}, channel_strides(p), false));
    const BackendDescriptor& out = step_output();
    ops.push_back(keep.emplace_back(pointwise_operation(add, *last, &b, out)).get());
    last = &out;
  }
  if (e.residual) {
    const BackendDescriptor& z = keep.emplace_back(strided_tensor(kUidZ, p.data_type, y_dims, y_strides, false));
    const BackendDescriptor& out = step_output();
    ops.push_back(keep.emplace_back(pointwise_operation(add, *last, &z, out)).get());
    last = &out;
  }
  if (e.relu) {
    const BackendDescriptor& relu = keep.emplace_back(pointwise(CUDNN_POINTWISE_RELU_FWD));
    ops.push_back(keep.emplace_back(pointwise_operation(relu, *last, nullptr, step_output())).get());
  }
  if (e.statistics) {
    const BackendDescriptor& sum =
        keep.emplace_back(strided_tensor(kUidSum, CUDNN_DATA_FLOAT, {1, p.k, 1, 1}, channel_strides(p), false));
    const BackendDescriptor& sqsum =
        keep.emplace_back(strided_tensor(kUidSqsum, CUDNN_DATA_FLOAT, {1, p.k, 1, 1}, channel_strides(p), false));
    BackendDescriptor& stats = keep.emplace_back(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
    const cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
    const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
    stats.set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode);
    stats.set(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision);
    stats.set_descriptor(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, y);
    stats.set_descriptor(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, sum);
    stats.set_descriptor(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, sqsum);
    stats.finalize();
    ops.push_back(stats.get());
  }
  parts->graph = std::make_unique<BackendDescriptor>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  parts->graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                    static_cast<std::int64_t>(ops.size()), ops.data());
  parts->graph->set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  parts->graph->finalize();
  return parts;
}

}  // namespace

std::vector<std::shared_ptr<const EpilogueConvPlan>> epilogue_conv_candidates(
    cudnnHandle_t handle, const EpilogueConvProblem& p, std::size_t workspace_limit,
    std::size_t limit, std::string* why) {
  std::vector<std::shared_ptr<const EpilogueConvPlan>> plans;
  std::shared_ptr<EpilogueConvPlan::Parts> parts;
  try {
    parts = make_parts(handle, p);
  } catch (const DeviceError& e) {
    if (why) *why = std::string("cuDNN refuses the fused graph: ") + e.what();
    return plans;
  }
  std::set<std::string> seen;
  std::size_t ranked = 0, numerics = 0, refused = 0, too_big = 0;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (BackendDescriptor& config : ranked_configs(*parts->graph, mode)) {
      if (plans.size() >= limit) break;
      const BackendDescriptor engine = engine_of(config);
      const std::string tag = engine_tag(config, engine);
      if (!seen.insert(tag).second) continue;
      ++ranked;
      if (!keeps_numerics(engine, p.conv)) {
        ++numerics;
        continue;
      }
      const bool compiled = compiles_at_run_time(engine);
      BackendDescriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      plan.set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config);
      const auto t0 = std::chrono::steady_clock::now();
      if (plan.try_finalize() != CUDNN_STATUS_SUCCESS) {
        ++refused;
        continue;
      }
      const double build_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      auto made = std::make_shared<const EpilogueConvPlan>(parts, std::move(config), std::move(plan),
                                                           tag, compiled, build_ms);
      if (made->workspace_bytes() > workspace_limit) {
        ++too_big;
        continue;
      }
      plans.push_back(std::move(made));
    }
  }
  if (plans.empty() && why)
    *why = "no engine runs the fused graph (" + std::to_string(ranked) + " ranked: " +
           std::to_string(numerics) + " break the run's numerics, " + std::to_string(refused) +
           " do not finalize, " + std::to_string(too_big) + " exceed the workspace cap)";
  return plans;
}

std::int64_t EpilogueConvPlan::statistics_channels() const { return parts_->statistics_channels; }

cudnnStatus_t EpilogueConvLaunch::execute(cudnnHandle_t handle, const EpilogueConvOperands& o) {
  if (const std::int64_t k = plan_->statistics_channels(); k > 0 && o.sum != nullptr && o.sqsum != nullptr) {
    // Some engines add their sums to what the buffers hold instead of overwriting them (seen: eng3
    // with knob 24 = 22, compiled at run time, cuDNN 9.19 on an H100 under driver 580): zeroed
    // first, the sums are right whichever engine won. Two small memsets, captured with the step.
    cudaStream_t stream = nullptr;
    const cudnnStatus_t got = cudnnGetStream(handle, &stream);
    if (got != CUDNN_STATUS_SUCCESS) return got;
    const std::size_t bytes = static_cast<std::size_t>(k) * sizeof(float);
    CNNERGY_CUDA_CALL(cudaMemsetAsync(o.sum, 0, bytes, stream));
    CNNERGY_CUDA_CALL(cudaMemsetAsync(o.sqsum, 0, bytes, stream));
  }
  const std::array<const void*, 10> addresses{o.x,         o.w,   o.b,     o.z,        o.y,
                                              o.workspace, o.sum, o.sqsum, o.in_scale, o.in_shift};
  if (!pack_ || addresses != pack_addresses_) {
    std::vector<std::int64_t> uids{kUidX, kUidW, kUidY};
    std::vector<void*> pointers{const_cast<void*>(o.x), const_cast<void*>(o.w), o.y};
    auto add_operand = [&](std::int64_t uid, const void* p) {
      if (p == nullptr) return;  // not an operand of this problem
      uids.push_back(uid);
      pointers.push_back(const_cast<void*>(p));
    };
    add_operand(kUidB, o.b);
    add_operand(kUidZ, o.z);
    add_operand(kUidSum, o.sum);
    add_operand(kUidSqsum, o.sqsum);
    add_operand(kUidInScale, o.in_scale);
    add_operand(kUidInShift, o.in_shift);
    pack_ = variant_pack(uids, pointers, o.workspace, "fused-epilogue convolution");
    pack_addresses_ = addresses;
  }
  return cudnnBackendExecute(handle, plan_->get(), pack_->get());
}

}  // namespace cnnergy::cuda
