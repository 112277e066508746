// CUDA kernels of the operators that imported networks add: activations (the formulas of
// backend/activation_math.hpp, shared with the CPU reference) over the packed n-ary map, the
// same-shape and squeeze-and-excitation (N, C, 1, 1) multiply with its reduction for the scale's
// gradient, a per-channel constant affine map and channel shuffle, in both layouts and every dtype.
#include <cstdint>

#include "backend/activation_math.hpp"
#include "backend/cuda/channel_kernels.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/map_kernel.cuh"

namespace cnnergy::cuda::kernels {

namespace {

template <bool kAccumulate>
struct ActivationOp {  // x = {x[, y]}
  ActivationDesc d;
  __device__ float operator()(const float* x) const {
    const float v = activation::forward(d.kind, d.alpha, d.beta, x[0]);
    if constexpr (kAccumulate) return v + x[1];
    return v;
  }
};
template <bool kAccumulate>
struct ActivationBackwardOp {  // x = {x, dy[, dx]}
  ActivationDesc d;
  __device__ float operator()(const float* x) const {
    const float g = x[1] * activation::derivative(d.kind, d.alpha, d.beta, x[0]);
    if constexpr (kAccumulate) return g + x[2];
    return g;
  }
};
template <bool kAccumulate>
struct ProductOp {  // x = {a, b[, y]}
  __device__ float operator()(const float* x) const {
    const float g = x[0] * x[1];
    if constexpr (kAccumulate) return g + x[2];
    return g;
  }
};

// Index of sample n, channel c of element j (the (N, C) broadcast operand's index n * C + c).
__device__ __forceinline__ std::int64_t sample_channel(const Dims& d, std::int64_t j) {
  const std::int64_t hw = d.h * d.w;
  if (!d.nhwc) return j / hw;
  return (j / (hw * d.c)) * d.c + j % d.c;
}

template <typename T>
__global__ void __launch_bounds__(kBlock)
    mul_broadcast_kernel(const T* a, const T* b, T* y, Dims d, bool accumulate, std::int64_t count) {
  CNNERGY_GRID_STRIDE(j, count) {
    float v = to_float(a[j]) * to_float(b[sample_channel(d, j)]);
    if (accumulate) v += to_float(y[j]);
    y[j] = from_float<T>(v);
  }
}

// One block per (n, c): db[n, c] = sum over H, W of dy * a, in fp32.
template <typename T>
__global__ void __launch_bounds__(kBlock)
    mul_broadcast_reduce_kernel(const T* dy, const T* a, T* db, Dims d, bool accumulate) {
  const std::int64_t nc = blockIdx.x, n = nc / d.c, c = nc % d.c, hw = d.h * d.w;
  float s = 0.0f;
  for (std::int64_t i = threadIdx.x; i < hw; i += blockDim.x) {
    const std::int64_t j = d.nhwc ? (n * hw + i) * d.c + c : nc * hw + i;
    s += to_float(dy[j]) * to_float(a[j]);
  }
  s = block_sum(s);
  if (threadIdx.x == 0) db[nc] = from_float<T>(accumulate ? s + to_float(db[nc]) : s);
}

template <typename T>
__global__ void __launch_bounds__(kBlock)
    channel_affine_kernel(const T* x, const float* scale, std::int64_t scale_stride, const float* shift,
                          std::int64_t shift_stride, T* y, Dims d, bool accumulate, std::int64_t count) {
  const std::int64_t hw = d.h * d.w;
  CNNERGY_GRID_STRIDE(j, count) {
    const std::int64_t c = d.nhwc ? j % d.c : (j / hw) % d.c;
    float v = to_float(x[j]) * scale[c * scale_stride];
    if (shift != nullptr) v += shift[c * shift_stride];
    if (accumulate) v += to_float(y[j]);
    y[j] = from_float<T>(v);
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlock)
    channel_shuffle_kernel(const T* x, T* y, Dims d, std::int64_t groups, bool accumulate, std::int64_t count) {
  const std::int64_t hw = d.h * d.w, per_group = d.c / groups, stride = d.nhwc ? 1 : hw;
  CNNERGY_GRID_STRIDE(j, count) {
    const std::int64_t o = d.nhwc ? j % d.c : (j / hw) % d.c;
    const std::int64_t src = (o % groups) * per_group + o / groups;
    float v = to_float(x[j + (src - o) * stride]);
    if (accumulate) v += to_float(y[j]);
    y[j] = from_float<T>(v);
  }
}

}  // namespace

void activation_forward(const void* x, void* y, DType dtype, std::int64_t count, const ActivationDesc& desc,
                        bool accumulate, cudaStream_t stream) {
  dispatch_float(dtype, "activation_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (accumulate) {
      const MapArgs<T, 2> args{{static_cast<const T*>(x), static_cast<const T*>(y)}, static_cast<T*>(y)};
      launch_map(args, ActivationOp<true>{desc}, count, stream, "activation_forward");
    } else {
      const MapArgs<T, 1> args{{static_cast<const T*>(x)}, static_cast<T*>(y)};
      launch_map(args, ActivationOp<false>{desc}, count, stream, "activation_forward");
    }
  });
}

void activation_backward(const void* x, const void* dy, void* dx, DType dtype, std::int64_t count,
                         const ActivationDesc& desc, bool accumulate, cudaStream_t stream) {
  dispatch_float(dtype, "activation_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xt = static_cast<const T*>(x);
    const T* dyt = static_cast<const T*>(dy);
    T* dxt = static_cast<T*>(dx);
    if (accumulate) {
      const MapArgs<T, 3> args{{xt, dyt, dxt}, dxt};
      launch_map(args, ActivationBackwardOp<true>{desc}, count, stream, "activation_backward");
    } else {
      const MapArgs<T, 2> args{{xt, dyt}, dxt};
      launch_map(args, ActivationBackwardOp<false>{desc}, count, stream, "activation_backward");
    }
  });
}

void multiply(const void* a, const void* b, void* y, DType dtype, std::int64_t count, bool accumulate,
              cudaStream_t stream) {
  dispatch_float(dtype, "multiply", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* at = static_cast<const T*>(a);
    const T* bt = static_cast<const T*>(b);
    T* yt = static_cast<T*>(y);
    if (accumulate) {
      const MapArgs<T, 3> args{{at, bt, yt}, yt};
      launch_map(args, ProductOp<true>{}, count, stream, "multiply");
    } else {
      const MapArgs<T, 2> args{{at, bt}, yt};
      launch_map(args, ProductOp<false>{}, count, stream, "multiply");
    }
  });
}

void multiply_broadcast(const void* a, const void* b, void* y, DType dtype, const Dims& dims, bool accumulate,
                        cudaStream_t stream) {
  const std::int64_t count = dims.numel();
  if (count == 0) return;
  dispatch_float(dtype, "multiply_broadcast", [&](auto tag) {
    using T = typename decltype(tag)::type;
    mul_broadcast_kernel<T><<<grid_for(count), kBlock, 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), dims, accumulate, count);
  });
  CNNERGY_CUDA_LAUNCH_CHECK("multiply_broadcast");
}

void multiply_reduce_hw(const void* dy, const void* a, void* db, DType dtype, const Dims& dims, bool accumulate,
                        cudaStream_t stream) {
  const std::int64_t rows = dims.n * dims.c;
  if (rows == 0) return;
  dispatch_float(dtype, "multiply_reduce_hw", [&](auto tag) {
    using T = typename decltype(tag)::type;
    mul_broadcast_reduce_kernel<T><<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(a), static_cast<T*>(db), dims, accumulate);
  });
  CNNERGY_CUDA_LAUNCH_CHECK("multiply_reduce_hw");
}

void channel_affine(const void* x, const float* scale, std::int64_t scale_stride, const float* shift,
                    std::int64_t shift_stride, void* y, DType dtype, const Dims& dims, bool accumulate,
                    cudaStream_t stream) {
  const std::int64_t count = dims.numel();
  if (count == 0) return;
  dispatch_float(dtype, "channel_affine", [&](auto tag) {
    using T = typename decltype(tag)::type;
    channel_affine_kernel<T><<<grid_for(count), kBlock, 0, stream>>>(
        static_cast<const T*>(x), scale, scale_stride, shift, shift_stride, static_cast<T*>(y), dims, accumulate,
        count);
  });
  CNNERGY_CUDA_LAUNCH_CHECK("channel_affine");
}

void channel_shuffle(const void* x, void* y, DType dtype, const Dims& dims, std::int64_t groups, bool accumulate,
                     cudaStream_t stream) {
  const std::int64_t count = dims.numel();
  if (count == 0) return;
  dispatch_float(dtype, "channel_shuffle", [&](auto tag) {
    using T = typename decltype(tag)::type;
    channel_shuffle_kernel<T><<<grid_for(count), kBlock, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), dims, groups, accumulate, count);
  });
  CNNERGY_CUDA_LAUNCH_CHECK("channel_shuffle");
}

}  // namespace cnnergy::cuda::kernels
