// Knob parsing as the CLI takes it, device checks with their messages, trial keys and the product.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "tune/knobs.hpp"

using namespace cnnergy;
using namespace cnnergy::tune;

namespace {

std::vector<std::int64_t> numbers(const std::vector<KnobValue>& v) {
  std::vector<std::int64_t> out;
  for (const auto& x : v) out.push_back(x.number.value());
  return out;
}

// The message of the InvalidArgument `fn` throws ("" when it does not throw).
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

DeviceLimits h200_like() {
  DeviceLimits l;
  l.power_limit_min_w = 200;
  l.power_limit_max_w = 700;
  l.power_limit_default_w = 700;
  for (std::int64_t c = 345; c <= 1980; c += 15) l.supported_sm_clocks_mhz.push_back(c);
  l.supported_mem_clocks_mhz = {1593, 2619};
  l.gpu_count = 2;
  l.conv_algos = {"implicit_gemm", "winograd", "fft", "direct"};
  return l;
}

}  // namespace

TEST(Knobs, ListsAndInclusiveRanges) {
  const DeviceLimits none;
  EXPECT_EQ(numbers(parse_knob_values(Knob::kBatch, "64,128,256", none)), (std::vector<std::int64_t>{64, 128, 256}));
  EXPECT_EQ(numbers(parse_knob_values(Knob::kBatch, " 32:128:32 ", none)), (std::vector<std::int64_t>{32, 64, 96, 128}));
  // stop not on the grid: values start + i*step <= stop
  EXPECT_EQ(numbers(parse_knob_values(Knob::kBatch, "10:25:10", none)), (std::vector<std::int64_t>{10, 20}));
  EXPECT_EQ(numbers(parse_knob_values(Knob::kGpus, "1,2", none)), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(numbers(parse_knob_values(Knob::kPowerLimit, "200:700:25", h200_like())).size(), 21u);
  EXPECT_EQ(numbers(parse_knob_values(Knob::kPowerLimit, "300,200:250:50", h200_like())),
            (std::vector<std::int64_t>{300, 200, 250}));
  // one-value range
  EXPECT_EQ(numbers(parse_knob_values(Knob::kBatch, "64:64:1", none)), (std::vector<std::int64_t>{64}));
}

TEST(Knobs, RandomRangesMatchArithmetic) {
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  for (int i = 0; i < 200; ++i) {
    const std::int64_t a = 1 + rng.next_u32() % 500, len = rng.next_u32() % 600, step = 1 + rng.next_u32() % 50;
    const auto v = numbers(parse_knob_values(Knob::kBatch, std::to_string(a) + ":" + std::to_string(a + len) + ":" + std::to_string(step), {}));
    ASSERT_EQ(v.size(), static_cast<std::size_t>(len / step + 1));
    for (std::size_t k = 0; k < v.size(); ++k) ASSERT_EQ(v[k], a + static_cast<std::int64_t>(k) * step);
  }
}

TEST(Knobs, BadRangesAndListsAreRejectedWithReasons) {
  const DeviceLimits none;
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kBatch, "", none); }).find("at least one value"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kBatch, "64,,128", none); }).find("empty item"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kPowerLimit, "700:200:25", none); }).find("start 700 is above stop 200"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kBatch, "64:128:0", none); }).find("step must be positive"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kBatch, "64:128:-8", none); }).find("step must be positive"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kBatch, "64:128", none); }).find("start:stop:step"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kBatch, "64,abc", none); }).find("'abc'"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kBatch, "64x", none); }).find("whole number"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kBatch, "0", none); }).find("at least 1"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kBatch, "64,128,64", none); }).find("64 twice"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kBatch, "1:1000000:1", none); }).find("more than"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kGpus, "1,4", h200_like()); }).find("more GPUs than this machine has (2)"),
            std::string::npos);
}

TEST(Knobs, PowerLimitsAreCheckedAgainstTheDeviceRange) {
  const DeviceLimits l = h200_like();
  const std::string msg = error_of([&] { parse_knob_values(Knob::kPowerLimit, "150:700:50", l); });
  EXPECT_NE(msg.find("150 W is outside the device's allowed range 200-700 W"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kPowerLimit, "750", l); }).find("200-700 W"), std::string::npos);
  // all = the whole range at the default step; all:STEP with the maximum always included
  auto all = numbers(parse_knob_values(Knob::kPowerLimit, "all", l));
  EXPECT_EQ(all.size(), 101u);
  EXPECT_EQ(all.front(), 200);
  EXPECT_EQ(all.back(), 700);
  all = numbers(parse_knob_values(Knob::kPowerLimit, "all:150", l));
  EXPECT_EQ(all, (std::vector<std::int64_t>{200, 350, 500, 650, 700}));
  EXPECT_EQ(numbers(parse_knob_values(Knob::kPowerLimit, "default", l)), (std::vector<std::int64_t>{700}));
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kPowerLimit, "all", DeviceLimits{}); }).find("allowed range"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kPowerLimit, "all:0", l); }).find("positive"), std::string::npos);
}

TEST(Knobs, ClocksMustBeSupportedAndTheNearestIsNamed) {
  const DeviceLimits l = h200_like();
  EXPECT_EQ(numbers(parse_knob_values(Knob::kSmClock, "1005,1980", l)), (std::vector<std::int64_t>{1005, 1980}));
  const std::string msg = error_of([&] { parse_knob_values(Knob::kSmClock, "1000", l); });
  EXPECT_NE(msg.find("1000 MHz is not supported"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nearest supported: 1005 MHz"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kMemClock, "2000", l); }).find("nearest supported: 1593 MHz"), std::string::npos);
  // a range keeps the supported clocks inside it, at least `step` apart
  EXPECT_EQ(numbers(parse_knob_values(Knob::kSmClock, "1000:1100:30", l)), (std::vector<std::int64_t>{1005, 1035, 1065, 1095}));
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kSmClock, "2000:2100:10", l); }).find("nearest supported: 1980"), std::string::npos);
  EXPECT_EQ(parse_knob_values(Knob::kSmClock, "supported", l).size(), l.supported_sm_clocks_mhz.size());
  EXPECT_EQ(numbers(parse_knob_values(Knob::kSmClock, "supported:600", l)), (std::vector<std::int64_t>{345, 945, 1545}));
  const auto d = parse_knob_values(Knob::kSmClock, "default,1980", l);
  EXPECT_TRUE(d[0].is_default());
  EXPECT_FALSE(d[1].is_default());
  // without a device list every positive clock is accepted; `supported` needs the list
  EXPECT_EQ(numbers(parse_knob_values(Knob::kSmClock, "1000", DeviceLimits{})), (std::vector<std::int64_t>{1000}));
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kSmClock, "supported", DeviceLimits{}); }).find("not known"), std::string::npos);
}

TEST(Knobs, TextKnobs) {
  const DeviceLimits l = h200_like();
  EXPECT_EQ(parse_knob_values(Knob::kPrecision, "fp32,tf32,fp16,bf16", l).size(), 4u);
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kPrecision, "fp8", l); }).find("fp32, tf32, fp16, bf16"), std::string::npos);
  EXPECT_EQ(parse_knob_values(Knob::kLayout, "nchw,nhwc", l)[1].text, "nhwc");
  EXPECT_THROW(parse_knob_values(Knob::kLayout, "chwn", l), InvalidArgument);
  EXPECT_EQ(parse_knob_values(Knob::kConvAlgo, "winograd,fft", l)[0].text, "winograd");
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kConvAlgo, "magic", l); }).find("known: implicit_gemm"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kConvAlgo, "a=b", DeviceLimits{}); }).find("letters, digits"), std::string::npos);
  // The own implementations (docs/convolutions.md) are "own:NAME"
  EXPECT_EQ(parse_knob_values(Knob::kConvAlgo, "own:winograd,auto", DeviceLimits{})[0].text, "own:winograd");
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kConvAlgo, "own:a=b", DeviceLimits{}); }).find("own:NAME"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kConvAlgo, "x:winograd", DeviceLimits{}); }).find("letters, digits"), std::string::npos);
  EXPECT_EQ(parse_knob_values(Knob::kCudaGraph, "off,on", l).size(), 2u);
  EXPECT_NE(error_of([&] { parse_knob_values(Knob::kCudaGraph, "yes", l); }).find("choose on or off"), std::string::npos);
}

TEST(Knobs, KeysAreCanonicalAndRoundTrip) {
  std::vector<KnobSetting> s = {{Knob::kPowerLimit, KnobValue::of_number(250)},
                                {Knob::kBatch, KnobValue::of_number(64)},
                                {Knob::kSmClock, KnobValue::of_text("default")},
                                {Knob::kPrecision, KnobValue::of_text("fp16")}};
  const std::string key = trial_key(s);
  EXPECT_EQ(key, "batch=64,precision=fp16,sm_clock_mhz=default,power_limit_w=250");
  const auto back = parse_trial_key(key);
  EXPECT_EQ(trial_key(back), key);
  EXPECT_EQ(back[0].value.number, 64);
  EXPECT_TRUE(back[2].value.is_default());
  EXPECT_EQ(trial_key({}), "default");
  EXPECT_TRUE(parse_trial_key("default").empty());
  EXPECT_THROW(parse_trial_key("batch"), InvalidArgument);
  EXPECT_THROW(parse_trial_key("power_limit_w=250,batch=64"), InvalidArgument);  // not canonical order
  EXPECT_THROW(parse_trial_key("voltage=3"), InvalidArgument);
}

TEST(Knobs, ProductIsDeterministicWithTheReferenceFlagged) {
  const DeviceLimits l = h200_like();
  KnobSpace space;
  space.set(Knob::kPowerLimit, parse_knob_values(Knob::kPowerLimit, "300:700:200", l));
  space.set(Knob::kBatch, parse_knob_values(Knob::kBatch, "64,128", l));
  EXPECT_THROW(space.set(Knob::kBatch, parse_knob_values(Knob::kBatch, "32", l)), InvalidArgument);
  EXPECT_EQ(space.size(), 6u);
  EXPECT_EQ(space.describe(), "batch=64|128;power_limit_w=300|500|700");
  const auto ref = space.default_reference(l);
  EXPECT_EQ(trial_key(ref), "batch=64,power_limit_w=700");
  const auto trials = space.trials(ref);
  ASSERT_EQ(trials.size(), 6u);
  const std::vector<std::string> expected = {"batch=64,power_limit_w=300",  "batch=64,power_limit_w=500",
                                             "batch=64,power_limit_w=700",  "batch=128,power_limit_w=300",
                                             "batch=128,power_limit_w=500", "batch=128,power_limit_w=700"};
  for (std::size_t i = 0; i < trials.size(); ++i) {
    EXPECT_EQ(trials[i].index, i);
    EXPECT_EQ(trials[i].key, expected[i]);
    EXPECT_EQ(trials[i].reference, i == 2);
  }
  // same space, same list: keys are stable
  const auto again = space.trials(ref);
  for (std::size_t i = 0; i < trials.size(); ++i) EXPECT_EQ(again[i].key, trials[i].key);
  // a reference outside the product becomes trial 0
  const auto custom = space.parse_reference("power_limit_w=650", l);
  const auto with_ref = space.trials(custom);
  ASSERT_EQ(with_ref.size(), 7u);
  EXPECT_EQ(with_ref[0].key, "batch=64,power_limit_w=650");
  EXPECT_TRUE(with_ref[0].reference);
  EXPECT_EQ(std::count_if(with_ref.begin(), with_ref.end(), [](const TrialSpec& t) { return t.reference; }), 1);
  EXPECT_THROW(space.parse_reference("sm_clock_mhz=1005", l), InvalidArgument);  // not swept
  EXPECT_THROW(space.trials({{Knob::kBatch, KnobValue::of_number(64)}}), InvalidArgument);  // misses a knob
}

TEST(Knobs, ClockSweepReferenceIsTheUnlockedDefault) {
  const DeviceLimits l = h200_like();
  KnobSpace space;
  space.set(Knob::kSmClock, parse_knob_values(Knob::kSmClock, "1005,1500", l));
  const auto trials = space.trials(space.default_reference(l));
  ASSERT_EQ(trials.size(), 3u);
  EXPECT_EQ(trials[0].key, "sm_clock_mhz=default");
  EXPECT_TRUE(trials[0].reference);
}

TEST(Knobs, RandomProductsHaveUniqueKeysAndFullCoverage) {
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  for (int round = 0; round < 20; ++round) {
    KnobSpace space;
    std::size_t expected = 1;
    for (Knob k : {Knob::kBatch, Knob::kGpus, Knob::kPowerLimit}) {
      if (rng.next_u32() % 2) continue;
      const std::size_t n = 1 + rng.next_u32() % 5;
      space.set(k, parse_knob_values(k, "1:" + std::to_string(n) + ":1", {}));
      expected *= n;
    }
    const auto trials = space.trials(space.default_reference({}));
    EXPECT_EQ(trials.size(), expected);
    std::set<std::string> keys;
    for (const auto& t : trials) keys.insert(t.key);
    EXPECT_EQ(keys.size(), trials.size());
  }
}

TEST(Knobs, TrialEnvironmentPassesEveryKnob) {
  KnobSpace space;
  space.set(Knob::kBatch, {KnobValue::of_number(32)});
  space.set(Knob::kPrecision, {KnobValue::of_text("bf16")});
  const auto t = space.trials(space.default_reference({}))[0];
  const auto env = trial_environment(t);
  auto get = [&](const std::string& k) {
    for (const auto& [name, v] : env)
      if (name == k) return v;
    return std::string("<missing>");
  };
  EXPECT_EQ(get("CNNERGY_BATCH"), "32");
  EXPECT_EQ(get("CNNERGY_PRECISION"), "bf16");
  EXPECT_EQ(get("CNNERGY_TRIAL_KEY"), "batch=32,precision=bf16");
  EXPECT_EQ(get("CNNERGY_TRIAL_INDEX"), "0");
}
