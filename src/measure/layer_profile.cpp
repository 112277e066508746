// profile_layers(): event pairs around every layer's forward and backward; isolation windows for the
// hottest layers; category totals.
#include "measure/layer_profile.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>

#include "core/errors.hpp"
#include "layers/layer.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"

namespace cnnergy {

namespace {

// One timed pass: events before and after every layer's forward, then every layer's backward.
void timed_pass(Executor& ex, std::vector<std::vector<double>>& fwd, std::vector<std::vector<double>>& bwd) {
  Backend& b = ex.backend();
  const std::size_t L = ex.num_layers();
  std::vector<std::unique_ptr<DeviceEvent>> ev;
  for (std::size_t i = 0; i < 2 * L + 1; ++i) ev.push_back(b.make_event());
  ex.begin_iteration();
  ev[0]->record();
  for (std::size_t i = 0; i < L; ++i) {
    ex.forward_layer(i, Phase::kTrain);
    ev[i + 1]->record();
  }
  for (std::size_t k = 0; k < L; ++k) {
    ex.backward_layer(L - 1 - k);
    ev[L + 1 + k]->record();
  }
  ev.back()->synchronize();
  for (std::size_t i = 0; i < L; ++i) fwd[i].push_back(ev[i + 1]->elapsed_ms(*ev[i]));
  for (std::size_t k = 0; k < L; ++k) bwd[L - 1 - k].push_back(ev[L + 1 + k]->elapsed_ms(*ev[L + k]));
}

}  // namespace

LayerProfile profile_layers(Executor& ex, EnergyProbe* probe, const LayerProfileOptions& options) {
  if (options.repetitions < 1) throw InvalidArgument("profile needs at least 1 repetition");
  const std::size_t L = ex.num_layers();
  std::vector<std::vector<double>> fwd(L), bwd(L);
  for (int w = 0; w < 2; ++w) {
    std::vector<std::vector<double>> f(L), g(L);
    timed_pass(ex, f, g);
  }
  for (int r = 0; r < options.repetitions; ++r) timed_pass(ex, fwd, bwd);

  LayerProfile prof;
  const double batch = static_cast<double>(ex.batch_size());
  for (std::size_t i = 0; i < L; ++i) {
    const Layer& layer = ex.layer(i);
    LayerTiming t;
    t.name = layer.name();
    t.type = layer.type();
    t.fused_into = layer.absorbed_into();
    t.category = std::string(category_name(layer.category()));
    const Summary f = summarize(fwd[i]), g = summarize(bwd[i]);
    t.forward_ms = f.median;
    t.backward_ms = g.median;
    t.forward_spread_ms = f.max - f.min;
    t.backward_spread_ms = g.max - g.min;
    t.forward_gflop = static_cast<double>(layer.workload().flops_forward) * batch / 1e9;
    t.backward_gflop = static_cast<double>(layer.workload().flops_backward) * batch / 1e9;
    prof.forward_total_ms += t.forward_ms;
    prof.backward_total_ms += t.backward_ms;
    prof.layers.push_back(t);
  }

  std::map<std::string, CategoryShare> cats;
  for (const auto& t : prof.layers) {
    auto& c = cats[t.category];
    c.category = t.category;
    c.forward_ms += t.forward_ms;
    c.backward_ms += t.backward_ms;
  }
  const double total = prof.forward_total_ms + prof.backward_total_ms;
  for (auto& [name, c] : cats) {
    c.share = total > 0 ? (c.forward_ms + c.backward_ms) / total : 0;
    prof.categories.push_back(c);
  }
  std::sort(prof.categories.begin(), prof.categories.end(),
            [](const CategoryShare& a, const CategoryShare& b) { return a.share > b.share; });

  if (probe && options.energy_top > 0) {
    std::vector<std::size_t> order(L);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return prof.layers[a].forward_ms + prof.layers[a].backward_ms >
             prof.layers[b].forward_ms + prof.layers[b].backward_ms;
    });
    order.resize(std::min<std::size_t>(L, static_cast<std::size_t>(options.energy_top)));
    for (std::size_t i : order) {
      // Forward of layer i repeated: its inputs stay as the last full forward left them.
      ex.forward(Phase::kTrain);
      const auto wf = measure_windows(ex.backend(), probe, [&] { ex.forward_layer(i, Phase::kTrain); }, options.energy_window);
      if (wf.joules_per_iteration) prof.layers[i].forward_joules = wf.joules_per_iteration->median;
      // Backward of layer i repeated after a forward and the backward of the layers after it.
      ex.forward(Phase::kTrain);
      for (std::size_t k = L; k-- > i + 1;) ex.backward_layer(k);
      const auto wb = measure_windows(ex.backend(), probe, [&] { ex.backward_layer(i); }, options.energy_window);
      if (wb.joules_per_iteration) prof.layers[i].backward_joules = wb.joules_per_iteration->median;
    }
    if (order.size() == L) {
      const auto whole = measure_windows(ex.backend(), probe, [&] { ex.forward(Phase::kTrain); }, options.energy_window);
      double sum = 0;
      for (const auto& t : prof.layers) sum += t.forward_joules.value_or(0);
      if (whole.joules_per_iteration && whole.joules_per_iteration->median > 0)
        prof.energy_gap_forward = sum / whole.joules_per_iteration->median - 1.0;
    }
  }
  return prof;
}

}  // namespace cnnergy
