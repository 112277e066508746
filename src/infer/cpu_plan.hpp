// Maps an evaluation-only CPU executor's (folded) graph onto the whole-network oneDNN plan
// (backend/cpu/onednn_plan.hpp), or says why it cannot: the first layer without a oneDNN step, a
// backend that is not the fp32 NCHW CPU one, or a build without oneDNN.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/cpu/onednn_plan.hpp"
#include "net/executor.hpp"

namespace cnnergy {

struct CpuPlanChoice {
  std::unique_ptr<cpu::OnednnPlan> plan;  // null: the per-layer path runs
  std::string reason;                     // why it is null ("" when a plan was made)
};

// The executor must be eval-only, bound, with its weights folded (the plan reads the layers'
// eval_weights() pointers; call OnednnPlan::refresh_weights() after they change).
// plan_batch: the samples one run of the plan takes (the session runs a request in chunks of it);
// 0 = the executor's batch.
CpuPlanChoice make_cpu_plan(const Executor& executor, std::int64_t plan_batch = 0);

// The chunk a request of `batch` runs in: as many samples as keep the largest activation within
// `budget_bytes` (at least 1, at most batch), so that a chunk's tensors stay in the last-level cache.
std::int64_t cpu_plan_chunk(const Graph& graph, std::int64_t batch, std::size_t budget_bytes);

}  // namespace cnnergy
