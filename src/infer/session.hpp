// An inference session: a model bound to a backend for forward passes only, at one batch size.
// The executor is evaluation-only (no gradients, no optimiser state, the arena planned for forward
// liveness alone), batch norms are folded into the convolutions before them, ReLUs fused where the
// backend can (on the fp32 CPU with oneDNN: the whole network as one oneDNN plan where every layer
// maps onto it, see infer/cpu_plan.hpp), and the whole request — input conversion, forward, logits
// to fp32 — is replayed as one recorded CUDA graph where the backend records graphs. Requests come
// in as fp32 NCHW images; a GPU in 16 bits keeps them in device memory in that dtype (rounded on the
// host, on their way into pinned memory), and its fp32 masters in host memory
// (ExecutorOptions::masters_on_host).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/onednn_plan.hpp"
#include "backend/ops.hpp"
#include "core/tensor.hpp"
#include "net/executor.hpp"

namespace cnnergy {

class Graph;

struct InferenceOptions {
  std::int64_t batch = 1;
  bool cuda_graph = true;       // record the request once and replay it (ignored where unsupported)
  bool fold_batch_norm = true;  // ExecutorOptions::fold_batch_norm
  bool fuse_relu = true;
  std::uint64_t seed = 1;       // initial weights (initialize_parameters) until load_checkpoint
  // On the fp32 CPU backend with oneDNN: run the whole network as one oneDNN plan (infer/cpu_plan.hpp)
  // when every layer maps onto it; otherwise (or false) the executor's per-layer forward.
  bool cpu_plan = true;
  // Samples per run of the plan (a request runs in chunks, the last one by a second plan when the
  // batch is not a multiple); 0 = as many as keep the largest activation within 4 MiB (cache-sized).
  std::int64_t cpu_plan_chunk = 0;
};

class InferenceSession {
 public:
  // Binds the graph (OutOfMemory here is a batch that does not fit), initialises weights from
  // options.seed and folds them. Throws InvalidArgument for a batch below 1.
  InferenceSession(const Graph& graph, Backend& backend, const InferenceOptions& options);
  ~InferenceSession();
  InferenceSession(const InferenceSession&) = delete;
  InferenceSession& operator=(const InferenceSession&) = delete;

  // Trained weights (a checkpoint of the same model, e.g. from `train --save`), folded again.
  void load_checkpoint(const std::string& path);

  std::int64_t batch() const { return options_.batch; }
  bool graphed() const { return captured_ != nullptr; }
  // Which forward runs requests: "onednn-plan" (the whole-network oneDNN plan) or "per-layer" (the
  // executor), why the plan is not used ("" when it is), and what the plan holds.
  std::string forward_path() const { return plan_ ? "onednn-plan" : "per-layer"; }
  const std::string& plan_fallback_reason() const { return plan_reason_; }
  std::string plan_description() const { return plan_ ? plan_->describe() : std::string(); }
  // How the chunk was chosen (given, or both candidates' measured times); "" without a plan.
  const std::string& plan_chunk_choice() const { return chunk_choice_; }
  const cpu::OnednnPlan* plan() const { return plan_.get(); }
  std::int64_t plan_chunk() const { return plan_ ? chunk_ : 0; }
  const Executor& executor() const { return *executor_; }
  Executor& executor() { return *executor_; }

  // The device-side request buffers: NCHW images (batch x C x H x W) in request_dtype() and fp32
  // logits (batch x classes), both on the backend's device.
  const Tensor& device_images() const { return images_; }
  // fp32, or the backend's dtype on a GPU in 16 bits.
  DType request_dtype() const { return request_dtype_; }
  // Host fp32 NCHW images into device_images() (rounded to request_dtype()); waits for the copy.
  void upload_images(const Tensor& host_images);
  // The request's images and logits in device memory (where run() reads and writes them).
  std::size_t request_buffer_bytes() const { return images_.size_bytes() + logits_f32_.size_bytes(); }
  const Tensor& device_logits() const { return logits_f32_; }

  // Enqueues one request on the device images: conversion into the backend's dtype and layout,
  // forward, logits to fp32. The first call runs eagerly (convolutions resolve their algorithms
  // then) and records the graph; later calls replay it. Asynchronous like the kernels.
  void run();

  // End to end: host images (fp32 NCHW, batch x C x H x W) -> device -> run() -> host logits (fp32,
  // batch x classes; allocated when undefined). Waits for the result.
  void run_host(const Tensor& host_images, Tensor& host_logits);

  // End to end with two requests in flight: request i runs host_images[i] into host_logits[i]
  // (resized to match; each allocated when undefined), its images going up on the backend's copy
  // stream while request i - 1 computes (the upload waits only until that request's input conversion
  // has read the device images; the forward and the logits' copy replay as a second recorded graph).
  // Returns the seconds from the first copy into pinned memory to the last logits on the host. The
  // CPU runs the requests one by one.
  double run_host_pipelined(const std::vector<Tensor>& host_images, std::vector<Tensor>& host_logits);

 private:
  struct CpuPlans {
    std::unique_ptr<cpu::OnednnPlan> plan, tail;  // chunks of `chunk` samples; the rest
    std::int64_t chunk = 0;
    std::string reason;  // why plan is null
  };
  void make_cpu_plans(const Graph& graph);
  CpuPlans build_cpu_plans(std::int64_t chunk) const;
  double time_cpu_plans(const CpuPlans& plans);
  void run_cpu_plans(cpu::OnednnPlan* plan, cpu::OnednnPlan* tail, std::int64_t chunk);
  void enqueue();
  void check_host_images(const Tensor& host_images) const;
  void to_pinned(const Tensor& host_images, const Tensor& pin) const;

  InferenceOptions options_;
  Backend& backend_;
  std::unique_ptr<Executor> executor_;
  DType request_dtype_ = DType::kF32;
  Tensor images_, logits_f32_, pinned_images_, pinned_logits_;
  std::unique_ptr<CapturedWork> captured_;
  std::unique_ptr<CapturedWork> captured_forward_;  // forward + logits copy alone (run_host_pipelined)
  Tensor second_pinned_images_;                     // run_host_pipelined's other upload buffer
  std::unique_ptr<cpu::OnednnPlan> plan_, plan_tail_;  // chunks of chunk_ samples; the rest
  std::int64_t chunk_ = 0;
  std::string chunk_choice_;
  std::string plan_reason_;
  std::uint64_t plan_folds_ = 0;  // the executor's fold_count() the plan's weights were copied at
  bool warmed_up_ = false;
  bool workspace_trimmed_ = false;
};

}  // namespace cnnergy
