// Helpers for the telemetry tests: temporary folders, scoped environment variables, the fake NVML
// driver (configuration and its ground-truth entry points) and running the cnnergy binary.
#pragma once

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace cnnergy::test {

class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "cnnergy-telemetry-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Sets (or, with nullopt, unsets) environment variables and puts the old values back on exit.
class ScopedEnv {
 public:
  ScopedEnv() = default;
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second)
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        ::unsetenv(it->first.c_str());
    }
  }
  void set(const std::string& name, const std::optional<std::string>& value) {
    const char* old = std::getenv(name.c_str());
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value)
      ::setenv(name.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

inline const char* fake_nvml_path() { return CNNERGY_TEST_FAKE_NVML; }
inline const char* fake_nvml_minimal_path() { return CNNERGY_TEST_FAKE_NVML_MINIMAL; }

// A fake-NVML environment in its own folder: state file, journal, no error injection, no load.
// Faster sensor settings than the defaults keep the suite short; tests that need the realistic
// 100 ms / 4 ms override them.
struct FakeNvmlEnv {
  TempDir dir;
  ScopedEnv env;
  explicit FakeNvmlEnv(unsigned gpus = 2, double update_ms = 50, double energy_read_ms = 1) {
    env.set("CNNERGY_NVML_LIBRARY", fake_nvml_path());
    env.set("CNNERGY_FAKE_NVML_GPUS", std::to_string(gpus));
    env.set("CNNERGY_FAKE_NVML_UPDATE_MS", std::to_string(update_ms));
    env.set("CNNERGY_FAKE_NVML_ENERGY_READ_MS", std::to_string(energy_read_ms));
    env.set("CNNERGY_FAKE_NVML_STATE", dir.file("fake-state.txt"));
    env.set("CNNERGY_JOURNAL", dir.file("journal.json"));
    for (const char* v :
         {"CNNERGY_FAKE_NVML_FAIL", "CNNERGY_FAKE_NVML_LOAD", "CNNERGY_FAKE_NVML_LOAD_FILE",
          "CNNERGY_FAKE_NVML_MEM_CLOCKS", "CNNERGY_FAKE_NVML_SM_CLOCKS",
          "CNNERGY_FAKE_NVML_LIMITS_W", "CNNERGY_FAKE_NVML_NOISE", "CNNERGY_FAKE_NVML_POWER_W",
          "CNNERGY_FAKE_NVML_NAME", "CNNERGY_FAKE_NVML_PROFILE"})
      env.set(v, std::nullopt);
  }
  std::string journal() const { return dir.file("journal.json"); }
};

// The fake driver's ground truth and simulation controls (not NVML: reached with dlsym). Open it
// after Nvml::open() so the same loaded copy is used.
class FakeTruth {
 public:
  explicit FakeTruth(const char* path = fake_nvml_path()) {
    handle_ = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle_) throw std::runtime_error(std::string("dlopen fake NVML: ") + ::dlerror());
    energy_ = reinterpret_cast<int (*)(unsigned, long long, double*)>(
        ::dlsym(handle_, "cnnergy_fake_nvml_true_energy_mj"));
    load_ =
        reinterpret_cast<int (*)(unsigned, double)>(::dlsym(handle_, "cnnergy_fake_nvml_set_load"));
    power_ = reinterpret_cast<int (*)(unsigned, double*)>(
        ::dlsym(handle_, "cnnergy_fake_nvml_true_power_w"));
    locked_ = reinterpret_cast<int (*)(unsigned, unsigned*, unsigned*, unsigned*, unsigned*)>(
        ::dlsym(handle_, "cnnergy_fake_nvml_locked_clocks"));
    if (!energy_ || !load_ || !power_ || !locked_)
      throw std::runtime_error("fake NVML control symbols missing");
  }
  ~FakeTruth() { ::dlclose(handle_); }
  FakeTruth(const FakeTruth&) = delete;
  FakeTruth& operator=(const FakeTruth&) = delete;

  double energy_mj(unsigned gpu, long long t_ns) const {
    double e = 0;
    if (energy_(gpu, t_ns, &e) != 0) throw std::runtime_error("no true energy for that time");
    return e;
  }
  void set_load(unsigned gpu, double load) const {
    if (load_(gpu, load) != 0) throw std::runtime_error("set_load failed");
  }
  double power_w(unsigned gpu) const {
    double p = 0;
    if (power_(gpu, &p) != 0) throw std::runtime_error("true power failed");
    return p;
  }
  std::pair<unsigned, unsigned> locked_sm(unsigned gpu) const {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (locked_(gpu, &a, &b, &c, &d) != 0) throw std::runtime_error("locked clocks failed");
    return {a, b};
  }
  std::pair<unsigned, unsigned> locked_mem(unsigned gpu) const {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (locked_(gpu, &a, &b, &c, &d) != 0) throw std::runtime_error("locked clocks failed");
    return {c, d};
  }

 private:
  void* handle_ = nullptr;
  int (*energy_)(unsigned, long long, double*) = nullptr;
  int (*load_)(unsigned, double) = nullptr;
  int (*power_)(unsigned, double*) = nullptr;
  int (*locked_)(unsigned, unsigned*, unsigned*, unsigned*, unsigned*) = nullptr;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

// Polls `ready` every 10 ms for up to `timeout`; returns whether it became true.
inline bool wait_until(const std::function<bool()>& ready, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return ready();
}

// A pid that certainly belongs to no running process (a child that has exited and been reaped).
inline pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

inline std::string cnnergy_binary() {
  if (const char* bin = std::getenv("CNNERGY_BIN"); bin && *bin)
    return std::string(bin) + "/cnnergy";
  return CNNERGY_TEST_BINARY;
}

struct RunResult {
  int exit_code = -1;   // when it exited
  int term_signal = 0;  // when a signal ended it
  std::string out, err;
};

// Starts a process (stdout/stderr to files in `dir`); `new_group` puts it in its own process group.
inline pid_t spawn(const std::vector<std::string>& argv, const std::string& out_path,
                   const std::string& err_path, bool new_group = false) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (new_group) ::setpgid(0, 0);
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(126);
  }
  return pid;
}

inline RunResult wait_result(pid_t pid, const std::string& out_path, const std::string& err_path) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  RunResult r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  return r;
}

// Runs `cnnergy ARGS...` to completion.
inline RunResult run_cnnergy(const std::vector<std::string>& args, const TempDir& dir) {
  std::vector<std::string> argv = {cnnergy_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  return wait_result(spawn(argv, out, err), out, err);
}

}  // namespace cnnergy::test
