// The persistent algorithm cache (algo_cache.hpp): keys, the JSON file, the lock-merge-rename write
// and the process-wide registry.
#include "core/algo_cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "core/bounded_file.hpp"
#include "core/errors.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"

namespace cnnergy {

namespace {

constexpr const char* kFormatName = "cnnergy-conv-algo-cache";

// The start value these file names were first made with: one digit short of FNV's offset basis,
// kept so that existing cache files keep their names.
constexpr std::uint64_t kFileNameHashStart = 1469598103934665603ull;

// The file of one context: its name carries a hash of the context, so GPUs (or driver versions)
// sharing a home directory keep separate files; the context inside is checked all the same.
std::string file_name(const AlgoCacheContext& c) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(fnv1a64(c.fingerprint(), kFileNameHashStart)));
  return std::string("conv-algos-v") + std::to_string(AlgoCache::kFormatVersion) + "-" + hex +
         ".json";
}

std::int64_t int_of(const Json& j, const char* key) {
  return json_integer(j.at(key), key, -(std::int64_t{1} << 31), (std::int64_t{1} << 31) - 1);
}

// An exclusive flock on <file>.lock for as long as it lives; ok() false where it cannot be had.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return;
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) {
        ::close(fd_);
        fd_ = -1;
        return;
      }
  }
  ~FileLock() {
    if (fd_ >= 0) {
      (void)::flock(fd_, LOCK_UN);
      ::close(fd_);
    }
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace

Json AlgoCacheContext::to_json() const {
  Json j = Json::object();
  j["gpu_name"] = gpu_name;
  j["compute_capability"] = compute_capability;
  j["driver_version"] = driver_version;
  j["driver_release"] = driver_release;
  j["cudnn_version"] = cudnn_version;
  j["cuda_runtime_version"] = cuda_runtime_version;
  return j;
}

std::string AlgoCacheContext::fingerprint() const {
  return gpu_name + "|sm" + std::to_string(compute_capability) + "|driver" +
         std::to_string(driver_version) + "/" + driver_release + "|cudnn" +
         std::to_string(cudnn_version) + "|cuda" + std::to_string(cuda_runtime_version);
}

std::string ConvProblemKey::str() const {
  std::ostringstream o;
  o << policy << " " << direction << " x" << n << "x" << c << "x" << h << "x" << w << " w" << k
    << "x" << (groups ? c / groups : c) << "x" << r << "x" << s << " g" << groups << " stride"
    << stride_h << "x" << stride_w << " pad" << pad_h << "x" << pad_w << " dil" << dilation_h << "x"
    << dilation_w << " " << dtype << " " << layout << " " << math << " beta" << json_number(beta)
    << " ws" << workspace_limit_bytes << " cand" << candidates;
  return o.str();
}

Json AlgoDecision::to_json() const {
  Json j = Json::object();
  j["kind"] = kind;
  if (kind == "legacy") {
    j["algo"] = algo;
    j["math_type"] = math_type;
  } else if (kind == "graph") {
    j["engine"] = engine;
  } else {
    j["graph_won"] = graph_won;
  }
  j["workspace_bytes"] = static_cast<double>(workspace_bytes);
  j["device_ms"] = device_ms;
  j["host_ms"] = host_ms;
  if (!note.empty()) j["note"] = note;
  return j;
}

AlgoDecision AlgoDecision::from_json(const Json& j) {
  AlgoDecision d;
  d.kind = j.at("kind").str("kind");
  if (d.kind == "legacy") {
    d.algo = static_cast<int>(int_of(j, "algo"));
    d.math_type = static_cast<int>(int_of(j, "math_type"));
  } else if (d.kind == "graph") {
    d.engine = j.at("engine").str("engine");
    if (!parse_engine_tag(d.engine)) throw DataError("engine tag '" + d.engine + "' is malformed");
  } else if (d.kind == "choice") {
    d.graph_won = j.at("graph_won").boolean("graph_won");
  } else {
    throw DataError("unknown decision kind '" + d.kind + "'");
  }
  d.workspace_bytes =
      static_cast<std::uint64_t>(json_integer(j.at("workspace_bytes"), "workspace_bytes", 0, std::int64_t{1} << 50));
  const Json& dev = j.at("device_ms");
  const Json& host = j.at("host_ms");
  d.device_ms = dev.is_null() ? -1.0 : dev.number("device_ms");
  d.host_ms = host.is_null() ? -1.0 : host.number("host_ms");
  if (const Json* n = j.find("note")) d.note = n->str("note");
  return d;
}

std::optional<GraphEngineTag> parse_engine_tag(const std::string& tag) {
  // eng<id>(_k<type>=<value>)*, every number a (possibly negative) integer
  auto read_int = [&](std::size_t& i, std::int64_t& out) {
    const std::size_t start = i;
    if (i < tag.size() && tag[i] == '-') ++i;
    const std::size_t digits = i;
    while (i < tag.size() && tag[i] >= '0' && tag[i] <= '9') ++i;
    if (i == digits || i - digits > 18) return false;
    out = std::stoll(tag.substr(start, i - start));
    return true;
  };
  if (tag.rfind("eng", 0) != 0) return std::nullopt;
  GraphEngineTag t;
  std::size_t i = 3;
  if (!read_int(i, t.engine_id)) return std::nullopt;
  while (i < tag.size()) {
    if (tag.compare(i, 2, "_k") != 0) return std::nullopt;
    i += 2;
    std::pair<std::int64_t, std::int64_t> knob;
    if (!read_int(i, knob.first) || i >= tag.size() || tag[i] != '=') return std::nullopt;
    ++i;
    if (!read_int(i, knob.second)) return std::nullopt;
    t.knobs.push_back(knob);
  }
  return t;
}

// ---- AlgoCache -------------------------------------------------------------------------------
AlgoCache::AlgoCache(std::string directory, AlgoCacheContext context)
    : directory_(std::move(directory)), context_(std::move(context)) {
  if (directory_.empty()) return;
  path_ = (std::filesystem::path(directory_) / file_name(context_)).string();
  persist_ = true;
  std::lock_guard<std::mutex> lock(mutex_);
  entries_ = read_file(/*warn=*/true);
}

AlgoCache::~AlgoCache() {
  try {
    flush();
  } catch (...) {  // a destructor must not throw; what could not be written is only a cache
  }
}

void AlgoCache::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pending_) write_through();
}

bool AlgoCache::persistent() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return persist_;
}

void AlgoCache::warn_once(const std::string& kind, const std::string& message) {
  if (!warned_.insert(kind).second) return;
  log_warn("algorithm cache: " + message);
}

std::size_t AlgoCache::warnings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return warned_.size();
}

// The file's entries; empty (with one warning where `warn`) when it is absent, unreadable, not
// this format, another version or another context. Called with mutex_ held.
std::map<std::string, AlgoDecision> AlgoCache::read_file(bool warn) {
  std::map<std::string, AlgoDecision> out;
  auto ignore = [&](const std::string& why) {
    if (warn) warn_once("read", "ignoring " + path_ + " (" + why + "); it will be rewritten");
    return std::map<std::string, AlgoDecision>{};
  };
  if (::access(path_.c_str(), F_OK) != 0) return out;  // absent: nothing cached yet
  std::string text;
  try {
    text = read_bounded_file(path_, kAlgoCacheLimit);
  } catch (const DataError& e) {
    return ignore(e.what());
  }
  try {
    const Json j = Json::parse(text);
    if (!j.is_object() || !j.find("format") || !j.at("format").is_string() ||
        j.at("format").as_string() != kFormatName)
      return ignore("not a cnnergy algorithm cache");
    const int version = static_cast<int>(json_integer(j.at("version"), "version", 0, 1 << 20));
    if (version != kFormatVersion)
      return ignore("format version " + std::to_string(version) + ", this build reads " +
                    std::to_string(kFormatVersion));
    const Json& c = j.at("context");
    AlgoCacheContext theirs;
    theirs.gpu_name = c.at("gpu_name").str("gpu_name");
    theirs.compute_capability = static_cast<int>(int_of(c, "compute_capability"));
    theirs.driver_version = static_cast<int>(int_of(c, "driver_version"));
    theirs.driver_release = c.at("driver_release").str("driver_release");
    theirs.cudnn_version = static_cast<int>(int_of(c, "cudnn_version"));
    theirs.cuda_runtime_version = static_cast<int>(int_of(c, "cuda_runtime_version"));
    if (!(theirs == context_))
      return ignore("made for " + theirs.fingerprint() + ", this run is " + context_.fingerprint());
    const Json& entries = j.at("entries");
    if (!entries.is_object()) return ignore("'entries' is not an object");
    for (const auto& [key, value] : entries.members()) out[key] = AlgoDecision::from_json(value);
  } catch (const Error& e) {
    return ignore(e.what());
  }
  return out;
}

// Lock, re-read what other processes wrote, merge this object's own decisions over it, write a
// temporary file and rename it into place. Called with mutex_ held.
void AlgoCache::write_through() {
  pending_ = false;
  last_write_ = std::chrono::steady_clock::now();
  if (!persist_) return;
  auto give_up = [&](const std::string& why) {
    warn_once("write", "cannot write " + directory_ + " (" + why +
                           "); running without persisting algorithm decisions");
    persist_ = false;
  };
  std::error_code ec;
  std::filesystem::create_directories(directory_, ec);
  if (ec) return give_up(ec.message());
  FileLock lock(path_ + ".lock");
  if (!lock.ok()) return give_up(std::string("lock file: ") + std::strerror(errno));
  std::map<std::string, AlgoDecision> merged = read_file(/*warn=*/false);
  for (const std::string& key : mine_) merged[key] = entries_.at(key);
  for (const std::string& key : forgotten_) merged.erase(key);
  Json entries = Json::object();
  for (const auto& [key, d] : merged) entries[key] = d.to_json();
  Json file = Json::object();
  file["format"] = kFormatName;
  file["version"] = kFormatVersion;
  file["context"] = context_.to_json();
  file["entries"] = entries;
  static std::atomic<unsigned> counter{0};
  const std::string tmp =
      path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return give_up(std::string("temporary file: ") + std::strerror(errno));
    out << file.dump(1) << "\n";
    out.flush();
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return give_up("writing the temporary file failed");
    }
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::filesystem::remove(tmp, ec);
    return give_up("rename: " + why);
  }
  entries_ = std::move(merged);  // also picks up what other processes decided meanwhile
}

std::optional<AlgoDecision> AlgoCache::lookup(const ConvProblemKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(key.str());
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void AlgoCache::record(const ConvProblemKey& key, const AlgoDecision& decision) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string k = key.str();
  entries_[k] = decision;
  mine_.insert(k);
  forgotten_.erase(k);
  pending_ = true;
  if (std::chrono::duration<double>(std::chrono::steady_clock::now() - last_write_).count() >=
      kWriteIntervalS)
    write_through();
}

void AlgoCache::forget(const ConvProblemKey& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string k = key.str();
  entries_.erase(k);
  mine_.erase(k);
  forgotten_.insert(k);
  pending_ = true;
}

std::size_t AlgoCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

std::string resolve_algo_cache_dir(const std::string& flag_value) {
  if (flag_value == "off") return {};
  if (!flag_value.empty()) return flag_value;
  if (const char* env = std::getenv("CNNERGY_ALGO_CACHE"); env && *env)
    return std::string(env) == "off" ? std::string() : std::string(env);
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return (std::filesystem::path(xdg) / "cnnergy").string();
  if (const char* home = std::getenv("HOME"); home && *home)
    return (std::filesystem::path(home) / ".cache" / "cnnergy").string();
  return {};
}

std::string nvidia_driver_release() {
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  <date>": the first token that
  // starts with a digit and holds a dot.
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!in || !std::getline(in, line)) return {};
  std::istringstream words(line);
  for (std::string w; words >> w;)
    if (!w.empty() && w[0] >= '0' && w[0] <= '9' && w.find('.') != std::string::npos) return w;
  return {};
}

std::shared_ptr<AlgoCache> shared_algo_cache(const std::string& directory,
                                             const AlgoCacheContext& context) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<AlgoCache>> registry;
  const std::string id = directory + "\n" + context.fingerprint();
  std::lock_guard<std::mutex> lock(mutex);
  if (auto existing = registry[id].lock()) return existing;
  auto made = std::make_shared<AlgoCache>(directory, context);
  registry[id] = made;
  return made;
}

}  // namespace cnnergy
