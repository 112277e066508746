// Checkpoints: a save/load round trip restores parameters, BN running statistics, momentum and
// solver state so that training continues bit-identically; corrupt, truncated, foreign and
// other-model files are refused with DataError.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unistd.h>

#include "core/errors.hpp"
#include "net/checkpoint.hpp"
#include "net/solver.hpp"
#include "net_testing.hpp"

using namespace cnnergy;
using namespace cnnergy::test;
namespace fs = std::filesystem;

namespace {

class Checkpoint : public SeededTest {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cnnergy_test_net_" + std::to_string(::getpid()) + "_" + std::to_string(seed_));
    fs::create_directories(dir_);
    backend_ = cpu_backend();
    graph_ = small_graph(5, "small", 0.0f);  // no dropout: continuation must be deterministic
    options_.batch_size = 3;
    solver_options_.schedule.base_lr = 0.05;
    solver_options_.momentum = 0.9;
  }
  void TearDown() override { fs::remove_all(dir_); }

  void train_step(Executor& ex, SgdSolver& s, const Tensor& images, const Tensor& labels) {
    ex.set_input(images, labels);
    ex.forward(Phase::kTrain);
    ex.backward(s.loss_scale());
    s.step();
  }
  std::vector<char> read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  void write_file(const fs::path& p, const std::vector<char>& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::string load_error(const fs::path& p, const Graph& graph) {
    Executor ex(graph, *backend_, options_);
    SgdSolver s(ex, solver_options_);
    try {
      load_checkpoint(p.string(), ex, s);
    } catch (const DataError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Graph> graph_;
  ExecutorOptions options_;
  SolverOptions solver_options_;
};

bool equal(const Tensor& a, const Tensor& b) {
  return a.size_bytes() == b.size_bytes() && std::memcmp(a.raw(), b.raw(), a.size_bytes()) == 0;
}

}  // namespace

TEST_F(Checkpoint, RoundTripContinuesIdentically) {
  Executor a(*graph_, *backend_, options_);
  a.initialize_parameters(seed_);
  SgdSolver sa(a, solver_options_);
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int i = 0; i < 3; ++i)
    batches.emplace_back(to_backend(*backend_, random_tensor({3, 3, 8, 8}, rng_)),
                         to_backend(*backend_, random_labels(3, 5, rng_)));
  train_step(a, sa, batches[0].first, batches[0].second);
  train_step(a, sa, batches[1].first, batches[1].second);
  const fs::path path = dir_ / "a.ckpt";
  save_checkpoint(path.string(), a, sa);
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
  std::vector<Tensor> saved;
  for (Parameter* p : a.parameters()) saved.push_back(clone(p->master));
  const Tensor saved_var = clone(a.buffers()[1]->tensor);

  Executor b(*graph_, *backend_, options_);
  b.initialize_parameters(seed_ + 1);
  SgdSolver sb(b, solver_options_);
  load_checkpoint(path.string(), b, sb);
  EXPECT_EQ(sb.iteration(), 2);
  EXPECT_DOUBLE_EQ(sb.learning_rate(), sa.learning_rate());
  EXPECT_EQ(sb.loss_scale(), sa.loss_scale());
  const auto pa = a.parameters(), pb = b.parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(equal(pa[i]->master, pb[i]->master)) << pa[i]->name;
    EXPECT_TRUE(equal(sa.momentum()[i], sb.momentum()[i])) << pa[i]->name << " momentum";
  }
  const auto ba = a.buffers(), bb = b.buffers();
  ASSERT_EQ(ba.size(), 2u);  // bn1 running mean and variance
  for (std::size_t i = 0; i < ba.size(); ++i) EXPECT_TRUE(equal(ba[i]->tensor, bb[i]->tensor)) << ba[i]->name;

  train_step(a, sa, batches[2].first, batches[2].second);
  train_step(b, sb, batches[2].first, batches[2].second);
  EXPECT_EQ(a.read_loss(), b.read_loss());
  for (std::size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(equal(pa[i]->master, pb[i]->master)) << pa[i]->name;

  // Parameters only, into an inference executor.
  ExecutorOptions eval = options_;
  eval.training = false;
  Executor c(*graph_, *backend_, eval);
  load_parameters(path.string(), c);
  for (std::size_t i = 0; i < saved.size(); ++i) EXPECT_TRUE(equal(c.parameters()[i]->master, saved[i])) << pa[i]->name;
  EXPECT_TRUE(equal(c.buffers()[1]->tensor, saved_var));
}

TEST_F(Checkpoint, BadFilesAreDataErrors) {
  Executor a(*graph_, *backend_, options_);
  a.initialize_parameters(seed_);
  SgdSolver sa(a, solver_options_);
  const fs::path good = dir_ / "good.ckpt";
  save_checkpoint(good.string(), a, sa);
  const auto bytes = read_file(good);
  ASSERT_GT(bytes.size(), 100u);

  std::string msg = load_error(dir_ / "missing.ckpt", *graph_);
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;

  auto corrupt = bytes;
  corrupt[bytes.size() / 2] = static_cast<char>(corrupt[bytes.size() / 2] ^ 0x5a);
  write_file(dir_ / "corrupt.ckpt", corrupt);
  msg = load_error(dir_ / "corrupt.ckpt", *graph_);
  EXPECT_NE(msg.find("checksum"), std::string::npos) << msg;

  const std::vector<char> truncated(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() * 2 / 3));
  write_file(dir_ / "truncated.ckpt", truncated);
  msg = load_error(dir_ / "truncated.ckpt", *graph_);
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

  write_file(dir_ / "foreign.ckpt", std::vector<char>{'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0, 0, 0});
  msg = load_error(dir_ / "foreign.ckpt", *graph_);
  EXPECT_NE(msg.find("not a cnnergy checkpoint"), std::string::npos) << msg;

  // Another model (other name), and the same name with other shapes (6 classes instead of 5).
  auto other = small_graph(5, "other", 0.0f);
  msg = load_error(good, *other);
  EXPECT_NE(msg.find("'small'"), std::string::npos) << msg;
  auto wider = small_graph(6, "small", 0.0f);
  msg = load_error(good, *wider);
  EXPECT_NE(msg.find("fc.weight"), std::string::npos) << msg;

  // A failed load leaves the network as it was.
  Executor b(*graph_, *backend_, options_);
  b.initialize_parameters(seed_ + 7);
  SgdSolver sb(b, solver_options_);
  const Tensor before = clone(b.parameters()[0]->master);
  EXPECT_THROW(load_checkpoint((dir_ / "truncated.ckpt").string(), b, sb), DataError);
  EXPECT_TRUE(equal(before, b.parameters()[0]->master));
}
