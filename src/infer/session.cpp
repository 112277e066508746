// InferenceSession: the evaluation-only executor, the request buffers and the recorded request.
#include "infer/session.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/errors.hpp"
#include "infer/cpu_plan.hpp"
#include "net/checkpoint.hpp"
#include "net/graph.hpp"

namespace cnnergy {
namespace {

Tensor pinned(Backend& backend, const Shape& shape, DType dtype = DType::kF32) {
  return Tensor(shape, dtype, Layout::kNCHW,
                backend.alloc_pinned_host(static_cast<std::size_t>(shape.numel()) * dtype_size_bytes(dtype)));
}

}  // namespace

InferenceSession::InferenceSession(const Graph& graph, Backend& backend, const InferenceOptions& options)
    : options_(options), backend_(backend) {
  if (options_.batch < 1) throw InvalidArgument("batch must be at least 1, got " + std::to_string(options_.batch));
  ExecutorOptions eo;
  eo.batch_size = options_.batch;
  eo.training = false;
  eo.fold_batch_norm = options_.fold_batch_norm;
  eo.fuse_relu = options_.fuse_relu;
  eo.masters_on_host = true;  // a GPU in 16 bits: the forward reads only the working copies
  executor_ = std::make_unique<Executor>(graph, backend_, eo);
  executor_->initialize_parameters(options_.seed);
  const Shape in = graph.tensor(graph.input_tensor()).shape.with_batch(options_.batch);
  const Shape out{options_.batch, graph.num_classes()};
  // A GPU in 16 bits takes requests in that dtype: the host rounds the images while it copies them
  // into pinned memory (as the executor's conversion would), so half the bytes cross PCIe and wait in
  // device memory.
  request_dtype_ = backend_.device().is_cuda() && backend_.dtype() != DType::kF32 ? backend_.dtype() : DType::kF32;
  images_ = backend_.alloc(in, request_dtype_, Layout::kNCHW);
  backend_.fill(images_, 0.0f);
  logits_f32_ = backend_.alloc(out, DType::kF32, Layout::kNCHW);
  pinned_images_ = pinned(backend_, in, request_dtype_);
  pinned_logits_ = pinned(backend_, out);
  // The executor reads its own copy in the backend's dtype and layout (set_input converts into it);
  // run() refreshes that copy from images_ inside the recorded request.
  executor_->set_input(images_, Tensor{});
  if (options_.cpu_plan) {
    make_cpu_plans(graph);
  } else {
    plan_reason_ = "turned off (InferenceOptions::cpu_plan)";
  }
}

InferenceSession::CpuPlans InferenceSession::build_cpu_plans(std::int64_t chunk) const {
  CpuPlans out;
  out.chunk = chunk;
  CpuPlanChoice choice = make_cpu_plan(*executor_, chunk);
  out.plan = std::move(choice.plan);
  out.reason = choice.reason;
  if (out.plan && options_.batch % chunk != 0) {
    CpuPlanChoice tail = make_cpu_plan(*executor_, options_.batch % chunk);
    out.tail = std::move(tail.plan);
    if (!out.tail) {
      out.plan.reset();
      out.reason = tail.reason;
    }
  }
  return out;
}

// One request through `plans` on the request buffers, after one untimed (oneDNN's first run of a
// primitive pays its page faults): seconds.
double InferenceSession::time_cpu_plans(const CpuPlans& plans) {
  run_cpu_plans(plans.plan.get(), plans.tail.get(), plans.chunk);
  const auto t0 = std::chrono::steady_clock::now();
  run_cpu_plans(plans.plan.get(), plans.tail.get(), plans.chunk);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void InferenceSession::run_cpu_plans(cpu::OnednnPlan* plan, cpu::OnednnPlan* tail, std::int64_t chunk) {
  const auto in_per = static_cast<std::size_t>(images_.shape().numel() / options_.batch);
  const auto out_per = static_cast<std::size_t>(logits_f32_.shape().numel() / options_.batch);
  const float* in = images_.data<float>();
  float* out = logits_f32_.data<float>();
  std::int64_t done = 0;
  for (; done + chunk <= options_.batch; done += chunk)
    plan->run(in + static_cast<std::size_t>(done) * in_per, out + static_cast<std::size_t>(done) * out_per);
  if (done < options_.batch)
    tail->run(in + static_cast<std::size_t>(done) * in_per, out + static_cast<std::size_t>(done) * out_per);
}

// The chunk: given (InferenceOptions::cpu_plan_chunk), or the cache-sized one (the largest activation
// within 4 MiB) against the widest whose largest activation stays within 256 MiB, by one timed
// request each. Small machines favour the first (2 cores: ResNet-50 batch 32 in chunks of 1), many
// cores the second, whose layers have enough work to share among the threads (16 cores: chunks of
// 32 took 220 ms a request against 273 ms in chunks of 1; docs/internals.md, "The CPU inference plan").
void InferenceSession::make_cpu_plans(const Graph& graph) {
  constexpr std::size_t kCacheBudgetBytes = std::size_t{4} << 20;
  constexpr std::size_t kWideBudgetBytes = std::size_t{256} << 20;
  const bool given = options_.cpu_plan_chunk > 0;
  const std::int64_t cache_chunk = given ? std::min(options_.cpu_plan_chunk, options_.batch)
                                         : cpu_plan_chunk(graph, options_.batch, kCacheBudgetBytes);
  CpuPlans chosen = build_cpu_plans(cache_chunk);
  const std::int64_t wide_chunk = cpu_plan_chunk(graph, options_.batch, kWideBudgetBytes);
  if (chosen.plan && !given && wide_chunk > cache_chunk) {
    CpuPlans wide = build_cpu_plans(wide_chunk);
    if (wide.plan) {
      const double cache_s = time_cpu_plans(chosen), wide_s = time_cpu_plans(wide);
      char text[160];
      std::snprintf(text, sizeof text, "measured: chunks of %lld %.1f ms a request, chunks of %lld %.1f ms",
                    static_cast<long long>(wide_chunk), wide_s * 1e3, static_cast<long long>(cache_chunk),
                    cache_s * 1e3);
      chunk_choice_ = text;
      if (wide_s < cache_s) chosen = std::move(wide);
    }
  } else if (chosen.plan) {
    chunk_choice_ = given                            ? "given (--cpu-plan-chunk)"
                    : cache_chunk == options_.batch ? "the whole batch keeps its largest activation within 4 MiB"
                                                     : "no wider chunk keeps its largest activation within 256 MiB";
  }
  plan_ = std::move(chosen.plan);
  plan_tail_ = std::move(chosen.tail);
  chunk_ = chosen.chunk;
  plan_reason_ = chosen.reason;
  plan_folds_ = executor_->fold_count();
}

InferenceSession::~InferenceSession() = default;

void InferenceSession::load_checkpoint(const std::string& path) {
  backend_.synchronize();
  load_parameters(path, *executor_);
  executor_->fold_parameters();  // the plan copies the weights again at the next request
}

void InferenceSession::enqueue() {
  if (plan_) {  // the CPU: synchronous, the images and logits are host memory
    if (executor_->fold_count() != plan_folds_) {  // new weights (a checkpoint, fold_parameters())
      plan_->refresh_weights();
      if (plan_tail_) plan_tail_->refresh_weights();
      plan_folds_ = executor_->fold_count();
    }
    run_cpu_plans(plan_.get(), plan_tail_.get(), chunk_);
    return;
  }
  executor_->set_input(images_, Tensor{});  // converts (enqueued) where the dtype or layout differ
  executor_->forward(Phase::kEval);
  backend_.copy(executor_->logits(), logits_f32_);
}

void InferenceSession::run() {
  if (captured_) {
    captured_->replay();
    return;
  }
  // The first request resolved the algorithms, and the workspace grew to the largest that any of
  // them, or a plain convolution that space-to-depth then replaced, asked for: the second request
  // grows a new one to what the chosen ones need (AlexNet batch 256: 198 MiB before).
  if (warmed_up_ && !workspace_trimmed_) {
    backend_.release_conv_workspace();
    workspace_trimmed_ = true;
  }
  enqueue();
  if (!warmed_up_) {  // algorithms are resolved now; record the request from the second call on
    warmed_up_ = true;
    return;
  }
  if (options_.cuda_graph) {
    backend_.synchronize();
    captured_ = backend_.capture([this] { enqueue(); });
    if (!captured_) options_.cuda_graph = false;  // the backend records no graphs: stay eager
  }
}

void InferenceSession::check_host_images(const Tensor& host_images) const {
  if (host_images.dtype() != DType::kF32 || !(host_images.shape() == images_.shape()) ||
      !host_images.device().is_cpu())
    throw ShapeError("inference at batch " + std::to_string(options_.batch) + " takes fp32 host images " +
                     images_.shape().str() + ", got " + host_images.describe());
}

void InferenceSession::to_pinned(const Tensor& host_images, const Tensor& pin) const {
  convert_from_f32(host_images.data<float>(), pin.raw(), request_dtype_, static_cast<std::size_t>(host_images.numel()));
}

void InferenceSession::upload_images(const Tensor& host_images) {
  check_host_images(host_images);
  to_pinned(host_images, pinned_images_);
  backend_.upload(pinned_images_, images_);
}

void InferenceSession::run_host(const Tensor& host_images, Tensor& host_logits) {
  check_host_images(host_images);
  if (!host_logits.defined()) host_logits = Tensor::host(logits_f32_.shape());
  to_pinned(host_images, pinned_images_);
  backend_.upload(pinned_images_, images_, /*async=*/true);
  run();
  backend_.download(logits_f32_, pinned_logits_);
  std::memcpy(host_logits.raw(), pinned_logits_.raw(), pinned_logits_.size_bytes());
}

double InferenceSession::run_host_pipelined(const std::vector<Tensor>& host_images,
                                            std::vector<Tensor>& host_logits) {
  if (host_images.empty()) throw InvalidArgument("run_host_pipelined: no requests");
  for (const Tensor& t : host_images) check_host_images(t);
  const std::size_t requests = host_images.size();
  host_logits.resize(requests);
  for (Tensor& t : host_logits)
    if (!t.defined()) t = Tensor::host(logits_f32_.shape());
  using Clock = std::chrono::steady_clock;
  if (plan_ || !backend_.device().is_cuda()) {  // no copy stream to overlap: one after another
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < requests; ++i) run_host(host_images[i], host_logits[i]);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  while (!warmed_up_ || (options_.cuda_graph && !captured_)) run_host(host_images[0], host_logits[0]);
  backend_.synchronize();
  executor_->set_input(images_, Tensor{});  // the executor's input view, before recording
  if (options_.cuda_graph && !captured_forward_) {
    captured_forward_ = backend_.capture([this] {
      executor_->forward(Phase::kEval);
      backend_.copy(executor_->logits(), logits_f32_);
    });
  }
  if (!second_pinned_images_.defined()) second_pinned_images_ = pinned(backend_, images_.shape(), request_dtype_);
  // Where the input is converted into the executor's own copy, the device images are free once the
  // conversion ran; otherwise the whole forward reads them.
  const bool converts = executor_->input().raw() != images_.raw();
  const Tensor pins[2] = {pinned_images_, second_pinned_images_};
  std::unique_ptr<DeviceEvent> images_read;  // the previous request's last read of the device images
  auto fetch_logits = [&](std::size_t i) {
    backend_.download(logits_f32_, pinned_logits_);
    std::memcpy(host_logits[i].raw(), pinned_logits_.raw(), pinned_logits_.size_bytes());
  };
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < requests; ++i) {
    // The upload that read this pinned buffer (request i - 2) finished before request i - 2
    // computed, which the download of its logits waited for.
    const Tensor& pin = pins[i % 2];
    to_pinned(host_images[i], pin);
    const auto uploaded = backend_.upload_on_copy_stream(pin, images_, images_read.get());
    if (i > 0) fetch_logits(i - 1);  // while request i's images go up
    backend_.wait_event(*uploaded);
    executor_->set_input(images_, Tensor{});  // the conversion, enqueued
    if (converts) {
      images_read = backend_.make_event();
      images_read->record();
    }
    if (captured_forward_) {
      captured_forward_->replay();
    } else {
      executor_->forward(Phase::kEval);
      backend_.copy(executor_->logits(), logits_f32_);
    }
    if (!converts) {
      images_read = backend_.make_event();
      images_read->record();
    }
  }
  fetch_logits(requests - 1);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace cnnergy
