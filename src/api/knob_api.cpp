// The C API's knobs (include/cnnergy/cnnergy.h): one process-wide KnobController (GPU settings are
// process-wide and the journal is per user) and a stack of leases on it. Releasing a lease puts
// back what was in force before it: the latest lease still held on the same GPU and setting, or
// the original value from the journal; the last release restores everything and drops the journal.
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/api_guard.hpp"
#include "telemetry/knobs.hpp"
#include "telemetry/nvml.hpp"

using namespace cnnergy;
using namespace cnnergy::telemetry;

namespace {

struct Lease {
  cnnergy_knob_lease id = 0;
  unsigned gpu = 0;
  KnobKind kind = KnobKind::kPowerLimit;
  double watts = 0;
  unsigned min_mhz = 0, max_mhz = 0;
};

struct KnobState {
  std::mutex mutex;
  std::shared_ptr<Nvml> nvml;
  std::unique_ptr<KnobController> controller;
  std::vector<Lease> leases;  // oldest first
  cnnergy_knob_lease next_id = 1;
};

KnobState& state() {
  static KnobState s;  // destroyed at exit: the controller's destructor restores what is left
  return s;
}

KnobController& controller(KnobState& s) {
  if (!s.controller) {
    auto opened = Nvml::open();
    if (!opened.nvml)
      throw NotSupported("cannot change GPU settings: " + opened.unavailable_reason);
    s.nvml = opened.nvml;
    KnobOptions o;  // journal: $CNNERGY_JOURNAL or the default; restore on SIGINT/SIGTERM/SIGHUP
    o.announce = [](const std::string&) {};  // a library stays quiet; the journal records it
    s.controller = std::make_unique<KnobController>(s.nvml, o);
  }
  return *s.controller;
}

void apply(KnobController& c, const Lease& l) {
  if (l.kind == KnobKind::kPowerLimit)
    c.set_power_limit_w(l.gpu, l.watts);
  else
    c.lock_sm_clocks(l.gpu, l.min_mhz, l.max_mhz);
}

// Drops the controller when nothing is held, so the signal handlers and NVML go too. A failed
// first change leaves no lease and nothing changed.
void drop_if_idle(KnobState& s) {
  if (s.leases.empty() && s.controller) {
    s.controller->restore();
    s.controller.reset();
    s.nvml.reset();
  }
}

cnnergy_status take(Lease lease, cnnergy_knob_lease* out) {
  return api::guarded([&] {
    KnobState& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    try {
      apply(controller(s), lease);
    } catch (...) {
      drop_if_idle(s);
      throw;
    }
    lease.id = s.next_id++;
    s.leases.push_back(lease);
    if (out) *out = lease.id;
    return CNNERGY_OK;
  });
}

}  // namespace

extern "C" {

cnnergy_status cnnergy_power_limit_set(unsigned gpu, double watts, cnnergy_knob_lease* lease) {
  Lease l;
  l.gpu = gpu, l.kind = KnobKind::kPowerLimit, l.watts = watts;
  return take(l, lease);
}

cnnergy_status cnnergy_sm_clocks_lock(unsigned gpu, unsigned min_mhz, unsigned max_mhz,
                                      cnnergy_knob_lease* lease) {
  Lease l;
  l.gpu = gpu, l.kind = KnobKind::kSmLockedClocks, l.min_mhz = min_mhz, l.max_mhz = max_mhz;
  return take(l, lease);
}

cnnergy_status cnnergy_knob_release(cnnergy_knob_lease id) {
  return api::guarded([&] {
    KnobState& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = std::find_if(s.leases.begin(), s.leases.end(),
                           [&](const Lease& l) { return l.id == id; });
    if (it == s.leases.end())
      return api::set_error(CNNERGY_ERROR_INVALID_ARGUMENT,
                            "knob lease " + std::to_string(id) + " is not held (released twice?)");
    const Lease gone = *it;
    s.leases.erase(it);
    if (s.leases.empty()) {
      drop_if_idle(s);
      return CNNERGY_OK;
    }
    // The latest lease still held on this GPU and setting wins; none: the original value.
    for (auto r = s.leases.rbegin(); r != s.leases.rend(); ++r) {
      if (r->gpu == gone.gpu && r->kind == gone.kind) {
        apply(*s.controller, *r);
        return CNNERGY_OK;
      }
    }
    s.controller->restore_kind(gone.gpu, gone.kind);
    return CNNERGY_OK;
  });
}

cnnergy_status cnnergy_knob_restore_all(void) {
  return api::guarded([&] {
    KnobState& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.leases.clear();
    drop_if_idle(s);
    return CNNERGY_OK;
  });
}

size_t cnnergy_knob_active(void) {
  KnobState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.leases.size();
}

}  // extern "C"
