// Per-iteration phase times from device events (Castro et al. 2019, Algorithm 1: load, forward, backward,
// update), without stalling the training loop: each iteration records one event per phase boundary
// into a ring of event sets, and a set is read back only when the ring wraps around, `depth`
// iterations later, by which time the device has long finished it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.hpp"

namespace cnnergy {

class PhaseTimer {
 public:
  // phase_names: e.g. {"load", "forward", "backward", "update"}. depth >= 2.
  PhaseTimer(Backend& backend, std::vector<std::string> phase_names, std::size_t depth = 32);

  void begin_iteration();          // records the start event of a new iteration
  void end_phase(std::size_t p);   // records the end of phase p (phases in order, each once)
  void end_iteration();            // closes the iteration (all phases must have ended)
  void flush();                    // waits for and harvests every pending iteration

  const std::vector<std::string>& phase_names() const { return names_; }
  // Harvested samples: per phase, one duration (ms) per completed iteration; and whole iterations.
  const std::vector<std::vector<double>>& phase_ms() const { return phase_ms_; }
  const std::vector<double>& iteration_ms() const { return iteration_ms_; }
  void clear();                    // forget harvested samples (e.g. after warm-up)

 private:
  struct Slot {
    std::vector<std::unique_ptr<DeviceEvent>> events;  // start + one per phase
    bool pending = false;
  };
  void harvest(Slot& slot);

  std::vector<std::string> names_;
  std::vector<Slot> ring_;
  std::size_t next_ = 0;
  std::size_t current_ = 0;
  std::size_t phase_cursor_ = 0;
  bool open_ = false;
  std::vector<std::vector<double>> phase_ms_;
  std::vector<double> iteration_ms_;
};

}  // namespace cnnergy
