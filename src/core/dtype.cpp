// Names and conversions for DType, Layout and Device.
#include "core/dtype.hpp"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

namespace {

// Branch-free, so that the compiler vectorises it: float_to_bf16_bits, element by element.
void to_bf16(const float* src, std::uint16_t* out, std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) {
    std::uint32_t u;
    std::memcpy(&u, src + i, sizeof u);
    const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const std::uint32_t quiet = (u >> 16) | 0x40u;
    out[i] = static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
  }
}

void to_half(const float* src, std::uint16_t* out, std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) out[i] = float_to_half_bits(src[i]);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The F16C instruction rounds to nearest even like float_to_half_bits (a NaN keeps more of its
// payload: still a NaN); used where the CPU has it, 8 values at a time.
__attribute__((target("avx,f16c"))) void to_half_f16c(const float* src, std::uint16_t* out, std::size_t begin,
                                                      std::size_t end) {
  std::size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  to_half(src, out, i, end);
}

// to_bf16, 8 values at a time, where the CPU has AVX2.
__attribute__((target("avx2"))) void to_bf16_avx2(const float* src, std::uint16_t* out, std::size_t begin,
                                                  std::size_t end) {
  const __m256i one = _mm256_set1_epi32(1), half_ulp = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(0x40);
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff), infinity = _mm256_set1_epi32(0x7f800000);
  std::size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i high = _mm256_srli_epi32(u, 16);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, half_ulp), _mm256_and_si256(high, one)), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, magnitude), infinity);
    const __m256i bits = _mm256_blendv_epi8(rounded, _mm256_or_si256(high, quiet), nan);
    // 8 x 32 -> 16 bits (every value < 65536): packus works per 128-bit lane, so take quads 0 and 2
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
  }
  to_bf16(src, out, i, end);
}
#endif

// The vectorised conversions where the CPU has the instructions.
using Converter = void (*)(const float*, std::uint16_t*, std::size_t, std::size_t);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
const Converter kToBf16 = __builtin_cpu_supports("avx2") ? to_bf16_avx2 : to_bf16;
const Converter kToHalf = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx") ? to_half_f16c : to_half;
#else
const Converter kToBf16 = to_bf16;
const Converter kToHalf = to_half;
#endif

void convert_range(const float* src, void* dst, DType to, std::size_t begin, std::size_t end) {
  auto* out = static_cast<std::uint16_t*>(dst);
  switch (to) {
    case DType::kF32:
      std::memcpy(static_cast<float*>(dst) + begin, src + begin, (end - begin) * sizeof(float));
      return;
    case DType::kBF16:
      kToBf16(src, out, begin, end);
      return;
    case DType::kF16:
      kToHalf(src, out, begin, end);
      return;
    default:
      return;  // convert_from_f32 refused it before any thread started
  }
}

}  // namespace

void convert_from_f32(const float* src, void* dst, DType to, std::size_t n) {
  if (to != DType::kF32 && to != DType::kF16 && to != DType::kBF16)
    throw InvalidArgument(std::string("convert_from_f32: no conversion to ") + std::string(dtype_name(to)));
  constexpr std::size_t kPerThread = std::size_t{1} << 22;  // 16 MiB of fp32 per thread at the least
  const std::size_t threads =
      std::min<std::size_t>({n / kPerThread + 1, std::max(1u, std::thread::hardware_concurrency()), 8});
  if (threads <= 1) {
    convert_range(src, dst, to, 0, n);
    return;
  }
  std::vector<std::thread> pool;
  const std::size_t per = (n + threads - 1) / threads;
  for (std::size_t t = 1; t < threads; ++t)
    pool.emplace_back(convert_range, src, dst, to, std::min(n, t * per), std::min(n, (t + 1) * per));
  convert_range(src, dst, to, 0, std::min(n, per));
  for (auto& t : pool) t.join();
}

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
