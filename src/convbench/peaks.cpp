// The table of datasheet peaks (dense, boost clock) for the GPUs cnnergy is run on; matched by the
// CUDA device name. The SXM parts run at a 700 W limit and, under full load, below boost clock
// (about 1455 MHz on an H200 at its 700 W limit; docs/methodology.md), so measured % of peak is a lower bound of efficiency.
#include "convbench/peaks.hpp"

#include "core/errors.hpp"

namespace cnnergy::convbench {
namespace {

struct Entry {
  const char* needle;  // substring of the CUDA device name
  DevicePeaks peaks;
};

const Entry kTable[] = {
    // NVIDIA H100 Tensor Core GPU datasheet (2023), SXM5 column; dense figures (half the sparse ones).
    {"H100 80GB HBM3", {"H100 SXM5", "NVIDIA H100 datasheet (SXM5, dense)", 67, 494.7, 989.4, 989.4, 3350}},
    {"H100 SXM", {"H100 SXM5", "NVIDIA H100 datasheet (SXM5, dense)", 67, 494.7, 989.4, 989.4, 3350}},
    {"H100 NVL", {"H100 NVL", "NVIDIA H100 datasheet (NVL, dense)", 60, 417.5, 835, 835, 3900}},
    {"H100 PCIe", {"H100 PCIe", "NVIDIA H100 datasheet (PCIe, dense)", 51, 378, 756, 756, 2000}},
    // NVIDIA H200 Tensor Core GPU datasheet (2024), SXM column; compute as H100 SXM, HBM3e bandwidth.
    {"H200", {"H200 SXM", "NVIDIA H200 datasheet (SXM, dense)", 67, 494.7, 989.4, 989.4, 4800}},
    // NVIDIA A100 Tensor Core GPU datasheet (2021), 80 GB SXM column.
    {"A100-SXM4-80GB", {"A100 SXM 80GB", "NVIDIA A100 datasheet (SXM 80GB, dense)", 19.5, 156, 312, 312, 2039}},
    {"A100-SXM4-40GB", {"A100 SXM 40GB", "NVIDIA A100 datasheet (SXM 40GB, dense)", 19.5, 156, 312, 312, 1555}},
};

}  // namespace

double DevicePeaks::tflops(const std::string& precision) const {
  if (precision == "fp32") return fp32_tflops;
  if (precision == "tf32") return tf32_tflops;
  if (precision == "bf16") return bf16_tflops;
  if (precision == "fp16") return fp16_tflops;
  throw InvalidArgument("unknown precision '" + precision + "' (choose one of: fp32, tf32, bf16, fp16)");
}

std::optional<DevicePeaks> find_device_peaks(const std::string& device_name) {
  for (const Entry& e : kTable)
    if (device_name.find(e.needle) != std::string::npos) return e.peaks;
  return std::nullopt;
}

}  // namespace cnnergy::convbench
