// Fully connected layers through cuBLAS (cublasGemmEx): y = x w^T + b and both backwards, with fp32
// accumulation for every dtype; fp32 stays off TF32 unless the run allows it (then the compute type
// is CUBLAS_COMPUTE_32F_FAST_TF32). Row-major tensors are handled as their column-major transposes.
#include <climits>
#include <string>

#include "backend/cuda/cuda_ops.hpp"
#include "backend/cuda/kernels.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda {

namespace {

cudaDataType_t cuda_dtype(DType t) {
  switch (t) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kI32:
      break;
  }
  throw InvalidArgument("linear: cuBLAS kernels take fp32, fp16 or bf16, not " +
                        std::string(dtype_name(t)));
}

int blas_dim(std::int64_t v, const char* what) {
  if (v < 1)
    throw InvalidArgument(std::string("linear: ") + what + " must be at least 1 (got " +
                          std::to_string(v) + ")");
  if (v > INT_MAX)
    throw NotSupported(std::string("linear: ") + what + " " + std::to_string(v) +
                       " exceeds cuBLAS's int");
  return static_cast<int>(v);
}

class CublasLinear final : public LinearKernel {
 public:
  CublasLinear(std::shared_ptr<CudaContext> ctx, const LinearDesc& d)
      : ctx_(std::move(ctx)),
        d_(d),
        dtype_(ctx_->dtype()),
        data_type_(cuda_dtype(dtype_)),
        compute_(dtype_ == DType::kF32 && ctx_->options().allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                     : CUBLAS_COMPUTE_32F),
        n_(blas_dim(d.n, "batch size")),
        in_(blas_dim(d.in_features, "in_features")),
        out_(blas_dim(d.out_features, "out_features")) {}

  // Column-major view: Y^T (out x N) = W (out x in, stored as in x out) ^T  X^T (in x N).
  void forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override {
    ctx_->activate();
    check(x, "forward", "x", {d_.n, d_.in_features});
    check(w, "forward", "w", {d_.out_features, d_.in_features});
    check(y, "forward", "y", {d_.n, d_.out_features});
    if (d_.bias) check(b, "forward", "b", {d_.out_features});
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, out_, n_, in_, w.raw(), in_, x.raw(), in_, 0.0f, y.raw(), out_);
    if (d_.bias)
      kernels::bias_add(y.raw(), b.raw(), dtype_, {d_.n, d_.out_features, 1}, ctx_->stream());
  }

  // dX^T (in x N) = W^T (in x out, stored as such) dY^T (out x N).
  void backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx,
                     bool accumulate) override {
    ctx_->activate();
    check(dy, "backward_data", "dy", {d_.n, d_.out_features});
    check(w, "backward_data", "w", {d_.out_features, d_.in_features});
    check(dx, "backward_data", "dx", {d_.n, d_.in_features});
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, in_, n_, out_, w.raw(), in_, dy.raw(), out_,
         accumulate ? 1.0f : 0.0f, dx.raw(), in_);
  }

  // dW^T (in x out) = X^T (in x N) dY (N x out, stored as dY^T out x N).
  void backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw,
                       const Tensor& db) override {
    ctx_->activate();
    check(x, "backward_filter", "x", {d_.n, d_.in_features});
    check(dy, "backward_filter", "dy", {d_.n, d_.out_features});
    check(dw, "backward_filter", "dw", {d_.out_features, d_.in_features});
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, in_, out_, n_, x.raw(), in_, dy.raw(), out_, 0.0f, dw.raw(),
         in_);
    if (d_.bias) {
      check(db, "backward_filter", "db", {d_.out_features});
      const kernels::ChannelView view{d_.n, d_.out_features, 1};
      auto scratch = ctx_->scratch(kernels::channel_reduce_scratch_bytes(view, dtype_));
      kernels::bias_grad(dy.raw(), dtype_, view, db.raw(), dtype_, scratch->data(), ctx_->stream());
    }
  }

 private:
  // A 2-D (N, F) tensor, or any tensor with those many elements per sample (a flattened 4-D input).
  void check(const Tensor& t, const char* fn, const char* name, const Shape& expected) const {
    const std::string op = std::string("linear ") + fn;
    check_device_tensor(t, *ctx_, op.c_str(), name);
    if (t.numel() != expected.numel() || t.shape()[0] != expected[0])
      throw ShapeError(op + ": " + name + " has shape " + t.shape().str() + ", expected " +
                       expected.str());
    if (t.dtype() != dtype_)
      throw InvalidArgument(op + ": " + name + " is " + std::string(dtype_name(t.dtype())) +
                            ", expected " + std::string(dtype_name(dtype_)));
    if (t.shape().rank() == 4 && t.layout() == Layout::kNHWC &&
        t.shape().per_sample() != t.shape()[1])
      throw InvalidArgument(op + ": " + name +
                            " is an NHWC 4-D tensor; flatten it in NCHW order first");
  }

  void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* a, int lda,
            const void* b, int ldb, float beta, void* c, int ldc) const {
    const float alpha = 1.0f;
    CNNERGY_CUDA_CALL(cublasGemmEx(ctx_->cublas(), ta, tb, m, n, k, &alpha, a, data_type_, lda, b,
                                   data_type_, ldb, &beta, c, data_type_, ldc, compute_,
                                   CUBLAS_GEMM_DEFAULT));
  }

  std::shared_ptr<CudaContext> ctx_;
  LinearDesc d_;
  DType dtype_;
  cudaDataType_t data_type_;
  cublasComputeType_t compute_;
  int n_, in_, out_;
};

}  // namespace

std::unique_ptr<LinearKernel> make_cublas_linear(std::shared_ptr<CudaContext> ctx,
                                                 const LinearDesc& desc) {
  return std::make_unique<CublasLinear>(std::move(ctx), desc);
}

}  // namespace cnnergy::cuda
