// Energy per training phase by isolation and repetition (Castro et al. 2019, Algorithm 1 phases): windows of
// forward only (F), forward+backward (FB), the whole step without loading (S) and the update alone
// (U), each long enough for the sensor and repeated; plus data loading alone and the real training
// iteration (R, loading included). Then forward = F, backward = FB - F, update = U, and two closure
// checks: F + (FB - F) + U against S (the isolation is additive) and against R (nothing in the real
// loop - loading, host gaps - went unaccounted). docs/methodology.md explains the assumptions.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "measure/window.hpp"

namespace cnnergy {

class Executor;
class SgdSolver;

struct PhaseFigure {
  std::string name;
  double ms_per_iteration = 0;
  double ms_spread = 0;                    // max - min over the repetitions (of the windows used)
  std::optional<double> joules_per_iteration;
  double joules_spread = 0;
};

struct PhaseEnergyReport {
  WindowResult forward, forward_backward, step, update, load, real_iteration;
  std::vector<PhaseFigure> phases;         // forward, backward, update (isolated); load (alone)
  // (forward + backward + update) / window - 1, for time and (where metered) energy.
  double time_gap_vs_step = 0, time_gap_vs_real = 0;
  std::optional<double> energy_gap_vs_step, energy_gap_vs_real;
};

// `load_batch` runs one batch of data loading on its own (pull + upload); `real_iteration` runs one
// iteration of the actual training loop (load, forward, backward, update). Either may be empty.
PhaseEnergyReport measure_phase_energy(Executor& executor, SgdSolver& solver, EnergyProbe* probe,
                                       const std::function<void()>& load_batch,
                                       const std::function<void()>& real_iteration, const WindowSpec& spec);

}  // namespace cnnergy
