// sweep_title(): reads the workload line of the stored definition ("workload=model=resnet34
// device=cuda:0 ..." as `sweep` writes it, or a bare "model=..." / "command=..." from older or
// foreign databases) and names the device by the GPU the environment recorded.
#include "report/sweep_title.hpp"

#include <algorithm>
#include <array>
#include <string_view>
#include <utility>

#include "tune/knobs.hpp"

namespace cnnergy::report {
namespace {

constexpr std::string_view kSimulatedPrefix = "[SIMULATED DEVICE] ";

// Value of `key=` in a space-separated list of key=value words; empty when absent.
std::string word_value(const std::string& line, const std::string& key) {
  const std::string needle = key + "=";
  for (std::size_t p = 0; p < line.size();) {
    const std::size_t end = std::min(line.find(' ', p), line.size());
    if (line.compare(p, needle.size(), needle) == 0) return line.substr(p + needle.size(), end - p - needle.size());
    p = end + 1;
  }
  return {};
}

// The workload part of a stored description: the "workload=" line, else the first line.
std::string workload_line(std::string description) {
  if (description.rfind(kSimulatedPrefix, 0) == 0) description.erase(0, kSimulatedPrefix.size());
  for (std::size_t p = 0; p <= description.size();) {
    const std::size_t end = std::min(description.find('\n', p), description.size());
    if (description.compare(p, 9, "workload=") == 0) return description.substr(p + 9, end - p - 9);
    if (end == description.size()) break;
    p = end + 1;
  }
  return description.substr(0, std::min(description.find('\n'), description.size()));
}

// Knob names as a heading says them ("batch x precision"), not as columns ("power_limit_w").
std::string knob_label(tune::Knob k) {
  switch (k) {
    case tune::Knob::kBatch: return "batch";
    case tune::Knob::kGpus: return "GPUs";
    case tune::Knob::kPrecision: return "precision";
    case tune::Knob::kLayout: return "layout";
    case tune::Knob::kConvAlgo: return "convolution algorithm";
    case tune::Knob::kCudaGraph: return "CUDA graph";
    case tune::Knob::kMemClock: return "memory clock";
    case tune::Knob::kSmClock: return "SM clock";
    case tune::Knob::kPowerLimit: return "power limit";
  }
  return std::string(tune::knob_name(k));
}

// Where the sweep ran: the recorded GPU name for a CUDA device (each distinct name once), "the CPU".
std::string device_label(const std::string& device, const tune::Environment& env) {
  if (device.rfind("cpu", 0) == 0) return "the CPU";
  if (env.gpu_names.empty()) return device.empty() ? "an unrecorded device" : device;
  std::string all;
  for (std::size_t i = 0; i < env.gpu_names.size(); ++i) {
    bool seen = false;
    for (std::size_t j = 0; j < i; ++j) seen = seen || env.gpu_names[j] == env.gpu_names[i];
    if (!seen) all += (all.empty() ? "" : ", ") + env.gpu_names[i];
  }
  return all;
}

}  // namespace

std::string model_display_name(const std::string& name) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 14> kNames = {{
      {"lenet5", "LeNet-5"}, {"alexnet", "AlexNet"}, {"caffenet", "CaffeNet"}, {"overfeat", "OverFeat"},
      {"vgg16", "VGG-16"}, {"vgg19", "VGG-19"}, {"googlenet", "GoogLeNet"}, {"inception_v3", "Inception-v3"},
      {"inception_v4", "Inception-v4"}, {"resnet34", "ResNet-34"}, {"resnet50", "ResNet-50"},
      {"resnet152", "ResNet-152"}, {"gait_2dcnn", "gait 2D-CNN"}, {"gait_resnet", "gait ResNet"},
  }};
  for (const auto& [key, shown] : kNames)
    if (key == name) return std::string(shown);
  return name;
}

std::string sweep_title(const SweepData& d) {
  const std::string& description = d.sweep.description;
  const std::string workload = workload_line(description);
  const bool command = workload.rfind("command=", 0) == 0;
  std::string what;
  if (command) {
    std::string cmd = workload.substr(8);
    if (cmd.size() > 60) cmd = cmd.substr(0, 57) + "...";
    what = "command `" + cmd + "`";
  } else if (const std::string model = word_value(workload, "model"); !model.empty()) {
    what = model_display_name(model);
  } else {
    what = workload.empty() ? "sweep" : workload;
  }
  std::string title = what + " on " + device_label(word_value(workload, "device"), d.sweep.environment);
  if (description.rfind(kSimulatedPrefix, 0) == 0) title += " (simulated device)";
  std::string knobs;
  for (std::size_t i = 0; i < d.knobs.size(); ++i) knobs += (i ? " x " : "") + knob_label(d.knobs[i]);
  title += ": " + (knobs.empty() ? std::string("one setting") : knobs);
  title += ", " + std::to_string(d.trials.size()) + (d.trials.size() == 1 ? " trial" : " trials");
  return title;
}

}  // namespace cnnergy::report
