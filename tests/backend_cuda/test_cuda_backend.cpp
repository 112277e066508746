// The CUDA Backend object: creation errors (no GPU, bad index, bad dtype, bad algorithm policy),
// memory (zero-filled buffers, in-use/peak accounting, reuse, out-of-memory message, pinned host
// memory), transfers, converting copies, fill, accumulate (packed, tail and misaligned paths) and
// events.
#include <gtest/gtest.h>

#include <algorithm>

#include <cstdint>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_allocator.hpp"
#include "backend/cuda/cuda_graph.hpp"
#include "backend_cuda/cuda_fixture.hpp"

namespace cnnergy::test {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs on every machine: without a GPU the factory must say so with NotSupported, not crash.
TEST(CudaBackendNoGpu, DeviceCountNeverThrowsAndFactoryExplains) {
  int count = -1;
  EXPECT_NO_THROW(count = cuda::device_count());
  EXPECT_GE(count, 0);
  EXPECT_EQ(cuda_device_count(), count);
  if (count > 0) GTEST_SKIP() << "a GPU is present; the no-GPU path cannot be exercised here";
  BackendOptions o;
  o.device = Device{DeviceKind::kCuda, 0};
  try {
    cuda::create_cuda_backend(o);
    FAIL() << "create_cuda_backend succeeded without a GPU";
  } catch (const NotSupported& e) {
    EXPECT_TRUE(contains(e.what(), "no CUDA GPU found")) << e.what();
  }
  EXPECT_THROW(create_backend(o), NotSupported);
}

TEST(CudaBackendNoGpu, AlgorithmNamesPerDirection) {
  const auto fwd = cuda::conv_algorithm_names("forward");
  ASSERT_EQ(fwd.size(), 8u);
  EXPECT_EQ(fwd.front(), "implicit_gemm");
  EXPECT_EQ(cuda::conv_algorithm_names("backward_data").size(), 6u);
  const auto bwf = cuda::conv_algorithm_names("backward_filter");
  ASSERT_EQ(bwf.size(), 6u);
  EXPECT_EQ(bwf[3], "algo_3");
  EXPECT_THROW(cuda::conv_algorithm_names("sideways"), InvalidArgument);
}

// Size classes of the caching allocator (no device needed): 512-byte steps up to 1 MiB, then an
// eighth of the power of two below but never more than 2 MiB, so one huge buffer (the executor's
// activation arena) is not rounded up by a gigabyte.
TEST(CudaBackendNoGpu, AllocatorSizeClassesWasteLittle) {
  using cuda::CachingAllocator;
  EXPECT_EQ(CachingAllocator::size_class(1), 512u);
  EXPECT_EQ(CachingAllocator::size_class(4000), 4096u);
  EXPECT_EQ(CachingAllocator::size_class(std::size_t{1} << 20), std::size_t{1} << 20);
  EXPECT_EQ(CachingAllocator::size_class((std::size_t{1} << 20) + 1), (std::size_t{1} << 20) + (std::size_t{1} << 17));
  const std::size_t mib = std::size_t{1} << 20;
  std::size_t previous = 0;
  for (const std::size_t request : {3 * mib + 7, 17 * mib, 411 * mib + 12345, 10315 * mib + 1, 70000 * mib}) {
    const std::size_t c = CachingAllocator::size_class(request);
    EXPECT_GE(c, request);
    EXPECT_LT(c - request, std::min(request / 8 + 1, 2 * mib)) << request;
    EXPECT_GT(c, previous);
    previous = c;
  }
  EXPECT_THROW(CachingAllocator::size_class(std::size_t{1} << 62), OutOfMemory);
}

class CudaBackend : public CudaTest {
 protected:
  // k/64 for k in [-128, 128]: exact in fp32, fp16 and bf16, so conversions must be lossless.
  Tensor exact_in_every_dtype(const Shape& shape) {
    Tensor t = Tensor::host(shape);
    for (float& v : t.f32())
      v = static_cast<float>(static_cast<int>(rng_.next_u32() % 257) - 128) / 64.0f;
    return t;
  }
};

TEST_F(CudaBackend, IdentifiesItselfAndRejectsBadOptions) {
  auto b = gpu(kFp32, Layout::kNCHW);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->name(), "cuda");
  EXPECT_FALSE(b->device_name().empty());
  EXPECT_TRUE(b->device().is_cuda());

  BackendOptions bad_index;
  bad_index.device = Device{DeviceKind::kCuda, cuda::device_count()};
  try {
    create_backend(bad_index);
    FAIL() << "device index " << cuda::device_count() << " accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "GPU(s)")) << e.what();
  }
  BackendOptions int_dtype;
  int_dtype.device = Device{DeviceKind::kCuda, 0};
  int_dtype.dtype = DType::kI32;
  EXPECT_THROW(create_backend(int_dtype), InvalidArgument);

  BackendOptions bad_policy;
  bad_policy.device = Device{DeviceKind::kCuda, 0};
  bad_policy.conv_algo_policy = "fastest_please";
  try {
    create_backend(bad_policy);
    FAIL() << "policy 'fastest_please' accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "fastest_please")) << e.what();
    EXPECT_TRUE(contains(e.what(), "implicit_precomp_gemm")) << e.what();
    EXPECT_TRUE(contains(e.what(), "winograd_nonfused")) << e.what();
    EXPECT_TRUE(contains(e.what(), "algo_3")) << e.what();
    EXPECT_TRUE(contains(e.what(), "graph_find")) << e.what();
    EXPECT_TRUE(contains(e.what(), "auto")) << e.what();
  }
  BackendOptions no_candidates;
  no_candidates.device = Device{DeviceKind::kCuda, 0};
  no_candidates.conv_search_candidates = 0;
  try {
    create_backend(no_candidates);
    FAIL() << "conv_search_candidates 0 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "conv_search_candidates")) << e.what();
  }
  EXPECT_THROW(cuda::conv_algo_cache_stats(*cpu_), InvalidArgument);
  EXPECT_NE(cuda::native_stream(*b), nullptr);
  EXPECT_THROW(cuda::native_stream(*cpu_), InvalidArgument);
}

TEST_F(CudaBackend, BuffersAreZeroedAndAccounted) {
  auto b = gpu(kFp32, Layout::kNCHW);
  ASSERT_TRUE(b);
  const auto base = b->memory_stats();
  EXPECT_GT(base.total_bytes, std::size_t{1} << 30);
  std::size_t held = 0;
  {
    // Dirty a block, free it, and get it back from the cache: it must come back zeroed.
    {
      Tensor dirty = b->alloc({1000}, DType::kF32);
      b->fill(dirty, 3.5f);
      b->synchronize();
    }
    const Tensor t = b->alloc({1000}, DType::kF32);
    const Tensor host = download(*b, t);
    for (const float v : host.f32()) ASSERT_EQ(v, 0.0f);
    held = b->memory_stats().in_use_bytes - base.in_use_bytes;
    EXPECT_GE(held, 4000u);
    EXPECT_LT(held, 8192u);  // a 512-byte size class above 4000 bytes
    EXPECT_GE(b->memory_stats().peak_bytes, base.in_use_bytes + held);
  }
  EXPECT_EQ(b->memory_stats().in_use_bytes, base.in_use_bytes);
  // A buffer may outlive its backend.
  Tensor kept = b->alloc({4}, DType::kF32);
  b.reset();
  EXPECT_EQ(kept.numel(), 4);
}

TEST_F(CudaBackend, OutOfMemorySaysWhatWasAskedAndWhatIsFree) {
  auto b = gpu(kFp32, Layout::kNCHW);
  ASSERT_TRUE(b);
  const std::size_t absurd = std::size_t{1} << 50;  // 1 PiB
  try {
    b->alloc_buffer(absurd);
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const OutOfMemory& e) {
    EXPECT_TRUE(contains(e.what(), std::to_string(absurd))) << e.what();
    EXPECT_TRUE(contains(e.what(), "free")) << e.what();
  }
  EXPECT_THROW(b->alloc_buffer(~std::size_t{0}), OutOfMemory);
  // The backend still works afterwards (the failed allocation left no sticky error).
  const Tensor t = b->alloc({16}, DType::kF32);
  b->fill(t, 2.0f);
  EXPECT_EQ(download(*b, t).f32()[15], 2.0f);
}

TEST_F(CudaBackend, TransfersAndConvertingCopiesInEveryDtypeAndLayout) {
  auto b = gpu(kFp32, Layout::kNCHW);
  ASSERT_TRUE(b);
  // A layout change is a per-sample transpose with three kernels: few channels (3, a network's
  // input), few pixels (1x3), and 32x32 tiles (40 channels, 9x7 and 33x35 pixels: partial tiles).
  for (const Shape& each : {Shape{2, 5, 3, 7}, Shape{3, 3, 9, 11}, Shape{2, 40, 1, 3}, Shape{2, 40, 9, 7},
                            Shape{1, 33, 33, 35}}) {
    const Tensor each_src = exact_in_every_dtype(each);
    for (const DType from : {DType::kF32, DType::kF16, DType::kBF16})
      for (const Layout from_layout : kAllLayouts) {
        const Tensor dev = upload(*b, each_src, from, from_layout);
        for (const DType to : {DType::kF32, DType::kF16, DType::kBF16})
          for (const Layout to_layout : kAllLayouts) {
            Tensor dst = b->alloc(each, to, to_layout);
            b->copy(dev, dst);
            EXPECT_TRUE(all_close(download(*b, dst), each_src, 0.0, 0.0))
                << each.str() << " " << dtype_name(from) << "/" << layout_name(from_layout) << " -> "
                << dtype_name(to) << "/" << layout_name(to_layout);
            // Accumulating into a tensor of the other layout adds the same values once more.
            b->accumulate(dev, dst);
            Tensor twice = clone(each_src);
            for (float& v : twice.f32()) v *= 2.0f;
            EXPECT_TRUE(all_close(download(*b, dst), twice, 0.0, 0.0)) << "accumulate " << each.str();
          }
      }
  }
  const Shape shape{2, 5, 3, 7};
  const Tensor src = exact_in_every_dtype(shape);
  // 2-D tensors and int32 (exact beyond 2^24).
  Tensor ints = Tensor::host({3, 4}, DType::kI32);
  for (int i = 0; i < 12; ++i) ints.data<std::int32_t>()[i] = (1 << 25) + 2 * i + 1;
  Tensor dev_ints = b->alloc({3, 4}, DType::kI32);
  b->upload(ints, dev_ints);
  Tensor copy_ints = b->alloc({3, 4}, DType::kI32);
  b->copy(dev_ints, copy_ints);
  Tensor back = Tensor::host({3, 4}, DType::kI32);
  b->download(copy_ints, back);
  EXPECT_EQ(std::memcmp(back.raw(), ints.raw(), ints.size_bytes()), 0);

  // Pinned host memory and an asynchronous upload.
  auto pinned = b->alloc_pinned_host(src.size_bytes());
  Tensor pinned_host(shape, DType::kF32, Layout::kNCHW, pinned);
  std::memcpy(pinned_host.raw(), src.raw(), src.size_bytes());
  Tensor dev = b->alloc(shape, DType::kF32);
  b->upload(pinned_host, dev, /*async=*/true);
  b->synchronize();
  EXPECT_TRUE(all_close(download(*b, dev), src, 0.0, 0.0));

  // Transfers do not convert.
  Tensor half_dev = b->alloc(shape, DType::kF16);
  EXPECT_THROW(b->upload(src, half_dev), InvalidArgument);
}

TEST_F(CudaBackend, FillAndAccumulateConvert) {
  auto b = gpu(kFp32, Layout::kNCHW);
  ASSERT_TRUE(b);
  const Shape shape{3, 4, 5, 2};
  const Tensor a = exact_in_every_dtype(shape);
  const Tensor c = exact_in_every_dtype(shape);
  for (const DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    Tensor x = b->alloc(shape, t, Layout::kNHWC);
    b->fill(x, -1.25f);
    // Keep each downloaded tensor in a variable: a range-for over download(...).f32() iterates a
    // span into a temporary that C++20 destroys before the loop body runs.
    const Tensor filled = download(*b, x);
    for (const float v : filled.f32()) ASSERT_EQ(v, -1.25f) << dtype_name(t);
    b->fill(x, 0.0f);
    const Tensor zeroed = download(*b, x);
    for (const float v : zeroed.f32()) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  }
  Tensor flag = b->alloc({1}, DType::kI32);
  b->fill(flag, 7.0f);
  Tensor host_flag = Tensor::host({1}, DType::kI32);
  b->download(flag, host_flag);
  EXPECT_EQ(host_flag.data<std::int32_t>()[0], 7);

  // fp32 NCHW += fp16 NHWC
  Tensor dst = upload(*b, a, DType::kF32, Layout::kNCHW);
  const Tensor src = upload(*b, c, DType::kF16, Layout::kNHWC);
  b->accumulate(src, dst);
  Tensor expected = clone(a);
  for (std::int64_t i = 0; i < expected.numel(); ++i) expected.f32()[i] += c.f32()[i];
  EXPECT_TRUE(all_close(download(*b, dst), expected, 1e-6, 1e-6));
}

// The element-wise kernels move 16-byte packs where the pointers allow and single elements
// elsewhere: counts that leave a tail, and views one element into a buffer (not 16-byte aligned),
// must give the same exact results.
TEST_F(CudaBackend, FillAndConvertCoverPacksTailsAndMisalignedViews) {
  auto b = gpu(kFp32, Layout::kNCHW);
  ASSERT_TRUE(b);
  for (const std::int64_t count : {1, 7, 8, 9, 4099}) {
    for (const DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32}) {
      const std::size_t elem = dtype_size_bytes(t);
      auto buffer = b->alloc_buffer(static_cast<std::size_t>(count + 1) * elem);
      const Tensor whole({count + 1}, t, Layout::kNCHW, buffer);
      const Tensor view({count}, t, Layout::kNCHW, buffer, elem);  // starts at element 1
      b->fill(whole, 3.0f);
      b->fill(view, -1.25f);
      const Tensor host = Tensor::host({count + 1}, t);
      b->download(whole, host);
      const Tensor got = to_f32_nchw(host);
      const float expected = t == DType::kI32 ? -1.0f : -1.25f;  // int32 truncates, as a cast
      ASSERT_EQ(got.f32()[0], 3.0f) << dtype_name(t) << " count " << count;
      for (std::int64_t i = 1; i <= count; ++i)
        ASSERT_EQ(got.f32()[static_cast<std::size_t>(i)], expected)
            << dtype_name(t) << " count " << count << " element " << i;
    }
  }
  // Copies and accumulations between every pair of float dtypes (exact: k/64 values and their
  // sums fit every dtype), aligned and one element off.
  const std::int64_t count = 4099;
  const Tensor a = exact_in_every_dtype({count}), c = exact_in_every_dtype({count});
  Tensor sum = clone(a);
  for (std::int64_t i = 0; i < count; ++i)
    sum.f32()[static_cast<std::size_t>(i)] += c.f32()[static_cast<std::size_t>(i)];
  for (const std::size_t offset : {std::size_t{0}, std::size_t{1}})
    for (const DType from : {DType::kF32, DType::kF16, DType::kBF16})
      for (const DType to : {DType::kF32, DType::kF16, DType::kBF16}) {
        auto at = [&](DType t) {
          auto buffer = b->alloc_buffer(static_cast<std::size_t>(count + 1) * dtype_size_bytes(t));
          return Tensor({count}, t, Layout::kNCHW, buffer, offset * dtype_size_bytes(t));
        };
        const Tensor src = at(from), dst = at(to);
        b->upload(from_f32_nchw(c, from, Layout::kNCHW), src);
        b->copy(src, dst);
        const std::string what = std::string(dtype_name(from)) + " -> " +
                                 std::string(dtype_name(to)) + " offset " + std::to_string(offset);
        EXPECT_TRUE(all_close(download(*b, dst), c, 0.0, 0.0)) << "copy " << what;
        b->upload(from_f32_nchw(a, to, Layout::kNCHW), dst);
        b->accumulate(src, dst);
        EXPECT_TRUE(all_close(download(*b, dst), sum, 0.0, 0.0)) << "accumulate " << what;
      }
}

// The trainer's double-buffered input: a copy on the copy stream that waits for the compute stream's
// last reader, and the compute stream waiting for the copy before it reads.
TEST_F(CudaBackend, CopyStreamUploadIsOrderedBothWays) {
  auto b = gpu(kFp32, Layout::kNCHW);
  ASSERT_TRUE(b);
  const Shape shape{64, 3, 32, 32};
  Tensor first = Tensor::host(shape), second = Tensor::host(shape);
  fill_uniform(first, rng_);
  fill_uniform(second, rng_);
  Tensor dev = b->alloc(shape, DType::kF32), copy_of_first = b->alloc(shape, DType::kF32);
  auto done = b->upload_on_copy_stream(first, dev, nullptr);
  b->wait_event(*done);
  b->copy(dev, copy_of_first);  // compute reads `dev` after the first copy
  auto read = b->make_event();
  read->record();
  // The second copy must not overwrite `dev` before the compute stream's read above is done.
  auto done2 = b->upload_on_copy_stream(second, dev, read.get());
  b->wait_event(*done2);
  b->synchronize();
  const Tensor got_first = download(*b, copy_of_first), got_second = download(*b, dev);
  EXPECT_TRUE(all_close(got_first, first, 0.0, 0.0));
  EXPECT_TRUE(all_close(got_second, second, 0.0, 0.0));
}

TEST_F(CudaBackend, EventsTimeTheStream) {
  auto b = gpu(kFp32, Layout::kNCHW);
  ASSERT_TRUE(b);
  auto start = b->make_event();
  auto stop = b->make_event();
  EXPECT_FALSE(stop->ready());
  EXPECT_THROW(stop->synchronize(), InvalidArgument);
  Tensor big = b->alloc({1 << 24}, DType::kF32);
  start->record();
  for (int i = 0; i < 20; ++i) b->fill(big, static_cast<float>(i + 1));
  stop->record();
  const double ms = stop->elapsed_ms(*start);
  EXPECT_GT(ms, 0.0);
  EXPECT_LT(ms, 10000.0);
  EXPECT_TRUE(stop->ready());
  EXPECT_TRUE(start->ready());
}

// A captured step (convolution, ReLU, a scratch buffer allocated and freed inside) replays with new
// input data to the same result as running it directly; memory freed during the capture is not
// handed to tensors allocated afterwards.
TEST_F(CudaBackend, GraphCaptureReplaysTheWork) {
  auto b = gpu(kFp32, Layout::kNHWC);
  ASSERT_TRUE(b);
  Conv2dDesc d;
  d.n = 2, d.c = 3, d.h = 8, d.w = 8, d.k = 4, d.r = d.s = 3,
  d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = 1;
  auto conv = b->make_conv(d, {});
  Tensor x = b->alloc(d.input_shape(), DType::kF32, Layout::kNHWC);
  const Tensor w = upload(*b, random(d.weight_shape(), DType::kF32), DType::kF32, Layout::kNHWC);
  const Tensor bias = upload(*b, random(Shape{d.k}, DType::kF32), DType::kF32, Layout::kNHWC);
  Tensor y = b->alloc(d.output_shape(), DType::kF32, Layout::kNHWC);
  Tensor out = b->alloc(d.output_shape(), DType::kF32, Layout::kNHWC);
  auto step = [&] {
    conv->forward(x, w, bias, y);
    Tensor scratch = b->alloc(d.output_shape(), DType::kF32, Layout::kNHWC);
    b->relu_forward(y, scratch);
    b->copy(scratch, out);
  };
  auto direct = [&](const Tensor& input) {
    b->upload(from_f32_nchw(input, DType::kF32, Layout::kNHWC), x);
    step();
    return download(*b, out);
  };
  const Tensor x1 = random(d.input_shape(), DType::kF32), x2 = random(d.input_shape(), DType::kF32);
  const Tensor expected2 = direct(x2);  // also the warm-up: the convolution resolves its algorithm
  const Tensor expected1 = direct(x1);

  cuda::CudaGraph graph(*b);
  EXPECT_FALSE(graph.captured());
  EXPECT_THROW(graph.replay(), InvalidArgument);
  graph.capture(step);
  ASSERT_TRUE(graph.captured());
  EXPECT_GE(graph.node_count(), 3u);
  // The scratch block freed inside the capture must not come back here.
  Tensor after = b->alloc(d.output_shape(), DType::kF32, Layout::kNHWC);
  b->fill(after, 42.0f);
  b->upload(from_f32_nchw(x2, DType::kF32, Layout::kNHWC), x);
  graph.replay();
  EXPECT_TRUE(all_close(download(*b, out), expected2, 0.0, 0.0)) << "replay with input 2";
  b->upload(from_f32_nchw(x1, DType::kF32, Layout::kNHWC), x);
  graph.replay();
  EXPECT_TRUE(all_close(download(*b, out), expected1, 0.0, 0.0)) << "replay with input 1";
  const Tensor after_host = download(*b, after);
  for (const float v : after_host.f32())
    ASSERT_EQ(v, 42.0f) << "the graph wrote into a later tensor";

  // A host wait inside the captured work fails the capture cleanly; the backend keeps working.
  cuda::CudaGraph bad(*b);
  EXPECT_THROW(bad.capture([&] { b->synchronize(); }), Error);
  EXPECT_FALSE(bad.captured());
  EXPECT_TRUE(all_close(direct(x2), expected2, 0.0, 0.0));
}

// Scratch freed inside a capture serves the capture's later requests of its size (as the eager
// allocator's cache does), so a captured step holds no more memory than the same step run eagerly,
// and the replay still computes what the direct run does (each buffer is reused only after its last
// reader in the captured order).
TEST_F(CudaBackend, CaptureReusesItsOwnFreedScratchAndHoldsNoMoreThanEager) {
  auto b = gpu(kFp32, Layout::kNCHW);
  ASSERT_TRUE(b);
  const Shape shape{4, 16, 32, 32};  // 256 KiB a buffer
  const std::size_t bytes = static_cast<std::size_t>(shape.numel()) * sizeof(float);
  Tensor x = b->alloc(shape, DType::kF32);
  Tensor out = b->alloc(shape, DType::kF32);
  // Five scratch buffers of one size, each freed before the next is asked for: a chain of
  // x -> relu -> +x -> relu ... through them, so a wrong reuse order would change the result.
  auto step = [&] {
    Tensor prev = x;
    for (int i = 0; i < 5; ++i) {
      Tensor next = b->alloc(shape, DType::kF32);
      b->relu_forward(prev, next);
      b->accumulate(x, next);
      prev = next;
    }
    b->copy(prev, out);
  };
  const Tensor input = random(shape, DType::kF32);
  b->upload(input, x);
  b->synchronize();
  b->reset_peak_memory();
  const std::size_t before = b->memory_stats().in_use_bytes;
  step();
  b->synchronize();
  const std::size_t eager_peak = b->memory_stats().peak_bytes - before;
  const Tensor expected = download(*b, out);
  EXPECT_GE(eager_peak, bytes);
  EXPECT_LE(eager_peak, 2 * cuda::CachingAllocator::size_class(bytes));

  cuda::CudaGraph graph(*b);
  b->reset_peak_memory();
  graph.capture(step);
  ASSERT_TRUE(graph.captured());
  const std::size_t captured_peak = b->memory_stats().peak_bytes - before;
  EXPECT_LE(captured_peak, eager_peak) << "the capture kept each freed scratch block apart";
  b->fill(out, 0.0f);
  graph.replay();
  EXPECT_TRUE(all_close(download(*b, out), expected, 0.0, 0.0));
  // What the graph holds stays out of the cache while it lives: a new tensor is not one of them.
  Tensor later = b->alloc(shape, DType::kF32);
  b->fill(later, 7.0f);
  auto count_not_seven = [&] {
    std::size_t bad = 0;
    const Tensor h = download(*b, later);
    const auto v = h.f32();
    for (std::size_t i = 0; i < v.size(); ++i)
      if (v[i] != 7.0f && ++bad <= 4)
        std::printf("[  NOTE    ] later[%zu] = %g (tensor at %p, %zu bytes)\n", i, static_cast<double>(v[i]),
                    later.raw(), later.size_bytes());
    return bad;
  };
  ASSERT_EQ(count_not_seven(), 0u) << "the fill did not land (the replay before it had finished)";
  graph.replay();
  EXPECT_TRUE(all_close(download(*b, out), expected, 0.0, 0.0));
  EXPECT_EQ(count_not_seven(), 0u) << "the graph wrote into a later tensor";
}

}  // namespace
}  // namespace cnnergy::test
