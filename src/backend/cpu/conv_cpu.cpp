// 2-D convolution on the CPU (stride, asymmetric padding, dilation, groups): "reference" (direct
// loops, double accumulation: the definition others are checked against), "im2col_gemm" (im2col +
// one sgemm (oneDNN's or OpenBLAS's, cpu_common.hpp) per group and batch chunk; col2im for the data gradient) and, forward only,
// "onednn" (conv_onednn_cpu.cpp, where the build has oneDNN and oneDNN implements the problem).
#include <algorithm>
#include <cstring>
#include <string>

#include "backend/cpu/conv_onednn_cpu.hpp"
#include "backend/cpu/cpu_kernels.hpp"
#include "core/errors.hpp"

namespace cnnergy::cpu {

namespace {

constexpr std::string_view kOp = "conv2d";

// Sizes derived once from the descriptor, as plain integers for the loops.
struct Geometry {
  std::int64_t n, c, h, w, k, r, s, groups, cg, kg, oh, ow, ohw, hw, crs, cgrs;
  std::int64_t stride_h, stride_w, pad_top, pad_left, dil_h, dil_w;

  explicit Geometry(const Conv2dDesc& d)
      : n(d.n),
        c(d.c),
        h(d.h),
        w(d.w),
        k(d.k),
        r(d.r),
        s(d.s),
        groups(d.groups),
        cg(d.c / d.groups),
        kg(d.k / d.groups),
        oh(d.out_h()),
        ow(d.out_w()),
        ohw(d.out_h() * d.out_w()),
        hw(d.h * d.w),
        crs(d.c * d.r * d.s),
        cgrs(d.c / d.groups * d.r * d.s),
        stride_h(d.stride_h),
        stride_w(d.stride_w),
        pad_top(d.pad_top),
        pad_left(d.pad_left),
        dil_h(d.dilation_h),
        dil_w(d.dilation_w) {}
};

// ---- reference: direct loops
// ------------------------------------------------------------------------

void reference_forward(const Geometry& g, const float* x, const float* wt, const float* b,
                       float* y) {
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t k = 0; k < g.k; ++k) {
      const std::int64_t grp = k / g.kg;
      for (std::int64_t oh = 0; oh < g.oh; ++oh)
        for (std::int64_t ow = 0; ow < g.ow; ++ow) {
          double acc = b ? b[k] : 0.0;
          for (std::int64_t cg = 0; cg < g.cg; ++cg) {
            const float* xp = x + (n * g.c + grp * g.cg + cg) * g.hw;
            const float* wp = wt + (k * g.cg + cg) * g.r * g.s;
            for (std::int64_t r = 0; r < g.r; ++r) {
              const std::int64_t ih = oh * g.stride_h - g.pad_top + r * g.dil_h;
              if (ih < 0 || ih >= g.h) continue;
              for (std::int64_t s = 0; s < g.s; ++s) {
                const std::int64_t iw = ow * g.stride_w - g.pad_left + s * g.dil_w;
                if (iw < 0 || iw >= g.w) continue;
                acc += static_cast<double>(xp[ih * g.w + iw]) * wp[r * g.s + s];
              }
            }
          }
          y[((n * g.k + k) * g.oh + oh) * g.ow + ow] = static_cast<float>(acc);
        }
    }
}

// Gathers, for each input element, the outputs whose window covers it (an independent formulation
// from col2im's scatter, so that the two check each other).
void reference_backward_data(const Geometry& g, const float* dy, const float* wt, float* dx,
                             bool accumulate) {
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t c = 0; c < g.c; ++c) {
      const std::int64_t grp = c / g.cg, cg = c % g.cg;
      for (std::int64_t ih = 0; ih < g.h; ++ih)
        for (std::int64_t iw = 0; iw < g.w; ++iw) {
          double acc = 0.0;
          for (std::int64_t r = 0; r < g.r; ++r) {
            const std::int64_t th = ih + g.pad_top - r * g.dil_h;
            if (th < 0 || th % g.stride_h != 0 || th / g.stride_h >= g.oh) continue;
            const std::int64_t oh = th / g.stride_h;
            for (std::int64_t s = 0; s < g.s; ++s) {
              const std::int64_t tw = iw + g.pad_left - s * g.dil_w;
              if (tw < 0 || tw % g.stride_w != 0 || tw / g.stride_w >= g.ow) continue;
              const std::int64_t ow = tw / g.stride_w;
              for (std::int64_t kk = 0; kk < g.kg; ++kk) {
                const std::int64_t k = grp * g.kg + kk;
                acc += static_cast<double>(dy[((n * g.k + k) * g.oh + oh) * g.ow + ow]) *
                       wt[((k * g.cg + cg) * g.r + r) * g.s + s];
              }
            }
          }
          float& out = dx[((n * g.c + c) * g.h + ih) * g.w + iw];
          out = accumulate ? out + static_cast<float>(acc) : static_cast<float>(acc);
        }
    }
}

void reference_backward_filter(const Geometry& g, const float* x, const float* dy, float* dw) {
  for (std::int64_t k = 0; k < g.k; ++k) {
    const std::int64_t grp = k / g.kg;
    for (std::int64_t cg = 0; cg < g.cg; ++cg)
      for (std::int64_t r = 0; r < g.r; ++r)
        for (std::int64_t s = 0; s < g.s; ++s) {
          double acc = 0.0;
          for (std::int64_t n = 0; n < g.n; ++n) {
            const float* xp = x + (n * g.c + grp * g.cg + cg) * g.hw;
            const float* dyp = dy + (n * g.k + k) * g.ohw;
            for (std::int64_t oh = 0; oh < g.oh; ++oh) {
              const std::int64_t ih = oh * g.stride_h - g.pad_top + r * g.dil_h;
              if (ih < 0 || ih >= g.h) continue;
              for (std::int64_t ow = 0; ow < g.ow; ++ow) {
                const std::int64_t iw = ow * g.stride_w - g.pad_left + s * g.dil_w;
                if (iw < 0 || iw >= g.w) continue;
                acc += static_cast<double>(xp[ih * g.w + iw]) * dyp[oh * g.ow + ow];
              }
            }
          }
          dw[((k * g.cg + cg) * g.r + r) * g.s + s] = static_cast<float>(acc);
        }
  }
}

void bias_gradient(const Geometry& g, const float* dy, float* db) {
  for (std::int64_t k = 0; k < g.k; ++k) {
    double acc = 0.0;
    for (std::int64_t n = 0; n < g.n; ++n) {
      const float* dyp = dy + (n * g.k + k) * g.ohw;
      for (std::int64_t p = 0; p < g.ohw; ++p) acc += dyp[p];
    }
    db[k] = static_cast<float>(acc);
  }
}

// ---- im2col + GEMM
// ---------------------------------------------------------------------------------- A chunk of b
// samples is unrolled into col (C*R*S rows, b*OH*OW columns; row (c*R + r)*S + s, column
// sample*OH*OW + oh*OW + ow), so that each group's rows form one contiguous GEMM operand and one
// sgemm covers the whole chunk. Outputs are staged as (K, b*OH*OW) and moved to NCHW afterwards.

void im2col(const Geometry& g, const float* x, std::int64_t b, float* col) {
  const std::int64_t cols = b * g.ohw;
  for (std::int64_t c = 0; c < g.c; ++c)
    for (std::int64_t r = 0; r < g.r; ++r)
      for (std::int64_t s = 0; s < g.s; ++s) {
        float* row = col + ((c * g.r + r) * g.s + s) * cols;
        for (std::int64_t bi = 0; bi < b; ++bi) {
          const float* xp = x + (bi * g.c + c) * g.hw;
          float* dst = row + bi * g.ohw;
          for (std::int64_t oh = 0; oh < g.oh; ++oh, dst += g.ow) {
            const std::int64_t ih = oh * g.stride_h - g.pad_top + r * g.dil_h;
            if (ih < 0 || ih >= g.h) {
              std::fill(dst, dst + g.ow, 0.0f);
              continue;
            }
            const float* xrow = xp + ih * g.w;
            for (std::int64_t ow = 0; ow < g.ow; ++ow) {
              const std::int64_t iw = ow * g.stride_w - g.pad_left + s * g.dil_w;
              dst[ow] = (iw >= 0 && iw < g.w) ? xrow[iw] : 0.0f;
            }
          }
        }
      }
}

// dx += col2im(col); the exact adjoint of im2col.
void col2im_add(const Geometry& g, const float* col, std::int64_t b, float* dx) {
  const std::int64_t cols = b * g.ohw;
  for (std::int64_t c = 0; c < g.c; ++c)
    for (std::int64_t r = 0; r < g.r; ++r)
      for (std::int64_t s = 0; s < g.s; ++s) {
        const float* row = col + ((c * g.r + r) * g.s + s) * cols;
        for (std::int64_t bi = 0; bi < b; ++bi) {
          float* xp = dx + (bi * g.c + c) * g.hw;
          const float* src = row + bi * g.ohw;
          for (std::int64_t oh = 0; oh < g.oh; ++oh, src += g.ow) {
            const std::int64_t ih = oh * g.stride_h - g.pad_top + r * g.dil_h;
            if (ih < 0 || ih >= g.h) continue;
            float* xrow = xp + ih * g.w;
            for (std::int64_t ow = 0; ow < g.ow; ++ow) {
              const std::int64_t iw = ow * g.stride_w - g.pad_left + s * g.dil_w;
              if (iw >= 0 && iw < g.w) xrow[iw] += src[ow];
            }
          }
        }
      }
}

// (b, K, OHW) NCHW samples <-> staged (K, b*OHW).
void stage_from_nchw(const Geometry& g, const float* nchw, std::int64_t b, float* staged) {
  const std::int64_t cols = b * g.ohw;
  for (std::int64_t bi = 0; bi < b; ++bi)
    for (std::int64_t k = 0; k < g.k; ++k)
      std::memcpy(staged + k * cols + bi * g.ohw, nchw + (bi * g.k + k) * g.ohw,
                  static_cast<std::size_t>(g.ohw) * sizeof(float));
}

void unstage_to_nchw(const Geometry& g, const float* staged, std::int64_t b, const float* bias,
                     float* nchw) {
  const std::int64_t cols = b * g.ohw;
  for (std::int64_t bi = 0; bi < b; ++bi)
    for (std::int64_t k = 0; k < g.k; ++k) {
      const float* src = staged + k * cols + bi * g.ohw;
      float* dst = nchw + (bi * g.k + k) * g.ohw;
      const float add = bias ? bias[k] : 0.0f;
      for (std::int64_t p = 0; p < g.ohw; ++p) dst[p] = src[p] + add;
    }
}

int blas_int(std::int64_t v) { return static_cast<int>(v); }

// oneDNN's reordered input and output copies per call: a batch is cut into chunks of samples whose
// copies fit this (a few MiB, so that a chunk's reorder in, convolution and reorder out stay in the
// last-level cache instead of streaming whole-batch tensors through memory three times).
constexpr std::size_t kOnednnChunkBytes = std::size_t{8} << 20;

class ConvCpu final : public ConvKernel {
 public:
  ConvCpu(const Conv2dDesc& desc, ConvAlgo fwd, ConvAlgo bwd_data, ConvAlgo bwd_filter,
          std::size_t workspace_limit_bytes, std::shared_ptr<Workspace> workspace)
      : desc_(desc),
        g_(desc),
        fwd_(fwd),
        bwd_data_(bwd_data),
        bwd_filter_(bwd_filter),
        workspace_(std::move(workspace)) {
    const std::size_t budget = std::min(kMaxConvWorkspaceBytes, workspace_limit_bytes);
    if (fwd_ == ConvAlgo::kOnednn) create_onednn(std::min(budget, kOnednnChunkBytes));
    const std::size_t per_sample_bytes =
        static_cast<std::size_t>((g_.crs + g_.k) * g_.ohw) * sizeof(float);
    chunk_ =
        std::clamp<std::int64_t>(static_cast<std::int64_t>(budget / per_sample_bytes), 1, g_.n);
    check_blas_dim(chunk_ * g_.ohw, kOp, "batch chunk x output pixels");
    check_blas_dim(g_.cgrs, kOp, "C/groups x R x S");
    const bool uses_gemm = fwd_ == ConvAlgo::kIm2colGemm || bwd_data_ == ConvAlgo::kIm2colGemm ||
                           bwd_filter_ == ConvAlgo::kIm2colGemm;
    workspace_bytes_ = uses_gemm ? static_cast<std::size_t>(chunk_) * per_sample_bytes : 0;
    if (onednn_) workspace_bytes_ = std::max(workspace_bytes_, onednn_->workspace_bytes());
  }

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override {
    check_f32_shape(x, kOp, "x", desc_.input_shape());
    check_f32_shape(w, kOp, "w", desc_.weight_shape());
    if (desc_.bias) check_f32(b, kOp, "bias", desc_.k);
    check_f32_shape(y, kOp, "y", desc_.output_shape());
    const float* bias = desc_.bias ? cf32(b) : nullptr;
    if (onednn_) {
      for (std::int64_t n0 = 0; n0 < g_.n; n0 += onednn_chunk_) {
        OnednnConvForward& kernel = g_.n - n0 >= onednn_chunk_ ? *onednn_ : *onednn_tail_;
        kernel.forward(cf32(x) + n0 * g_.c * g_.hw, cf32(w), bias, mf32(y) + n0 * g_.k * g_.ohw);
      }
      return;
    }
    forward_without_onednn(x, w, bias, y);
    if (desc_.relu)  // the fused ReLU (Conv2dDesc::relu) of the paths without a post-op
      for (float *p = mf32(y), *end = p + y.numel(); p != end; ++p) *p = std::max(*p, 0.0f);
  }

  // The CPU computes the statistics after its convolution, in double per channel, then rounds the
  // sums to fp32 as a GPU's fused graph gives them: the executor's pairing of a convolution with its
  // batch norm (Conv2dDesc::statistics) runs and is tested here as it runs on a GPU.
  bool forward_statistics(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& sums) override {
    if (!desc_.statistics || desc_.bias)
      throw InvalidArgument("conv2d: forward_statistics needs a kernel made with Conv2dDesc::statistics and no bias");
    check_f32(sums, kOp, "sums", 2 * desc_.k);
    forward(x, w, Tensor(), y);
    const float* yp = cf32(y);
    float* out = mf32(sums);
    for (std::int64_t k = 0; k < g_.k; ++k) {
      double s1 = 0.0, s2 = 0.0;
      for (std::int64_t n = 0; n < g_.n; ++n)
        for (const float *p = yp + (n * g_.k + k) * g_.ohw, *end = p + g_.ohw; p != end; ++p) {
          s1 += *p;
          s2 += static_cast<double>(*p) * *p;
        }
      out[k] = static_cast<float>(s1);
      out[g_.k + k] = static_cast<float>(s2);
    }
    return true;
  }

  void forward_without_onednn(const Tensor& x, const Tensor& w, const float* bias, const Tensor& y) {
    if (fwd_ == ConvAlgo::kReference) {
      reference_forward(g_, cf32(x), cf32(w), bias, mf32(y));
      return;
    }
    // A chunk of one sample (batch-1 inference, or a chunk the workspace cap cut to one): the staged
    // (K, OH*OW) layout is that sample's NCHW output, so sgemm writes y directly; a pointwise
    // convolution (1x1, stride 1, no padding) needs no im2col either: its input is the operand.
    // The strides must be checked too: 1x1 at stride 2 over 2 columns padded by 2 on the right also
    // has OW == W, but reads columns 0 and 2 (padding), not 0 and 1.
    const bool pointwise = g_.r == 1 && g_.s == 1 && g_.stride_h == 1 && g_.stride_w == 1 && g_.oh == g_.h &&
                           g_.ow == g_.w && g_.pad_top == 0 && g_.pad_left == 0;
    for (std::int64_t n0 = 0; n0 < g_.n; n0 += chunk_) {
      const std::int64_t b_now = std::min(chunk_, g_.n - n0);
      const std::int64_t cols = b_now * g_.ohw;
      const float* xs = cf32(x) + n0 * g_.c * g_.hw;
      float* ys = mf32(y) + n0 * g_.k * g_.ohw;
      const bool direct = b_now == 1;
      float* col = workspace_->floats(static_cast<std::size_t>((g_.crs + g_.k) * cols));
      const bool skip_im2col = direct && pointwise;
      if (!skip_im2col) im2col(g_, xs, b_now, col);
      const float* operand = skip_im2col ? xs : col;
      float* staged = direct ? ys : col + g_.crs * cols;
      for (std::int64_t grp = 0; grp < g_.groups; ++grp)
        sgemm(false, false, blas_int(g_.kg), blas_int(cols),
                    blas_int(g_.cgrs), 1.0f, cf32(w) + grp * g_.kg * g_.cgrs, blas_int(g_.cgrs),
                    operand + grp * g_.cgrs * cols, blas_int(cols), 0.0f,
                    staged + grp * g_.kg * cols, blas_int(cols));
      if (!direct)
        unstage_to_nchw(g_, staged, b_now, bias, ys);
      else if (bias)
        for (std::int64_t k = 0; k < g_.k; ++k)
          for (float *p = ys + k * g_.ohw, *end = p + g_.ohw; p != end; ++p) *p += bias[k];
    }
  }

  void backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx,
                     bool accumulate) override {
    check_f32_shape(dy, kOp, "dy", desc_.output_shape());
    check_f32_shape(w, kOp, "w", desc_.weight_shape());
    check_f32_shape(dx, kOp, "dx", desc_.input_shape());
    if (bwd_data_ == ConvAlgo::kReference) {
      reference_backward_data(g_, cf32(dy), cf32(w), mf32(dx), accumulate);
      return;
    }
    if (!accumulate) std::fill_n(mf32(dx), dx.numel(), 0.0f);
    for (std::int64_t n0 = 0; n0 < g_.n; n0 += chunk_) {
      const std::int64_t b_now = std::min(chunk_, g_.n - n0);
      const std::int64_t cols = b_now * g_.ohw;
      float* col = workspace_->floats(static_cast<std::size_t>((g_.crs + g_.k) * cols));
      float* staged = col + g_.crs * cols;
      stage_from_nchw(g_, cf32(dy) + n0 * g_.k * g_.ohw, b_now, staged);
      for (std::int64_t grp = 0; grp < g_.groups; ++grp)
        sgemm(true, false, blas_int(g_.cgrs), blas_int(cols),
                    blas_int(g_.kg), 1.0f, cf32(w) + grp * g_.kg * g_.cgrs, blas_int(g_.cgrs),
                    staged + grp * g_.kg * cols, blas_int(cols), 0.0f, col + grp * g_.cgrs * cols,
                    blas_int(cols));
      col2im_add(g_, col, b_now, mf32(dx) + n0 * g_.c * g_.hw);
    }
  }

  void backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw,
                       const Tensor& db) override {
    check_f32_shape(x, kOp, "x", desc_.input_shape());
    check_f32_shape(dy, kOp, "dy", desc_.output_shape());
    check_f32_shape(dw, kOp, "dw", desc_.weight_shape());
    if (desc_.bias && db.defined()) {  // undefined: the caller computed it
      check_f32(db, kOp, "dbias", desc_.k);
      bias_gradient(g_, cf32(dy), mf32(db));
    }
    if (bwd_filter_ == ConvAlgo::kReference) {
      reference_backward_filter(g_, cf32(x), cf32(dy), mf32(dw));
      return;
    }
    for (std::int64_t n0 = 0; n0 < g_.n; n0 += chunk_) {
      const std::int64_t b_now = std::min(chunk_, g_.n - n0);
      const std::int64_t cols = b_now * g_.ohw;
      float* col = workspace_->floats(static_cast<std::size_t>((g_.crs + g_.k) * cols));
      float* staged = col + g_.crs * cols;
      im2col(g_, cf32(x) + n0 * g_.c * g_.hw, b_now, col);
      stage_from_nchw(g_, cf32(dy) + n0 * g_.k * g_.ohw, b_now, staged);
      const float beta = n0 == 0 ? 0.0f : 1.0f;  // the first chunk overwrites dw, later ones add
      for (std::int64_t grp = 0; grp < g_.groups; ++grp)
        sgemm(false, true, blas_int(g_.kg), blas_int(g_.cgrs),
                    blas_int(cols), 1.0f, staged + grp * g_.kg * cols, blas_int(cols),
                    col + grp * g_.cgrs * cols, blas_int(cols), beta,
                    mf32(dw) + grp * g_.kg * g_.cgrs, blas_int(g_.cgrs));
    }
  }

  void hold_weights() override {
    if (onednn_) onednn_->hold_weights();
    if (onednn_tail_) onednn_tail_->hold_weights();
  }

  ConvAlgoInfo info() const override {
    ConvAlgoInfo i;
    i.forward = conv_algo_name(fwd_);
    i.backward_data = conv_algo_name(bwd_data_);
    i.backward_filter = conv_algo_name(bwd_filter_);
    i.math_type = "fp32";
    i.workspace_bytes = workspace_bytes_;
    i.notes = notes_;
    if (onednn_) i.notes.push_back("forward: " + onednn_->describe());
    if (workspace_bytes_ > 0 && chunk_ < g_.n)
      i.notes.push_back("im2col processes the batch in chunks of " + std::to_string(chunk_) +
                        " of " + std::to_string(g_.n) + " samples to bound its buffer");
    return i;
  }

 private:
  // The oneDNN primitive for the whole batch, or, where its reordered input and output would pass
  // the workspace budget, for chunks of samples (and one for the remainder); else im2col_gemm.
  void create_onednn(std::size_t budget) {
    onednn_chunk_ = g_.n;
    onednn_ = OnednnConvForward::create(desc_, desc_.relu, workspace_);
    if (onednn_ && onednn_->workspace_bytes() > budget && g_.n > 1) {
      const auto per_sample = std::max<std::size_t>(onednn_->workspace_bytes() / static_cast<std::size_t>(g_.n), 1);
      onednn_chunk_ = std::clamp<std::int64_t>(static_cast<std::int64_t>(budget / per_sample), 1, g_.n);
      Conv2dDesc chunk = desc_;
      chunk.n = onednn_chunk_;
      onednn_ = OnednnConvForward::create(chunk, desc_.relu, workspace_);
      if (onednn_ && g_.n % onednn_chunk_ != 0) {
        chunk.n = g_.n % onednn_chunk_;
        onednn_tail_ = OnednnConvForward::create(chunk, desc_.relu, workspace_);
        if (!onednn_tail_) onednn_.reset();
      }
      if (onednn_)
        notes_.push_back("oneDNN processes the batch in chunks of " + std::to_string(onednn_chunk_) + " of " +
                         std::to_string(g_.n) + " samples (reordered copies of at most " +
                         std::to_string(budget >> 20) + " MiB a call)");
    }
    if (!onednn_) {
      onednn_chunk_ = g_.n;
      fwd_ = ConvAlgo::kIm2colGemm;
      notes_.push_back("oneDNN has no forward implementation for this problem; im2col_gemm runs it");
    }
  }

  Conv2dDesc desc_;
  Geometry g_;
  ConvAlgo fwd_, bwd_data_, bwd_filter_;
  std::shared_ptr<Workspace> workspace_;
  std::unique_ptr<OnednnConvForward> onednn_;  // set when the forward runs through oneDNN
  std::unique_ptr<OnednnConvForward> onednn_tail_;  // the last chunk's, when chunks do not divide N
  std::int64_t onednn_chunk_ = 1;  // samples per oneDNN call
  std::vector<std::string> notes_;
  std::int64_t chunk_ = 1;  // samples per im2col chunk
  std::size_t workspace_bytes_ = 0;
};

}  // namespace

std::string_view conv_algo_name(ConvAlgo a) {
  switch (a) {
    case ConvAlgo::kReference: return "reference";
    case ConvAlgo::kIm2colGemm: return "im2col_gemm";
    case ConvAlgo::kOnednn: return "onednn";
  }
  return "im2col_gemm";
}

ConvAlgo parse_conv_algo(std::string_view name, ConvAlgo fallback) {
  if (name.empty()) return fallback;
  if (name == "reference") return ConvAlgo::kReference;
  if (name == "im2col_gemm" || name == "own:im2col_gemm") return ConvAlgo::kIm2colGemm;
  if (name == "onednn") {
    if (!onednn_available())
      throw NotSupported("the CPU convolution 'onednn' needs oneDNN, which this build lacks (install "
                         "libdnnl-dev and configure again); choose reference or im2col_gemm");
    return ConvAlgo::kOnednn;
  }
  if (name.rfind("own:", 0) == 0)
    throw InvalidArgument("the CPU backend has no convolution '" + std::string(name) +
                          "' (choose one of: reference, im2col_gemm, own:im2col_gemm; the other own "
                          "implementations run on CUDA)");
  throw InvalidArgument("unknown CPU convolution algorithm '" + std::string(name) +
                        "' (choose one of: reference, im2col_gemm, onednn)");
}

void validate_conv_desc(const Conv2dDesc& d) {
  check_at_least(d.n, 1, kOp, "batch size");
  check_at_least(d.c, 1, kOp, "input channels");
  check_at_least(d.h, 1, kOp, "input height");
  check_at_least(d.w, 1, kOp, "input width");
  check_at_least(d.k, 1, kOp, "output channels");
  check_at_least(d.r, 1, kOp, "kernel height");
  check_at_least(d.s, 1, kOp, "kernel width");
  check_at_least(d.stride_h, 1, kOp, "stride_h");
  check_at_least(d.stride_w, 1, kOp, "stride_w");
  check_at_least(d.pad_top, 0, kOp, "pad_top");
  check_at_least(d.pad_bottom, 0, kOp, "pad_bottom");
  check_at_least(d.pad_left, 0, kOp, "pad_left");
  check_at_least(d.pad_right, 0, kOp, "pad_right");
  check_at_least(d.dilation_h, 1, kOp, "dilation_h");
  check_at_least(d.dilation_w, 1, kOp, "dilation_w");
  check_at_least(d.groups, 1, kOp, "groups");
  if (d.c % d.groups != 0 || d.k % d.groups != 0)
    throw InvalidArgument("conv2d: groups = " + std::to_string(d.groups) +
                          " must divide both the input channels (" + std::to_string(d.c) +
                          ") and the output channels (" + std::to_string(d.k) + ")");
  if (d.out_h() < 1 || d.out_w() < 1 ||
      d.h + d.pad_top + d.pad_bottom < d.dilation_h * (d.r - 1) + 1 ||
      d.w + d.pad_left + d.pad_right < d.dilation_w * (d.s - 1) + 1)
    throw ShapeError("conv2d: the " + std::to_string(d.r) + "x" + std::to_string(d.s) +
                     " kernel (dilation " + std::to_string(d.dilation_h) + "x" +
                     std::to_string(d.dilation_w) + ") does not fit the padded input " +
                     d.input_shape().str());
}

std::unique_ptr<ConvKernel> make_conv_kernel(const Conv2dDesc& desc, const ConvAlgoChoice& algo,
                                             ConvAlgo default_algo,
                                             std::size_t workspace_limit_bytes,
                                             std::shared_ptr<Workspace> workspace,
                                             ConvAlgo default_forward) {
  validate_conv_desc(desc);
  for (const std::string* backward : {&algo.backward_data, &algo.backward_filter})
    if (*backward == "onednn")
      throw InvalidArgument("the CPU convolution 'onednn' runs the forward pass only (backward: "
                            "reference or im2col_gemm)");
  return std::make_unique<ConvCpu>(desc, parse_conv_algo(algo.forward, default_forward),
                                   parse_conv_algo(algo.backward_data, default_algo),
                                   parse_conv_algo(algo.backward_filter, default_algo),
                                   workspace_limit_bytes, std::move(workspace));
}

}  // namespace cnnergy::cpu
