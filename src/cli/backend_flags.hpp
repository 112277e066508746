// The backend a command runs on, read from its --device, --precision, --layout and --conv-algo flags
// (every command that runs a network declares these four), so they mean the same everywhere.
#pragma once

#include "backend/ops.hpp"
#include "cli/args.hpp"
#include "train/precision.hpp"

namespace cnnergy::cli {

inline BackendOptions backend_options_from_flags(const ArgParser& p) {
  BackendOptions bo;
  bo.device = parse_device(p.get("device"));
  apply_precision(parse_precision(p.get("precision")), bo);
  bo.layout = parse_layout(p.get("layout"));
  bo.conv_algo_policy = p.get("conv-algo");
  return bo;
}

}  // namespace cnnergy::cli
