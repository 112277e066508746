// cnnergyd lifecycle: state-folder lock and recovery, the listening socket, the accept loop with a
// bound on concurrent connections, and shutdown.
#include "daemon/server.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/errors.hpp"
#include "daemon/session.hpp"
#include "telemetry/journal.hpp"
#include "telemetry/knob_protocol.hpp"
#include "telemetry/nvml.hpp"

namespace cnnergy::daemon {

namespace {

std::string errno_text() { return std::strerror(errno); }

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Whether something accepts connections on the socket at `path`.
bool socket_alive(const std::string& path) {
  const int fd = telemetry::connect_unix(path);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

}  // namespace

Daemon::Daemon(std::shared_ptr<const telemetry::Nvml> nvml, Policy policy, Log log)
    : nvml_(std::move(nvml)), policy_(std::move(policy)), log_(std::move(log)) {
  if (!nvml_) throw NotSupported("cnnergyd needs NVML (no NVIDIA driver found)");
  if (::pipe2(stop_pipe_, O_CLOEXEC | O_NONBLOCK) != 0)
    throw InternalError("pipe2 failed: " + errno_text());
}

Daemon::~Daemon() {
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(policy_.socket_path.c_str());
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
  ::close(stop_pipe_[0]);
  ::close(stop_pipe_[1]);
}

std::string Daemon::lease_journal_path(std::uint64_t session) const {
  // Named by the daemon alone (pid, connection number): nothing from a request becomes a path.
  return policy_.state_dir + "/lease-" + std::to_string(::getpid()) + "-" + std::to_string(session) +
         ".json";
}

void Daemon::recover() {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(policy_.state_dir, ec);
  if (ec) throw DataError("cannot create the state folder " + policy_.state_dir + ": " + ec.message());
  ::chmod(policy_.state_dir.c_str(), 0700);
  const std::string lock_path = policy_.state_dir + "/cnnergyd.lock";
  lock_fd_ = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) throw DataError("cannot open " + lock_path + ": " + errno_text());
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0)
    throw InvalidArgument("another cnnergyd is running with the state folder " + policy_.state_dir);

  std::vector<std::string> journals;
  for (const auto& entry : fs::directory_iterator(policy_.state_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("lease-", 0) != 0) continue;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0)
      journals.push_back(entry.path().string());
    else if (name.find(".json.tmp.") != std::string::npos)
      fs::remove(entry.path(), ec);  // a write cut short: the journal it was replacing is intact
  }
  std::sort(journals.begin(), journals.end());
  // Read them all first: a corrupt one stops the start before any GPU is touched.
  std::vector<std::pair<telemetry::Journal, telemetry::JournalData>> loaded;
  for (const auto& path : journals) {
    telemetry::Journal j(path);
    loaded.emplace_back(j, j.read());  // DataError: corrupt; the daemon does not start
  }
  for (auto& [journal, data] : loaded) {
    const std::string who =
        data.owner_uid ? "uid " + std::to_string(*data.owner_uid) : std::string("unknown user");
    if (data.entries.empty()) {
      journal.remove();
      continue;
    }
    log_("restoring the settings of " + who + " left in " + journal.path() +
         " by a cnnergyd that did not stop cleanly (pid " + std::to_string(data.pid) + ")");
    const telemetry::RestoreReport r = telemetry::restore_entries(nvml_.get(), data.entries, false);
    for (const auto& line : r.restored) log_("restored " + line);
    if (r.failed.empty()) {
      journal.remove();
      continue;
    }
    for (const auto& line : r.failed) log_("could not restore " + line);
    data.entries = r.remaining;
    journal.write(data);
    orphans_.push_back({journal.path(), data.owner_uid});
  }
}

void Daemon::listen() {
  const std::string& path = policy_.socket_path;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      throw InvalidArgument(path + " exists and is not a socket: cnnergyd will not replace it "
                            "(remove it, or set socket_path / --socket to another path)");
    if (socket_alive(path))
      throw InvalidArgument("a cnnergyd already answers on " + path);
    ::unlink(path.c_str());  // a stale socket of a daemon that was killed
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::exists(parent, ec)) {
    std::filesystem::create_directories(parent, ec);
    ::chmod(parent.c_str(), 0755);
  }
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw InternalError("socket() failed: " + errno_text());
  const sockaddr_un addr = telemetry::unix_address(path);
  // Created with no access for anyone but us; the group and mode are set before listen().
  const mode_t old_mask = ::umask(0177);
  const int rc = ::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const int bind_errno = errno;
  ::umask(old_mask);
  if (rc != 0) throw InvalidArgument("cannot bind " + path + ": " + std::strerror(bind_errno));
  if (::chown(path.c_str(), static_cast<uid_t>(-1), policy_.socket_gid) != 0)
    throw PermissionDenied("cannot give " + path + " to group " + policy_.socket_group + " (gid " +
                           std::to_string(policy_.socket_gid) + "): " + errno_text() +
                           " (cnnergyd runs as root)");
  if (::chmod(path.c_str(), 0660) != 0) throw InternalError("chmod " + path + ": " + errno_text());
  if (::listen(listen_fd_, 512) != 0) throw InternalError("listen: " + errno_text());
  log_("listening on " + path + " (mode 0660, group " + policy_.socket_group + ")");
}

void Daemon::stop() {
  stopping_ = true;
  const char c = 1;
  ssize_t ignored = ::write(stop_pipe_[1], &c, 1);
  (void)ignored;
}

void Daemon::reap_finished_locked() {
  for (auto it = slots_.begin(); it != slots_.end();) {
    if (it->second.conn->done.load()) {
      it->second.thread.join();
      ::close(it->second.fd);  // closed here, after the join, so the number is never reused early
      it = slots_.erase(it);
    } else {
      ++it;
    }
  }
}

void Daemon::serve() {
  if (listen_fd_ < 0) throw InternalError("serve() before listen()");
  while (!stopping_) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    const int rc = ::poll(p, 2, 1000);
    if (rc < 0 && errno != EINTR) throw InternalError("poll: " + errno_text());
    {
      std::lock_guard<std::mutex> lock(slots_mutex_);
      reap_finished_locked();
      flush_refusals_locked();
    }
    if (rc <= 0 || stopping_ || !(p[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // EMFILE, ECONNABORTED...: the loop goes on
    serve_one(fd);
  }
  // Shut every connection down: each session sees EOF and restores its changes on the way out.
  std::lock_guard<std::mutex> lock(slots_mutex_);
  for (auto& [id, slot] : slots_) ::shutdown(slot.fd, SHUT_RDWR);
  for (auto& [id, slot] : slots_) {
    slot.thread.join();
    ::close(slot.fd);
  }
  slots_.clear();
}

void Daemon::serve_one(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    ::close(fd);
    return;
  }
  std::vector<gid_t> groups(256);
  socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0)
    groups.resize(glen / sizeof(gid_t));
  else
    groups.clear();  // an old kernel: only the primary gid counts
  timeval tv{5, 0};  // a client that never reads cannot block a reply for ever
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);

  std::lock_guard<std::mutex> lock(slots_mutex_);
  reap_finished_locked();  // count only connections still being served
  if (const std::string why = admit_locked(cred.uid); !why.empty()) {
    log_refusal(cred.uid, why);
    telemetry::write_message(fd, telemetry::error_reply(ExitCode::kUsage, why));
    ::close(fd);
    return;
  }
  const std::uint64_t id = next_session_++;
  Slot& slot = slots_[id];
  slot.fd = fd;
  slot.conn = std::make_shared<Connection>();
  slot.conn->uid = cred.uid;
  slot.conn->accepted_ms = slot.conn->last_active_ms = steady_ms();
  auto conn = slot.conn;
  slot.thread = std::thread([this, fd, id, cred, groups, conn] {
    {
      Session s(*this, fd, id, cred.pid, cred.uid, cred.gid, groups, conn);
      s.run();  // ends with shutdown(fd): the peer sees the close at once
    }
    conn->done = true;
  });
}

std::string Daemon::admit_locked(uid_t uid) {
  std::map<uid_t, unsigned> per_uid;
  std::size_t served = 0;
  for (const auto& [id, slot] : slots_) {
    if (slot.evicted) continue;  // on its way out
    ++per_uid[slot.conn->uid];
    ++served;
  }
  const unsigned own_limit = policy_.max_clients_per_uid;
  if (uid != 0 && per_uid[uid] >= own_limit)
    return "uid " + std::to_string(uid) + " already has " + std::to_string(per_uid[uid]) +
           " connections to cnnergyd, the most this policy allows one user (max_clients_per_uid " +
           std::to_string(own_limit) + "); close one and try again";
  if (served < policy_.max_clients) return {};
  // Full: the uid holding the most connections gives up its oldest idle one (no lease, no change),
  // provided it holds more than the newcomer's uid would after joining (root may take any other's).
  Slot* victim = nullptr;
  for (auto& [id, slot] : slots_) {
    const uid_t owner = slot.conn->uid;
    if (slot.evicted || owner == uid || slot.conn->holds.load()) continue;
    if (uid != 0 && per_uid[owner] <= per_uid[uid] + 1) continue;
    if (!victim || per_uid[owner] > per_uid[victim->conn->uid] ||
        (per_uid[owner] == per_uid[victim->conn->uid] &&
         slot.conn->last_active_ms.load() < victim->conn->last_active_ms.load()))
      victim = &slot;
  }
  if (!victim)
    return "cnnergyd is serving its maximum of " + std::to_string(policy_.max_clients) +
           " connections and none can yield; try again";
  victim->evicted = true;
  ::shutdown(victim->fd, SHUT_RDWR);  // its session sees the close and ends (it holds nothing to restore)
  log_("closed an idle connection of uid " + std::to_string(victim->conn->uid) + " (it held " +
       std::to_string(per_uid[victim->conn->uid]) + " of " + std::to_string(policy_.max_clients) +
       ") to serve uid " + std::to_string(uid));
  return {};
}

void Daemon::log_refusal(uid_t uid, const std::string& why) {
  // At most one line a second per uid, so a flood of refused connections cannot flood the log.
  Refusals& r = refusals_[uid];
  const std::int64_t now = steady_ms();
  if (r.last_logged_ms != 0 && now - r.last_logged_ms < 1000) {
    ++r.unlogged;
    return;
  }
  log_("refused a connection of uid " + std::to_string(uid) + ": " + why);
  r.last_logged_ms = now;
  r.unlogged = 0;
}

void Daemon::flush_refusals_locked() {
  const std::int64_t now = steady_ms();
  for (auto& [uid, r] : refusals_) {
    if (r.unlogged == 0 || now - r.last_logged_ms < 1000) continue;
    log_("refused " + std::to_string(r.unlogged) + " more connections of uid " + std::to_string(uid) +
         " in the last second (the same reason)");
    r.last_logged_ms = now;
    r.unlogged = 0;
  }
}

}  // namespace cnnergy::daemon
