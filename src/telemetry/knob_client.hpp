// The client side of cnnergyd: a KnobControl whose changes are made by the daemon (which checks
// the caller's uid against its policy, journals and makes them, and restores them when this
// connection closes: on exit, on a crash, on kill -9). Also the one-shot state query.
#pragma once

#include <mutex>
#include <string>

#include "core/json.hpp"
#include "telemetry/knob_control.hpp"

namespace cnnergy::telemetry {

class KnobClient final : public KnobControl {
 public:
  // Connects and greets the daemon. A missing socket or nobody listening -> NotSupported saying how
  // to get a daemon; a path that is not a socket -> InvalidArgument; no permission to connect (not
  // in the daemon's group) -> PermissionDenied naming the group to join; another protocol version
  // -> NotSupported.
  explicit KnobClient(std::string socket_path,
                      std::function<void(const std::string&)> announce = {});
  ~KnobClient() override;  // closes the connection: the daemon restores what it changed for us
  KnobClient(const KnobClient&) = delete;
  KnobClient& operator=(const KnobClient&) = delete;

  void set_power_limit_w(unsigned gpu, double watts) override;
  void lock_sm_clocks(unsigned gpu, std::uint32_t min_mhz, std::uint32_t max_mhz) override;
  void set_memory_clock(unsigned gpu, std::uint32_t mhz) override;
  void reset_sm_clocks(unsigned gpu) override;
  void reset_memory_clock(unsigned gpu) override;
  // "reset_all": the daemon restores this connection's changes; its GPUs stay held (a sweep
  // between trials). Closing the connection (the destructor) restores and frees them.
  void restore() override;
  bool dry_run() const override { return false; }
  std::vector<std::string> plan() const override;
  std::string describe() const override;

  // The daemon's view of the GPUs (readings, leases) and of what this user may do.
  Json state();
  // Sends one request and returns the reply; a refusal is thrown as its typed error.
  Json call(Json request);
  const Json& hello() const { return hello_; }

 private:
  void note(const Json& reply);

  std::string path_;
  std::function<void(const std::string&)> announce_;
  int fd_ = -1;
  Json hello_;
  std::vector<std::string> plan_;  // what the daemon reported doing for us
  mutable std::mutex mutex_;
};

// True when a cnnergyd answers a greeting on `socket_path` (never throws).
bool daemon_answers(const std::string& socket_path);

}  // namespace cnnergy::telemetry
