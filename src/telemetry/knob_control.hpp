// The interface through which the tuner and the knob-changing commands change GPU settings, and how
// a command picks its implementation: KnobController (direct NVML calls as root, journaled), the
// KnobClient of the cnnergyd daemon (for users who are not root), or a dry run that changes nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cnnergy::telemetry {

class Nvml;

class KnobControl {
 public:
  virtual ~KnobControl() = default;  // implementations restore what they changed
  // Each throws the typed errors of core/errors.hpp (InvalidArgument outside the allowed range,
  // PermissionDenied, NotSupported, DeviceError) and leaves the GPU as it was when it does.
  virtual void set_power_limit_w(unsigned gpu, double watts) = 0;
  virtual void lock_sm_clocks(unsigned gpu, std::uint32_t min_mhz, std::uint32_t max_mhz) = 0;
  virtual void set_memory_clock(unsigned gpu, std::uint32_t mhz) = 0;
  // Put one GPU's SM (or memory) clocks back to what they were before this controller changed them.
  virtual void reset_sm_clocks(unsigned gpu) = 0;
  virtual void reset_memory_clock(unsigned gpu) = 0;
  // Restores every setting this controller changed (and keeps the controller usable).
  virtual void restore() = 0;
  virtual bool dry_run() const = 0;
  virtual std::vector<std::string> plan() const = 0;  // every change made (or, dry, planned)
  // One line naming the path the changes take, e.g. "direct NVML (root), journal /root/...".
  virtual std::string describe() const = 0;
};

// --knobs: direct (NVML as root), daemon (through cnnergyd), dry-run (validate, change nothing);
// auto = direct as root, else the daemon when its socket answers, else an error saying how to get
// one.
enum class KnobsMode { kAuto, kDirect, kDaemon, kDryRun };
KnobsMode parse_knobs_mode(const std::string& text);  // InvalidArgument lists the choices
const char* to_string(KnobsMode mode);

struct KnobControlOptions {
  KnobsMode mode = KnobsMode::kAuto;
  std::string journal_path;  // direct/dry-run: empty = Journal::default_path()
  std::string socket_path;   // daemon: empty = default_daemon_socket()
  bool handle_signals = true;  // direct: restore on SIGINT/SIGTERM/SIGHUP (see KnobOptions)
  std::function<void(const std::string&)> announce;  // changes, restores and the path taken
};

// $CNNERGY_DAEMON_SOCKET, else /run/cnnergy/cnnergyd.sock.
std::string default_daemon_socket();

// Opens the controller the mode asks for and announces which path it takes. `nvml` may be null for
// the daemon path (the daemon reads the GPUs); direct and dry-run need it (NotSupported otherwise).
std::unique_ptr<KnobControl> open_knob_control(std::shared_ptr<const Nvml> nvml,
                                               const KnobControlOptions& options);

}  // namespace cnnergy::telemetry
