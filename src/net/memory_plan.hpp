// The executor's memory planner as a pure function of plain descriptors: live intervals of steps and
// sizes in, arena offsets, the arena's size, the outputs recomputed in backward and the convolution
// workspaces' places out. No backend, no layer: the executor describes its network (which tensors
// share storage, who reads what when: executor.hpp gives the rules), calls plan_memory, then
// allocates and binds what the plan says.
//
// Steps are numbered: forward of layer i is step i, backward of layer i is step 2L-1-i.
// Placement: every interval goes into one arena, largest first, each at the lowest offset (256-byte
// aligned) where it overlaps no placed interval live at the same time. Workspaces (one step each) are
// placed either after every tensor (into the gaps they leave: the arena grows by at most the largest
// workspace) or by size with the tensors, whichever arena is smaller.
// Recomputation (with a budget): while the most bytes live at one step (tensors only) exceed it, an
// option live there but read by no layer at that step is recomputed: the most bytes freed per byte
// its rebuild moves (input read, output written) first, then the largest.
#pragma once

#include <cstddef>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

namespace cnnergy {

// One storage request of the plan, placed at `offset` of the arena.
struct PlanInterval {
  int start = 0, end = 0;  // steps, inclusive
  std::size_t bytes = 0;
  std::size_t offset = 0;  // in the arena, once placed
  bool late = false;       // a convolution workspace: placed after every other (see above)
};

// An activation storage group (tensors sharing storage: views, in-place layers, fused layers).
struct ActivationSpan {
  bool used = false;      // false: no storage (no tensor, or never written)
  int start = 0;          // the producer's forward step
  int forward_end = 0;    // the last forward step that reads it
  int backward_start = std::numeric_limits<int>::max(), backward_end = -1;  // backward steps reading it
  std::size_t bytes = 0;
  bool read_in_backward() const { return backward_end >= backward_start; }
};

// An output that its producer can write again, bit for bit, from its input just before backward.
struct RecomputeOption {
  int layer = 0;             // the producer (the planner does not read it)
  int input = 0;             // the producer's input tensor (the planner does not read it)
  int input_group = 0;       // the storage group of that input
  int group = 0;             // the output's storage group
  std::size_t input_bytes = 0;
};

struct MemoryPlanRequest {
  int num_layers = 0;
  bool reuse = true;  // false: every interval its own buffer (no arena, no recomputation)
  std::vector<ActivationSpan> groups;    // by group id (any ids; unused entries ignored)
  std::vector<PlanInterval> gradients;   // one per gradient storage group (offsets ignored)
  // Per layer (empty or num_layers long), the convolution workspace its forward / backward call takes
  // in the arena; 0: none.
  std::vector<std::size_t> forward_workspace_bytes, backward_workspace_bytes;
  std::vector<RecomputeOption> recompute_options;
  std::optional<std::size_t> activation_budget_bytes;  // unset: nothing recomputed
};

struct ArenaPlan {
  struct Recompute {
    std::size_t option = 0;  // index into MemoryPlanRequest::recompute_options
    int before_layer = 0;    // rebuilt just before this layer's backward (its first backward reader)
  };
  // Every interval, in this order: the activation groups (a recomputed one twice: forward, then from
  // its rebuild to its last backward reader), the gradients, the workspaces.
  std::vector<PlanInterval> items;
  std::vector<int> group_item, backward_item;  // by group id: its (rebuilt copy's) item; -1: none
  std::size_t gradient_base = 0;               // gradient k is items[gradient_base + k]
  std::vector<int> forward_workspace_item, backward_workspace_item;  // by layer; -1: none
  std::vector<Recompute> recomputed;           // in the order chosen
  std::size_t arena_bytes = 0;                 // 0 without reuse
  std::size_t live_peak_bytes = 0;             // the most bytes live at one step (no placement uses less)
  int peak_step = 0;                           // the first step where that is reached
};

ArenaPlan plan_memory(const MemoryPlanRequest& request);

// The live peak of the tensors alone: nothing recomputed, no workspace, nothing placed.
std::size_t tensors_live_peak_bytes(const MemoryPlanRequest& request);

// Places intervals (see above) and returns the arena's size: workspaces (late) last, or by size with
// the tensors, whichever arena is smaller.
std::size_t place_intervals(std::vector<PlanInterval>& items);

// The most bytes live at any one step, and the first step where it is reached.
std::pair<std::size_t, int> live_peak(const std::vector<PlanInterval>& items);

}  // namespace cnnergy
