// fp16/bf16 conversions round to nearest even and keep special values; names parse both ways.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

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

// The array conversion (an inference request's images into pinned memory) gives exactly the scalar
// conversions' bits, in one thread and in several (more than 16 Mi elements: the threaded split),
// vectorised or not (lengths that leave a tail), special values included (a NaN stays a NaN: the F16C
// instruction keeps more of its payload); a dtype it cannot write is refused.
TEST(DType, ArrayConversionMatchesTheScalarOnesBitForBit) {
  for (const std::size_t n : {std::size_t{1003}, (std::size_t{1} << 24) + 12345}) {
    std::vector<float> src(n);
    std::uint32_t state = static_cast<std::uint32_t>(n);
    for (auto& v : src) {  // random bit patterns: every exponent, NaNs and infinities among them
      state = state * 1664525u + 1013904223u;
      std::memcpy(&v, &state, sizeof v);
    }
    src[0] = std::numeric_limits<float>::quiet_NaN();
    src[1] = -std::numeric_limits<float>::infinity();
    src[2] = 1.0f + std::ldexp(1.0f, -8);  // a bf16 tie
    std::vector<std::uint16_t> bf(n), half(n);
    std::vector<float> same(n);
    convert_from_f32(src.data(), bf.data(), DType::kBF16, n);
    convert_from_f32(src.data(), half.data(), DType::kF16, n);
    convert_from_f32(src.data(), same.data(), DType::kF32, n);
    std::size_t bf_wrong = 0, half_wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      bf_wrong += bf[i] != float_to_bf16_bits(src[i]);
      if (std::isnan(src[i]))
        half_wrong += (half[i] & 0x7c00u) != 0x7c00u || (half[i] & 0x03ffu) == 0 || (half[i] >> 15) != (float_to_half_bits(src[i]) >> 15);
      else
        half_wrong += half[i] != float_to_half_bits(src[i]);
    }
    EXPECT_EQ(bf_wrong, 0u) << n;
    EXPECT_EQ(half_wrong, 0u) << n;
    EXPECT_EQ(std::memcmp(same.data(), src.data(), n * sizeof(float)), 0) << n;
  }
  std::int32_t out = 0;
  const float one = 1.0f;
  EXPECT_THROW(convert_from_f32(&one, &out, DType::kI32, 1), InvalidArgument);
}
