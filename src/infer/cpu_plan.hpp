// Maps an evaluation-only CPU executor's (folded) graph onto the whole-network oneDNN plan
// (backend/cpu/onednn_plan.hpp), or says why it cannot: the first layer without a oneDNN step, a
// backend that is not the fp32 NCHW CPU one, or a build without oneDNN.
#pragma once

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
CpuPlanChoice make_cpu_plan(const Executor& executor);

}  // namespace cnnergy
