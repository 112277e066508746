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
#include "core/errors.hpp"

namespace cnnergy::cuda {

using namespace graph_detail;

namespace {

// Operand ids of the variant pack; 100 and up name the virtual (never materialized) tensors.
constexpr std::int64_t kUidX = 1, kUidW = 2, kUidY = 3, kUidB = 4, kUidZ = 5;
constexpr std::int64_t kUidConv = 100, kUidBiased = 101, kUidSummed = 102;

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

// y's strides for (n, k, h, w) in the problem's layout.
std::vector<std::int64_t> output_strides(const GraphConvProblem& p) {
  const std::int64_t k = p.k, h = p.out_h, w = p.out_w;
  return p.nhwc ? std::vector<std::int64_t>{h * w * k, 1, w * k, k}
                : std::vector<std::int64_t>{k * h * w, h * w, w, 1};
}

BackendDescriptor pointwise(cudnnPointwiseMode_t mode) {
  BackendDescriptor d(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  d.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  const cudnnDataType_t precision = CUDNN_DATA_FLOAT;  // the epilogue computes in fp32
  d.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision);
  d.finalize();
  return d;
}

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
  return "epilogue," + conv.key() + (residual ? ",z" : "") + (relu ? ",relu" : "");
}

namespace {

std::shared_ptr<EpilogueConvPlan::Parts> make_parts(cudnnHandle_t handle,
                                                    const EpilogueConvProblem& e) {
  const GraphConvProblem& p = e.conv;
  auto parts = std::make_shared<EpilogueConvPlan::Parts>();
  auto& keep = parts->keep;
  const std::vector<std::int64_t> y_dims{p.n, p.k, p.out_h, p.out_w};
  const std::vector<std::int64_t> y_strides = output_strides(p);
  const BackendDescriptor& x = keep.emplace_back(make_tensor(kUidX, p.data_type, p.nhwc, p.n, p.c, p.h, p.w));
  const BackendDescriptor& w =
      keep.emplace_back(make_tensor(kUidW, p.data_type, p.nhwc, p.k, p.c_per_group, p.r, p.s));
  const BackendDescriptor& b = keep.emplace_back(strided_tensor(
      kUidB, p.data_type, {1, p.k, 1, 1},
      p.nhwc ? std::vector<std::int64_t>{p.k, 1, p.k, p.k} : std::vector<std::int64_t>{p.k, 1, 1, 1},
      false));
  const BackendDescriptor& y = keep.emplace_back(strided_tensor(kUidY, p.data_type, y_dims, y_strides, false));
  const BackendDescriptor& conv_out =
      keep.emplace_back(strided_tensor(kUidConv, CUDNN_DATA_FLOAT, y_dims, y_strides, true));
  const BackendDescriptor& convolution = keep.emplace_back(make_convolution(p));

  std::vector<cudnnBackendDescriptor_t> ops;
  BackendDescriptor& conv_op =
      keep.emplace_back(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  const float alpha = 1.0f, beta = 0.0f;
  conv_op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x);
  conv_op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w);
  conv_op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, conv_out);
  conv_op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, convolution);
  conv_op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
  conv_op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
  conv_op.finalize();
  ops.push_back(conv_op.get());

  // conv + b, then + z, then relu; the last step writes y, the others virtual fp32 tensors.
  const BackendDescriptor& add = keep.emplace_back(pointwise(CUDNN_POINTWISE_ADD));
  const bool bias_last = !e.residual && !e.relu;
  const BackendDescriptor& biased =
      bias_last ? y : keep.emplace_back(strided_tensor(kUidBiased, CUDNN_DATA_FLOAT, y_dims, y_strides, true));
  ops.push_back(keep.emplace_back(pointwise_operation(add, conv_out, &b, biased)).get());
  const BackendDescriptor* last = &biased;
  if (e.residual) {
    const BackendDescriptor& z = keep.emplace_back(strided_tensor(kUidZ, p.data_type, y_dims, y_strides, false));
    const BackendDescriptor& summed =
        e.relu ? keep.emplace_back(strided_tensor(kUidSummed, CUDNN_DATA_FLOAT, y_dims, y_strides, true)) : y;
    ops.push_back(keep.emplace_back(pointwise_operation(add, biased, &z, summed)).get());
    last = &summed;
  }
  if (e.relu) {
    const BackendDescriptor& relu = keep.emplace_back(pointwise(CUDNN_POINTWISE_RELU_FWD));
    ops.push_back(keep.emplace_back(pointwise_operation(relu, *last, nullptr, y)).get());
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

cudnnStatus_t EpilogueConvLaunch::execute(cudnnHandle_t handle, const EpilogueConvOperands& o) {
  const std::array<const void*, 6> addresses{o.x, o.w, o.b, o.z, o.y, o.workspace};
  if (!pack_ || addresses != pack_addresses_) {
    std::vector<std::int64_t> uids{kUidX, kUidW, kUidB, kUidY};
    std::vector<void*> pointers{const_cast<void*>(o.x), const_cast<void*>(o.w),
                                const_cast<void*>(o.b), o.y};
    if (o.z != nullptr) {  // a residual problem
      uids.push_back(kUidZ);
      pointers.push_back(const_cast<void*>(o.z));
    }
    pack_ = variant_pack(uids, pointers, o.workspace, "fused-epilogue convolution");
    pack_addresses_ = addresses;
  }
  return cudnnBackendExecute(handle, plan_->get(), pack_->get());
}

}  // namespace cnnergy::cuda
