// ONNX model import: reads a .onnx file (Debian libonnx's protobuf classes), folds constant
// subgraphs, infers shapes with our own rules for every supported operator (any opset 7..21, both
// attribute and input forms of ReduceMean/Split/Pad/Clip...), and maps the graph onto our layers,
// with the initialisers as the layers' initial weights. The zoo's build_model() calls this for
// names that end in ".onnx" or start with "onnx:", so every command accepts a model file.
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

struct OnnxImportOptions {
  std::optional<Shape> input;             // C, H, W (or F): replaces the model's per-sample input dims
  std::optional<std::int64_t> classes;    // must match the model's output when given
  bool random_init = false;               // ignore the initialisers (seeded zoo initialisation instead)
};

struct OnnxImport {
  GraphBuilder builder;
  std::int64_t declared_batch = 0;  // the input's first dimension when fixed, 0 when symbolic
  std::vector<std::string> notes;   // what the import changed (e.g. a final Softmax left out)
};

// "model.onnx" and "onnx:PATH" name a model file; anything else is a zoo name.
bool is_onnx_model_name(std::string_view name);
std::string onnx_path_of(std::string_view name);  // strips "onnx:"

// Imports a file. Errors: DataError (exit 3) for a file that is not ONNX, is truncated or
// malformed, has a cycle or misses external data; NotSupported (exit 4) for an operator or a
// configuration we do not map (naming the op and the node, listing the supported ops); ShapeError/
// InvalidArgument for a bad --input/--classes override.
OnnxImport import_onnx_file(const std::string& path, const OnnxImportOptions& options = {});
// The same from bytes already in memory; model_dir is where external data may lie.
OnnxImport import_onnx_bytes(const std::string& bytes, const std::string& model_name, const std::string& model_dir,
                             const OnnxImportOptions& options = {});

// build_model() (net/zoo/zoo.hpp) with the choice of an ONNX model's initial weights: init "file"
// (its initialisers) or "random" (the seeded initialisation zoo models get). Zoo names take "file"
// only (InvalidArgument otherwise: they have no file weights to ignore).
std::unique_ptr<Graph> build_model_init(std::string_view name, const std::optional<Shape>& input_per_sample,
                                        std::optional<std::int64_t> num_classes, std::string_view init);

// The operators the importer maps (op_type names of the default domain), sorted.
const std::vector<std::string>& onnx_supported_ops();

}  // namespace cnnergy
