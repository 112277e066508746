// Entry point: dispatches to a command and turns typed errors into a message and an exit code.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "backend/cpu/conv_onednn_cpu.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "core/build_info.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"

namespace {

void print_usage() {
  std::printf("cnnergy %s: measure, explain and tune the time and energy of CNNs on GPUs\n\n", cnnergy::build::kVersion);
  std::printf("usage: cnnergy COMMAND [options]   (cnnergy COMMAND --help for a command's options)\n\ncommands:\n");
  for (const auto& c : cnnergy::cli::commands()) std::printf("  %-12s %s\n", c.name.c_str(), c.summary.c_str());
  std::printf(
      "\nglobal: --version, --help; CNNERGY_LOG=debug|info|warn|error sets the log level.\n\n"
      "exit codes:\n"
      "  0 success            1 internal error       2 bad usage or value   3 bad or missing file\n"
      "  4 unsupported here   5 does not fit memory  6 permission denied    7 device library error\n"
      "  8 external command could not be started; `monitor` passes its command's own exit code\n");
}

// oneDNN's threads (libgomp's OpenMP) spin for milliseconds after each parallel region unless
// OMP_WAIT_POLICY or GOMP_SPINCOUNT says otherwise. On a CPU shared with other processes a spinning
// thread takes the core its partner waits for: ResNet-50's CPU inference ran 10x slower with libgomp's
// default (1.27 s against 0.13 s a request on this project's 2-core machine with a neighbour busy;
// docs/internals.md, "The CPU convolution's oneDNN path"), and 2x slower spinning even briefly (GOMP_SPINCOUNT=30000: 198
// against 103 ms at batch 1). On a machine with cores to spare, sleeping at once costs a wake-up per
// primitive instead: on a lent 16-core Xeon, ResNet-50 at batch 1 took 10.2-12.5 ms sleeping against
// 7.3-10.0 ms spinning (OMP_WAIT_POLICY=ACTIVE), and at batch 32 241-307 against 163-295 ms, ONNX
// Runtime (which spins too) 8.9-11.9 and 205-321 ms in the same runs (docs/internals.md, "The CPU convolution's oneDNN path").
// So: on a machine of 8 or more hardware threads where fewer than a quarter of them have another
// runnable task now (the kernel's count in /proc/loadavg; not the 1-minute load average, which a
// benchmark's own previous run keeps high for a minute), threads spin GOMP_SPINCOUNT=30000000 turns
// (by libgomp's own estimate of 100,000 a millisecond, 0.3 s: the whole of a request, not the idle
// time between far-apart ones); elsewhere OMP_WAIT_POLICY=PASSIVE. libgomp reads the variables once,
// when it loads, so the CLI sets them and executes itself again; the re-executed process removes them
// again so that commands it starts (sweep, monitor) choose afresh, and keeps the choice in
// CNNERGY_OMP_WAIT (`infer` reports it). A user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is left alone.
// Tasks runnable now, this one included (the fourth field of /proc/loadavg: "R/T"); -1 where unknown.
long runnable_tasks() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return -1;
  double a = 0, b = 0, c = 0;
  long running = -1, total = 0;
  if (std::fscanf(f, "%lf %lf %lf %ld/%ld", &a, &b, &c, &running, &total) != 5) running = -1;
  std::fclose(f);
  return running;
}

void choose_openmp_wait(char** argv) {
  if (!cnnergy::cpu::onednn_available()) return;
  if (const char* marker = std::getenv("CNNERGY_OMP_REEXEC")) {
    if (std::string(marker) == "passive") unsetenv("OMP_WAIT_POLICY");
    if (std::string(marker) == "spin") unsetenv("GOMP_SPINCOUNT");
    unsetenv("CNNERGY_OMP_REEXEC");
    return;
  }
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) {
    setenv("CNNERGY_OMP_WAIT", "the caller's OMP_WAIT_POLICY / GOMP_SPINCOUNT", 1);
    return;
  }
  const long threads = sysconf(_SC_NPROCESSORS_ONLN);
  const long others = runnable_tasks() - 1;  // this process's one thread is running
  const bool spin = threads >= 8 && others >= 0 && others < threads / 4;
  if (spin) {
    setenv("GOMP_SPINCOUNT", "30000000", 1);
    setenv("CNNERGY_OMP_WAIT", "spin (GOMP_SPINCOUNT=30000000: 8+ hardware threads, under a quarter of them busy)", 1);
  } else {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    setenv("CNNERGY_OMP_WAIT", "passive (OMP_WAIT_POLICY=PASSIVE: under 8 hardware threads or a busy machine)", 1);
  }
  setenv("CNNERGY_OMP_REEXEC", spin ? "spin" : "passive", 1);
  execv("/proc/self/exe", argv);
  unsetenv(spin ? "GOMP_SPINCOUNT" : "OMP_WAIT_POLICY");  // exec failed: run on with libgomp's default
  unsetenv("CNNERGY_OMP_REEXEC");
  setenv("CNNERGY_OMP_WAIT", "libgomp's default (re-executing the CLI failed)", 1);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cnnergy;
  choose_openmp_wait(argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (const char* lvl = std::getenv("CNNERGY_LOG"); lvl && *lvl) set_log_level(parse_log_level(lvl));
    if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
      print_usage();
      return args.empty() ? static_cast<int>(ExitCode::kUsage) : 0;
    }
    if (args[0] == "--version") {
      std::printf("cnnergy %s (%s, CUDA %s)\n", build::kVersion, build::kBuildType,
                  build::kHaveCuda ? build::kCudaVersion : "not built");
      return 0;
    }
    for (const auto& c : cli::commands()) {
      if (c.name == args[0]) return c.run(std::vector<std::string>(args.begin() + 1, args.end()));
    }
    std::string known, nearest;
    std::size_t nearest_distance = 3;  // a typo of at most two letters gets a "did you mean"
    for (const auto& c : cli::commands()) {
      if (!known.empty()) known += ", ";
      known += c.name;
      if (const auto d = cli::edit_distance(args[0], c.name); d < nearest_distance) nearest_distance = d, nearest = c.name;
    }
    throw InvalidArgument("unknown command '" + args[0] + "'" + (nearest.empty() ? "" : "; did you mean '" + nearest + "'?") +
                          " (commands: " + known + ")");
  } catch (const Error& e) {
    std::fprintf(stderr, "cnnergy: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "cnnergy: error: out of host memory\n");
    return static_cast<int>(ExitCode::kOutOfMemory);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cnnergy: internal error: %s\n", e.what());
    return static_cast<int>(ExitCode::kInternal);
  }
}
