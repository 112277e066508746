// bench_train_throughput's --host-layers: the host time spent inside each layer's calls, summed per
// pass and layer category from the executor's before- and after-layer hook.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "net/executor.hpp"

namespace cnnergy::bench {

// --host-layers: host time inside one pass's calls of one layer category, per timed iteration.
struct LayerHostTime {
  std::string pass;      // "forward" or "backward"
  std::string category;  // category_name() of the layers, or "total" (the whole pass)
  std::int64_t calls = 0;  // layer calls per iteration (fused ReLUs and no-op backwards included)
  double host_us_per_iter = 0;
};

// Sums the host time between the executor's before- and after-layer hook calls, per layer and pass,
// while alive (the hook is installed on construction and removed on destruction).
class LayerHostClock {
 public:
  explicit LayerHostClock(Executor& exec) : exec_(exec), us_{}, calls_{} {
    for (int p = 0; p < 2; ++p) {
      us_[p].assign(exec.num_layers(), 0.0);
      calls_[p].assign(exec.num_layers(), 0);
    }
    exec_.set_hook([this](std::size_t layer, Pass pass, bool after) {
      const auto now = std::chrono::steady_clock::now();
      if (!after) {
        start_ = now;
        return;
      }
      const int p = pass == Pass::kForward ? 0 : 1;
      us_[p][layer] += std::chrono::duration<double, std::micro>(now - start_).count();
      ++calls_[p][layer];
    });
  }
  ~LayerHostClock() { exec_.set_hook(LayerHook{}); }
  LayerHostClock(const LayerHostClock&) = delete;
  LayerHostClock& operator=(const LayerHostClock&) = delete;

  // Per pass: categories by host time (most first), then the pass total.
  std::vector<LayerHostTime> summary(int iters) const {
    std::vector<LayerHostTime> rows;
    for (int p = 0; p < 2; ++p) {
      const std::string pass = p == 0 ? "forward" : "backward";
      std::map<std::string, LayerHostTime> by_category;
      LayerHostTime total{pass, "total"};
      for (std::size_t i = 0; i < us_[p].size(); ++i) {
        auto& row = by_category[std::string(category_name(exec_.layer(i).category()))];
        row.calls += calls_[p][i];
        row.host_us_per_iter += us_[p][i];
        total.calls += calls_[p][i];
        total.host_us_per_iter += us_[p][i];
      }
      std::vector<LayerHostTime> pass_rows;
      for (auto& [category, row] : by_category) {
        if (row.calls == 0) continue;
        row.pass = pass;
        row.category = category;
        pass_rows.push_back(row);
      }
      std::sort(pass_rows.begin(), pass_rows.end(), [](const LayerHostTime& a, const LayerHostTime& b) {
        return a.host_us_per_iter > b.host_us_per_iter;
      });
      pass_rows.push_back(total);
      for (auto& row : pass_rows) {
        row.calls /= iters;
        row.host_us_per_iter /= iters;
        rows.push_back(row);
      }
    }
    return rows;
  }

 private:
  Executor& exec_;
  std::vector<double> us_[2];           // summed host microseconds, per pass and layer
  std::vector<std::int64_t> calls_[2];  // calls, per pass and layer
  std::chrono::steady_clock::time_point start_;
};

}  // namespace cnnergy::bench
