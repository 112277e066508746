// The backend a command runs on, read from its --device, --precision, --layout, --conv-algo,
// --conv-candidates and --algo-cache flags (every command that runs a network declares these six),
// so they mean the same everywhere.
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

namespace cnnergy::cli {

inline constexpr const char* kAlgoCacheHelp =
    "persistent convolution algorithm cache: a directory, or off (default: $CNNERGY_ALGO_CACHE, "
    "else $XDG_CACHE_HOME/cnnergy, else ~/.cache/cnnergy); a second run searches nothing it has seen";

// --fuse-epilogue (infer, train, profile, dist-train): BackendOptions::conv_epilogue_fusion, on by default there
// (sweep trials set it likewise).
inline void declare_fuse_epilogue_flag(ArgParser& p) {
  p.option("fuse-epilogue",
           "GPU: run a convolution with a bias (a folded batch norm's, or its own) and the ReLU it took as one "
           "cuDNN fused graph where an engine runs it and it times faster than the convolution and its bias "
           "pass (decided per layer on its first forward); off keeps the two passes",
           "on", {"on", "off"});
}

// --fuse-statistics (train, profile, dist-train): BackendOptions::conv_statistics_fusion, on by default.
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
inline StatisticsFusion parse_statistics_fusion(const std::string& v) {
  if (v == "off") return StatisticsFusion::kOff;
  if (v == "always") return StatisticsFusion::kAlways;
  return StatisticsFusion::kWhereFaster;  // "on" (the option's choices are checked when parsed)
}

// --space-to-depth (infer, train, profile, dist-train): BackendOptions::conv_space_to_depth, on by default there
// (sweep trials set it likewise).
inline void declare_space_to_depth_flag(ArgParser& p) {
  p.option("space-to-depth",
           "GPU, nhwc: run a strided convolution over few channels (a network's first layer) as a stride-1 "
           "convolution over its input's S x S blocks taken as channels, where that times faster (forward and "
           "weight gradient each decided per layer on their first call); off runs it as it is",
           "on", {"on", "off"});
}

// --activation-budget-mib (train, profile; bench_train_throughput): ExecutorOptions::activation_budget_bytes.
inline void declare_activation_budget_flag(ArgParser& p) {
  p.option("activation-budget-mib",
           "training: keep the activations and their gradients live at one step within this many MiB by "
           "dropping batch-norm and pooling outputs after forward and recomputing them, bit for bit, just before "
           "the first backward that reads them (batch norms first, until it fits; 0 recomputes as many as lower the "
           "peak; each costs that layer's forward pass again). Unset: nothing is recomputed");
}
inline std::optional<std::size_t> activation_budget_from_flags(const ArgParser& p) {
  if (!p.get_optional("activation-budget-mib")) return std::nullopt;
  return static_cast<std::size_t>(p.get_int("activation-budget-mib", 0, std::int64_t{1} << 40)) << 20;
}

// --algo-cache's directory ("" when the cache is off), after the environment and defaults.
inline std::string algo_cache_dir_from_flags(const ArgParser& p) {
  return resolve_algo_cache_dir(p.get_optional("algo-cache").value_or(""));
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

inline BackendOptions backend_options_from_flags(const ArgParser& p) {
  BackendOptions bo;
  bo.device = device_from_flags(p);  // one default rule: cuda when a GPU is present
  apply_precision(parse_precision(p.get("precision")), bo);
  bo.layout = parse_layout(p.get("layout"));
  bo.conv_algo_policy = p.get("conv-algo");
  bo.conv_search_candidates = static_cast<std::size_t>(p.get_int("conv-candidates", 1, 100));
  bo.algo_cache_dir = algo_cache_dir_from_flags(p);
  if (p.has("fuse-epilogue")) bo.conv_epilogue_fusion = p.get("fuse-epilogue") == "on";
  if (p.has("space-to-depth")) bo.conv_space_to_depth = p.get("space-to-depth") == "on";
  if (p.has("fuse-statistics")) bo.conv_statistics_fusion = parse_statistics_fusion(p.get("fuse-statistics"));
  return bo;
}

}  // namespace cnnergy::cli
