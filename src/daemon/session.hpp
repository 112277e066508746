// One cnnergyd client connection: reads requests (bounded by the frame timeout), checks each
// against the protocol, the policy and the leases, and answers it; when the connection ends it
// restores everything this connection changed and gives its GPUs back.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/json.hpp"

namespace cnnergy::telemetry {
class KnobController;
}

namespace cnnergy::daemon {

class Daemon;
struct Connection;

class Session {
 public:
  // `conn` (may be null in tests) is what the accept loop sees of this connection.
  Session(Daemon& daemon, int fd, std::uint64_t id, pid_t pid, uid_t uid, gid_t gid,
          std::vector<gid_t> groups, std::shared_ptr<Connection> conn = nullptr);
  ~Session();  // restores (noexcept) what run() did not
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void run();

  // Answers one message (a whole frame's payload); never throws. Public for the tests' sake.
  Json handle(const std::string& payload);

 private:
  Json dispatch(const Json& request);
  Json state() const;
  Json change(const Json& request, const std::string& op);
  Json release(bool free_gpus);
  Json restore_orphans();
  void check_may_change(unsigned gpu);
  void take_lease(unsigned gpu);
  void release_all(const char* why) noexcept;
  // How long to wait for the next message: -1 (for ever) while this connection holds a lease or a
  // change; otherwise what is left of the policy's idle timeout since its last message (0: over).
  int idle_wait_ms() const;

  Daemon& daemon_;
  int fd_;
  std::uint64_t id_;
  pid_t pid_;
  uid_t uid_;
  gid_t gid_;
  std::vector<gid_t> groups_;
  std::unique_ptr<telemetry::KnobController> controller_;
  std::set<unsigned> held_;  // GPUs this connection has changed (its leases)
  std::shared_ptr<Connection> conn_;
  bool holds_ = false;            // a lease, or a change accepted: never closed for idling
  std::int64_t last_active_ms_ = 0;
};

}  // namespace cnnergy::daemon
