// Tensor: a typed view (shape, dtype, layout, device) over a reference-counted RAII buffer.
// Buffers are allocated by an Allocator that a backend supplies (host, pinned host, device);
// core knows nothing about CUDA.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/dtype.hpp"
#include "core/shape.hpp"

namespace cnnergy {

// A block of memory with its owner's deleter. Not copyable; shared through shared_ptr.
class Buffer {
 public:
  using Deleter = std::function<void(void*)>;
  Buffer(void* data, std::size_t size_bytes, Device device, Deleter deleter)
      : data_(data), size_bytes_(size_bytes), device_(device), deleter_(std::move(deleter)) {}
  ~Buffer() {
    if (data_ && deleter_) deleter_(data_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  std::size_t size_bytes() const { return size_bytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  std::size_t size_bytes_;
  Device device_;
  Deleter deleter_;
};

// Allocates aligned host memory (64-byte alignment). Throws OutOfMemory naming the size.
std::shared_ptr<Buffer> allocate_host_buffer(std::size_t size_bytes);

class Tensor {
 public:
  Tensor() = default;
  Tensor(Shape shape, DType dtype, Layout layout, std::shared_ptr<Buffer> buffer, std::size_t offset_bytes = 0);

  // A new zero-filled host tensor.
  static Tensor host(const Shape& shape, DType dtype = DType::kF32, Layout layout = Layout::kNCHW);

  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Layout layout() const { return layout_; }
  Device device() const { return buffer_ ? buffer_->device() : Device{}; }
  std::int64_t numel() const { return shape_.numel(); }
  std::size_t size_bytes() const { return static_cast<std::size_t>(numel()) * dtype_size_bytes(dtype_); }
  bool defined() const { return static_cast<bool>(buffer_); }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }
  std::size_t offset_bytes() const { return offset_bytes_; }

  void* raw() const;  // start of this view's data
  template <typename T>
  T* data() const { return static_cast<T*>(raw()); }
  // Host fp32 element access (throws if not a host fp32 tensor).
  std::span<float> f32() const;

  // Same memory, new shape with the same element count (throws ShapeError otherwise).
  Tensor reshaped(const Shape& shape) const;
  // Same memory, other layout tag (no data movement): for callers that know what they do.
  Tensor with_layout(Layout layout) const;
  // A view of samples [first, first+count) along dim 0.
  Tensor batch_slice(std::int64_t first, std::int64_t count) const;

  std::string describe() const;  // "fp32 nchw 64x3x224x224 on cuda:0"

 private:
  Shape shape_;
  DType dtype_ = DType::kF32;
  Layout layout_ = Layout::kNCHW;
  std::shared_ptr<Buffer> buffer_;
  std::size_t offset_bytes_ = 0;
};

// Host-side conversions used by tests and by the CPU backend's I/O:
// any host tensor -> fp32 NCHW host tensor, and back to the requested dtype/layout.
Tensor to_f32_nchw(const Tensor& host_tensor);
Tensor from_f32_nchw(const Tensor& host_f32_nchw, DType dtype, Layout layout);

}  // namespace cnnergy
