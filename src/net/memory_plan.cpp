// The memory planner: intervals to arena offsets, the recomputation choice, workspace placement
// (memory_plan.hpp gives the rules).
#include "net/memory_plan.hpp"

#include <algorithm>
#include <numeric>
#include <tuple>

namespace cnnergy {
namespace {

constexpr std::size_t kArenaAlignment = 256;  // what cuDNN and vectorised kernels like best
std::size_t align_up(std::size_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

// Places every interval at an offset of one arena so that intervals overlapping in time never
// overlap in memory: largest first, each at the lowest offset that fits between the placed
// intervals it overlaps in time (greedy by size). Late intervals (convolution workspaces, one step
// each) come after all others, so that they fill the gaps the tensors leave and a workspace never
// pushes a long-lived tensor up: the arena is at most the tensors' own plus the largest workspace.
// Returns the arena size.
std::size_t place(std::vector<PlanInterval>& items) {
  std::vector<std::size_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (items[a].late != items[b].late) return items[b].late;
    if (items[a].bytes != items[b].bytes) return items[a].bytes > items[b].bytes;
    return items[a].start < items[b].start;
  });
  std::vector<std::size_t> placed;
  std::size_t arena = 0;
  std::vector<const PlanInterval*> conflicts;
  for (std::size_t idx : order) {
    PlanInterval& it = items[idx];
    conflicts.clear();
    for (std::size_t p : placed) {
      const PlanInterval& q = items[p];
      if (q.start <= it.end && it.start <= q.end) conflicts.push_back(&q);
    }
    std::sort(conflicts.begin(), conflicts.end(),
              [](const PlanInterval* a, const PlanInterval* b) { return a->offset < b->offset; });
    std::size_t offset = 0;
    for (const PlanInterval* q : conflicts) {
      if (offset + it.bytes <= q->offset) break;  // fits in the gap below q
      offset = std::max(offset, align_up(q->offset + q->bytes));
    }
    it.offset = offset;
    arena = std::max(arena, offset + it.bytes);
    placed.push_back(idx);
  }
  return arena;
}

// The plan's intervals for a choice of recomputed groups (by group id), with or without the
// workspaces; fills the plan's item maps.
void build_items(const MemoryPlanRequest& rq, const std::vector<char>& recomputed, bool with_workspaces,
                 ArenaPlan& plan) {
  std::vector<PlanInterval>& out = plan.items;
  out.clear();
  plan.group_item.assign(rq.groups.size(), -1);
  plan.backward_item.assign(rq.groups.size(), -1);
  for (std::size_t g = 0; g < rq.groups.size(); ++g) {
    const ActivationSpan& sp = rq.groups[g];
    if (!sp.used) continue;
    plan.group_item[g] = static_cast<int>(out.size());
    if (recomputed[g]) {
      out.push_back(PlanInterval{sp.start, sp.forward_end, sp.bytes, 0});
      plan.backward_item[g] = static_cast<int>(out.size());
      out.push_back(PlanInterval{sp.backward_start, sp.backward_end, sp.bytes, 0});
    } else {
      const int end = sp.read_in_backward() ? std::max(sp.forward_end, sp.backward_end) : sp.forward_end;
      out.push_back(PlanInterval{sp.start, end, sp.bytes, 0});
    }
  }
  plan.gradient_base = out.size();
  for (const PlanInterval& g : rq.gradients) out.push_back(PlanInterval{g.start, g.end, g.bytes, 0});
  const auto layers = static_cast<std::size_t>(std::max(rq.num_layers, 0));
  plan.forward_workspace_item.assign(layers, -1);
  plan.backward_workspace_item.assign(layers, -1);
  if (!with_workspaces) return;
  auto bytes = [](const std::vector<std::size_t>& v, std::size_t l) { return l < v.size() ? v[l] : std::size_t{0}; };
  for (std::size_t l = 0; l < layers; ++l) {
    const int i = static_cast<int>(l);
    if (const std::size_t fw = bytes(rq.forward_workspace_bytes, l); fw > 0) {
      plan.forward_workspace_item[l] = static_cast<int>(out.size());
      out.push_back(PlanInterval{i, i, fw, 0, true});
    }
    if (const std::size_t bw = bytes(rq.backward_workspace_bytes, l); bw > 0) {
      plan.backward_workspace_item[l] = static_cast<int>(out.size());
      const int step = 2 * rq.num_layers - 1 - i;
      out.push_back(PlanInterval{step, step, bw, 0, true});
    }
  }
}

// The recomputation choice (memory_plan.hpp), as a flag per group id; fills plan.recomputed.
std::vector<char> choose_recomputed(const MemoryPlanRequest& rq, ArenaPlan& plan) {
  std::vector<char> recomputed(rq.groups.size(), 0);
  plan.recomputed.clear();
  if (!rq.reuse || !rq.activation_budget_bytes) return recomputed;
  const auto& options = rq.recompute_options;
  auto span = [&](int g) -> const ActivationSpan& { return rq.groups.at(static_cast<std::size_t>(g)); };
  std::vector<char> taken(options.size(), 0);
  for (std::size_t k = 0; k < options.size(); ++k)  // only an output read in backward can be dropped before it
    taken[k] = !(span(options[k].group).used && span(options[k].group).read_in_backward());
  auto better = [&](const RecomputeOption& a, const RecomputeOption& b) {
    const double ba = static_cast<double>(span(a.group).bytes);
    const double bb = static_cast<double>(span(b.group).bytes);
    const double ra = ba / (ba + static_cast<double>(a.input_bytes));
    const double rb = bb / (bb + static_cast<double>(b.input_bytes));
    return ra != rb ? ra > rb : ba > bb;
  };
  std::vector<char> chosen(options.size(), 0);
  ArenaPlan scratch;
  for (;;) {
    // The budget counts activations and gradients (a workspace is no option).
    build_items(rq, recomputed, false, scratch);
    const auto [peak_bytes, peak_step] = live_peak(scratch.items);
    if (peak_bytes <= *rq.activation_budget_bytes) break;
    int best = -1;
    for (std::size_t k = 0; k < options.size(); ++k) {
      const RecomputeOption& c = options[k];
      const ActivationSpan& sp = span(c.group);
      if (taken[k] || sp.forward_end >= peak_step || sp.backward_start <= peak_step) continue;  // not freed there
      // A producer reading a recomputed output, or whose output another recomputation reads, would
      // rebuild from a buffer not yet rebuilt: one of the two only.
      if (recomputed.at(static_cast<std::size_t>(c.input_group))) continue;
      bool read_by_chosen = false;
      for (std::size_t j = 0; j < options.size(); ++j)
        read_by_chosen = read_by_chosen || (chosen[j] && options[j].input_group == c.group);
      if (read_by_chosen) continue;
      if (best < 0 || better(c, options[static_cast<std::size_t>(best)])) best = static_cast<int>(k);
    }
    if (best < 0) break;  // nothing left that is live at the peak
    const RecomputeOption& c = options[static_cast<std::size_t>(best)];
    taken[static_cast<std::size_t>(best)] = 1;
    chosen[static_cast<std::size_t>(best)] = 1;
    recomputed[static_cast<std::size_t>(c.group)] = 1;
    plan.recomputed.push_back({static_cast<std::size_t>(best), 2 * rq.num_layers - 1 - span(c.group).backward_start});
  }
  return recomputed;
}

}  // namespace

std::size_t place_intervals(std::vector<PlanInterval>& items) {
  std::vector<PlanInterval> mixed = items;
  for (PlanInterval& it : mixed) it.late = false;
  const std::size_t last = place(items);
  if (std::none_of(items.begin(), items.end(), [](const PlanInterval& it) { return it.late; })) return last;
  const std::size_t by_size = place(mixed);
  if (by_size >= last) return last;
  for (std::size_t k = 0; k < items.size(); ++k) items[k].offset = mixed[k].offset;
  return by_size;
}

std::pair<std::size_t, int> live_peak(const std::vector<PlanInterval>& items) {
  int last = 0;
  for (const auto& it : items) last = std::max(last, it.end);
  std::vector<std::size_t> live(static_cast<std::size_t>(last) + 2, 0);
  for (const auto& it : items)
    for (int s = std::max(it.start, 0); s <= it.end; ++s) live[static_cast<std::size_t>(s)] += it.bytes;
  const auto peak = std::max_element(live.begin(), live.end());
  return {*peak, static_cast<int>(peak - live.begin())};
}

std::size_t tensors_live_peak_bytes(const MemoryPlanRequest& request) {
  ArenaPlan plan;
  build_items(request, std::vector<char>(request.groups.size(), 0), false, plan);
  return live_peak(plan.items).first;
}

ArenaPlan plan_memory(const MemoryPlanRequest& request) {
  ArenaPlan plan;
  const std::vector<char> recomputed = choose_recomputed(request, plan);
  build_items(request, recomputed, true, plan);
  plan.arena_bytes = request.reuse ? place_intervals(plan.items) : 0;
  std::tie(plan.live_peak_bytes, plan.peak_step) = live_peak(plan.items);
  return plan;
}

}  // namespace cnnergy
