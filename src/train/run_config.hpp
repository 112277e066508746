// The settings of one run, defined once: precision, layout, the convolution algorithm policy and its
// search, the convolution fusions and the workspace rules. Every command reads them from its flags
// (from_flags), every sweep trial from its knobs (from_knobs), and both hand them to the backend and
// the executor through backend_options() and apply(). A default-constructed RunConfig is what
// `cnnergy train` runs without flags, and equals the library's own defaults (BackendOptions{},
// ExecutorOptions{}); a bench or runner that must run otherwise sets the field by name and says why.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/ops.hpp"
#include "net/executor.hpp"
#include "train/precision.hpp"

namespace cnnergy {

// Setting name -> its text, as given on a command line (flag names without the dashes) or by a
// trial's knobs. std::less<> so that string_views look names up.
using SettingMap = std::map<std::string, std::string, std::less<>>;

struct RunConfig {
  Device device;                                    // the caller's (--device has its own default rule)
  Precision precision = Precision::kFp32;           // --precision
  Layout layout = BackendOptions{}.layout;          // --layout
  std::string conv_algo_policy = BackendOptions{}.conv_algo_policy;                  // --conv-algo
  std::size_t conv_search_candidates = BackendOptions{}.conv_search_candidates;      // --conv-candidates
  bool conv_algo_fallback = BackendOptions{}.conv_algo_fallback;  // model-info's --strict-algo turns it off
  std::size_t workspace_limit_bytes = BackendOptions{}.workspace_limit_bytes;
  std::string algo_cache_dir;                                                        // --algo-cache, resolved
  bool fuse_epilogue = BackendOptions{}.conv_epilogue_fusion;                        // --fuse-epilogue
  bool space_to_depth = BackendOptions{}.conv_space_to_depth;                        // --space-to-depth
  StatisticsFusion fuse_statistics = BackendOptions{}.conv_statistics_fusion;        // --fuse-statistics
  std::optional<std::size_t> activation_budget_bytes;                                // --activation-budget-mib

  // The flags it reads, without dashes: precision, layout, conv-algo, conv-candidates, algo-cache,
  // fuse-epilogue, space-to-depth, fuse-statistics, activation-budget-mib.
  static const std::vector<std::string>& flag_names();
  // The command line's settings over `base`: a flag absent from `flags` keeps base's value, except
  // algo-cache, which is always resolved (resolve_algo_cache_dir: an absent flag takes the
  // environment's or the home directory's cache). A bad value throws InvalidArgument naming the flag.
  static RunConfig from_flags(const SettingMap& flags, RunConfig base);
  static RunConfig from_flags(const SettingMap& flags);  // over RunConfig{}
  // A trial's knobs over `base` (which carries what no knob sets: device, cache, fusions): precision,
  // layout and conv_algo (also spelled conv-algo). Other knobs (batch, clocks, power limit) are not
  // run settings and are ignored here. A bad value throws InvalidArgument naming the knob.
  static RunConfig from_knobs(const SettingMap& knobs, RunConfig base);

  // The backend's options. NotSupported where the device cannot run the precision (the CPU: fp32 only).
  BackendOptions backend_options() const;
  // The executor's share: the activation budget (the rest of ExecutorOptions is the layers' plan).
  void apply(ExecutorOptions& options) const;
  // One line for reports: "bf16 nhwc, conv-algo auto (10 candidates), fuse-epilogue on,
  // space-to-depth on, fuse-statistics on" (+ ", activation budget N MiB" where set).
  std::string describe() const;
};

}  // namespace cnnergy
