// The model zoo: every built-in network, registered by name in one explicit table (model_zoo()),
// and build_model(), which checks the overrides and builds the validated Graph.
// Each family lives in its own file (lenet5.cpp, alexnet.cpp, ...) and is declared in families.hpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/shape.hpp"
#include "net/graph_builder.hpp"

namespace cnnergy {

class Graph;

// Describes a network for one input size (C, H, W of one sample) and class count.
using ModelBuildFn = GraphBuilder (*)(const Shape& input_per_sample, std::int64_t num_classes);

struct ModelEntry {
  std::string name;             // what `--model` / `model-info` accept
  std::string description;      // one line: origin and variant (e.g. "torchvision, BN, no aux head")
  Shape default_input;          // C, H, W
  std::int64_t default_classes = 1000;
  ModelBuildFn build = nullptr;
};

// All built-in models, in the order `model-info --list` prints them.
const std::vector<ModelEntry>& model_zoo();

// Names of all models, comma-separated, for error messages.
std::string model_names_joined();

// The entry for `name`; throws InvalidArgument listing every name when there is none.
const ModelEntry& find_model(std::string_view name);

// Builds `name` at its default input and class count unless overridden. The input override is
// C, H, W (rank 3, every dim > 0); classes >= 2. Throws InvalidArgument for an unknown model or a
// bad override, and ShapeError (naming the layer) when the input makes a layer's output empty.
std::unique_ptr<Graph> build_model(std::string_view name, const std::optional<Shape>& input_per_sample = {},
                                   std::optional<std::int64_t> num_classes = {});

// The GraphBuilder for the same (not yet built): for callers that add to or inspect the description.
GraphBuilder describe_model(std::string_view name, const std::optional<Shape>& input_per_sample = {},
                            std::optional<std::int64_t> num_classes = {});

}  // namespace cnnergy
