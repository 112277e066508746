// Precision names and their backend settings.
#include "train/precision.hpp"

#include "core/errors.hpp"

namespace cnnergy {

const std::vector<std::string>& precision_names() {
  static const std::vector<std::string> names = {"fp32", "tf32", "fp16", "bf16"};
  return names;
}

Precision parse_precision(std::string_view text) {
  if (text == "fp32") return Precision::kFp32;
  if (text == "tf32") return Precision::kTf32;
  if (text == "fp16") return Precision::kFp16;
  if (text == "bf16") return Precision::kBf16;
  throw InvalidArgument("unknown precision '" + std::string(text) + "' (choose one of: fp32, tf32, fp16, bf16)");
}

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kTf32: return "tf32";
    case Precision::kFp16: return "fp16";
    case Precision::kBf16: return "bf16";
  }
  return "?";
}

void apply_precision(Precision p, BackendOptions& options) {
  options.allow_tf32 = p == Precision::kTf32;
  options.dtype = (p == Precision::kFp16) ? DType::kF16 : (p == Precision::kBf16) ? DType::kBF16 : DType::kF32;
  if (options.device.is_cpu() && p != Precision::kFp32)
    throw NotSupported("precision " + std::string(precision_name(p)) +
                       " needs a GPU: the CPU backend computes in fp32 only (use --device cuda)");
}

}  // namespace cnnergy
