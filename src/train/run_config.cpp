// A run's settings read from flags or knobs, and handed to the backend and the executor.
#include "train/run_config.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "core/algo_cache.hpp"
#include "core/errors.hpp"

namespace cnnergy {

namespace {

// How an error names the setting: "--precision" for a flag, "knob precision" for a trial's knob.
struct Source {
  bool flag;
  std::string name(std::string_view setting) const {
    return flag ? "--" + std::string(setting) : "knob " + std::string(setting);
  }
};

template <typename Parse>
auto parse_named(const Source& src, std::string_view setting, Parse&& parse) {
  try {
    return parse();
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(src.name(setting) + ": " + e.what());
  }
}

bool parse_on_off(const Source& src, std::string_view setting, const std::string& v) {
  if (v == "on") return true;
  if (v == "off") return false;
  throw InvalidArgument(src.name(setting) + " must be on or off, got '" + v + "'");
}

StatisticsFusion parse_statistics(const Source& src, std::string_view setting, const std::string& v) {
  if (v == "on") return StatisticsFusion::kWhereFaster;
  if (v == "off") return StatisticsFusion::kOff;
  if (v == "always") return StatisticsFusion::kAlways;
  throw InvalidArgument(src.name(setting) + " must be on, off or always, got '" + v + "'");
}

// The same words as ArgParser::get_int, so that a command's refusal reads as before.
std::int64_t parse_integer(const Source& src, std::string_view setting, const std::string& s, std::int64_t min_value,
                           std::int64_t max_value) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE)
    throw InvalidArgument(src.name(setting) + " must be an integer, got '" + s + "'");
  if (v < min_value || v > max_value)
    throw InvalidArgument(src.name(setting) + " must be between " + std::to_string(min_value) + " and " +
                          std::to_string(max_value) + ", got " + s);
  return v;
}

const std::string* find(const SettingMap& m, std::string_view name) {
  const auto it = m.find(name);
  return it == m.end() ? nullptr : &it->second;
}

// The settings flags and knobs share.
void read_shared(const SettingMap& m, const Source& src, std::string_view algo_name, RunConfig& c) {
  if (const std::string* v = find(m, "precision"))
    c.precision = parse_named(src, "precision", [&] { return parse_precision(*v); });
  if (const std::string* v = find(m, "layout"))
    c.layout = parse_named(src, "layout", [&] { return parse_layout(*v); });
  if (const std::string* v = find(m, algo_name)) {
    if (v->empty()) throw InvalidArgument(src.name(algo_name) + " needs a policy or an algorithm name, got ''");
    c.conv_algo_policy = *v;  // the backend checks the name (the CPU ignores it)
  }
}

}  // namespace

const std::vector<std::string>& RunConfig::flag_names() {
  static const std::vector<std::string> names = {"precision",      "layout",        "conv-algo",
                                                 "conv-candidates", "algo-cache",    "fuse-epilogue",
                                                 "space-to-depth", "fuse-statistics", "activation-budget-mib"};
  return names;
}

RunConfig RunConfig::from_flags(const SettingMap& flags, RunConfig c) {
  const Source src{true};
  for (const auto& [name, value] : flags)
    if (std::find(flag_names().begin(), flag_names().end(), name) == flag_names().end())
      throw InternalError("RunConfig::from_flags: '--" + name + "' is not a run setting");
  read_shared(flags, src, "conv-algo", c);
  if (const std::string* v = find(flags, "conv-candidates"))
    c.conv_search_candidates = static_cast<std::size_t>(parse_integer(src, "conv-candidates", *v, 1, 100));
  const std::string* cache = find(flags, "algo-cache");
  c.algo_cache_dir = resolve_algo_cache_dir(cache ? *cache : std::string());
  if (const std::string* v = find(flags, "fuse-epilogue")) c.fuse_epilogue = parse_on_off(src, "fuse-epilogue", *v);
  if (const std::string* v = find(flags, "space-to-depth")) c.space_to_depth = parse_on_off(src, "space-to-depth", *v);
  if (const std::string* v = find(flags, "fuse-statistics"))
    c.fuse_statistics = parse_statistics(src, "fuse-statistics", *v);
  if (const std::string* v = find(flags, "activation-budget-mib"))
    c.activation_budget_bytes =
        static_cast<std::size_t>(parse_integer(src, "activation-budget-mib", *v, 0, std::int64_t{1} << 40)) << 20;
  return c;
}

RunConfig RunConfig::from_flags(const SettingMap& flags) { return from_flags(flags, RunConfig{}); }

RunConfig RunConfig::from_knobs(const SettingMap& knobs, RunConfig c) {
  const Source src{false};
  if (find(knobs, "conv_algo") && find(knobs, "conv-algo"))
    throw InvalidArgument("knob conv_algo is given twice (as conv_algo and as conv-algo)");
  read_shared(knobs, src, find(knobs, "conv-algo") ? "conv-algo" : "conv_algo", c);
  return c;
}

BackendOptions RunConfig::backend_options() const {
  BackendOptions bo;
  bo.device = device;
  apply_precision(precision, bo);  // NotSupported: the CPU computes in fp32 only
  bo.layout = layout;
  bo.workspace_limit_bytes = workspace_limit_bytes;
  bo.conv_algo_policy = conv_algo_policy;
  bo.conv_search_candidates = conv_search_candidates;
  bo.conv_algo_fallback = conv_algo_fallback;
  bo.conv_epilogue_fusion = fuse_epilogue;
  bo.conv_space_to_depth = space_to_depth;
  bo.conv_statistics_fusion = fuse_statistics;
  bo.algo_cache_dir = algo_cache_dir;
  return bo;
}

void RunConfig::apply(ExecutorOptions& options) const { options.activation_budget_bytes = activation_budget_bytes; }

std::string RunConfig::describe() const {
  std::string s = std::string(precision_name(precision)) + " " + (layout == Layout::kNHWC ? "nhwc" : "nchw") +
                  ", conv-algo " + conv_algo_policy + " (" + std::to_string(conv_search_candidates) +
                  " candidates), fuse-epilogue " + (fuse_epilogue ? "on" : "off") + ", space-to-depth " +
                  (space_to_depth ? "on" : "off") + ", fuse-statistics " + statistics_fusion_name(fuse_statistics);
  if (activation_budget_bytes) s += ", activation budget " + std::to_string(*activation_budget_bytes >> 20) + " MiB";
  return s;
}

}  // namespace cnnergy
