// Seeded random numbers for weight initialisation, dropout masks and tests (fresh seeds by default,
// printed so that a failing test can be replayed with CNNERGY_SEED).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>

namespace cnnergy {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed), seed_(seed) {}
  std::uint64_t seed() const { return seed_; }
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(engine_); }
  float normal(float mean, float stddev) { return std::normal_distribution<float>(mean, stddev)(engine_); }
  std::uint32_t next_u32() { return static_cast<std::uint32_t>(engine_()); }
  // Fill a span: in chunks of kFillChunk values, each from its own engine seeded from one draw of
  // this one and the chunk's index, generated on up to hardware_concurrency() threads. The values
  // depend only on the seed and the span's size, never on the thread count. (VGG-16's 138 M
  // weights took seconds one value at a time: most of its time to first step.)
  void fill_uniform(std::span<float> out, float lo, float hi);
  void fill_normal(std::span<float> out, float mean, float stddev);
  static constexpr std::size_t kFillChunk = std::size_t{1} << 16;
  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
  std::uint64_t seed_;
};

// The seed from CNNERGY_SEED if set, otherwise a fresh one from std::random_device.
std::uint64_t default_seed();

}  // namespace cnnergy
