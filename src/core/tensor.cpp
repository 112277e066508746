// Tensor views, host allocation, and host-side dtype/layout conversion.
#include "core/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/errors.hpp"

namespace cnnergy {

std::shared_ptr<Buffer> allocate_host_buffer(std::size_t size_bytes) {
  const std::size_t rounded = ((size_bytes + 63) / 64) * 64;
  void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  if (rounded && !p)
    throw OutOfMemory("host allocation of " + std::to_string(size_bytes) + " bytes failed");
  if (p) std::memset(p, 0, rounded);
  return std::make_shared<Buffer>(p, size_bytes, Device{}, [](void* q) { std::free(q); });
}

Tensor::Tensor(Shape shape, DType dtype, Layout layout, std::shared_ptr<Buffer> buffer, std::size_t offset_bytes)
    : shape_(std::move(shape)), dtype_(dtype), layout_(layout), buffer_(std::move(buffer)), offset_bytes_(offset_bytes) {
  if (buffer_ && offset_bytes_ + size_bytes() > buffer_->size_bytes())
    throw InternalError("tensor view " + shape_.str() + " exceeds its buffer (" +
                        std::to_string(buffer_->size_bytes()) + " bytes)");
}

Tensor Tensor::host(const Shape& shape, DType dtype, Layout layout) {
  const auto bytes = static_cast<std::size_t>(shape.numel()) * dtype_size_bytes(dtype);
  return Tensor(shape, dtype, layout, allocate_host_buffer(bytes));
}

void* Tensor::raw() const {
  if (!buffer_) return nullptr;
  return static_cast<char*>(buffer_->data()) + offset_bytes_;
}

std::span<float> Tensor::f32() const {
  if (!device().is_cpu() || dtype_ != DType::kF32)
    throw InternalError("f32() needs a host fp32 tensor, got " + describe());
  return {data<float>(), static_cast<std::size_t>(numel())};
}

Tensor Tensor::reshaped(const Shape& shape) const {
  if (shape.numel() != numel())
    throw ShapeError("cannot reshape " + shape_.str() + " to " + shape.str());
  return Tensor(shape, dtype_, layout_, buffer_, offset_bytes_);
}

Tensor Tensor::with_layout(Layout layout) const { return Tensor(shape_, dtype_, layout, buffer_, offset_bytes_); }

Tensor Tensor::batch_slice(std::int64_t first, std::int64_t count) const {
  if (first < 0 || count < 0 || first + count > shape_.n())
    throw ShapeError("batch slice [" + std::to_string(first) + ", " + std::to_string(first + count) +
                     ") outside " + shape_.str());
  const auto per = static_cast<std::size_t>(shape_.per_sample()) * dtype_size_bytes(dtype_);
  return Tensor(shape_.with_batch(count), dtype_, layout_, buffer_, offset_bytes_ + per * static_cast<std::size_t>(first));
}

std::string Tensor::describe() const {
  return std::string(dtype_name(dtype_)) + " " + std::string(layout_name(layout_)) + " " + shape_.str() + " on " +
         device().str();
}

namespace {
float load_as_f32(const void* p, DType t, std::size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF16: return half_bits_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::kBF16: return bf16_bits_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::kI32: return static_cast<float>(static_cast<const std::int32_t*>(p)[i]);
  }
  return 0.f;
}
void store_from_f32(void* p, DType t, std::size_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(p)[i] = v; break;
    case DType::kF16: static_cast<std::uint16_t*>(p)[i] = float_to_half_bits(v); break;
    case DType::kBF16: static_cast<std::uint16_t*>(p)[i] = float_to_bf16_bits(v); break;
    case DType::kI32: static_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v); break;
  }
}
// Index of logical (n,c,h,w) in the given layout.
std::size_t offset(Layout l, std::int64_t C, std::int64_t H, std::int64_t W, std::int64_t n, std::int64_t c,
                   std::int64_t h, std::int64_t w) {
  if (l == Layout::kNCHW) return static_cast<std::size_t>(((n * C + c) * H + h) * W + w);
  return static_cast<std::size_t>(((n * H + h) * W + w) * C + c);
}
void convert(const Tensor& src, const Tensor& dst) {
  const Shape& s = src.shape();
  if (s.rank() != 4 || src.layout() == dst.layout()) {
    const auto n = static_cast<std::size_t>(src.numel());
    for (std::size_t i = 0; i < n; ++i) store_from_f32(dst.raw(), dst.dtype(), i, load_as_f32(src.raw(), src.dtype(), i));
    return;
  }
  const auto N = s.n(), C = s.c(), H = s.h(), W = s.w();
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t w = 0; w < W; ++w)
          store_from_f32(dst.raw(), dst.dtype(), offset(dst.layout(), C, H, W, n, c, h, w),
                         load_as_f32(src.raw(), src.dtype(), offset(src.layout(), C, H, W, n, c, h, w)));
}
}  // namespace

Tensor to_f32_nchw(const Tensor& t) {
  if (!t.device().is_cpu()) throw InternalError("to_f32_nchw needs a host tensor, got " + t.describe());
  Tensor out = Tensor::host(t.shape(), DType::kF32, Layout::kNCHW);
  convert(t, out);
  return out;
}

Tensor from_f32_nchw(const Tensor& t, DType dtype, Layout layout) {
  if (!t.device().is_cpu() || t.dtype() != DType::kF32 || t.layout() != Layout::kNCHW)
    throw InternalError("from_f32_nchw needs a host fp32 NCHW tensor, got " + t.describe());
  Tensor out = Tensor::host(t.shape(), dtype, t.shape().rank() == 4 ? layout : Layout::kNCHW);
  convert(t, out);
  return out;
}

}  // namespace cnnergy
