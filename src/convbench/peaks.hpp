// Peak throughput of the GPUs the study knows, per precision, and their memory bandwidth: the
// ceilings of the roofline and the denominator of "% of peak". From NVIDIA's datasheets (dense
// tensor-core figures, no sparsity); a device not in the table has no peak ("unknown"), never a guess.
#pragma once

#include <optional>
#include <string>

namespace cnnergy::convbench {

struct DevicePeaks {
  std::string matched;  // the table entry the device name matched ("H100 SXM5", ...)
  std::string source;   // where the figures come from
  double fp32_tflops = 0, tf32_tflops = 0, bf16_tflops = 0, fp16_tflops = 0;
  double dram_gb_per_s = 0;
  double tflops(const std::string& precision) const;  // "fp32" | "tf32" | "bf16" | "fp16"
};

// The entry for a device name as the backend reports it ("NVIDIA H100 80GB HBM3"); empty when the
// table has none (the CPU, an unlisted GPU).
std::optional<DevicePeaks> find_device_peaks(const std::string& device_name);

}  // namespace cnnergy::convbench
