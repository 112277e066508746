// Counter-based random numbers usable on host and device (no state): dropout masks drawn from
// (seed, index) are the same on every backend, so GPU dropout can be checked against the CPU. And the
// project's one stable fingerprint of bytes, FNV-1a 64 (host only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#if defined(__CUDACC__)
#define CNNERGY_HD __host__ __device__
#else
#define CNNERGY_HD
#endif

namespace cnnergy {

// SplitMix64 finaliser of (seed, index): a well-mixed 64-bit value.
CNNERGY_HD inline std::uint64_t mix64(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform float in [0, 1) from (seed, index), 24 bits of resolution.
CNNERGY_HD inline float uniform01(std::uint64_t seed, std::uint64_t index) {
  return static_cast<float>(mix64(seed, index) >> 40) * (1.0f / 16777216.0f);
}

// FNV-1a 64 of `bytes` bytes at `data`, continuing from `h`: the same on every compiler and run (file
// names, checksums, sweep keys, fingerprints), not for security.
inline constexpr std::uint64_t kFnv1a64Basis = 0xcbf29ce484222325ull;
inline std::uint64_t fnv1a64(const void* data, std::size_t bytes, std::uint64_t h = kFnv1a64Basis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
inline std::uint64_t fnv1a64(std::string_view s, std::uint64_t h = kFnv1a64Basis) {
  return fnv1a64(s.data(), s.size(), h);
}

}  // namespace cnnergy
