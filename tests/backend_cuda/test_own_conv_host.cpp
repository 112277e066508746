// Host side of the own CUDA convolutions, run in every build (no GPU, no CUDA needed): the
// Winograd F(2x2,3x3) and F(4x4,3x3) matrices the kernels use against direct correlation, tile
// counting, the rules that exclude shapes, and the CPU backend's answer to "own:NAME" policies.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backend/cuda/own_conv_rules.hpp"
#include "backend/cuda/own_conv_winograd_matrices.hpp"
#include "backend/ops.hpp"
#include "common/tensor_testing.hpp"
#include "core/errors.hpp"

namespace cnnergy::test {
namespace {

using cuda::own::Direction;

// F(m x m, 3x3) on random tiles against the 9-term sums; returns the largest error relative to the
// largest output magnitude.
template <int M>
double winograd_tile_error(Rng& rng, int trials) {
  double worst = 0;
  for (int t = 0; t < trials; ++t) {
    float d[M + 2][M + 2], f[3][3], y[M][M];
    for (auto& row : d)
      for (float& v : row) v = rng.uniform(-1, 1);
    for (auto& row : f)
      for (float& v : row) v = rng.uniform(-1, 1);
    cuda::winograd::correlate_tile<M>(d, f, y);
    double ref[M][M], scale = 1e-3;
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < M; ++j) {
        double s = 0;
        for (int r = 0; r < 3; ++r)
          for (int c = 0; c < 3; ++c) s += static_cast<double>(d[i + r][j + c]) * f[r][c];
        ref[i][j] = s;
        scale = std::max(scale, std::fabs(s));
      }
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < M; ++j) worst = std::max(worst, std::fabs(y[i][j] - ref[i][j]) / scale);
  }
  return worst;
}

class OwnConvHost : public SeededTest {};

TEST_F(OwnConvHost, WinogradMatricesComputeCorrelation) {
  const double e2 = winograd_tile_error<2>(rng_, 2000);
  const double e4 = winograd_tile_error<4>(rng_, 2000);
  std::printf("[  NOTE    ] winograd tile error (fp32, relative to max |y|): F(2x2,3x3) %.2e, F(4x4,3x3) %.2e\n",
              e2, e4);
  EXPECT_LT(e2, 1e-5);
  EXPECT_LT(e4, 1e-4);
}

// The weight-gradient transforms: G^T [(A dy A^T) * (B^T d B)] G against the sums over the tile.
template <int M>
double winograd_grad_error(Rng& rng, int trials) {
  double worst = 0;
  for (int t = 0; t < trials; ++t) {
    float d[M + 2][M + 2], dy[M][M], f[3][3];
    for (auto& row : d)
      for (float& v : row) v = rng.uniform(-1, 1);
    for (auto& row : dy)
      for (float& v : row) v = rng.uniform(-1, 1);
    cuda::winograd::weight_grad_tile<M>(d, dy, f);
    double ref[3][3], scale = 1e-3;
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) {
        double s = 0;
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < M; ++j) s += static_cast<double>(dy[i][j]) * d[i + r][j + c];
        ref[r][c] = s;
        scale = std::max(scale, std::fabs(s));
      }
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) worst = std::max(worst, std::fabs(f[r][c] - ref[r][c]) / scale);
  }
  return worst;
}

TEST_F(OwnConvHost, WinogradWeightGradientTransformsMatchTheTileSums) {
  const double e2 = winograd_grad_error<2>(rng_, 2000);
  const double e4 = winograd_grad_error<4>(rng_, 2000);
  std::printf("[  NOTE    ] winograd weight-gradient tile error: F(2x2,3x3) %.2e, F(4x4,3x3) %.2e\n", e2, e4);
  EXPECT_LT(e2, 1e-5);
  EXPECT_LT(e4, 1e-4);
}

// A wrong matrix entry must show: the test above is not vacuous.
TEST_F(OwnConvHost, WinogradTileDetectsAShiftedWindow) {
  float d[6][6] = {}, f[3][3] = {}, y[4][4];
  d[0][0] = 1;
  f[0][0] = 1;  // y[0][0] = d[0][0] * f[0][0] = 1, all other outputs 0
  cuda::winograd::correlate_tile<4>(d, f, y);
  EXPECT_NEAR(y[0][0], 1.0f, 1e-6);
  EXPECT_NEAR(y[1][1], 0.0f, 1e-6);
  d[0][0] = 0;
  d[5][5] = 2;
  f[0][0] = 0;
  f[2][2] = 1;  // y[3][3] = d[5][5] * f[2][2]
  cuda::winograd::correlate_tile<4>(d, f, y);
  EXPECT_NEAR(y[3][3], 2.0f, 1e-5);
  EXPECT_NEAR(y[0][0], 0.0f, 1e-6);
}

TEST(OwnConvRules, TileCounts) {
  EXPECT_EQ(cuda::own::winograd_tiles(8, 8, 4), 4);
  EXPECT_EQ(cuda::own::winograd_tiles(7, 9, 4), 2 * 3);
  EXPECT_EQ(cuda::own::winograd_tiles(56, 56, 4), 14 * 14);
  EXPECT_EQ(cuda::own::winograd_tiles(9, 8, 2), 5 * 4);
  EXPECT_EQ(cuda::own::winograd_tiles(1, 1, 4), 1);
}

Conv2dDesc conv(std::int64_t c, std::int64_t k, std::int64_t r, std::int64_t stride, std::int64_t dil,
                std::int64_t groups) {
  Conv2dDesc d;
  d.n = 2, d.c = c, d.h = 32, d.w = 32, d.k = k, d.r = r, d.s = r;
  d.stride_h = d.stride_w = stride;
  d.dilation_h = d.dilation_w = dil;
  d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = r / 2;
  d.groups = groups;
  return d;
}

TEST(OwnConvRules, WinogradTakes3x3Stride1Groups1Nchw) {
  const Conv2dDesc ok = conv(64, 64, 3, 1, 1, 1);
  for (int m : {2, 4}) {
    EXPECT_EQ(cuda::own::winograd_rule(ok, false, m, Direction::kForward), "");
    EXPECT_EQ(cuda::own::winograd_rule(ok, false, m, Direction::kBackwardData), "");
    EXPECT_EQ(cuda::own::winograd_rule(ok, false, m, Direction::kBackwardFilter), "");
    EXPECT_NE(cuda::own::winograd_rule(ok, true, m, Direction::kForward).find("NCHW only"), std::string::npos);
    for (const Conv2dDesc& bad : {conv(64, 64, 5, 1, 1, 1), conv(64, 64, 3, 2, 1, 1), conv(64, 64, 3, 1, 2, 1),
                                  conv(64, 64, 3, 1, 1, 2)})
      EXPECT_NE(cuda::own::winograd_rule(bad, false, m, Direction::kForward).find("only 3x3 stride 1 dilation 1 groups 1"),
                std::string::npos);
  }
  EXPECT_EQ(cuda::own::winograd_rule(ok, false, 4, Direction::kForward), "");
  EXPECT_NE(cuda::own::winograd_rule(conv(8, 8, 1, 1, 1, 1), false, 4, Direction::kForward).find("F(4x4,3x3)"),
            std::string::npos);
}

TEST(OwnConvRules, Im2colGemmIsNchwOnlyAndDirectFitsSharedMemory) {
  EXPECT_EQ(cuda::own::im2col_gemm_rule(conv(6, 12, 3, 2, 2, 3), false), "");
  EXPECT_NE(cuda::own::im2col_gemm_rule(conv(6, 12, 3, 2, 2, 3), true).find("NCHW only"), std::string::npos);
  EXPECT_EQ(cuda::own::direct_rule(conv(6, 12, 7, 2, 2, 3)), "");
  // 3x3 stride 1: a 10x34 patch and 9 taps per channel, 35 channels per 48 KiB chunk
  EXPECT_EQ(cuda::own::direct_forward_chunk(conv(64, 64, 3, 1, 1, 1)), 35);
  EXPECT_EQ(cuda::own::direct_forward_chunk(conv(16, 64, 3, 1, 1, 1)), 16);
  // dilation 100 on a 3x3: the patch of one channel exceeds shared memory
  Conv2dDesc huge = conv(4, 4, 3, 1, 100, 1);
  huge.h = huge.w = 400;
  EXPECT_NE(cuda::own::direct_rule(huge).find("48 KiB"), std::string::npos);
  Conv2dDesc many = conv(70000, 4, 1, 1, 1, 1);
  many.h = many.w = 1;
  EXPECT_NE(cuda::own::direct_rule(many).find("65535"), std::string::npos);
}

TEST(OwnConvRules, FftTakesDilation1Groups1NchwAndStride1Backward) {
  EXPECT_EQ(cuda::own::fft_rule(conv(8, 8, 5, 1, 1, 1), false, Direction::kBackwardFilter), "");
  EXPECT_EQ(cuda::own::fft_rule(conv(8, 8, 5, 2, 1, 1), false, Direction::kForward), "");
  EXPECT_NE(cuda::own::fft_rule(conv(8, 8, 5, 2, 1, 1), false, Direction::kBackwardData).find("stride 1"),
            std::string::npos);
  EXPECT_NE(cuda::own::fft_rule(conv(8, 8, 3, 1, 2, 1), false, Direction::kForward).find("dilation 1"),
            std::string::npos);
  EXPECT_NE(cuda::own::fft_rule(conv(8, 8, 3, 1, 1, 2), false, Direction::kForward).find("groups 1"),
            std::string::npos);
  EXPECT_NE(cuda::own::fft_rule(conv(8, 8, 3, 1, 1, 1), true, Direction::kForward).find("NCHW only"),
            std::string::npos);
  EXPECT_EQ(cuda::own::implicit_gemm_rule(conv(6, 12, 3, 2, 2, 3)), "");
}

// The CPU backend maps own:im2col_gemm onto its im2col_gemm and refuses the other own names
// (InvalidArgument: exit code 2) naming its choices.
TEST(OwnConvCpu, OnlyIm2colGemmRunsOnTheCpu) {
  BackendOptions o;
  o.conv_algo_policy = "own:im2col_gemm";
  auto cpu = create_backend(o);
  const Conv2dDesc d = conv(2, 3, 3, 1, 1, 1);
  EXPECT_NO_THROW(cpu->make_conv(d, {}));
  EXPECT_NO_THROW(cpu->make_conv(d, ConvAlgoChoice{"own:im2col_gemm", "reference", ""}));
  try {
    cpu->make_conv(d, ConvAlgoChoice{"own:winograd", "", ""});
    FAIL() << "own:winograd accepted on the CPU";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("im2col_gemm"), std::string::npos) << e.what();
    EXPECT_EQ(e.exit_code(), 2);
  }
  o.conv_algo_policy = "own:direct";
  EXPECT_THROW(create_backend(o), InvalidArgument);
}

}  // namespace
}  // namespace cnnergy::test
