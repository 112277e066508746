// The CUDA backend's own element-wise kernels: conversions and copies, fill, add, ReLU, dropout,
// padding, bias, the SGD step, finiteness checks, top-k counting and softmax cross-entropy.
// One kernel per operation serves every dtype (runtime-dispatched loads/stores keep compile time
// low).
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"
#include "core/hash.hpp"

namespace cnnergy::cuda::kernels {

namespace {

__global__ void convert_kernel(const void* src, DType sdt, bool src_nhwc, void* dst, DType ddt,
                               Dims d, bool accumulate, std::int64_t count) {
  Dims sd = d;
  sd.nhwc = src_nhwc;
  CNNERGY_GRID_STRIDE(j, count) {
    std::int64_t s = j;
    if (src_nhwc != d.nhwc) {
      const Coord k = coord_of(d, j);
      s = offset_of(sd, k.n, k.c, k.h, k.w);
    }
    if (sdt == DType::kI32 && ddt == DType::kI32) {  // exact: no round trip through float
      const std::int32_t v = static_cast<const std::int32_t*>(src)[s];
      std::int32_t* out = static_cast<std::int32_t*>(dst);
      out[j] = accumulate ? out[j] + v : v;
      continue;
    }
    float v = load(src, sdt, s);
    if (accumulate) v += load(dst, ddt, j);
    store(dst, ddt, j, v);
  }
}

__global__ void fill_kernel(void* dst, DType dt, std::int64_t count, float value) {
  CNNERGY_GRID_STRIDE(i, count) store(dst, dt, i, value);
}

__global__ void add_kernel(const void* a, const void* b, void* y, DType dt, std::int64_t count) {
  CNNERGY_GRID_STRIDE(i, count) store(y, dt, i, load(a, dt, i) + load(b, dt, i));
}

__global__ void relu_forward_kernel(const void* x, void* y, DType dt, std::int64_t count) {
  CNNERGY_GRID_STRIDE(i, count) {
    const float v = load(x, dt, i);
    store(y, dt, i, v > 0.0f ? v : 0.0f);
  }
}

__global__ void relu_backward_kernel(const void* y, const void* dy, void* dx, DType dt,
                                     std::int64_t count, bool accumulate) {
  CNNERGY_GRID_STRIDE(i, count) {
    float g = load(y, dt, i) > 0.0f ? load(dy, dt, i) : 0.0f;
    if (accumulate) g += load(dx, dt, i);
    store(dx, dt, i, g);
  }
}

__global__ void dropout_forward_kernel(const void* x, void* mask, void* y, DType dt, Dims d,
                                       float p, float scale, std::uint64_t seed,
                                       std::int64_t count) {
  CNNERGY_GRID_STRIDE(j, count) {
    std::int64_t logical = j;
    if (d.nhwc) {
      const Coord k = coord_of(d, j);
      logical = ((k.n * d.c + k.c) * d.h + k.h) * d.w + k.w;
    }
    const float m = uniform01(seed, static_cast<std::uint64_t>(logical)) >= p ? scale : 0.0f;
    store(mask, dt, j, m);
    store(y, dt, j, load(x, dt, j) * m);
  }
}

__global__ void mul_kernel(const void* a, const void* b, void* y, DType dt, std::int64_t count,
                           bool accumulate) {
  CNNERGY_GRID_STRIDE(i, count) {
    float v = load(a, dt, i) * load(b, dt, i);
    if (accumulate) v += load(y, dt, i);
    store(y, dt, i, v);
  }
}

__global__ void copy_2d_kernel(const void* src, std::int64_t src_ld, void* dst, std::int64_t dst_ld,
                               std::int64_t cols, DType dt, bool accumulate, std::int64_t count) {
  CNNERGY_GRID_STRIDE(i, count) {
    const std::int64_t r = i / cols, c = i % cols;
    float v = load(src, dt, r * src_ld + c);
    if (accumulate) v += load(dst, dt, r * dst_ld + c);
    store(dst, dt, r * dst_ld + c, v);
  }
}

__global__ void pad_2d_kernel(const void* x, Dims xd, void* xp, Dims pd, std::int64_t pad_top,
                              std::int64_t pad_left, DType dt, std::int64_t count) {
  CNNERGY_GRID_STRIDE(j, count) {
    const Coord k = coord_of(pd, j);
    const std::int64_t h = k.h - pad_top, w = k.w - pad_left;
    const bool inside = h >= 0 && h < xd.h && w >= 0 && w < xd.w;
    store(xp, dt, j, inside ? load(x, dt, offset_of(xd, k.n, k.c, h, w)) : 0.0f);
  }
}

__global__ void crop_2d_kernel(const void* xp, Dims pd, void* x, Dims xd, std::int64_t pad_top,
                               std::int64_t pad_left, DType dt, bool accumulate,
                               std::int64_t count) {
  CNNERGY_GRID_STRIDE(j, count) {
    const Coord k = coord_of(xd, j);
    float v = load(xp, dt, offset_of(pd, k.n, k.c, k.h + pad_top, k.w + pad_left));
    if (accumulate) v += load(x, dt, j);
    store(x, dt, j, v);
  }
}

__global__ void bias_add_kernel(void* y, const void* b, DType dt, ChannelView v,
                                std::int64_t count) {
  CNNERGY_GRID_STRIDE(j, count) store(y, dt, j, load(y, dt, j) + load(b, dt, channel_of(v, j)));
}

// PyTorch's momentum SGD (the CPU reference's formula): g = grad * inv_scale + wd * w;
// v = momentum * v + g; w -= lr * v.
__global__ void sgd_kernel(float* master, const void* grad, DType gdt, float* momentum,
                           void* working, DType wdt, std::int64_t count, SgdParams p,
                           const std::int32_t* skip) {
  if (skip != nullptr && *skip != 0) return;
  CNNERGY_GRID_STRIDE(i, count) {
    const float w = master[i];
    const float g = load(grad, gdt, i) * p.inv_grad_scale + p.weight_decay * w;
    float v = g;
    if (momentum != nullptr) {
      v = p.momentum * momentum[i] + g;
      momentum[i] = v;
    }
    const float updated = w - p.learning_rate * v;
    master[i] = updated;
    if (working != nullptr) store(working, wdt, i, updated);
  }
}

__global__ void check_finite_kernel(const void* t, DType dt, std::int64_t count,
                                    std::int32_t* flag) {
  CNNERGY_GRID_STRIDE(i, count) {
    if (!isfinite(load(t, dt, i))) *flag = 1;  // every writer writes 1: the race is benign
  }
}

__global__ void count_topk_kernel(const void* logits, DType dt, const std::int32_t* labels,
                                  std::int64_t rows, std::int64_t classes, int k,
                                  std::int32_t* correct) {
  CNNERGY_GRID_STRIDE(r, rows) {
    const std::int32_t label = labels[r];
    if (label < 0 || label >= classes) continue;
    const float target = load(logits, dt, r * classes + label);
    if (isnan(target)) continue;
    std::int64_t above = 0;
    for (std::int64_t j = 0; j < classes && above < k; ++j)
      if (load(logits, dt, r * classes + j) > target) ++above;
    if (above < k) atomicAdd(correct, 1);
  }
}

// One block per row: stable softmax (max subtracted) and loss = logsumexp - z_label.
__global__ void softmax_xent_rows_kernel(const void* logits, DType dt, const std::int32_t* labels,
                                         float* probs, float* row_loss, std::int64_t classes) {
  const std::int64_t row = blockIdx.x;
  const std::int64_t base = row * classes;
  float zmax = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < classes; j += blockDim.x)
    zmax = fmaxf(zmax, load(logits, dt, base + j));
  zmax = block_max(zmax);
  float sum = 0.0f;
  for (std::int64_t j = threadIdx.x; j < classes; j += blockDim.x)
    sum += expf(load(logits, dt, base + j) - zmax);
  sum = block_sum(sum);
  const float log_sum = logf(sum);
  for (std::int64_t j = threadIdx.x; j < classes; j += blockDim.x)
    probs[base + j] = expf(load(logits, dt, base + j) - zmax - log_sum);
  if (threadIdx.x == 0) {
    const std::int32_t label = labels[row];
    row_loss[row] =
        (label >= 0 && label < classes) ? zmax + log_sum - load(logits, dt, base + label) : NAN;
  }
}

// One block: loss = mean of row losses, summed in a fixed order (deterministic).
__global__ void mean_kernel(const float* values, std::int64_t count, float* out) {
  double sum = 0.0;
  for (std::int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += values[i];
  sum = block_sum(sum);
  if (threadIdx.x == 0) *out = static_cast<float>(sum / static_cast<double>(count));
}

__global__ void softmax_xent_backward_kernel(const float* probs, const std::int32_t* labels,
                                             float scale, void* dlogits, DType dt,
                                             std::int64_t classes, std::int64_t count) {
  CNNERGY_GRID_STRIDE(i, count) {
    const std::int64_t r = i / classes, j = i % classes;
    const float onehot = labels[r] == j ? 1.0f : 0.0f;
    store(dlogits, dt, i, scale * (probs[i] - onehot));
  }
}

}  // namespace

void convert(const void* src, DType src_dtype, bool src_nhwc, void* dst, DType dst_dtype,
             const Dims& dst_dims, bool accumulate, cudaStream_t stream) {
  const std::int64_t count = dst_dims.numel();
  if (count == 0) return;
  convert_kernel<<<grid_for(count), kBlock, 0, stream>>>(src, src_dtype, src_nhwc, dst, dst_dtype,
                                                         dst_dims, accumulate, count);
  CNNERGY_CUDA_LAUNCH_CHECK("convert");
}

void fill(void* dst, DType dtype, std::int64_t count, float value, cudaStream_t stream) {
  if (count == 0) return;
  fill_kernel<<<grid_for(count), kBlock, 0, stream>>>(dst, dtype, count, value);
  CNNERGY_CUDA_LAUNCH_CHECK("fill");
}

void add(const void* a, const void* b, void* y, DType dtype, std::int64_t count,
         cudaStream_t stream) {
  if (count == 0) return;
  add_kernel<<<grid_for(count), kBlock, 0, stream>>>(a, b, y, dtype, count);
  CNNERGY_CUDA_LAUNCH_CHECK("add");
}

void relu_forward(const void* x, void* y, DType dtype, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  relu_forward_kernel<<<grid_for(count), kBlock, 0, stream>>>(x, y, dtype, count);
  CNNERGY_CUDA_LAUNCH_CHECK("relu_forward");
}

void relu_backward(const void* y, const void* dy, void* dx, DType dtype, std::int64_t count,
                   bool accumulate, cudaStream_t stream) {
  if (count == 0) return;
  relu_backward_kernel<<<grid_for(count), kBlock, 0, stream>>>(y, dy, dx, dtype, count, accumulate);
  CNNERGY_CUDA_LAUNCH_CHECK("relu_backward");
}

void dropout_forward(const void* x, void* mask, void* y, DType dtype, const Dims& dims, float p,
                     std::uint64_t seed, cudaStream_t stream) {
  const std::int64_t count = dims.numel();
  if (count == 0) return;
  const float scale = 1.0f / (1.0f - p);
  dropout_forward_kernel<<<grid_for(count), kBlock, 0, stream>>>(x, mask, y, dtype, dims, p, scale,
                                                                 seed, count);
  CNNERGY_CUDA_LAUNCH_CHECK("dropout_forward");
}

void dropout_backward(const void* dy, const void* mask, void* dx, DType dtype, std::int64_t count,
                      bool accumulate, cudaStream_t stream) {
  if (count == 0) return;
  mul_kernel<<<grid_for(count), kBlock, 0, stream>>>(dy, mask, dx, dtype, count, accumulate);
  CNNERGY_CUDA_LAUNCH_CHECK("dropout_backward");
}

void copy_2d(const void* src, std::int64_t src_ld, void* dst, std::int64_t dst_ld,
             std::int64_t rows, std::int64_t cols, DType dtype, bool accumulate,
             cudaStream_t stream) {
  const std::int64_t count = rows * cols;
  if (count == 0) return;
  copy_2d_kernel<<<grid_for(count), kBlock, 0, stream>>>(src, src_ld, dst, dst_ld, cols, dtype,
                                                         accumulate, count);
  CNNERGY_CUDA_LAUNCH_CHECK("copy_2d");
}

void pad_2d(const void* x, const Dims& x_dims, void* xp, const Dims& xp_dims, std::int64_t pad_top,
            std::int64_t pad_left, DType dtype, cudaStream_t stream) {
  const std::int64_t count = xp_dims.numel();
  if (count == 0) return;
  pad_2d_kernel<<<grid_for(count), kBlock, 0, stream>>>(x, x_dims, xp, xp_dims, pad_top, pad_left,
                                                        dtype, count);
  CNNERGY_CUDA_LAUNCH_CHECK("pad_2d");
}

void crop_2d(const void* xp, const Dims& xp_dims, void* x, const Dims& x_dims, std::int64_t pad_top,
             std::int64_t pad_left, DType dtype, bool accumulate, cudaStream_t stream) {
  const std::int64_t count = x_dims.numel();
  if (count == 0) return;
  crop_2d_kernel<<<grid_for(count), kBlock, 0, stream>>>(xp, xp_dims, x, x_dims, pad_top, pad_left,
                                                         dtype, accumulate, count);
  CNNERGY_CUDA_LAUNCH_CHECK("crop_2d");
}

void bias_add(void* y, const void* b, DType dtype, const ChannelView& view, cudaStream_t stream) {
  const std::int64_t count = view.outer * view.channels * view.inner;
  if (count == 0) return;
  bias_add_kernel<<<grid_for(count), kBlock, 0, stream>>>(y, b, dtype, view, count);
  CNNERGY_CUDA_LAUNCH_CHECK("bias_add");
}

void sgd_update(float* master, const void* grad, DType grad_dtype, float* momentum, void* working,
                DType working_dtype, std::int64_t count, const SgdParams& params,
                const std::int32_t* skip, cudaStream_t stream) {
  if (count == 0) return;
  sgd_kernel<<<grid_for(count), kBlock, 0, stream>>>(master, grad, grad_dtype, momentum, working,
                                                     working_dtype, count, params, skip);
  CNNERGY_CUDA_LAUNCH_CHECK("sgd_update");
}

void check_finite(const void* t, DType dtype, std::int64_t count, std::int32_t* flag,
                  cudaStream_t stream) {
  if (count == 0 || dtype == DType::kI32) return;  // integers are always finite
  check_finite_kernel<<<grid_for(count), kBlock, 0, stream>>>(t, dtype, count, flag);
  CNNERGY_CUDA_LAUNCH_CHECK("check_finite");
}

void count_topk(const void* logits, DType dtype, const std::int32_t* labels, std::int64_t rows,
                std::int64_t classes, int k, std::int32_t* correct, cudaStream_t stream) {
  if (rows == 0) return;
  count_topk_kernel<<<grid_for(rows), kBlock, 0, stream>>>(logits, dtype, labels, rows, classes, k,
                                                           correct);
  CNNERGY_CUDA_LAUNCH_CHECK("count_topk");
}

void softmax_xent_forward(const void* logits, DType dtype, const std::int32_t* labels, float* probs,
                          float* row_loss, float* loss, std::int64_t rows, std::int64_t classes,
                          cudaStream_t stream) {
  if (rows == 0) return;
  // Rows are one block each; grids take up to 2^31-1 blocks in x.
  const int threads = classes >= 256 ? 256 : (classes >= 64 ? 64 : 32);
  softmax_xent_rows_kernel<<<static_cast<unsigned>(rows), threads, 0, stream>>>(
      logits, dtype, labels, probs, row_loss, classes);
  CNNERGY_CUDA_LAUNCH_CHECK("softmax_xent_rows");
  mean_kernel<<<1, 256, 0, stream>>>(row_loss, rows, loss);
  CNNERGY_CUDA_LAUNCH_CHECK("softmax_xent_mean");
}

void softmax_xent_backward(const float* probs, const std::int32_t* labels, float scale,
                           void* dlogits, DType dtype, std::int64_t rows, std::int64_t classes,
                           cudaStream_t stream) {
  const std::int64_t count = rows * classes;
  if (count == 0) return;
  softmax_xent_backward_kernel<<<grid_for(count), kBlock, 0, stream>>>(
      probs, labels, scale, dlogits, dtype, classes, count);
  CNNERGY_CUDA_LAUNCH_CHECK("softmax_xent_backward");
}

}  // namespace cnnergy::cuda::kernels
