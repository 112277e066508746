// The own "winograd" convolution: F(4x4,3x3) ("own:winograd") and F(2x2,3x3)
// ("own:winograd_2x2") after Lavin and Gray 2016, for 3x3 stride-1 dilation-1 groups-1 NCHW. Three
// kernels and a batched GEMM per chunk of images: the filter transform U = G g G^T, the input
// transform V = B^T d B of every (m+2)x(m+2) tile, one cuBLAS GEMM per transformed point
// (M = U V over channels, alpha^2 of them batched, fp32 even under TF32), and the output transform
// Y = A^T M A. Backward data is the same correlation of dy with the filter rotated by 180 degrees
// and its K and C swapped. Backward filter transforms the input tiles as forward does and each
// output-gradient tile by A dy A^T, sums their products over all tiles of all images with the same
// batched GEMM (accumulating across chunks), and maps the sum back with dW = G^T S G.
#include <cublas_v2.h>

#include <algorithm>
#include <memory>
#include <string>

#include "backend/cuda/own_conv_common.cuh"
#include "backend/cuda/own_conv_winograd_matrices.hpp"

namespace cnnergy::cuda {

namespace {

using kernels::from_float;
using kernels::to_float;

// A stride-1 3x3 correlation: out[n][ko][y][x] = sum_ci sum_rs in[n][ci][y - pt + r][x - pl + s] *
// f[ko][ci][r][s], zero outside the input. Both directions map onto it.
struct Correlation {
  int n, c_in, h_in, w_in;   // input planes
  int k_out, h_out, w_out;   // output planes
  int pt, pl;                // may be negative (backward data with padding above 2)
  int tiles_h, tiles_w;      // of M x M outputs
};

// U[e][ko][ci] (e = alpha^2 points): forward f = w[ko][ci]; backward data f[r][s] =
// w[ci][ko][2 - r][2 - s] (ko runs over the input channels C, ci over the outputs K).
template <int M, typename T>
__global__ void filter_transform(const T* __restrict__ w, float* __restrict__ u, int k_out, int c_in,
                                 bool rotate) {
  constexpr int kA = M + 2;
  const std::int64_t total = static_cast<std::int64_t>(k_out) * c_in;
  for (std::int64_t i = kernels::global_thread(); i < total; i += kernels::grid_threads()) {
    const int ko = static_cast<int>(i / c_in), ci = static_cast<int>(i % c_in);
    float f[3][3];
    for (int r = 0; r < 3; ++r)
      for (int s = 0; s < 3; ++s)
        f[r][s] = rotate ? to_float(w[((static_cast<std::int64_t>(ci) * k_out + ko) * 3 + 2 - r) * 3 + 2 - s])
                         : to_float(w[(i * 3 + r) * 3 + s]);
    float t[kA][kA];
    winograd::transform_filter<M>(f, t);
    for (int a = 0; a < kA; ++a)
      for (int b = 0; b < kA; ++b) u[(static_cast<std::int64_t>(a * kA + b) * k_out + ko) * c_in + ci] = t[a][b];
  }
}

// V[e][ci][p] for the tiles p = (img, ty, tx) of images [n0, n0 + nb).
template <int M, typename T>
__global__ void input_transform(const T* __restrict__ x, float* __restrict__ v, Correlation q, int n0,
                                int nb) {
  constexpr int kA = M + 2;
  const int tiles = q.tiles_h * q.tiles_w;
  const std::int64_t p_count = static_cast<std::int64_t>(nb) * tiles;
  const std::int64_t total = p_count * q.c_in;
  for (std::int64_t i = kernels::global_thread(); i < total; i += kernels::grid_threads()) {
    const std::int64_t p = i % p_count;
    const int ci = static_cast<int>(i / p_count);
    const int img = static_cast<int>(p / tiles), t = static_cast<int>(p % tiles);
    const int y0 = (t / q.tiles_w) * M - q.pt, x0 = (t % q.tiles_w) * M - q.pl;
    const T* plane = x + (static_cast<std::int64_t>(n0 + img) * q.c_in + ci) * q.h_in * q.w_in;
    float d[kA][kA];
    for (int a = 0; a < kA; ++a)
      for (int b = 0; b < kA; ++b) {
        const int yy = y0 + a, xx = x0 + b;
        d[a][b] = (yy >= 0 && yy < q.h_in && xx >= 0 && xx < q.w_in) ? to_float(plane[yy * q.w_in + xx]) : 0.0f;
      }
    float r[kA][kA];
    winograd::transform_input<M>(d, r);
    for (int a = 0; a < kA; ++a)
      for (int b = 0; b < kA; ++b) v[(static_cast<std::int64_t>(a * kA + b) * q.c_in + ci) * p_count + p] = r[a][b];
  }
}

// out[n0 + img][ko] (=|+=) A^T M A, cropped to the output plane.
template <int M, typename T>
__global__ void output_transform(const float* __restrict__ m, T* __restrict__ out, Correlation q, int n0,
                                 int nb, bool accumulate) {
  constexpr int kA = M + 2;
  const int tiles = q.tiles_h * q.tiles_w;
  const std::int64_t p_count = static_cast<std::int64_t>(nb) * tiles;
  const std::int64_t total = p_count * q.k_out;
  for (std::int64_t i = kernels::global_thread(); i < total; i += kernels::grid_threads()) {
    const std::int64_t p = i % p_count;
    const int ko = static_cast<int>(i / p_count);
    const int img = static_cast<int>(p / tiles), t = static_cast<int>(p % tiles);
    float s[kA][kA];
    for (int a = 0; a < kA; ++a)
      for (int b = 0; b < kA; ++b) s[a][b] = m[(static_cast<std::int64_t>(a * kA + b) * q.k_out + ko) * p_count + p];
    float y[M][M];
    winograd::transform_output<M>(s, y);
    const int y0 = (t / q.tiles_w) * M, x0 = (t % q.tiles_w) * M;
    T* plane = out + (static_cast<std::int64_t>(n0 + img) * q.k_out + ko) * q.h_out * q.w_out;
    for (int a = 0; a < M; ++a)
      for (int b = 0; b < M; ++b) {
        const int yy = y0 + a, xx = x0 + b;
        if (yy >= q.h_out || xx >= q.w_out) continue;
        T* o = plane + yy * q.w_out + xx;
        *o = from_float<T>(accumulate ? y[a][b] + to_float(*o) : y[a][b]);
      }
  }
}

// Dy[e][k][p] = (A dy A^T) of the m x m output-gradient tile p (zero beyond the output plane);
// the tiles are those of the forward correlation q.
template <int M, typename T>
__global__ void output_grad_transform(const T* __restrict__ dy, float* __restrict__ out, Correlation q, int n0,
                                      int nb) {
  constexpr int kA = M + 2;
  const int tiles = q.tiles_h * q.tiles_w;
  const std::int64_t p_count = static_cast<std::int64_t>(nb) * tiles;
  const std::int64_t total = p_count * q.k_out;
  for (std::int64_t i = kernels::global_thread(); i < total; i += kernels::grid_threads()) {
    const std::int64_t p = i % p_count;
    const int ko = static_cast<int>(i / p_count);
    const int img = static_cast<int>(p / tiles), t = static_cast<int>(p % tiles);
    const int y0 = (t / q.tiles_w) * M, x0 = (t % q.tiles_w) * M;
    const T* plane = dy + (static_cast<std::int64_t>(n0 + img) * q.k_out + ko) * q.h_out * q.w_out;
    float d[M][M];
    for (int a = 0; a < M; ++a)
      for (int b = 0; b < M; ++b) {
        const int yy = y0 + a, xx = x0 + b;
        d[a][b] = (yy < q.h_out && xx < q.w_out) ? to_float(plane[yy * q.w_out + xx]) : 0.0f;
      }
    float r[kA][kA];
    winograd::transform_output_grad<M>(d, r);
    for (int a = 0; a < kA; ++a)
      for (int b = 0; b < kA; ++b) out[(static_cast<std::int64_t>(a * kA + b) * q.k_out + ko) * p_count + p] = r[a][b];
  }
}

// dw[k][c] = G^T S[.][k][c] G, S summed over every tile.
template <int M, typename T>
__global__ void filter_grad_transform(const float* __restrict__ sum, T* __restrict__ dw, int k_out, int c_in) {
  constexpr int kA = M + 2;
  const std::int64_t total = static_cast<std::int64_t>(k_out) * c_in;
  for (std::int64_t i = kernels::global_thread(); i < total; i += kernels::grid_threads()) {
    float p[kA][kA];
    for (int a = 0; a < kA; ++a)
      for (int b = 0; b < kA; ++b) p[a][b] = sum[static_cast<std::int64_t>(a * kA + b) * total + i];
    float f[3][3];
    winograd::transform_filter_grad<M>(p, f);
    for (int r = 0; r < 3; ++r)
      for (int s = 0; s < 3; ++s) dw[(i * 3 + r) * 3 + s] = from_float<T>(f[r][s]);
  }
}

class WinogradConv final : public OwnConvAlgo {
 public:
  WinogradConv(std::shared_ptr<CudaContext> ctx, const OwnConvProblem& p, int tile_m)
      : ctx_(std::move(ctx)), p_(p), m_(tile_m) {
    const Conv2dDesc& d = p_.d;
    rule_ = own::winograd_rule(d, p_.nhwc, m_, own::Direction::kForward);
    if (!rule_.empty()) return;
    const int n = static_cast<int>(d.n), c = static_cast<int>(d.c), k = static_cast<int>(d.k);
    const int h = static_cast<int>(d.h), w = static_cast<int>(d.w);
    const int oh = static_cast<int>(d.out_h()), ow = static_cast<int>(d.out_w());
    fwd_ = {n, c, h, w, k, oh, ow, static_cast<int>(d.pad_top), static_cast<int>(d.pad_left),
            (oh + m_ - 1) / m_, (ow + m_ - 1) / m_};
    bwd_ = {n, k, oh, ow, c, h, w, 2 - static_cast<int>(d.pad_top), 2 - static_cast<int>(d.pad_left),
            (h + m_ - 1) / m_, (w + m_ - 1) / m_};
    const std::size_t cap = std::max<std::size_t>(ctx_->options().workspace_limit_bytes, 1);
    chunk_fwd_ = chunk_for(fwd_, cap);
    chunk_bwd_ = chunk_for(bwd_, cap);
  }

  std::string unsupported(ConvDirection dir) const override {
    return own::winograd_rule(p_.d, p_.nhwc, m_, static_cast<own::Direction>(dir));
  }
  std::size_t workspace_bytes(ConvDirection dir) const override {
    if (!unsupported(dir).empty()) return 0;
    // Backward filter: the sum S (as U) and the input and output-gradient tiles (as V and M).
    return dir == ConvDirection::kBackwardData ? bytes(bwd_, chunk_bwd_) : bytes(fwd_, chunk_fwd_);
  }

  void forward(const void* x, const void* w, void* y) override { run(fwd_, chunk_fwd_, x, w, y, false, false); }
  void backward_data(const void* dy, const void* w, void* dx, bool accumulate) override {
    run(bwd_, chunk_bwd_, dy, w, dx, true, accumulate);
  }
  void backward_filter(const void* x, const void* dy, void* dw) override {
    if (m_ == 4) {
      run_filter_grad<4>(x, dy, dw);
    } else {
      run_filter_grad<2>(x, dy, dw);
    }
  }

 private:
  int alpha2() const { return (m_ + 2) * (m_ + 2); }
  std::size_t u_bytes(const Correlation& q) const {
    return static_cast<std::size_t>(alpha2()) * q.k_out * q.c_in * sizeof(float);
  }
  // V and M of one image.
  std::size_t per_image_bytes(const Correlation& q) const {
    return static_cast<std::size_t>(alpha2()) * q.tiles_h * q.tiles_w * (q.c_in + q.k_out) * sizeof(float);
  }
  int chunk_for(const Correlation& q, std::size_t cap) const {
    const std::size_t room = cap > u_bytes(q) ? cap - u_bytes(q) : 0;
    const std::size_t fit = room / std::max<std::size_t>(per_image_bytes(q), 1);
    return static_cast<int>(std::clamp<std::size_t>(fit, 1, static_cast<std::size_t>(q.n)));
  }
  std::size_t bytes(const Correlation& q, int chunk) const {
    return u_bytes(q) + static_cast<std::size_t>(chunk) * per_image_bytes(q);
  }

  void run(const Correlation& q, int chunk, const void* in, const void* w, void* out, bool rotate,
           bool accumulate) {
    if (m_ == 4) {
      run_m<4>(q, chunk, in, w, out, rotate, accumulate);
    } else {
      run_m<2>(q, chunk, in, w, out, rotate, accumulate);
    }
  }

  template <int M>
  void run_m(const Correlation& q, int chunk, const void* in, const void* w, void* out, bool rotate,
             bool accumulate) {
    const cudaStream_t stream = ctx_->stream();
    const int e_count = alpha2();
    const int tiles = q.tiles_h * q.tiles_w;
    auto u = ctx_->scratch(u_bytes(q));
    auto vm = ctx_->scratch(static_cast<std::size_t>(chunk) * per_image_bytes(q));
    float* uf = static_cast<float*>(u->data());
    float* vf = static_cast<float*>(vm->data());
    const std::int64_t filters = static_cast<std::int64_t>(q.k_out) * q.c_in;
    kernels::dispatch_float(p_.dtype, "winograd filter transform", [&](auto tag) {
      using T = typename decltype(tag)::type;
      filter_transform<M, T><<<kernels::blocks_for(filters), kernels::kBlock, 0, stream>>>(
          static_cast<const T*>(w), uf, q.k_out, q.c_in, rotate);
    });
    CNNERGY_CUDA_LAUNCH_CHECK("filter_transform");
    // fp32 even under tf32: the transformed values are tens of times larger than the data, and TF32's
    // 10-bit mantissa on them would cost a few percent of the output (docs/convolutions.md).
    const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    for (int n0 = 0; n0 < q.n; n0 += chunk) {
      const int nb = std::min(chunk, q.n - n0);
      const int p_count = nb * tiles;
      float* mf = vf + static_cast<std::int64_t>(e_count) * q.c_in * p_count;
      const std::int64_t inputs = static_cast<std::int64_t>(p_count) * q.c_in;
      const std::int64_t outputs = static_cast<std::int64_t>(p_count) * q.k_out;
      kernels::dispatch_float(p_.dtype, "winograd input transform", [&](auto tag) {
        using T = typename decltype(tag)::type;
        input_transform<M, T><<<kernels::blocks_for(inputs), kernels::kBlock, 0, stream>>>(
            static_cast<const T*>(in), vf, q, n0, nb);
      });
      CNNERGY_CUDA_LAUNCH_CHECK("input_transform");
      // Row-major M_e (K x P) = U_e (K x C) V_e (C x P); cuBLAS: M_e^T (P x K) = V_e^T U_e^T.
      const float alpha = 1.0f, beta = 0.0f;
      CNNERGY_CUDA_CALL(cublasGemmStridedBatchedEx(
          ctx_->cublas(), CUBLAS_OP_N, CUBLAS_OP_N, p_count, q.k_out, q.c_in, &alpha, vf, CUDA_R_32F, p_count,
          static_cast<long long>(q.c_in) * p_count, uf, CUDA_R_32F, q.c_in,
          static_cast<long long>(q.k_out) * q.c_in, &beta, mf, CUDA_R_32F, p_count,
          static_cast<long long>(q.k_out) * p_count, e_count, compute, CUBLAS_GEMM_DEFAULT));
      kernels::dispatch_float(p_.dtype, "winograd output transform", [&](auto tag) {
        using T = typename decltype(tag)::type;
        output_transform<M, T><<<kernels::blocks_for(outputs), kernels::kBlock, 0, stream>>>(
            mf, static_cast<T*>(out), q, n0, nb, accumulate);
      });
      CNNERGY_CUDA_LAUNCH_CHECK("output_transform");
    }
  }

  // S[e] (K x C) = sum over tiles p of Dy[e] (K x P) V[e]^T (P x C), row-major; cuBLAS:
  // S^T (C x K) = V (C x P) Dy^T (P x K), V and Dy stored as P-fastest rows.
  template <int M>
  void run_filter_grad(const void* x, const void* dy, void* dw) {
    const Correlation& q = fwd_;
    const cudaStream_t stream = ctx_->stream();
    const int e_count = alpha2(), tiles = q.tiles_h * q.tiles_w;
    auto s = ctx_->scratch(u_bytes(q));
    auto vd = ctx_->scratch(static_cast<std::size_t>(chunk_fwd_) * per_image_bytes(q));
    float* sf = static_cast<float*>(s->data());
    float* vf = static_cast<float*>(vd->data());
    // fp32 even under tf32: the transformed values are tens of times larger than the data, and TF32's
    // 10-bit mantissa on them would cost a few percent of the output (docs/convolutions.md).
    const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    for (int n0 = 0; n0 < q.n; n0 += chunk_fwd_) {
      const int nb = std::min(chunk_fwd_, q.n - n0);
      const int p_count = nb * tiles;
      float* df = vf + static_cast<std::int64_t>(e_count) * q.c_in * p_count;
      const std::int64_t inputs = static_cast<std::int64_t>(p_count) * q.c_in;
      const std::int64_t grads = static_cast<std::int64_t>(p_count) * q.k_out;
      kernels::dispatch_float(p_.dtype, "winograd backward_filter transforms", [&](auto tag) {
        using T = typename decltype(tag)::type;
        input_transform<M, T><<<kernels::blocks_for(inputs), kernels::kBlock, 0, stream>>>(
            static_cast<const T*>(x), vf, q, n0, nb);
        CNNERGY_CUDA_LAUNCH_CHECK("input_transform");
        output_grad_transform<M, T><<<kernels::blocks_for(grads), kernels::kBlock, 0, stream>>>(
            static_cast<const T*>(dy), df, q, n0, nb);
        CNNERGY_CUDA_LAUNCH_CHECK("output_grad_transform");
      });
      const float alpha = 1.0f, beta = n0 == 0 ? 0.0f : 1.0f;
      CNNERGY_CUDA_CALL(cublasGemmStridedBatchedEx(
          ctx_->cublas(), CUBLAS_OP_T, CUBLAS_OP_N, q.c_in, q.k_out, p_count, &alpha, vf, CUDA_R_32F, p_count,
          static_cast<long long>(q.c_in) * p_count, df, CUDA_R_32F, p_count,
          static_cast<long long>(q.k_out) * p_count, &beta, sf, CUDA_R_32F, q.c_in,
          static_cast<long long>(q.k_out) * q.c_in, e_count, compute, CUBLAS_GEMM_DEFAULT));
    }
    const std::int64_t filters = static_cast<std::int64_t>(q.k_out) * q.c_in;
    kernels::dispatch_float(p_.dtype, "winograd filter gradient transform", [&](auto tag) {
      using T = typename decltype(tag)::type;
      filter_grad_transform<M, T><<<kernels::blocks_for(filters), kernels::kBlock, 0, stream>>>(
          sf, static_cast<T*>(dw), q.k_out, q.c_in);
    });
    CNNERGY_CUDA_LAUNCH_CHECK("filter_grad_transform");
  }

  std::shared_ptr<CudaContext> ctx_;
  OwnConvProblem p_;
  int m_;
  std::string rule_;
  Correlation fwd_{}, bwd_{};
  int chunk_fwd_ = 1, chunk_bwd_ = 1;
};

}  // namespace

std::unique_ptr<OwnConvAlgo> make_own_winograd(std::shared_ptr<CudaContext> ctx, const OwnConvProblem& p,
                                               int tile_m) {
  return std::make_unique<WinogradConv>(std::move(ctx), p, tile_m);
}

}  // namespace cnnergy::cuda
