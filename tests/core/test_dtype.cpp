// fp16/bf16 conversions round to nearest even and keep special values; names parse both ways.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/dtype.hpp"
#include "core/errors.hpp"

using namespace cnnergy;

TEST(DType, HalfRoundTripOfRepresentableValues) {
  for (float v : {0.f, 1.f, -2.5f, 65504.f, 6.103515625e-05f /*min normal*/, 5.9604645e-08f /*min subnormal*/}) {
    EXPECT_EQ(half_bits_to_float(float_to_half_bits(v)), v) << v;
  }
}

TEST(DType, HalfRoundsToNearestEven) {
  // 1 + 2^-11 is exactly half-way between 1 and 1 + 2^-10: ties to even -> 1.
  EXPECT_EQ(half_bits_to_float(float_to_half_bits(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  // 1 + 3*2^-11 is half-way between 1+2^-10 and 1+2^-9: ties to even -> 1 + 2^-9.
  EXPECT_EQ(half_bits_to_float(float_to_half_bits(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isinf(half_bits_to_float(float_to_half_bits(70000.f))));
  EXPECT_TRUE(std::isnan(half_bits_to_float(float_to_half_bits(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, HalfRelativeErrorBoundOnRandomValues) {
  for (int i = 1; i < 20000; ++i) {
    const float v = std::sin(static_cast<float>(i)) * static_cast<float>(i % 977);
    if (std::fabs(v) < 1e-3f) continue;
    EXPECT_NEAR(half_bits_to_float(float_to_half_bits(v)), v, std::fabs(v) * 4.9e-4f) << v;
  }
}

TEST(DType, Bf16RoundTripAndRounding) {
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.5f)), 1.5f);
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8))), 1.0f);  // tie -> even
  for (int i = 1; i < 20000; ++i) {
    const float v = std::cos(static_cast<float>(i)) * static_cast<float>(i);
    EXPECT_NEAR(bf16_bits_to_float(float_to_bf16_bits(v)), v, std::fabs(v) * 3.95e-3f) << v;
  }
}

TEST(DType, NamesParseAndUnknownNamesListChoices) {
  EXPECT_EQ(parse_dtype("bf16"), DType::kBF16);
  EXPECT_EQ(parse_layout("nhwc"), Layout::kNHWC);
  EXPECT_EQ(parse_device("cuda:1").index, 1);
  try {
    parse_dtype("fp8");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("fp32, fp16, bf16"), std::string::npos);
  }
  EXPECT_THROW(parse_device("tpu"), InvalidArgument);
}
