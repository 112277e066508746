// KnobController: validate, journal, change; restore on every exit path.
#include "telemetry/knobs.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/errors.hpp"
#include "core/log.hpp"

namespace cnnergy::telemetry {

namespace {
std::string watts(double mw) {
  std::ostringstream os;
  os << mw / 1000.0 << " W";
  return os.str();
}
std::string gpu_name(const GpuDevice& d) {
  return "GPU " + std::to_string(d.index()) + " (" + d.uuid() + ")";
}
}  // namespace

std::uint32_t nearest_clock(const std::vector<std::uint32_t>& values, std::uint32_t wanted) {
  CNNERGY_CHECK(!values.empty(), "no clocks to choose from");
  std::uint32_t best = values.front();
  for (std::uint32_t v : values) {
    const auto d = [&](std::uint32_t x) { return x > wanted ? x - wanted : wanted - x; };
    if (d(v) < d(best) || (d(v) == d(best) && v < best)) best = v;
  }
  return best;
}

KnobController::KnobController(std::shared_ptr<const Nvml> nvml, KnobOptions options)
    : nvml_(std::move(nvml)),
      options_(std::move(options)),
      journal_(options_.journal_path.empty() ? Journal::default_path() : options_.journal_path) {
  if (!nvml_) throw NotSupported("changing GPU settings needs NVML, which is not available here");
  if (journal_.exists()) {
    const JournalData old = journal_.read();
    if (Journal::writer_alive(old))
      throw InvalidArgument("another cnnergy process (pid " + std::to_string(old.pid) +
                            ") is changing GPU settings (journal " + journal_.path() +
                            "); wait for it to finish");
    if (!old.entries.empty()) {
      say("the knob journal " + journal_.path() + " is left from a run that did not finish (pid " +
          std::to_string(old.pid) + "): restoring its settings first");
      RestoreReport r = restore_entries(nvml_.get(), old.entries, options_.dry_run);
      for (const auto& line : r.restored) say(line);
      if (!r.failed.empty()) {
        std::string msg = "could not restore the settings of an earlier run:";
        for (const auto& f : r.failed) msg += "\n  " + f;
        throw DeviceError(msg + "\nresolve this, then run `cnnergy restore`");
      }
    }
    if (!options_.dry_run) journal_.remove();
  }
  data_ = Journal::for_this_process();
  if (options_.handle_signals && !options_.dry_run) {
    signals_.emplace([this](int signo, bool) {
      restore_noexcept();
      SignalWatcher::terminate_with(signo);
    });
  }
}

KnobController::~KnobController() {
  restore_noexcept();
  signals_.reset();
}

void KnobController::say(const std::string& line) {
  if (options_.announce)
    options_.announce(line);
  else
    log_info(line);
}

const GpuDevice& KnobController::device(unsigned gpu) const {
  const GpuDevice& d = nvml_->device(gpu);
  if (d.lost()) throw DeviceError("GPU " + std::to_string(gpu) + " is lost or not accessible");
  return d;
}

bool KnobController::journaled(const std::string& uuid, KnobKind kind) const {
  return std::any_of(data_.entries.begin(), data_.entries.end(),
                     [&](const JournalEntry& e) { return e.uuid == uuid && e.kind == kind; });
}

void KnobController::journal_add(const JournalEntry& e) {
  data_.entries.push_back(e);
  try {
    journal_.write(data_);
  } catch (...) {
    data_.entries.pop_back();
    throw;
  }
}

// The change just journaled did not happen: forget it, so restore does not "undo" it.
void KnobController::journal_drop_last() {
  data_.entries.pop_back();
  try {
    if (data_.entries.empty())
      journal_.remove();
    else
      journal_.write(data_);
  } catch (const std::exception& ex) {
    log_warn(std::string("could not update the knob journal: ") + ex.what());
  }
}

void KnobController::set_power_limit_w(unsigned gpu, double w) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  const GpuDevice& d = device(gpu);
  const PowerLimits l = d.power_limits();
  if (!l.min_mw || !l.max_mw || !l.current_mw)
    throw NotSupported(gpu_name(d) +
                       " does not report its power-limit range: its power limit cannot be set");
  if (!std::isfinite(w) || w * 1000.0 < *l.min_mw - 0.5 || w * 1000.0 > *l.max_mw + 0.5) {
    std::ostringstream os;
    os << "power limit " << w << " W is outside the range of " << gpu_name(d) << ": "
       << watts(*l.min_mw) << " to " << watts(*l.max_mw);
    throw InvalidArgument(os.str());
  }
  const auto mw = static_cast<std::uint32_t>(std::lround(w * 1000.0));
  const std::string line =
      gpu_name(d) + ": power limit " + watts(*l.current_mw) + " -> " + watts(mw);
  plan_.push_back(line);
  if (options_.dry_run) {
    say("dry run: would set " + line);
    return;
  }
  const bool first = !journaled(d.uuid(), KnobKind::kPowerLimit);
  if (first) {
    JournalEntry e;
    e.uuid = d.uuid(), e.index = d.index(), e.name = d.name(), e.kind = KnobKind::kPowerLimit;
    e.original_power_limit_mw = *l.current_mw;
    journal_add(e);
  }
  try {
    d.set_power_limit_mw(mw);
  } catch (...) {
    if (first) journal_drop_last();
    throw;
  }
  say("set " + line);
}

void KnobController::lock_sm_clocks(unsigned gpu, std::uint32_t min_mhz, std::uint32_t max_mhz) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  const GpuDevice& d = device(gpu);
  if (min_mhz > max_mhz)
    throw InvalidArgument("SM clock range " + std::to_string(min_mhz) + "-" +
                          std::to_string(max_mhz) + " MHz is empty (min > max)");
  std::uint32_t mem = d.clocks().mem_max_mhz.value_or(0);
  if (const auto mems = d.supported_mem_clocks_mhz(); !mems.empty() && !mem) mem = mems.front();
  const auto supported = d.supported_sm_clocks_mhz(mem);
  if (supported.empty())
    throw NotSupported(gpu_name(d) +
                       " does not list its supported SM clocks: they cannot be locked");
  for (std::uint32_t f : {min_mhz, max_mhz}) {
    if (std::find(supported.begin(), supported.end(), f) == supported.end())
      throw InvalidArgument("SM clock " + std::to_string(f) + " MHz is not supported by " +
                            gpu_name(d) + "; the nearest supported clock is " +
                            std::to_string(nearest_clock(supported, f)) +
                            " MHz (`cnnergy devices` lists the range)");
  }
  const std::string line = gpu_name(d) + ": lock SM clocks to " + std::to_string(min_mhz) + "-" +
                           std::to_string(max_mhz) + " MHz";
  plan_.push_back(line);
  if (options_.dry_run) {
    say("dry run: would " + line);
    return;
  }
  const bool first = !journaled(d.uuid(), KnobKind::kSmLockedClocks);
  if (first) {
    JournalEntry e;
    e.uuid = d.uuid(), e.index = d.index(), e.name = d.name(), e.kind = KnobKind::kSmLockedClocks;
    journal_add(e);
  }
  try {
    d.set_locked_sm_clocks(min_mhz, max_mhz);
  } catch (...) {
    if (first) journal_drop_last();
    throw;
  }
  say(line);
}

void KnobController::set_memory_clock(unsigned gpu, std::uint32_t mhz) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  const GpuDevice& d = device(gpu);
  const auto supported = d.supported_mem_clocks_mhz();
  if (supported.empty())
    throw NotSupported(gpu_name(d) +
                       " does not list its supported memory clocks: they cannot be set");
  if (std::find(supported.begin(), supported.end(), mhz) == supported.end())
    throw InvalidArgument("memory clock " + std::to_string(mhz) + " MHz is not supported by " +
                          gpu_name(d) + "; the nearest supported clock is " +
                          std::to_string(nearest_clock(supported, mhz)) + " MHz");
  const std::string line = gpu_name(d) + ": memory clock -> " + std::to_string(mhz) + " MHz";
  plan_.push_back(line);
  if (options_.dry_run) {
    say("dry run: would set " + line);
    return;
  }
  if (d.has_mem_locked_clocks()) {
    const bool first = !journaled(d.uuid(), KnobKind::kMemLockedClocks);
    if (first) {
      JournalEntry e;
      e.uuid = d.uuid(), e.index = d.index(), e.name = d.name(),
      e.kind = KnobKind::kMemLockedClocks;
      journal_add(e);
    }
    try {
      d.set_locked_mem_clocks(mhz, mhz);
      say("set " + line + " (locked)");
      return;
    } catch (const NotSupported&) {
      if (first) journal_drop_last();  // fall through to application clocks
    } catch (...) {
      if (first) journal_drop_last();
      throw;
    }
  }
  // Application clocks pair a memory clock with an SM clock supported at that memory clock: keep
  // the current SM target when it is, else take the highest.
  const ClockReadings c = d.clocks();
  if (!c.app_mem_mhz || !c.app_sm_mhz)
    throw NotSupported(gpu_name(d) +
                       " supports neither memory locked clocks nor application clocks");
  const auto sm_list = d.supported_sm_clocks_mhz(mhz);
  if (sm_list.empty())
    throw NotSupported(gpu_name(d) + " lists no SM clocks at " + std::to_string(mhz) + " MHz");
  const std::uint32_t sm = std::find(sm_list.begin(), sm_list.end(), *c.app_sm_mhz) != sm_list.end()
                               ? *c.app_sm_mhz
                               : *std::max_element(sm_list.begin(), sm_list.end());
  const bool first = !journaled(d.uuid(), KnobKind::kApplicationClocks);
  if (first) {
    JournalEntry e;
    e.uuid = d.uuid(), e.index = d.index(), e.name = d.name(),
    e.kind = KnobKind::kApplicationClocks;
    e.original_app_mem_mhz = *c.app_mem_mhz;
    e.original_app_sm_mhz = *c.app_sm_mhz;
    journal_add(e);
  }
  try {
    d.set_application_clocks(mhz, sm);
  } catch (...) {
    if (first) journal_drop_last();
    throw;
  }
  say("set " + line + " (application clocks, SM " + std::to_string(sm) + " MHz)");
}

std::size_t KnobController::active_changes() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return data_.entries.size();
}

void KnobController::restore() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (options_.dry_run || data_.entries.empty()) return;
  RestoreReport r = restore_entries(nvml_.get(), data_.entries, false);
  for (const auto& line : r.restored) say("restored " + line);
  data_.entries = r.remaining;
  if (r.failed.empty()) {
    journal_.remove();
    return;
  }
  journal_.write(data_);
  std::string msg = "could not restore every GPU setting (kept in " + journal_.path() + "):";
  for (const auto& f : r.failed) msg += "\n  " + f;
  throw DeviceError(msg + "\nfix the cause, then run `cnnergy restore`");
}

void KnobController::restore_kind(unsigned gpu, KnobKind kind) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (options_.dry_run) return;
  const GpuDevice& d = device(gpu);
  std::vector<JournalEntry> mine, others;
  for (const auto& e : data_.entries)
    (e.uuid == d.uuid() && e.kind == kind ? mine : others).push_back(e);
  if (mine.empty()) return;
  RestoreReport r = restore_entries(nvml_.get(), mine, false);
  for (const auto& line : r.restored) say("restored " + line);
  others.insert(others.end(), r.remaining.begin(), r.remaining.end());
  data_.entries = others;
  if (data_.entries.empty())
    journal_.remove();
  else
    journal_.write(data_);
  if (!r.failed.empty())
    throw DeviceError("could not restore " + r.failed.front() + " (kept in " + journal_.path() +
                      "; run `cnnergy restore`)");
}

void KnobController::restore_noexcept() noexcept {
  try {
    restore();
  } catch (const std::exception& e) {
    log_error(e.what());
  }
}

}  // namespace cnnergy::telemetry
