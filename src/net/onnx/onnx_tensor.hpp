// ONNX tensors at import: constants (initialisers, Constant nodes, folded values) read from a
// TensorProto (raw, typed fields or an external-data file beside the model), with bounds checks.
// Internal to the importer (net/onnx); includes the generated protobuf classes of Debian's libonnx.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cnnergy::onnx_import {

// A constant: float data (float, double, fp16, bf16 tensors) or integer data (int8..int64, bool).
struct ConstTensor {
  std::vector<std::int64_t> dims;
  bool integer = false;
  std::vector<float> f;
  std::vector<std::int64_t> i;

  std::int64_t numel() const;
  std::size_t size() const { return integer ? i.size() : f.size(); }
  double at(std::size_t k) const { return integer ? static_cast<double>(i[k]) : static_cast<double>(f[k]); }
  // Integer values (floats truncated); for shapes, axes, pads.
  std::vector<std::int64_t> ints() const;
  static ConstTensor of_ints(std::vector<std::int64_t> values, std::vector<std::int64_t> dims);
  static ConstTensor of_floats(std::vector<float> values, std::vector<std::int64_t> dims);
};

// Product of dims; throws DataError for a negative dimension or more than 2^40 elements.
std::int64_t checked_numel(const std::vector<std::int64_t>& dims, const std::string& what);

// Reads `t`. model_dir: the folder of the model file, where external data must lie (a location
// that leaves it, an absolute path, a missing file or a range past its end: DataError naming it).
// Throws NotSupported for string or complex tensors.
ConstTensor read_tensor(const onnx::TensorProto& t, const std::string& model_dir);

}  // namespace cnnergy::onnx_import
