// CPU reference of the operators that imported networks add (MobileNet, EfficientNet, RegNet,
// ShuffleNet): activations (activation_math.hpp), the element-wise / squeeze-and-excitation multiply,
// a per-channel constant affine map, channel shuffle and channel slicing. Contracts in backend/ops.hpp.
#include <string>

#include "backend/activation_math.hpp"
#include "backend/cpu/cpu_kernels.hpp"
#include "core/errors.hpp"

namespace cnnergy::cpu {

namespace {

inline void store(float& out, float v, bool accumulate) { out = accumulate ? out + v : v; }

// Rows (samples) and the elements per channel of a 4-D (N, C, H, W) or 2-D (N, F) tensor.
struct Geometry {
  std::int64_t n = 1, c = 1, hw = 1;
};
Geometry geometry_of(const Tensor& t, std::string_view op) {
  const Shape& s = t.shape();
  if (s.rank() == 4) return {s.n(), s.c(), s.h() * s.w()};
  if (s.rank() == 2) return {s[0], s[1], 1};
  throw ShapeError(std::string(op) + ": needs a 4-D or 2-D tensor, got " + s.str());
}

// Whether b is a (N, C, 1, 1) / (N, C) broadcast operand of a (else it must equal a's shape).
bool broadcast_operand(const Tensor& a, const Tensor& b, std::string_view op) {
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  if (as == bs) return false;
  if (as.rank() == 4 && ((bs.rank() == 4 && bs.n() == as.n() && bs.c() == as.c() && bs.h() == 1 && bs.w() == 1) ||
                         (bs.rank() == 2 && bs[0] == as.n() && bs[1] == as.c())))
    return true;
  throw ShapeError(std::string(op) + ": b " + bs.str() + " is neither a's shape " + as.str() + " nor (N, C, 1, 1)");
}

}  // namespace

void activation_forward(const ActivationDesc& d, const Tensor& x, const Tensor& y) {
  check_f32(x, "activation", "x", x.defined() ? x.numel() : 0);
  check_f32(y, "activation", "y", x.numel());
  const float* xp = cf32(x);
  float* yp = mf32(y);  // may be xp
  for (std::int64_t i = 0, count = x.numel(); i < count; ++i) yp[i] = activation::forward(d.kind, d.alpha, d.beta, xp[i]);
}

void activation_backward(const ActivationDesc& d, const Tensor& x, const Tensor& dy, const Tensor& dx,
                         bool accumulate) {
  check_f32(x, "activation backward", "x", x.defined() ? x.numel() : 0);
  check_f32(dy, "activation backward", "dy", x.numel());
  check_f32(dx, "activation backward", "dx", x.numel());
  const float* xp = cf32(x);
  const float* dyp = cf32(dy);
  float* dxp = mf32(dx);  // may be dyp
  for (std::int64_t i = 0, count = x.numel(); i < count; ++i)
    store(dxp[i], dyp[i] * activation::derivative(d.kind, d.alpha, d.beta, xp[i]), accumulate);
}

void mul_forward(const Tensor& a, const Tensor& b, const Tensor& y) {
  check_f32(a, "mul", "a", a.defined() ? a.numel() : 0);
  check_f32(y, "mul", "y", a.numel());
  const bool bc = broadcast_operand(a, b, "mul");
  const Geometry g = geometry_of(a, "mul");
  check_f32(b, "mul", "b", bc ? g.n * g.c : a.numel());
  const float* ap = cf32(a);
  const float* bp = cf32(b);
  float* yp = mf32(y);
  if (!bc) {
    for (std::int64_t i = 0, count = a.numel(); i < count; ++i) yp[i] = ap[i] * bp[i];
    return;
  }
  for (std::int64_t nc = 0; nc < g.n * g.c; ++nc)
    for (std::int64_t i = 0; i < g.hw; ++i) yp[nc * g.hw + i] = ap[nc * g.hw + i] * bp[nc];
}

void mul_backward(const Tensor& a, const Tensor& b, const Tensor& dy, const Tensor& da, bool accumulate_a,
                  const Tensor& db, bool accumulate_b) {
  check_f32(a, "mul backward", "a", a.defined() ? a.numel() : 0);
  check_f32(dy, "mul backward", "dy", a.numel());
  const bool bc = broadcast_operand(a, b, "mul backward");
  const Geometry g = geometry_of(a, "mul backward");
  check_f32(b, "mul backward", "b", bc ? g.n * g.c : a.numel());
  const float* ap = cf32(a);
  const float* bp = cf32(b);
  const float* dyp = cf32(dy);
  // db first: da may share dy's memory.
  if (db.defined()) {
    check_f32(db, "mul backward", "db", b.numel());
    float* dbp = mf32(db);
    if (!bc) {
      for (std::int64_t i = 0, count = a.numel(); i < count; ++i) store(dbp[i], dyp[i] * ap[i], accumulate_b);
    } else {
      for (std::int64_t nc = 0; nc < g.n * g.c; ++nc) {
        double s = 0.0;
        for (std::int64_t i = 0; i < g.hw; ++i) s += static_cast<double>(dyp[nc * g.hw + i]) * ap[nc * g.hw + i];
        store(dbp[nc], static_cast<float>(s), accumulate_b);
      }
    }
  }
  if (da.defined()) {
    check_f32(da, "mul backward", "da", a.numel());
    float* dap = mf32(da);
    for (std::int64_t i = 0, count = a.numel(); i < count; ++i) store(dap[i], dyp[i] * bp[bc ? i / g.hw : i], accumulate_a);
  }
}

namespace {
// The per-channel constants: C values, or 1 broadcast to every channel.
const float* affine_constant(const Tensor& t, std::int64_t c, std::string_view name, std::int64_t& stride) {
  const std::int64_t n = t.defined() ? t.numel() : 0;
  if (n != c && n != 1)
    throw ShapeError(std::string("channel_affine: ") + std::string(name) + " needs 1 or " + std::to_string(c) +
                     " values, got " + std::to_string(n));
  check_f32(t, "channel_affine", name, n);
  stride = n == 1 ? 0 : 1;
  return cf32(t);
}
}  // namespace

void channel_affine_forward(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& y) {
  check_f32(x, "channel_affine", "x", x.defined() ? x.numel() : 0);
  check_f32(y, "channel_affine", "y", x.numel());
  const Geometry g = geometry_of(x, "channel_affine");
  std::int64_t ss = 0, bs = 0;
  const float* sp = affine_constant(scale, g.c, "scale", ss);
  const float* bp = affine_constant(shift, g.c, "shift", bs);
  const float* xp = cf32(x);
  float* yp = mf32(y);
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t c = 0; c < g.c; ++c)
      for (std::int64_t i = 0; i < g.hw; ++i) {
        const std::int64_t j = (n * g.c + c) * g.hw + i;
        yp[j] = xp[j] * sp[c * ss] + bp[c * bs];
      }
}

void channel_affine_backward(const Tensor& dy, const Tensor& scale, const Tensor& dx, bool accumulate) {
  check_f32(dy, "channel_affine backward", "dy", dy.defined() ? dy.numel() : 0);
  check_f32(dx, "channel_affine backward", "dx", dy.numel());
  const Geometry g = geometry_of(dy, "channel_affine backward");
  std::int64_t ss = 0;
  const float* sp = affine_constant(scale, g.c, "scale", ss);
  const float* dyp = cf32(dy);
  float* dxp = mf32(dx);
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t c = 0; c < g.c; ++c)
      for (std::int64_t i = 0; i < g.hw; ++i) {
        const std::int64_t j = (n * g.c + c) * g.hw + i;
        store(dxp[j], dyp[j] * sp[c * ss], accumulate);
      }
}

void channel_shuffle(const Tensor& x, std::int64_t groups, const Tensor& y, bool accumulate) {
  check_f32(x, "channel_shuffle", "x", x.defined() ? x.numel() : 0);
  check_f32_shape(y, "channel_shuffle", "y", x.shape());
  const Geometry g = geometry_of(x, "channel_shuffle");
  if (groups < 1 || g.c % groups != 0)
    throw InvalidArgument("channel_shuffle: " + std::to_string(g.c) + " channels do not split into " +
                          std::to_string(groups) + " groups");
  const std::int64_t per_group = g.c / groups;
  const float* xp = cf32(x);
  float* yp = mf32(y);
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t o = 0; o < g.c; ++o) {
      const std::int64_t src = (o % groups) * per_group + o / groups;
      for (std::int64_t i = 0; i < g.hw; ++i)
        store(yp[(n * g.c + o) * g.hw + i], xp[(n * g.c + src) * g.hw + i], accumulate);
    }
}

namespace {
// Checks that `part` is whole[:, begin : begin + C_part]; returns the geometry of `whole`.
Geometry check_slice(const Tensor& whole, const Tensor& part, std::int64_t begin, std::string_view op) {
  check_f32(whole, op, "whole", whole.defined() ? whole.numel() : 0);
  check_f32(part, op, "part", part.defined() ? part.numel() : 0);
  const Geometry g = geometry_of(whole, op);
  const Geometry p = geometry_of(part, op);
  if (part.shape().rank() != whole.shape().rank() || p.n != g.n || p.hw != g.hw ||
      (whole.shape().rank() == 4 && (part.shape().h() != whole.shape().h())) || begin < 0 || begin + p.c > g.c)
    throw ShapeError(std::string(op) + ": " + part.shape().str() + " is not channels [" + std::to_string(begin) +
                     ", ...) of " + whole.shape().str());
  return g;
}
}  // namespace

void channel_slice_forward(const Tensor& x, std::int64_t begin, const Tensor& y) {
  const Geometry g = check_slice(x, y, begin, "channel_slice");
  const std::int64_t cy = y.shape()[1], len = cy * g.hw;
  const float* xp = cf32(x);
  float* yp = mf32(y);
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t i = 0; i < len; ++i) yp[n * len + i] = xp[(n * g.c + begin) * g.hw + i];
}

void channel_slice_backward(const Tensor& dy, std::int64_t begin, const Tensor& dx, bool accumulate) {
  const Geometry g = check_slice(dx, dy, begin, "channel_slice backward");
  const std::int64_t cy = dy.shape()[1], len = cy * g.hw;
  const float* dyp = cf32(dy);
  float* dxp = mf32(dx);
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t c = 0; c < g.c; ++c) {
      float* row = dxp + (n * g.c + c) * g.hw;
      const bool inside = c >= begin && c < begin + cy;
      if (!inside) {
        if (!accumulate)
          for (std::int64_t i = 0; i < g.hw; ++i) row[i] = 0.0f;
        continue;
      }
      const float* src = dyp + n * len + (c - begin) * g.hw;
      for (std::int64_t i = 0; i < g.hw; ++i) store(row[i], src[i], accumulate);
    }
}

}  // namespace cnnergy::cpu
