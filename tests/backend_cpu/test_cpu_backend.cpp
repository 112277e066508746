// The CPU Backend object: creation (fp32/NCHW only), memory accounting and out-of-memory errors,
// host-timestamp events, transfers, converting copies, fill and accumulate.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "backend/cpu/cpu_backend.hpp"
#include "backend_cpu/cpu_fixture.hpp"
#include "core/errors.hpp"

namespace cnnergy::test {
namespace {

class CpuBackend : public CpuBackendTest {};

TEST_F(CpuBackend, IdentifiesItself) {
  EXPECT_EQ(backend_->name(), "cpu");
  EXPECT_FALSE(backend_->device_name().empty());
  EXPECT_TRUE(backend_->device().is_cpu());
  EXPECT_EQ(backend_->dtype(), DType::kF32);
  EXPECT_EQ(backend_->layout(), Layout::kNCHW);
}

TEST_F(CpuBackend, OnlyFp32AndNchw) {
  for (const DType t : {DType::kF16, DType::kBF16}) {
    BackendOptions o;
    o.dtype = t;
    try {
      create_backend(o);
      FAIL() << "dtype " << dtype_name(t) << " accepted";
    } catch (const NotSupported& e) {
      EXPECT_NE(std::string(e.what()).find("fp32/NCHW only"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
    }
  }
  BackendOptions nhwc;
  nhwc.layout = Layout::kNHWC;
  EXPECT_THROW(create_backend(nhwc), NotSupported);
  BackendOptions tf32;
  tf32.allow_tf32 = true;  // meaningless on the CPU, ignored
  EXPECT_NO_THROW(create_backend(tf32));
  BackendOptions gpu;
  gpu.device = Device{DeviceKind::kCuda, 0};
  EXPECT_THROW(cpu::create_cpu_backend(gpu), InvalidArgument);
}

TEST_F(CpuBackend, TracksMemoryInUseAndPeak) {
  const auto base = backend_->memory_stats();
  EXPECT_EQ(base.in_use_bytes, 0u);
  EXPECT_GT(base.total_bytes, 0u);
  {
    const Tensor a = backend_->alloc({1000}, DType::kF32);
    const Tensor b = backend_->alloc({10, 10}, DType::kI32);
    EXPECT_EQ(backend_->memory_stats().in_use_bytes, 4400u);
    EXPECT_EQ(a.device(), Device{});
    EXPECT_EQ(a.f32()[999], 0.0f);
  }
  const auto after = backend_->memory_stats();
  EXPECT_EQ(after.in_use_bytes, 0u);
  EXPECT_EQ(after.peak_bytes, 4400u);
  // A buffer may outlive its backend.
  auto other = create_backend(BackendOptions{});
  const Tensor kept = other->alloc({4}, DType::kF32);
  other.reset();
  kept.f32()[3] = 1.0f;
  EXPECT_EQ(kept.f32()[3], 1.0f);
}

TEST_F(CpuBackend, OutOfMemoryNamesTheSize) {
  const std::size_t huge = std::size_t{1} << 60;
  try {
    backend_->alloc_buffer(huge);
    FAIL() << "an exabyte allocation succeeded";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(huge)), std::string::npos) << e.what();
  }
  EXPECT_THROW(backend_->alloc_buffer(~std::size_t{0}), OutOfMemory);
  EXPECT_EQ(backend_->memory_stats().in_use_bytes, 0u);
}

TEST_F(CpuBackend, EventsMeasureHostTime) {
  auto start = backend_->make_event(), stop = backend_->make_event();
  EXPECT_THROW((void)stop->elapsed_ms(*start), InvalidArgument);  // not recorded yet
  start->record();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop->record();
  stop->synchronize();
  EXPECT_TRUE(stop->ready());
  const double ms = stop->elapsed_ms(*start);
  EXPECT_GE(ms, 19.0);
  EXPECT_LT(ms, 5000.0);
  EXPECT_LE(start->elapsed_ms(*stop), 0.0);
}

TEST_F(CpuBackend, TransfersAndConvertingCopies) {
  const Tensor host = random_tensor({2, 3, 4, 5}, rng_);
  const Tensor dev = backend_->alloc(host.shape(), DType::kF32);
  backend_->upload(host, dev, true);
  backend_->synchronize();
  const Tensor back = Tensor::host(host.shape());
  backend_->download(dev, back);
  EXPECT_TRUE(all_close(back, host, 0.0, 0.0));
  EXPECT_THROW(backend_->upload(Tensor::host({2, 3}), dev), InvalidArgument);
  EXPECT_THROW(backend_->download(dev, Tensor::host(host.shape(), DType::kF16)), InvalidArgument);

  const Tensor nhwc = Tensor::host(host.shape(), DType::kF32, Layout::kNHWC);
  backend_->copy(dev, nhwc);  // layout conversion of logical elements
  EXPECT_TRUE(all_close(nhwc, host, 0.0, 0.0));
  EXPECT_NE(nhwc.f32()[1], host.f32()[1]);  // really stored differently
  const Tensor bf16 = Tensor::host(host.shape(), DType::kBF16);
  backend_->copy(nhwc, bf16);
  EXPECT_TRUE(all_close(bf16, host, 0.0, 1e-2));
  const Tensor flat = Tensor::host({2, 60});
  backend_->copy(dev, flat);  // same bytes, other shape
  EXPECT_EQ(flat.f32()[59], host.f32()[59]);
  EXPECT_THROW(backend_->copy(nhwc, Tensor::host({2, 60}, DType::kBF16)), ShapeError);
}

TEST_F(CpuBackend, FillAndAccumulate) {
  const Tensor a = Tensor::host({7}), b = random_tensor({7}, rng_),
               i32 = Tensor::host({3}, DType::kI32);
  backend_->fill(a, 2.5f);
  for (const float v : a.f32()) EXPECT_EQ(v, 2.5f);
  backend_->accumulate(b, a);
  for (std::size_t i = 0; i < 7; ++i) EXPECT_EQ(a.f32()[i], 2.5f + b.f32()[i]);
  backend_->fill(i32, 3.0f);
  backend_->accumulate(i32, i32);
  EXPECT_EQ(i32.data<std::int32_t>()[2], 6);
  const Tensor h = Tensor::host({2}, DType::kF16);
  backend_->fill(h, 1.5f);
  EXPECT_EQ(half_bits_to_float(h.data<std::uint16_t>()[1]), 1.5f);
  EXPECT_THROW(backend_->accumulate(b, Tensor::host({6})), ShapeError);
  EXPECT_THROW(backend_->fill(Tensor(), 0.0f), InvalidArgument);
}

}  // namespace
}  // namespace cnnergy::test
