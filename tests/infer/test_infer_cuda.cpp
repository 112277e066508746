// The inference session on the GPU, in every precision and both layouts: its logits (batch norms
// folded, the request replayed as a CUDA graph) equal the training executor's eval-mode forward on
// the same backend, and the fp32 session equals the CPU reference. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_allocator.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "layers/layer.hpp"
#include "infer/infer_testing.hpp"
#include "infer/session.hpp"
#include "net/graph.hpp"
#include "net/zoo/zoo.hpp"
#include "train/precision.hpp"

namespace cnnergy {
namespace {

double relative_norm_error(const Tensor& a, const Tensor& b) {
  const auto x = a.f32(), y = b.f32();
  double diff = 0, ref = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    diff += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    ref += static_cast<double>(y[i]) * y[i];
  }
  return ref == 0 ? (diff == 0 ? 0 : INFINITY) : std::sqrt(diff / ref);
}

std::unique_ptr<Backend> backend_for(const std::string& precision, Layout layout, bool fuse_epilogue = false,
                                     bool space_to_depth = false) {
  BackendOptions o;
  o.device = Device{DeviceKind::kCuda, 0};
  apply_precision(parse_precision(precision), o);
  o.layout = layout;
  o.conv_epilogue_fusion = fuse_epilogue;
  o.conv_space_to_depth = space_to_depth;
  return create_backend(o);
}

// Eval-mode logits of the training executor on `backend`, fp32 on the host.
Tensor reference_logits(const Graph& graph, Backend& backend, const Tensor& images, std::uint64_t bn_seed) {
  ExecutorOptions to;
  to.batch_size = images.shape()[0];
  Executor ex(graph, backend, to);
  ex.initialize_parameters(7);
  test::randomize_batch_norms(ex, bn_seed);
  const Tensor dev = backend.alloc(images.shape(), DType::kF32);
  backend.upload(images, dev);
  ex.set_input(dev, Tensor{});
  ex.forward(Phase::kEval);
  const Tensor logits = backend.alloc(ex.logits().shape(), DType::kF32);
  backend.copy(ex.logits(), logits);
  Tensor host = Tensor::host(logits.shape());
  backend.download(logits, host);
  return host;
}

struct Case {
  const char* precision;
  Layout layout;
  double tolerance;  // relative norm error against the same backend's eval forward
};

// The networks each precision and layout runs: the fused epilogue (cuDNN graphs of conv + bias +
// residual + ReLU, compiled per shape) on the ResNets only, since the other models add compilation
// time and no new pattern; space-to-depth (the 7x7/2 first convolution over 3 channels), whose
// reference is the eval forward on a backend without it.
struct Net {
  const char* model;
  bool fuse_epilogue;
  bool space_to_depth;
};

// The most convolution workspace one forward call of the session's layers asks for: what the chosen
// algorithms (and fused plans) need, known once the first request has resolved them.
std::size_t chosen_workspace_bound(const Executor& ex) {
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < ex.num_layers(); ++i) bytes = std::max(bytes, ex.layer(i).workspace_bound(false));
  return bytes;
}

class InferCuda : public ::testing::TestWithParam<std::tuple<Case, Net>> {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA GPU on this machine";
  }
};

TEST_P(InferCuda, FoldedGraphedSessionEqualsEvalForward) {
  const auto& [c, net] = GetParam();
  const std::string model = net.model;
  const bool fuse_epilogue = net.fuse_epilogue, space_to_depth = net.space_to_depth;
  const std::uint64_t seed = default_seed();
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(seed));
  const auto graph = build_model(model, Shape{3, 64, 64});
  constexpr std::int64_t kBatch = 4;
  Rng rng(seed);
  const Tensor images = test::random_tensor(graph->tensor(0).shape.with_batch(kBatch), rng);
  auto backend = backend_for(c.precision, c.layout, fuse_epilogue, space_to_depth);
  auto plain = space_to_depth ? backend_for(c.precision, c.layout, fuse_epilogue) : nullptr;
  const Tensor expected = reference_logits(*graph, space_to_depth ? *plain : *backend, images, seed + 1);
  for (float v : expected.f32())
    ASSERT_TRUE(std::isfinite(v)) << "the reference (the training executor's eval forward in " << c.precision
                                  << ") is not finite: the random model overflows this precision's range";
  InferenceOptions io;
  io.batch = kBatch;
  io.seed = 7;
  InferenceSession session(*graph, *backend, io);
  test::randomize_batch_norms(session.executor(), seed + 1);
  session.executor().fold_parameters();
  Tensor logits;
  std::size_t workspace_bytes[3] = {};
  for (int i = 0; i < 3; ++i) {  // eager (resolves the algorithms), eager on a workspace grown afresh, recorded
    session.run_host(images, logits);
    EXPECT_LT(relative_norm_error(logits, expected), c.tolerance) << "request " << i;
    workspace_bytes[i] = backend->memory_stats().conv_workspace_bytes;
  }
  EXPECT_TRUE(session.graphed());
  // Serving holds no more workspace than the chosen algorithms need. (After the first request the
  // workspace says nothing about that: each search gives the shared workspace back before timing
  // its candidates in scratch, so it then holds only what the layers after the last search grew it
  // to.) From the second request on it is grown afresh, by the chosen algorithms alone, and held as
  // one block of the caching allocator: the size class of the largest need (a 9.2 MiB need is a
  // 10 MiB block).
  const std::size_t needed = cuda::CachingAllocator::size_class(chosen_workspace_bound(session.executor()));
  RecordProperty("workspace_bytes", std::to_string(workspace_bytes[0]) + "," + std::to_string(workspace_bytes[1]) +
                                        "," + std::to_string(workspace_bytes[2]) + " needed " + std::to_string(needed));
  EXPECT_LE(workspace_bytes[1], needed) << "after the first request " << workspace_bytes[0] << " bytes";
  EXPECT_EQ(workspace_bytes[2], workspace_bytes[1]) << "recording the request grew the workspace";
  {  // Two requests in flight, each with its own images: each gets its own logits, as one by one.
    std::vector<Tensor> batches, piped, want(3);
    for (int i = 0; i < 3; ++i) batches.push_back(test::random_tensor(images.shape(), rng));
    for (std::size_t i = 0; i < batches.size(); ++i) session.run_host(batches[i], want[i]);
    EXPECT_GT(session.run_host_pipelined(batches, piped), 0.0);
    for (std::size_t i = 0; i < batches.size(); ++i)
      EXPECT_LT(relative_norm_error(piped[i], want[i]), 1e-6) << "pipelined request " << i;
    EXPECT_GT(relative_norm_error(want[2], want[1]), 1e-5) << "the requests must differ for this to mean anything";
  }
  EXPECT_LE(backend->memory_stats().conv_workspace_bytes, needed) << "after the pipelined requests";
  // The ReLUs after folded batch norms ride the convolutions' bias pass (Backend::fuses_conv_relu):
  // the logits above are with them.
  std::size_t relus_into_convs = 0;
  for (std::size_t i = 0; i < session.executor().num_layers(); ++i) {
    const Layer& l = session.executor().layer(i);
    if (l.type() == "relu" && l.absorbed())
      relus_into_convs += session.executor().layer(graph->layer_index(l.absorbed_into())).type() == "conv";
  }
  if (model.rfind("resnet", 0) == 0) {
    EXPECT_GT(relus_into_convs, 0u);
    // Every residual block's add (and its ReLU) goes into a folded convolution with the offer on:
    // the second convolution of the block or, where the shortcut convolution runs after it, that one.
    EXPECT_EQ(session.executor().memory().fused_residuals, fuse_epilogue ? 16u : 0u);
  }
  if (std::string(c.precision) == "fp32") {  // and the CPU reference
    BackendOptions co;
    co.device = Device{DeviceKind::kCpu, 0};
    auto cpu = create_backend(co);
    const Tensor cpu_logits = reference_logits(*graph, *cpu, images, seed + 1);
    EXPECT_LT(relative_norm_error(logits, cpu_logits), 1e-4);
  }
}

// In 16 bits the forward reads only the working copies, so the session parks the fp32 masters in
// host memory (ExecutorOptions::masters_on_host; on a GPU that frees their device memory). New weights
// bring them back and park them again; the logits equal an executor's that keeps its masters, bit for
// bit, before and after.
TEST(InferSession, MastersWaitInHostMemoryAndComeBackForNewWeights) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA GPU on this machine";
  auto backend = backend_for("bf16", Layout::kNHWC);
  const auto graph = build_model("resnet34", Shape{3, 32, 32});
  constexpr std::int64_t kBatch = 2;
  Rng rng(default_seed());
  const Tensor images = test::random_tensor(graph->tensor(0).shape.with_batch(kBatch), rng);
  auto kept_masters_logits = [&](std::uint64_t seed) {
    ExecutorOptions eo;
    eo.batch_size = kBatch;
    eo.training = false;
    eo.fold_batch_norm = true;
    Executor ex(*graph, *backend, eo);
    ex.initialize_parameters(seed);
    EXPECT_FALSE(ex.masters_parked());
    const Tensor dev = backend->alloc(images.shape(), DType::kF32);
    backend->upload(images, dev);
    ex.set_input(dev, Tensor{});
    ex.forward(Phase::kEval);
    const Tensor f32 = backend->alloc(ex.logits().shape(), DType::kF32);
    backend->copy(ex.logits(), f32);
    Tensor host = Tensor::host(f32.shape());
    backend->download(f32, host);
    return host;
  };
  InferenceOptions io;
  io.batch = kBatch;
  io.seed = 7;
  InferenceSession session(*graph, *backend, io);
  Executor& ex = session.executor();
  std::size_t working = 0, masters = 0;
  for (const Parameter* p : ex.parameters()) {  // parameters() brings the masters back
    EXPECT_TRUE(p->master.defined()) << p->name;
    if (p->working.defined()) masters += p->master.size_bytes();
    working += p->working.size_bytes();
  }
  EXPECT_FALSE(ex.masters_parked());
  EXPECT_EQ(ex.memory().parked_master_bytes, 0u);
  const std::size_t all_bytes = ex.memory().parameter_bytes;
  ex.fold_parameters();  // and parks them again
  ASSERT_TRUE(ex.masters_parked());
  EXPECT_GT(working, 0u);
  EXPECT_EQ(ex.memory().parked_master_bytes, masters);
  EXPECT_EQ(ex.memory().parameter_bytes, all_bytes - masters);

  Tensor logits;
  session.run_host(images, logits);
  const Tensor seven = kept_masters_logits(7);
  EXPECT_EQ(std::memcmp(logits.raw(), seven.raw(), seven.size_bytes()), 0);
  ex.initialize_parameters(9);  // new weights: drawn into the masters, folded, parked
  EXPECT_TRUE(ex.masters_parked());
  session.run_host(images, logits);
  const Tensor nine = kept_masters_logits(9);
  EXPECT_EQ(std::memcmp(logits.raw(), nine.raw(), nine.size_bytes()), 0);
  EXPECT_NE(std::memcmp(seven.raw(), nine.raw(), nine.size_bytes()), 0);
  // The request travels in bf16, rounded on the host as the device's conversion rounds.
  ASSERT_EQ(session.request_dtype(), DType::kBF16);
  session.upload_images(images);
  Tensor uploaded = Tensor::host(images.shape(), DType::kBF16);
  backend->download(session.device_images(), uploaded);
  const Tensor on_device = backend->alloc(images.shape(), DType::kBF16, Layout::kNCHW);
  const Tensor f32 = backend->alloc(images.shape(), DType::kF32, Layout::kNCHW);
  backend->upload(images, f32);
  backend->copy(f32, on_device);
  Tensor rounded_there = Tensor::host(images.shape(), DType::kBF16);
  backend->download(on_device, rounded_there);
  EXPECT_EQ(std::memcmp(uploaded.raw(), rounded_there.raw(), uploaded.size_bytes()), 0);
  EXPECT_EQ(session.request_buffer_bytes(), images.size_bytes() / 2 + seven.size_bytes());
}

// Every network on the reference precision (fp32 NCHW) and on the serving default (bf16 NHWC); on
// the other six precision x layout pairs ResNet-50 with the fused epilogue and space-to-depth (every
// fusion pattern at once) and VGG-16 (no residual, no batch norm). 54 of the 56 pairs took 260 s on
// an H100 beside two other test binaries; by those case times these 26 take about 110 s.
std::vector<std::tuple<Case, Net>> cases() {
  const Case all_nets[] = {Case{"fp32", Layout::kNCHW, 1e-4}, Case{"bf16", Layout::kNHWC, 5e-2}};
  const Case two_nets[] = {Case{"fp32", Layout::kNHWC, 1e-4}, Case{"tf32", Layout::kNCHW, 1e-2},
                           Case{"tf32", Layout::kNHWC, 1e-2}, Case{"fp16", Layout::kNCHW, 1e-2},
                           Case{"fp16", Layout::kNHWC, 1e-2}, Case{"bf16", Layout::kNCHW, 5e-2}};
  const Net nets[] = {Net{"resnet50", false, false}, Net{"resnet34", false, false}, Net{"googlenet", false, false},
                      Net{"vgg16", false, false},    Net{"resnet50", true, false},  Net{"resnet34", true, false},
                      Net{"resnet50", true, true}};
  std::vector<std::tuple<Case, Net>> out;
  for (const Case& c : all_nets)
    for (const Net& n : nets) out.emplace_back(c, n);
  for (const Case& c : two_nets) {
    out.emplace_back(c, Net{"resnet50", true, true});
    out.emplace_back(c, Net{"vgg16", false, false});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    Precisions, InferCuda, ::testing::ValuesIn(cases()),
    [](const auto& param_info) {
      const Case& c = std::get<0>(param_info.param);
      const Net& net = std::get<1>(param_info.param);
      return std::string(c.precision) + (c.layout == Layout::kNHWC ? "_nhwc_" : "_nchw_") + net.model +
             (net.fuse_epilogue ? "_epilogue" : "") + (net.space_to_depth ? "_s2d" : "");
    });

}  // namespace
}  // namespace cnnergy
