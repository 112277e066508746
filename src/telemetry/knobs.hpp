// Knob control: the one object through which cnnergy changes a GPU's power limit, locked SM clocks
// or memory clocks. Every change is validated, journaled (original value + UUID, on disk) before it
// is made, and undone on destruction, on SIGINT/SIGTERM/SIGHUP, after exceptions, and by
// `cnnergy restore` after a crash. A dry run validates and prints the plan but changes nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "telemetry/journal.hpp"
#include "telemetry/knob_control.hpp"
#include "telemetry/nvml.hpp"
#include "telemetry/signals.hpp"

namespace cnnergy::telemetry {

struct KnobOptions {
  std::string journal_path;  // empty: Journal::default_path()
  bool dry_run = false;
  // Restore on SIGINT/SIGTERM/SIGHUP and then die of that signal. Turn off when the caller handles
  // signals itself (e.g. `monitor`, which forwards them to its child and restores afterwards).
  bool handle_signals = true;
  std::function<void(const std::string&)> announce;  // each change and restore; default: log_info
  // Recorded in the journal as the user the changes were made for (cnnergyd sets the client's uid).
  std::optional<std::uint32_t> owner_uid;
};

class KnobController final : public KnobControl {
 public:
  // If a journal from an earlier run exists: a live writer -> InvalidArgument (another cnnergy
  // controls the GPUs); a dead one (crash, kill -9) -> its settings are restored first (a dry run
  // only lists them). A corrupt journal -> DataError.
  KnobController(std::shared_ptr<const Nvml> nvml, KnobOptions options = {});
  ~KnobController() override;  // restores everything; never throws (failures are logged, journal kept)
  KnobController(const KnobController&) = delete;
  KnobController& operator=(const KnobController&) = delete;

  // InvalidArgument (with the allowed range in W) outside [min, max]; NotSupported where the GPU
  // cannot report its range; PermissionDenied without root/CAP_SYS_ADMIN.
  void set_power_limit_w(unsigned gpu, double watts) override;
  // Locks the SM clock to [min_mhz, max_mhz]; each must be a supported clock (InvalidArgument names
  // the nearest one).
  void lock_sm_clocks(unsigned gpu, std::uint32_t min_mhz, std::uint32_t max_mhz) override;
  // Locks the memory clock (or, where the driver lacks memory locked clocks, sets application
  // clocks); must be a supported memory clock.
  void set_memory_clock(unsigned gpu, std::uint32_t mhz) override;
  // Undo this controller's SM-clock lock (memory lock or application clocks) of one GPU; nothing
  // to do when it changed none. DeviceError when the driver refuses (the entry stays journaled).
  void reset_sm_clocks(unsigned gpu) override;
  void reset_memory_clock(unsigned gpu) override;

  // Restores every changed setting now and deletes the journal; throws DeviceError listing what
  // could not be restored (those entries stay in the journal for `cnnergy restore`).
  void restore() override;
  // Restores one setting of one GPU (kPowerLimit, kSmLockedClocks, ...) and drops it from the
  // journal, leaving the others in force; a no-op when it was not changed. DeviceError on failure
  // (the entry stays journaled). Lets nested scopes (the C API's knob leases) undo only their own.
  void restore_kind(unsigned gpu, KnobKind kind) { restore_kinds(gpu, {kind}, to_string(kind)); }

  bool dry_run() const override { return options_.dry_run; }
  std::string describe() const override;
  const std::string& journal_path() const { return journal_.path(); }
  std::vector<std::string> plan() const override;  // every change made or planned
  std::size_t active_changes() const;

 private:
  const GpuDevice& device(unsigned gpu) const;
  bool journaled(const std::string& uuid, KnobKind kind) const;
  void journal_add(const JournalEntry& e);
  void journal_drop_last();
  void say(const std::string& line);
  void restore_noexcept() noexcept;
  void restore_kinds(unsigned gpu, std::initializer_list<KnobKind> kinds, const char* what);

  std::shared_ptr<const Nvml> nvml_;
  KnobOptions options_;
  Journal journal_;
  JournalData data_;
  std::vector<std::string> plan_;
  mutable std::recursive_mutex mutex_;  // the signal thread may restore while the owner works
  std::optional<SignalWatcher> signals_;
};

// The supported value closest to `wanted` (ties: the lower one). `values` must not be empty.
std::uint32_t nearest_clock(const std::vector<std::uint32_t>& values, std::uint32_t wanted);

}  // namespace cnnergy::telemetry
