// The CPU kernels behind CpuBackend, one source file per operation. Internal to the CPU backend,
// except that tests include it to reach variants the Backend interface does not expose (the
// reference fully connected loops, a convolution with a given workspace budget).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "backend/cpu/cpu_common.hpp"
#include "backend/ops.hpp"

namespace cnnergy::cpu {

// ---- convolution (conv_cpu.cpp)
// ----------------------------------------------------------------------
// kOnednn: forward only (conv_onednn_cpu.hpp); a problem oneDNN cannot run falls back to im2col_gemm.
enum class ConvAlgo { kReference, kIm2colGemm, kOnednn };
std::string_view conv_algo_name(ConvAlgo a);  // "reference", "im2col_gemm", "onednn"
// "" → fallback; otherwise one of the names above, else InvalidArgument listing them.
ConvAlgo parse_conv_algo(std::string_view name, ConvAlgo fallback);
// Throws InvalidArgument/ShapeError for impossible descriptors (groups not dividing, empty output,
// ...).
void validate_conv_desc(const Conv2dDesc& d);
// workspace_limit_bytes caps the im2col chunk (together with kMaxConvWorkspaceBytes).
// default_algo: the backward directions' default; default_forward: the forward's.
std::unique_ptr<ConvKernel> make_conv_kernel(const Conv2dDesc& desc, const ConvAlgoChoice& algo,
                                             ConvAlgo default_algo,
                                             std::size_t workspace_limit_bytes,
                                             std::shared_ptr<Workspace> workspace,
                                             ConvAlgo default_forward);

// ---- fully connected (linear_cpu.cpp)
// ------------------------------------------------------------------
enum class LinearImpl { kBlas, kReference };
std::unique_ptr<LinearKernel> make_linear_kernel(const LinearDesc& desc,
                                                 LinearImpl impl = LinearImpl::kBlas);

// ---- the other layer kernels
// ------------------------------------------------------------------------------
// A kept argmax (Pool2dDesc::keep_argmax) is allocated from `memory`, the backend's tracked host memory.
std::unique_ptr<PoolKernel> make_pool_kernel(const Pool2dDesc& desc, HostMemory& memory);  // pool_cpu.cpp
std::unique_ptr<LrnKernel> make_lrn_kernel(const LrnDesc& desc);       // lrn_cpu.cpp
std::unique_ptr<BatchNormKernel> make_batch_norm_kernel(
    const BatchNormDesc& desc);  // batch_norm_cpu.cpp
std::unique_ptr<SoftmaxXentKernel> make_softmax_xent_kernel(
    const SoftmaxXentDesc& desc);  // softmax_xent_cpu.cpp

// ---- element-wise (elementwise_cpu.cpp); same contracts as the Backend methods of the same name
// ------
void relu_forward(const Tensor& x, const Tensor& y);
void relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool accumulate);
void dropout_forward(const Tensor& x, float p, std::uint64_t seed, const Tensor& mask,
                     const Tensor& y);
void dropout_backward(const Tensor& dy, const Tensor& mask, const Tensor& dx, bool accumulate);
void add_forward(const Tensor& a, const Tensor& b, const Tensor& y);
void concat_forward(std::span<const Tensor> xs, const Tensor& y);
void concat_backward(const Tensor& dy, std::span<const Tensor> dxs, bool accumulate);
void fill(const Tensor& t, float value);
void accumulate(const Tensor& src, const Tensor& dst);
void check_finite(const Tensor& t, const Tensor& flag);
void count_topk(const Tensor& logits, const Tensor& labels, int k, const Tensor& correct);

// ---- imported networks' operators (channel_ops_cpu.cpp); contracts as the Backend methods ------
void activation_forward(const ActivationDesc& desc, const Tensor& x, const Tensor& y);
void activation_backward(const ActivationDesc& desc, const Tensor& x, const Tensor& dy, const Tensor& dx,
                         bool accumulate);
void mul_forward(const Tensor& a, const Tensor& b, const Tensor& y);
void mul_backward(const Tensor& a, const Tensor& b, const Tensor& dy, const Tensor& da, bool accumulate_a,
                  const Tensor& db, bool accumulate_b);
void channel_affine_forward(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& y);
void channel_affine_backward(const Tensor& dy, const Tensor& scale, const Tensor& dx, bool accumulate);
void channel_shuffle(const Tensor& x, std::int64_t groups, const Tensor& y, bool accumulate);
void channel_slice_forward(const Tensor& x, std::int64_t begin, const Tensor& y);
void channel_slice_backward(const Tensor& dy, std::int64_t begin, const Tensor& dx, bool accumulate);

// ---- optimiser (sgd_cpu.cpp)
// ----------------------------------------------------------------------------
void sgd_update(const Tensor& master, const Tensor& grad, const Tensor& momentum,
                const Tensor& working, const SgdStep& step, const Tensor& skip_if_nonzero);

}  // namespace cnnergy::cpu
