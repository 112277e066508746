// Shared by the GPU training tests: skip without a GPU, an fp32 (TF32 off) or other GPU backend,
// and a relative-norm comparison of a device tensor with a host reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/ops.hpp"
#include "core/tensor.hpp"

namespace cnnergy::test {

class GpuTraining : public ::testing::Test {
 public:
  static std::unique_ptr<Backend> gpu(DType dtype = DType::kF32, Layout layout = Layout::kNCHW,
                                      const std::string& policy = "auto", bool fuse_epilogue = false,
                                      StatisticsFusion statistics = BackendOptions{}.conv_statistics_fusion) {
    BackendOptions o;
    o.device = Device{DeviceKind::kCuda, 0};
    o.dtype = dtype;
    o.layout = layout;
    o.conv_algo_policy = policy;
    o.conv_epilogue_fusion = fuse_epilogue;
    o.conv_space_to_depth = false;  // the plain first layer these tests were written for
    o.conv_statistics_fusion = statistics;
    return create_backend(o);
  }

 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA GPU on this machine";
  }
};

// Host fp32 NCHW copy of any tensor of `backend`.
inline Tensor to_host_f32(Backend& backend, const Tensor& t) {
  const Tensor host = Tensor::host(t.shape(), t.dtype(), t.layout());
  backend.download(t, host);
  return to_f32_nchw(host);
}

// ||a - b|| / ||b|| (b the reference); 0 when both are zero.
inline double relative_norm_error(const Tensor& a, const Tensor& b) {
  const auto x = a.f32(), y = b.f32();
  double diff = 0, ref = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    diff += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    ref += static_cast<double>(y[i]) * y[i];
  }
  if (ref == 0) return diff == 0 ? 0 : INFINITY;
  return std::sqrt(diff / ref);
}

}  // namespace cnnergy::test
