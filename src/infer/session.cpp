// InferenceSession: the evaluation-only executor, the request buffers and the recorded request.
#include "infer/session.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/errors.hpp"
#include "infer/cpu_plan.hpp"
#include "net/checkpoint.hpp"
#include "net/graph.hpp"

namespace cnnergy {
namespace {

Tensor pinned(Backend& backend, const Shape& shape) {
  return Tensor(shape, DType::kF32, Layout::kNCHW, backend.alloc_pinned_host(static_cast<std::size_t>(shape.numel()) * sizeof(float)));
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
  executor_ = std::make_unique<Executor>(graph, backend_, eo);
  executor_->initialize_parameters(options_.seed);
  const Shape in = graph.tensor(graph.input_tensor()).shape.with_batch(options_.batch);
  const Shape out{options_.batch, graph.num_classes()};
  images_f32_ = backend_.alloc(in, DType::kF32, Layout::kNCHW);
  backend_.fill(images_f32_, 0.0f);
  logits_f32_ = backend_.alloc(out, DType::kF32, Layout::kNCHW);
  pinned_images_ = pinned(backend_, in);
  pinned_logits_ = pinned(backend_, out);
  // The executor reads its own copy in the backend's dtype and layout (set_input converts into it);
  // run() refreshes that copy from images_f32_ inside the recorded request.
  executor_->set_input(images_f32_, Tensor{});
  if (options_.cpu_plan) {
    constexpr std::size_t kChunkBudgetBytes = 4u << 20;
    chunk_ = options_.cpu_plan_chunk > 0 ? std::min(options_.cpu_plan_chunk, options_.batch)
                                         : cpu_plan_chunk(graph, options_.batch, kChunkBudgetBytes);
    CpuPlanChoice choice = make_cpu_plan(*executor_, chunk_);
    plan_ = std::move(choice.plan);
    plan_reason_ = choice.reason;
    if (plan_ && options_.batch % chunk_ != 0) {
      CpuPlanChoice tail = make_cpu_plan(*executor_, options_.batch % chunk_);
      plan_tail_ = std::move(tail.plan);
      if (!plan_tail_) {
        plan_.reset();
        plan_reason_ = tail.reason;
      }
    }
    plan_folds_ = executor_->fold_count();
  } else {
    plan_reason_ = "turned off (InferenceOptions::cpu_plan)";
  }
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
    const auto in_per = static_cast<std::size_t>(images_f32_.shape().numel() / options_.batch);
    const auto out_per = static_cast<std::size_t>(logits_f32_.shape().numel() / options_.batch);
    const float* in = images_f32_.data<float>();
    float* out = logits_f32_.data<float>();
    std::int64_t done = 0;
    for (; done + chunk_ <= options_.batch; done += chunk_)
      plan_->run(in + static_cast<std::size_t>(done) * in_per, out + static_cast<std::size_t>(done) * out_per);
    if (done < options_.batch)
      plan_tail_->run(in + static_cast<std::size_t>(done) * in_per, out + static_cast<std::size_t>(done) * out_per);
    return;
  }
  executor_->set_input(images_f32_, Tensor{});  // converts (enqueued) where the dtype or layout differ
  executor_->forward(Phase::kEval);
  backend_.copy(executor_->logits(), logits_f32_);
}

void InferenceSession::run() {
  if (captured_) {
    captured_->replay();
    return;
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
  if (host_images.dtype() != DType::kF32 || !(host_images.shape() == images_f32_.shape()))
    throw ShapeError("inference at batch " + std::to_string(options_.batch) + " takes fp32 images " +
                     images_f32_.shape().str() + ", got " + host_images.describe());
}

void InferenceSession::run_host(const Tensor& host_images, Tensor& host_logits) {
  check_host_images(host_images);
  if (!host_logits.defined()) host_logits = Tensor::host(logits_f32_.shape());
  std::memcpy(pinned_images_.raw(), host_images.raw(), host_images.size_bytes());
  backend_.upload(pinned_images_, images_f32_, /*async=*/true);
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
  executor_->set_input(images_f32_, Tensor{});  // the executor's input view, before recording
  if (options_.cuda_graph && !captured_forward_) {
    captured_forward_ = backend_.capture([this] {
      executor_->forward(Phase::kEval);
      backend_.copy(executor_->logits(), logits_f32_);
    });
  }
  if (!second_pinned_images_.defined()) second_pinned_images_ = pinned(backend_, images_f32_.shape());
  // Where the input is converted into the executor's own copy, the device images are free once the
  // conversion ran; otherwise the whole forward reads them.
  const bool converts = executor_->input().raw() != images_f32_.raw();
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
    std::memcpy(pin.raw(), host_images[i].raw(), host_images[i].size_bytes());
    const auto uploaded = backend_.upload_on_copy_stream(pin, images_f32_, images_read.get());
    if (i > 0) fetch_logits(i - 1);  // while request i's images go up
    backend_.wait_event(*uploaded);
    executor_->set_input(images_f32_, Tensor{});  // the conversion, enqueued
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
