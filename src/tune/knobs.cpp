// Knob parsing, validation against the device, trial keys and the cartesian product.
#include "tune/knobs.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <set>

#include "core/dtype.hpp"
#include "core/errors.hpp"

namespace cnnergy::tune {

namespace {

struct KnobInfo {
  Knob knob;
  std::string_view name, flag, env, unit;
  bool numeric;
};

constexpr std::array<KnobInfo, 9> kInfo = {{
    {Knob::kBatch, "batch", "batch", "CNNERGY_BATCH", "", true},
    {Knob::kGpus, "gpus", "gpus", "CNNERGY_GPUS", "", true},
    {Knob::kPrecision, "precision", "precision", "CNNERGY_PRECISION", "", false},
    {Knob::kLayout, "layout", "layout", "CNNERGY_LAYOUT", "", false},
    {Knob::kConvAlgo, "conv_algo", "conv-algo", "CNNERGY_CONV_ALGO", "", false},
    {Knob::kCudaGraph, "cuda_graph", "cuda-graph", "CNNERGY_CUDA_GRAPH", "", false},
    {Knob::kMemClock, "mem_clock_mhz", "mem-clock", "CNNERGY_MEM_CLOCK_MHZ", "MHz", true},
    {Knob::kSmClock, "sm_clock_mhz", "sm-clock", "CNNERGY_SM_CLOCK_MHZ", "MHz", true},
    {Knob::kPowerLimit, "power_limit_w", "power-limit", "CNNERGY_POWER_LIMIT_W", "W", true},
}};

const KnobInfo& info(Knob knob) { return kInfo[static_cast<std::size_t>(knob)]; }

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return std::string(s.substr(b, e - b + 1));
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const auto pos = s.find(sep, start);
    out.push_back(trim(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start)));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

std::string flag_of(Knob knob) { return "--" + std::string(knob_flag(knob)); }

std::int64_t parse_int(const std::string& s, Knob knob, const std::string& item) {
  std::int64_t v = 0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || ptr != end)
    throw InvalidArgument("invalid value '" + item + "' for " + flag_of(knob) + ": expected a whole number" +
                          (knob_unit(knob).empty() ? "" : " of " + std::string(knob_unit(knob))) +
                          ", a range start:stop:step, or a list of them");
  return v;
}

std::string with_unit(std::int64_t v, Knob knob) {
  const auto unit = knob_unit(knob);
  return std::to_string(v) + (unit.empty() ? "" : " " + std::string(unit));
}

std::int64_t nearest(const std::vector<std::int64_t>& sorted, std::int64_t v) {
  auto it = std::lower_bound(sorted.begin(), sorted.end(), v);
  if (it == sorted.end()) return sorted.back();
  if (it == sorted.begin()) return *it;
  return (v - *(it - 1) <= *it - v) ? *(it - 1) : *it;
}

// start:stop:step with start <= stop and step > 0; returns (start, stop, step).
std::array<std::int64_t, 3> parse_range(const std::string& item, Knob knob) {
  const auto parts = split(item, ':');
  if (parts.size() != 3)
    throw InvalidArgument("invalid range '" + item + "' for " + flag_of(knob) + ": write start:stop:step (stop included)");
  const std::int64_t a = parse_int(parts[0], knob, item), b = parse_int(parts[1], knob, item),
                     s = parse_int(parts[2], knob, item);
  if (s <= 0) throw InvalidArgument("invalid range '" + item + "' for " + flag_of(knob) + ": the step must be positive");
  if (a > b)
    throw InvalidArgument("empty range '" + item + "' for " + flag_of(knob) + ": start " + std::to_string(a) +
                          " is above stop " + std::to_string(b) + " (ranges go upwards: start:stop:step)");
  if (static_cast<std::uint64_t>(b - a) / static_cast<std::uint64_t>(s) >= kMaxValuesPerKnob)
    throw InvalidArgument("range '" + item + "' for " + flag_of(knob) + " has more than " +
                          std::to_string(kMaxValuesPerKnob) + " values; use a larger step");
  return {a, b, s};
}

std::vector<std::int64_t> arithmetic(std::int64_t a, std::int64_t b, std::int64_t s) {
  std::vector<std::int64_t> v;
  for (std::int64_t x = a; x <= b; x += s) v.push_back(x);
  return v;
}

// Supported clocks thinned so consecutive kept clocks are at least `step` apart, lowest first.
std::vector<std::int64_t> thin(const std::vector<std::int64_t>& sorted, std::int64_t lo, std::int64_t hi, std::int64_t step) {
  std::vector<std::int64_t> out;
  for (std::int64_t c : sorted)
    if (c >= lo && c <= hi && (out.empty() || c - out.back() >= step)) out.push_back(c);
  return out;
}

std::vector<std::int64_t> expand_power(const std::string& item, const DeviceLimits& lim) {
  const Knob k = Knob::kPowerLimit;
  const bool known = lim.power_limit_min_w && lim.power_limit_max_w;
  const std::string range_text =
      known ? std::to_string(*lim.power_limit_min_w) + "-" + std::to_string(*lim.power_limit_max_w) + " W" : "";
  if (item == "all" || item.starts_with("all:")) {
    if (!known)
      throw InvalidArgument("--power-limit all needs the device's allowed range, which is not known here (no GPU?)");
    std::int64_t step = lim.power_limit_step_w;
    if (item != "all") step = parse_int(item.substr(4), k, item);
    if (step <= 0) throw InvalidArgument("invalid step in '" + item + "' for --power-limit: the step must be positive");
    auto v = arithmetic(*lim.power_limit_min_w, *lim.power_limit_max_w, step);
    if (v.back() != *lim.power_limit_max_w) v.push_back(*lim.power_limit_max_w);  // the default is usually the maximum
    return v;
  }
  if (item == "default") {
    if (!lim.power_limit_default_w)
      throw InvalidArgument("--power-limit default needs the device's default limit, which is not known here (no GPU?)");
    return {*lim.power_limit_default_w};
  }
  std::vector<std::int64_t> v;
  if (item.find(':') != std::string::npos) {
    const auto r = parse_range(item, k);
    v = arithmetic(r[0], r[1], r[2]);
  } else {
    v = {parse_int(item, k, item)};
  }
  for (std::int64_t w : v) {
    if (w <= 0) throw InvalidArgument("power limit " + std::to_string(w) + " W in '" + item + "' must be positive");
    if (known && (w < *lim.power_limit_min_w || w > *lim.power_limit_max_w))
      throw InvalidArgument("power limit " + std::to_string(w) + " W is outside the device's allowed range " + range_text);
  }
  return v;
}

std::vector<KnobValue> expand_clock(Knob k, const std::string& item, const std::vector<std::int64_t>& supported_in) {
  std::vector<std::int64_t> supported = supported_in;
  std::sort(supported.begin(), supported.end());
  const std::string what = k == Knob::kSmClock ? "SM clock" : "memory clock";
  if (item == "default") return {KnobValue::of_text("default")};
  if (item == "supported" || item.starts_with("supported:")) {
    if (supported.empty())
      throw InvalidArgument(flag_of(k) + " supported needs the device's supported clocks, which are not known here (no GPU?)");
    std::int64_t step = 1;
    if (item != "supported") step = parse_int(item.substr(10), k, item);
    if (step <= 0) throw InvalidArgument("invalid step in '" + item + "' for " + flag_of(k) + ": the step must be positive");
    std::vector<KnobValue> out;
    for (std::int64_t c : thin(supported, supported.front(), supported.back(), step)) out.push_back(KnobValue::of_number(c));
    return out;
  }
  std::vector<std::int64_t> v;
  if (item.find(':') != std::string::npos) {
    const auto r = parse_range(item, k);
    if (supported.empty()) {
      v = arithmetic(r[0], r[1], r[2]);
    } else {
      v = thin(supported, r[0], r[1], r[2]);
      if (v.empty())
        throw InvalidArgument("no supported " + what + " in the range '" + item + "' (nearest supported: " +
                              with_unit(nearest(supported, r[0]), k) + ")");
    }
  } else {
    v = {parse_int(item, k, item)};
    if (!supported.empty() && !std::binary_search(supported.begin(), supported.end(), v[0]))
      throw InvalidArgument(what + " " + with_unit(v[0], k) + " is not supported by the device (nearest supported: " +
                            with_unit(nearest(supported, v[0]), k) + "; supported range " +
                            std::to_string(supported.front()) + "-" + with_unit(supported.back(), k) + ")");
  }
  std::vector<KnobValue> out;
  for (std::int64_t c : v) {
    if (c <= 0) throw InvalidArgument(what + " " + std::to_string(c) + " in '" + item + "' must be positive");
    out.push_back(KnobValue::of_number(c));
  }
  return out;
}

bool safe_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.' || c == '+';
  });
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

}  // namespace

std::string_view knob_name(Knob knob) { return info(knob).name; }
std::string_view knob_flag(Knob knob) { return info(knob).flag; }
std::string_view knob_env_name(Knob knob) { return info(knob).env; }
std::string_view knob_unit(Knob knob) { return info(knob).unit; }
bool knob_is_numeric(Knob knob) { return info(knob).numeric; }

Knob parse_knob_name(std::string_view name) {
  for (const auto& i : kInfo)
    if (i.name == name || i.flag == name) return i.knob;
  std::vector<std::string> known;
  for (const auto& i : kInfo) known.emplace_back(i.name);
  throw InvalidArgument("unknown knob '" + std::string(name) + "' (knobs: " + join(known, ", ") + ")");
}

std::vector<KnobValue> parse_knob_values(Knob knob, const std::string& text, const DeviceLimits& limits) {
  if (trim(text).empty()) throw InvalidArgument(flag_of(knob) + " needs at least one value");
  std::vector<KnobValue> out;
  for (const std::string& item : split(text, ',')) {
    if (item.empty()) throw InvalidArgument("empty item in " + flag_of(knob) + " '" + text + "'");
    switch (knob) {
      case Knob::kBatch:
      case Knob::kGpus: {
        std::vector<std::int64_t> v;
        if (item.find(':') != std::string::npos) {
          const auto r = parse_range(item, knob);
          v = arithmetic(r[0], r[1], r[2]);
        } else {
          v = {parse_int(item, knob, item)};
        }
        for (std::int64_t x : v) {
          if (x < 1) throw InvalidArgument(flag_of(knob) + " values must be at least 1 (got " + std::to_string(x) + ")");
          if (knob == Knob::kGpus && limits.gpu_count && x > *limits.gpu_count)
            throw InvalidArgument("--gpus " + std::to_string(x) + " asks for more GPUs than this machine has (" +
                                  std::to_string(*limits.gpu_count) + ")");
          out.push_back(KnobValue::of_number(x));
        }
        break;
      }
      case Knob::kPowerLimit:
        for (std::int64_t w : expand_power(item, limits)) out.push_back(KnobValue::of_number(w));
        break;
      case Knob::kSmClock:
      case Knob::kMemClock: {
        auto v = expand_clock(knob, item, knob == Knob::kSmClock ? limits.supported_sm_clocks_mhz : limits.supported_mem_clocks_mhz);
        out.insert(out.end(), v.begin(), v.end());
        break;
      }
      case Knob::kPrecision: {
        if (std::find(kPrecisions.begin(), kPrecisions.end(), item) == kPrecisions.end())
          throw InvalidArgument("invalid precision '" + item + "' (choose from fp32, tf32, fp16, bf16)");
        out.push_back(KnobValue::of_text(item));
        break;
      }
      case Knob::kLayout:
        out.push_back(KnobValue::of_text(std::string(layout_name(parse_layout(item)))));
        break;
      case Knob::kConvAlgo: {
        // ':' for the own implementations (own:winograd, ...).
        if (!safe_name(item) && !(item.rfind("own:", 0) == 0 && safe_name(item.substr(4))))
          throw InvalidArgument("invalid convolution algorithm name '" + item + "' (letters, digits, _ - . + only, or own:NAME)");
        if (!limits.conv_algos.empty() && item != "default" &&
            std::find(limits.conv_algos.begin(), limits.conv_algos.end(), item) == limits.conv_algos.end())
          throw InvalidArgument("unknown convolution algorithm '" + item + "' (known: " + join(limits.conv_algos, ", ") + ")");
        out.push_back(KnobValue::of_text(item));
        break;
      }
      case Knob::kCudaGraph:
        if (item != "on" && item != "off") throw InvalidArgument("invalid --cuda-graph value '" + item + "' (choose on or off)");
        out.push_back(KnobValue::of_text(item));
        break;
    }
    if (out.size() > kMaxValuesPerKnob)
      throw InvalidArgument(flag_of(knob) + " has more than " + std::to_string(kMaxValuesPerKnob) + " values");
  }
  std::set<std::string> seen;
  for (const auto& v : out)
    if (!seen.insert(v.text).second)
      throw InvalidArgument(flag_of(knob) + " lists " + v.text + " twice (in '" + text + "')");
  return out;
}

std::string trial_key(std::vector<KnobSetting> knobs) {
  if (knobs.empty()) return "default";
  std::stable_sort(knobs.begin(), knobs.end(), [](const KnobSetting& a, const KnobSetting& b) { return a.knob < b.knob; });
  std::string key;
  for (std::size_t i = 0; i < knobs.size(); ++i) {
    if (i && knobs[i].knob == knobs[i - 1].knob) throw InvalidArgument("knob " + std::string(knob_name(knobs[i].knob)) + " set twice");
    key += (i ? "," : "") + std::string(knob_name(knobs[i].knob)) + "=" + knobs[i].value.text;
  }
  return key;
}

std::vector<KnobSetting> parse_trial_key(const std::string& key) {
  std::vector<KnobSetting> out;
  if (key == "default") return out;
  for (const std::string& part : split(key, ',')) {
    const auto eq = part.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == part.size())
      throw InvalidArgument("malformed trial key '" + key + "' (expected knob=value,knob=value)");
    const Knob knob = parse_knob_name(part.substr(0, eq));
    const std::string value = part.substr(eq + 1);
    std::int64_t n = 0;
    const char* end = value.data() + value.size();
    auto [ptr, ec] = std::from_chars(value.data(), end, n);
    if (knob_is_numeric(knob) && ec == std::errc() && ptr == end)
      out.push_back({knob, KnobValue::of_number(n)});
    else
      out.push_back({knob, KnobValue::of_text(value)});
  }
  if (trial_key(out) != key) throw InvalidArgument("trial key '" + key + "' is not in canonical form (expected '" + trial_key(out) + "')");
  return out;
}

const KnobValue* TrialSpec::find(Knob knob) const {
  for (const auto& s : knobs)
    if (s.knob == knob) return &s.value;
  return nullptr;
}

std::vector<std::pair<std::string, std::string>> trial_environment(const TrialSpec& trial) {
  std::vector<std::pair<std::string, std::string>> env;
  for (const auto& s : trial.knobs) env.emplace_back(std::string(knob_env_name(s.knob)), s.value.text);
  env.emplace_back("CNNERGY_TRIAL_KEY", trial.key);
  env.emplace_back("CNNERGY_TRIAL_INDEX", std::to_string(trial.index));
  return env;
}

void KnobSpace::set(Knob knob, std::vector<KnobValue> values) {
  if (values.empty()) throw InvalidArgument(flag_of(knob) + " needs at least one value");
  if (values_.count(knob)) throw InvalidArgument(flag_of(knob) + " given twice");
  values_[knob] = std::move(values);
}

const std::vector<KnobValue>& KnobSpace::values(Knob knob) const {
  auto it = values_.find(knob);
  if (it == values_.end()) throw InvalidArgument("knob " + std::string(knob_name(knob)) + " is not part of this sweep");
  return it->second;
}

std::vector<Knob> KnobSpace::knobs() const {
  std::vector<Knob> out;
  for (const auto& [k, v] : values_) out.push_back(k);  // std::map keeps canonical (enum) order
  return out;
}

std::size_t KnobSpace::size() const {
  std::size_t n = 1;
  for (const auto& [k, v] : values_) n *= v.size();
  return n;
}

std::string KnobSpace::describe() const {
  std::string out;
  for (const auto& [k, v] : values_) {
    std::vector<std::string> texts;
    for (const auto& x : v) texts.push_back(x.text);
    out += (out.empty() ? "" : ";") + std::string(knob_name(k)) + "=" + join(texts, "|");
  }
  return out.empty() ? "default" : out;
}

std::vector<KnobSetting> KnobSpace::default_reference(const DeviceLimits& limits) const {
  std::vector<KnobSetting> ref;
  for (const auto& [k, v] : values_) {
    if (k == Knob::kPowerLimit) {
      if (limits.power_limit_default_w) {
        ref.push_back({k, KnobValue::of_number(*limits.power_limit_default_w)});
      } else {
        ref.push_back({k, *std::max_element(v.begin(), v.end(), [](const KnobValue& a, const KnobValue& b) {
                         return a.number.value_or(0) < b.number.value_or(0);
                       })});
      }
    } else if (k == Knob::kSmClock || k == Knob::kMemClock) {
      ref.push_back({k, KnobValue::of_text("default")});
    } else {
      ref.push_back({k, v.front()});
    }
  }
  return ref;
}

std::vector<KnobSetting> KnobSpace::parse_reference(const std::string& text, const DeviceLimits& limits) const {
  std::vector<KnobSetting> ref = default_reference(limits);
  for (const std::string& part : split(text, ',')) {
    const auto eq = part.find('=');
    if (eq == std::string::npos) throw InvalidArgument("malformed reference '" + text + "' (expected knob=value,knob=value)");
    const Knob knob = parse_knob_name(trim(part.substr(0, eq)));
    if (!has(knob)) throw InvalidArgument("the reference sets " + std::string(knob_name(knob)) + ", which this sweep does not vary");
    const auto parsed = parse_knob_values(knob, part.substr(eq + 1), limits);
    if (parsed.size() != 1) throw InvalidArgument("the reference needs one value per knob, got '" + part + "'");
    for (auto& s : ref)
      if (s.knob == knob) s.value = parsed.front();
  }
  return ref;
}

std::vector<TrialSpec> KnobSpace::trials(const std::vector<KnobSetting>& reference) const {
  std::vector<TrialSpec> out;
  const std::vector<Knob> ks = knobs();
  std::vector<Knob> ref_knobs;
  for (const auto& s : reference) ref_knobs.push_back(s.knob);
  std::sort(ref_knobs.begin(), ref_knobs.end());
  if (!reference.empty() && ref_knobs != ks)
    throw InvalidArgument("the reference setting '" + trial_key(reference) + "' must set exactly the swept knobs (" +
                          describe() + ")");
  const std::string ref_key = reference.empty() && ks.empty() ? "default" : trial_key(reference);
  std::vector<std::size_t> counter(ks.size(), 0);
  const std::size_t total = size();
  bool ref_found = false;
  for (std::size_t t = 0; t < total; ++t) {
    TrialSpec spec;
    for (std::size_t a = 0; a < ks.size(); ++a) spec.knobs.push_back({ks[a], values_.at(ks[a])[counter[a]]});
    spec.key = trial_key(spec.knobs);
    spec.reference = spec.key == ref_key;
    ref_found = ref_found || spec.reference;
    out.push_back(std::move(spec));
    for (std::size_t a = ks.size(); a-- > 0;) {  // odometer: last knob fastest
      if (++counter[a] < values_.at(ks[a]).size()) break;
      counter[a] = 0;
    }
  }
  if (!ref_found && !reference.empty()) {
    TrialSpec spec;
    spec.knobs = reference;
    std::stable_sort(spec.knobs.begin(), spec.knobs.end(), [](const KnobSetting& a, const KnobSetting& b) { return a.knob < b.knob; });
    spec.key = ref_key;
    spec.reference = true;
    out.insert(out.begin(), std::move(spec));
  }
  for (std::size_t i = 0; i < out.size(); ++i) out[i].index = i;
  return out;
}

}  // namespace cnnergy::tune
