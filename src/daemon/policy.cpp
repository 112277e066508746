// Policy: strict JSON parsing and the user/group lookups.
#include "daemon/policy.hpp"

#include <grp.h>
#include <pwd.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "core/bounded_file.hpp"
#include "core/errors.hpp"
#include "core/json.hpp"

namespace cnnergy::daemon {

namespace {

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() < 10 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

uid_t resolve_user(const std::string& name, const std::string& origin) {
  if (all_digits(name)) return static_cast<uid_t>(std::stoul(name));
  std::vector<char> buf(16384);
  passwd pw{}, *out = nullptr;
  if (::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &out) != 0 || !out)
    throw DataError(origin + ": no user named '" + name + "' on this machine");
  return out->pw_uid;
}

gid_t resolve_group(const std::string& name, const std::string& origin) {
  if (all_digits(name)) return static_cast<gid_t>(std::stoul(name));
  std::vector<char> buf(65536);
  group gr{}, *out = nullptr;
  if (::getgrnam_r(name.c_str(), &gr, buf.data(), buf.size(), &out) != 0 || !out)
    throw DataError(origin + ": no group named '" + name +
                    "' on this machine (create it: groupadd --system " + name +
                    ", or name another group)");
  return out->gr_gid;
}

std::vector<std::string> strings(const Json& j, const std::string& what) {
  if (!j.is_array()) throw DataError("'" + what + "' must be an array of names");
  std::vector<std::string> out;
  for (const Json& x : j.items()) {
    if (x.is_number()) {
      const double v = x.as_number();
      if (v < 0 || v != std::floor(v) || v > 4e9) throw DataError("'" + what + "' has a bad id");
      out.push_back(std::to_string(static_cast<std::uint64_t>(v)));
    } else {
      out.push_back(x.str(what + " entry"));
      if (out.back().empty()) throw DataError("'" + what + "' has an empty name");
    }
  }
  return out;
}

Range range(const Json& j, const std::string& what) {
  if (!j.is_object()) throw DataError("'" + what + "' must be {\"min\": N, \"max\": N}");
  for (const auto& [k, v] : j.members())
    if (k != "min" && k != "max") throw DataError("'" + what + "' has an unknown key '" + k + "'");
  Range r{j.at("min").number(what + ".min"), j.at("max").number(what + ".max")};
  if (!std::isfinite(r.min) || !std::isfinite(r.max) || r.min < 0 || r.min > r.max)
    throw DataError("'" + what + "' must have 0 <= min <= max");
  return r;
}

std::int64_t whole(const Json& j, const std::string& what, std::int64_t lo, std::int64_t hi) {
  return json_integer(j, "'" + what + "'", lo, hi);
}

}  // namespace

Policy Policy::load(const std::string& path) {
  return parse(read_bounded_file(path, kDaemonPolicyLimit), path);
}

Policy Policy::parse(const std::string& text, const std::string& origin) {
  Policy p;
  try {
    const Json j = Json::parse(text);
    if (!j.is_object()) throw DataError("the policy must be a JSON object");
    static const std::set<std::string> kKeys = {
        "version", "socket_path", "socket_group", "state_dir", "read_only", "gpus", "users", "groups",
        "power_limit_w", "sm_clock_mhz", "mem_clock_mhz", "max_changes_per_minute", "max_clients",
        "frame_timeout_ms", "max_clients_per_uid", "idle_timeout_s", "comment"};
    for (const auto& [k, v] : j.members())
      if (!kKeys.count(k)) throw DataError("unknown key '" + k + "'");
    if (whole(j.at("version"), "version", 1, 1) != 1) throw DataError("unknown policy version");
    if (const Json* v = j.find("socket_path")) p.socket_path = v->str("socket_path");
    if (const Json* v = j.find("socket_group"))  // a name, or a gid as a number or a string of digits
      p.socket_group = v->is_number() ? std::to_string(json_integer(*v, "socket_group", 0, 4294967294LL))
                                      : v->str("socket_group");
    if (const Json* v = j.find("state_dir")) p.state_dir = v->str("state_dir");
    if (const Json* v = j.find("read_only")) p.read_only = v->boolean("read_only");
    if (const Json* v = j.find("gpus")) {
      if (v->is_string() && v->as_string() == "all") {
        p.gpus.reset();
      } else {
        if (!v->is_array()) throw DataError("'gpus' must be \"all\" or an array of GPU indices");
        p.gpus.emplace();
        for (const Json& g : v->items()) p.gpus->push_back(static_cast<unsigned>(whole(g, "gpus entry", 0, 1023)));
      }
    }
    if (const Json* v = j.find("users")) p.users = strings(*v, "users");
    if (const Json* v = j.find("groups")) p.groups = strings(*v, "groups");
    if (const Json* v = j.find("power_limit_w")) p.power_limit_w = range(*v, "power_limit_w");
    if (const Json* v = j.find("sm_clock_mhz")) p.sm_clock_mhz = range(*v, "sm_clock_mhz");
    if (const Json* v = j.find("mem_clock_mhz")) p.mem_clock_mhz = range(*v, "mem_clock_mhz");
    if (const Json* v = j.find("max_changes_per_minute"))
      p.max_changes_per_minute = static_cast<unsigned>(whole(*v, "max_changes_per_minute", 0, 1000000));
    if (const Json* v = j.find("max_clients"))
      p.max_clients = static_cast<unsigned>(whole(*v, "max_clients", 1, 4096));
    if (const Json* v = j.find("max_clients_per_uid"))
      p.max_clients_per_uid = static_cast<unsigned>(whole(*v, "max_clients_per_uid", 1, 4096));
    if (const Json* v = j.find("idle_timeout_s"))
      p.idle_timeout_s = static_cast<int>(whole(*v, "idle_timeout_s", 0, 86400));
    if (const Json* v = j.find("frame_timeout_ms"))
      p.frame_timeout_ms = static_cast<int>(whole(*v, "frame_timeout_ms", 10, 600000));
    if (p.socket_path.empty() || p.socket_path[0] != '/') throw DataError("'socket_path' must be absolute");
    if (p.state_dir.empty() || p.state_dir[0] != '/') throw DataError("'state_dir' must be absolute");
    p.socket_gid = resolve_group(p.socket_group, "socket_group");
    for (const auto& u : p.users) p.allowed_uids.push_back(resolve_user(u, "users"));
    for (const auto& g : p.groups) p.allowed_gids.push_back(resolve_group(g, "groups"));
  } catch (const DataError& e) {
    throw DataError("the cnnergyd policy " + origin + " is not valid: " + e.what() +
                    " (see docs/daemon.md and packaging/cnnergyd.policy.example)");
  }
  return p;
}

bool Policy::gpu_allowed(unsigned gpu) const {
  return !gpus || std::find(gpus->begin(), gpus->end(), gpu) != gpus->end();
}

bool Policy::user_allowed(uid_t uid, gid_t gid, const std::vector<gid_t>& peer_groups) const {
  if (read_only) return false;
  if (uid == 0) return true;
  if (allowed_uids.empty() && allowed_gids.empty()) return true;  // the socket's group decides
  if (std::find(allowed_uids.begin(), allowed_uids.end(), uid) != allowed_uids.end()) return true;
  for (gid_t g : allowed_gids) {
    if (g == gid) return true;
    if (std::find(peer_groups.begin(), peer_groups.end(), g) != peer_groups.end()) return true;
  }
  return false;
}

std::string Policy::summary() const {
  std::ostringstream os;
  os << "socket " << socket_path << " (group " << socket_group << ", gid " << socket_gid
     << ", mode 0660), state " << state_dir << "; ";
  if (read_only) {
    os << "READ-ONLY: every change is refused";
    return os.str();
  }
  os << "GPUs ";
  if (!gpus) {
    os << "all";
  } else {
    for (std::size_t i = 0; i < gpus->size(); ++i) os << (i ? "," : "") << (*gpus)[i];
    if (gpus->empty()) os << "none";
  }
  os << "; users ";
  if (users.empty() && groups.empty()) os << "everyone in the socket group";
  for (const auto& u : users) os << u << " ";
  for (const auto& g : groups) os << "@" << g << " ";
  auto r = [&](const char* name, const std::optional<Range>& x) {
    os << "; " << name << " ";
    if (x)
      os << json_number(x->min) << "-" << json_number(x->max);
    else
      os << "device range";
  };
  r("power limit W", power_limit_w);
  r("SM clock MHz", sm_clock_mhz);
  r("memory clock MHz", mem_clock_mhz);
  os << "; " << max_changes_per_minute << " changes/min per user; " << max_clients << " connections, "
     << max_clients_per_uid << " per user";
  return os.str();
}

}  // namespace cnnergy::daemon
