// Per-layer profile (like `caffe time`, Li et al. 2016's hotspot analysis): forward and backward time of
// every layer from device events around each layer, median over repetitions; energy of chosen
// layers by isolated repetition (the layer's forward, or its backward, run back to back in a window
// long enough for the sensor); and a summary by layer category (conv, pool, relu, fc, norm, ...).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "measure/window.hpp"

namespace cnnergy {

class Executor;

struct LayerTiming {
  std::string name, type, category;
  std::string fused_into;  // an absorbed ReLU: the layer whose time includes it ("" otherwise)
  double forward_ms = 0, backward_ms = 0;            // medians
  double forward_spread_ms = 0, backward_spread_ms = 0;
  std::optional<double> forward_joules, backward_joules;  // isolated repetition, per call
  double forward_gflop = 0, backward_gflop = 0;      // from the layer's workload at this batch
};

struct CategoryShare {
  std::string category;
  double forward_ms = 0, backward_ms = 0;
  double share = 0;  // of forward + backward time of all layers
};

struct LayerProfile {
  std::vector<LayerTiming> layers;
  std::vector<CategoryShare> categories;  // sorted by share, largest first
  double forward_total_ms = 0, backward_total_ms = 0;
  std::optional<double> energy_gap_forward;  // sum of isolated layer energies vs a whole forward
};

struct LayerProfileOptions {
  int repetitions = 10;           // timed passes (after 2 warm-up passes)
  std::int64_t energy_top = 0;    // layers (largest forward+backward time first) whose energy to isolate
  WindowSpec energy_window{0.5, 3, 3, 1};
};

LayerProfile profile_layers(Executor& executor, EnergyProbe* probe, const LayerProfileOptions& options);

}  // namespace cnnergy
