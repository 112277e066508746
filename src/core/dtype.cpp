// Names and conversions for DType, Layout and Device.
#include "core/dtype.hpp"

#include <cstring>

#include "core/errors.hpp"

namespace cnnergy {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::size_t dtype_size_bytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "fp32";
    case DType::kF16: return "fp16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "int32";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  if (s == "fp32" || s == "float32") return DType::kF32;
  if (s == "fp16" || s == "float16") return DType::kF16;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "int32") return DType::kI32;
  throw InvalidArgument("unknown data type '" + std::string(s) + "' (choose one of: fp32, fp16, bf16, int32)");
}

std::string_view layout_name(Layout l) { return l == Layout::kNCHW ? "nchw" : "nhwc"; }

Layout parse_layout(std::string_view s) {
  if (s == "nchw" || s == "NCHW") return Layout::kNCHW;
  if (s == "nhwc" || s == "NHWC") return Layout::kNHWC;
  throw InvalidArgument("unknown layout '" + std::string(s) + "' (choose one of: nchw, nhwc)");
}

Device parse_device(std::string_view s) {
  if (s == "cpu") return {DeviceKind::kCpu, 0};
  if (s == "cuda" || s == "gpu") return {DeviceKind::kCuda, 0};
  if (s.starts_with("cuda:")) {
    const std::string idx(s.substr(5));
    if (!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos)
      return {DeviceKind::kCuda, std::stoi(idx)};
  }
  throw InvalidArgument("unknown device '" + std::string(s) + "' (choose one of: cpu, cuda, cuda:N)");
}

namespace {
std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

std::uint16_t float_to_bf16_bits(float f) {
  std::uint32_t u = bits_of(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

float bf16_bits_to_float(std::uint16_t b) { return float_of(static_cast<std::uint32_t>(b) << 16); }

std::uint16_t float_to_half_bits(float f) {
  const std::uint32_t u = bits_of(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> Inf
  if (abs < 0x38800000u) {  // subnormal half or zero
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t mant = (abs & 0x007fffffu) | 0x00800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14..24
    const std::uint32_t q = mant >> (shift);
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    std::uint32_t r = q;
    if (rem > halfway || (rem == halfway && (q & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t h = ((abs - 0x38000000u) >> 13);
  const std::uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return float_of(sign);
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return float_of(sign | 0x7f800000u | (mant << 13));
  return float_of(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace cnnergy
