// The --knobs flag shared by every knob-changing command (sweep, monitor, restore): which path the
// GPU settings take (direct NVML as root, the cnnergyd daemon, or a dry run), announced on stderr.
#pragma once

#include <memory>
#include <string>

#include "cli/args.hpp"
#include "telemetry/knob_control.hpp"

namespace cnnergy::cli {

void add_knobs_option(ArgParser& p);
telemetry::KnobsMode knobs_mode(const ArgParser& p);

// Opens the knob control --knobs asks for (dry_run forces a dry run) and prints the path taken.
std::unique_ptr<telemetry::KnobControl> open_knobs(const ArgParser& p,
                                                   std::shared_ptr<const telemetry::Nvml> nvml,
                                                   bool dry_run, const std::string& journal_path,
                                                   bool handle_signals);

}  // namespace cnnergy::cli
