// The memory planner alone (net/memory_plan.hpp), on hand-built descriptors: placement at known
// offsets, the workspaces' two placements and the smaller kept, no two live intervals overlapping over
// thousands of random interval sets, and the recomputation choice (which output, rebuilt before which
// layer, in what order) against worked examples. No backend, no layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "common/tensor_testing.hpp"
#include "net/memory_plan.hpp"

using namespace cnnergy;

namespace {

PlanInterval span(int start, int end, std::size_t bytes, bool late = false) {
  return PlanInterval{start, end, bytes, 0, late};
}

std::vector<std::size_t> offsets(const std::vector<PlanInterval>& items) {
  std::vector<std::size_t> out;
  for (const auto& it : items) out.push_back(it.offset);
  return out;
}

// Every pair of intervals live at a common step lies apart in memory; every offset is 256-aligned;
// the arena holds every interval.
void expect_valid_placement(const std::vector<PlanInterval>& items, std::size_t arena) {
  for (std::size_t a = 0; a < items.size(); ++a) {
    EXPECT_EQ(items[a].offset % 256, 0u) << "interval " << a;
    EXPECT_LE(items[a].offset + items[a].bytes, arena) << "interval " << a;
    for (std::size_t b = a + 1; b < items.size(); ++b) {
      const bool same_time = items[a].start <= items[b].end && items[b].start <= items[a].end;
      const bool apart = items[a].offset + items[a].bytes <= items[b].offset ||
                         items[b].offset + items[b].bytes <= items[a].offset;
      if (same_time && items[a].bytes > 0 && items[b].bytes > 0) {
        ASSERT_TRUE(apart) << "intervals " << a << " and " << b << " overlap";
      }
    }
  }
}

// An activation group live from `start` to `forward_end` in forward and read in backward between
// backward_start and backward_end (none: -1, -1).
ActivationSpan group(int start, int forward_end, int backward_start, int backward_end, std::size_t bytes) {
  ActivationSpan g;
  g.used = true;
  g.start = start;
  g.forward_end = forward_end;
  if (backward_start >= 0) {
    g.backward_start = backward_start;
    g.backward_end = backward_end;
  }
  g.bytes = bytes;
  return g;
}

TEST(MemoryPlanner, PlacesLargestFirstAtTheLowestFreeOffset) {
  // P and Q never live together: both at 0; R lives with both: above them.
  std::vector<PlanInterval> items{span(0, 1, 4096), span(2, 3, 4096), span(1, 2, 1024)};
  EXPECT_EQ(place_intervals(items), 5120u);
  EXPECT_EQ(offsets(items), (std::vector<std::size_t>{0, 0, 4096}));
  EXPECT_EQ(live_peak(items), (std::pair<std::size_t, int>{5120, 1}));
}

TEST(MemoryPlanner, FillsTheGapBelowAPlacedInterval) {
  // A (largest) at 0, B lives with it: above it; C lives with B only and fits below it, where A was.
  std::vector<PlanInterval> items{span(0, 1, 4096), span(1, 2, 2048), span(2, 3, 1024)};
  EXPECT_EQ(place_intervals(items), 6144u);
  EXPECT_EQ(offsets(items), (std::vector<std::size_t>{0, 4096, 0}));
}

TEST(MemoryPlanner, AlignsEveryOffsetTo256Bytes) {
  std::vector<PlanInterval> items{span(0, 0, 100), span(0, 0, 100), span(0, 0, 1)};
  EXPECT_EQ(place_intervals(items), 513u);
  EXPECT_EQ(offsets(items), (std::vector<std::size_t>{0, 256, 512}));
  EXPECT_EQ(live_peak(items).first, 201u);
}

TEST(MemoryPlanner, KeepsWorkspacesAfterTheTensorsWhereThatArenaIsSmaller) {
  // By size the 5 KiB workspace would go first at 0 and push the 4 KiB tensors up (11 KiB); after
  // them it fills the gap they leave at step 1 (10 KiB).
  std::vector<PlanInterval> items{span(1, 3, 4096), span(3, 3, 4096), span(2, 2, 3072), span(3, 3, 2048),
                                  span(1, 1, 5120, true)};
  EXPECT_EQ(place_intervals(items), 10240u);
  EXPECT_EQ(offsets(items), (std::vector<std::size_t>{0, 4096, 4096, 8192, 4096}));
  EXPECT_TRUE(items.back().late);
}

TEST(MemoryPlanner, PlacesAWorkspaceBySizeWhereThatArenaIsSmaller) {
  // Placed last the workspace finds no gap at step 0 below 4 KiB (9 KiB); by size it goes first at 0
  // and the tensors fit around it: 7 KiB, the most live at step 0 (no placement uses less).
  std::vector<PlanInterval> items{span(1, 1, 3072), span(0, 0, 1024), span(0, 3, 1024), span(2, 2, 3072),
                                  span(0, 0, 5120, true)};
  EXPECT_EQ(place_intervals(items), 7168u);
  EXPECT_EQ(offsets(items), (std::vector<std::size_t>{0, 5120, 6144, 0, 0}));
  EXPECT_EQ(live_peak(items).first, 7168u);
}

class MemoryPlannerRandom : public test::SeededTest {};

TEST_F(MemoryPlannerRandom, NoTwoLiveIntervalsOverlapAndTheArenaHoldsThePeak) {
  for (int round = 0; round < 3000; ++round) {
    std::vector<PlanInterval> items(1 + rng_.engine()() % 40);
    const int steps = 2 + static_cast<int>(rng_.engine()() % 30);
    for (auto& it : items) {
      it.start = static_cast<int>(rng_.engine()() % static_cast<std::uint64_t>(steps));
      it.end = it.start + static_cast<int>(rng_.engine()() % static_cast<std::uint64_t>(steps - it.start));
      it.bytes = rng_.engine()() % 5 == 0 ? 0 : 1 + rng_.engine()() % 100000;
      it.late = rng_.engine()() % 6 == 0 && it.start == it.end;
    }
    const std::size_t arena = place_intervals(items);
    SCOPED_TRACE("round " + std::to_string(round) + ", " + std::to_string(items.size()) + " intervals");
    expect_valid_placement(items, arena);
    EXPECT_GE(arena, live_peak(items).first);
    std::size_t top = 0;
    for (const auto& it : items) top = std::max(top, it.offset + it.bytes);
    EXPECT_EQ(arena, top);
    if (HasFatalFailure()) return;
  }
}

TEST_F(MemoryPlannerRandom, PlansOfRandomNetworksAreValid) {
  for (int round = 0; round < 1000; ++round) {
    MemoryPlanRequest rq;
    rq.num_layers = 2 + static_cast<int>(rng_.engine()() % 12);
    const int last_step = 2 * rq.num_layers - 1;
    for (int i = 0; i < rq.num_layers; ++i) {
      const int forward_end = i + static_cast<int>(rng_.engine()() % static_cast<std::uint64_t>(rq.num_layers - i));
      const bool read_back = rng_.engine()() % 2 == 0;
      const int back = last_step - i;  // its producer's backward at the latest
      const int back_start = forward_end + 1 + static_cast<int>(rng_.engine()() % static_cast<std::uint64_t>(back - forward_end));
      rq.groups.push_back(group(i, forward_end, read_back ? back_start : -1, read_back ? back : -1,
                                1 + rng_.engine()() % 50000));
      if (i > 0 && rng_.engine()() % 3 == 0)
        rq.recompute_options.push_back(RecomputeOption{i, i - 1, i - 1, i, rq.groups[static_cast<std::size_t>(i - 1)].bytes});
      rq.gradients.push_back(span(rq.num_layers + static_cast<int>(rng_.engine()() % static_cast<std::uint64_t>(rq.num_layers)),
                                  last_step, 1 + rng_.engine()() % 50000));
      rq.forward_workspace_bytes.push_back(rng_.engine()() % 3 == 0 ? rng_.engine()() % 70000 : 0);
      rq.backward_workspace_bytes.push_back(rng_.engine()() % 3 == 0 ? rng_.engine()() % 70000 : 0);
    }
    if (rng_.engine()() % 2 == 0) rq.activation_budget_bytes = rng_.engine()() % 200000;
    SCOPED_TRACE("round " + std::to_string(round));
    const ArenaPlan plan = plan_memory(rq);
    expect_valid_placement(plan.items, plan.arena_bytes);
    EXPECT_GE(plan.arena_bytes, plan.live_peak_bytes);
    EXPECT_EQ(live_peak(plan.items), (std::pair{plan.live_peak_bytes, plan.peak_step}));
    // Tensors alone never need more than the plan with its workspaces (recomputation only lowers them).
    if (!rq.activation_budget_bytes) {
      EXPECT_LE(tensors_live_peak_bytes(rq), plan.live_peak_bytes);
    }
    for (const auto& r : plan.recomputed) {  // never a rebuild from an output rebuilt itself
      const RecomputeOption& o = rq.recompute_options.at(r.option);
      EXPECT_LT(plan.backward_item.at(static_cast<std::size_t>(o.input_group)), 0);
      EXPECT_GE(plan.backward_item.at(static_cast<std::size_t>(o.group)), 0);
    }
    if (HasFatalFailure()) return;
  }
}

TEST(MemoryPlanner, RecomputesTheOptionFreeingTheMostPerByteMovedFirst) {
  // Four layers (steps 0-3 forward, 4-7 backward: layer i's backward is step 7 - i); the most is live
  // at step 3. Option A rebuilds group 1 (6000 bytes, first read in backward at step 6) from group 0
  // (6000 bytes): 0.5 freed per byte moved. Option B rebuilds group 2 (4000 bytes, read at step 5) from
  // group 4 (1000 bytes): 0.8. B goes first, rebuilt before the backward of layer 2 (step 5).
  MemoryPlanRequest rq;
  rq.num_layers = 4;
  rq.groups = {group(0, 1, 6, 7, 6000), group(1, 1, 6, 6, 6000), group(2, 2, 5, 5, 4000), group(3, 3, -1, -1, 100),
               group(0, 2, 5, 5, 1000)};
  rq.recompute_options = {RecomputeOption{1, 0, 0, 1, 6000}, RecomputeOption{2, 4, 4, 2, 1000}};
  const std::size_t all = 6000 + 6000 + 4000 + 100 + 1000;  // live at step 3
  EXPECT_EQ(tensors_live_peak_bytes(rq), all);
  rq.activation_budget_bytes = all - 1;
  ArenaPlan plan = plan_memory(rq);
  ASSERT_EQ(plan.recomputed.size(), 1u);
  EXPECT_EQ(plan.recomputed[0].option, 1u);
  EXPECT_EQ(plan.recomputed[0].before_layer, 2);
  EXPECT_EQ(plan.backward_item[2], plan.group_item[2] + 1);
  EXPECT_EQ(plan.items[static_cast<std::size_t>(plan.group_item[2])].end, 2);
  EXPECT_EQ(plan.items[static_cast<std::size_t>(plan.backward_item[2])].start, 5);
  EXPECT_EQ(plan.backward_item[1], -1);
  EXPECT_EQ(plan.live_peak_bytes, 17000u);  // steps 2 and 5 now
  EXPECT_EQ(plan.peak_step, 2);
  // A budget that one rebuild does not meet takes A too, before the backward of layer 1 (step 6).
  rq.activation_budget_bytes = 0;
  plan = plan_memory(rq);
  ASSERT_EQ(plan.recomputed.size(), 2u);
  EXPECT_EQ(plan.recomputed[1].option, 0u);
  EXPECT_EQ(plan.recomputed[1].before_layer, 1);
  EXPECT_EQ(plan.live_peak_bytes, 13000u);  // step 1: groups 0, 1 and 4
  // Within the budget, or unset, or without reuse: nothing.
  for (const auto& budget : {std::optional<std::size_t>{all}, std::optional<std::size_t>{}}) {
    rq.activation_budget_bytes = budget;
    EXPECT_TRUE(plan_memory(rq).recomputed.empty());
  }
  rq.activation_budget_bytes = 0;
  rq.reuse = false;
  EXPECT_TRUE(plan_memory(rq).recomputed.empty());
  EXPECT_EQ(plan_memory(rq).arena_bytes, 0u);
}

TEST(MemoryPlanner, NeverRebuildsFromARebuiltOutputNorOneNotLiveAtThePeak) {
  // Five layers (backward of layer i: step 9 - i), the most live at step 4. Option 0 rebuilds group 1
  // from group 0, option 1 group 2 from group 1, option 2 group 3 from group 2; group 3's forward
  // reaches step 4, so dropping it frees nothing there. Options 0 and 1 form a chain: one only.
  MemoryPlanRequest rq;
  rq.num_layers = 5;
  rq.groups = {group(0, 1, 8, 9, 1000), group(1, 2, 7, 8, 5000), group(2, 3, 6, 7, 5000), group(3, 4, 6, 6, 9000),
               group(4, 4, -1, -1, 10)};
  rq.recompute_options = {RecomputeOption{1, 0, 0, 1, 1000}, RecomputeOption{2, 1, 1, 2, 5000},
                          RecomputeOption{3, 2, 2, 3, 5000}};
  rq.activation_budget_bytes = 0;
  ArenaPlan plan = plan_memory(rq);  // option 0 first (5/6 freed per byte moved against 1/2)
  ASSERT_EQ(plan.recomputed.size(), 1u);
  EXPECT_EQ(plan.recomputed[0].option, 0u);
  EXPECT_GE(plan.backward_item[1], 0);
  EXPECT_EQ(plan.backward_item[2], -1);  // its input is rebuilt itself
  EXPECT_EQ(plan.backward_item[3], -1);  // not freed at the peak
  // The other way round: option 1 first (its input said to be small), then option 0's output is
  // what option 1 rebuilds from.
  rq.recompute_options[1].input_bytes = 100;
  plan = plan_memory(rq);
  ASSERT_EQ(plan.recomputed.size(), 1u);
  EXPECT_EQ(plan.recomputed[0].option, 1u);
  EXPECT_EQ(plan.backward_item[1], -1);
  EXPECT_GE(plan.backward_item[2], 0);
}

TEST(MemoryPlanner, ListsGroupsThenGradientsThenWorkspaces) {
  MemoryPlanRequest rq;
  rq.num_layers = 3;  // backward of layer i: step 5 - i
  rq.groups = {ActivationSpan{}, group(0, 1, 4, 5, 512), group(1, 2, -1, -1, 256)};
  rq.gradients = {span(3, 4, 512), span(4, 5, 256)};
  rq.forward_workspace_bytes = {0, 1024, 0};
  rq.backward_workspace_bytes = {2048, 0, 0};
  const ArenaPlan plan = plan_memory(rq);
  ASSERT_EQ(plan.items.size(), 6u);
  EXPECT_EQ(plan.group_item, (std::vector<int>{-1, 0, 1}));
  EXPECT_EQ(plan.items[0].end, 5);  // read in backward: lives to its last backward reader
  EXPECT_EQ(plan.items[1].end, 2);
  EXPECT_EQ(plan.gradient_base, 2u);
  // Per layer in layer order, forward before backward: layer 0's backward, then layer 1's forward.
  EXPECT_EQ(plan.backward_workspace_item, (std::vector<int>{4, -1, -1}));
  EXPECT_EQ(plan.forward_workspace_item, (std::vector<int>{-1, 5, -1}));
  EXPECT_EQ(plan.items[4].start, 5);  // layer 0's backward step
  EXPECT_EQ(plan.items[5].start, 1);
  EXPECT_TRUE(plan.items[4].late && plan.items[5].late);
  // The tensors' own peak leaves the workspaces out: 512 + 512 + 256 at step 4 against 512 + 256 +
  // 2048 at step 5 with them.
  EXPECT_EQ(tensors_live_peak_bytes(rq), 1280u);
  EXPECT_EQ(plan.live_peak_bytes, 2816u);
  EXPECT_EQ(plan.peak_step, 5);
}

}  // namespace
