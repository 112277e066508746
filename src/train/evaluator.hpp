// Held-out accuracy: top-1 and top-5 over a data set with the executor in evaluation mode
// (batch-norm running statistics, no dropout). Logits are read back per batch and ranked on the
// host, so a last partial batch counts exactly its real rows.
#pragma once

#include <cstdint>
#include <memory>

namespace cnnergy {

class Executor;
namespace data {
class Dataset;
}

struct Accuracy {
  double top1 = 0, top5 = 0;
  std::int64_t samples = 0;
};

// max_batches: 0 = the whole data set.
Accuracy evaluate(Executor& executor, std::shared_ptr<const data::Dataset> dataset, std::int64_t max_batches,
                  int workers);

}  // namespace cnnergy
