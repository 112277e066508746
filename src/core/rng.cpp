// Seed selection: reproducible when CNNERGY_SEED is set, fresh otherwise.
#include "core/rng.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace cnnergy {

std::uint64_t default_seed() {
  if (const char* s = std::getenv("CNNERGY_SEED"); s && *s) return std::stoull(s);
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Calls fill(chunk, engine) for every chunk of `out`, chunks spread over threads.
template <typename Fill>
void fill_chunks(std::span<float> out, std::uint64_t base, Fill fill) {
  const std::size_t chunks = (out.size() + Rng::kFillChunk - 1) / Rng::kFillChunk;
  auto run = [&](std::size_t first, std::size_t step) {
    for (std::size_t c = first; c < chunks; c += step) {
      std::mt19937_64 engine(splitmix64(base ^ splitmix64(c)));
      const std::size_t begin = c * Rng::kFillChunk;
      fill(out.subspan(begin, std::min(Rng::kFillChunk, out.size() - begin)), engine);
    }
  };
  const std::size_t threads =
      std::min<std::size_t>({chunks, std::max(1u, std::thread::hardware_concurrency()), 32});
  if (threads <= 1) {
    run(0, 1);
    return;
  }
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(run, t, threads);
  run(0, threads);
  for (auto& t : pool) t.join();
}

}  // namespace

void Rng::fill_uniform(std::span<float> out, float lo, float hi) {
  fill_chunks(out, engine_(), [lo, hi](std::span<float> chunk, std::mt19937_64& e) {
    std::uniform_real_distribution<float> d(lo, hi);
    for (auto& v : chunk) v = d(e);
  });
}

void Rng::fill_normal(std::span<float> out, float mean, float stddev) {
  fill_chunks(out, engine_(), [mean, stddev](std::span<float> chunk, std::mt19937_64& e) {
    std::normal_distribution<float> d(mean, stddev);
    for (auto& v : chunk) v = d(e);
  });
}

}  // namespace cnnergy
