// The knob journal: the original value of every GPU setting cnnergy changed, with the GPU's UUID,
// written (fsync'd, atomically replaced) before the change, so `cnnergy restore` can undo it after
// a crash or kill -9. One JSON file: ~/.cache/cnnergy/knob-journal.json or $CNNERGY_JOURNAL.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cnnergy::telemetry {

class Nvml;

enum class KnobKind { kPowerLimit, kSmLockedClocks, kMemLockedClocks, kApplicationClocks };
const char* to_string(KnobKind k);

struct JournalEntry {
  std::string uuid;
  unsigned index = 0;  // NVML index when written (informative: devices are matched by UUID)
  std::string name;
  KnobKind kind = KnobKind::kPowerLimit;
  std::uint32_t original_power_limit_mw = 0;                        // kPowerLimit
  std::uint32_t original_app_mem_mhz = 0, original_app_sm_mhz = 0;  // kApplicationClocks
  // Locked clocks have no NVML getter: restoring them means resetting to the driver's default.
};

struct JournalData {
  long pid = 0;
  // The writer's start time (clock ticks since boot, /proc/PID/stat field 22; 0 in journals written
  // before it was recorded): a PID reused by another process after a crash is not mistaken for the writer.
  std::uint64_t pid_start_ticks = 0;
  // The user on whose behalf the changes were made (set by cnnergyd, which changes GPUs for
  // clients; absent for a cnnergy process changing them itself). Written as "owner_uid".
  std::optional<std::uint32_t> owner_uid;
  std::string host, boot_id;
  std::int64_t created_unix_s = 0;
  std::vector<JournalEntry> entries;
};

class Journal {
 public:
  explicit Journal(std::string path);
  // $CNNERGY_JOURNAL, else $XDG_CACHE_HOME/cnnergy/knob-journal.json, else ~/.cache/cnnergy/...
  static std::string default_path();

  const std::string& path() const { return path_; }
  bool exists() const;
  JournalData read() const;  // DataError naming the file when unreadable or corrupt
  void write(const JournalData& data) const;  // tmp file + fsync + rename + fsync of the folder
  void remove() const;

  // A JournalData for this process (pid, host, boot id, time) with no entries.
  static JournalData for_this_process();
  // True when the process that wrote `data` may still be running (same host and boot, pid alive).
  static bool writer_alive(const JournalData& data);

 private:
  std::string path_;
};

// "GPU 0 (GPU-...): power limit back to 700 W" and the like.
std::string describe_restore(const JournalEntry& e);

struct RestoreReport {
  std::vector<std::string> restored;    // what was put back
  std::vector<std::string> failed;      // what could not be, and why
  std::vector<JournalEntry> remaining;  // entries still to restore (kept in the journal)
};

// Puts every entry back (latest first), matching GPUs by UUID. Never throws for one entry: its
// failure is reported and the entry kept. With dry_run, lists what it would do.
RestoreReport restore_entries(const Nvml* nvml, const std::vector<JournalEntry>& entries,
                              bool dry_run);

}  // namespace cnnergy::telemetry
