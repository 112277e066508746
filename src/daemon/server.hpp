// cnnergyd: the root daemon that changes GPU settings for users who are not root. It listens on a
// Unix socket (mode 0660, the policy's group), checks each client with SO_PEERCRED, and makes every
// change through one KnobController per connection, whose journal (in the state folder, with the
// client's uid) is written before the change. A change belongs to its connection (a lease on the
// GPU): when the connection closes (exit, crash, kill -9) the daemon restores it; when the daemon
// itself was killed, the next start restores every journal left before it listens.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/json.hpp"
#include "daemon/policy.hpp"

namespace cnnergy::telemetry {
class Nvml;
}

namespace cnnergy::daemon {

struct Lease {
  std::uint64_t session = 0;
  uid_t uid = 0;
  std::int64_t since_unix_s = 0;
};

// A journal whose settings could not be restored (its GPU gone, the driver refusing): kept on disk
// and retried by a `restore` request from its owner or root.
struct Orphan {
  std::string journal_path;
  std::optional<std::uint32_t> owner_uid;
};

// What the accept loop knows of a served connection, shared with its session's thread: whose it is,
// whether it holds anything (a lease, or a change accepted), when it last sent a message, and
// whether its thread has finished.
struct Connection {
  uid_t uid = 0;
  std::int64_t accepted_ms = 0;  // steady clock
  std::atomic<bool> done{false};
  std::atomic<bool> holds{false};
  std::atomic<std::int64_t> last_active_ms{0};
};

class Daemon {
 public:
  using Log = std::function<void(const std::string&)>;
  Daemon(std::shared_ptr<const telemetry::Nvml> nvml, Policy policy, Log log);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Locks the state folder (InvalidArgument when another cnnergyd holds it) and restores every
  // lease journal a previous daemon left there. A corrupt journal -> DataError naming it (nothing
  // is served until an administrator resolves it); one that cannot be restored is kept as an
  // orphan and reported. Call before listen(): nobody is served before the GPUs are restored.
  void recover();
  // Creates the socket: InvalidArgument when the path exists and is not a socket, or a daemon
  // already answers on it; a stale socket is replaced. Mode 0660, group policy.socket_gid.
  void listen();
  // Accepts and serves clients until stop(); then closes every connection, restoring their changes.
  void serve();
  void stop();  // from any thread (the signal watcher)

  const Policy& policy() const { return policy_; }

 private:
  friend class Session;
  struct Slot {
    int fd = -1;
    std::thread thread;
    std::shared_ptr<Connection> conn;
    bool evicted = false;  // shut down to free its slot; reaped when its thread ends
  };
  void reap_finished_locked();
  void serve_one(int fd);
  // Whether a new connection of `uid` may be served (slots_mutex_ held): within its own limit, and
  // within the global one, where an idle connection of the uid holding the most yields its slot
  // (root's newcomer may take any other uid's idle slot). Empty when admitted; otherwise why not.
  std::string admit_locked(uid_t uid);
  void log_refusal(uid_t uid, const std::string& why);
  void flush_refusals_locked();  // the counts log_refusal held back, once their second is over
  std::string lease_journal_path(std::uint64_t session) const;

  std::shared_ptr<const telemetry::Nvml> nvml_;
  Policy policy_;
  Log log_;
  int listen_fd_ = -1, lock_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> next_session_{1};

  std::mutex slots_mutex_;
  std::map<std::uint64_t, Slot> slots_;
  struct Refusals {
    std::int64_t last_logged_ms = 0;
    unsigned unlogged = 0;
  };
  std::map<uid_t, Refusals> refusals_;  // per uid: refusals are logged at most once a second each

  // Everything below is guarded by state_mutex_, which also serialises every NVML call.
  std::mutex state_mutex_;
  std::map<unsigned, Lease> leases_;               // GPU index -> holder
  std::map<uid_t, std::deque<std::int64_t>> changes_;  // uid -> change times (steady ms), last minute
  std::vector<Orphan> orphans_;
};

}  // namespace cnnergy::daemon
