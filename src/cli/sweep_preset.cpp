// Sweep presets: the experiments of a paper as one command that runs on any machine, so that result
// sets from different machines can be set side by side by `cnnergy compare`.
// hardware-comparison (Gera et al. 2018): ResNet-50, ResNet-152, VGG-16 and VGG-19, training
// throughput at batch 1, 64 and 256 (the paper trains at 64 and 256 and runs inference at 1 and a
// large batch). This engine has no inference mode yet: the preset runs training only and says so.
#include <iostream>
#include <string>
#include <vector>

#include "cli/cmd_sweep.hpp"
#include "core/errors.hpp"

namespace cnnergy::cli {

namespace {

struct Preset {
  const char* name;
  std::vector<std::string> models;
  std::string batches;
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
      {"hardware-comparison", {"resnet50", "resnet152", "vgg16", "vgg19"}, "1,64,256"},
  };
  return kPresets;
}

}  // namespace

std::vector<std::vector<std::string>> preset_sweeps(const std::string& name, const std::vector<std::string>& args) {
  const Preset* preset = nullptr;
  for (const auto& p : presets())
    if (name == p.name) preset = &p;
  if (!preset) throw InvalidArgument("unknown --preset '" + name + "' (known: hardware-comparison)");
  std::vector<std::string> rest;
  std::vector<std::string> models = preset->models;
  std::string batches = preset->batches;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--preset") {
      ++i;
      continue;
    }
    if (a.starts_with("--preset=")) continue;
    if (a == "--") throw InvalidArgument("--preset runs built-in models: drop the command after '--'");
    // --model and --batch narrow the preset (e.g. a quick run on a CPU); every other flag passes on.
    if ((a == "--model" || a == "--batch") && i + 1 < args.size()) {
      const std::string v = args[++i];
      if (a == "--batch") {
        batches = v;
      } else {
        models.clear();
        std::size_t from = 0;
        while (from <= v.size()) {
          const auto comma = v.find(',', from);
          models.push_back(v.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
          if (comma == std::string::npos) break;
          from = comma + 1;
        }
      }
      continue;
    }
    rest.push_back(a);
  }
  std::vector<std::vector<std::string>> out;
  for (const auto& m : models) {
    std::vector<std::string> one = {"--model", m, "--batch", batches};
    one.insert(one.end(), rest.begin(), rest.end());
    out.push_back(std::move(one));
  }
  return out;
}

int run_sweep_preset(const std::string& name, const std::vector<std::string>& args) {
  const auto sweeps = preset_sweeps(name, args);
  std::cout << "preset " << name << " (Gera et al. 2018): " << sweeps.size()
            << " sweeps, one per network. Inference mode is not in this engine yet: the preset measures TRAINING "
               "throughput only (the paper's inference runs are not measured).\n";
  int rc = 0;
  for (const auto& a : sweeps) {
    std::cout << "\n== cnnergy sweep";
    for (const auto& x : a) std::cout << ' ' << x;
    std::cout << "\n";
    rc = run_sweep(a);
    if (rc != 0) return rc;
  }
  return rc;
}

}  // namespace cnnergy::cli
