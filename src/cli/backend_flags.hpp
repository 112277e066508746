// The run settings a command reads from its flags (--device, --precision, --layout, --conv-algo,
// --conv-candidates, --algo-cache, and where declared the fusion switches and the activation budget):
// the flags' declarations here, their meaning in one place, RunConfig::from_flags.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "backend/ops.hpp"
#include "cli/args.hpp"
#include "cli/vocabulary.hpp"
#include "core/algo_cache.hpp"
#include "train/precision.hpp"
#include "train/run_config.hpp"

namespace cnnergy::cli {

inline constexpr const char* kAlgoCacheHelp =
    "persistent convolution algorithm cache: a directory, or off (default: $CNNERGY_ALGO_CACHE, "
    "else $XDG_CACHE_HOME/cnnergy, else ~/.cache/cnnergy); a second run searches nothing it has seen";

// --fuse-epilogue (infer, train, profile, dist-train): RunConfig::fuse_epilogue, on by default.
inline void declare_fuse_epilogue_flag(ArgParser& p) {
  p.option("fuse-epilogue",
           "GPU: run a convolution with a bias (a folded batch norm's, or its own) and the ReLU it took as one "
           "cuDNN fused graph where an engine runs it and it times faster than the convolution and its bias "
           "pass (decided per layer on its first forward); off keeps the two passes",
           "on", {"on", "off"});
}

// --fuse-statistics (train, profile, dist-train): RunConfig::fuse_statistics, on by default.
inline void declare_fuse_statistics_flag(ArgParser& p) {
  p.option("fuse-statistics",
           "training: a convolution without a bias whose output only a batch norm reads computes that batch "
           "norm's statistics (per-channel sum and sum of squares): on the GPU in cuDNN's fused graph with its "
           "forward where that times faster than the forward and the batch norm's own pass (decided per layer "
           "on its first step; cuDNN 9.19 on Hopper runs it faster in fp16 NHWC only), on the CPU after its "
           "forward; always: cuDNN's graph wherever it runs, faster or not (to study it); off: the batch norm "
           "reduces its input itself",
           "on", {"on", "off", "always"});
}

// --space-to-depth (infer, train, profile, dist-train): RunConfig::space_to_depth, on by default.
inline void declare_space_to_depth_flag(ArgParser& p) {
  p.option("space-to-depth",
           "GPU, nhwc: run a strided convolution over few channels (a network's first layer) as a stride-1 "
           "convolution over its input's S x S blocks taken as channels, where that times faster (forward and "
           "weight gradient each decided per layer on their first call); off runs it as it is",
           "on", {"on", "off"});
}

// --activation-budget-mib (train, profile, dist-train; bench_train_throughput): RunConfig::activation_budget_bytes.
inline void declare_activation_budget_flag(ArgParser& p) {
  p.option("activation-budget-mib",
           "training: keep the activations and their gradients live at one step within this many MiB by "
           "dropping batch-norm and pooling outputs after forward and recomputing them, bit for bit, just before "
           "the first backward that reads them (batch norms first, until it fits; 0 recomputes as many as lower the "
           "peak; each costs that layer's forward pass again). Unset: nothing is recomputed");
}

// The line train, profile and the benchmark print about the convolution algorithm search (done
// when the model was bound, outside every measured window); empty where nothing was decided.
inline std::string algo_search_line(const AlgoSearchStats& s) {
  if (s.searched == 0 && s.cached == 0) return {};
  char head[96];
  std::snprintf(head, sizeof head, "convolution algorithm search: %.2f s", s.search_ms / 1e3);
  return std::string(head) + " (" + std::to_string(s.searched) + " problems searched, " +
         std::to_string(s.cached) + " decisions from the cache" +
         (s.cache_path.empty() ? std::string(", cache off") : " " + s.cache_path) + ")";
}

// The command's run settings: each declared flag (given or defaulted) over the product's defaults,
// and the --device rule (cuda when a GPU is present).
inline RunConfig run_config_from_flags(const ArgParser& p) {
  SettingMap flags;
  for (const std::string& name : RunConfig::flag_names())
    if (auto v = p.get_optional(name)) flags.emplace(name, std::move(*v));
  RunConfig run = RunConfig::from_flags(flags);
  run.device = device_from_flags(p);
  return run;
}

}  // namespace cnnergy::cli
