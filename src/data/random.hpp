// Seeded, platform-independent random draws for the data layer: epoch permutations, holdout splits
// and per-sample augmentation. Built on core/hash.hpp's counter-based mix64, so the same seed gives
// the same order and crops on every compiler and standard library (std::shuffle does not promise
// it).
#pragma once

#include <cstdint>
#include <vector>

#include "core/hash.hpp"

namespace cnnergy::data {

// Uniform integer in [0, bound) from (seed, index); bound > 0. Rejection sampling keeps it
// unbiased.
inline std::uint64_t uniform_below(std::uint64_t seed, std::uint64_t index, std::uint64_t bound) {
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  std::uint64_t draw = mix64(seed, index);
  for (std::uint64_t retry = 1; draw >= limit; ++retry)
    draw = mix64(seed ^ (retry * 0xD1B54A32D192ED03ull), index);
  return draw % bound;
}

// A permutation of 0..n-1 (Fisher-Yates driven by mix64).
inline std::vector<std::int64_t> seeded_permutation(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::size_t>(
        uniform_below(seed, static_cast<std::uint64_t>(i), static_cast<std::uint64_t>(i + 1)));
    std::swap(order[static_cast<std::size_t>(i)], order[j]);
  }
  return order;
}

}  // namespace cnnergy::data
