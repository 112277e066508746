// The persistent algorithm cache: convolution algorithm decisions (the policy, the legacy algorithm
// or graph-API engine with its knobs, math type, workspace, measured costs) kept on disk, so that a
// second run, and every trial of a sweep after the first, searches nothing it has seen. CPU-only
// (no CUDA), so CI tests its keying, atomic writes, corruption handling and concurrent writers.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/json.hpp"

namespace cnnergy {

// What a decision is valid for: the GPU, its driver and the libraries the search ran with. A file
// records it; a file for another context is ignored (with a warning) and rewritten.
struct AlgoCacheContext {
  std::string gpu_name;
  int compute_capability = 0;  // major * 10 + minor
  int driver_version = 0;      // cudaDriverGetVersion (the CUDA version the driver supports)
  std::string driver_release;  // the kernel module's release ("570.86.15"), nvidia_driver_release()
  int cudnn_version = 0;       // cudnnGetVersion
  int cuda_runtime_version = 0;  // cudaRuntimeGetVersion

  Json to_json() const;
  std::string fingerprint() const;  // one line of every field
  bool operator==(const AlgoCacheContext&) const = default;
};

// One convolution problem as a search sees it: the full descriptor, the numerics and the search's
// own settings. Every field is part of the key, so a change of any of them misses.
struct ConvProblemKey {
  std::string direction;                         // forward | backward_data | backward_filter
  std::int64_t n = 0, c = 0, h = 0, w = 0;       // X as cuDNN sees it
  std::int64_t k = 0, r = 0, s = 0, groups = 1;  // W is (k, c / groups, r, s)
  std::int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  std::string dtype;   // data type of x, w, y ("f32", "f16", "bf16")
  std::string layout;  // "nchw" | "nhwc"
  std::string math;    // "fp32" | "tf32" | "tensor_op" (accumulation is fp32 in every case)
  float beta = 0.0f;   // 0 overwrites the output, 1 accumulates (graph plans differ)
  std::string policy;  // the search that decided: find | graph_find | graph_heuristic | auto
  std::uint64_t workspace_limit_bytes = 0;
  std::int64_t candidates = 0;  // engines of the ranking timed (+ fallback ones); 0 for find

  std::string str() const;  // the key text
};

// One decision. kind "legacy": `algo` under `math_type`; kind "graph": the engine tag ("eng<id>"
// then "_k<knob type>=<value>" per knob), rebuilt and re-validated when loaded; kind "choice":
// auto's verdict (`graph_won`), whose winner has its own entry under the find / graph_find key.
struct AlgoDecision {
  std::string kind;
  int algo = 0;
  int math_type = 0;  // cudnnMathType_t
  std::string engine;
  bool graph_won = false;
  std::uint64_t workspace_bytes = 0;
  double device_ms = -1.0, host_ms = -1.0;  // measured cost of the winner per call (< 0: unknown)
  std::string note;                         // e.g. "auto: graph 1.21 ms vs legacy 1.40 ms"

  Json to_json() const;
  static AlgoDecision from_json(const Json& j);  // DataError when a field is missing or mistyped
};

// A graph engine tag split into the engine's global index and its knob choices (type -> value);
// nullopt when the text is not such a tag.
struct GraphEngineTag {
  std::int64_t engine_id = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> knobs;
};
std::optional<GraphEngineTag> parse_engine_tag(const std::string& tag);

// The cache of one context. Directory empty: in memory only. Every record() writes the file through
// (lock file, re-read, merge, temporary file, rename), so concurrent processes lose nothing and a
// reader never sees half a file. A file that is truncated, garbage, of another format version or of
// another context is ignored with one warning and rewritten; a directory that cannot be written is
// warned about once and the cache runs without persisting. Thread-safe.
class AlgoCache {
 public:
  static constexpr int kFormatVersion = 1;

  AlgoCache(std::string directory, AlgoCacheContext context);
  ~AlgoCache();  // writes what is still pending (see flush)
  AlgoCache(const AlgoCache&) = delete;
  AlgoCache& operator=(const AlgoCache&) = delete;

  // A decision is written through at once when the last write is kWriteIntervalS old or more,
  // else it waits for the next record past the interval, flush() or the destructor: each write
  // re-reads, merges and rewrites the whole file, so writing every decision made a search of N
  // problems cost O(N^2) in file work (3.7 s of GoogLeNet's 9.0 s search at batch 256 on an H200).
  static constexpr double kWriteIntervalS = 1.0;

  const std::string& file_path() const { return path_; }  // empty when in memory only
  bool persistent() const;                                // false once writing has failed
  const AlgoCacheContext& context() const { return context_; }

  std::optional<AlgoDecision> lookup(const ConvProblemKey& key) const;
  void record(const ConvProblemKey& key, const AlgoDecision& decision);
  // Drops a decision that no longer validates (e.g. its engine no longer finalizes).
  void forget(const ConvProblemKey& key);
  // Writes the decisions and forgets not yet in the file (a no-op when none are pending). The
  // CUDA backend calls it when a network's search is done.
  void flush();
  std::size_t size() const;
  std::size_t warnings() const;  // warnings given so far (each kind at most once)

 private:
  std::map<std::string, AlgoDecision> read_file(bool warn);
  void write_through();
  void warn_once(const std::string& kind, const std::string& message);

  std::string directory_, path_;
  AlgoCacheContext context_;
  mutable std::mutex mutex_;
  std::map<std::string, AlgoDecision> entries_;
  std::set<std::string> mine_, forgotten_;  // keys this object recorded / dropped
  bool persist_ = false;
  bool pending_ = false;  // decisions or forgets not yet written
  std::chrono::steady_clock::time_point last_write_{};  // the epoch: the first record writes at once
  std::set<std::string> warned_;
};

// The cache directory a command uses: the --algo-cache value (empty when not given), else
// $CNNERGY_ALGO_CACHE, else $XDG_CACHE_HOME/cnnergy, else $HOME/.cache/cnnergy. "off" (flag or
// variable), or no home directory at all: empty (no persistent cache).
std::string resolve_algo_cache_dir(const std::string& flag_value);

// The NVIDIA kernel module's release from /proc/driver/nvidia/version; empty where unreadable.
std::string nvidia_driver_release();

// The process-wide cache of (directory, context), so that backends of one process (a sweep's
// trials) share decisions without re-reading the file. Empty directory: memory only.
std::shared_ptr<AlgoCache> shared_algo_cache(const std::string& directory,
                                             const AlgoCacheContext& context);

}  // namespace cnnergy
