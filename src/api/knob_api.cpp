// The C API's knobs (include/cnnergy/cnnergy.h): one process-wide KnobControl (GPU settings are
// process-wide and the journal is per user) and a stack of leases on it. The control is the path a
// `cnnergy` command would take (telemetry/knob_control.hpp): as root, the journaled KnobController
// (direct NVML); otherwise the cnnergyd daemon when its socket answers ($CNNERGY_DAEMON_SOCKET);
// $CNNERGY_KNOBS=auto|direct|daemon|dry-run picks one. Releasing a lease puts back what was in
// force before it: the latest lease still held on the same GPU and setting, or the original value
// (from the journal; through the daemon, the value read before the first change); the last
// release restores everything (and drops the journal, or the daemon connection).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/api_guard.hpp"
#include "telemetry/knob_control.hpp"
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
  unsigned min_mhz = 0, max_mhz = 0;  // SM clocks; a memory clock lease uses max_mhz
};

struct KnobState {
  std::mutex mutex;
  std::shared_ptr<Nvml> nvml;
  std::unique_ptr<KnobControl> control;
  std::map<unsigned, double> original_power_w;  // not direct: each GPU's limit before our first
  std::vector<Lease> leases;                     // oldest first
  cnnergy_knob_lease next_id = 1;
};

KnobState& state() {
  static KnobState s;  // destroyed at exit: the control's destructor restores what is left
  return s;
}

KnobControl& control(KnobState& s) {
  if (!s.control) {
    KnobControlOptions o;  // journal: $CNNERGY_JOURNAL or the default; direct: restore on signals
    const char* mode = std::getenv("CNNERGY_KNOBS");
    o.mode = mode && *mode ? parse_knobs_mode(mode) : KnobsMode::kAuto;
    o.announce = [](const std::string&) {};  // a library stays quiet; the journal records it
    auto opened = Nvml::open();
    s.nvml = opened.nvml;
    if (!s.nvml && o.mode != KnobsMode::kDaemon)
      throw NotSupported("cannot change GPU settings: " + opened.unavailable_reason);
    s.control = open_knob_control(s.nvml, o);
    s.original_power_w.clear();
  }
  return *s.control;
}

void apply(KnobState& s, const Lease& l) {
  KnobControl& c = *s.control;
  if (l.kind == KnobKind::kPowerLimit) {
    if (!dynamic_cast<KnobController*>(&c) && s.nvml && !s.original_power_w.count(l.gpu) &&
        l.gpu < s.nvml->device_count()) {
      if (const auto mw = s.nvml->device(l.gpu).power_limits().current_mw)
        s.original_power_w[l.gpu] = *mw / 1000.0;
    }
    c.set_power_limit_w(l.gpu, l.watts);
  } else if (l.kind == KnobKind::kMemLockedClocks) {
    c.set_memory_clock(l.gpu, l.max_mhz);
  } else {
    c.lock_sm_clocks(l.gpu, l.min_mhz, l.max_mhz);
  }
}

// Puts one GPU's setting of one kind back to what it was before any lease.
void restore_kind(KnobState& s, unsigned gpu, KnobKind kind) {
  KnobControl& c = *s.control;
  if (kind == KnobKind::kMemLockedClocks) {
    c.reset_memory_clock(gpu);  // locked or application clocks, whichever was set
  } else if (kind == KnobKind::kSmLockedClocks) {
    c.reset_sm_clocks(gpu);
  } else if (auto* direct = dynamic_cast<KnobController*>(&c)) {
    direct->restore_kind(gpu, kind);
  } else if (auto it = s.original_power_w.find(gpu); it != s.original_power_w.end()) {
    c.set_power_limit_w(gpu, it->second);  // the daemon still restores it exactly at the end
  }
}

void copy_text(char* out, std::size_t size, const std::string& text) {
  const std::size_t n = std::min(size - 1, text.size());
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

// Drops the control when nothing is held, so the signal handlers and NVML go too. A failed
// first change leaves no lease and nothing changed.
void drop_if_idle(KnobState& s) {
  if (s.leases.empty() && s.control) {
    s.control->restore();
    s.control.reset();
    s.nvml.reset();
  }
}

cnnergy_status take(Lease lease, cnnergy_knob_lease* out) {
  return api::guarded([&] {
    KnobState& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    try {
      control(s);
      apply(s, lease);
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

cnnergy_status cnnergy_memory_clock_set(unsigned gpu, unsigned mhz, cnnergy_knob_lease* lease) {
  Lease l;
  l.gpu = gpu, l.kind = KnobKind::kMemLockedClocks, l.min_mhz = mhz, l.max_mhz = mhz;
  return take(l, lease);
}

void cnnergy_gpu_knob_info_init(cnnergy_gpu_knob_info* info) {
  if (!info) return;
  std::memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
  const double nan = std::nan("");
  info->power_limit_min_w = info->power_limit_max_w = nan;
  info->power_limit_default_w = info->power_limit_current_w = nan;
}

cnnergy_status cnnergy_gpu_knob_info_get(unsigned gpu, cnnergy_gpu_knob_info* out) {
  return api::guarded([&] {
    if (!out || out->struct_size < sizeof(cnnergy_gpu_knob_info))
      return api::set_error(CNNERGY_ERROR_INVALID_ARGUMENT,
                            "cnnergy_gpu_knob_info_get needs a struct set up by "
                            "cnnergy_gpu_knob_info_init");
    auto opened = Nvml::open();
    if (!opened.nvml) throw NotSupported("no GPU to read: " + opened.unavailable_reason);
    if (gpu >= opened.nvml->device_count())
      throw InvalidArgument("no GPU " + std::to_string(gpu) + " (NVML sees " +
                            std::to_string(opened.nvml->device_count()) + ")");
    const GpuDevice& d = opened.nvml->device(gpu);
    cnnergy_gpu_knob_info_init(out);
    out->index = gpu;
    copy_text(out->name, sizeof out->name, d.name());
    copy_text(out->uuid, sizeof out->uuid, d.uuid());
    copy_text(out->driver_version, sizeof out->driver_version, opened.nvml->driver_version());
    const PowerLimits p = d.power_limits();
    auto watts = [](const std::optional<std::uint32_t>& mw) {
      return mw ? *mw / 1000.0 : std::nan("");
    };
    out->power_limit_min_w = watts(p.min_mw), out->power_limit_max_w = watts(p.max_mw);
    out->power_limit_default_w = watts(p.default_mw), out->power_limit_current_w = watts(p.current_mw);
    const auto mem = d.supported_mem_clocks_mhz();  // descending
    for (std::size_t i = 0; i < mem.size() && i < CNNERGY_MAX_CLOCKS; ++i)
      out->mem_clocks_mhz[out->mem_clock_count++] = mem[i];
    const auto sm = d.supported_sm_clocks_mhz(mem.empty() ? 0 : mem.front());
    for (std::size_t i = 0; i < sm.size() && i < CNNERGY_MAX_CLOCKS; ++i)
      out->sm_clocks_mhz[out->sm_clock_count++] = sm[i];
    return CNNERGY_OK;
  });
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
        apply(s, *r);
        return CNNERGY_OK;
      }
    }
    restore_kind(s, gone.gpu, gone.kind);
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
