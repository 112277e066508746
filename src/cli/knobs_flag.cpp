// --knobs: parsing and opening the chosen knob control.
#include "cli/knobs_flag.hpp"

#include <cstdio>

namespace cnnergy::cli {

void add_knobs_option(ArgParser& p) {
  p.option("knobs",
           "how GPU settings are changed: auto (direct as root, else through the cnnergyd daemon "
           "when its socket answers), direct, daemon ($CNNERGY_DAEMON_SOCKET or "
           "/run/cnnergy/cnnergyd.sock), dry-run",
           "auto", {"auto", "direct", "daemon", "dry-run"});
}

telemetry::KnobsMode knobs_mode(const ArgParser& p) {
  return telemetry::parse_knobs_mode(p.get("knobs"));
}

std::unique_ptr<telemetry::KnobControl> open_knobs(const ArgParser& p,
                                                   std::shared_ptr<const telemetry::Nvml> nvml,
                                                   bool dry_run, const std::string& journal_path,
                                                   bool handle_signals) {
  telemetry::KnobControlOptions o;
  o.mode = dry_run ? telemetry::KnobsMode::kDryRun : knobs_mode(p);
  o.journal_path = journal_path;
  o.handle_signals = handle_signals;
  o.announce = [](const std::string& line) { std::fprintf(stderr, "cnnergy: %s\n", line.c_str()); };
  return telemetry::open_knob_control(std::move(nvml), o);
}

}  // namespace cnnergy::cli
