// Element types, memory layouts and devices, with their names for flags and reports, and the
// fp16/bf16 <-> fp32 conversions the CPU side needs (round-to-nearest-even).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cnnergy {

enum class DType { kF32, kF16, kBF16, kI32 };
enum class Layout { kNCHW, kNHWC };
enum class DeviceKind { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  bool operator==(const Device&) const = default;
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool is_cuda() const { return kind == DeviceKind::kCuda; }
  std::string str() const;  // "cpu" or "cuda:0"
};

std::size_t dtype_size_bytes(DType t);
std::string_view dtype_name(DType t);       // "fp32", "fp16", "bf16", "int32"
DType parse_dtype(std::string_view s);      // throws InvalidArgument listing the choices
std::string_view layout_name(Layout l);     // "nchw", "nhwc"
Layout parse_layout(std::string_view s);
Device parse_device(std::string_view s);    // "cpu", "cuda", "cuda:N"

// Half-precision conversions (bit patterns in uint16_t), round-to-nearest-even, NaN/Inf kept.
std::uint16_t float_to_half_bits(float f);
float half_bits_to_float(std::uint16_t h);
std::uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(std::uint16_t b);

// Converts n fp32 values into `to` (fp32, fp16 or bf16) at dst, rounding as the conversions above;
// large arrays in a few threads (an inference request's images on their way to pinned memory).
void convert_from_f32(const float* src, void* dst, DType to, std::size_t n);

}  // namespace cnnergy
