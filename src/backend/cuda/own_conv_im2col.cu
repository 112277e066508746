// The own "im2col_gemm" convolution: an explicit column buffer (im2col), cuBLAS GEMMs with fp32
// accumulation (cublasGemmStridedBatchedEx; TF32 where the run allows it), and col2im for backward
// data. Images go through in chunks whose column buffer fits the run's workspace cap; groups are a
// batch dimension of the GEMMs. Any stride, padding, dilation and groups; NCHW only.
#include <cublas_v2.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>

#include "backend/cuda/own_conv_common.cuh"

namespace cnnergy::cuda {

namespace {

using kernels::from_float;
using kernels::to_float;
using own::ConvGeom;

// col[img][grp][j = (c', r, s)][p = (oy, ox)] for images [n0, n0 + nb). One row (img, grp, j) per
// blockDim.x threads, blockDim.y rows per block: the row's channel, kernel offset and input plane are
// found once, then its threads walk the output pixels with 32-bit index math (a 64-bit division per
// element made this kernel 7x slower than cuDNN's im2col, Li et al. 2016's hotspot in explicit GEMM).
template <typename T>
__global__ void im2col_kernel(const T* __restrict__ x, T* __restrict__ col, ConvGeom g, int n0, int rows) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  const int rs = g.r * g.s, j_count = g.cg * rs, p_count = g.oh * g.ow;
  const int j = row % j_count, image_group = row / j_count;
  const int grp = image_group % g.groups, img = image_group / g.groups;
  const int cl = j / rs, r = (j % rs) / g.s, s = j % g.s;
  const T* plane = x + g.in(n0 + img, grp * g.cg + cl, 0, 0);  // NCHW: the channel's H x W plane
  T* out = col + static_cast<std::int64_t>(row) * p_count;
  const int y0 = r * g.dh - g.pt, x0 = s * g.dw - g.pl;
  for (int p = threadIdx.x; p < p_count; p += blockDim.x) {
    const int oy = p / g.ow, ox = p - oy * g.ow;
    const int iy = oy * g.sh + y0, ix = ox * g.sw + x0;
    T v = from_float<T>(0.0f);
    if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) v = plane[iy * g.w + ix];
    out[p] = v;
  }
}

// dx[n0 + img] (=|+=) the sum of the fp32 column gradients that map to each input element.
template <typename T>
__global__ void col2im_kernel(const float* __restrict__ colg, T* __restrict__ dx, ConvGeom g, int n0,
                              std::int64_t total, bool accumulate) {
  const int rs = g.r * g.s, p_count = g.oh * g.ow;
  for (std::int64_t i = kernels::global_thread(); i < total; i += kernels::grid_threads()) {
    const int ix = static_cast<int>(i % g.w);
    const int iy = static_cast<int>((i / g.w) % g.h);
    const int c = static_cast<int>((i / (static_cast<std::int64_t>(g.w) * g.h)) % g.c);
    const int img = static_cast<int>(i / (static_cast<std::int64_t>(g.w) * g.h * g.c));
    const int grp = c / g.cg, cl = c % g.cg;
    const float* base = colg + (static_cast<std::int64_t>(img) * g.groups + grp) * g.cg * rs * p_count;
    float acc = 0.0f;
    for (int r = 0; r < g.r; ++r) {
      const int ty = iy + g.pt - r * g.dh;
      if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.oh) continue;
      for (int s = 0; s < g.s; ++s) {
        const int tx = ix + g.pl - s * g.dw;
        if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.ow) continue;
        acc += base[static_cast<std::int64_t>((cl * g.r + r) * g.s + s) * p_count + (ty / g.sh) * g.ow + tx / g.sw];
      }
    }
    const std::int64_t o = g.in(n0 + img, c, iy, ix);  // NCHW: equals i offset by the chunk
    dx[o] = from_float<T>(accumulate ? acc + to_float(dx[o]) : acc);
  }
}

cudaDataType_t blas_type(DType t) {
  switch (t) {
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

// One strided-batched GEMM (column-major, as cuBLAS sees it).
struct Gemm {
  cublasOperation_t ta, tb;
  int m, n, k;
  const void* a;
  cudaDataType_t at;
  int lda;
  long long stride_a;
  const void* b;
  cudaDataType_t bt;
  int ldb;
  long long stride_b;
  float beta;
  void* c;
  cudaDataType_t ct;
  int ldc;
  long long stride_c;
  int batch;
};

class Im2colGemmConv final : public OwnConvAlgo {
 public:
  Im2colGemmConv(std::shared_ptr<CudaContext> ctx, const OwnConvProblem& p) : ctx_(std::move(ctx)), p_(p) {
    rule_ = own::im2col_gemm_rule(p_.d, p_.nhwc);
    if (!rule_.empty()) return;
    g_ = own::geom_of(p_);
    j_ = g_.cg * g_.r * g_.s;
    p_count_ = g_.oh * g_.ow;
    elem_ = dtype_size_bytes(p_.dtype);
    per_image_ = static_cast<std::size_t>(g_.groups) * j_ * p_count_;  // column elements per image
    const std::size_t cap = std::max<std::size_t>(ctx_->options().workspace_limit_bytes, 1);
    chunk_fwd_ = std::min(g_.n, chunk_for(per_image_ * elem_, cap));
    chunk_bwd_ = std::min(g_.n, chunk_for(per_image_ * sizeof(float), cap));
    compute_ = p_.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    type_ = blas_type(p_.dtype);
  }

  std::string unsupported(ConvDirection) const override { return rule_; }
  std::size_t workspace_bytes(ConvDirection dir) const override {
    if (!rule_.empty()) return 0;
    switch (dir) {
      case ConvDirection::kForward:
        return static_cast<std::size_t>(chunk_fwd_) * per_image_ * elem_;
      case ConvDirection::kBackwardData:
        return static_cast<std::size_t>(chunk_bwd_) * per_image_ * sizeof(float);
      case ConvDirection::kBackwardFilter:
        break;
    }
    return static_cast<std::size_t>(chunk_fwd_) * per_image_ * elem_ + dw32_bytes();
  }

  // Per image and group: Y_g (Kg x P) = W_g (Kg x J) col (J x P), row-major; as cuBLAS sees it,
  // Y_g^T (P x Kg) = col^T (P x J) W_g^T (J x Kg).
  void forward(const void* x, const void* w, void* y) override {
    auto col = ctx_->scratch(static_cast<std::size_t>(chunk_fwd_) * per_image_ * elem_);
    for (int n0 = 0; n0 < g_.n; n0 += chunk_fwd_) {
      const int nb = std::min(chunk_fwd_, g_.n - n0);
      im2col(x, col->data(), n0, nb);
      const char* cb = static_cast<const char*>(col->data());
      const char* wb = static_cast<const char*>(w);
      char* yb = static_cast<char*>(y);
      for_images_or_groups(nb, [&](int img, int grp, int batch, bool over_groups) {
        gemm({CUBLAS_OP_N, CUBLAS_OP_N, p_count_, g_.kg, j_,
              cb + ((static_cast<std::int64_t>(img) * g_.groups + grp) * j_ * p_count_) * elem_, type_,
              p_count_, over_groups ? static_cast<long long>(j_) * p_count_ : static_cast<long long>(g_.groups) * j_ * p_count_,
              wb + (static_cast<std::int64_t>(grp) * g_.kg * j_) * elem_, type_, j_,
              over_groups ? static_cast<long long>(g_.kg) * j_ : 0LL, 0.0f,
              yb + ((static_cast<std::int64_t>(n0 + img) * g_.k + grp * g_.kg) * p_count_) * elem_, type_, p_count_,
              over_groups ? static_cast<long long>(g_.kg) * p_count_ : static_cast<long long>(g_.k) * p_count_, batch});
      });
    }
  }

  // colg (J x P, fp32) = W_g^T (J x Kg) dY_g (Kg x P); cuBLAS: colg^T (P x J) = dY_g^T W_g.
  void backward_data(const void* dy, const void* w, void* dx, bool accumulate) override {
    auto colg = ctx_->scratch(static_cast<std::size_t>(chunk_bwd_) * per_image_ * sizeof(float));
    for (int n0 = 0; n0 < g_.n; n0 += chunk_bwd_) {
      const int nb = std::min(chunk_bwd_, g_.n - n0);
      float* cg = static_cast<float*>(colg->data());
      const char* wb = static_cast<const char*>(w);
      const char* db = static_cast<const char*>(dy);
      for_images_or_groups(nb, [&](int img, int grp, int batch, bool over_groups) {
        gemm({CUBLAS_OP_N, CUBLAS_OP_T, p_count_, j_, g_.kg,
              db + ((static_cast<std::int64_t>(n0 + img) * g_.k + grp * g_.kg) * p_count_) * elem_, type_,
              p_count_, over_groups ? static_cast<long long>(g_.kg) * p_count_ : static_cast<long long>(g_.k) * p_count_,
              wb + (static_cast<std::int64_t>(grp) * g_.kg * j_) * elem_, type_, j_,
              over_groups ? static_cast<long long>(g_.kg) * j_ : 0LL, 0.0f,
              cg + (static_cast<std::int64_t>(img) * g_.groups + grp) * j_ * p_count_, CUDA_R_32F, p_count_,
              over_groups ? static_cast<long long>(j_) * p_count_ : static_cast<long long>(g_.groups) * j_ * p_count_,
              batch});
      });
      const std::int64_t total = static_cast<std::int64_t>(nb) * g_.c * g_.h * g_.w;
      kernels::dispatch_float(p_.dtype, "im2col_gemm col2im", [&](auto tag) {
        using T = typename decltype(tag)::type;
        col2im_kernel<T><<<kernels::blocks_for(total), kernels::kBlock, 0, ctx_->stream()>>>(
            cg, static_cast<T*>(dx), g_, n0, total, accumulate);
      });
      CNNERGY_CUDA_LAUNCH_CHECK("col2im_kernel");
    }
  }

  // dW_g (Kg x J) = sum over images of dY_g (Kg x P) col^T (P x J), accumulated in fp32; cuBLAS:
  // dW_g^T (J x Kg) = col (J x P) dY_g^T (P x Kg), the groups as the batch.
  void backward_filter(const void* x, const void* dy, void* dw) override {
    auto col = ctx_->scratch(static_cast<std::size_t>(chunk_fwd_) * per_image_ * elem_);
    std::shared_ptr<Buffer> dw32_buf;
    void* dw32 = dw;
    if (p_.dtype != DType::kF32) dw32 = (dw32_buf = ctx_->scratch(dw32_bytes()))->data();
    const char* cb = static_cast<const char*>(col->data());
    const char* db = static_cast<const char*>(dy);
    for (int n0 = 0; n0 < g_.n; n0 += chunk_fwd_) {
      const int nb = std::min(chunk_fwd_, g_.n - n0);
      im2col(x, col->data(), n0, nb);
      for (int img = 0; img < nb; ++img)
        gemm({CUBLAS_OP_T, CUBLAS_OP_N, j_, g_.kg, p_count_,
              cb + (static_cast<std::int64_t>(img) * g_.groups * j_ * p_count_) * elem_, type_, p_count_,
              static_cast<long long>(j_) * p_count_,
              db + (static_cast<std::int64_t>(n0 + img) * g_.k * p_count_) * elem_, type_, p_count_,
              static_cast<long long>(g_.kg) * p_count_, n0 + img == 0 ? 0.0f : 1.0f, dw32, CUDA_R_32F, j_,
              static_cast<long long>(g_.kg) * j_, g_.groups});
    }
    if (dw32 != dw) {
      const kernels::Dims dims{g_.k, j_, 1, 1, false};
      kernels::convert(dw32, DType::kF32, false, dw, p_.dtype, dims, false, ctx_->stream());
    }
  }

 private:
  static int chunk_for(std::size_t per_image_bytes, std::size_t cap) {
    return static_cast<int>(std::clamp<std::size_t>(cap / std::max<std::size_t>(per_image_bytes, 1), 1, 65536));
  }
  std::size_t dw32_bytes() const {
    return p_.dtype == DType::kF32 ? 0 : static_cast<std::size_t>(g_.k) * j_ * sizeof(float);
  }

  // Calls f(img, grp, batch, over_groups) for each GEMM batch of a chunk of nb images: batched
  // over the groups (one call per image) where there are at least as many groups as images,
  // batched over the images (one call per group) otherwise.
  template <class F>
  void for_images_or_groups(int nb, F&& f) const {
    if (g_.groups >= nb) {
      for (int img = 0; img < nb; ++img) f(img, 0, g_.groups, true);
    } else {
      for (int grp = 0; grp < g_.groups; ++grp) f(0, grp, nb, false);
    }
  }

  void im2col(const void* x, void* col, int n0, int nb) const {
    const std::int64_t rows = static_cast<std::int64_t>(nb) * g_.groups * j_;
    if (rows > std::numeric_limits<int>::max())
      throw NotSupported("im2col_gemm: " + std::to_string(rows) + " column rows in one chunk (the most is 2^31 - 1)");
    // Threads per row: the output pixels rounded up to a warp multiple, at most a block; the rest of
    // the block takes further rows (7x7 outputs: 64 threads a row, 4 rows a block).
    const int per_row = std::min(kernels::kBlock, (p_count_ + 31) / 32 * 32);
    const dim3 block(per_row, kernels::kBlock / per_row);
    const auto blocks = static_cast<unsigned>((rows + block.y - 1) / block.y);
    kernels::dispatch_float(p_.dtype, "im2col_gemm im2col", [&](auto tag) {
      using T = typename decltype(tag)::type;
      im2col_kernel<T><<<blocks, block, 0, ctx_->stream()>>>(static_cast<const T*>(x), static_cast<T*>(col), g_, n0,
                                                             static_cast<int>(rows));
    });
    CNNERGY_CUDA_LAUNCH_CHECK("im2col_kernel");
  }

  void gemm(const Gemm& q) const {
    const float alpha = 1.0f;
    CNNERGY_CUDA_CALL(cublasGemmStridedBatchedEx(
        ctx_->cublas(), q.ta, q.tb, q.m, q.n, q.k, &alpha, q.a, q.at, q.lda, q.stride_a, q.b, q.bt, q.ldb,
        q.stride_b, &q.beta, q.c, q.ct, q.ldc, q.stride_c, q.batch, compute_, CUBLAS_GEMM_DEFAULT));
  }

  std::shared_ptr<CudaContext> ctx_;
  OwnConvProblem p_;
  std::string rule_;
  ConvGeom g_{};
  int j_ = 0, p_count_ = 0;
  std::size_t elem_ = 4, per_image_ = 0;
  int chunk_fwd_ = 1, chunk_bwd_ = 1;
  cublasComputeType_t compute_ = CUBLAS_COMPUTE_32F;
  cudaDataType_t type_ = CUDA_R_32F;
};

}  // namespace

std::unique_ptr<OwnConvAlgo> make_own_im2col_gemm(std::shared_ptr<CudaContext> ctx, const OwnConvProblem& p) {
  return std::make_unique<Im2colGemmConv>(std::move(ctx), p);
}

}  // namespace cnnergy::cuda
