// KnobClient (requests to cnnergyd) and open_knob_control (which path a command takes).
#include "telemetry/knob_client.hpp"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "core/errors.hpp"
#include "core/log.hpp"
#include "telemetry/knob_protocol.hpp"
#include "telemetry/knobs.hpp"

namespace cnnergy::telemetry {

namespace {

constexpr int kReplyTimeoutMs = 60'000;  // restoring several GPUs takes well under a second

const char* kHowToGetOne =
    "ask the administrator to run cnnergyd (packaging/cnnergyd.service; docs/daemon.md), or set "
    "CNNERGY_DAEMON_SOCKET to its socket; without it use --knobs dry-run, or run as root";

// "group cnnergy (gid 990)": the group that owns the socket, which a user must join.
std::string group_of(const std::string& path, std::string& name) {
  struct stat st {};
  name = "cnnergy";
  if (::stat(path.c_str(), &st) != 0) return "the daemon's group";
  std::vector<char> buf(65536);
  group gr{}, *out = nullptr;
  if (::getgrgid_r(st.st_gid, &gr, buf.data(), buf.size(), &out) == 0 && out) {
    name = out->gr_name;
    return "group " + name + " (gid " + std::to_string(st.st_gid) + ")";
  }
  name = std::to_string(st.st_gid);
  return "group " + name;
}

int connect_to(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == EACCES)
      throw PermissionDenied("cannot reach the cnnergyd socket " + path +
                             ": permission denied on its folder");
    throw NotSupported("no cnnergyd socket at " + path + " (" + std::strerror(errno) + "): " +
                       kHowToGetOne);
  }
  if (!S_ISSOCK(st.st_mode))
    throw InvalidArgument(path + " exists but is not a socket, so it is not a cnnergyd socket; "
                          "check CNNERGY_DAEMON_SOCKET");
  const int fd = connect_unix(path);
  if (fd < 0) {
    const int err = errno;
    if (err == EACCES || err == EPERM) {
      std::string name;
      const std::string group = group_of(path, name);
      throw PermissionDenied("cannot connect to cnnergyd at " + path + ": permission denied; uid " +
                             std::to_string(::getuid()) + " is not in " + group +
                             ", which owns the socket (ask the administrator to add you: "
                             "`usermod -aG " + name + " USER`, then log in again)");
    }
    throw NotSupported("nobody answers on the cnnergyd socket " + path + " (" +
                       std::strerror(err) + "): " + kHowToGetOne);
  }
  return fd;
}

Json request(const char* op) {
  Json j = Json::object();
  j["v"] = kKnobProtocolVersion;
  j["op"] = op;
  return j;
}

}  // namespace

std::string default_daemon_socket() {
  if (const char* p = std::getenv("CNNERGY_DAEMON_SOCKET"); p && *p) return p;
  return "/run/cnnergy/cnnergyd.sock";
}

KnobsMode parse_knobs_mode(const std::string& text) {
  if (text == "auto") return KnobsMode::kAuto;
  if (text == "direct") return KnobsMode::kDirect;
  if (text == "daemon") return KnobsMode::kDaemon;
  if (text == "dry-run") return KnobsMode::kDryRun;
  throw InvalidArgument("--knobs must be one of auto, direct, daemon, dry-run (got '" + text + "')");
}

const char* to_string(KnobsMode mode) {
  switch (mode) {
    case KnobsMode::kAuto:
      return "auto";
    case KnobsMode::kDirect:
      return "direct";
    case KnobsMode::kDaemon:
      return "daemon";
    case KnobsMode::kDryRun:
      return "dry-run";
  }
  return "?";
}

KnobClient::KnobClient(std::string socket_path, std::function<void(const std::string&)> announce)
    : path_(std::move(socket_path)), announce_(std::move(announce)) {
  fd_ = connect_to(path_);
  try {
    hello_ = call(request("hello"));
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

KnobClient::~KnobClient() {
  if (fd_ >= 0) ::close(fd_);  // the daemon restores this connection's changes when it sees EOF
}

Json KnobClient::call(Json req) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0) throw DeviceError("the connection to cnnergyd is closed");
  if (!write_message(fd_, req))
    throw DeviceError("cnnergyd at " + path_ +
                      " closed the connection (was it stopped? it restores the settings it made "
                      "for this connection)");
  const Frame f = read_frame(fd_, kReplyTimeoutMs, kReplyTimeoutMs);
  if (f.status != FrameStatus::kOk)
    throw DeviceError("no reply from cnnergyd at " + path_ +
                      (f.status == FrameStatus::kTimeout ? " within 60 s"
                                                         : ": the connection closed"));
  Json reply = Json::parse(f.payload);  // DataError for a malformed reply
  if (!reply.is_object() || !reply.find("ok") || !reply["ok"].is_bool())
    throw DataError("cnnergyd sent a reply without 'ok'");
  if (const Json* v = reply.find("v"); !v || !v->is_number() || v->as_number() != kKnobProtocolVersion)
    throw NotSupported("cnnergyd at " + path_ + " speaks another protocol version than this "
                       "cnnergy (" + std::to_string(kKnobProtocolVersion) + "); update one of them");
  if (!reply["ok"].as_bool()) throw_reply_error(reply);
  return reply;
}

void KnobClient::set_power_limit_w(unsigned gpu, double watts) {
  Json r = request("set_power_limit");
  r["gpu"] = gpu;
  r["watts"] = watts;
  note(call(std::move(r)));
}

void KnobClient::lock_sm_clocks(unsigned gpu, std::uint32_t min_mhz, std::uint32_t max_mhz) {
  Json r = request("lock_sm_clocks");
  r["gpu"] = gpu;
  r["min_mhz"] = min_mhz;
  r["max_mhz"] = max_mhz;
  note(call(std::move(r)));
}

void KnobClient::set_memory_clock(unsigned gpu, std::uint32_t mhz) {
  Json r = request("set_mem_clock");
  r["gpu"] = gpu;
  r["mhz"] = mhz;
  note(call(std::move(r)));
}

void KnobClient::reset_sm_clocks(unsigned gpu) {
  Json r = request("reset_sm_clocks");
  r["gpu"] = gpu;
  call(std::move(r));
}

void KnobClient::reset_memory_clock(unsigned gpu) {
  Json r = request("reset_mem_clock");
  r["gpu"] = gpu;
  call(std::move(r));
}

void KnobClient::restore() {
  const Json reply = call(request("reset_all"));  // keeps this connection's GPUs
  if (announce_)
    for (const Json& line : reply["restored"].items()) announce_("via cnnergyd: restored " + line.as_string());  // "2 setting(s)"
}

void KnobClient::note(const Json& reply) {
  const Json* done = reply.find("done");
  const std::string line = done && done->is_string() ? done->as_string() : "done";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    plan_.push_back(line);
  }
  if (announce_) announce_("via cnnergyd: " + line);
}

std::vector<std::string> KnobClient::plan() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return plan_;
}

Json KnobClient::state() { return call(request("state")); }

std::string KnobClient::describe() const {
  std::ostringstream os;
  os << "through cnnergyd at " << path_ << " (uid " << ::getuid() << ")";
  return os.str();
}

bool daemon_answers(const std::string& socket_path) {
  try {
    KnobClient c(socket_path);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

std::unique_ptr<KnobControl> open_knob_control(std::shared_ptr<const Nvml> nvml,
                                               const KnobControlOptions& options) {
  const std::string socket = options.socket_path.empty() ? default_daemon_socket() : options.socket_path;
  KnobsMode mode = options.mode;
  if (mode == KnobsMode::kAuto) {
    if (::geteuid() == 0) {
      mode = KnobsMode::kDirect;
    } else {
      struct stat st {};
      if (::stat(socket.c_str(), &st) != 0)
        throw PermissionDenied(
            "changing GPU settings needs root, or the cnnergyd daemon, and no daemon socket is at " +
            socket + ": " + kHowToGetOne);
      mode = KnobsMode::kDaemon;  // errors from here name the socket and what is wrong with it
    }
  }
  std::unique_ptr<KnobControl> control;
  if (mode == KnobsMode::kDaemon) {
    control = std::make_unique<KnobClient>(socket, options.announce);
  } else {
    KnobOptions o;
    o.journal_path = options.journal_path;
    o.dry_run = mode == KnobsMode::kDryRun;
    o.handle_signals = options.handle_signals;
    o.announce = options.announce;
    control = std::make_unique<KnobController>(std::move(nvml), o);
  }
  const std::string line = std::string("knobs: ") + to_string(mode) + " — " + control->describe();
  if (options.announce)
    options.announce(line);
  else
    log_info(line);
  return control;
}

}  // namespace cnnergy::telemetry
