// Shape arithmetic, printing and parsing.
#include "core/shape.hpp"

#include <sstream>

#include "core/errors.hpp"

namespace cnnergy {

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (auto d : dims_)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))  // dimensions read from files are checked here too
      throw ShapeError("shape " + str() + " has " + (d < 0 ? "a negative dimension" : "more than 2^63 elements"));
  return n;
}

std::int64_t Shape::per_sample() const { return dims_.empty() || dims_[0] == 0 ? 0 : numel() / dims_[0]; }

Shape Shape::with_batch(std::int64_t n) const {
  Shape s = *this;
  if (!s.dims_.empty()) s.dims_[0] = n;
  return s;
}

std::string Shape::str() const {
  std::ostringstream os;
  for (std::size_t i = 0; i < dims_.size(); ++i) os << (i ? "x" : "") << dims_[i];
  return dims_.empty() ? std::string("scalar") : os.str();
}

Shape parse_shape(const std::string& text) {
  std::vector<std::int64_t> dims;
  std::string cur;
  auto flush = [&]() {
    if (cur.empty() || cur.find_first_not_of("0123456789") != std::string::npos || cur.size() > 9)
      throw InvalidArgument("malformed shape '" + text + "' (expected positive integers like 3x224x224)");
    const auto v = std::stoll(cur);
    if (v <= 0) throw InvalidArgument("shape '" + text + "' has a dimension <= 0");
    dims.push_back(v);
    cur.clear();
  };
  for (char ch : text) {
    if (ch == 'x' || ch == 'X' || ch == ',') flush();
    else cur.push_back(ch);
  }
  flush();
  return Shape(std::move(dims));
}

}  // namespace cnnergy
