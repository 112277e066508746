// Knob journal: JSON file format, durable atomic replacement, and restoring from entries.
#include "telemetry/journal.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/bounded_file.hpp"
#include "core/errors.hpp"
#include "core/subprocess.hpp"
#include "core/json.hpp"
#include "telemetry/nvml.hpp"

namespace cnnergy::telemetry {

namespace {

constexpr int kJournalVersion = 1;

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

KnobKind parse_kind(const std::string& s) {
  if (s == "power_limit") return KnobKind::kPowerLimit;
  if (s == "sm_locked_clocks") return KnobKind::kSmLockedClocks;
  if (s == "mem_locked_clocks") return KnobKind::kMemLockedClocks;
  if (s == "application_clocks") return KnobKind::kApplicationClocks;
  throw DataError("unknown knob '" + s + "'");
}

std::uint32_t as_u32(const Json& j, const std::string& what) {
  return static_cast<std::uint32_t>(json_integer(j, what, 0, UINT32_MAX));
}


void fsync_path(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

const char* to_string(KnobKind k) {
  switch (k) {
    case KnobKind::kPowerLimit:
      return "power_limit";
    case KnobKind::kSmLockedClocks:
      return "sm_locked_clocks";
    case KnobKind::kMemLockedClocks:
      return "mem_locked_clocks";
    case KnobKind::kApplicationClocks:
      return "application_clocks";
  }
  return "unknown";
}

Journal::Journal(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw InvalidArgument("empty knob journal path");
}

std::string Journal::default_path() {
  if (const char* p = std::getenv("CNNERGY_JOURNAL"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/cnnergy/knob-journal.json";
  if (const char* h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.cache/cnnergy/knob-journal.json";
  return "/tmp/cnnergy-knob-journal-" + std::to_string(::getuid()) + ".json";
}

bool Journal::exists() const {
  std::error_code ec;
  return std::filesystem::exists(path_, ec);
}

JournalData Journal::read() const {
  const std::string text = read_bounded_file(path_, kKnobJournalLimit);
  try {
    const Json j = Json::parse(text);
    if (!j.is_object()) throw DataError("not a JSON object");
    if (j.at("version").number("version") != kJournalVersion)
      throw DataError("unknown journal version");
    JournalData d;
    d.pid = static_cast<long>(json_integer(j.at("pid"), "pid", 0, 1LL << 32));
    if (const Json* t = j.find("pid_start_ticks"))
      d.pid_start_ticks = static_cast<std::uint64_t>(json_integer(*t, "pid_start_ticks", 0, 1LL << 53));
    d.host = j.at("host").str("host");
    if (const Json* b = j.find("boot_id")) d.boot_id = b->str("boot_id");
    if (const Json* u = j.find("owner_uid")) d.owner_uid = as_u32(*u, "owner_uid");
    d.created_unix_s = json_integer(j.at("created_unix_s"), "created_unix_s", -(1LL << 53), 1LL << 53);
    const Json& entries = j.at("entries");
    if (!entries.is_array()) throw DataError("'entries' must be an array");
    for (const Json& e : entries.items()) {
      JournalEntry x;
      x.uuid = e.at("uuid").str("uuid");
      if (x.uuid.empty()) throw DataError("empty uuid");
      x.index = as_u32(e.at("index"), "index");
      if (const Json* n = e.find("name")) x.name = n->str("name");
      x.kind = parse_kind(e.at("knob").str("knob"));
      if (x.kind == KnobKind::kPowerLimit)
        x.original_power_limit_mw =
            as_u32(e.at("original_power_limit_mw"), "original_power_limit_mw");
      if (x.kind == KnobKind::kApplicationClocks) {
        x.original_app_mem_mhz = as_u32(e.at("original_app_mem_mhz"), "original_app_mem_mhz");
        x.original_app_sm_mhz = as_u32(e.at("original_app_sm_mhz"), "original_app_sm_mhz");
      }
      d.entries.push_back(std::move(x));
    }
    return d;
  } catch (const DataError& e) {
    throw DataError(
        "the knob journal " + path_ + " is corrupt (" + e.what() +
        "); inspect it, restore the GPU settings by hand (nvidia-smi), then delete it or run "
        "`cnnergy restore --forget`");
  }
}

void Journal::write(const JournalData& data) const {
  Json j = Json::object();
  j["version"] = kJournalVersion;
  j["tool"] = "cnnergy";
  j["pid"] = data.pid;
  if (data.pid_start_ticks) j["pid_start_ticks"] = static_cast<double>(data.pid_start_ticks);
  j["host"] = data.host;
  j["boot_id"] = data.boot_id;
  if (data.owner_uid) j["owner_uid"] = *data.owner_uid;
  j["created_unix_s"] = data.created_unix_s;
  Json entries = Json::array();
  for (const auto& e : data.entries) {
    Json x = Json::object();
    x["uuid"] = e.uuid;
    x["index"] = e.index;
    x["name"] = e.name;
    x["knob"] = to_string(e.kind);
    if (e.kind == KnobKind::kPowerLimit) x["original_power_limit_mw"] = e.original_power_limit_mw;
    if (e.kind == KnobKind::kApplicationClocks) {
      x["original_app_mem_mhz"] = e.original_app_mem_mhz;
      x["original_app_sm_mhz"] = e.original_app_sm_mhz;
    }
    if (e.kind == KnobKind::kSmLockedClocks || e.kind == KnobKind::kMemLockedClocks)
      x["restore"] = "reset";
    entries.push_back(std::move(x));
  }
  j["entries"] = std::move(entries);
  const std::string text = j.dump(2) + "\n";

  namespace fs = std::filesystem;
  const fs::path target(path_);
  std::error_code ec;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  const std::string tmp = path_ + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw DataError("cannot write the knob journal " + tmp + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw DataError("cannot write the knob journal " + tmp + ": " + std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
  // The data must be on disk before the rename makes it the journal, and the rename before the
  // GPU setting changes: fsync the file, rename, fsync the folder.
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw DataError("cannot sync the knob journal " + tmp + ": " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw DataError("cannot replace the knob journal " + path_ + ": " + std::strerror(err));
  }
  fsync_path(target.has_parent_path() ? target.parent_path().string() : ".",
             O_RDONLY | O_DIRECTORY);
}

void Journal::remove() const {
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT)
    throw DataError("cannot delete the knob journal " + path_ + ": " + std::strerror(errno));
  const std::filesystem::path target(path_);
  fsync_path(target.has_parent_path() ? target.parent_path().string() : ".",
             O_RDONLY | O_DIRECTORY);
}

JournalData Journal::for_this_process() {
  JournalData d;
  d.pid = static_cast<long>(::getpid());
  d.pid_start_ticks = process_start_ticks(d.pid).value_or(0);
  d.host = host_name();
  d.boot_id = read_first_line("/proc/sys/kernel/random/boot_id");
  d.created_unix_s = static_cast<std::int64_t>(std::time(nullptr));
  return d;
}

bool Journal::writer_alive(const JournalData& data) {
  if (data.host != host_name()) return false;
  if (!data.boot_id.empty() && data.boot_id != read_first_line("/proc/sys/kernel/random/boot_id"))
    return false;
  if (data.pid <= 0 || data.pid > (1L << 22)) return false;  // Linux PIDs stop at 2^22
  if (!(::kill(static_cast<pid_t>(data.pid), 0) == 0 || errno == EPERM)) return false;
  if (data.pid_start_ticks == 0) return true;  // an older journal: the PID is all there is
  const auto now = process_start_ticks(data.pid);
  return !now || *now == data.pid_start_ticks;  // another start time: the PID was reused
}

std::string describe_restore(const JournalEntry& e) {
  const std::string gpu = "GPU " + std::to_string(e.index) + " (" + e.uuid + ")";
  switch (e.kind) {
    case KnobKind::kPowerLimit: {
      std::ostringstream os;
      os << gpu << ": power limit back to " << e.original_power_limit_mw / 1000.0 << " W";
      return os.str();
    }
    case KnobKind::kSmLockedClocks:
      return gpu + ": unlock SM clocks";
    case KnobKind::kMemLockedClocks:
      return gpu + ": unlock memory clocks";
    case KnobKind::kApplicationClocks:
      return gpu + ": application clocks back to " + std::to_string(e.original_app_mem_mhz) +
             " MHz memory, " + std::to_string(e.original_app_sm_mhz) + " MHz SM";
  }
  return gpu;
}

RestoreReport restore_entries(const Nvml* nvml, const std::vector<JournalEntry>& entries,
                              bool dry_run) {
  RestoreReport report;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    const JournalEntry& e = *it;
    const std::string what = describe_restore(e);
    const GpuDevice* dev = nvml ? nvml->find_by_uuid(e.uuid) : nullptr;
    if (!dev) {
      report.failed.push_back(
          what + ": " +
          (nvml ? "no GPU with this UUID on this machine now" : "NVML is not available"));
      report.remaining.insert(report.remaining.begin(), e);
      continue;
    }
    if (dry_run) {
      report.restored.push_back("would " + what);
      continue;
    }
    try {
      switch (e.kind) {
        case KnobKind::kPowerLimit:
          dev->set_power_limit_mw(e.original_power_limit_mw);
          break;
        case KnobKind::kSmLockedClocks:
          dev->reset_locked_sm_clocks();
          break;
        case KnobKind::kMemLockedClocks:
          dev->reset_locked_mem_clocks();
          break;
        case KnobKind::kApplicationClocks:
          dev->set_application_clocks(e.original_app_mem_mhz, e.original_app_sm_mhz);
          break;
      }
      report.restored.push_back(what);
    } catch (const std::exception& ex) {
      report.failed.push_back(what + ": " + ex.what());
      report.remaining.insert(report.remaining.begin(), e);
    }
  }
  return report;
}

}  // namespace cnnergy::telemetry
