// The knob space of a sweep: parsing knob values exactly as the CLI takes them (lists, inclusive
// ranges start:stop:step, `all` power limits, `supported` clocks), checking them against what the
// device allows, and the cartesian product as a deterministic trial list with stable trial keys.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cnnergy::tune {

// Canonical order: workload knobs (costly to change: the model is rebuilt) before hardware knobs
// (cheap: one NVML call), so the product varies the cheap ones fastest.
enum class Knob { kBatch, kGpus, kPrecision, kLayout, kConvAlgo, kCudaGraph, kMemClock, kSmClock, kPowerLimit };
inline constexpr std::array<Knob, 9> kAllKnobs = {Knob::kBatch,     Knob::kGpus,     Knob::kPrecision,
                                                  Knob::kLayout,    Knob::kConvAlgo, Knob::kCudaGraph,
                                                  Knob::kMemClock,  Knob::kSmClock,  Knob::kPowerLimit};

std::string_view knob_name(Knob knob);      // key/column name with unit: "batch", "power_limit_w", "sm_clock_mhz"
std::string_view knob_flag(Knob knob);      // CLI flag without dashes: "batch", "power-limit", "sm-clock"
std::string_view knob_env_name(Knob knob);  // variable for external commands: "CNNERGY_POWER_LIMIT_W"
std::string_view knob_unit(Knob knob);      // "W", "MHz" or "" for unit-less knobs
bool knob_is_numeric(Knob knob);
Knob parse_knob_name(std::string_view name);  // accepts knob_name or knob_flag; InvalidArgument lists them

// Precisions a trial can ask for (tf32 is fp32 storage with TF32 tensor-core math).
inline constexpr std::array<std::string_view, 4> kPrecisions = {"fp32", "tf32", "fp16", "bf16"};

// One value of one knob. Numeric knobs carry the number; the token "default" (clocks: leave them
// unlocked) carries none. `text` is the canonical spelling used in keys, columns and reports.
struct KnobValue {
  std::string text;
  std::optional<std::int64_t> number;
  bool is_default() const { return !number && text == "default"; }
  bool operator==(const KnobValue&) const = default;
  static KnobValue of_number(std::int64_t v) { return {std::to_string(v), v}; }
  static KnobValue of_text(std::string t) { return {std::move(t), std::nullopt}; }
};

// What the device and the engine allow; filled from telemetry and the backend at sweep time. An empty
// optional or list means "not known here": values are then only checked for being well-formed.
struct DeviceLimits {
  std::optional<std::int64_t> power_limit_min_w;
  std::optional<std::int64_t> power_limit_max_w;
  std::optional<std::int64_t> power_limit_default_w;
  std::int64_t power_limit_step_w = 5;              // step of a bare `all`
  std::vector<std::int64_t> supported_sm_clocks_mhz;
  std::vector<std::int64_t> supported_mem_clocks_mhz;
  std::optional<std::int64_t> gpu_count;
  std::vector<std::string> conv_algos;              // algorithm names the backend knows
};

// Most values one knob may expand to (a typo such as 1:1000000:1 should not plan a year of trials).
inline constexpr std::size_t kMaxValuesPerKnob = 4096;

// Parses one knob's flag value. Accepted forms (comma-separated items, mixed freely):
//   numbers            --batch 64,128,256   --gpus 1,2
//   inclusive ranges   --power-limit 200:700:25   (start:stop:step; values start + i*step <= stop)
//   power limits       `all` or `all:STEP` = the device's allowed range (its maximum always included),
//                      `default` = the device's default limit
//   clocks             `supported` or `supported:STEP` = every supported clock (thinned to >= STEP
//                      apart), a range keeps the supported clocks inside it, `default` = unlocked;
//                      a clock the device does not support is an error naming the nearest one
//   text knobs         --precision fp32,fp16  --layout nchw,nhwc  --conv-algo <backend names>
//                      --cuda-graph off,on (the training step replayed as one CUDA graph)
// Errors (InvalidArgument): empty list or item, inverted range, step <= 0, a value outside what the
// device allows (the message gives the allowed range or nearest value), duplicates, too many values.
std::vector<KnobValue> parse_knob_values(Knob knob, const std::string& text, const DeviceLimits& limits);

struct KnobSetting {
  Knob knob;
  KnobValue value;
  bool operator==(const KnobSetting&) const = default;
};

// Canonical key of a knob setting: "batch=64,power_limit_w=200" in canonical knob order; "default"
// when no knob is swept. Stable across runs, so --resume and merge can match trials by key.
std::string trial_key(std::vector<KnobSetting> knobs);
// Inverse of trial_key (numbers come back as numbers). Throws InvalidArgument on a malformed key.
std::vector<KnobSetting> parse_trial_key(const std::string& key);

struct TrialSpec {
  std::size_t index = 0;           // position in the full, unsharded trial list
  std::string key;
  std::vector<KnobSetting> knobs;  // canonical knob order
  bool reference = false;          // the setting every relative metric (EDS, savings) is measured against
  const KnobValue* find(Knob knob) const;
};

// Environment variables that pass a trial's knob values to an external command:
// CNNERGY_<KNOB>=value for every swept knob, plus CNNERGY_TRIAL_KEY and CNNERGY_TRIAL_INDEX.
std::vector<std::pair<std::string, std::string>> trial_environment(const TrialSpec& trial);

class KnobSpace {
 public:
  // Sets the values of one knob (InvalidArgument when empty or when the knob is already set).
  void set(Knob knob, std::vector<KnobValue> values);
  bool has(Knob knob) const { return values_.count(knob) > 0; }
  const std::vector<KnobValue>& values(Knob knob) const;  // InvalidArgument when not set
  std::vector<Knob> knobs() const;                        // the swept knobs, canonical order
  std::size_t size() const;                               // number of combinations
  // Canonical text of the whole space ("batch=64|128;power_limit_w=200|225"), for sweep identity.
  std::string describe() const;

  // The reference setting: for the power limit the device's default (or the largest value listed),
  // for clocks `default` (unlocked), for every other knob its first listed value.
  std::vector<KnobSetting> default_reference(const DeviceLimits& limits) const;
  // Parses a user-given reference "power_limit_w=300,batch=128": knobs left out take default_reference.
  std::vector<KnobSetting> parse_reference(const std::string& text, const DeviceLimits& limits) const;

  // The cartesian product in canonical knob order, the last knob varying fastest. The trial matching
  // `reference` is flagged; when the reference is not in the product it is added as trial 0, so a
  // sweep that is cut short still has the point everything is normalised to.
  std::vector<TrialSpec> trials(const std::vector<KnobSetting>& reference) const;

 private:
  std::map<Knob, std::vector<KnobValue>> values_;
};

}  // namespace cnnergy::tune
