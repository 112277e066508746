// The backend a command runs on, read from its --device, --precision, --layout, --conv-algo and
// --conv-candidates flags (every command that runs a network declares these five), so they mean
// the same everywhere.
#pragma once

#include "backend/ops.hpp"
#include "cli/args.hpp"
#include "cli/vocabulary.hpp"
#include "train/precision.hpp"

namespace cnnergy::cli {

inline BackendOptions backend_options_from_flags(const ArgParser& p) {
  BackendOptions bo;
  bo.device = device_from_flags(p);  // one default rule: cuda when a GPU is present
  apply_precision(parse_precision(p.get("precision")), bo);
  bo.layout = parse_layout(p.get("layout"));
  bo.conv_algo_policy = p.get("conv-algo");
  bo.conv_search_candidates = static_cast<std::size_t>(p.get_int("conv-candidates", 1, 100));
  return bo;
}

}  // namespace cnnergy::cli
