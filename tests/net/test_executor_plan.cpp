// The executor's memory plan on real networks, pinned: where every activation and gradient sits in
// the arena (or which buffer it has), the arena's size, what is recomputed and the memory report, for
// zoo networks on the CPU backend in training, recomputation, folded inference and no-reuse settings.
// The fingerprints were recorded from the executor before its planning moved into net/memory_plan;
// a change of any offset, size or choice changes them. (Regenerate only for an intended plan change:
// the failure message prints the new fingerprint.)
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "core/hash.hpp"
#include "net/zoo/zoo.hpp"
#include "net_testing.hpp"

using namespace cnnergy;
using namespace cnnergy::test;

namespace {

// Every tensor's storage (buffer, in first-seen order, and offset) and the memory report, as text.
std::string plan_text(const Executor& ex) {
  std::map<const void*, std::size_t> buffers;
  auto where = [&](const Tensor& t) {
    if (!t.defined()) return std::string("-");
    auto [it, fresh] = buffers.emplace(t.buffer().get(), buffers.size());
    return std::to_string(it->second) + "@" + std::to_string(t.offset_bytes()) + "+" + std::to_string(t.size_bytes());
  };
  std::string s;
  for (std::size_t t = 1; t < ex.graph().num_tensors(); ++t)
    s += std::to_string(t) + ":" + where(ex.activation(static_cast<int>(t))) + "/" +
         where(ex.gradient(static_cast<int>(t))) + ";";
  const MemoryReport& m = ex.memory();
  s += "|arena " + std::to_string(m.activation_bytes) + " peak " + std::to_string(m.live_peak_bytes) + " naive " +
       std::to_string(m.naive_bytes) + " buffers " + std::to_string(m.num_buffers) + " recomputed " +
       std::to_string(m.recomputed_outputs) + "/" + std::to_string(m.recomputed_bytes) + " workspaces " +
       std::to_string(m.arena_workspaces) + "/" + std::to_string(m.arena_workspace_bytes) + " at " + m.peak_step;
  for (const auto& l : m.live_at_peak) s += "|" + l.what + " " + std::to_string(l.bytes);
  return s;
}

struct Case {
  const char* name;
  const char* model;
  Shape input;
  std::int64_t batch;
  bool training, reuse, fold;
  std::optional<std::size_t> budget;  // activation_budget_bytes
  std::size_t arena_bytes;            // MemoryReport::activation_bytes, recorded
  std::uint64_t fingerprint;          // fnv1a64(plan_text), recorded
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ExecutorPlan : public ::testing::TestWithParam<Case> {};

TEST_P(ExecutorPlan, SameAsRecorded) {
  const Case& c = GetParam();
  auto backend = cpu_backend();
  auto graph = build_model(c.model, c.input, 10);
  ExecutorOptions o;
  o.batch_size = c.batch;
  o.training = c.training;
  o.reuse_memory = c.reuse;
  o.fold_batch_norm = c.fold;
  o.activation_budget_bytes = c.budget;
  Executor ex(*graph, *backend, o);
  const std::string text = plan_text(ex);
  EXPECT_EQ(ex.memory().activation_bytes, c.arena_bytes);
  EXPECT_EQ(fnv1a64(text), c.fingerprint) << c.name << ": arena " << ex.memory().activation_bytes << ", fingerprint "
                                        << fnv1a64(text) << "ull, recomputed " << ex.memory().recomputed_outputs
                                        << "\n" << text;
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, ExecutorPlan,
    ::testing::Values(
        Case{"lenet5_train", "lenet5", Shape{1, 28, 28}, 4, true, true, false, {}, 276640, 11817445638872968462ull},
        Case{"lenet5_no_reuse", "lenet5", Shape{1, 28, 28}, 4, true, false, false, {}, 646720, 9441682476975833594ull},
        Case{"vgg16_train", "vgg16", Shape{3, 32, 32}, 2, true, true, false, {}, 1626448, 17329725599647282648ull},
        Case{"resnet34_train", "resnet34", Shape{3, 64, 64}, 2, true, true, false, {}, 4407376, 14954149665458980292ull},
        Case{"resnet34_recompute", "resnet34", Shape{3, 64, 64}, 2, true, true, false, std::size_t{0}, 3506256, 13973319331171796936ull},
        Case{"resnet34_partly_recomputed", "resnet34", Shape{3, 64, 64}, 2, true, true, false, std::size_t{4000000}, 3948624, 7093494523654072199ull},
        Case{"resnet50_train", "resnet50", Shape{3, 64, 64}, 2, true, true, false, {}, 13271120, 10342353411738862581ull},
        Case{"resnet50_recompute", "resnet50", Shape{3, 64, 64}, 2, true, true, false, std::size_t{0}, 11124816, 14555196450884152714ull},
        Case{"resnet50_folded_eval", "resnet50", Shape{3, 64, 64}, 2, false, true, true, {}, 1572864, 13707822453971312245ull},
        Case{"resnet50_eval_no_reuse", "resnet50", Shape{3, 64, 64}, 2, false, false, false, {}, 14680144, 3614458372664019775ull},
        Case{"googlenet_train", "googlenet", Shape{3, 64, 64}, 2, true, true, false, {}, 3934288, 5918579924886340885ull}),
    [](const ::testing::TestParamInfo<Case>& param_info) { return std::string(param_info.param.name); });

}  // namespace
