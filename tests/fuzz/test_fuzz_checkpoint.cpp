// Mutation fuzzing of the checkpoint loader (net/checkpoint.hpp), in process: seeds are checkpoints
// written by save_checkpoint for the zoo's LeNet-5 (at a 16x16 input) and for a small ResNet (the zoo's
// basic block, scaled down: the zoo's ResNets make 87+ MB files, too large for 1,000 inputs in CI). Every mutant is
// loaded twice in a forked child: as it is (the checksum refuses most), and with its trailing FNV-1a
// checksum recomputed so that the structural checks (lengths, ranks, counts, names, values) see it.
// Also the dist-train baseline file (JSON numbers range-checked before their casts).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "backend/ops.hpp"
#include "core/errors.hpp"
#include "data/data_test_util.hpp"
#include "fuzz/fuzz_harness.hpp"
#include "net/checkpoint.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"
#include "net/graph_builder.hpp"
#include "net/solver.hpp"
#include "net/zoo/zoo.hpp"
#include "train/parallel/scaling.hpp"

namespace cnnergy::fuzz {
namespace {

namespace fs = std::filesystem;
using data::testing::TempDir;

constexpr std::size_t kCiInputs = 1000;  // over the two models (each input is loaded three times)

// ResNet's shape at a size that fits a test: conv-BN-ReLU stem, a basic block with the identity
// shortcut and one with a 1x1 projection + BN, global average pooling, fc.
std::unique_ptr<Graph> small_resnet() {
  GraphBuilder b("resnet_small", Shape{3, 16, 16}, 10);
  auto conv_bn = [&](GraphBuilder::Node x, const std::string& n, std::int64_t out, std::int64_t k,
                     std::int64_t stride) {
    return b.batch_norm(b.conv(x, n + ".conv", ConvSpec::make(out, k, stride, k / 2, 1, false)), n + ".bn");
  };
  auto x = b.relu(conv_bn(b.input(), "stem", 8, 3, 1), "stem.relu");
  auto y = b.relu(conv_bn(x, "layer1.0.a", 8, 3, 1), "layer1.0.relu1");
  x = b.relu(b.add(conv_bn(y, "layer1.0.b", 8, 3, 1), x, "layer1.0.add"), "layer1.0.relu");
  y = b.relu(conv_bn(x, "layer2.0.a", 16, 3, 2), "layer2.0.relu1");
  x = b.relu(b.add(conv_bn(y, "layer2.0.b", 16, 3, 1), conv_bn(x, "layer2.0.downsample", 16, 1, 2), "layer2.0.add"),
             "layer2.0.relu");
  b.softmax_loss(b.fc(b.global_avg_pool(x, "avgpool"), "fc", 10));
  return b.build();
}

std::uint64_t fnv1a64(const std::uint8_t* data, std::size_t size) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 0x100000001b3ull;
  return h;
}

// The input with its last 8 bytes replaced by the checksum of the others (as save_checkpoint writes it).
Bytes with_valid_checksum(Bytes b) {
  if (b.size() < 16) return b;
  const std::uint64_t h = fnv1a64(b.data(), b.size() - 8);
  for (int i = 0; i < 8; ++i) b[b.size() - 8 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(h >> (8 * i));
  return b;
}

struct Model {
  std::string label;
  std::unique_ptr<Graph> graph;
};

void fuzz_model(const Model& m, std::size_t* total) {
  BackendOptions bo;
  bo.device = Device{};
  const auto backend = create_backend(bo);
  ExecutorOptions eo;
  eo.batch_size = 2;
  Executor train(*m.graph, *backend, eo);
  SolverOptions so;
  so.schedule.base_lr = 0.01;
  SgdSolver solver(train, so);
  train.initialize_parameters(7);
  eo.training = false;
  Executor eval(*m.graph, *backend, eo);  // load_parameters: inference from a training checkpoint

  TempDir dir;
  const std::string seed_path = (dir / "seed.ckpt").string();
  save_checkpoint(seed_path, train, solver);
  const Bytes seed = read_all(seed_path);
  const std::string target = (dir / "fuzz.ckpt").string();

  FuzzOptions o;
  o.inputs = input_count(kCiInputs / 2);
  o.failures_dir = fs::path(CNNERGY_TEST_BUILD_DIR) / "fuzz-failures";
  o.memory_budget_bytes = 64ull << 20;  // beyond 64x the input: the loader holds the file and one tensor
  // A failure names which load failed; the parent's executors are copies in each child (fork), so a
  // partial load never reaches the next input.
  const ParseFn parse = [&](const Bytes& in) {
    write_all(target, in);
    try {
      load_checkpoint(target, train, solver);
    } catch (const Error&) {
    }
    const Bytes fixed = with_valid_checksum(in);
    write_all(target, fixed);
    try {
      load_parameters(target, eval);
    } catch (const Error&) {
    }
    load_checkpoint(target, train, solver);
  };
  const std::string parser = "checkpoint-" + m.label;
  const FuzzReport replay = replay_regressions(parser, parse, o);
  const FuzzReport r = run_fuzz(parser, {seed}, parse, o, fuzz_seed());
  for (const FuzzReport* x : {&replay, &r}) {
    std::printf("[fuzz] %-22s %6zu inputs: %zu accepted, %zu clean typed errors, %zu failures (seed %zu bytes)\n",
                x->parser.c_str(), x->inputs, x->accepted, x->typed_errors, x->failures.size(), seed.size());
    for (const auto& f : x->failures) ADD_FAILURE() << x->parser << ": " << f;
  }
  EXPECT_GE(r.inputs, o.inputs);
  // The checksum refuses almost every raw mutant; the recomputed one must let some through to the
  // value and shape checks, and some mutants (a flipped low mantissa bit) load.
  EXPECT_GT(r.typed_errors, 0u);
  *total += r.inputs;
}

TEST(Fuzz, CheckpointsOfLenet5AndASmallResnet) {
  std::size_t total = 0;
  // LeNet-5 at 1x16x16: the zoo's layers with a 50-wide fc1 input (at 1x28x28 the 3.4 MB file makes
  // each input ~5x slower and adds no structure to fuzz).
  fuzz_model({"lenet5", build_model("lenet5", Shape{1, 16, 16})}, &total);
  fuzz_model({"resnet", small_resnet()}, &total);
  std::printf("[fuzz] checkpoint: %zu mutated inputs over 2 models, each loaded as is and with its checksum fixed\n",
              total);
  EXPECT_GE(total, 2 * input_count(kCiInputs / 2));
}

// `dist-train --baseline`: an earlier run's --json, every number range-checked before its cast
// (world_size 1e300 or global_batch 9.3e18 once printed wrapped integers).
TEST(Fuzz, DistTrainBaseline) {
  const std::string seed = R"({"model": "lenet5", "world_size": 1, "global_batch": 64, "samples_per_s": 1234.5,
    "joules_per_sample": 0.0125, "epochs": [{"epoch": 1, "train_loss": 0.5}]})";
  FuzzOptions o;
  o.inputs = input_count(kCiInputs);
  o.failures_dir = fs::path(CNNERGY_TEST_BUILD_DIR) / "fuzz-failures";
  const ParseFn parse = [](const Bytes& in) {
    const dist::BaselineFigures b = dist::baseline_from_text(std::string(in.begin(), in.end()), "fuzz");
    if (b.world_size < 1 || b.global_batch < 1 || !(b.samples_per_s > 0))
      throw std::logic_error("an impossible baseline was accepted");  // untyped: a failure
  };
  const FuzzReport replay = replay_regressions("baseline", parse, o);
  const FuzzReport r = run_fuzz("baseline", {Bytes(seed.begin(), seed.end())}, parse, o, fuzz_seed());
  for (const FuzzReport* x : {&replay, &r}) {
    std::printf("[fuzz] %-22s %6zu inputs: %zu accepted, %zu clean typed errors, %zu failures\n", x->parser.c_str(),
                x->inputs, x->accepted, x->typed_errors, x->failures.size());
    for (const auto& f : x->failures) ADD_FAILURE() << x->parser << ": " << f;
  }
  EXPECT_GE(r.inputs, o.inputs);
  EXPECT_GT(r.typed_errors, 0u);
}

}  // namespace
}  // namespace cnnergy::fuzz
