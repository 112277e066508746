// model_info(): walks the graph's layers and collects their self-reported workload (the layers own
// the counting rules, so nothing here knows a layer type), then scales it to the batch.
#include "net/model_info.hpp"

#include <algorithm>
#include <limits>

#include "core/errors.hpp"
#include "net/graph.hpp"

namespace cnnergy {
namespace {

double ratio(std::int64_t num, std::int64_t den) {
  return den > 0 ? static_cast<double>(num) / static_cast<double>(den) : 0.0;
}

}  // namespace

double ModelInfo::mib(std::int64_t elements) const {
  return static_cast<double>(elements) * static_cast<double>(element_bytes()) / (1024.0 * 1024.0);
}

double ModelInfo::ctc() const { return ratio(total_per_sample.operations, total_per_sample.read_elements); }

std::int64_t ModelInfo::read_elements_weights_once() const {
  // Weights read by a layer are its parameters (workload.hpp: read = inputs + all weights).
  return total_batch.read_elements - (batch - 1) * parameters;
}

ModelInfo model_info(const Graph& graph, std::int64_t batch, DType dtype) {
  if (batch < 1) throw InvalidArgument("model-info: batch size must be at least 1, got " + std::to_string(batch));
  if (dtype == DType::kI32) throw InvalidArgument("model-info: byte counts need a floating-point type (fp32, fp16, bf16)");
  ModelInfo info;
  info.model = graph.model_name();
  info.input_per_sample = graph.input_per_sample();
  info.num_classes = graph.num_classes();
  info.batch = batch;
  info.dtype = dtype;
  info.parameters = graph.parameter_count();
  info.total_per_sample = graph.total_workload();
  // The largest per-sample count bounds every product below; refuse batches that would overflow.
  const Workload& t = info.total_per_sample;
  std::int64_t largest = 1;
  for (const std::int64_t v : {t.operations, t.flops_forward, t.flops_backward, t.read_elements, t.written_elements})
    largest = std::max(largest, v);
  if (batch > std::numeric_limits<std::int64_t>::max() / largest)
    throw InvalidArgument("model-info: batch size " + std::to_string(batch) + " is too large for " + info.model);
  info.total_batch = t.for_batch(batch);

  info.layers.reserve(graph.num_layers());
  for (std::size_t i = 0; i < graph.num_layers(); ++i) {
    const Layer& layer = graph.layer(i);
    LayerInfo li;
    li.name = layer.name();
    li.type = layer.type();
    li.category = std::string(category_name(layer.category()));
    li.details = layer.describe();
    // The loss layer produces no graph tensor, only its scalar (batch-mean) loss.
    const bool has_output = !graph.layer_outputs(i).empty() && !layer.output_shapes().empty();
    li.output_shape = has_output ? layer.output_shapes().front().with_batch(batch) : Shape{1};
    li.per_sample = layer.workload();
    li.batch = li.per_sample.for_batch(batch);
    li.ctc = ratio(li.per_sample.operations, li.per_sample.read_elements);
    info.layers.push_back(std::move(li));
  }
  return info;
}

}  // namespace cnnergy
