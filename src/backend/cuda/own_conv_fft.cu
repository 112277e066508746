// The own "fft" convolution through cuFFT, fp32 for every storage type: operands zero-padded onto
// a common Fh x Fw grid (the padded input, rounded up to a size cuFFT likes), batched 2-D R2C
// transforms, a complex multiply-accumulate over the summed channel (or image) index per
// frequency, one batched C2R inverse, then crop (and, forward, subsample by the stride) into the
// output. Forward is a correlation (X conj(W)), backward data a convolution (dY W), backward
// filter a correlation of the input with dY (X conj(dY)). NCHW, dilation 1, groups 1; backward
// directions stride 1.
#include <cufft.h>

#include <algorithm>
#include <array>
#include <memory>
#include <string>

#include "backend/cuda/own_conv_common.cuh"

namespace cnnergy::cuda {

namespace {

using kernels::from_float;
using kernels::to_float;

void check_cufft(cufftResult r, const char* what) {
  if (r != CUFFT_SUCCESS) throw DeviceError(std::string("cuFFT ") + what + " failed (cufftResult " + std::to_string(static_cast<int>(r)) + ")");
}

// dst[b][Fh][Fw] = src[b][h][w] placed at (top, left), zeros elsewhere (src planes contiguous).
template <typename T>
__global__ void pad_planes(const T* __restrict__ src, float* __restrict__ dst, std::int64_t planes, int h, int w,
                           int fh, int fw, int top, int left) {
  const std::int64_t total = planes * fh * fw;
  for (std::int64_t i = kernels::global_thread(); i < total; i += kernels::grid_threads()) {
    const int x = static_cast<int>(i % fw), y = static_cast<int>((i / fw) % fh);
    const std::int64_t b = i / (static_cast<std::int64_t>(fw) * fh);
    const int sy = y - top, sx = x - left;
    dst[i] = (sy >= 0 && sy < h && sx >= 0 && sx < w) ? to_float(src[(b * h + sy) * w + sx]) : 0.0f;
  }
}

// out[b][y][x] (=|+=) scale * full[b][top + y * stride_h][left + x * stride_w].
template <typename T>
__global__ void crop_planes(const float* __restrict__ full, T* __restrict__ out, std::int64_t planes, int h, int w,
                            int fh, int fw, int top, int left, int stride_h, int stride_w, float scale,
                            bool accumulate) {
  const std::int64_t total = planes * h * w;
  for (std::int64_t i = kernels::global_thread(); i < total; i += kernels::grid_threads()) {
    const int x = static_cast<int>(i % w), y = static_cast<int>((i / w) % h);
    const std::int64_t b = i / (static_cast<std::int64_t>(w) * h);
    const float v = scale * full[(b * fh + top + y * stride_h) * fw + left + x * stride_w];
    out[i] = from_float<T>(accumulate ? v + to_float(out[i]) : v);
  }
}

// out[i][j][f] = sum_l P'[i * p_i + l * p_l][f] * Q'[j * q_j + l * q_l][f], P' and Q' optionally
// conjugated; spectra of `freq` complex values each.
__global__ void spectral_mac(const cufftComplex* __restrict__ p, const cufftComplex* __restrict__ q,
                             cufftComplex* __restrict__ out, int ni, int nj, int nl, int p_i, int p_l, int q_j,
                             int q_l, int freq, bool conj_p, bool conj_q) {
  const std::int64_t total = static_cast<std::int64_t>(ni) * nj * freq;
  for (std::int64_t t = kernels::global_thread(); t < total; t += kernels::grid_threads()) {
    const int f = static_cast<int>(t % freq);
    const int j = static_cast<int>((t / freq) % nj), i = static_cast<int>(t / (static_cast<std::int64_t>(freq) * nj));
    float re = 0.0f, im = 0.0f;
    for (int l = 0; l < nl; ++l) {
      const cufftComplex a = p[(static_cast<std::int64_t>(i) * p_i + static_cast<std::int64_t>(l) * p_l) * freq + f];
      const cufftComplex b = q[(static_cast<std::int64_t>(j) * q_j + static_cast<std::int64_t>(l) * q_l) * freq + f];
      const float ai = conj_p ? -a.y : a.y, bi = conj_q ? -b.y : b.y;
      re += a.x * b.x - ai * bi;
      im += a.x * bi + ai * b.x;
    }
    out[t] = make_cuFloatComplex(re, im);
  }
}

// The smallest n >= v whose only prime factors are 2, 3, 5 and 7 (cuFFT's fast sizes).
int fft_size(int v) {
  for (int n = std::max(v, 1);; ++n) {
    int m = n;
    for (int p : {2, 3, 5, 7})
      while (m % p == 0) m /= p;
    if (m == 1) return n;
  }
}

// A batched 2-D plan (R2C or C2R) of Fh x Fw planes, destroyed with its owner.
class FftPlan {
 public:
  FftPlan() = default;
  FftPlan(const FftPlan&) = delete;
  FftPlan& operator=(const FftPlan&) = delete;
  ~FftPlan() {
    if (made_) cufftDestroy(handle_);
  }
  void make(int fh, int fw, int batch, cufftType type, cudaStream_t stream) {
    int dims[2] = {fh, fw};
    check_cufft(cufftPlanMany(&handle_, 2, dims, nullptr, 1, 0, nullptr, 1, 0, type, batch), "plan");
    made_ = true;
    check_cufft(cufftSetStream(handle_, stream), "set stream");
  }
  bool made() const { return made_; }
  cufftHandle get() const { return handle_; }

 private:
  cufftHandle handle_ = 0;
  bool made_ = false;
};

class FftConv final : public OwnConvAlgo {
 public:
  FftConv(std::shared_ptr<CudaContext> ctx, const OwnConvProblem& p) : ctx_(std::move(ctx)), p_(p) {
    const Conv2dDesc& d = p_.d;
    rule_ = own::fft_rule(d, p_.nhwc, own::Direction::kForward);
    if (!rule_.empty()) return;
    n_ = static_cast<int>(d.n), c_ = static_cast<int>(d.c), k_ = static_cast<int>(d.k);
    h_ = static_cast<int>(d.h), w_ = static_cast<int>(d.w);
    oh_ = static_cast<int>(d.out_h()), ow_ = static_cast<int>(d.out_w());
    fh_ = fft_size(static_cast<int>(d.h + d.pad_top + d.pad_bottom));
    fw_ = fft_size(static_cast<int>(d.w + d.pad_left + d.pad_right));
    freq_ = fh_ * (fw_ / 2 + 1);
  }

  std::string unsupported(ConvDirection dir) const override {
    return own::fft_rule(p_.d, p_.nhwc, static_cast<own::Direction>(dir));
  }
  // Real padded planes of the larger operand plus the three spectra of the direction.
  std::size_t workspace_bytes(ConvDirection dir) const override {
    if (!unsupported(dir).empty()) return 0;
    const std::array<std::int64_t, 3> n = spectra_counts(dir);
    return real_floats(dir) * sizeof(float) + static_cast<std::size_t>(n[0] + n[1] + n[2]) * freq_ * sizeof(cufftComplex);
  }

  void forward(const void* x, const void* w, void* y) override {
    // Y[n][k] = sum_c X[n][c] conj(W[k][c])
    run(ConvDirection::kForward, x, {c_, h_, w_, static_cast<int>(p_.d.pad_top), static_cast<int>(p_.d.pad_left)},
        w, {c_, static_cast<int>(p_.d.r), static_cast<int>(p_.d.s), 0, 0},
        {n_, k_, c_, c_, 1, c_, 1, false, true}, y,
        {oh_, ow_, 0, 0, static_cast<int>(p_.d.stride_h), static_cast<int>(p_.d.stride_w)}, false);
  }
  void backward_data(const void* dy, const void* w, void* dx, bool accumulate) override {
    // dX[n][c] = sum_k dY[n][k] W[k][c] (a convolution); dx = full[pad + i]
    run(ConvDirection::kBackwardData, dy, {k_, oh_, ow_, 0, 0}, w,
        {c_, static_cast<int>(p_.d.r), static_cast<int>(p_.d.s), 0, 0}, {n_, c_, k_, k_, 1, 1, c_, false, false}, dx,
        {h_, w_, static_cast<int>(p_.d.pad_top), static_cast<int>(p_.d.pad_left), 1, 1}, accumulate);
  }
  void backward_filter(const void* x, const void* dy, void* dw) override {
    // dW[k][c] = sum_n X[n][c] conj(dY[n][k]), computed as sum_n conj(dY[n][k]) X[n][c]
    run(ConvDirection::kBackwardFilter, dy, {k_, oh_, ow_, 0, 0}, x,
        {c_, h_, w_, static_cast<int>(p_.d.pad_top), static_cast<int>(p_.d.pad_left)},
        {k_, c_, n_, 1, k_, 1, c_, true, false}, dw,
        {static_cast<int>(p_.d.r), static_cast<int>(p_.d.s), 0, 0, 1, 1}, false);
  }

 private:
  // An operand: planes of `channels` per item, each h x w, placed at (top, left) on the grid.
  struct Operand {
    int channels, h, w, top, left;
  };
  // out[i][j] = sum_l P[i * p_i + l * p_l] Q[j * q_j + l * q_l] (P = first operand's spectra).
  struct Mac {
    int ni, nj, nl, p_i, p_l, q_j, q_l;
    bool conj_p, conj_q;
  };
  struct Crop {
    int h, w, top, left, stride_h, stride_w;
  };

  // The real padded planes of the largest operand, rounded up to 64 floats (the spectra follow).
  std::size_t real_floats(ConvDirection dir) const {
    const std::array<std::int64_t, 3> n = spectra_counts(dir);
    const std::size_t floats = static_cast<std::size_t>(std::max({n[0], n[1], n[2]})) * fh_ * fw_;
    return (floats + 63) / 64 * 64;
  }
  // Planes of the first operand, the second and the output of a direction.
  std::array<std::int64_t, 3> spectra_counts(ConvDirection dir) const {
    switch (dir) {
      case ConvDirection::kForward:
        return {std::int64_t{n_} * c_, std::int64_t{k_} * c_, std::int64_t{n_} * k_};
      case ConvDirection::kBackwardData:
        return {std::int64_t{n_} * k_, std::int64_t{k_} * c_, std::int64_t{n_} * c_};
      case ConvDirection::kBackwardFilter:
        break;
    }
    return {std::int64_t{n_} * k_, std::int64_t{n_} * c_, std::int64_t{k_} * c_};
  }

  FftPlan& plan(int slot, int batch, cufftType type) {
    FftPlan& pl = plans_[static_cast<std::size_t>(slot)];
    if (!pl.made()) pl.make(fh_, fw_, batch, type, ctx_->stream());
    return pl;
  }

  template <typename T>
  void transform(const void* src, const Operand& o, std::int64_t planes, float* real, cufftComplex* spectra,
                 int slot) {
    const std::int64_t total = planes * fh_ * fw_;
    pad_planes<T><<<kernels::blocks_for(total), kernels::kBlock, 0, ctx_->stream()>>>(
        static_cast<const T*>(src), real, planes, o.h, o.w, fh_, fw_, o.top, o.left);
    CNNERGY_CUDA_LAUNCH_CHECK("pad_planes");
    check_cufft(cufftExecR2C(plan(slot, static_cast<int>(planes), CUFFT_R2C).get(), real, spectra), "R2C");
  }

  void run(ConvDirection dir, const void* a, const Operand& oa, const void* b, const Operand& ob, const Mac& m,
           void* out, const Crop& crop, bool accumulate) {
    const std::array<std::int64_t, 3> counts = spectra_counts(dir);
    const std::int64_t na = counts[0], nb = counts[1], no = counts[2];
    auto ws = ctx_->scratch(workspace_bytes(dir));
    float* real = static_cast<float*>(ws->data());
    auto* sa = reinterpret_cast<cufftComplex*>(real + real_floats(dir));
    cufftComplex* sb = sa + na * freq_;
    cufftComplex* so = sb + nb * freq_;
    const int slot = static_cast<int>(dir) * 3;
    kernels::dispatch_float(p_.dtype, "fft conv", [&](auto tag) {
      using T = typename decltype(tag)::type;
      transform<T>(a, oa, na, real, sa, slot);
      transform<T>(b, ob, nb, real, sb, slot + 1);
      const std::int64_t macs = static_cast<std::int64_t>(m.ni) * m.nj * freq_;
      spectral_mac<<<kernels::blocks_for(macs), kernels::kBlock, 0, ctx_->stream()>>>(
          sa, sb, so, m.ni, m.nj, m.nl, m.p_i, m.p_l, m.q_j, m.q_l, freq_, m.conj_p, m.conj_q);
      CNNERGY_CUDA_LAUNCH_CHECK("spectral_mac");
      check_cufft(cufftExecC2R(plan(slot + 2, static_cast<int>(no), CUFFT_C2R).get(), so, real), "C2R");
      const std::int64_t outs = no * crop.h * crop.w;
      crop_planes<T><<<kernels::blocks_for(outs), kernels::kBlock, 0, ctx_->stream()>>>(
          real, static_cast<T*>(out), no, crop.h, crop.w, fh_, fw_, crop.top, crop.left, crop.stride_h,
          crop.stride_w, 1.0f / (static_cast<float>(fh_) * static_cast<float>(fw_)), accumulate);
      CNNERGY_CUDA_LAUNCH_CHECK("crop_planes");
    });
  }

  std::shared_ptr<CudaContext> ctx_;
  OwnConvProblem p_;
  std::string rule_;
  int n_ = 0, c_ = 0, k_ = 0, h_ = 0, w_ = 0, oh_ = 0, ow_ = 0, fh_ = 1, fw_ = 1, freq_ = 1;
  std::array<FftPlan, 9> plans_;  // per direction: first operand R2C, second R2C, output C2R
};

}  // namespace

std::unique_ptr<OwnConvAlgo> make_own_fft(std::shared_ptr<CudaContext> ctx, const OwnConvProblem& p) {
  return std::make_unique<FftConv>(std::move(ctx), p);
}

}  // namespace cnnergy::cuda
