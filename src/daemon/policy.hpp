// The cnnergyd policy: one JSON file, written by the administrator, saying where the socket is and
// which group may connect, which users or groups may change GPUs, which GPUs, which power-limit and
// clock ranges, and how many changes per minute. Parsed strictly (an unknown key is an error, so a
// typo cannot silently widen what is allowed). docs/daemon.md documents every key.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cnnergy::daemon {

struct Range {
  double min = 0, max = 0;
  bool contains(double v) const { return v >= min && v <= max; }
};

struct Policy {
  std::string socket_path = "/run/cnnergy/cnnergyd.sock";
  std::string socket_group = "cnnergy";  // a group name or a numeric gid
  std::string state_dir = "/var/lib/cnnergy";  // the per-connection knob journals live here
  bool read_only = false;                      // state queries only: every change is refused
  std::optional<std::vector<unsigned>> gpus;   // NVML indices that may be changed (absent: all)
  std::vector<std::string> users, groups;      // who may change (names or numbers; both empty: anyone who can connect)
  std::optional<Range> power_limit_w, sm_clock_mhz, mem_clock_mhz;  // absent: the device's range
  unsigned max_changes_per_minute = 60;  // per user, every set/lock/reset counted
  unsigned max_clients = 256;            // connections served at once; more are answered "busy"
  unsigned max_clients_per_uid = 16;     // connections one uid may hold (root: no limit of its own)
  int idle_timeout_s = 300;              // a connection holding no lease and no change, silent this long, is closed (0: never)
  int frame_timeout_ms = 5000;           // a started message must complete within this

  // Resolved at load time (names looked up in the user and group databases).
  gid_t socket_gid = 0;
  std::vector<uid_t> allowed_uids;
  std::vector<gid_t> allowed_gids;

  // DataError naming the file and the key for anything malformed, unknown or unresolvable.
  static Policy load(const std::string& path);
  static Policy parse(const std::string& text, const std::string& origin);

  bool gpu_allowed(unsigned gpu) const;
  // Whether a peer with this uid, primary gid and supplementary groups may change settings
  // (root may; read_only refuses everyone).
  bool user_allowed(uid_t uid, gid_t gid, const std::vector<gid_t>& groups) const;
  std::string summary() const;  // one paragraph, for the log and `cnnergyd --check`
};

}  // namespace cnnergy::daemon
