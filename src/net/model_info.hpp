// model-info's numbers: per layer and in total, the operation counts and data volumes of Castro et al. 2019
// (Section 4, Eqs. 1-9), forward and backward FLOPs and parameters, scaled to a batch by Eqs. 10-12,
// with byte sizes at a chosen element type. The counting rules are the layers' own (workload.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/shape.hpp"
#include "layers/workload.hpp"

namespace cnnergy {

class Graph;

struct LayerInfo {
  std::string name;
  std::string type;      // Layer::type(): "conv", "fc", "max_pool", ...
  std::string category;  // "conv", "fc", "pool", ... (category_name)
  std::string details;   // Layer::describe(): hyper-parameters
  Shape output_shape;    // at the batch size (the loss layer: its scalar loss, shape {1})
  Workload per_sample;   // Eqs. 1-9 and FLOPs for one sample
  Workload batch;        // Eqs. 10-12: per_sample scaled by the batch (parameters not scaled)
  double ctc = 0.0;      // Castro et al. 2019's computation-to-communication ratio: operations / read elements
};

struct ModelInfo {
  std::string model;
  Shape input_per_sample;  // C, H, W
  std::int64_t num_classes = 0;
  std::int64_t batch = 1;
  DType dtype = DType::kF32;  // element type that byte counts assume
  std::vector<LayerInfo> layers;
  Workload total_per_sample;
  Workload total_batch;
  std::int64_t parameters = 0;

  std::size_t element_bytes() const { return dtype_size_bytes(dtype); }
  // Elements -> MiB (2^20 bytes) at dtype. Castro et al. 2019's Table 1 "MB" are MiB (its CTC ratios only
  // come out with 2^20-byte megabytes and 4-byte elements; see docs/model-info.md).
  double mib(std::int64_t elements) const;
  double ctc() const;  // whole network: total operations / total read elements
  // Eq. 11 reads every weight once per sample (B times per batch). A batched kernel reads a weight
  // once per batch: this is that smaller volume, B * read_sample - (B - 1) * weights.
  std::int64_t read_elements_weights_once() const;
};

// Throws InvalidArgument when batch < 1 (or so large that the counts would overflow 64 bits).
ModelInfo model_info(const Graph& graph, std::int64_t batch, DType dtype = DType::kF32);

}  // namespace cnnergy
