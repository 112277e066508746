// measure_phase_energy(): the isolation windows and the arithmetic between them.
#include "measure/phase_energy.hpp"

#include "net/executor.hpp"
#include "net/solver.hpp"

namespace cnnergy {

namespace {
double spread(const Summary& s) { return s.max - s.min; }
double energy_or_zero(const WindowResult& w) { return w.joules_per_iteration ? w.joules_per_iteration->median : 0; }
}  // namespace

PhaseEnergyReport measure_phase_energy(Executor& executor, SgdSolver& solver, EnergyProbe* probe,
                                       const std::function<void()>& load_batch,
                                       const std::function<void()>& real_iteration, const WindowSpec& spec) {
  Backend& backend = executor.backend();
  PhaseEnergyReport r;
  r.forward = measure_windows(backend, probe, [&] { executor.forward(Phase::kTrain); }, spec);
  r.forward_backward = measure_windows(
      backend, probe,
      [&] {
        executor.forward(Phase::kTrain);
        executor.backward(solver.loss_scale());
      },
      spec);
  r.step = measure_windows(
      backend, probe,
      [&] {
        executor.forward(Phase::kTrain);
        executor.backward(solver.loss_scale());
        solver.step();
      },
      spec);
  r.update = measure_windows(backend, probe, [&] { solver.step(); }, spec);
  if (load_batch) r.load = measure_windows(backend, probe, load_batch, spec);
  if (real_iteration) r.real_iteration = measure_windows(backend, probe, real_iteration, spec);

  const bool metered = r.forward.joules_per_iteration && r.forward_backward.joules_per_iteration &&
                       r.step.joules_per_iteration && r.update.joules_per_iteration;
  auto figure = [&](const std::string& name, const WindowResult& a, const WindowResult* minus) {
    PhaseFigure f;
    f.name = name;
    f.ms_per_iteration = a.ms_per_iteration.median - (minus ? minus->ms_per_iteration.median : 0);
    f.ms_spread = spread(a.ms_per_iteration) + (minus ? spread(minus->ms_per_iteration) : 0);
    if (metered) {
      f.joules_per_iteration = energy_or_zero(a) - (minus ? energy_or_zero(*minus) : 0);
      f.joules_spread = spread(*a.joules_per_iteration) + (minus ? spread(*minus->joules_per_iteration) : 0);
    }
    return f;
  };
  r.phases.push_back(figure("forward", r.forward, nullptr));
  r.phases.push_back(figure("backward", r.forward_backward, &r.forward));
  r.phases.push_back(figure("update", r.update, nullptr));
  if (load_batch) r.phases.push_back(figure("load (alone)", r.load, nullptr));

  const double sum_ms = r.phases[0].ms_per_iteration + r.phases[1].ms_per_iteration + r.phases[2].ms_per_iteration;
  r.time_gap_vs_step = sum_ms / r.step.ms_per_iteration.median - 1.0;
  if (real_iteration) r.time_gap_vs_real = sum_ms / r.real_iteration.ms_per_iteration.median - 1.0;
  if (metered) {
    const double sum_j =
        *r.phases[0].joules_per_iteration + *r.phases[1].joules_per_iteration + *r.phases[2].joules_per_iteration;
    r.energy_gap_vs_step = sum_j / energy_or_zero(r.step) - 1.0;
    if (real_iteration && r.real_iteration.joules_per_iteration)
      r.energy_gap_vs_real = sum_j / energy_or_zero(r.real_iteration) - 1.0;
  }
  return r;
}

}  // namespace cnnergy
