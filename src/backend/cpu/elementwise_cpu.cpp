// Element-wise CPU kernels: relu, inverted dropout (counter-based mask shared with the GPU), add,
// channel concatenation, fill/accumulate, the non-finite check and top-k accuracy counting.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "backend/cpu/cpu_kernels.hpp"
#include "core/errors.hpp"
#include "core/hash.hpp"

namespace cnnergy::cpu {

namespace {

// out = v or out += v
inline void store(float& out, float v, bool accumulate) { out = accumulate ? out + v : v; }

}  // namespace

void relu_forward(const Tensor& x, const Tensor& y) {
  check_f32(x, "relu", "x", x.defined() ? x.numel() : 0);
  check_f32(y, "relu", "y", x.numel());
  const float* xp = cf32(x);
  float* yp = mf32(y);  // may be xp: each element is read before it is written
  for (std::int64_t i = 0, count = x.numel(); i < count; ++i) yp[i] = xp[i] > 0.0f ? xp[i] : 0.0f;
}

void relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool accumulate) {
  check_f32(y, "relu backward", "y", y.defined() ? y.numel() : 0);
  check_f32(dy, "relu backward", "dy", y.numel());
  check_f32(dx, "relu backward", "dx", y.numel());
  const float* yp = cf32(y);
  const float* dyp = cf32(dy);
  float* dxp = mf32(dx);
  for (std::int64_t i = 0, count = y.numel(); i < count; ++i)
    store(dxp[i], yp[i] > 0.0f ? dyp[i] : 0.0f, accumulate);
}

void dropout_forward(const Tensor& x, float p, std::uint64_t seed, const Tensor& mask,
                     const Tensor& y) {
  check_f32(x, "dropout", "x", x.defined() ? x.numel() : 0);
  check_f32(mask, "dropout", "mask", x.numel());
  check_f32(y, "dropout", "y", x.numel());
  if (!(p >= 0.0f && p < 1.0f))
    throw InvalidArgument("dropout: probability must be in [0, 1) (got " + std::to_string(p) + ")");
  const float keep_scale = 1.0f / (1.0f - p);
  const float* xp = cf32(x);
  float* mp = mf32(mask);
  float* yp = mf32(y);
  for (std::int64_t i = 0, count = x.numel(); i < count; ++i) {
    const float m = uniform01(seed, static_cast<std::uint64_t>(i)) >= p ? keep_scale : 0.0f;
    mp[i] = m;
    yp[i] = xp[i] * m;
  }
}

void dropout_backward(const Tensor& dy, const Tensor& mask, const Tensor& dx, bool accumulate) {
  check_f32(dy, "dropout backward", "dy", dy.defined() ? dy.numel() : 0);
  check_f32(mask, "dropout backward", "mask", dy.numel());
  check_f32(dx, "dropout backward", "dx", dy.numel());
  const float* dyp = cf32(dy);
  const float* mp = cf32(mask);
  float* dxp = mf32(dx);
  for (std::int64_t i = 0, count = dy.numel(); i < count; ++i) store(dxp[i], dyp[i] * mp[i], accumulate);
}

void add_forward(const Tensor& a, const Tensor& b, const Tensor& y) {
  check_f32(a, "add", "a", a.defined() ? a.numel() : 0);
  check_f32(b, "add", "b", a.numel());
  check_f32(y, "add", "y", a.numel());
  const float* ap = cf32(a);
  const float* bp = cf32(b);
  float* yp = mf32(y);
  for (std::int64_t i = 0, count = a.numel(); i < count; ++i) yp[i] = ap[i] + bp[i];
}

namespace {

// Checks that the parts stack along dim 1 into `whole` (4-D N,C,H,W or 2-D N,F); returns the
// number of elements per channel (H*W, or 1 for 2-D).
std::int64_t check_concat(const Tensor& whole, std::span<const Tensor> parts, std::string_view op,
                          std::string_view part_name) {
  const Shape& ws = whole.shape();
  check_f32(whole, op, part_name == "x" ? "y" : "dy", whole.defined() ? whole.numel() : 0);
  if (ws.rank() != 4 && ws.rank() != 2)
    throw ShapeError(std::string(op) + ": needs 4-D or 2-D tensors, got " + ws.str());
  if (parts.empty()) throw InvalidArgument(std::string(op) + ": no tensors to concatenate");
  std::int64_t channels = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string name = std::string(part_name) + "[" + std::to_string(i) + "]";
    const Tensor& t = parts[i];
    check_f32(t, op, name, t.defined() ? t.numel() : 0);
    const Shape& s = t.shape();
    if (s.rank() != ws.rank() || s.n() != ws.n() || s.h() != ws.h() || s.w() != ws.w())
      throw ShapeError(std::string(op) + ": " + name + " has shape " + s.str() +
                       ", which does not stack along dim 1 into " + ws.str());
    channels += s.c();
  }
  if (channels != ws.c())
    throw ShapeError(std::string(op) + ": the parts have " + std::to_string(channels) +
                     " channels in all, " + ws.str() + " has " + std::to_string(ws.c()));
  return ws.h() * ws.w();
}

}  // namespace

void concat_forward(std::span<const Tensor> xs, const Tensor& y) {
  const std::int64_t hw = check_concat(y, xs, "concat", "x");
  const std::int64_t per_sample = y.shape().c() * hw;
  for (std::int64_t n = 0; n < y.shape().n(); ++n) {
    float* dst = mf32(y) + n * per_sample;
    for (const Tensor& x : xs) {
      const std::int64_t len = x.shape().c() * hw;
      std::memcpy(dst, cf32(x) + n * len, static_cast<std::size_t>(len) * sizeof(float));
      dst += len;
    }
  }
}

void concat_backward(const Tensor& dy, std::span<const Tensor> dxs, bool accumulate) {
  const std::int64_t hw = check_concat(dy, dxs, "concat backward", "dx");
  const std::int64_t per_sample = dy.shape().c() * hw;
  for (std::int64_t n = 0; n < dy.shape().n(); ++n) {
    const float* src = cf32(dy) + n * per_sample;
    for (const Tensor& dx : dxs) {
      const std::int64_t len = dx.shape().c() * hw;
      float* dst = mf32(dx) + n * len;
      for (std::int64_t i = 0; i < len; ++i) store(dst[i], src[i], accumulate);
      src += len;
    }
  }
}

void fill(const Tensor& t, float value) {
  if (!t.defined() || !t.device().is_cpu())
    throw InvalidArgument("fill: needs a defined host tensor");
  const std::int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kF32:
      std::fill_n(t.data<float>(), n, value);
      break;
    case DType::kI32:
      std::fill_n(t.data<std::int32_t>(), n, static_cast<std::int32_t>(value));
      break;
    case DType::kF16:
      std::fill_n(t.data<std::uint16_t>(), n, float_to_half_bits(value));
      break;
    case DType::kBF16:
      std::fill_n(t.data<std::uint16_t>(), n, float_to_bf16_bits(value));
      break;
  }
}

void accumulate(const Tensor& src, const Tensor& dst) {
  if (src.defined() && dst.defined() && src.dtype() == DType::kI32 && dst.dtype() == DType::kI32) {
    check_i32(dst, "accumulate", "dst", src.numel());
    const std::int32_t* s = src.data<std::int32_t>();
    std::int32_t* d = dst.data<std::int32_t>();
    for (std::int64_t i = 0, count = src.numel(); i < count; ++i) d[i] += s[i];
    return;
  }
  check_f32(src, "accumulate", "src", src.defined() ? src.numel() : 0);
  check_f32(dst, "accumulate", "dst", src.numel());
  const float* s = cf32(src);
  float* d = mf32(dst);
  for (std::int64_t i = 0, count = src.numel(); i < count; ++i) d[i] += s[i];
}

void check_finite(const Tensor& t, const Tensor& flag) {
  check_f32(t, "check_finite", "t", t.defined() ? t.numel() : 0);
  check_i32(flag, "check_finite", "flag", 1);
  const float* p = cf32(t);
  bool bad = false;
  for (std::int64_t i = 0, count = t.numel(); i < count && !bad; ++i) bad = !std::isfinite(p[i]);
  if (bad) flag.data<std::int32_t>()[0] |= 1;
}

void count_topk(const Tensor& logits, const Tensor& labels, int k, const Tensor& correct) {
  check_f32(logits, "count_topk", "logits", logits.defined() ? logits.numel() : 0);
  const Shape& s = logits.shape();
  if (s.rank() < 1) throw ShapeError("count_topk: logits must be (N, K), got " + s.str());
  const std::int64_t n = s.n(), classes = s.per_sample();
  check_i32(labels, "count_topk", "labels", n);
  check_i32(correct, "count_topk", "correct", 1);
  if (k < 1) throw InvalidArgument("count_topk: k must be >= 1 (got " + std::to_string(k) + ")");
  const float* z = cf32(logits);
  const std::int32_t* lab = labels.data<std::int32_t>();
  std::int32_t hits = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (lab[i] < 0 || lab[i] >= classes)
      throw InvalidArgument("count_topk: label " + std::to_string(lab[i]) + " of sample " +
                            std::to_string(i) + " is outside [0, " + std::to_string(classes) + ")");
    const float target = z[i * classes + lab[i]];
    if (std::isnan(target)) continue;  // a NaN score never counts as a hit
    // Ties count in the label's favour: a hit when fewer than k logits are strictly greater.
    std::int64_t greater = 0;
    for (std::int64_t j = 0; j < classes; ++j) greater += z[i * classes + j] > target ? 1 : 0;
    if (greater < k) ++hits;
  }
  correct.data<std::int32_t>()[0] += hits;
}

}  // namespace cnnergy::cpu
