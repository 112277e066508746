// Counter-based random numbers usable on host and device (no state): dropout masks drawn from
// (seed, index) are the same on every backend, so GPU dropout can be checked against the CPU.
#pragma once

#include <cstdint>

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

}  // namespace cnnergy
