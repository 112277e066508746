// ONNX export: writes a network with the weights an Executor holds (seeded, imported, or loaded from
// a checkpoint) as an ONNX model with Debian libonnx's protobuf classes: the inference graph ending
// in the logits (the softmax loss head is left out), opset 13 / IR version 7, weights as initialisers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cnnergy {

class Executor;

// Opset 13 (IR version 7): what Debian's libonnx 1.12 checker knows (<= 17), what PyTorch wrote by
// default for years, and what every onnxruntime since 1.6 runs. Our importer reads 7 to 21.
constexpr std::int64_t kOnnxExportOpset = 13;
constexpr std::int64_t kOnnxExportIrVersion = 7;

struct OnnxExportOptions {
  std::int64_t batch = 0;  // the first dimension of input and output; 0: symbolic, dim_param "batch"
  std::string input_name = "input";    // float32 (batch, C, H, W)
  std::string output_name = "logits";  // float32 (batch, classes)
};

struct OnnxExportSummary {
  std::size_t nodes = 0;
  std::size_t initializers = 0;
  std::int64_t values = 0;  // floats written as initialisers (parameters and batch-norm statistics)
  std::uint64_t bytes = 0;  // size of the model
};

// Layer types (Layer::type()) the exporter maps, with the ONNX operator of each ("conv: Conv").
const std::vector<std::string>& onnx_export_mapping();

// The executor's graph gives the structure; its parameters and state buffers give the values,
// downloaded as fp32 NCHW whatever the backend's dtype and layout. Throws NotSupported naming a
// layer with no ONNX mapping (and listing the mapped types), DataError for a model beyond protobuf's
// 2 GiB limit of one message (external data is not written).
std::string export_onnx_bytes(Executor& executor, const OnnxExportOptions& options = {},
                              OnnxExportSummary* summary = nullptr);

// The same into a file: written beside it under a temporary name, then renamed over `path` (an
// existing file is replaced, like every output of cnnergy; a failure leaves no partial file).
// DataError when `path` is a directory or cannot be written.
OnnxExportSummary export_onnx_file(Executor& executor, const std::string& path, const OnnxExportOptions& options = {});

// Fails (DataError, the reason) unless a file can be written at `path`: for callers that check
// before the work. Leaves nothing behind.
void check_onnx_output_path(const std::string& path);

}  // namespace cnnergy
