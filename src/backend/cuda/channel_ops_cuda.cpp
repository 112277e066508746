// Host side of the CUDA backend's operators for imported networks (activations, multiply, constant
// channel affine, channel shuffle and slice): argument checks naming the operation, then the
// launchers of channel_ops.cu (slices are strided block copies, kernels::copy_2d).
#include <string>

#include "backend/cuda/channel_kernels.hpp"
#include "backend/cuda/cuda_ops.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda {

namespace {

void check_like(const CudaContext& ctx, const Tensor& ref, const Tensor& t, const char* op, const char* name) {
  check_device_tensor(t, ctx, op, name);
  if (t.numel() != ref.numel() || t.dtype() != ref.dtype())
    throw ShapeError(std::string(op) + ": " + name + " " + t.describe() + " differs in size or dtype from " +
                     ref.describe());
  if (t.shape().rank() == 4 && ref.shape().rank() == 4 && t.layout() != ref.layout() &&
      ref.shape().per_sample() != ref.shape()[1])
    throw InvalidArgument(std::string(op) + ": " + name + " differs in layout from " + ref.describe());
}

kernels::Dims checked_dims(const Tensor& t, const char* op) {
  const int r = static_cast<int>(t.shape().rank());
  if (r != 4 && r != 2) throw ShapeError(std::string(op) + ": needs a 4-D or 2-D tensor, got " + t.describe());
  return dims_of(t);
}

// Whether b is the (N, C, 1, 1) / (N, C) operand of a (false: the same shape).
bool broadcast_operand(const Tensor& a, const Tensor& b, const char* op) {
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  if (as == bs) return false;
  if (as.rank() == 4 && ((bs.rank() == 4 && bs.n() == as.n() && bs.c() == as.c() && bs.h() == 1 && bs.w() == 1) ||
                         (bs.rank() == 2 && bs[0] == as.n() && bs[1] == as.c())))
    return true;
  throw ShapeError(std::string(op) + ": b " + bs.str() + " is neither a's shape " + as.str() + " nor (N, C, 1, 1)");
}

void check_broadcast(const CudaContext& ctx, const Tensor& a, const Tensor& b, const char* op) {
  check_device_tensor(b, ctx, op, "b");
  if (b.dtype() != a.dtype()) throw InvalidArgument(std::string(op) + ": a and b differ in dtype");
}

const float* affine_constant(const CudaContext& ctx, const Tensor& t, std::int64_t c, const char* name,
                             std::int64_t& stride) {
  check_device_tensor(t, ctx, "channel_affine", name);
  if (t.dtype() != DType::kF32 || (t.numel() != c && t.numel() != 1))
    throw ShapeError(std::string("channel_affine: ") + name + " must be fp32 with 1 or " + std::to_string(c) +
                     " values, got " + t.describe());
  stride = t.numel() == 1 ? 0 : 1;
  return static_cast<const float*>(t.raw());
}

}  // namespace

void cuda_activation_forward(CudaContext& ctx, const ActivationDesc& d, const Tensor& x, const Tensor& y) {
  ctx.activate();
  check_device_tensor(x, ctx, "activation_forward", "x");
  check_like(ctx, x, y, "activation_forward", "y");
  kernels::activation_forward(x.raw(), y.raw(), x.dtype(), x.numel(), d, false, ctx.stream());
}

void cuda_activation_backward(CudaContext& ctx, const ActivationDesc& d, const Tensor& x, const Tensor& dy,
                              const Tensor& dx, bool accumulate) {
  ctx.activate();
  check_device_tensor(x, ctx, "activation_backward", "x");
  check_like(ctx, x, dy, "activation_backward", "dy");
  check_like(ctx, x, dx, "activation_backward", "dx");
  kernels::activation_backward(x.raw(), dy.raw(), dx.raw(), x.dtype(), x.numel(), d, accumulate, ctx.stream());
}

void cuda_mul_forward(CudaContext& ctx, const Tensor& a, const Tensor& b, const Tensor& y) {
  ctx.activate();
  check_device_tensor(a, ctx, "mul_forward", "a");
  check_like(ctx, a, y, "mul_forward", "y");
  check_broadcast(ctx, a, b, "mul_forward");
  if (!broadcast_operand(a, b, "mul_forward")) {
    check_like(ctx, a, b, "mul_forward", "b");
    kernels::multiply(a.raw(), b.raw(), y.raw(), a.dtype(), a.numel(), false, ctx.stream());
    return;
  }
  kernels::multiply_broadcast(a.raw(), b.raw(), y.raw(), a.dtype(), dims_of(a), false, ctx.stream());
}

void cuda_mul_backward(CudaContext& ctx, const Tensor& a, const Tensor& b, const Tensor& dy, const Tensor& da,
                       bool accumulate_a, const Tensor& db, bool accumulate_b) {
  ctx.activate();
  const char* op = "mul_backward";
  check_device_tensor(a, ctx, op, "a");
  check_like(ctx, a, dy, op, "dy");
  check_broadcast(ctx, a, b, op);
  const bool bc = broadcast_operand(a, b, op);
  if (!bc) check_like(ctx, a, b, op, "b");
  // db first: da may share dy's memory.
  if (db.defined()) {
    check_like(ctx, b, db, op, "db");
    if (bc)
      kernels::multiply_reduce_hw(dy.raw(), a.raw(), db.raw(), a.dtype(), dims_of(a), accumulate_b, ctx.stream());
    else
      kernels::multiply(dy.raw(), a.raw(), db.raw(), a.dtype(), a.numel(), accumulate_b, ctx.stream());
  }
  if (da.defined()) {
    check_like(ctx, a, da, op, "da");
    if (bc)
      kernels::multiply_broadcast(dy.raw(), b.raw(), da.raw(), a.dtype(), dims_of(a), accumulate_a, ctx.stream());
    else
      kernels::multiply(dy.raw(), b.raw(), da.raw(), a.dtype(), a.numel(), accumulate_a, ctx.stream());
  }
}

void cuda_channel_affine(CudaContext& ctx, const Tensor& x, const Tensor& scale, const Tensor& shift,
                         const Tensor& y, bool accumulate) {
  ctx.activate();
  const char* op = shift.defined() ? "channel_affine_forward" : "channel_affine_backward";
  check_device_tensor(x, ctx, op, "x");
  check_like(ctx, x, y, op, "y");
  const kernels::Dims d = checked_dims(x, op);
  std::int64_t ss = 0, bs = 0;
  const float* sp = affine_constant(ctx, scale, d.c, "scale", ss);
  const float* bp = shift.defined() ? affine_constant(ctx, shift, d.c, "shift", bs) : nullptr;
  kernels::channel_affine(x.raw(), sp, ss, bp, bs, y.raw(), x.dtype(), d, accumulate, ctx.stream());
}

void cuda_channel_shuffle(CudaContext& ctx, const Tensor& x, std::int64_t groups, const Tensor& y,
                          bool accumulate) {
  ctx.activate();
  check_device_tensor(x, ctx, "channel_shuffle", "x");
  check_like(ctx, x, y, "channel_shuffle", "y");
  if (x.shape() != y.shape()) throw ShapeError("channel_shuffle: x " + x.describe() + " and y " + y.describe());
  const kernels::Dims d = checked_dims(x, "channel_shuffle");
  if (groups < 1 || d.c % groups != 0)
    throw InvalidArgument("channel_shuffle: " + std::to_string(d.c) + " channels do not split into " +
                          std::to_string(groups) + " groups");
  if (x.buffer() == y.buffer() && x.offset_bytes() == y.offset_bytes())
    throw InvalidArgument("channel_shuffle: y must not alias x");
  kernels::channel_shuffle(x.raw(), y.raw(), x.dtype(), d, groups, accumulate, ctx.stream());
}

// part = whole[:, begin : begin + C_part] (forward) or its adjoint. NCHW rows are samples, NHWC
// rows pixels, 2-D rows samples, as in concatenation.
void cuda_channel_slice(CudaContext& ctx, const Tensor& whole, const Tensor& part, std::int64_t begin, bool forward,
                        bool accumulate) {
  ctx.activate();
  const char* op = forward ? "channel_slice_forward" : "channel_slice_backward";
  check_device_tensor(whole, ctx, op, forward ? "x" : "dx");
  check_device_tensor(part, ctx, op, forward ? "y" : "dy");
  const Shape& ws = whole.shape();
  const Shape& ps = part.shape();
  checked_dims(whole, op);
  if (ps.rank() != ws.rank() || ps.n() != ws.n() || (ws.rank() == 4 && (ps.h() != ws.h() || ps.w() != ws.w())) ||
      begin < 0 || begin + ps[1] > ws[1] || part.dtype() != whole.dtype() ||
      (ws.rank() == 4 && part.layout() != whole.layout()))
    throw ShapeError(std::string(op) + ": " + part.describe() + " is not channels [" + std::to_string(begin) +
                     ", ...) of " + whole.describe());
  const bool nhwc = ws.rank() == 4 && whole.layout() == Layout::kNHWC;
  const std::int64_t spatial = ws.rank() == 4 ? ws.h() * ws.w() : 1;
  const std::int64_t rows = nhwc ? ws.n() * spatial : ws.n();
  const std::int64_t whole_ld = nhwc ? ws[1] : ws[1] * spatial;
  const std::int64_t cols = nhwc ? ps[1] : ps[1] * spatial;
  const std::int64_t offset = nhwc ? begin : begin * spatial;
  char* at = static_cast<char*>(whole.raw()) + static_cast<std::size_t>(offset) * dtype_size_bytes(whole.dtype());
  if (forward) {
    kernels::copy_2d(at, whole_ld, part.raw(), cols, rows, cols, whole.dtype(), false, ctx.stream());
    return;
  }
  if (!accumulate) kernels::fill(whole.raw(), whole.dtype(), whole.numel(), 0.0f, ctx.stream());
  kernels::copy_2d(part.raw(), cols, at, whole_ld, rows, cols, whole.dtype(), accumulate,
                   ctx.stream());
}

}  // namespace cnnergy::cuda
