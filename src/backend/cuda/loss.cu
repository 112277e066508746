// The CUDA backend's loss-head kernels: softmax cross-entropy (forward: probabilities and the mean
// loss, deterministic; backward: scaled probabilities minus the one-hot label) and top-k counting.
// They touch (N, classes) tensors once per step, so one runtime-dispatched kernel serves every
// dtype.
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"

namespace cnnergy::cuda::kernels {

namespace {

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
