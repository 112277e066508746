// Seed selection: reproducible when CNNERGY_SEED is set, fresh otherwise.
#include "core/rng.hpp"

#include <cstdlib>
#include <string>

namespace cnnergy {

std::uint64_t default_seed() {
  if (const char* s = std::getenv("CNNERGY_SEED"); s && *s) return std::stoull(s);
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace cnnergy
