// The four training precisions users choose with --precision, and what each means for a backend:
// fp32 (TF32 off), tf32 (fp32 data, TF32 tensor-core math), fp16 (fp32 master weights, dynamic loss
// scaling) and bf16 (fp32 master weights). All accumulate in fp32.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "backend/ops.hpp"

namespace cnnergy {

enum class Precision { kFp32, kTf32, kFp16, kBf16 };

Precision parse_precision(std::string_view text);  // InvalidArgument listing the choices
std::string_view precision_name(Precision p);
const std::vector<std::string>& precision_names();

// Sets dtype and allow_tf32 of `options` for the precision. The CPU backend supports fp32 only:
// asking it for another precision throws NotSupported naming the precision and the device.
void apply_precision(Precision p, BackendOptions& options);

}  // namespace cnnergy
