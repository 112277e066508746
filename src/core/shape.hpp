// Tensor shapes. Activations are 4-D and always described in logical N, C, H, W order whatever
// their memory layout; fully connected activations are 2-D (N, F); parameters have any rank.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace cnnergy {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<std::int64_t> dims) : dims_(std::move(dims)) {}

  std::size_t rank() const { return dims_.size(); }
  std::int64_t operator[](std::size_t i) const { return dims_.at(i); }
  std::int64_t& operator[](std::size_t i) { return dims_.at(i); }
  const std::vector<std::int64_t>& dims() const { return dims_; }

  std::int64_t numel() const;          // product of dims (1 for rank 0)
  std::int64_t per_sample() const;     // numel / dims[0]
  // Logical NCHW accessors; 2-D shapes (N, F) read as (N, F, 1, 1).
  std::int64_t n() const { return dims_.at(0); }
  std::int64_t c() const { return rank() > 1 ? dims_[1] : 1; }
  std::int64_t h() const { return rank() > 2 ? dims_[2] : 1; }
  std::int64_t w() const { return rank() > 3 ? dims_[3] : 1; }
  Shape with_batch(std::int64_t n) const;

  std::string str() const;             // "64x3x224x224"
  bool operator==(const Shape&) const = default;

 private:
  std::vector<std::int64_t> dims_;
};

// Parses "3x224x224" (also "3,224,224"); throws InvalidArgument on anything else or a dim <= 0.
Shape parse_shape(const std::string& text);

}  // namespace cnnergy
