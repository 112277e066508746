// Epoch permutations (Fisher-Yates over SplitMix64 draws, so every rank and platform gets the same
// order) and the per-rank views of a data set built from them.
#include "train/parallel/sharding.hpp"

#include <numeric>
#include <string>

#include "core/errors.hpp"
#include "core/hash.hpp"

namespace cnnergy::dist {

std::vector<std::int64_t> epoch_permutation(std::int64_t size, std::uint64_t seed,
                                            std::int64_t epoch) {
  if (size < 0) throw InvalidArgument("negative data set size");
  std::vector<std::int64_t> p(static_cast<std::size_t>(size));
  std::iota(p.begin(), p.end(), std::int64_t{0});
  const std::uint64_t stream = mix64(seed, 0x5eedull + static_cast<std::uint64_t>(epoch));
  for (std::size_t i = p.size(); i > 1; --i) {
    // Modulo bias of a 64-bit draw over i < 2^40 samples is below 2^-24: negligible.
    const auto j = static_cast<std::size_t>(mix64(stream, i) % i);
    std::swap(p[i - 1], p[j]);
  }
  return p;
}

std::shared_ptr<const data::Dataset> epoch_shard(std::shared_ptr<const data::Dataset> full,
                                                 std::uint64_t seed, std::int64_t epoch, int rank,
                                                 int world, std::int64_t per_rank_batch,
                                                 std::int64_t batches) {
  if (world < 1 || rank < 0 || rank >= world)
    throw InvalidArgument("bad rank " + std::to_string(rank));
  const std::int64_t global = per_rank_batch * world;
  if (per_rank_batch < 1 || batches < 1 || global * batches > full->size())
    throw InvalidArgument("a shard of " + std::to_string(batches) + " batches of " +
                          std::to_string(global) + " samples does not fit in '" + full->name() +
                          "' (" + std::to_string(full->size()) + ")");
  const std::vector<std::int64_t> perm = epoch_permutation(full->size(), seed, epoch);
  std::vector<std::int64_t> mine;
  mine.reserve(static_cast<std::size_t>(per_rank_batch * batches));
  for (std::int64_t j = 0; j < batches; ++j) {
    const std::int64_t first = j * global + rank * per_rank_batch;
    for (std::int64_t k = 0; k < per_rank_batch; ++k)
      mine.push_back(perm[static_cast<std::size_t>(first + k)]);
  }
  const std::string name = full->name() + " [epoch " + std::to_string(epoch + 1) + ", rank " +
                           std::to_string(rank) + "/" + std::to_string(world) + "]";
  return std::make_shared<data::SubsetDataset>(std::move(full), std::move(mine), name);
}

std::shared_ptr<const data::Dataset> strided_shard(std::shared_ptr<const data::Dataset> full,
                                                   int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world)
    throw InvalidArgument("bad rank " + std::to_string(rank));
  std::vector<std::int64_t> mine;
  for (std::int64_t i = rank; i < full->size(); i += world) mine.push_back(i);
  if (mine.empty()) return nullptr;
  const std::string name =
      full->name() + " [rank " + std::to_string(rank) + "/" + std::to_string(world) + "]";
  return std::make_shared<data::SubsetDataset>(std::move(full), std::move(mine), name);
}

}  // namespace cnnergy::dist
