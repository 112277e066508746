// Element-wise GPU kernels against the CPU reference: ReLU, dropout (masks equal to the CPU's in
// both layouts), add, channel concatenation (NCHW, NHWC, 2-D; overwrite and accumulate), the SGD
// step (fp32 master, low-precision working copy, skip flag read on the device), check_finite and
// top-k counting; each vectorised kernel also with a tail and with misaligned views (scalar path).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backend_cuda/cuda_fixture.hpp"

namespace cnnergy::test {
namespace {

class CudaElementwise : public CudaTest {
 protected:
  static std::int32_t read_int(Backend& b, const Tensor& t) {
    Tensor host = Tensor::host({1}, DType::kI32);
    b.download(t, host);
    return host.data<std::int32_t>()[0];
  }
  static Tensor int_on(Backend& b, std::int32_t v) {
    Tensor host = Tensor::host({1}, DType::kI32);
    host.data<std::int32_t>()[0] = v;
    Tensor dev = b.alloc({1}, DType::kI32);
    b.upload(host, dev);
    return dev;
  }
};

TEST_F(CudaElementwise, ReluForwardBackwardAndInPlace) {
  const Shape s{3, 5, 4, 7};
  for (const Precision& p : kAllPrecisions) {
    if (p.tf32) continue;
    auto g = gpu(p, Layout::kNHWC);
    if (!g) continue;
    const Tensor x = random(s, p.dtype), dy = random(s, p.dtype), dx0 = random(s, p.dtype);
    Tensor y_r = Tensor::host(s), dx_r = Tensor::host(s), dxa_r = clone(dx0);
    cpu_->relu_forward(x, y_r);
    cpu_->relu_backward(y_r, dy, dx_r, false);
    cpu_->relu_backward(y_r, dy, dxa_r, true);
    Tensor xd = upload(*g, x, p.dtype, Layout::kNHWC);
    const Tensor dyd = upload(*g, dy, p.dtype, Layout::kNHWC);
    Tensor dx = g->alloc(s, p.dtype, Layout::kNHWC), dxa = upload(*g, dx0, p.dtype, Layout::kNHWC);
    g->relu_forward(xd, xd);  // in place
    g->relu_backward(xd, dyd, dx, false);
    g->relu_backward(xd, dyd, dxa, true);
    EXPECT_TRUE(close(download(*g, xd), y_r, 0.0, std::string("relu forward ") + p.name));
    EXPECT_TRUE(close(download(*g, dx), dx_r, 0.0, std::string("relu backward ") + p.name));
    EXPECT_TRUE(
        close(download(*g, dxa), dxa_r, p.tol, std::string("relu backward accumulate ") + p.name));
  }
}

TEST_F(CudaElementwise, DropoutMasksEqualTheCpusInBothLayouts) {
  // 3 channels: element by element; 16: NHWC packs of 8 or 4 channels of one pixel.
  for (const Shape& s : {Shape{4, 3, 5, 6}, Shape{2, 16, 3, 5}}) {
    const float prob = 0.3f;
    const std::uint64_t seed = rng_.engine()();
    const Tensor x = random(s, DType::kBF16);
    Tensor mask_r = Tensor::host(s), y_r = Tensor::host(s);
    cpu_->dropout_forward(x, prob, seed, mask_r, y_r);
    const Tensor dy = random(s, DType::kBF16);
    Tensor dx_r = Tensor::host(s);
    cpu_->dropout_backward(dy, mask_r, dx_r, false);
    for (const Precision& p : kAllPrecisions) {
      if (p.tf32) continue;
      for (const Layout l : kAllLayouts) {
        auto g = gpu(p, l);
        if (!g) continue;
        const Tensor xd = upload(*g, x, p.dtype, l), dyd = upload(*g, dy, p.dtype, l);
        Tensor mask = g->alloc(s, p.dtype, l), y = g->alloc(s, p.dtype, l),
               dx = g->alloc(s, p.dtype, l);
        g->dropout_forward(xd, prob, seed, mask, y);
        g->dropout_backward(dyd, mask, dx, false);
        const Tensor m = download(*g, mask);
        // The same elements are dropped; kept ones hold 1/(1-p) as the dtype rounds it.
        for (std::int64_t i = 0; i < m.numel(); ++i)
          ASSERT_EQ(m.f32()[static_cast<std::size_t>(i)] == 0.0f,
                    mask_r.f32()[static_cast<std::size_t>(i)] == 0.0f)
              << "mask differs at " << index_str(s, i) << " " << label(p, l);
        EXPECT_TRUE(close(m, mask_r, p.tol, "dropout mask " + label(p, l)));
        EXPECT_TRUE(close(download(*g, y), y_r, p.tol, "dropout y " + label(p, l)));
        EXPECT_TRUE(close(download(*g, dx), dx_r, p.tol, "dropout dx " + label(p, l)));
      }
    }
  }
  const Shape s{4, 3, 5, 6};
  const std::uint64_t seed = rng_.engine()();
  auto g = gpu(kFp32, Layout::kNCHW);
  ASSERT_TRUE(g);
  Tensor t = g->alloc(s, DType::kF32);
  EXPECT_THROW(g->dropout_forward(t, 1.0f, seed, t, t), InvalidArgument);
}

TEST_F(CudaElementwise, AddMatchesCpu) {
  const Shape s{2, 3, 4, 5};
  for (const Precision& p : {kFp32, kFp16, kBf16}) {
    auto g = gpu(p, Layout::kNHWC);
    if (!g) continue;
    const Tensor a = random(s, p.dtype), b = random(s, p.dtype);
    Tensor y_r = Tensor::host(s);
    cpu_->add_forward(a, b, y_r);
    Tensor y = g->alloc(s, p.dtype, Layout::kNHWC);
    const Tensor ad = upload(*g, a, p.dtype, Layout::kNHWC), bd = upload(*g, b, p.dtype, Layout::kNHWC);
    g->add_forward(ad, bd, y);
    EXPECT_TRUE(close(download(*g, y), y_r, p.tol, std::string("add ") + p.name));
    // The fused add + ReLU: bit for bit the add, then the ReLU (in place), on the GPU.
    Tensor fused = g->alloc(s, p.dtype, Layout::kNHWC);
    g->add_relu_forward(ad, bd, fused);
    g->relu_forward(y, y);
    EXPECT_TRUE(all_close(download(*g, fused), download(*g, y), 0.0, 0.0)) << "add + relu " << p.name;
  }
}

TEST_F(CudaElementwise, ConcatForwardAndBackwardMatchCpu) {
  for (const bool flat : {false, true}) {
    // {3, 7, 1}: element by element; {8, 16, 8}: 16-byte packs in every dtype.
    for (const std::vector<std::int64_t>& channels :
         {std::vector<std::int64_t>{3, 7, 1}, std::vector<std::int64_t>{8, 16, 8}}) {
      auto shape = [&](std::int64_t c) { return flat ? Shape{4, c} : Shape{4, c, 5, 3}; };
      std::int64_t total = 0;
      for (const std::int64_t c : channels) total += c;
      const Shape ys = shape(total);
      for (const Precision& p : {kFp32, kFp16, kBf16}) {
        for (const Layout l : kAllLayouts) {
          auto g = gpu(p, l);
          if (!g) continue;
          std::vector<Tensor> xs, xs_dev, dxs_r, dxs, dxs0;
          for (const std::int64_t c : channels) {
            xs.push_back(random(shape(c), p.dtype));
            xs_dev.push_back(upload(*g, xs.back(), p.dtype, l));
            dxs0.push_back(random(shape(c), p.dtype));
          }
          Tensor y_r = Tensor::host(ys);
          cpu_->concat_forward(xs, y_r);
          Tensor y = g->alloc(ys, p.dtype, l);
          g->concat_forward(xs_dev, y);
          const std::string what = std::string(flat ? "concat 2-D " : "concat 4-D ") + label(p, l);
          EXPECT_TRUE(close(download(*g, y), y_r, 0.0, what + " forward"));

          const Tensor dy = random(ys, p.dtype);
          for (const bool acc : {false, true}) {
            std::vector<Tensor> ref, dev;
            for (std::size_t i = 0; i < channels.size(); ++i) {
              ref.push_back(acc ? clone(dxs0[i]) : Tensor::host(shape(channels[i])));
              dev.push_back(acc ? upload(*g, dxs0[i], p.dtype, l)
                                : g->alloc(shape(channels[i]), p.dtype, l));
            }
            cpu_->concat_backward(dy, ref, acc);
            g->concat_backward(upload(*g, dy, p.dtype, l), dev, acc);
            for (std::size_t i = 0; i < channels.size(); ++i)
              EXPECT_TRUE(
                  close(download(*g, dev[i]), ref[i], acc ? p.tol : 0.0,
                        what + " backward part " + std::to_string(i) + (acc ? " accumulate" : "")));
          }
        }
      }
    }
  }
}

TEST_F(CudaElementwise, SgdUpdateMatchesCpuAndRefreshesTheWorkingCopy) {
  const Shape s{6, 5, 3, 3};
  SgdStep step;
  step.learning_rate = 0.05f, step.momentum = 0.9f, step.weight_decay = 1e-3f,
  step.inv_grad_scale = 1.0f / 64.0f;
  for (const Precision& p : {kFp32, kFp16, kBf16}) {
    auto g = gpu(p, Layout::kNHWC);
    if (!g) continue;
    const Tensor w0 = random(s, DType::kF32), v0 = random(s, DType::kF32, -0.1f, 0.1f);
    const Tensor grad = random(s, p.dtype, -64.0f, 64.0f);
    Tensor w_r = clone(w0), v_r = clone(v0), work_r = Tensor::host(s, p.dtype);
    cpu_->sgd_update(w_r, grad, v_r, p.dtype == DType::kF32 ? Tensor{} : work_r, step, Tensor{});
    cpu_->sgd_update(w_r, grad, v_r, p.dtype == DType::kF32 ? Tensor{} : work_r, step, Tensor{});

    Tensor w = upload(*g, w0, DType::kF32, Layout::kNHWC),
           v = upload(*g, v0, DType::kF32, Layout::kNHWC);
    const Tensor gd = upload(*g, grad, p.dtype, Layout::kNHWC);
    Tensor work = p.dtype == DType::kF32 ? Tensor{} : g->alloc(s, p.dtype, Layout::kNHWC);
    const Tensor no_skip = int_on(*g, 0);
    g->sgd_update(w, gd, v, work, step, no_skip);
    g->sgd_update(w, gd, v, work, step, Tensor{});
    EXPECT_TRUE(close(download(*g, w), w_r, 1e-6, std::string("sgd master ") + p.name));
    EXPECT_TRUE(close(download(*g, v), v_r, 1e-6, std::string("sgd momentum ") + p.name));
    if (work.defined()) {
      EXPECT_TRUE(close(download(*g, work), to_f32_nchw(work_r), p.tol,
                        std::string("sgd working copy ") + p.name));
    }

    // A non-zero skip flag (an overflowed fp16 step) changes nothing.
    const Tensor skip = int_on(*g, 1);
    const Tensor w_before = download(*g, w), v_before = download(*g, v);
    g->sgd_update(w, gd, v, work, step, skip);
    EXPECT_TRUE(all_close(download(*g, w), w_before, 0.0, 0.0))
        << "skipped step changed the master";
    EXPECT_TRUE(all_close(download(*g, v), v_before, 0.0, 0.0))
        << "skipped step changed the momentum";
  }
}

// A solver's step in one launch per dtype pair (sgd_update_all over its uploaded table) is each
// parameter's sgd_update bit for bit: sizes below a pack, across the kernel's chunks, and views at
// odd offsets (no 16-byte packs), each with its own weight decay; with and without momentum; a
// second step reusing the table; a set skip flag changes nothing.
TEST_F(CudaElementwise, SgdUpdateAllIsEachUpdateBitForBit) {
  const std::int64_t sizes[] = {1, 3, 4, 7, 1000, 40000, 70001};
  for (const Precision& p : {kFp32, kFp16, kBf16}) {
    for (const float momentum : {0.9f, 0.0f}) {
      auto g = gpu(p, Layout::kNCHW);
      if (!g) continue;
      const std::string what = std::string(p.name) + (momentum != 0.0f ? " momentum" : " plain");
      SgdStep step;
      step.learning_rate = 0.05f, step.momentum = momentum, step.inv_grad_scale = 1.0f / 64.0f;
      struct Param {
        Tensor master, grad, momentum, working;
      };
      // Two copies of every parameter: one for sgd_update_all, one for sgd_update.
      std::vector<Param> all, each;
      std::vector<float> decay;
      auto add = [&](std::int64_t n, std::int64_t offset) {
        const Shape s{n + offset};
        const Tensor w0 = random(s, DType::kF32), v0 = random(s, DType::kF32, -0.1f, 0.1f);
        const Tensor g0 = random(s, p.dtype, -64.0f, 64.0f);
        for (auto* set : {&all, &each}) {
          auto view = [&](const Tensor& t) { return t.batch_slice(offset, n); };
          Param q;
          q.master = view(upload(*g, w0, DType::kF32, Layout::kNCHW));
          q.grad = view(upload(*g, g0, p.dtype, Layout::kNCHW));
          if (momentum != 0.0f) q.momentum = view(upload(*g, v0, DType::kF32, Layout::kNCHW));
          if (p.dtype != DType::kF32) q.working = view(g->alloc(s, p.dtype, Layout::kNCHW));
          set->push_back(q);
        }
        decay.push_back(decay.size() % 2 == 0 ? 1e-3f : 0.0f);
      };
      for (const std::int64_t n : sizes) add(n, 0);
      add(1001, 1);
      add(40001, 3);
      std::vector<SgdUpdate> updates;
      for (std::size_t i = 0; i < all.size(); ++i)
        updates.push_back({all[i].master, all[i].grad, all[i].momentum, all[i].working, decay[i]});
      const Tensor no_skip = int_on(*g, 0);
      for (int round = 0; round < 2; ++round) {
        g->sgd_update_all(updates, step, round == 0 ? no_skip : Tensor{});
        for (std::size_t i = 0; i < each.size(); ++i) {
          SgdStep one = step;
          one.weight_decay = decay[i];
          g->sgd_update(each[i].master, each[i].grad, each[i].momentum, each[i].working, one, Tensor{});
        }
        for (std::size_t i = 0; i < all.size(); ++i) {
          const std::string which = what + " parameter " + std::to_string(i) + " round " + std::to_string(round);
          EXPECT_TRUE(all_close(download(*g, all[i].master), download(*g, each[i].master), 0.0, 0.0)) << which;
          if (momentum != 0.0f) {
            EXPECT_TRUE(all_close(download(*g, all[i].momentum), download(*g, each[i].momentum), 0.0, 0.0)) << which;
          }
          if (p.dtype != DType::kF32) {
            EXPECT_TRUE(all_close(download(*g, all[i].working), download(*g, each[i].working), 0.0, 0.0)) << which;
          }
        }
      }
      const Tensor before = download(*g, all[5].master);
      g->sgd_update_all(updates, step, int_on(*g, 1));
      EXPECT_TRUE(all_close(download(*g, all[5].master), before, 0.0, 0.0)) << what << ": a skipped step changed a master";
    }
  }
}

TEST_F(CudaElementwise, CheckFiniteFlagsInfAndNan) {
  for (const Precision& p : {kFp32, kFp16, kBf16}) {
    auto g = gpu(p, Layout::kNCHW);
    if (!g) continue;
    Tensor x = random({1000}, p.dtype, -100.0f, 100.0f);
    const Tensor flag = int_on(*g, 0);
    g->check_finite(upload(*g, x, p.dtype, Layout::kNCHW), flag);
    EXPECT_EQ(read_int(*g, flag), 0) << p.name;
    // fp16 overflows to Inf above 65504: a finite fp32 value becomes Inf in the upload.
    x.f32()[417] = p.dtype == DType::kF16 ? 1e6f : std::numeric_limits<float>::infinity();
    g->check_finite(upload(*g, x, p.dtype, Layout::kNCHW), flag);
    EXPECT_EQ(read_int(*g, flag), 1) << p.name;
    const Tensor flag2 = int_on(*g, 0);
    x.f32()[417] = 0.0f;
    x.f32()[999] = std::numeric_limits<float>::quiet_NaN();
    g->check_finite(upload(*g, x, p.dtype, Layout::kNCHW), flag2);
    EXPECT_EQ(read_int(*g, flag2), 1) << p.name;
  }
}

// 3 x 1367 = 4101 elements: whole 16-byte packs and a tail in every dtype; offset 1 puts every
// operand off the 16-byte alignment, so the scalar path runs the whole tensor.
TEST_F(CudaElementwise, PacksTailsAndMisalignedViewsMatchCpu) {
  const Shape s{3, 1367};
  const float prob = 0.25f;
  const std::uint64_t seed = rng_.engine()();
  SgdStep step;
  step.learning_rate = 0.05f, step.momentum = 0.9f, step.weight_decay = 1e-3f,
  step.inv_grad_scale = 0.5f;
  for (const Precision& p : {kFp32, kFp16, kBf16}) {
    auto g = gpu(p, Layout::kNCHW);
    if (!g) continue;
    const Tensor x = random(s, p.dtype), x2 = random(s, p.dtype), dy = random(s, p.dtype),
                 dx0 = random(s, p.dtype);
    Tensor y_r = Tensor::host(s), dx_r = Tensor::host(s), dxa_r = clone(dx0),
           add_r = Tensor::host(s);
    cpu_->relu_forward(x, y_r);
    cpu_->relu_backward(y_r, dy, dx_r, false);
    cpu_->relu_backward(y_r, dy, dxa_r, true);
    cpu_->add_forward(x, x2, add_r);
    Tensor mask_r = Tensor::host(s), drop_r = Tensor::host(s), ddx_r = clone(dx0);
    cpu_->dropout_forward(x, prob, seed, mask_r, drop_r);
    cpu_->dropout_backward(dy, mask_r, ddx_r, true);
    const Tensor w0 = random(s, DType::kF32), v0 = random(s, DType::kF32, -0.1f, 0.1f);
    Tensor w_r = clone(w0), v_r = clone(v0), work_r = Tensor::host(s, p.dtype);
    cpu_->sgd_update(w_r, dy, v_r, p.dtype == DType::kF32 ? Tensor{} : work_r, step, Tensor{});

    for (const std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
      const std::string what = std::string(p.name) + " offset " + std::to_string(offset);
      auto put = [&](const Tensor& host, DType t) {
        return upload_view(*g, host, t, Layout::kNCHW, offset);
      };
      const Tensor xd = put(x, p.dtype), dyd = put(dy, p.dtype);
      Tensor y = put(Tensor::host(s), p.dtype), dx = put(Tensor::host(s), p.dtype),
             dxa = put(dx0, p.dtype), sum = put(Tensor::host(s), p.dtype);
      g->relu_forward(xd, y);
      g->relu_backward(y, dyd, dx, false);
      g->relu_backward(y, dyd, dxa, true);
      g->add_forward(xd, put(x2, p.dtype), sum);
      EXPECT_TRUE(close(download(*g, y), y_r, 0.0, "relu forward " + what));
      EXPECT_TRUE(close(download(*g, dx), dx_r, 0.0, "relu backward " + what));
      EXPECT_TRUE(close(download(*g, dxa), dxa_r, p.tol, "relu backward accumulate " + what));
      EXPECT_TRUE(close(download(*g, sum), add_r, p.tol, "add " + what));

      Tensor mask = put(Tensor::host(s), p.dtype), drop = put(Tensor::host(s), p.dtype),
             ddx = put(dx0, p.dtype);
      g->dropout_forward(xd, prob, seed, mask, drop);
      g->dropout_backward(dyd, mask, ddx, true);
      const Tensor m = download(*g, mask);
      for (std::int64_t i = 0; i < m.numel(); ++i)
        ASSERT_EQ(m.f32()[static_cast<std::size_t>(i)] == 0.0f,
                  mask_r.f32()[static_cast<std::size_t>(i)] == 0.0f)
            << "dropout mask differs at " << i << " " << what;
      EXPECT_TRUE(close(download(*g, drop), drop_r, p.tol, "dropout y " + what));
      EXPECT_TRUE(close(download(*g, ddx), ddx_r, p.tol, "dropout dx accumulate " + what));

      Tensor w = put(w0, DType::kF32), v = put(v0, DType::kF32);
      Tensor work = p.dtype == DType::kF32 ? Tensor{} : put(Tensor::host(s), p.dtype);
      g->sgd_update(w, dyd, v, work, step, Tensor{});
      EXPECT_TRUE(close(download(*g, w), w_r, 1e-6, "sgd master " + what));
      EXPECT_TRUE(close(download(*g, v), v_r, 1e-6, "sgd momentum " + what));
      if (work.defined()) {
        EXPECT_TRUE(close(download(*g, work), to_f32_nchw(work_r), p.tol, "sgd working " + what));
      }

      // A non-finite value inside a pack, then only in the tail.
      for (const std::int64_t at : {std::int64_t{17}, s.numel() - 1}) {
        Tensor bad = clone(x);
        bad.f32()[static_cast<std::size_t>(at)] = std::numeric_limits<float>::quiet_NaN();
        const Tensor flag = int_on(*g, 0);
        g->check_finite(put(x, p.dtype), flag);
        EXPECT_EQ(read_int(*g, flag), 0) << what;
        g->check_finite(put(bad, p.dtype), flag);
        EXPECT_EQ(read_int(*g, flag), 1) << "NaN at " << at << " " << what;
      }
    }
  }
}

TEST_F(CudaElementwise, CountTopkMatchesCpuIncludingTies) {
  for (const Precision& p : {kFp32, kFp16, kBf16}) {
    auto g = gpu(p, Layout::kNCHW);
    if (!g) continue;
    const std::int64_t n = 300, classes = 20;
    // Coarse values: many ties, which count in the label's favour on both backends.
    Tensor logits = Tensor::host({n, classes});
    for (float& v : logits.f32()) v = static_cast<float>(rng_.next_u32() % 8) / 4.0f;
    const Tensor labels = random_labels(n, classes, rng_);
    Tensor lab = g->alloc({n}, DType::kI32);
    g->upload(labels, lab);
    const Tensor ld = upload(*g, logits, p.dtype, Layout::kNCHW);
    for (const int k : {1, 5}) {
      Tensor correct_r = Tensor::host({1}, DType::kI32);
      correct_r.data<std::int32_t>()[0] = 3;
      cpu_->count_topk(logits, labels, k, correct_r);
      const Tensor correct = int_on(*g, 3);
      g->count_topk(ld, lab, k, correct);
      EXPECT_EQ(read_int(*g, correct), correct_r.data<std::int32_t>()[0])
          << "top-" << k << " " << p.name;
    }
  }
}

}  // namespace
}  // namespace cnnergy::test
