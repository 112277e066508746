// PhaseTimer implementation.
#include "measure/phase_timer.hpp"

#include "core/errors.hpp"

namespace cnnergy {

PhaseTimer::PhaseTimer(Backend& backend, std::vector<std::string> phase_names, std::size_t depth)
    : names_(std::move(phase_names)), ring_(depth < 2 ? 2 : depth), phase_ms_(names_.size()) {
  for (auto& slot : ring_)
    for (std::size_t i = 0; i <= names_.size(); ++i) slot.events.push_back(backend.make_event());
}

void PhaseTimer::begin_iteration() {
  CNNERGY_CHECK(!open_, "begin_iteration() twice without end_iteration()");
  current_ = next_;
  next_ = (next_ + 1) % ring_.size();
  Slot& slot = ring_[current_];
  if (slot.pending) harvest(slot);
  slot.events[0]->record();
  phase_cursor_ = 0;
  open_ = true;
}

void PhaseTimer::end_phase(std::size_t p) {
  CNNERGY_CHECK(open_ && p == phase_cursor_ && p < names_.size(), "phases must end in order");
  ring_[current_].events[p + 1]->record();
  ++phase_cursor_;
}

void PhaseTimer::end_iteration() {
  CNNERGY_CHECK(open_ && phase_cursor_ == names_.size(), "end_iteration() before every phase ended");
  ring_[current_].pending = true;
  open_ = false;
}

void PhaseTimer::harvest(Slot& slot) {
  slot.events.back()->synchronize();
  for (std::size_t p = 0; p < names_.size(); ++p)
    phase_ms_[p].push_back(slot.events[p + 1]->elapsed_ms(*slot.events[p]));
  iteration_ms_.push_back(slot.events.back()->elapsed_ms(*slot.events.front()));
  slot.pending = false;
}

void PhaseTimer::flush() {
  // Oldest first, so samples stay in iteration order.
  for (std::size_t k = 0; k < ring_.size(); ++k) {
    Slot& slot = ring_[(next_ + k) % ring_.size()];
    if (slot.pending) harvest(slot);
  }
}

void PhaseTimer::clear() {
  flush();
  for (auto& v : phase_ms_) v.clear();
  iteration_ms_.clear();
}

}  // namespace cnnergy
