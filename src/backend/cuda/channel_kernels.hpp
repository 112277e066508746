// Host-callable launchers of channel_ops.cu (the operators imported networks add), with the
// conventions of kernels.hpp: device pointers, the dtype resolved once per launch, fp32 math,
// enqueued on `stream`, never waiting. `accumulate` adds into the output instead of overwriting it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/activation_kind.hpp"
#include "backend/cuda/kernels.hpp"
#include "core/dtype.hpp"

namespace cnnergy::cuda::kernels {

// y (+)= f(x); dx (+)= dy * f'(x) (activation_math.hpp). y may alias x, dx may alias dy.
void activation_forward(const void* x, void* y, DType dtype, std::int64_t count, const ActivationDesc& desc,
                        bool accumulate, cudaStream_t stream);
void activation_backward(const void* x, const void* dy, void* dx, DType dtype, std::int64_t count,
                         const ActivationDesc& desc, bool accumulate, cudaStream_t stream);
// y (+)= a * b, same shape (y may alias a or b).
void multiply(const void* a, const void* b, void* y, DType dtype, std::int64_t count, bool accumulate,
              cudaStream_t stream);
// y (+)= a * b[n, c] for a, y of geometry `dims`, b (N, C) dense.
void multiply_broadcast(const void* a, const void* b, void* y, DType dtype, const Dims& dims, bool accumulate,
                        cudaStream_t stream);
// db[n, c] (+)= sum over H, W of dy * a (fp32 sums), dy and a of geometry `dims`.
void multiply_reduce_hw(const void* dy, const void* a, void* db, DType dtype, const Dims& dims, bool accumulate,
                        cudaStream_t stream);
// y (+)= x * scale[c * scale_stride] + shift[c * shift_stride] (shift may be null); fp32 constants.
void channel_affine(const void* x, const float* scale, std::int64_t scale_stride, const float* shift,
                    std::int64_t shift_stride, void* y, DType dtype, const Dims& dims, bool accumulate,
                    cudaStream_t stream);
// y[:, o] (+)= x[:, (o % groups) * (C / groups) + o / groups] (C % groups == 0; y must not alias x).
void channel_shuffle(const void* x, void* y, DType dtype, const Dims& dims, std::int64_t groups, bool accumulate,
                     cudaStream_t stream);

}  // namespace cnnergy::cuda::kernels
