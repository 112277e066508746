// Helpers for the data-parallel tests: LeNet-5 on small synthetic data, a scratch directory, and
// loading a checkpoint's weights to compare two runs element by element.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.hpp"
#include "data/dataset.hpp"
#include "net/checkpoint.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"
#include "net/zoo/zoo.hpp"

namespace cnnergy::test {

inline const char* kLenetData = "synthetic:1x28x28:classes=10:size=256:test_size=64";

// A fresh directory under the system temp dir, removed with the object.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    path_ = std::filesystem::temp_directory_path() /
            ("cnnergy_dist_" + tag + "_" + std::to_string(::getpid()) + "_" +
             std::to_string(counter()++));
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::filesystem::path path_;
};

// Every parameter master of a checkpoint of `graph`, as host fp32 vectors in parameter order.
inline std::vector<std::vector<float>> checkpoint_weights(const Graph& graph,
                                                          const std::string& path) {
  BackendOptions o;
  auto backend = create_backend(o);
  ExecutorOptions eo;
  eo.batch_size = 1;
  eo.training = false;
  Executor ex(graph, *backend, eo);
  load_parameters(path, ex);
  std::vector<std::vector<float>> out;
  for (Parameter* p : ex.parameters()) {
    Tensor host = Tensor::host(p->master.shape());
    backend->download(p->master, host);
    out.emplace_back(host.f32().begin(), host.f32().end());
  }
  return out;
}

// Largest |a - b| / (abs_tol + rel_tol * |b|) over all weights; <= 1 means "equal within
// tolerance".
inline double weight_mismatch(const std::vector<std::vector<float>>& a,
                              const std::vector<std::vector<float>>& b, double abs_tol,
                              double rel_tol) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].size(), b[i].size());
    for (std::size_t k = 0; k < a[i].size() && k < b[i].size(); ++k) {
      const double d = std::fabs(static_cast<double>(a[i][k]) - b[i][k]) /
                       (abs_tol + rel_tol * std::fabs(b[i][k]));
      worst = std::max(worst, d);
    }
  }
  return worst;
}

// ||a - b|| / ||b - init|| over all weights: how far apart two trainings from the same initial
// weights ended, as a part of how far they trained. Two trainings that differ only in summation
// order (N replicas against one process) mostly agree to rounding, but a ReLU or a max-pool whose
// inputs lie within rounding of each other can switch in one and not the other, and what follows
// it drifts apart (CNNERGY_SEED=6061058930156647789: 4 % of LeNet-5's weights beyond 1e-5 + 1e-4 |w|,
// up to 20x). An actual error (gradients not averaged, a shard read twice, a bucket not reduced)
// moves the weights differently by an amount of the order of the training itself.
inline double divergence_from(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                              const std::vector<std::vector<float>>& init) {
  double diff = 0, moved = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size() && i < init.size(); ++i)
    for (std::size_t k = 0; k < a[i].size() && k < b[i].size() && k < init[i].size(); ++k) {
      const double d = static_cast<double>(a[i][k]) - b[i][k], m = static_cast<double>(b[i][k]) - init[i][k];
      diff += d * d;
      moved += m * m;
    }
  return moved > 0 ? std::sqrt(diff / moved) : INFINITY;
}

// Largest weight change between two checkpoints' weights (to check that training did move them).
inline double max_change(const std::vector<std::vector<float>>& a,
                         const std::vector<std::vector<float>>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    for (std::size_t k = 0; k < a[i].size() && k < b[i].size(); ++k)
      worst = std::max(worst, std::fabs(static_cast<double>(a[i][k]) - b[i][k]));
  return worst;
}

}  // namespace cnnergy::test
