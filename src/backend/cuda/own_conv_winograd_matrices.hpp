// The Winograd minimal-filtering matrices of F(2x2,3x3) and F(4x4,3x3) (Lavin and Gray 2016),
// usable on the host (the unit test checks them against direct correlation) and in the kernels of
// own_conv_winograd.cu: Y = A^T [ (G g G^T) * (B^T d B) ] A for a 3x3 filter g and an
// (m+2)x(m+2) input tile d gives the m x m correlation outputs.
#pragma once

#ifndef CNNERGY_HD
#ifdef __CUDACC__
#define CNNERGY_HD __host__ __device__
#else
#define CNNERGY_HD
#endif
#endif
#ifdef __CUDA_ARCH__  // the device pass only: the host compiler does not know the pragma
#define CNNERGY_UNROLL _Pragma("unroll")
#else
#define CNNERGY_UNROLL
#endif

namespace cnnergy::cuda::winograd {

// B^T: alpha x alpha, alpha = m + 2.
CNNERGY_HD constexpr float bt(int m, int i, int j) {
  if (m == 2) {
    constexpr float t[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
    return t[i][j];
  }
  constexpr float t[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                             {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
  return t[i][j];
}

// G: alpha x 3.
CNNERGY_HD constexpr float g(int m, int i, int j) {
  if (m == 2) {
    constexpr float t[4][3] = {{1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}};
    return t[i][j];
  }
  constexpr float t[6][3] = {{1.0f / 4, 0, 0},
                             {-1.0f / 6, -1.0f / 6, -1.0f / 6},
                             {-1.0f / 6, 1.0f / 6, -1.0f / 6},
                             {1.0f / 24, 1.0f / 12, 1.0f / 6},
                             {1.0f / 24, -1.0f / 12, 1.0f / 6},
                             {0, 0, 1}};
  return t[i][j];
}

// A^T: m x alpha.
CNNERGY_HD constexpr float at(int m, int i, int j) {
  if (m == 2) {
    constexpr float t[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
    return t[i][j];
  }
  constexpr float t[4][6] = {
      {1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
  return t[i][j];
}

// u (alpha x alpha) = G f G^T for a 3x3 filter f (row-major).
template <int M>
CNNERGY_HD void transform_filter(const float (&f)[3][3], float (&u)[M + 2][M + 2]) {
  constexpr int kA = M + 2;
  float t[kA][3];
CNNERGY_UNROLL
  for (int i = 0; i < kA; ++i)
CNNERGY_UNROLL
    for (int j = 0; j < 3; ++j) t[i][j] = g(M, i, 0) * f[0][j] + g(M, i, 1) * f[1][j] + g(M, i, 2) * f[2][j];
CNNERGY_UNROLL
  for (int i = 0; i < kA; ++i)
CNNERGY_UNROLL
    for (int j = 0; j < kA; ++j) u[i][j] = t[i][0] * g(M, j, 0) + t[i][1] * g(M, j, 1) + t[i][2] * g(M, j, 2);
}

// v (alpha x alpha) = B^T d B.
template <int M>
CNNERGY_HD void transform_input(const float (&d)[M + 2][M + 2], float (&v)[M + 2][M + 2]) {
  constexpr int kA = M + 2;
  float t[kA][kA];
CNNERGY_UNROLL
  for (int i = 0; i < kA; ++i)
CNNERGY_UNROLL
    for (int j = 0; j < kA; ++j) {
      float acc = 0.0f;
CNNERGY_UNROLL
      for (int k = 0; k < kA; ++k)
        if (bt(M, i, k) != 0.0f) acc += bt(M, i, k) * d[k][j];
      t[i][j] = acc;
    }
CNNERGY_UNROLL
  for (int i = 0; i < kA; ++i)
CNNERGY_UNROLL
    for (int j = 0; j < kA; ++j) {
      float acc = 0.0f;
CNNERGY_UNROLL
      for (int k = 0; k < kA; ++k)
        if (bt(M, j, k) != 0.0f) acc += t[i][k] * bt(M, j, k);
      v[i][j] = acc;
    }
}

// y (m x m) = A^T p A for the elementwise product (or its channel sum) p.
template <int M>
CNNERGY_HD void transform_output(const float (&p)[M + 2][M + 2], float (&y)[M][M]) {
  constexpr int kA = M + 2;
  float t[M][kA];
CNNERGY_UNROLL
  for (int i = 0; i < M; ++i)
CNNERGY_UNROLL
    for (int j = 0; j < kA; ++j) {
      float acc = 0.0f;
CNNERGY_UNROLL
      for (int k = 0; k < kA; ++k)
        if (at(M, i, k) != 0.0f) acc += at(M, i, k) * p[k][j];
      t[i][j] = acc;
    }
CNNERGY_UNROLL
  for (int i = 0; i < M; ++i)
CNNERGY_UNROLL
    for (int j = 0; j < M; ++j) {
      float acc = 0.0f;
CNNERGY_UNROLL
      for (int k = 0; k < kA; ++k)
        if (at(M, j, k) != 0.0f) acc += t[i][k] * at(M, j, k);
      y[i][j] = acc;
    }
}

// The weight gradient's transforms, from y = A^T[(G g G^T) * (B^T d B)]A: dL/dg = G^T [(A dy A^T) *
// (B^T d B)] G for the m x m output gradient dy of a tile. a (alpha x alpha) = A dy A^T:
template <int M>
CNNERGY_HD void transform_output_grad(const float (&dy)[M][M], float (&a)[M + 2][M + 2]) {
  constexpr int kA = M + 2;
  float t[M][kA];
CNNERGY_UNROLL
  for (int i = 0; i < M; ++i)
CNNERGY_UNROLL
    for (int b = 0; b < kA; ++b) {
      float acc = 0.0f;
CNNERGY_UNROLL
      for (int j = 0; j < M; ++j)
        if (at(M, j, b) != 0.0f) acc += dy[i][j] * at(M, j, b);
      t[i][b] = acc;
    }
CNNERGY_UNROLL
  for (int x = 0; x < kA; ++x)
CNNERGY_UNROLL
    for (int b = 0; b < kA; ++b) {
      float acc = 0.0f;
CNNERGY_UNROLL
      for (int i = 0; i < M; ++i)
        if (at(M, i, x) != 0.0f) acc += at(M, i, x) * t[i][b];
      a[x][b] = acc;
    }
}

// f (3x3) = G^T p G.
template <int M>
CNNERGY_HD void transform_filter_grad(const float (&p)[M + 2][M + 2], float (&f)[3][3]) {
  constexpr int kA = M + 2;
  float t[3][kA];
CNNERGY_UNROLL
  for (int r = 0; r < 3; ++r)
CNNERGY_UNROLL
    for (int b = 0; b < kA; ++b) {
      float acc = 0.0f;
CNNERGY_UNROLL
      for (int a = 0; a < kA; ++a)
        if (g(M, a, r) != 0.0f) acc += g(M, a, r) * p[a][b];
      t[r][b] = acc;
    }
CNNERGY_UNROLL
  for (int r = 0; r < 3; ++r)
CNNERGY_UNROLL
    for (int s = 0; s < 3; ++s) {
      float acc = 0.0f;
CNNERGY_UNROLL
      for (int b = 0; b < kA; ++b)
        if (g(M, b, s) != 0.0f) acc += t[r][b] * g(M, b, s);
      f[r][s] = acc;
    }
}

// The weight gradient of one tile: f[r][s] = sum_ij dy[i][j] d[i + r][j + s] (host reference).
template <int M>
CNNERGY_HD void weight_grad_tile(const float (&d)[M + 2][M + 2], const float (&dy)[M][M], float (&f)[3][3]) {
  float v[M + 2][M + 2], a[M + 2][M + 2], p[M + 2][M + 2];
  transform_input<M>(d, v);
  transform_output_grad<M>(dy, a);
  for (int i = 0; i < M + 2; ++i)
    for (int j = 0; j < M + 2; ++j) p[i][j] = a[i][j] * v[i][j];
  transform_filter_grad<M>(p, f);
}

// The whole F(m x m, 3x3) on one tile (host reference for the unit test).
template <int M>
CNNERGY_HD void correlate_tile(const float (&d)[M + 2][M + 2], const float (&f)[3][3], float (&y)[M][M]) {
  float u[M + 2][M + 2], v[M + 2][M + 2], p[M + 2][M + 2];
  transform_filter<M>(f, u);
  transform_input<M>(d, v);
  for (int i = 0; i < M + 2; ++i)
    for (int j = 0; j < M + 2; ++j) p[i][j] = u[i][j] * v[i][j];
  transform_output<M>(p, y);
}

}  // namespace cnnergy::cuda::winograd
