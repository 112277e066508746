// Session: the request loop of one connection, strict request checking, policy, leases, rate limit.
#include "daemon/session.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <ctime>
#include <set>
#include <sstream>

#include "core/errors.hpp"
#include "daemon/server.hpp"
#include "telemetry/journal.hpp"
#include "telemetry/knob_protocol.hpp"
#include "telemetry/knobs.hpp"
#include "telemetry/nvml.hpp"

namespace cnnergy::daemon {

namespace {

using telemetry::error_reply;

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string utc_text(std::int64_t unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// Every digit that tells the value apart (600.0001 W is not "600 W"): the shortest text that reads
// back as the same double.
std::string num(double v) { return json_number(v); }

// A whole number in [lo, hi] (JSON numbers are doubles: 1.5, -1, 1e300 are refused).
std::uint32_t whole(const Json& request, const char* key, double lo, double hi) {
  const Json* v = request.find(key);
  if (!v) throw InvalidArgument(std::string("the request lacks '") + key + "'");
  if (!v->is_number()) throw InvalidArgument(std::string("'") + key + "' must be a number");
  const double x = v->as_number();
  if (!std::isfinite(x) || x != std::floor(x) || x < lo || x > hi)
    throw InvalidArgument(std::string("'") + key + "' must be a whole number in [" + num(lo) + ", " +
                          num(hi) + "], not " + num(x));
  return static_cast<std::uint32_t>(x);
}

// The keys each operation takes besides "v", "op" and "id"; anything else is refused.
const std::map<std::string, std::set<std::string>>& operations() {
  static const std::map<std::string, std::set<std::string>> ops = {
      {"hello", {}},
      {"state", {}},
      {"set_power_limit", {"gpu", "watts"}},
      {"lock_sm_clocks", {"gpu", "min_mhz", "max_mhz"}},
      {"reset_sm_clocks", {"gpu"}},
      {"set_mem_clock", {"gpu", "mhz"}},
      {"reset_mem_clock", {"gpu"}},
      {"reset_all", {}},
      {"release", {}},
      {"restore", {}},
  };
  return ops;
}

void check_range(const std::optional<Range>& r, double v, const char* what, const char* unit) {
  if (r && !r->contains(v))
    throw InvalidArgument(std::string(what) + " " + num(v) + " " + unit +
                          " is outside the range this cnnergyd's policy allows: " + num(r->min) +
                          " to " + num(r->max) + " " + unit);
}

}  // namespace

Session::Session(Daemon& daemon, int fd, std::uint64_t id, pid_t pid, uid_t uid, gid_t gid,
                 std::vector<gid_t> groups, std::shared_ptr<Connection> conn)
    : daemon_(daemon), fd_(fd), id_(id), pid_(pid), uid_(uid), gid_(gid), groups_(std::move(groups)),
      conn_(std::move(conn)), last_active_ms_(steady_ms()) {}

int Session::idle_wait_ms() const {
  const int idle_s = daemon_.policy_.idle_timeout_s;
  if (holds_ || idle_s <= 0) return -1;
  const std::int64_t left = std::int64_t{idle_s} * 1000 - (steady_ms() - last_active_ms_);
  return static_cast<int>(std::max<std::int64_t>(left, 0));
}

Session::~Session() { release_all("the session ended"); }

void Session::run() {
  const int frame_ms = daemon_.policy_.frame_timeout_ms;
  for (;;) {
    // A connection that holds nothing may not sit silent for ever (it would hold a slot).
    const int wait_ms = idle_wait_ms();
    if (wait_ms >= 0) {
      pollfd p{fd_, POLLIN, 0};
      int rc;
      while ((rc = ::poll(&p, 1, wait_ms)) < 0 && errno == EINTR) {
      }
      if (rc == 0) {
        const std::string why = "closing connection " + std::to_string(id_) + " of uid " + std::to_string(uid_) +
                                ": idle for " + std::to_string(daemon_.policy_.idle_timeout_s) +
                                " s holding no lease (the policy's idle_timeout_s)";
        daemon_.log_(why);
        telemetry::write_message(fd_, error_reply(ExitCode::kUsage, why));
        break;
      }
    }
    const telemetry::Frame f = telemetry::read_frame(fd_, -1, frame_ms);
    if (f.status == telemetry::FrameStatus::kOk) {
      last_active_ms_ = steady_ms();
      if (conn_) conn_->last_active_ms = last_active_ms_;
      const Json reply = handle(f.payload);
      if (conn_) conn_->holds = holds_;
      if (!telemetry::write_message(fd_, reply)) break;
      continue;
    }
    std::string why;
    switch (f.status) {
      case telemetry::FrameStatus::kTooLarge:
        why = "a message of " + std::to_string(f.declared_bytes) + " bytes is over the limit of " +
              std::to_string(telemetry::kMaxMessageBytes) + " bytes";
        break;
      case telemetry::FrameStatus::kTruncated:
        why = "the connection closed in the middle of a message";
        break;
      case telemetry::FrameStatus::kTimeout:
        why = "incomplete message: the rest did not arrive within " + std::to_string(frame_ms) + " ms";
        break;
      default:
        break;
    }
    // The stream cannot be trusted after a framing error: answer (best effort), then close.
    if (!why.empty()) telemetry::write_message(fd_, error_reply(ExitCode::kData, why + "; closing"));
    break;
  }
  release_all("the connection closed");
  ::shutdown(fd_, SHUT_RDWR);
}

Json Session::handle(const std::string& payload) {
  Json request;
  try {
    request = Json::parse(payload);
  } catch (const std::exception& e) {
    return error_reply(ExitCode::kData, std::string("malformed request (not JSON): ") + e.what());
  }
  try {
    if (!request.is_object()) throw InvalidArgument("a request must be a JSON object");
    const Json* v = request.find("v");
    if (!v) throw InvalidArgument("the request has no protocol version 'v' (this cnnergyd speaks 1)");
    if (!v->is_number() || v->as_number() != telemetry::kKnobProtocolVersion)
      throw NotSupported("unknown protocol version " + v->dump().substr(0, 32) + ": this cnnergyd speaks version " +
                         std::to_string(telemetry::kKnobProtocolVersion) +
                         "; use a cnnergy of the same release");
    Json reply = dispatch(request);
    if (const Json* id = request.find("id"); id && id->is_number()) reply["id"] = *id;
    return reply;
  } catch (const Error& e) {
    return error_reply(e.code(), e.what());
  } catch (const std::exception& e) {
    return error_reply(ExitCode::kInternal, e.what());
  }
}

Json Session::dispatch(const Json& request) {
  const Json* op_json = request.find("op");
  if (!op_json || !op_json->is_string()) throw InvalidArgument("the request has no 'op' string");
  const std::string& op = op_json->as_string();
  const auto it = operations().find(op);
  if (it == operations().end()) {
    std::string known;
    for (const auto& [name, keys] : operations()) known += (known.empty() ? "" : ", ") + name;
    throw InvalidArgument("unknown operation '" + op.substr(0, 64) + "' (known: " + known + ")");
  }
  for (const auto& [key, value] : request.members())
    if (key != "v" && key != "op" && key != "id" && !it->second.count(key))
      throw InvalidArgument("'" + op + "' takes no '" + key.substr(0, 64) + "'");
  if (op == "hello") {
    Json r = telemetry::ok_reply();
    r["daemon"] = "cnnergyd";
    r["uid"] = uid_;
    r["may_change"] = daemon_.policy_.user_allowed(uid_, gid_, groups_);
    r["read_only"] = daemon_.policy_.read_only;
    r["policy"] = daemon_.policy_.summary();
    return r;
  }
  if (op == "state") return state();
  if (op == "release") return release(true);
  if (op == "reset_all") return release(false);
  if (op == "restore") return restore_orphans();
  return change(request, op);
}

Json Session::state() const {
  std::lock_guard<std::mutex> lock(daemon_.state_mutex_);
  const Policy& pol = daemon_.policy_;
  Json r = telemetry::ok_reply();
  r["uid"] = uid_;
  r["may_change"] = pol.user_allowed(uid_, gid_, groups_);
  r["policy"] = pol.summary();
  Json gpus = Json::array();
  for (const auto& d : daemon_.nvml_->devices()) {
    Json g = Json::object();
    g["index"] = d.index();
    g["uuid"] = d.uuid();
    g["name"] = d.name();
    g["changeable"] = !pol.read_only && pol.gpu_allowed(d.index()) && !d.lost();
    if (!d.lost()) {
      const telemetry::PowerLimits l = d.power_limits();
      auto watts = [](const std::optional<std::uint32_t>& mw) {
        return mw ? Json(*mw / 1000.0) : Json();
      };
      g["power_limit_w"] = watts(l.current_mw);
      g["power_limit_min_w"] = watts(l.min_mw);
      g["power_limit_max_w"] = watts(l.max_mw);
      g["power_limit_default_w"] = watts(l.default_mw);
      const telemetry::ClockReadings c = d.clocks();
      g["sm_clock_mhz"] = json_or_null(c.sm_mhz);
      g["mem_clock_mhz"] = json_or_null(c.mem_mhz);
      g["app_sm_clock_mhz"] = json_or_null(c.app_sm_mhz);
      g["app_mem_clock_mhz"] = json_or_null(c.app_mem_mhz);
    }
    if (const auto it = daemon_.leases_.find(d.index()); it != daemon_.leases_.end()) {
      g["held_by_uid"] = it->second.uid;
      g["held_since_unix_s"] = it->second.since_unix_s;
      g["held_by_you"] = it->second.session == id_;
    } else {
      g["held_by_uid"] = nullptr;
    }
    gpus.push_back(std::move(g));
  }
  r["gpus"] = std::move(gpus);
  return r;
}

// Who, which GPU: the refusals that depend only on the policy.
void Session::check_may_change(unsigned gpu) {
  const Policy& pol = daemon_.policy_;
  if (pol.read_only)
    throw PermissionDenied("this cnnergyd is read-only: its policy allows state queries only");
  if (!pol.user_allowed(uid_, gid_, groups_))
    throw PermissionDenied("uid " + std::to_string(uid_) +
                           " may not change GPU settings under this cnnergyd's policy (" +
                           pol.summary() + ")");
  if (gpu >= daemon_.nvml_->device_count())
    throw InvalidArgument("no GPU " + std::to_string(gpu) + " (this machine has " +
                          std::to_string(daemon_.nvml_->device_count()) + ")");
  if (!pol.gpu_allowed(gpu))
    throw PermissionDenied("GPU " + std::to_string(gpu) + " is not among the GPUs this cnnergyd's policy lets users change");
}

// The lease and rate checks; state_mutex_ is held by the caller.
void Session::take_lease(unsigned gpu) {
  if (const auto it = daemon_.leases_.find(gpu); it != daemon_.leases_.end() && it->second.session != id_)
    throw PermissionDenied("GPU " + std::to_string(gpu) + " is held by uid " +
                           std::to_string(it->second.uid) + " since " +
                           utc_text(it->second.since_unix_s) +
                           "; it is free again when that client disconnects or releases it");
  const unsigned max = daemon_.policy_.max_changes_per_minute;
  auto& times = daemon_.changes_[uid_];
  const std::int64_t now = steady_ms();
  while (!times.empty() && now - times.front() >= 60'000) times.pop_front();
  if (times.size() >= max)
    throw PermissionDenied("uid " + std::to_string(uid_) + " made " + std::to_string(times.size()) +
                           " changes in the last minute; this cnnergyd's policy allows " +
                           std::to_string(max) + " per minute");
}

Json Session::change(const Json& request, const std::string& op) {
  const unsigned gpu = whole(request, "gpu", 0, 1023);
  check_may_change(gpu);
  const Policy& pol = daemon_.policy_;
  double watts = 0;
  std::uint32_t a = 0, b = 0;
  if (op == "set_power_limit") {
    const Json* w = request.find("watts");
    if (!w || !w->is_number() || !std::isfinite(w->as_number()))
      throw InvalidArgument("'watts' must be a finite number");
    watts = w->as_number();
    check_range(pol.power_limit_w, watts, "power limit", "W");
  } else if (op == "lock_sm_clocks") {
    a = whole(request, "min_mhz", 0, 100000);
    b = whole(request, "max_mhz", 0, 100000);
    check_range(pol.sm_clock_mhz, a, "SM clock", "MHz");
    check_range(pol.sm_clock_mhz, b, "SM clock", "MHz");
  } else if (op == "set_mem_clock") {
    a = whole(request, "mhz", 0, 100000);
    check_range(pol.mem_clock_mhz, a, "memory clock", "MHz");
  }

  std::lock_guard<std::mutex> lock(daemon_.state_mutex_);
  take_lease(gpu);
  if (!controller_) {
    telemetry::KnobOptions o;
    o.journal_path = daemon_.lease_journal_path(id_);
    o.handle_signals = false;  // the daemon handles signals and restores every session
    o.owner_uid = uid_;
    const std::string who = "uid " + std::to_string(uid_) + " pid " + std::to_string(pid_) +
                            " conn " + std::to_string(id_) + ": ";
    o.announce = [this, who](const std::string& line) { daemon_.log_(who + line); };
    controller_ = std::make_unique<telemetry::KnobController>(daemon_.nvml_, o);
  }
  const std::size_t planned = controller_->plan().size();
  if (op == "set_power_limit")
    controller_->set_power_limit_w(gpu, watts);
  else if (op == "lock_sm_clocks")
    controller_->lock_sm_clocks(gpu, a, b);
  else if (op == "set_mem_clock")
    controller_->set_memory_clock(gpu, a);
  else if (op == "reset_sm_clocks")
    controller_->reset_sm_clocks(gpu);
  else
    controller_->reset_memory_clock(gpu);
  daemon_.changes_[uid_].push_back(steady_ms());
  holds_ = true;
  Json r = telemetry::ok_reply();
  if (controller_->plan().size() > planned) {
    r["done"] = controller_->plan().back();
    if (!held_.count(gpu)) {
      held_.insert(gpu);
      daemon_.leases_[gpu] = Lease{id_, uid_, static_cast<std::int64_t>(std::time(nullptr))};
    }
  } else {
    r["done"] = op + " of GPU " + std::to_string(gpu);
  }
  return r;
}

// Restores every setting this connection changed; with free_gpus its leases end too (otherwise it
// keeps its GPUs, as a sweep does between trials).
Json Session::release(bool free_gpus) {
  std::lock_guard<std::mutex> lock(daemon_.state_mutex_);
  Json restored = Json::array();
  if (controller_) {
    const std::size_t before = controller_->active_changes();
    controller_->restore();  // DeviceError when something could not be put back: leases kept
    restored.push_back(std::to_string(before) + " setting(s)");
  }
  if (free_gpus) {
    for (unsigned g : held_) daemon_.leases_.erase(g);
    held_.clear();
    holds_ = false;  // nothing left: idle again
  }
  Json r = telemetry::ok_reply();
  r["restored"] = std::move(restored);
  return r;
}

Json Session::restore_orphans() {
  Json r = release(true);
  std::lock_guard<std::mutex> lock(daemon_.state_mutex_);
  auto& orphans = daemon_.orphans_;
  std::vector<std::string> failed;
  for (auto it = orphans.begin(); it != orphans.end();) {
    if (uid_ != 0 && (!it->owner_uid || *it->owner_uid != uid_)) {
      ++it;
      continue;
    }
    telemetry::Journal j(it->journal_path);
    telemetry::JournalData data = j.read();
    const auto rep = telemetry::restore_entries(daemon_.nvml_.get(), data.entries, false);
    for (const auto& line : rep.restored) r["restored"].push_back(line);
    if (rep.failed.empty()) {
      j.remove();
      it = orphans.erase(it);
      continue;
    }
    data.entries = rep.remaining;
    j.write(data);
    failed.insert(failed.end(), rep.failed.begin(), rep.failed.end());
    ++it;
  }
  if (!failed.empty()) {
    std::string msg = "could not restore:";
    for (const auto& f : failed) msg += "\n  " + f;
    throw DeviceError(msg);
  }
  return r;
}

void Session::release_all(const char* why) noexcept {
  try {
    std::lock_guard<std::mutex> lock(daemon_.state_mutex_);
    if (controller_ && controller_->active_changes() > 0) {
      daemon_.log_("uid " + std::to_string(uid_) + " conn " + std::to_string(id_) + ": " + why +
                   ": restoring its settings");
      try {
        controller_->restore();
      } catch (const std::exception& e) {
        daemon_.log_(e.what());
        daemon_.orphans_.push_back({controller_->journal_path(), uid_});
      }
    }
    controller_.reset();
    for (unsigned g : held_) daemon_.leases_.erase(g);
    held_.clear();
  } catch (...) {
  }
}

}  // namespace cnnergy::daemon
