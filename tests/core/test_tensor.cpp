// Tensor views, reshapes, slices and host layout/dtype conversion.
#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"

using namespace cnnergy;

TEST(Shape, ParsesAndRejects) {
  EXPECT_EQ(parse_shape("3x224x224"), (Shape{3, 224, 224}));
  EXPECT_EQ(parse_shape("50,60,60").numel(), 180000);
  EXPECT_THROW(parse_shape("3x0x4"), InvalidArgument);
  EXPECT_THROW(parse_shape("3xx4"), InvalidArgument);
  EXPECT_THROW(parse_shape("abc"), InvalidArgument);
}

TEST(Tensor, SliceAndReshapeShareMemory) {
  Tensor t = Tensor::host({4, 2, 3, 3});
  auto all = t.f32();
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<float>(i);
  Tensor s = t.batch_slice(2, 2);
  EXPECT_EQ(s.shape(), (Shape{2, 2, 3, 3}));
  EXPECT_EQ(s.f32()[0], 36.f);
  EXPECT_EQ(t.reshaped({4, 18}).f32()[18], 18.f);
  EXPECT_THROW(t.reshaped({5, 18}), ShapeError);
  EXPECT_THROW(t.batch_slice(3, 2), ShapeError);
}

TEST(Tensor, LayoutAndDtypeConversionRoundTrip) {
  Rng rng(default_seed());
  Tensor x = Tensor::host({2, 3, 4, 5});
  rng.fill_uniform(x.f32(), -1.f, 1.f);
  Tensor nhwc = from_f32_nchw(x, DType::kF32, Layout::kNHWC);
  // element (n=1, c=2, h=3, w=4) sits at ((1*4+3)*5+4)*3+2 in NHWC
  EXPECT_EQ(nhwc.data<float>()[((1 * 4 + 3) * 5 + 4) * 3 + 2], x.f32()[((1 * 3 + 2) * 4 + 3) * 5 + 4]);
  Tensor back = to_f32_nchw(nhwc);
  for (std::int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(back.f32()[i], x.f32()[i]);
  Tensor h = to_f32_nchw(from_f32_nchw(x, DType::kBF16, Layout::kNHWC));
  for (std::int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(h.f32()[i], x.f32()[i], 4e-3);
}
