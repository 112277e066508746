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
// OMP_WAIT_POLICY says otherwise; on a CPU shared with other processes a spinning thread takes the
// core its partner waits for, and ResNet-50's CPU inference ran 10x slower (1.27 s against 0.13 s a
// request on this project's 2-core machine with a neighbour busy; docs/benchmarks/2026-11-26-cpu-dev).
// libgomp reads the variable once, when it loads, so the CLI sets it to PASSIVE and executes itself
// again; the re-executed process removes it again so that commands it starts (sweep, monitor) do
// not inherit it. A user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is left alone.
void passive_openmp_wait(char** argv) {
  if (!cnnergy::cpu::onednn_available()) return;
  if (const char* marker = std::getenv("CNNERGY_OMP_REEXEC")) {
    if (std::string(marker) == "set") unsetenv("OMP_WAIT_POLICY");
    unsetenv("CNNERGY_OMP_REEXEC");
    return;
  }
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  setenv("CNNERGY_OMP_REEXEC", "set", 1);
  execv("/proc/self/exe", argv);
  unsetenv("OMP_WAIT_POLICY");  // exec failed: run on with libgomp's default
  unsetenv("CNNERGY_OMP_REEXEC");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cnnergy;
  passive_openmp_wait(argv);
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
