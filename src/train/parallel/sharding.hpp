// How a data set is split over data-parallel ranks: every rank draws the same per-epoch permutation
// (from the seed and the epoch, independent of the rank count), global batch j is the slice
// [j*B, (j+1)*B) of it, and rank r takes the r-th part of each global batch. So N ranks with
// per-rank batch B/N see exactly the samples that one process with batch B sees, and their summed
// gradients match its gradient (the strong-scaling equivalence the tests check).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/dataset.hpp"

namespace cnnergy::dist {

// A permutation of [0, size) drawn from (seed, epoch) with a platform-independent generator.
std::vector<std::int64_t> epoch_permutation(std::int64_t size, std::uint64_t seed,
                                            std::int64_t epoch);

// The samples rank `rank` of `world` trains on in `epoch`, in delivery order: `batches` global
// batches of world * per_rank_batch samples (the caller checks they fit in the data set).
std::shared_ptr<const data::Dataset> epoch_shard(std::shared_ptr<const data::Dataset> full,
                                                 std::uint64_t seed, std::int64_t epoch, int rank,
                                                 int world, std::int64_t per_rank_batch,
                                                 std::int64_t batches);

// Held-out evaluation split over ranks: samples rank, rank + world, rank + 2*world, ... (may be
// empty when the set has fewer samples than ranks: returns null then).
std::shared_ptr<const data::Dataset> strided_shard(std::shared_ptr<const data::Dataset> full,
                                                   int rank, int world);

}  // namespace cnnergy::dist
