// Constant folding at ONNX import: node attributes, and evaluation of the shape-computing
// operators (Constant, Gather, Unsqueeze, Squeeze, Concat, Cast, Slice, Reshape, elementwise
// arithmetic, ConstantOfShape, Identity) whose inputs are all constants.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "net/onnx/onnx_tensor.hpp"

namespace cnnergy::onnx_import {

// "node 'name' (Op)" for messages.
std::string node_label(const onnx::NodeProto& node);

const onnx::AttributeProto* find_attr(const onnx::NodeProto& node, const std::string& name);
std::int64_t attr_int(const onnx::NodeProto& node, const std::string& name, std::int64_t fallback);
float attr_float(const onnx::NodeProto& node, const std::string& name, float fallback);
std::string attr_string(const onnx::NodeProto& node, const std::string& name, const std::string& fallback);
std::optional<std::vector<std::int64_t>> attr_ints(const onnx::NodeProto& node, const std::string& name);

// Whether fold() evaluates this op type.
bool foldable(const std::string& op_type);
// Evaluates a foldable node over constant inputs (nullptr: an absent optional input). Throws
// DataError for inputs that do not fit the op, NotSupported for a case it does not evaluate.
std::vector<ConstTensor> fold(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& inputs,
                              const std::string& model_dir);

// Normalises an axis in [-rank, rank) to [0, rank); DataError otherwise.
std::int64_t normalize_axis(std::int64_t axis, std::int64_t rank, const onnx::NodeProto& node);

}  // namespace cnnergy::onnx_import
